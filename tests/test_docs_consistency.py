"""README.md and docs/*.md say only what is true of the code: every config key they name exists,
every TOML example validates, every ``glbctl``/``glbd`` command and option they show exists, a
capability count or list is the unit's, and every relative link resolves, in the repository and
(for the docs the package ships) in /usr/share/doc/glbd as packaging/debian installs it.

Each checker takes a document's text and returns its problems, so the planted mistakes at the end
show that it catches what it is for."""

from __future__ import annotations

import argparse
import glob
import importlib.util
import os
import re
import tomllib
import typing
from pathlib import Path

import pytest

from glbd.cli import glbctl, glbd
from glbd.config import config as cfgmod
from glbd.config import confref

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", ROOT / "packaging" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
UNIT = (ROOT / "systemd" / "glbd.service").read_text()
DEBIAN = ROOT / "packaging" / "debian"
DOC_DIR = Path("/usr/share/doc/glbd")

#: every key the reference lists; the tables too (``bfd.auth``, ``neighbors.bfd``)
KEYS = {r.key for r in confref.rows()}
TABLES = {n for n, f in cfgmod.Config.model_fields.items() if confref.table_model(f.annotation)}
#: dotted names that start like a config table but are glbctl fields and counters or a method;
#: a config key can never hide behind one (test_no_exemption_is_a_config_key)
NOT_CONFIG = ("fib.kernel", "fib.conflicts", "fib.stale_held", "fib.weight_bits", "fib.compat_mode",
              "fib.foreign_routes", "fib.last_errors", "fib.stale_remaining_s",
              "fib.remove_nexthop", "bfd.unmatched_drops", "control.decode_error",
              "control.stalled_clients", "metrics.dropped_")  # fmt: skip
#: fenced blocks read as commands and prose (a TOML block is validated whole; code is code)
SHELL_FENCES = ("", "sh", "shell", "console", "text")
_WORDS = "zero one two three four five six seven eight nine ten eleven twelve"
NUMBERS = {w: i for i, w in enumerate(_WORDS.split(" "))}
#: the TOML value a secret file stands for in an example: a 16-byte key suits every kind
SECRET = b"0123456789abcdef"


def _code(text: str) -> list[str]:
    """The inline code spans, and the lines of the fenced blocks of commands and output."""
    spans: list[str] = []
    parts = re.split(r"^```([a-z]*)\n(.*?)^```", text, flags=re.S | re.M)
    for i in range(0, len(parts), 3):
        spans += re.findall(r"`([^`\n]+(?:\n[^`\n]+)?)`", parts[i])
        if i + 2 < len(parts) and parts[i + 1] in SHELL_FENCES:
            spans += parts[i + 2].splitlines()
    return spans


def _toml_blocks(text: str) -> list[str]:
    return re.findall(r"^```toml\n(.*?)^```", text, re.S | re.M)


def _is_module(name: str) -> bool:
    """``heartbeat.wire``, ``bfd.engine.kernel_rx``: Python modules, not config keys."""
    parts = name.split(".")
    for n in range(len(parts), 1, -1):
        try:
            if importlib.util.find_spec(".".join(parts[:n])) is not None:
                return True
        except ModuleNotFoundError:
            continue
    return False


#: a dotted name starting with a config table, not inside a path or a longer name
_DOTTED = re.compile(r"(?<![\w/.-])((?:" + "|".join(sorted(TABLES)) + r")(?:\.[a-z_0-9]+)+)")


