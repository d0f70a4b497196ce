"""The BFD engine process does not inherit the service manager's handles: systemd's notify
socket and watchdog are the daemon's (a child pinging them would hide a stuck daemon loop),
its activated sockets too."""

from __future__ import annotations

from pathlib import Path

import pytest

from bfd.engine import BfdEngine
from bfd.engine.process import engine_env

HANDLES = {
    "NOTIFY_SOCKET": "/run/systemd/notify",
    "WATCHDOG_USEC": "5000000",
    "WATCHDOG_PID": "1234",
    "LISTEN_FDS": "1",
    "LISTEN_PID": "1234",
    "LISTEN_FDNAMES": "control",
}


def test_engine_env_drops_the_handles_and_keeps_the_rest() -> None:
    env = engine_env({**HANDLES, "PATH": "/bin", "PYTHONPATH": "/x"})
    assert env["PATH"] == "/bin"
    assert env["PYTHONPATH"].endswith("/x") and env["PYTHONPATH"] != "/x"
    assert not set(HANDLES) & set(env)


def test_the_started_engine_process_has_none_of_them(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in HANDLES.items():
        monkeypatch.setenv(k, v)
    with BfdEngine(lambda ev: None, mode="process") as engine:
        raw = Path(f"/proc/{engine.pid}/environ").read_bytes()
        names = {kv.split(b"=", 1)[0].decode() for kv in raw.split(b"\0") if kv}
    assert "PATH" in names
    assert not set(HANDLES) & names, names
