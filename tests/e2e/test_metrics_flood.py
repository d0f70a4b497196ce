"""2000 idle TCP connections to a load balancer's metrics endpoint, held (and re-opened as they
are closed) while its BGP session to a helper comes up, cannot starve the daemon of file
descriptors: the heartbeat socket for the new session opens, heartbeats are received, the session
stays up, the refused and timed-out connections are counted by reason, and a fresh scrape
answers. The load balancer starts with systemd's default soft limit of 1024 descriptors."""

from __future__ import annotations

import contextlib
import resource
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from glbdlab.netns import Lab, LabError, Netns
from glbdlab.nodes import wait_until

from glbd.cli import glbctl as ctl
from tests.glbdtoml import one_neighbour

SP_IF, LF_IF = "sp-lf", "lf-sp"
SP_ADDR, LF_ADDR = "198.18.0.1", "198.18.0.2"
METRICS = ("127.0.0.1", 9477)
IDLE = 2000


_toml = one_neighbour


def _request(sock: Path, cmd: str) -> Any:
    with contextlib.suppress(ctl.DaemonError, OSError):
        return ctl.request(str(sock), cmd, timeout=2.0)
    return None


def _wait(pred: Any, timeout: float, what: str, every: Any = None) -> Any:
    """``wait_until`` that runs ``every()`` between polls (keeps the flood up) and fails the
    test with an AssertionError (the caller adds what it saw)."""

    def poll() -> Any:
        v = pred()
        if not v and every is not None:
            every()
        return v

    try:
        return wait_until(poll, timeout, 0.5, what)
    except LabError as e:
        raise AssertionError(str(e)) from e


def _scrape(ns: Netns) -> bytes:
    with ns.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(10.0)
        s.connect(METRICS)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: glbd\r\n\r\n")
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


class _Flood:
    """``n`` idle TCP connections to the metrics endpoint from inside ``ns``. :meth:`top_up`
    replaces those the server closed or reset, and opens the rest in batches, each waited for
    (connected, reset or refused): a batch the server's backlog does not take within 3 s (a SYN
    to a full backlog is sent again after 1 s, then 2 s) means the server takes no more for now,
    and the round ends there."""

    BATCH = 50

    def __init__(self, ns: Netns, n: int) -> None:
        self.ns, self.n = ns, n
        self.socks: list[socket.socket] = []
        self.closed = 0

    def top_up(self) -> None:
        poll = select.poll()
        for s in self.socks:
            poll.register(s, select.POLLIN | select.POLLERR | select.POLLHUP)
        gone = {fd for fd, _ev in poll.poll(0)}  # an idle client gets no data: EOF or reset
        alive = []
        for s in self.socks:
            if s.fileno() in gone:
                s.close()
                self.closed += 1
            else:
                alive.append(s)
        self.socks = alive
        while len(self.socks) < self.n:
            with self.ns.entered():
                batch = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(
                    min(self.BATCH, self.n - len(self.socks)))]  # fmt: skip
            self.socks += batch
            poll = select.poll()
            for s in batch:
                s.setblocking(False)
                s.connect_ex(METRICS)
                poll.register(s, select.POLLOUT | select.POLLERR | select.POLLHUP)
            done: set[int] = set()
            end = time.monotonic() + 3.0
            while len(done) < len(batch) and time.monotonic() < end:
                done |= {fd for fd, _ev in poll.poll(100)}
            if len(done) < len(batch):
                return

    def close(self) -> None:
        for s in self.socks:
            s.close()
        self.socks = []


def _soft_nofile(n: int) -> None:
    """In the child: systemd's default soft limit, whatever pytest runs with."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (n, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


@pytest.mark.netns
@pytest.mark.slow
def test_idle_metrics_connections_do_not_starve_heartbeats(netns_lab: Lab, tmp_path: Path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 3 * IDLE:  # the flood's own descriptors
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4 * IDLE), hard))
    sp, lf = netns_lab.netns("sp"), netns_lab.netns("lf")
    netns_lab.veth(sp, SP_IF, lf, LF_IF, a_addr=f"{SP_ADDR}/30", b_addr=f"{LF_ADDR}/30")
    spine = _toml(tmp_path, "spine", "10.0.0.1", 65100, "helper", LF_ADDR, 65001, SP_ADDR, SP_IF)
    metrics = f'\n[metrics]\nlisten = "{METRICS[0]}:{METRICS[1]}"\n'
    leaf = _toml(tmp_path, "leaf", "10.0.0.2", 65001, "load-balancer", SP_ADDR, 65100, LF_ADDR,
                 LF_IF, metrics)  # fmt: skip
    lsock, ssock = leaf.parent / "glbd.sock", spine.parent / "glbd.sock"
    procs: list[subprocess.Popen[bytes]] = []
    flood = _Flood(lf, IDLE)

    def start(ns: Netns, cfg: Path, **kw: Any) -> None:
        log = open(cfg.parent / "glbd.daemon.log", "ab")  # noqa: SIM115 - handed to the child
        argv = [sys.executable, "-m", "glbd", "run", "-c", str(cfg)]
        procs.append(ns.popen(argv, stdout=log, stderr=subprocess.STDOUT, **kw))
        log.close()

    def alive() -> None:
        for p in procs:
            if p.poll() is not None:
                raise AssertionError(f"glbd exited with {p.returncode}")

    def up(sock: Path) -> bool:
        alive()
        nbs = _request(sock, "neighbors") or []
        return bool(nbs) and all(n["state"] == "up" for n in nbs)

    def spine_sending() -> bool:
        hb = _request(ssock, "heartbeats")
        return up(ssock) and bool(hb) and hb[0]["sender"]["sent"] >= 3

    try:
        start(lf, leaf, preexec_fn=lambda: _soft_nofile(1024))

        def scrape_ok() -> bool:
            alive()
            with contextlib.suppress(OSError):
                return _scrape(lf).startswith(b"HTTP/1.1 200 OK")
            return False

        _wait(scrape_ok, 60.0, "the leaf's metrics endpoint answers")
        # the stimulus: the flood is held while the session, and the leaf's heartbeat socket for
        # it, come up (the first round returns once the leaf takes no more connections)
        flood.top_up()
        start(sp, spine)
        _wait(spine_sending, 120.0, "the spine's session is up and it sends", every=flood.top_up)
        flood.close()

        def leaf_rx() -> dict[str, Any] | None:
            alive()
            hb = _request(lsock, "heartbeats")
            rx = hb[0]["receiver"] if hb else None
            return rx if rx and rx["accepted"] >= 3 else None

        try:
            _wait(leaf_rx, 60.0, "the leaf receives heartbeats after the flood")
        except AssertionError as e:
            hb = _request(lsock, "heartbeats")
            raise AssertionError(f"{e}: {hb and hb[0]['sockets']}, {hb and hb[0]}") from None
        assert up(lsock) and up(ssock)
        got = _request(lsock, "counters")["metrics"]
        assert got["dropped_over_limit"] >= IDLE // 2, got

        # an idle connection is closed by the leaf once the request timeout passes
        with lf.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.settimeout(30.0)
            s.connect(METRICS)
            with contextlib.suppress(ConnectionError):
                assert s.recv(1) == b""
        got = _request(lsock, "counters")["metrics"]
        assert got["dropped_request_timeout"] >= 1, got

        page = _scrape(lf)
        assert page.startswith(b"HTTP/1.1 200 OK")
        assert b'glbd_metrics_connections_dropped_total{reason="over_limit"}' in page
    finally:
        flood.close()
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(15)