def config_key_problems(text: str) -> list[str]:
    """Dotted config keys and table headers in code that the model does not have."""
    named: set[str] = set()
    for span in _code(text):
        for m in re.finditer(_DOTTED, span):
            name = m.group(1).rstrip(".")
            if re.search(r"\.(md|py|toml|conf|json|yml|service|png|sock|log)$", name):
                continue
            named.add(name)
        for m in re.finditer(r"\[\[?([a-z_][a-z_0-9.]*)\]\]?(?:\s+([a-z_0-9]+)\s*=)?", span):
            if m.group(1).split(".")[0] in TABLES:
                named.add(m.group(1))
                if m.group(2):
                    named.add(f"{m.group(1)}.{m.group(2)}")
    for block in _toml_blocks(text):
        try:
            named |= _toml_keys(tomllib.loads(block))
        except tomllib.TOMLDecodeError:
            continue  # toml_problems says why
    return sorted(
        f"no config key {n}"
        for n in named
        if n not in KEYS and n not in TABLES and not n.startswith(NOT_CONFIG) and not _is_module(n)
    )


def _toml_keys(data: typing.Any, prefix: str = "") -> set[str]:
    out: set[str] = set()
    for k, v in data.items():
        key = prefix + k
        out.add(key)
        if isinstance(v, dict) and key != "link_quality.capacity_mbps":
            out |= _toml_keys(v, key + ".")
        elif isinstance(v, list) and v and all(isinstance(e, dict) for e in v):
            for e in v:
                out |= _toml_keys(e, key + ".")
    return out


def toml_problems(text: str, tmp: Path) -> list[str]:
    """TOML examples that the model rejects: a fragment is completed with the keys every file
    must have, and its secret files with a key of a size every kind accepts."""
    out = []
    key = tmp / "secret.key"
    key.write_bytes(SECRET)
    key.chmod(0o600)
    for i, block in enumerate(_toml_blocks(text)):
        block = re.sub(r'((?:secret|password)_file\s*=\s*)"[^"]*"', rf'\1"{key}"', block)
        try:
            data = tomllib.loads(block)
        except tomllib.TOMLDecodeError as e:
            out.append(f"TOML example {i}: {e}")
            continue
        base = {"router_id": "198.18.0.1", "local_as": 65000, "role": "both"}
        try:
            cfgmod.parse({**base, **data}, f"TOML example {i}")
        except cfgmod.ConfigError as e:
            out += [p.format(e.path) for p in e.problems]
    return out


def _commands(p: argparse.ArgumentParser) -> dict[str, set[str]]:
    """Subcommand -> its option strings; "" -> the program's own."""
    out = {"": {o for a in p._actions for o in a.option_strings}}
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                out[name] = {o for b in sub._actions for o in b.option_strings}
    return out


FACES = {"glbctl": _commands(glbctl.build_parser()), "glbd": _commands(glbd.build_parser())}
#: where a command word starts: a span or line (after a shell prompt), or after a separator
_START = r"(?:^|&&\s*|[;|(]\s*|=|sudo\s+|[#$]\s+)"


def command_problems(text: str) -> list[str]:
    """``glbctl X``/``glbd X`` in code: X must be a subcommand, each option one it takes."""
    out = []
    for span in _code(text):
        for m in re.finditer(_START + r"(?:[\w./-]*/)?(glbctl|glbd)((?:[ \t]+[^\s`;&]+)*)", span):
            face, words = m.group(1), m.group(2).split()
            if "|" in words:  # a pipe: the command ends there
                words = words[: words.index("|")]
            known = FACES[face]
            cmd = ""
            while words and words[0].startswith("-"):
                opt = words.pop(0).split("=")[0]
                if opt not in known[""]:
                    out.append(f"{face} has no option {opt}")
                if opt == "--socket" and words:
                    words.pop(0)
            if words and re.fullmatch(r"[a-z][a-z-]*(\|[a-z][a-z-]*)*", words[0]):
                cmds = words.pop(0).split("|")
                for c in cmds:
                    if c not in known:
                        out.append(f"{face} has no command {c!r}")
                cmd = cmds[0] if len(cmds) == 1 else ""
            if cmd in known:
                for w in words:
                    opt = w.split("=")[0]
                    if re.fullmatch(r"--?[a-z][a-z-]*", opt) and opt not in known[cmd]:
                        out.append(f"{face} {cmd} has no option {opt}")
    return out


