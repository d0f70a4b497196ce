"""systemd integration: the unit verifies, and sd_notify speaks the protocol to a NOTIFY_SOCKET."""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from glbd.cli import manpages
from glbd.config import config as cfgmod
from glbd.daemon import caps, privileges, systemd

ROOT = Path(__file__).resolve().parent.parent


UNIT = (ROOT / "systemd" / "glbd.service").read_text()
BIN = Path(sys.executable).parent
#: ``systemd-analyze security`` score of the unit (0 = nothing exposed, 10 = unprotected); what
#: keeps it there is in docs/security.md
EXPOSURE_MAX = 2.0


def local_unit(tmp_path: Path) -> Path:
    """The unit with its programs pointed at this venv (systemd-analyze checks they exist)."""
    f = tmp_path / "glbd.service"
    f.write_text(UNIT.replace("/opt/glbd/bin/", f"{BIN}/"))
    return f


def directive(key: str) -> list[str]:
    return re.findall(rf"^{key}=(.*)$", UNIT, re.M)


def man_pages(tmp_path: Path) -> Path:
    """glbd(8), glbctl(8) and glbd.toml(5) as the package builds them (glbd.cli.manpages), so
    ``verify`` checks the unit's ``Documentation=`` man pages against what glbd ships."""
    for name, text in manpages.pages().items():
        section = tmp_path / "man" / f"man{name[-1]}"
        section.mkdir(parents=True, exist_ok=True)
        (section / name).write_text(text)
    return tmp_path / "man"


def test_unit_verifies(tmp_path: Path) -> None:
    manpath = f"{man_pages(tmp_path)}:"  # a trailing colon: and the system's (man-db)
    r = subprocess.run(
        ["systemd-analyze", "verify", str(local_unit(tmp_path))],
        capture_output=True,
        text=True,
        env={**os.environ, "MANPATH": manpath},
    )
    assert r.returncode == 0, r.stderr
    assert "glbd.service" not in r.stderr, r.stderr  # no warnings about our unit
    for key in ("Type=notify", "WatchdogSec=", "Restart=on-failure", "KillMode=mixed"):
        assert key in UNIT


def test_unit_runs_as_glbd_with_only_the_capabilities_the_daemon_checks(tmp_path: Path) -> None:
    f = tmp_path / "glbd.toml"
    f.write_text(
        'router_id = "198.18.255.1"\nlocal_as = 65001\nrole = "load-balancer"\n'
        "[flowlet]\nenabled = true\n"
    )
    # every feature on: BFD real-time priority, flowlets (the unit serves any config)
    need = privileges.wanted_capabilities(cfgmod.load(f))
    assert directive("User") == ["glbd"] and directive("Group") == ["glbd"]
    assert directive("AmbientCapabilities")[0].split() == need
    assert directive("CapabilityBoundingSet")[0].split() == need
    # the socket directory: glbd-owned 0750, so group glbd reaches the 0660 socket
    assert directive("RuntimeDirectory") == ["glbd"]
    assert directive("RuntimeDirectoryMode") == ["0750"]
    tmpfiles = (ROOT / "systemd" / "glbd.tmpfiles").read_text()
    assert "d /run/glbd 0750 glbd glbd" in tmpfiles
    # [flowlet]: bpf() allowed back out of @privileged, its pin directory writable and glbd's
    assert "d /sys/fs/bpf/glbd 0700 glbd glbd" in tmpfiles
    assert directive("ReadWritePaths") == ["-/sys/fs/bpf/glbd"]
    assert directive("SystemCallFilter")[-1] == "bpf"
    assert re.search(r"^u glbd ", (ROOT / "systemd" / "glbd.sysusers").read_text(), re.M)
    # sysctls are written by root before the sandboxed daemon starts
    assert f"+/opt/glbd/bin/glbd sysctl -q -c {directive('ExecStart')[0].split()[-1]}" in (
        directive("ExecStartPre")
    )
    assert directive("ProtectKernelTunables") == ["yes"]
    assert directive("LogsDirectory") == ["glbd"]
    assert not [d for d in directive("Documentation") if "invalid" in d]


def test_security_exposure(tmp_path: Path) -> None:
    r = subprocess.run(
        ["systemd-analyze", "security", "--offline=yes", str(local_unit(tmp_path))],
        capture_output=True,
        text=True,
    )
    m = re.search(r"Overall exposure level for glbd.service: ([0-9.]+)", r.stdout)
    assert m, r.stdout + r.stderr
    assert float(m.group(1)) <= EXPOSURE_MAX, r.stdout


