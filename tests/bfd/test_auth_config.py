"""BFD key rollover in the config: ``bfd.auth.accept`` lists further keys accepted on receive;
the single-key form keeps working; the sessions glbd builds carry both keys."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from bfd.packet import AuthType
from glbd.config import config
from glbd.daemon.node import Node

ROOT = Path(__file__).resolve().parents[2]


def _leaf(tmp_path: Path, auth: dict[str, Any]) -> dict[str, Any]:
    d = tomllib.loads((ROOT / "conf" / "leaf.toml").read_text())
    d["bfd"] = {"auth": auth}
    for i, n in enumerate(d["neighbors"]):
        n["local_address"] = f"198.18.{i + 1}.1"  # no interface lookup in bfd_sessions()
    return d


def _key(tmp_path: Path, name: str, data: bytes) -> str:
    p = tmp_path / name
    p.write_bytes(data + b"\n")
    p.chmod(0o600)
    return str(p)


def _problems(d: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(config.ConfigError) as ei:
        config.parse(d, "t.toml")
    return {p.key: p.reason for p in ei.value.problems}


def _session_auth(c: config.Config) -> Any:
    """The auth of the sessions glbd builds (a Node needs a running loop: tests are async)."""
    node = Node(SimpleNamespace(cfg=c))  # type: ignore[arg-type]
    [auth] = {s.params.auth for s in node.bfd_sessions()}
    return auth


async def test_single_key_form_still_works(tmp_path: Path) -> None:
    d = _leaf(
        tmp_path,
        {"type": "keyed-sha1", "key_id": 3, "secret_file": _key(tmp_path, "k", b"one")},
    )
    auth = _session_auth(config.parse(d))
    assert (auth.type, auth.key_id, auth.key, auth.accept) == (AuthType.KEYED_SHA1, 3, b"one", ())


async def test_rollover_keys_reach_the_sessions_and_stay_secret(tmp_path: Path) -> None:
    d = _leaf(
        tmp_path,
        {
            "type": "meticulous-keyed-sha1",
            "key_id": 2,
            "secret_file": _key(tmp_path, "new", b"new-key"),
            "accept": [{"key_id": 1, "secret_file": _key(tmp_path, "old", b"old-key-secret")}],
        },
    )
    c = config.parse(d)
    auth = _session_auth(c)
    assert auth.key_id == 2 and auth.key == b"new-key" and auth.accept == ((1, b"old-key-secret"),)
    assert "old-key-secret" not in json.dumps(c.redacted()) and "old-key-secret" not in repr(c)


def test_rollover_key_problems_are_named(tmp_path: Path) -> None:
    d = _leaf(
        tmp_path,
        {
            "type": "keyed-md5",
            "key_id": 1,
            "secret_file": _key(tmp_path, "a", b"a"),
            "accept": [{"key_id": 1, "secret_file": _key(tmp_path, "b", b"b")}],
        },
    )
    assert "key_id 1" in _problems(d)["bfd.auth"]
    d["bfd"]["auth"]["accept"] = [{"key_id": 2, "secret_file": _key(tmp_path, "c", b"x" * 17)}]
    assert "16" in _problems(d)["bfd.auth"]
