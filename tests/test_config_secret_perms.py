"""Secret files (heartbeat HMAC key, BFD passwords) are refused when other users could read or
change them, like OpenSSH refuses a private key others can read."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from glbd.config import config

ROOT = Path(__file__).resolve().parent.parent
KEY = b"0123456789abcdefghij"


def _with_key(path: Path) -> dict[str, Any]:
    d = tomllib.loads((ROOT / "conf" / "leaf.toml").read_text())
    d["heartbeat"]["auth"] = {"key_id": 1, "secret_file": str(path)}
    return d


def _key(tmp_path: Path, mode: int, name: str = "hb.key") -> Path:
    p = tmp_path / name
    p.write_bytes(KEY + b"\n")
    os.chmod(p, mode)
    return p


def _reason(d: dict[str, Any]) -> str:
    with pytest.raises(config.ConfigError) as ei:
        config.parse(d, "t.toml")
    ((p,),) = [ei.value.problems]
    assert p.key == "heartbeat.auth"
    return p.reason


@pytest.mark.parametrize("mode", [0o600, 0o400])
def test_private_key_file_is_accepted(tmp_path: Path, mode: int) -> None:
    c = config.parse(_with_key(_key(tmp_path, mode)))
    assert c.heartbeat.auth is not None and c.heartbeat.auth.secret is not None
    assert c.heartbeat.auth.secret.reveal() == KEY


@pytest.mark.parametrize(
    ("mode", "what"),
    [
        (0o644, "readable by other users"),
        (0o604, "readable by other users"),
        (0o602, "writable by other users"),
        (0o620, "writable by its group"),
        (0o660, "writable by its group"),
    ],
)
def test_key_file_others_can_read_or_write_is_refused(tmp_path: Path, mode: int, what: str) -> None:
    p = _key(tmp_path, mode)
    reason = _reason(_with_key(p))
    assert str(p) in reason and what in reason and "chmod 600" in reason
    assert "\n" not in reason
    assert KEY.decode() not in reason


def test_group_readable_key_is_accepted_with_a_warning(tmp_path: Path) -> None:
    """0640 root:glbd is a packaged-install layout: allowed, but said out loud."""
    p = _key(tmp_path, 0o640)
    with capture_logs() as logs:
        c = config.parse(_with_key(p))
    assert c.heartbeat.auth is not None and c.heartbeat.auth.secret is not None
    warn = [e for e in logs if e["event"] == "secret_file_group_readable"]
    assert warn and warn[0]["path"] == str(p) and warn[0]["log_level"] == "warning"


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_key_file_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    p = _key(tmp_path, 0o600)
    os.chown(p, 65534, -1)
    reason = _reason(_with_key(p))
    assert str(p) in reason and "owned by uid 65534" in reason and "chown" in reason


def test_key_that_is_not_a_regular_file_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "k.fifo"
    os.mkfifo(fifo, 0o600)  # reading it would block the loader forever
    reason = _reason(_with_key(fifo))
    assert str(fifo) in reason and "not a regular file" in reason


def test_symlink_to_a_private_key_is_followed(tmp_path: Path) -> None:
    """/etc/glbd/heartbeat.key -> a key kept elsewhere: the target's owner and mode count."""
    target = _key(tmp_path, 0o600)
    link = tmp_path / "link.key"
    link.symlink_to(target)
    c = config.parse(_with_key(link))
    assert c.heartbeat.auth is not None and c.heartbeat.auth.secret is not None
    os.chmod(target, 0o644)
    assert "readable by other users" in _reason(_with_key(link))
