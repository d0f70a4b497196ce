"""recv_batch: hop limit and the kernel's arrival stamp come out of the ancillary data, and the
engine counts from that stamp only when its age is plausible.

The kernel turns receive stamping on for the whole machine from a deferred work item, the first
time any socket asks for it; until that has run, a datagram is stamped when it is read. The stamp
test therefore first waits until a probe comes back stamped before its read, so it holds on a
machine where nothing else uses timestamps, and still fails if the stamp were parsed wrongly.
"""

from __future__ import annotations

import select
import socket
import time

import pytest

from bfd.engine import RX_STAMP_MAX_AGE, arrival_time
from bfd.transport import IP_RECVTTL, SO_TIMESTAMPNS, Datagram, recv_batch

#: how long the measured datagram waits in the socket: the age the stamp must show
AGE = 0.02
#: how long the kernel may take to turn receive stamps on (a work item: normally microseconds)
STAMPS_LIVE_TIMEOUT = 10.0


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


def _read_one(rx: socket.socket) -> tuple[Datagram, float]:
    """Wait until ``rx`` is readable, then read one datagram; returns it and the wall clock
    taken just before the read."""
    readable, _, _ = select.select([rx], [], [], 5.0)
    assert readable, "the datagram never arrived"
    before_read = time.time()
    out: list[Datagram] = []
    assert recv_batch(rx, out) is None
    [dgram] = out
    return dgram, before_read


def _wait_stamps_live(rx: socket.socket, tx: socket.socket) -> int:
    """Send probes until one comes back stamped before its read (the kernel stamps at
    arrival); returns how many probes it took."""
    deadline = time.monotonic() + STAMPS_LIVE_TIMEOUT
    probes = 0
    while time.monotonic() < deadline:
        probes += 1
        tx.sendto(b"probe", rx.getsockname())
        (_data, _host, _ttl, ts), before_read = _read_one(rx)
        if 0.0 < ts < before_read:
            return probes
    raise AssertionError(f"receive stamps never went live ({probes} probes)")


def test_recv_batch_reads_ttl_and_arrival_stamp() -> None:
    rx, tx = _pair(stamp=True)
    try:
        probes = _wait_stamps_live(rx, tx)
        # 1 probe: another socket already had stamps on; more: this test turned them on itself
        print(f"receive stamps live after {probes} probe(s)")
        before = time.time()
        tx.sendto(b"x" * 24, rx.getsockname())
        time.sleep(AGE)  # the stimulus: the datagram waits in the socket, so its stamp is old
        (data, host, ttl, ts), before_read = _read_one(rx)
        assert data == b"x" * 24 and host == "127.0.0.1" and ttl == 255
        assert before <= ts <= before_read
        assert before_read - ts >= AGE * 0.9
    finally:
        rx.close()
        tx.close()


def test_recv_batch_without_stamps_reports_none() -> None:
    rx, tx = _pair(stamp=False)
    try:
        tx.sendto(b"x" * 24, rx.getsockname())
        (data, host, ttl, ts), _ = _read_one(rx)
        assert (data, host, ttl, ts) == (b"x" * 24, "127.0.0.1", 255, 0.0)
    finally:
        rx.close()
        tx.close()


@pytest.mark.parametrize(
    ("age", "expected"),
    [
        (0.02, 100.0 - 0.02),  # a plausible age: detection counts from the arrival
        (RX_STAMP_MAX_AGE + 0.01, 100.0),  # too old: a stalled engine or a clock step
        (-0.5, 100.0),  # a stamp in the future: the wall clock stepped back
        (0.0, 100.0),  # stamped at the read (stamps not live yet)
    ],
)
def test_arrival_time_uses_only_a_plausible_stamp_age(age: float, expected: float) -> None:
    wall = 1_700_000_000.0
    assert arrival_time(100.0, wall, wall - age) == pytest.approx(expected, abs=1e-6)


def test_arrival_time_without_a_stamp_is_the_read_time() -> None:
    assert arrival_time(100.0, 1_700_000_000.0, 0.0) == 100.0
