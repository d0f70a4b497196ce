"""What one reader holds: no source file of the daemon over 800 lines, no function over 80
unless its docstring says why it is kept whole."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("glbd", "bfd", "heartbeat")
MAX_FILE, MAX_FUNCTION = 800, 80


def _sources() -> list[Path]:
    return sorted(f for p in PACKAGES for f in (ROOT / p).rglob("*.py"))


def _long_functions(src: str) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            n = (node.end_lineno or node.lineno) - node.lineno + 1
            if n > MAX_FUNCTION and "Kept whole" not in (ast.get_docstring(node) or ""):
                out.append(f"{node.name} ({n} lines)")
    return out


def test_no_file_is_too_long_to_hold() -> None:
    long = {str(f.relative_to(ROOT)): n for f in _sources()
            if (n := len(f.read_text().splitlines())) > MAX_FILE}  # fmt: skip
    assert not long, long


@pytest.mark.parametrize("package", PACKAGES)
def test_no_function_is_too_long_without_a_reason(package: str) -> None:
    long = {}
    for f in sorted((ROOT / package).rglob("*.py")):
        if fns := _long_functions(f.read_text()):
            long[str(f.relative_to(ROOT))] = fns
    assert not long, long


def test_the_check_sees_a_long_function() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(90))
    assert _long_functions(f"def f():\n{body}\n") == ["f (91 lines)"]
    assert _long_functions(f'def f():\n    """Kept whole: a table."""\n{body}\n') == []
