"""A package upgrade replaces /opt/glbd's files under the running glbd before it restarts it: the
running daemon must not import any of its own modules after start (it would mix the new files
into the old process). Everything ``glbd run`` loads at start is the closure of the modules it
imports there; every import inside a function of those modules must name one of them (an
``importlib.import_module`` would escape this check: only glbctl and the ExaBGP launcher, other
processes, use one)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("glbd", "bfd", "heartbeat")
#: modules no daemon process imports: other processes' entry points (ExaBGP's launcher and API
#: bridge, the BFD engine's) and the command-line tools
ELSEWHERE = {
    "glbd.__main__",
    "bfd.engine.__main__",
    "glbd.bgp.exabgp_launch",
    "glbd.bgp.exabgp_bridge",
    "glbd.cli.glbctl",
    "glbd.cli.glbctl_args",
    "glbd.cli.glbctl_render",
    "glbd.cli.manpages",
    "glbd.config.confref",
}

# what `glbd run` imports before the daemon starts (glbd.cli.glbd's run command)
PROBE = """
import json, pkgutil, sys
import glbd.cli.glbd
from glbd.daemon.daemon import main
from glbd.daemon.parts import build_components
names = []
for top in sys.argv[1:]:
    pkg = __import__(top)
    names += [m.name for m in pkgutil.walk_packages(pkg.__path__, top + ".")]
print(json.dumps({"loaded": sorted(set(sys.modules)), "all": sorted(names)}))
"""


def _probe() -> dict[str, list[str]]:
    res = subprocess.run(
        [sys.executable, "-c", PROBE, *PACKAGES],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    out: dict[str, list[str]] = json.loads(res.stdout)
    return out


def _function_imports(path: Path) -> set[str]:
    """The project modules imported inside function bodies of ``path``."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module)
                found |= {f"{node.module}.{a.name}" for a in node.names}
    return {m for m in found if m.split(".")[0] in PACKAGES}


def test_the_daemon_loads_all_its_modules_at_start() -> None:
    p = _probe()
    loaded = set(p["loaded"])
    # the other processes' modules are not the daemon's business; they must not be in it
    assert not ELSEWHERE & loaded - {"glbd.__main__"}, ELSEWHERE & loaded
    lazy = set()
    for name in loaded & set(p["all"]):
        rel = Path(*name.split("."))
        path = ROOT / rel.with_suffix(".py")
        if not path.exists():
            path = ROOT / rel / "__init__.py"
        for m in _function_imports(path):
            # "from pkg import name": a module or an attribute; only modules matter
            if m in set(p["all"]) and m not in loaded:
                lazy.add(f"{name} -> {m}")
    assert not lazy, f"imports inside functions of modules the daemon has not loaded: {lazy}"
