"""glbd(8), glbctl(8) and glbd.toml(5), made from the commands' argparse parsers and the
configuration reference so that every subcommand, option and key is in them.

    python -m glbd.cli.manpages OUTDIR      writes OUTDIR/glbd.8, glbctl.8, glbd.toml.5

The package build runs it (packaging/debian/rules); tests/test_manpages.py checks what it writes.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from glbd import __version__
from glbd.cli import glbctl, glbd
from glbd.config import confref


def esc(text: str) -> str:
    """Plain text as roff: backslashes, hyphens and non-ASCII escaped, no line starting a
    request."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    text = "".join(c if c.isascii() else f"\\[u{ord(c):04X}]" for c in text)
    return "\n".join("\\&" + ln if ln[:1] in (".", "'") else ln for ln in text.split("\n"))


def inline(text: str) -> str:
    """Markdown's inline code, emphasis and links (the reference's text) as roff; the docs it
    names are where the package installs them."""
    text = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", text)
    text = re.sub(r"\bdocs/([a-z0-9-]+\.md)", r"/usr/share/doc/glbd/\1", text)
    parts = re.split(r"`([^`]*)`", text)
    return "".join(
        f"\\fB{esc(p)}\\fR" if i % 2 else re.sub(r"\*([^*\s][^*]*)\*", r"\\fI\1\\fR", esc(p))
        for i, p in enumerate(parts)
    )


def paragraphs(markdown: str) -> list[str]:
    """Blank-line separated markdown paragraphs as roff paragraphs."""
    out = []
    for para in re.split(r"\n\s*\n", markdown.strip()):
        out += [".PP", inline(" ".join(para.split()))]
    return out


@dataclass(frozen=True)
class Extra:
    """What a page says beyond its parser: the NAME line, paragraphs after the parser's
    description, the title of its epilog, and sections in roff after OPTIONS and COMMANDS."""

    name: str
    description: str
    epilog_title: str
    sections: tuple[tuple[str, str], ...]


_FILES_GLBD = r""".TP
.I /etc/glbd/glbd.toml
The configuration, see \fBglbd.toml\fR(5) (a conffile; \fBglbd check\-config\fR validates it).
.TP
.I /run/glbd/glbd.sock
The control socket \fBglbctl\fR(8) talks to (group glbd).
.TP
.I /var/log/glbd/
ExaBGP's log (\fBexabgp.log\fR) and standard output (\fBexabgp.stdout\fR).
.TP
.I /usr/share/doc/glbd/operator\-guide.md
Requirements, deployment beside FRR, tuning, restarts, troubleshooting.
.TP
.I /usr/share/doc/glbd/config\-reference.md
Every configuration key (the same as \fBglbd.toml\fR(5)).
.TP
.I /usr/share/doc/glbd/examples/
Example configurations of a spine and a leaf."""

_EXTRAS = {
    "glbd": Extra(
        "Global Load Balancing control plane daemon for Linux leaf\\-spine routers",
        "`glbd run` is what the systemd unit starts (`Type=notify`, with a watchdog); it runs "
        "ExaBGP as its BGP speaker and its own BFD engine as child processes. Before it, the "
        "unit runs `glbd check-config` and, as root, `glbd sysctl`. The configuration file "
        "is described in glbd.toml(5); docs/operator-guide.md shows how to deploy glbd beside "
        "FRR.",
        "NOTES",
        (
            (
                "SIGNALS",
                ".TP\n.B SIGHUP\nReload the configuration, as \\fBglbctl reload\\fR does.\n"
                ".TP\n.B SIGTERM\nStop in order: withdraw what glbd announced, stop ExaBGP "
                "and the BFD engine; the kernel's routes stay (\\fBfib.on_stop\\fR).",
            ),
            (
                "EXIT STATUS",
                "0 on success; \\fBcheck\\-config\\fR and \\fBsysctl\\fR exit 1 when the file "
                "is rejected, \\fBsysctl\\fR exits 3 when a sysctl cannot be written; \\fBrun\\fR "
                "exits non\\-zero when it cannot start (one line on standard error says why).",
            ),
            ("FILES", _FILES_GLBD),
            (
                "SEE ALSO",
                ".BR glbctl (8),\n.BR glbd.toml (5),\n.BR systemctl (1),\n.BR ip\\-nexthop (8)",
            ),
        ),
    ),
    "glbctl": Extra(
        "query and control a running glbd",
        "Every command but `decode` talks to glbd over its control socket. Without `--json` the "
        "answer is printed as tables; with it, as the daemon's JSON (snake_case keys, a stable "
        "interface). `--json` goes before or after the command. Answers of any size are "
        "streamed. `decode` reads hex pasted from tcpdump or ExaBGP and needs no daemon.",
        "EXIT STATUS",
        (
            (
                "ENVIRONMENT",
                ".TP\n.B GLBD_SOCKET\nThe control socket when \\fB\\-\\-socket\\fR is not given.",
            ),
            (
                "FILES",
                ".TP\n.I /run/glbd/glbd.sock\n"
                "The default control socket (root and members of group glbd may use it).",
            ),
            ("SEE ALSO", ".BR glbd (8),\n.BR glbd.toml (5)"),
        ),
    ),
}


