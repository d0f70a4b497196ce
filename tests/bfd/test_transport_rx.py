"""recv_batch: hop limit and the kernel's arrival stamp come out of the ancillary data, and the
engine counts from that stamp only when its age is plausible."""

from __future__ import annotations

import socket
import time

import pytest

from bfd import engine
from bfd.transport import IP_RECVTTL, SO_TIMESTAMPNS, Datagram, recv_batch


def _pair(stamp: bool) -> tuple[socket.socket, socket.socket]:
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.setsockopt(socket.IPPROTO_IP, IP_RECVTTL, 1)
    if stamp:
        rx.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    rx.bind(("127.0.0.1", 0))
    rx.setblocking(False)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, 255)
    return rx, tx


@pytest.mark.parametrize("stamp", [True, False])
def test_recv_batch_reads_ttl_and_arrival_stamp(stamp: bool) -> None:
    rx, tx = _pair(stamp)
    try:
        before = time.time()
        tx.sendto(b"x" * 24, rx.getsockname())
        time.sleep(0.02)  # the datagram waits in the socket: its stamp is older than the read
        out: list[Datagram] = []
        assert recv_batch(rx, out) is None
        after = time.time()
        [(data, host, ttl, ts)] = out
        assert data == b"x" * 24 and host == "127.0.0.1" and ttl == 255
        if stamp:
            assert before - 0.001 <= ts <= after and after - ts >= 0.015
        else:
            assert ts == 0.0
    finally:
        rx.close()
        tx.close()


@pytest.mark.parametrize(("wait", "earlier"), [(0.02, True), (0.08, False)])
def test_engine_counts_from_the_arrival_stamp_when_plausible(
    wait: float, earlier: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A packet that waited ``wait`` in the socket is handed to the session core with its
    arrival time (on the loop's clock) if that age is below RX_STAMP_MAX_AGE, else with the
    read time (an engine stalled that long, or a wall clock step)."""
    rx, tx = _pair(True)
    loop = engine._Loop(lambda _ev: None)
    seen: list[float] = []
    monkeypatch.setattr(loop, "_rx_one", lambda _rx, _d, _h, _t, now: seen.append(now))
    try:
        tx.sendto(b"x" * 24, rx.getsockname())
        time.sleep(wait)
        now = time.monotonic()
        loop._read(engine._RxSock(rx, "lo", socket.AF_INET), now)
        [t] = seen
        if earlier:
            assert now - wait - 0.01 <= t <= now - wait * 0.75
        else:
            assert t == now
    finally:
        loop.close()
        rx.close()
        tx.close()
