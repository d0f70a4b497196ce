"""Hostile neighbours and unprivileged local users against the BFD receive path, on real sockets.

* An unprivileged local user (uid 65534) cannot take port 3784 from glbd: every way of binding
  it (specific address, SO_REUSEADDR, SO_REUSEPORT, the same device, connected to the peer)
  either fails or receives nothing while glbd's socket gets every packet.
* Drops before any session (version, length, discriminator, TTL) are counted engine-wide, shown
  in the snapshot (``glbctl bfd``), the ``counters`` section (``glbctl counters``) and metrics.
* A datagram longer than the read buffer is counted (``truncated_datagram``) and processed:
  RFC 5880 §6.8.6 only needs the first Length (<= 255) bytes, which the read always holds.
"""

from __future__ import annotations

import errno
import json
import queue
import select
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from glbdlab.netns import Lab, Netns

from bfd.engine import BfdEngine, BfdEvent, SessionConfig
from bfd.packet import ControlPacket, State
from bfd.transport import BFD_PORT, Datagram, open_rx_socket, recv_batch
from glbd.config import config
from glbd.daemon.node import Node
from glbd.daemon.parts import BfdPart

A4, B4 = "198.18.0.1", "198.18.0.2"
A6, B6 = "2001:db8:bfd::1", "2001:db8:bfd::2"
SENDER_PORT = 49200
PACKETS = 10
#: generous upper bound on a datagram crossing a veth (not a speed assertion)
ARRIVAL_TIMEOUT = 5.0

#: Runs as root only until the first line: drops to nobody, then binds port 3784 the way the
#: variant says; prints the bind errno (0: bound), then, on a line from stdin, how many
#: datagrams it received.
ATTACKER = r"""
import json, os, socket, sys
fam, host, peer, ifname, variant = int(sys.argv[1]), *sys.argv[2:6]
os.setgroups([])
os.setgid(65534)
os.setuid(65534)
s = socket.socket(fam, socket.SOCK_DGRAM)
rc = 0
try:
    if "reuseaddr" in variant:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if "reuseport" in variant:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    if "device" in variant:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, ifname.encode())
    if "wildcard" in variant:
        host = "::" if fam == socket.AF_INET6 else "0.0.0.0"
    s.bind((host, 3784))
    if "connected" in variant:
        s.connect((peer, SENDER_PORT))
except OSError as e:
    rc = e.errno or -1
print(rc, flush=True)
sys.stdin.readline()
s.setblocking(False)
n = 0
while rc == 0:
    try:
        s.recv(2048)
    except BlockingIOError:
        break
    n += 1
print(n, flush=True)
""".replace("SENDER_PORT", str(SENDER_PORT))

VARIANTS = [
    "addr",
    "addr-reuseaddr",
    "addr-reuseport",
    "addr-reuseaddr-reuseport",
    "addr-reuseaddr-connected",
    "addr-reuseaddr-reuseport-connected",
    "addr-device-reuseaddr",
    "wildcard-reuseaddr-reuseport",
]

pytestmark = pytest.mark.netns


@pytest.fixture
def lab_pair(netns_lab: Lab) -> Iterator[tuple[Netns, Netns]]:
    a, b = netns_lab.pair()
    a.addr_add("a-b", A6 + "/64")
    b.addr_add("b-a", B6 + "/64")
    yield a, b


def _sender(ns: Netns, family: int) -> socket.socket:
    s = ns.socket(family, socket.SOCK_DGRAM)
    if family == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, 255)
        s.bind((B6, SENDER_PORT))
    else:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, 255)
        s.bind((B4, SENDER_PORT))
    return s


def _drain_until(sock: socket.socket, want: int, timeout: float) -> list[Datagram]:
    """Read ``sock`` until ``want`` datagrams arrived or ``timeout`` passed (an upper bound)."""
    out: list[Datagram] = []
    deadline = time.monotonic() + timeout
    while len(out) < want and (left := deadline - time.monotonic()) > 0:
        if select.select([sock], [], [], left)[0]:
            recv_batch(sock, out)
    return out


@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6], ids=["ipv4", "ipv6"])
def test_unprivileged_user_cannot_steal_bfd_packets(
    lab_pair: tuple[Netns, Netns], family: int
) -> None:
    a, b = lab_pair
    host, peer = (A6, B6) if family == socket.AF_INET6 else (A4, B4)
    with a.entered():
        rx = open_rx_socket("a-b", family)
    pkt = ControlPacket(State.DOWN, my_discriminator=7).encode()
    results: dict[str, tuple[int, int, int]] = {}
    try:
        with _sender(b, family) as tx:
            for variant in VARIANTS:
                argv = [sys.executable, "-I", "-S", "-c", ATTACKER, str(int(family))]
                proc = a.popen(
                    [*argv, host, peer, "a-b", variant],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                )
                assert proc.stdin is not None and proc.stdout is not None
                try:
                    bind_errno = int(proc.stdout.readline())
                    for _ in range(PACKETS):
                        tx.sendto(pkt, (host, BFD_PORT))
                    ours = len(_drain_until(rx, PACKETS, ARRIVAL_TIMEOUT))
                    proc.stdin.write(b"count\n")
                    proc.stdin.flush()
                    theirs = int(proc.stdout.readline())
                finally:
                    proc.stdin.close()
                    proc.stdout.close()
                    proc.wait(5)
                results[variant] = (bind_errno, ours, theirs)
    finally:
        rx.close()
    print(json.dumps(results))
    for variant, (bind_errno, ours, theirs) in results.items():
        assert bind_errno in (0, errno.EADDRINUSE, errno.EPERM), (variant, results)
        assert (ours, theirs) == (PACKETS, 0), (variant, results)


