"""The engine loop reads in batches and lets datagrams gather between reads.

* A stopped engine process (SIGSTOP) finds N datagrams queued when it continues: it reads all
  of them in a handful of loop iterations, not one wakeup per datagram.
* After a wakeup that read datagrams, the loop waits (at most ``rx_coalesce``) before it reads
  again, so a steady stream is read in bursts; its injected ``sleep`` shows the waits.

Namespaces from the lab harness; waits are on conditions with generous deadlines.
"""

from __future__ import annotations

import functools
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from glbdlab.netns import Lab, Netns

from bfd.engine import BfdEngine, SessionConfig
from bfd.engine.loop import Loop
from bfd.packet import ControlPacket, State
from bfd.session import SessionParams

pytestmark = pytest.mark.netns

A4, B4 = "198.18.0.1", "198.18.0.2"
T = TypeVar("T")


def _until(get: Callable[[], T], ok: Callable[[T], bool], what: str, timeout: float = 20.0) -> T:
    deadline = time.monotonic() + timeout
    while True:
        v = get()
        if ok(v):
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {v!r}")
        time.sleep(0.02)  # poll interval


def _sender(ns: Netns) -> socket.socket:
    """A UDP socket in ``ns`` that sends with TTL 255."""
    s = ns.socket()
    s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, 255)
    return s


#: a valid Down packet naming a discriminator no session has: read, decoded, counted, dropped
STRAY = ControlPacket(State.DOWN, my_discriminator=77, your_discriminator=12345).encode()


def test_a_stopped_engine_reads_the_queued_datagrams_in_a_few_wakeups(netns_lab: Lab) -> None:
    a, b = netns_lab.pair()
    eng = BfdEngine(lambda ev: None, mode="process", netns=a.name)
    eng.start()
    netns_lab.on_close(eng.stop)
    eng.add_session(SessionConfig(B4, "a-b", A4, SessionParams()))  # opens the receive socket
    tx = _sender(b)
    n = 200
    before = eng.snapshot()["engine"]
    os.kill(eng.pid, signal.SIGSTOP)
    try:
        for _ in range(n):
            tx.sendto(STRAY, (A4, 3784))
    finally:
        os.kill(eng.pid, signal.SIGCONT)
    polls = 0

    def snap() -> dict[str, Any]:
        nonlocal polls
        polls += 1
        engine: dict[str, Any] = eng.snapshot()["engine"]
        return engine

    after = _until(snap, lambda e: e["packets_in"] >= before["packets_in"] + n, "all read")
    tx.close()
    assert after["packets_in"] == before["packets_in"] + n
    # each snapshot is one iteration; the datagrams took a few more (one per 256 at most),
    # plus the odd timer: far from one per datagram
    assert after["loop_iterations"] - before["loop_iterations"] <= polls + 10, (before, after)


def test_the_loop_waits_between_reads_while_datagrams_keep_coming(netns_lab: Lab) -> None:
    a, b = netns_lab.pair()
    waits: list[float] = []

    def sleep(s: float) -> None:
        waits.append(s)
        time.sleep(s)  # the injected sleep: the loop under test asked for it

    coalesce = 0.002
    box: dict[str, Loop] = {}
    ctl_r, ctl_w = socket.socketpair()
    ready = threading.Event()

    def serve() -> None:
        with a.entered():
            loop = Loop(lambda w: None, rx_coalesce=coalesce, sleep=sleep)
            loop.add(SessionConfig(B4, "a-b", A4, SessionParams()))
        box["loop"] = loop
        ready.set()
        loop.run(ctl_r.fileno(), lambda mask: False)

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    assert ready.wait(10)
    loop = box["loop"]
    tx = _sender(b)
    sent = 0
    try:
        end = time.monotonic() + 0.3
        while time.monotonic() < end:  # a steady stream, one datagram every ~0.1 ms
            tx.sendto(STRAY, (A4, 3784))
            sent += 1
            time.sleep(0.0001)  # the stimulus: pacing the sender
        _until(lambda: loop.rx_packets, lambda v: v >= sent, "all read")
    finally:
        ctl_w.send(b"x")  # the loop's on_ctl returns False: it stops
        th.join(10)
        tx.close()
        ctl_r.close()
        ctl_w.close()
    assert loop.rx_packets == sent
    assert waits, "the loop never waited between reads"
    assert all(0 < w <= coalesce for w in waits), waits
    # waits happen only after reads, so there are no more of them than reading wakeups
    assert len(waits) < sent


