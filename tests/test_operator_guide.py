"""docs/operator-guide.md stays true to the config model: its TOML examples load, and every
config key it names exists (an operator copies them; a renamed key would fail at start)."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from glbd.app import config as cfgmod

GUIDE = Path(__file__).parent.parent / "docs/operator-guide.md"
#: dotted names in the guide that are glbctl fields or sysctls, not config keys
NOT_CONFIG = ("net.", "fib.kernel", "fib.conflicts", "fib.stale_held", "fib.weight_bits",
              "fib.compat_mode", "fib.foreign_routes", "fib.last_errors", "fib.stale_remaining",
              "bfd_engine.", "last_sync.", "control.decode", "sender.")  # fmt: skip


def _keys(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Every dotted key of a config model, nested sections included."""
    out: set[str] = set()
    for name, field in model.model_fields.items():
        out.add(prefix + (field.alias or name))  # the TOML spelling (``import`` for import_)
        todo, seen = [field.annotation], []
        while todo:
            t = todo.pop()
            seen.append(t)
            todo += [a for a in typing.get_args(t) if a not in seen]
            if isinstance(t, type) and issubclass(t, BaseModel):
                out |= _keys(t, f"{prefix}{name}.")
    return out


def _toml_blocks() -> list[str]:
    return re.findall(r"```toml\n(.*?)```", GUIDE.read_text(), re.S)


def _named_keys(text: str) -> set[str]:
    """Dotted names in backquotes, and the section.key pairs of the TOML examples."""
    names = set(re.findall(r"`\[*([a-z_]+(?:\.[a-z_0-9]+)+)\]*", text))
    for block in _toml_blocks():
        section = ""
        for line in block.splitlines():
            if m := re.match(r"\s*\[+([a-z_.]+)\]+", line):
                section = m.group(1) + "."
                names.add(m.group(1))
            elif m := re.match(r"\s*([a-z_0-9]+)\s*=", line):
                names.add(section + m.group(1))
    return {n for n in names if not n.startswith(NOT_CONFIG)}


def test_every_config_key_the_guide_names_exists() -> None:
    known = _keys(cfgmod.Config)
    named = _named_keys(GUIDE.read_text())
    assert "fib.group_type" in named and "heartbeat.auth.secret_file" in named
    assert sorted(named - known) == []


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
