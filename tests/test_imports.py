"""The layer matrix, checked on every import statement in the source (function-local and relative
ones included). ``glbd/`` is grouped by feature (``fib/``, ``bgp/``, ``quality/``...), as ``bfd/``
and ``heartbeat/`` are; inside a feature each module keeps to one layer, named in :data:`LAYERS`:

* ``bfd/`` and ``heartbeat/`` import only the stdlib and themselves;
* a codec (wire format) imports only the stdlib and other codecs;
* a core (pure state machine or table) imports codecs, cores and the pure parts of
  ``bfd``/``heartbeat``, never asyncio, sockets, threads, processes or the clock;
* an io module (adapter) never imports an app module or the faces (``glbd/cli``);
* an app module never imports the faces;
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
ORDER = ("codec", "core", "io", "app")
#: glbd's features and the layer of each of their modules (a new module is added here)
LAYERS: dict[str, dict[str, tuple[str, ...]]] = {
    "base": {"codec": ("ipzone", "prefix"), "core": ("reasons",)},
    "netlink": {"codec": ("codec", "columns", "const", "headers", "rtnl"),
                "io": ("ifwatch", "rtsocket")},
    "fib": {"codec": ("fibmsg",),
            "core": ("fibcache", "fibmodel", "fibplan", "fibsnap", "fibstep", "fibsync",
                     "fibwire"),
            "io": ("fibkernel", "fibread", "programmer"),
            "app": ("failover", "fibservice")},
    "bgp": {"codec": ("bgpmsg", "exabgp_api", "nhc"),
            "core": ("gracestop", "origin", "prefixlist", "rib", "ribadjin", "ribcheck",
                     "ribcolour", "ribdelay", "ribmaxpfx", "ribselect", "ribstale", "ribtypes",
                     "ribviews"),
            "io": ("exabgp", "exabgp_bridge", "exabgp_launch", "speaker"),
            "app": ("neighbors", "origination")},
    "quality": {"core": ("linkq", "pathchanges", "pathmodel", "pathprofile", "pathtable",
                         "pathview", "pathweight"),
                "io": ("bpfmap", "foreigncount", "linkrunner", "linkstats"),
                "app": ("foreignservice",)},
    "flowlet": {"core": ("movegate", "placement", "skew"), "io": ("loader",)},
    "colours": {"codec": ("colour",), "core": ("colourpaths", "colours"), "app": ("service",)},
    "unnumbered": {"codec": ("ndp",), "core": ("ndpeers",), "io": ("ndpsock",), "app": ("part",)},
    "control": {"codec": ("protocol",), "io": ("metrics", "server"),
                "app": ("metrics_daemon", "metrics_parts", "metrics_table", "views")},
    "config": {"app": ("config", "config_base", "config_bfd", "config_colours", "config_control",
                       "config_fib", "config_peers", "config_quality", "confref", "params",
                       "secrets")},
    "daemon": {"core": ("loopprio", "recheck"),
               "io": ("bpftools", "caps", "netns", "paths", "sched", "systemd"),
               "app": ("component", "daemon", "log", "node", "parts", "privileges")},
}  # fmt: skip
#: dotted module -> layer ("cli" for the faces)
LAYER_OF = {
    f"glbd.{feature}.{name}": layer
    for feature, layers in LAYERS.items()
    for layer, names in layers.items()
    for name in names
}


def _layer(mod: str) -> str | None:
    """The layer of a glbd module, or of the module a ``from glbd.x.m import name`` names."""
    if mod == "glbd.cli" or mod.startswith("glbd.cli."):
        return "cli"
    while mod:
        if mod in LAYER_OF:
            return LAYER_OF[mod]
        mod = mod.rpartition(".")[0]
    return None


def _in_layer(layer: str) -> list[Path]:
    return [ROOT / Path(*m.split(".")).with_suffix(".py") for m, la in LAYER_OF.items()
            if la == layer]  # fmt: skip


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
    packages = {"glbd", *(f"glbd.{feature}" for feature in LAYERS)}  # not a layer: its modules are
    for f in files:
        for lineno, mod in _imports(f, _module_name(f) if f.is_relative_to(ROOT) else "x.y"):
            if mod not in packages and not allowed(mod):
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
        return _top(mod) in STDLIB | {"__future__"} or _layer(mod) == "codec"

    bad = _violations(_in_layer("codec"), allowed)
    assert not bad, "\n".join(bad)


def test_cores_are_pure() -> None:
    def allowed(mod: str) -> bool:
        top = _top(mod)
        if top in IMPURE:
            return False
        if top in ("bfd", "heartbeat"):
            return any(_is(mod, p) for p in PURE_PROTOCOL) or mod in ("bfd", "heartbeat")
        if top == "glbd":
            return _layer(mod) in ("codec", "core")
        return top in STDLIB | {"__future__", "structlog"}

    bad = _violations(_in_layer("core"), allowed)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(
    ("layer", "forbidden"),
    [("io", ("app", "cli")), ("app", ("cli",)), ("codec", ("core", "io", "app", "cli"))],
)
def test_no_layer_imports_upward(layer: str, forbidden: tuple[str, ...]) -> None:
    def allowed(mod: str) -> bool:
        return _layer(mod) not in forbidden

    bad = _violations(_in_layer(layer), allowed)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("package", DAEMON_PACKAGES)
def test_the_daemon_never_imports_the_lab_tests_or_benches(package: str) -> None:
    def allowed(mod: str) -> bool:
        return _top(mod) not in NOT_THE_DAEMON

    bad = _violations(_sources(package), allowed)
    assert not bad, "\n".join(bad)


def test_every_glbd_module_is_in_a_feature_and_a_layer() -> None:
    """Every module sits in a feature folder (or the faces, ``glbd/cli``) and is named in
    :data:`LAYERS`; every name there is a module."""
    modules = {_module_name(f) for f in _sources("glbd") if f.name != "__init__.py"}
    faces = {m for m in modules if _layer(m) == "cli"}
    stray = sorted(modules - faces - set(LAYER_OF) - {"glbd.__main__"})
    assert not stray, f"not in LAYERS: {stray}"
    missing = sorted(set(LAYER_OF) - modules)
    assert not missing, f"in LAYERS, not a module: {missing}"
    top = sorted(f.name for f in (ROOT / "glbd").glob("*.py"))
    assert top == ["__init__.py", "__main__.py"], top


def test_features_are_folders_of_their_own() -> None:
    folders = {p.name for p in (ROOT / "glbd").iterdir() if (p / "__init__.py").exists()}
    assert folders == set(LAYERS) | {"cli"}, folders


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
        "import os\nfrom glbd.config.config import Config\nfrom . import sib\n"
        "def f():\n    import time\n"
    )
    mods = [m for _, m in _imports(f, "glbd.fib.probe")]
    assert mods == [
        "os", "glbd.config.config", "glbd.config.config.Config", "glbd.fib", "glbd.fib.sib",
        "time",
    ]  # fmt: skip

    def allowed(mod: str) -> bool:  # the rule of a core
        return _top(mod) not in IMPURE and _layer(mod) in ("codec", "core", None)

    # glbd.config.config, its Config, and time; the package glbd.fib is no layer
    assert len(_violations([f], allowed)) == 3


def test_layer_of_a_name_is_its_module_s() -> None:
    assert _layer("glbd.fib.fibplan.plan") == "core"
    assert _layer("glbd.fib.programmer") == "io"
    assert _layer("glbd.cli.glbctl") == "cli"
    assert _layer("glbd.fib") is None


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