def test_no_timeout_while_the_peers_packets_wait_behind_a_backlog(netns_lab: Lab) -> None:
    """A is stopped past its detection time while b's packets queue behind 600 others. When
    A continues, it reads the peer's packets before it decides the peer went silent."""
    a, b = netns_lab.pair()
    events: list[Any] = []
    # A detects in 3 x 50 ms; B asks A for a packet every 2 s and detects in 6 s, so B stays
    # Up while A is stopped
    pa = SessionParams(desired_min_tx=50_000, required_min_rx=50_000, detect_mult=3)
    pb = SessionParams(desired_min_tx=50_000, required_min_rx=2_000_000, detect_mult=3)
    ea = BfdEngine(events.append, mode="process", netns=a.name)
    eb = BfdEngine(lambda ev: None, mode="process", netns=b.name)
    for e in (ea, eb):
        e.start()
        netns_lab.on_close(e.stop)
    ea.add_session(SessionConfig(B4, "a-b", A4, pa))
    eb.add_session(SessionConfig(A4, "b-a", B4, pb))

    def a_row() -> dict[str, Any]:
        row: dict[str, Any] = ea.snapshot()["sessions"][0]
        return row

    _until(a_row, lambda s: s["state"] == "up" and not s["polling"], "A up at 50 ms")
    _until(
        lambda: eb.snapshot()["sessions"][0],
        lambda s: s["state"] == "up" and not s["polling"],
        "B up",
    )
    events.clear()
    before = ea.snapshot()["engine"]["packets_in"]
    b_out = eb.snapshot()["sessions"][0]["packets_out"]
    tx = _sender(b)
    os.kill(ea.pid, signal.SIGSTOP)
    try:
        for _ in range(600):
            tx.sendto(STRAY, (A4, 3784))
        # B's packets queue behind them until A's detection time has long passed
        _until(
            lambda: eb.snapshot()["sessions"][0]["packets_out"],
            lambda n: n >= b_out + 6,
            "B sent 6 packets",
        )
    finally:
        os.kill(ea.pid, signal.SIGCONT)
    tx.close()
    _until(
        lambda: ea.snapshot()["engine"]["packets_in"],
        lambda n: n >= before + 606,
        "A read the backlog",
    )
    assert a_row()["state"] == "up"
    assert not [e for e in events if e.failure], events


def _rows(e: BfdEngine) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = e.snapshot()["sessions"]
    return rows


def _steady(row: dict[str, Any]) -> bool:
    return bool(row["state"] == "up" and not row["polling"])


def test_periodic_packets_share_wakeups(netns_lab: Lab) -> None:
    """With many sessions, a periodic packet due within its early margin leaves with the one
    that woke the loop: far fewer wakeups than packets."""
    a, b = netns_lab.pair(a_addr="198.18.0.1/24", b_addr="198.18.0.2/24")
    n = 32
    for i in range(n):
        a.ip("addr", "add", f"198.18.0.{100 + i}/24", "dev", "a-b")
        b.ip("addr", "add", f"198.18.0.{10 + i}/24", "dev", "b-a")
    p = SessionParams(desired_min_tx=50_000, required_min_rx=50_000, detect_mult=3)
    ea = BfdEngine(lambda ev: None, mode="process", netns=a.name)
    eb = BfdEngine(lambda ev: None, mode="process", netns=b.name)
    for e in (ea, eb):
        e.start()
        netns_lab.on_close(e.stop)
    for i in range(n):
        ea.add_session(SessionConfig(f"198.18.0.{10 + i}", "a-b", f"198.18.0.{100 + i}", p))
        eb.add_session(SessionConfig(f"198.18.0.{100 + i}", "b-a", f"198.18.0.{10 + i}", p))
    for e in (ea, eb):
        _until(
            functools.partial(_rows, e),
            lambda rows: len(rows) == n and all(_steady(r) for r in rows),
            "every session up at 50 ms",
        )

    def totals() -> tuple[int, int]:
        snap = ea.snapshot()
        return snap["engine"]["loop_iterations"], sum(r["packets_out"] for r in snap["sessions"])

    it0, out0 = totals()
    # a thousand packets (~1.4 s of 32 sessions at ~23 a second each)
    it1, out1 = _until(totals, lambda t: t[1] - out0 >= 1000, "a thousand periodic packets")
    packets, wakeups = out1 - out0, it1 - it0
    # without the early margin 0.7 wakeups a packet here, with it 0.34 (2.5 ms of deadlines each)
    assert wakeups < 0.5 * packets, (wakeups, packets)
    # The intervals: the loop hands each packet's deadline, not its wakeup, to the session
    # (``tx_periodic(deadline)``), whose next deadline follows from it; §6.8.7's bounds with
    # the early margin are checked in virtual time (test_session.test_jitter_bounds). Gaps
    # measured at the receiver were a timed assertion: a busy machine delays one packet and
    # shortens the next gap whatever the engine decided.
