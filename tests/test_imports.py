"""The layer matrix, checked on every import statement in the source (function-local and relative
ones included):

* ``bfd/`` and ``heartbeat/`` import only the stdlib and themselves;
* ``glbd.codec`` (wire formats) imports only the stdlib and other codecs;
* ``glbd.core`` (pure state machines and tables) imports codecs, cores and the pure parts of
  ``bfd``/``heartbeat``, never asyncio, sockets, threads, processes or the clock;
* ``glbd.io`` (adapters) never imports the app or the faces;
* ``glbd.app`` never imports the faces;
* nothing in the daemon imports the lab, the tests or the benchmarks;
* and no import cycle exists between glbd's modules.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STDLIB = set(sys.stdlib_module_names)
#: what a pure core may not touch: event loops, sockets, threads, processes, the clock
IMPURE = {"asyncio", "socket", "select", "selectors", "threading", "subprocess", "time", "signal"}
#: the pure parts of the protocol packages (codecs and cores) a glbd core may use
PURE_PROTOCOL = {"bfd.packet", "bfd.session", "heartbeat.wire", "heartbeat.receiver",
                 "heartbeat.sender"}  # fmt: skip
DAEMON_PACKAGES = ("glbd", "bfd", "heartbeat")
NOT_THE_DAEMON = {"glbdlab", "tests", "bench"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, module: str | None = None) -> list[tuple[int, str]]:
    """(line, module) for every import; ``from X import m`` also yields ``X.m`` (it may be a
    module); relative imports are resolved against the file's package."""
    tree = ast.parse(path.read_text(), filename=str(path))
    pkg = (module or _module_name(path)).split(".")
    if path.name != "__init__.py":
        pkg = pkg[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[: len(pkg) - node.level + 1]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            found.append((node.lineno, mod))
            found.extend((node.lineno, f"{mod}.{a.name}") for a in node.names if a.name != "*")
    return found


def _sources(package: str) -> list[Path]:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"{package}/ has no sources"
    return files


def _is(mod: str, prefix: str) -> bool:
    return mod == prefix or mod.startswith(prefix + ".")


def _violations(files: list[Path], allowed: Callable[[str], bool]) -> list[str]:
    bad = []
    for f in files:
        for lineno, mod in _imports(f, _module_name(f) if f.is_relative_to(ROOT) else "x.y"):
            if not allowed(mod):
                bad.append(f"{f}:{lineno}: imports {mod}")
    return bad


def _top(mod: str) -> str:
    return mod.split(".")[0]


@pytest.mark.parametrize("package", ["bfd", "heartbeat"])
def test_protocol_packages_import_only_stdlib_and_themselves(package: str) -> None:
    def allowed(mod: str) -> bool:
        return _top(mod) in STDLIB | {package, "__future__"}

    bad = _violations(_sources(package), allowed)
    assert not bad, "\n".join(bad)


def test_codecs_import_only_stdlib_and_codecs() -> None:
    def allowed(mod: str) -> bool:
        return _top(mod) in STDLIB | {"__future__"} or _is(mod, "glbd.codec")

    bad = _violations(_sources("glbd/codec"), allowed)
    assert not bad, "\n".join(bad)


def test_cores_are_pure() -> None:
    def allowed(mod: str) -> bool:
        top = _top(mod)
        if top in IMPURE:
            return False
        if top in ("bfd", "heartbeat"):
            return any(_is(mod, p) for p in PURE_PROTOCOL) or mod in ("bfd", "heartbeat")
        if top == "glbd":
            return _is(mod, "glbd.codec") or _is(mod, "glbd.core")
        return top in STDLIB | {"__future__", "structlog"}

    bad = _violations(_sources("glbd/core"), allowed)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(
    ("layer", "forbidden"),
    [
        ("glbd/io", ("glbd.app", "glbd.cli")),
        ("glbd/app", ("glbd.cli",)),
        ("glbd/codec", ("glbd.core", "glbd.io", "glbd.app", "glbd.cli")),
    ],
)
def test_no_layer_imports_upward(layer: str, forbidden: tuple[str, ...]) -> None:
    def allowed(mod: str) -> bool:
        return not any(_is(mod, f) for f in forbidden)

    bad = _violations(_sources(layer), allowed)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("package", DAEMON_PACKAGES)
def test_the_daemon_never_imports_the_lab_tests_or_benches(package: str) -> None:
    def allowed(mod: str) -> bool:
        return _top(mod) not in NOT_THE_DAEMON

    bad = _violations(_sources(package), allowed)
    assert not bad, "\n".join(bad)


def test_every_glbd_module_is_in_a_layer() -> None:
    layers = ("codec", "core", "io", "app", "cli")
    stray = [
        str(f.relative_to(ROOT))
        for f in _sources("glbd")
        if f.parent != ROOT / "glbd" and f.relative_to(ROOT / "glbd").parts[0] not in layers
    ]
    top = sorted(f.name for f in (ROOT / "glbd").glob("*.py"))
    assert not stray, stray
    assert top == ["__init__.py", "__main__.py"], top


def _graph(packages: tuple[str, ...]) -> dict[str, set[str]]:
    files = [f for p in packages for f in _sources(p)]
    names = {_module_name(f): f for f in files}
    graph: dict[str, set[str]] = {}
    for name, f in names.items():
        deps = set()
        for _, mod in _imports(f):
            # a package's __init__ is not an edge: importing a.b.c runs a and a.b first, and
            # this tree keeps its __init__ files empty
            if mod in names and mod != name and names[mod].name != "__init__.py":
                deps.add(mod)
        graph[name] = deps
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles() -> None:
    cycles = _cycles(_graph(DAEMON_PACKAGES))
    assert not cycles, cycles


def test_package_inits_are_empty_so_imports_are_explicit() -> None:
    heavy = [
        str(f.relative_to(ROOT))
        for p in ("glbd",)
        for f in (ROOT / p).rglob("__init__.py")
        if any(isinstance(n, ast.Import | ast.ImportFrom) for n in ast.parse(f.read_text()).body)
    ]
    assert not heavy, heavy


def test_checker_catches_a_forbidden_import(tmp_path: Path) -> None:
    f = tmp_path / "probe.py"
    f.write_text(
        "import os\nfrom glbd.app.config import Config\nfrom . import sib\n"
        "def f():\n    import time\n"
    )
    mods = [m for _, m in _imports(f, "glbd.core.probe")]
    assert mods == [
        "os", "glbd.app.config", "glbd.app.config.Config", "glbd.core", "glbd.core.sib", "time"
    ]  # fmt: skip

    def allowed(mod: str) -> bool:
        return _top(mod) not in IMPURE and not _is(mod, "glbd.app")

    assert len(_violations([f], allowed)) == 3


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