def _header(name: str, section: int, title: str) -> list[str]:
    return [f'.TH {name.upper()} "{section}" "" "glbd {__version__}" "{title}"']


def _usage(p: argparse.ArgumentParser) -> str:
    return " ".join(p.format_usage().removeprefix("usage:").split())


def _arguments(p: argparse.ArgumentParser, skip_help: bool) -> list[str]:
    fmt = argparse.HelpFormatter(p.prog)
    out: list[str] = []
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction) or a.help == argparse.SUPPRESS:
            continue
        if skip_help and isinstance(a, argparse._HelpAction):
            continue
        inv = fmt._format_action_invocation(a)
        out += [".TP", f"\\fB{esc(inv)}\\fR", esc(fmt._expand_help(a)) if a.help else ""]
    return [ln for ln in out if ln]


def _commands(p: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, help, parser) of every subcommand."""
    out = []
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            helps = {c.dest: c.help or "" for c in a._choices_actions}
            out += [(name, helps.get(name, ""), sub) for name, sub in a.choices.items()]
    return out


def command_page(prog: str, parser: argparse.ArgumentParser) -> str:
    """A section 8 page: the parser's usage, options and every subcommand with its own."""
    extra = _EXTRAS[prog]
    lines = _header(prog, 8, "System Administration")
    lines += [".SH NAME", f"{prog} \\- {extra.name}", ".SH SYNOPSIS", ".nf", esc(_usage(parser))]
    lines += [".fi", ".SH DESCRIPTION", esc(parser.description or "")]
    lines += paragraphs(extra.description)
    lines += [".SH OPTIONS", *_arguments(parser, skip_help=False), ".SH COMMANDS"]
    for name, help_, sub in _commands(parser):
        lines += [f'.SS "{esc(name)}"', ".nf", f"\\fB{esc(_usage(sub))}\\fR", ".fi", ".PP"]
        lines += [esc(help_), ".RS", *_arguments(sub, skip_help=True), ".RE"]
    if parser.epilog:
        lines += [f'.SH "{extra.epilog_title}"', ".nf", esc(parser.epilog), ".fi"]
    for title, body in extra.sections:
        lines += [f'.SH "{title}"', body]
    return "\n".join(ln for ln in lines if ln) + "\n"


def config_page() -> str:
    """glbd.toml(5): the configuration reference."""
    lines = _header("glbd.toml", 5, "File Formats")
    lines += [".SH NAME", "glbd.toml \\- glbd configuration file", ".SH SYNOPSIS"]
    lines += [".I /etc/glbd/glbd.toml", ".SH DESCRIPTION", *paragraphs(confref.INTRO)]
    for s in confref.sections():
        lines += [f'.SH "{s.title.upper() if s.title == "Top level" else s.title}"']
        if s.doc:
            lines += [".PP", inline(s.doc)]
        for r in s.rows:
            meta = f"{r.type}; default {r.default}; on reload: {r.reload}"
            lines += [".TP", f"\\fB{esc(r.key)}\\fR", inline(meta), ".br", inline(r.doc)]
    lines += [".SH EXAMPLES", "/usr/share/doc/glbd/examples/leaf.toml and spine.toml."]
    lines += ['.SH "SEE ALSO"', ".BR glbd (8),\n.BR glbctl (8)"]
    return "\n".join(lines) + "\n"


def pages() -> dict[str, str]:
    """File name -> page."""
    return {
        "glbd.8": command_page("glbd", glbd.build_parser()),
        "glbctl.8": command_page("glbctl", glbctl.build_parser()),
        "glbd.toml.5": config_page(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m glbd.cli.manpages", description="Write glbd's manual pages."
    )
    p.add_argument("outdir", help="directory to write glbd.8, glbctl.8 and glbd.toml.5 into")
    args = p.parse_args(argv)
    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in pages().items():
        (out / name).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
