"""The repository stands alone: no tracked file cites a file outside it (a ``shared/spec``
path, or a ``name.md`` that is not one of the repository's own documents). Facts a comment
relies on are stated in it, or cited by RFC, draft or upstream source name."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: a markdown file named in text (not an option such as ``-X.md`` or a suffix ``foo.md.j2``)
MD_NAME = re.compile(r"(?<![\w.-])([A-Za-z][\w-]*\.md)\b")


def _tracked() -> list[Path]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / p for p in out.decode().split("\0") if p]


def _texts() -> dict[str, str]:
    texts = {}
    for path in _tracked():
        try:
            data = path.read_bytes()
        except (FileNotFoundError, IsADirectoryError):  # deleted in the working tree
            continue
        if b"\0" in data[:8192]:  # binary (images, captures)
            continue
        texts[str(path.relative_to(ROOT))] = data.decode(errors="replace")
    return texts


def test_no_file_cites_shared_spec() -> None:
    hits = [
        f"{name}:{n}: {line.strip()}"
        for name, text in _texts().items()
        for n, line in enumerate(text.splitlines(), 1)
        if "shared/spec" in line and name != "tests/test_self_contained.py"
    ]
    assert hits == [], "cites a file outside the repository:\n" + "\n".join(hits)


def test_every_markdown_file_named_is_in_the_repository() -> None:
    texts = _texts()
    ours = {Path(name).name for name in texts if name.endswith(".md")}
    hits = [
        f"{name}:{n}: {m}"
        for name, text in texts.items()
        for n, line in enumerate(text.splitlines(), 1)
        for m in MD_NAME.findall(line)
        if m not in ours and name != "tests/test_self_contained.py"  # its own examples
    ]
    assert hits == [], "names a document that is not in the repository:\n" + "\n".join(hits)
