"""bfd/ and heartbeat/ are dependency-free protocol libraries: they import only the stdlib and
themselves, never glbd or a third-party package. This walks every import statement (including
relative and function-local ones) in their source."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STDLIB = set(sys.stdlib_module_names)


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative import: stays inside the package
                continue
            found.append((node.lineno, node.module or ""))
    return found


@pytest.mark.parametrize("package", ["bfd", "heartbeat"])
def test_package_imports_only_stdlib_and_itself(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"{package}/ has no sources"
    bad = []
    for f in files:
        for lineno, mod in _imports(f):
            top = mod.split(".")[0]
            if top == package or top in STDLIB or top == "__future__":
                continue
            bad.append(f"{f.relative_to(ROOT)}:{lineno}: imports {mod}")
    assert not bad, "\n".join(bad)


def test_checker_catches_a_forbidden_import(tmp_path: Path) -> None:
    f = tmp_path / "x.py"
    f.write_text("import os\nfrom glbd.config import Config\ndef f():\n    import pydantic\n")
    mods = [m for _, m in _imports(f)]
    assert mods == ["os", "glbd.config", "pydantic"]