def unit_capabilities() -> set[str]:
    """What the unit grants (one line each, the same set in both)."""
    (ambient,) = re.findall(r"^AmbientCapabilities=(.*)$", UNIT, re.M)
    (bounding,) = re.findall(r"^CapabilityBoundingSet=(.*)$", UNIT, re.M)
    assert set(ambient.split()) == set(bounding.split())
    return set(ambient.split())


def capability_problems(text: str) -> list[str]:
    """A count of capabilities, or a list introduced by "exactly", that is not the unit's."""
    caps = unit_capabilities()
    plain = " ".join(text.replace("`", "").split())
    out = []
    for m in re.finditer(r"\b(\w+)\s+(?:Linux\s+)?capabilities\b", plain, re.I):
        word = m.group(1).lower()
        n = int(word) if word.isdigit() else NUMBERS.get(word)
        if n is not None and n != len(caps):
            out.append(f"{m.group(0)!r}: the unit grants {len(caps)}")
    for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z])", plain):
        if "exactly" in sentence and "CAP_" in sentence:
            listed = set(re.findall(r"CAP_[A-Z_]+", sentence.split("exactly", 1)[1]))
            if listed != caps:
                out.append(f"lists {sorted(listed)} exactly, the unit grants {sorted(caps)}")
    return out


# ---- links, in the repository and as installed --------------------------------------------


def _installed() -> dict[Path, Path]:
    """Repository file -> where the package puts it, for what packaging/debian installs in
    /usr/share/doc/glbd (glbd.docs, glbd.examples)."""
    out: dict[Path, Path] = {}
    for name, dest in (("glbd.docs", DOC_DIR), ("glbd.examples", DOC_DIR / "examples")):
        for line in (DEBIAN / name).read_text().split():
            for src in sorted(glob.glob(str(ROOT / line))):
                p = Path(src)
                files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
                for f in files:
                    out[f] = dest / f.relative_to(p.parent)
    return out


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but ``-`` and ``_`` dropped, each
    space a hyphen."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)
    return {slug(h) for h in re.findall(r"^#+\s+(.*)$", text, re.M)}


def link_problems(doc: Path, text: str, installed: dict[Path, Path]) -> list[str]:
    """Relative links that lead nowhere: in the repository, and from the installed copy."""
    out = []
    where = installed.get(doc)
    back = {v: k for k, v in installed.items()}
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        src = (doc.parent / path).resolve() if path else doc
        if not src.exists():
            out.append(f"{target}: no such file")
            continue
        if anchor and src.suffix == ".md" and anchor not in _anchors(src):
            out.append(f"{target}: no heading #{anchor}")
        if where is not None and path:
            on_box = Path(os.path.normpath(where.parent / path))
            if on_box not in back:
                out.append(f"{target}: not installed as {on_box}")
    return out


# ---- the docs as they are ----------------------------------------------------------------


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_the_docs_name_only_config_keys_that_exist(doc: Path) -> None:
    assert config_key_problems(doc.read_text()) == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_the_docs_toml_examples_validate(doc: Path, tmp_path: Path) -> None:
    assert toml_problems(doc.read_text(), tmp_path) == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_the_docs_show_only_commands_and_options_that_exist(doc: Path) -> None:
    assert command_problems(doc.read_text()) == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_the_docs_count_the_units_capabilities(doc: Path) -> None:
    assert capability_problems(doc.read_text()) == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_the_docs_links_resolve_in_the_repository_and_installed(doc: Path) -> None:
    assert link_problems(doc, doc.read_text(), _installed()) == []


def test_the_package_ships_the_operator_docs() -> None:
    installed = set(_installed().values())
    for name in ("operator-guide.md", "config-reference.md", "security.md", "bgp.md"):
        assert DOC_DIR / name in installed, name
    assert DOC_DIR / "img" / "glb-latency-cdf.png" in installed
    for name in ("leaf.toml", "spine.toml", "sysctl-glbd.conf"):
        assert DOC_DIR / "examples" / name in installed, name
    # the unit's Documentation= files are among them
    for doc in re.findall(r"file:(\S+)", UNIT):
        assert Path(doc) in installed, doc