@pytest.mark.root
def test_exec_reload_fails_when_the_file_is_rejected(tmp_path: Path) -> None:
    """The unit's ExecReload= command line, run against a daemon (bare: no network parts)."""
    cfg = tmp_path / "glbd.toml"
    sock = tmp_path / "ctl.sock"
    good = 'router_id = "198.18.255.1"\nlocal_as = 65001\nrole = "helper"\n'
    cfg.write_text(good + f'[control]\nsocket = "{sock}"\n')
    (reload_line,) = directive("ExecReload")
    argv = shlex.split(reload_line.replace("/opt/glbd/bin/", f"{BIN}/"))
    env = dict(os.environ, GLBD_SOCKET=str(sock))
    # the bare daemon: daemon.main without components
    bare = "import sys; from glbd.daemon.daemon import main; sys.exit(main(sys.argv[1]))"
    p = subprocess.Popen(
        [sys.executable, "-c", bare, str(cfg)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not sock.exists():
            assert p.poll() is None and time.monotonic() < deadline, "glbd did not start"
            time.sleep(0.05)  # poll interval
        assert subprocess.run(argv, env=env, capture_output=True).returncode == 0
        cfg.write_text(cfg.read_text() + "local_as = \n")  # not TOML
        r = subprocess.run(argv, env=env, capture_output=True, text=True)
        assert r.returncode != 0, r.stdout
        assert p.poll() is None  # the old config keeps running
    finally:
        p.terminate()
        p.wait(15)


def test_verify_catches_a_broken_unit(tmp_path: Path) -> None:
    (tmp_path / "bad.service").write_text("[Service]\nType=notify\nExecStart=relative/path\n")
    r = subprocess.run(
        ["systemd-analyze", "verify", str(tmp_path / "bad.service")], capture_output=True, text=True
    )
    assert r.returncode != 0 or "bad.service" in r.stderr


@pytest.fixture
def notify_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
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


def test_capability_problem_names_only_what_is_missing(tmp_path: Path) -> None:
    f = tmp_path / "glbd.toml"
    base = 'router_id = "198.18.255.1"\nlocal_as = 65001\nrole = "helper"\n'
    f.write_text(base)
    cfg = cfgmod.load(f)
    bit = caps.CAP_BITS
    mask = 1 << bit["CAP_NET_ADMIN"] | 1 << bit["CAP_NET_RAW"]
    problem = privileges.capability_problem(cfg, mask)
    assert problem and problem.startswith(
        "glbd: missing capabilities CAP_NET_BIND_SERVICE CAP_SYS_NICE;"
    )
    assert "\n" not in problem
    full = mask | 1 << bit["CAP_NET_BIND_SERVICE"] | 1 << bit["CAP_SYS_NICE"]
    assert privileges.capability_problem(cfg, full) is None
    no_rt = full & ~(1 << bit["CAP_SYS_NICE"])
    # neither a real-time engine nor a real-time loop: no CAP_SYS_NICE; either one needs it
    f.write_text(base + "rt_priority = 0\n[bfd]\nrt_priority = 0\n")
    assert privileges.capability_problem(cfgmod.load(f), no_rt) is None
    for only in ("rt_priority = 0\n", "[bfd]\nrt_priority = 0\n"):
        f.write_text(base + only)
        problem = privileges.capability_problem(cfgmod.load(f), no_rt)
        assert problem and problem.startswith("glbd: missing capabilities CAP_SYS_NICE;")
    # the flowlet program wants bpf(): without CAP_BPF glbd starts and routes without it,
    # saying why (a helper runs no program; a load balancer unless it is turned off)
    on = "[flowlet]\nenabled = true\n"
    f.write_text(base + on)
    assert privileges.flowlet_problem(cfgmod.load(f), full) is None
    lb = base.replace("helper", "load-balancer")
    f.write_text(lb + "[flowlet]\nenabled = false\n")
    assert privileges.flowlet_problem(cfgmod.load(f), full) is None
    f.write_text(lb)  # on by default
    cfg = cfgmod.load(f)
    assert privileges.capability_problem(cfg, full) is None
    problem = privileges.flowlet_problem(cfg, full)
    assert problem and problem.startswith("missing capability CAP_BPF") and "\n" not in problem
    assert privileges.flowlet_problem(cfg, full | 1 << bit["CAP_BPF"]) is None