def test_port_taken_before_glbd_binds_is_a_loud_failure(lab_pair: tuple[Netns, Netns]) -> None:
    """A squatter that binds first does not silently share the port: glbd's bind fails (the
    engine reports it as the session's socket_error and retries)."""
    a, _ = lab_pair
    with a.entered():
        squat = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with squat:
        squat.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squat.bind((A4, BFD_PORT))
        with pytest.raises(OSError) as ei, a.entered():
            open_rx_socket("a-b", socket.AF_INET).close()
        assert ei.value.errno == errno.EADDRINUSE


def test_other_interfaces_and_families_still_share_the_port(lab_pair: tuple[Netns, Netns]) -> None:
    """Without SO_REUSEADDR, one receive socket per (interface, family) still binds 3784."""
    a, _ = lab_pair
    with a.entered():
        socks = [open_rx_socket(i, f) for i in ("a-b", "lo") for f in (2, 10)]
    for s in socks:
        s.close()


# --------------------------------------------------------------------------- engine counters


@pytest.fixture
def engine_a(lab_pair: tuple[Netns, Netns]) -> Iterator[tuple[BfdEngine, Netns]]:
    a, b = lab_pair
    events: queue.Queue[BfdEvent] = queue.Queue()
    eng = BfdEngine(events.put, mode="thread", netns=a.name)
    eng.start()
    try:
        eng.add_session(SessionConfig(peer=B4, interface="a-b", local=A4))
        yield eng, b
    finally:
        eng.stop()


def _wait_snapshot(eng: BfdEngine, cond: Any, what: str) -> dict[str, Any]:
    deadline = time.monotonic() + ARRIVAL_TIMEOUT
    while True:
        snap = eng.snapshot()
        if cond(snap):
            return snap
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: {json.dumps(snap.get('counters', snap))}")
        time.sleep(0.01)  # polling interval of the condition, not a wait for an outcome


HOSTILE = {
    "bad_version": bytes([0x40]) + ControlPacket(my_discriminator=5).encode()[1:],
    "bad_length": ControlPacket(my_discriminator=5).encode()[:3] + b"\x14" + bytes(20),
    "unknown_discriminator": ControlPacket(
        State.UP, my_discriminator=5, your_discriminator=0xDEAD
    ).encode(),
    "too_short": b"\x20\x40\x03",
}


async def test_drops_before_a_session_are_counted_globally(
    engine_a: tuple[BfdEngine, Netns],
) -> None:
    eng, b = engine_a
    with _sender(b, socket.AF_INET) as tx:
        for data in HOSTILE.values():
            tx.sendto(data, (A4, BFD_PORT))
        tx.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, 64)
        tx.sendto(ControlPacket(my_discriminator=5).encode(), (A4, BFD_PORT))
    want = {**dict.fromkeys(HOSTILE, 1), "bad_ttl": 1}

    def seen(snap: dict[str, Any]) -> bool:
        return bool(snap.get("counters", {}).get("unmatched_drops") == want)

    _wait_snapshot(eng, seen, "global drops")
    # the counters outlive the receive socket (closed with its last session)
    eng.remove_session("a-b", B4)
    snap = eng.snapshot()
    assert snap["sockets"] == [] and snap["counters"]["unmatched_drops"] == want
    # glbctl counters (the facade's "counters" section) and the metrics read the same numbers
    leaf = tomllib.loads((Path(__file__).resolve().parents[2] / "conf/leaf.toml").read_text())
    node = Node(cast(Any, SimpleNamespace(cfg=config.parse(leaf, "leaf.toml"))))
    node.bfd = eng
    bfd = BfdPart(node)
    assert bfd.section("counters")["unmatched_drops"] == want
    samples = {
        s.labels["reason"]: s.value
        for s in bfd.samples()
        if s.name == "glbd_bfd_unmatched_drops_total" and set(s.labels) == {"reason"}
    }
    assert samples == {r: 1.0 for r in want}


async def test_truncated_datagram_is_counted_and_processed(
    engine_a: tuple[BfdEngine, Netns],
) -> None:
    eng, b = engine_a
    pkt = ControlPacket(State.DOWN, my_discriminator=5).encode()
    with _sender(b, socket.AF_INET) as tx:
        tx.sendto(pkt + bytes(400), (A4, BFD_PORT))

    def processed(snap: dict[str, Any]) -> bool:
        [s] = snap["sessions"]
        return bool(s["packets_in"] == 1)

    snap = _wait_snapshot(eng, processed, "the padded packet was not processed")
    assert snap["counters"]["truncated_datagrams"] == 1
    assert snap["sessions"][0]["state"] == "init" and snap["counters"]["unmatched_drops"] == {}


def test_recv_batch_counts_a_truncated_datagram() -> None:
    """Loopback: the read keeps the first 256 bytes and says the datagram was longer."""
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        rx.bind(("127.0.0.1", 0))
        rx.setblocking(False)
        tx.sendto(b"y" * 300, rx.getsockname())
        tx.sendto(b"z" * 24, rx.getsockname())
        out: list[Datagram] = []
        counts: dict[str, int] = {}
        deadline = time.monotonic() + ARRIVAL_TIMEOUT
        while len(out) < 2 and time.monotonic() < deadline:
            select.select([rx], [], [], ARRIVAL_TIMEOUT)
            recv_batch(rx, out, counts=counts)
        assert [d[0] for d in out] == [b"y" * 256, b"z" * 24]
        assert counts == {"truncated_datagram": 1}
    finally:
        rx.close()
        tx.close()