def test_no_exemption_is_a_config_key() -> None:
    assert [n for n in NOT_CONFIG if any(k.startswith(n) for k in KEYS)] == []


def test_the_checkers_see_what_they_look_for() -> None:
    """The real docs name keys, commands and capabilities: a checker that matched nothing would
    pass them all."""
    guide = (ROOT / "docs" / "operator-guide.md").read_text()
    spans = " ".join(_code(guide))
    assert "bfd.kernel_rx" in spans and "glbctl --json routes" in spans
    assert len(_toml_blocks(guide)) >= 2
    assert "CAP_BPF" in unit_capabilities() and len(unit_capabilities()) == 5
    # the count and the list the docs give are checked, not skipped
    wrong = {"five capabilities": "four capabilities", "`CAP_BPF`": "`CAP_XYZ`"}
    for doc, phrase in (
        ("README.md", "five capabilities"),
        ("docs/operator-guide.md", "`CAP_BPF`"),
    ):
        assert capability_problems((ROOT / doc).read_text().replace(phrase, wrong[phrase])), doc


# ---- planted mistakes ----------------------------------------------------------------------

PLANTED = """\
Set `bgp.graceful_restrat = "full"` and `[heartbeat] intervall_ms = 20`; `[bfd.authx]` too.
Drain with `glbctl drian`, or `glbctl --json neighbours`; `glbctl profiles --changd`.
`glbd check-config --strict /etc/glbd/glbd.toml`, `glbctl status|neighbors|bdf`.
The unit gives user glbd four capabilities: exactly `CAP_NET_ADMIN` and `CAP_NET_RAW`.

```toml
[bgp]
graceful_restart = "always"
```
"""


def test_planted_mistakes_are_found(tmp_path: Path) -> None:
    assert config_key_problems(PLANTED) == [
        "no config key bfd.authx",
        "no config key bgp.graceful_restrat",
        "no config key heartbeat.intervall_ms",
    ]
    assert command_problems(PLANTED) == [
        "glbctl has no command 'drian'",
        "glbctl has no command 'neighbours'",
        "glbctl profiles has no option --changd",
        "glbd check-config has no option --strict",
        "glbctl has no command 'bdf'",
    ]
    caps = capability_problems(PLANTED)
    assert len(caps) == 2 and "'four capabilities'" in caps[0] and "exactly" in caps[1]
    (bad,) = toml_problems(PLANTED, tmp_path)
    assert "bgp.graceful_restart" in bad


def test_prose_is_not_taken_for_keys_or_commands() -> None:
    prose = """\
glbd runs ExaBGP; the heartbeat.md file and `heartbeat.wire` (a module), `docs/bgp.md`,
`bfd_engine.kernel_rx` (a status field), `fib.kernel.routes`, `systemctl enable --now glbd`,
`journalctl -u glbd -f`, `proto glbd`, the `glbctl` tool, `glbctl decode {nhc,bfd,heartbeat} HEX`,
`glbctl routes PREFIX`, five capabilities, `[[neighbors]]`, `[heartbeat.auth]`.
"""
    assert config_key_problems(prose) == []
    assert command_problems(prose) == []
    assert capability_problems(prose) == []


def test_a_link_that_is_not_installed_is_found(tmp_path: Path) -> None:
    installed = _installed()
    guide = ROOT / "docs" / "operator-guide.md"
    missing = "nothing" + ".md"  # spelled apart: no document may name a file that is not here
    text = f"[a](../conf/sysctl-glbd.conf) [b](fib.md#no-such-heading) [c]({missing}) [d](fib.md)"
    assert link_problems(guide, text, installed) == [
        "../conf/sysctl-glbd.conf: not installed as /usr/share/doc/conf/sysctl-glbd.conf",
        "fib.md#no-such-heading: no heading #no-such-heading",
        f"{missing}: no such file",
    ]
