"""systemd integration: the unit verifies, and sd_notify speaks the protocol to a NOTIFY_SOCKET."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from glbd.io import systemd

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_unit_verifies(tmp_path: Path) -> None:
    unit = (ROOT / "systemd" / "glbd.service").read_text()
    # systemd-analyze checks that ExecStart binaries exist: point them at this venv's glbd
    glbd_bin = str(Path(sys.executable).parent / "glbd")
    unit = unit.replace("/opt/glbd/bin/glbd", glbd_bin)
    (tmp_path / "glbd.service").write_text(unit)
    r = subprocess.run(
        ["systemd-analyze", "verify", str(tmp_path / "glbd.service")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert "glbd.service" not in r.stderr, r.stderr  # no warnings about our unit
    for key in (
        "Type=notify",
        "WatchdogSec=",
        "Restart=on-failure",
        "KillMode=mixed",
        "RuntimeDirectory=glbd",
        "ProtectSystem=strict",
        "CapabilityBoundingSet=",
    ):
        assert key in unit


def test_verify_catches_a_broken_unit(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze not installed")
    (tmp_path / "bad.service").write_text("[Service]\nType=notify\nExecStart=relative/path\n")
    r = subprocess.run(
        ["systemd-analyze", "verify", str(tmp_path / "bad.service")], capture_output=True, text=True
    )
    assert r.returncode != 0 or "bad.service" in r.stderr


@pytest.fixture
def notify_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> socket.socket:
    path = tmp_path / "notify"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(str(path))
    s.settimeout(2)
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    yield s
    s.close()


def test_notify_protocol(notify_socket: socket.socket) -> None:
    assert systemd.ready("up: 2 neighbors")
    assert notify_socket.recv(4096) == b"READY=1\nSTATUS=up: 2 neighbors"
    assert systemd.watchdog()
    assert notify_socket.recv(4096) == b"WATCHDOG=1"
    assert systemd.status("reloading")
    assert notify_socket.recv(4096) == b"STATUS=reloading"
    assert systemd.stopping()
    assert notify_socket.recv(4096) == b"STOPPING=1\nSTATUS=stopping"


def test_abstract_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"glbd-test-{os.getpid()}"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind("\0" + name)
    s.settimeout(2)
    monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
    try:
        assert systemd.ready()
        assert s.recv(100) == b"READY=1"
    finally:
        s.close()


def test_no_socket_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert systemd.ready() is False


def test_watchdog_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "5000000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    assert systemd.watchdog_interval() == 2.5
    monkeypatch.setenv("WATCHDOG_PID", "1")
    assert systemd.watchdog_interval() is None
    monkeypatch.delenv("WATCHDOG_USEC")
    assert systemd.watchdog_interval() is None


def test_child_env_strips_systemd_handles() -> None:
    env = {"PATH": "/bin", "NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "1", "LISTEN_FDS": "3"}
    assert systemd.child_env(env) == {"PATH": "/bin"}
