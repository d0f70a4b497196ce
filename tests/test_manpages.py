"""glbd(8), glbctl(8) and glbd.toml(5) as the package builds them (``python -m
glbd.cli.manpages``): every command, option and config key is in them, groff reads them without
a warning, and packaging/debian builds and installs all three."""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from glbd.cli import glbctl, glbd, manpages
from glbd.config import confref
from glbd.control import protocol as control

ROOT = Path(__file__).resolve().parent.parent
DEBIAN = ROOT / "packaging" / "debian"
PAGES = manpages.pages()


def _subcommands(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return {
        name: sub
        for a in p._actions
        if isinstance(a, argparse._SubParsersAction)
        for name, sub in a.choices.items()
    }


def _section(page: str, name: str) -> str:
    """The text of one ``.SS`` subsection (a command) up to the next one."""
    m = re.search(
        rf'^\.SS "{re.escape(manpages.esc(name))}"\n(.*?)(?=^\.S[SH] )', page, re.S | re.M
    )
    assert m is not None, f"no section for {name}"
    return m.group(1)


@pytest.mark.parametrize(
    ("page", "parser"), [("glbctl.8", glbctl.build_parser()), ("glbd.8", glbd.build_parser())]
)
def test_every_command_and_option_is_in_its_page(
    page: str, parser: argparse.ArgumentParser
) -> None:
    text = PAGES[page]
    for opt in (o for a in parser._actions for o in a.option_strings):
        assert manpages.esc(opt) in text.split(".SH COMMANDS")[0], opt
    subs = _subcommands(parser)
    for name, sub in subs.items():
        sec = _section(text, name)
        for a in sub._actions:
            for opt in a.option_strings:
                if opt not in ("-h", "--help"):
                    assert manpages.esc(opt) in sec, f"{name} {opt}"
            if not a.option_strings and a.help:
                assert manpages.esc(a.help) in sec, f"{name} {a.dest}"
    assert text.count('.SS "') == len(subs)


def test_glbctl8_has_every_command_the_daemon_answers() -> None:
    """Independent of the parser: the control protocol's commands and the offline ones."""
    text = PAGES["glbctl.8"]
    for cmd in (*control.COMMANDS, "watch", "decode"):
        assert f'.SS "{manpages.esc(cmd)}"' in text, cmd
    for code in (glbctl.EXIT_DAEMON, glbctl.EXIT_REJECTED, glbctl.EXIT_FAILED):
        assert re.search(rf"^  {code} ", text, re.M), code
    assert '.SH "EXIT STATUS"' in text and ".B GLBD_SOCKET" in text


def test_glbd_toml5_has_every_key() -> None:
    text = PAGES["glbd.toml.5"]
    for row in confref.rows():
        assert f"\\fB{manpages.esc(row.key)}\\fR\n" in text, row.key
    assert '.TH GLBD.TOML "5"' in text and "\\[u00A7]" in text  # non-ASCII escaped


def test_the_pages_render_without_warnings(tmp_path: Path) -> None:
    assert shutil.which("groff"), "groff is missing (groff-base, bootstrap.sh installs it)"
    for name, text in PAGES.items():
        f = tmp_path / name
        f.write_text(text)
        r = subprocess.run(
            ["groff", "-man", "-ww", "-z", "-Tutf8", str(f)], capture_output=True, text=True
        )
        assert r.returncode == 0 and r.stderr == "", f"{name}: {r.stderr}"
        assert text.startswith(f'.TH {name.rsplit(".", 1)[0].upper()} "{name[-1]}" ')


def test_the_generator_writes_the_three_pages(tmp_path: Path) -> None:
    assert manpages.main([str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["glbctl.8", "glbd.8", "glbd.toml.5"]
    assert (tmp_path / "glbd.8").read_text() == PAGES["glbd.8"]


def test_the_package_builds_and_installs_the_pages() -> None:
    rules = (DEBIAN / "rules").read_text()
    assert "-m glbd.cli.manpages debian/man" in rules
    installed = re.search(r"^\tdh_installman (.*)$", rules, re.M)
    assert installed is not None
    assert sorted(installed[1].split()) == sorted(f"debian/man/{n}" for n in PAGES)
    # the unit's Documentation= man pages of glbd are these
    unit = (ROOT / "systemd" / "glbd.service").read_text()
    ours = [m for m in re.findall(r"man:(\S+)\((\d)\)", unit) if m[0].startswith("glb")]
    assert sorted(f"{n}.{s}" for n, s in ours) == sorted(PAGES)
