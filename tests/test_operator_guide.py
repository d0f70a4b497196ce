"""docs/operator-guide.md's configuration examples load as whole files (an operator copies them).
Every key, command and link the guide names is checked with the other docs in
tests/test_docs_consistency.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from glbd.config import config as cfgmod

GUIDE = Path(__file__).parent.parent / "docs/operator-guide.md"


def _toml_blocks() -> list[str]:
    return re.findall(r"```toml\n(.*?)```", GUIDE.read_text(), re.S)


@pytest.mark.parametrize("index", range(2))
def test_guide_config_examples_load(index: int, tmp_path: Path) -> None:
    key = tmp_path / "heartbeat.key"
    key.write_bytes(b"k" * 32)
    key.chmod(0o600)
    text = _toml_blocks()[index].replace("/etc/glbd/heartbeat.key", str(key))
    path = tmp_path / "glbd.toml"
    path.write_text(text)
    cfg = cfgmod.load(path)
    assert cfg.role in ("helper", "load-balancer")
    assert len(cfg.neighbors) == 2
    assert cfg.heartbeat.send_key() is not None
    # RFC 8212: the examples give every eBGP neighbour its policy, so they exchange routes
    assert cfg.policy_warnings() == []
