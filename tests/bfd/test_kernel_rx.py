"""The BFD engine's kernel receive path (``bfd/engine/kernel_rx.py``) on real sockets: a glbd
engine in one namespace, a scripted peer in the other that sends exactly the bytes it chooses,
over IPv4, IPv6 and IPv6 link-local addresses (as on unnumbered links).

* The steady state's repeats are taken by the BPF program: they reach the session (counted,
  detection restarted) without being read from the socket, and without a UDP receive error or
  an interface drop (an operator's monitoring would see those).
* What a compromised neighbour changes goes to the socket and is judged there: the same bytes
  with a hop limit below 255 (RFC 5881 §5) or from another address are dropped by reason, and
  a packet that changes the state is seen at once.
* Without the kernel path (``kernel_rx=False``) every packet is read, and the session is the same.

The peer's veth computes its UDP checksums itself (transmit checksum offload off), as a NIC's
peer on a wire would: a veth frame with the offload on carries only the pseudo-header's sum
(``CHECKSUM_PARTIAL``), which the kernel path leaves to the socket (see its docstring).
"""

from __future__ import annotations

import queue
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from bfdwait import next_event, until
from glbdlab.netns import Lab

from bfd.engine import BfdEngine, BfdEvent, SessionConfig
from bfd.packet import ControlPacket, State
from bfd.session import SessionParams

pytestmark = pytest.mark.netns

PEER_DISCR = 0x5EED
PEER_PORT = 49200
#: 1 s both ways, detection 5 s: the scripted peer sends when the test says, no Poll at Up
SLOW = SessionParams(desired_min_tx=1_000_000, required_min_rx=1_000_000, detect_mult=5)
#: (peer, glbd's end, another address of the peer's) by kind; link-local as on unnumbered links
ADDRS = {
    "ipv4": ("198.18.0.1", "198.18.0.2", "198.18.0.9"),
    "ipv6": ("2001:db8:bfd::1", "2001:db8:bfd::2", "2001:db8:bfd::9"),
    "ipv6-link-local": ("fe80::a", "fe80::b", "fe80::9"),
}


class Rig:
    """glbd's engine in ``b`` with one session to the scripted peer in ``a``."""

    def __init__(self, lab: Lab, kind: str, kernel_rx: bool = True) -> None:
        self.family = socket.AF_INET if kind == "ipv4" else socket.AF_INET6
        self.peer, self.local, self.other = ADDRS[kind]
        self.a, self.b = lab.pair()
        if self.family == socket.AF_INET6:
            self.a.addr_add("a-b", self.peer + "/64")
            self.b.addr_add("b-a", self.local + "/64")
            self.a.addr_add("a-b", self.other + "/128")
        else:
            self.a.addr_add("a-b", self.other + "/32")
        with self.a.entered():  # a link-local address needs the interface's scope
            self.scope = socket.if_nametoindex("a-b") if kind.endswith("link-local") else 0
        # where the engine's own packets go (else its sends meet ICMP port unreachable)
        self.sink = self.a.socket(self.family, socket.SOCK_DGRAM)
        self.sink.bind(self.sockaddr(self.peer, 3784))
        lab.on_close(self.sink.close)
        self.events: queue.Queue[BfdEvent] = queue.Queue()
        self.engine = BfdEngine(self.events.put, netns=self.b.name, kernel_rx=kernel_rx)
        self.engine.start()
        lab.on_close(self.engine.stop)
        self.engine.add_session(SessionConfig(self.peer, "b-a", self.local, SLOW))
        self.tx = self.sender(self.peer)
        lab.on_close(self.tx.close)

    def sockaddr(self, host: str, port: int) -> tuple[str, int] | tuple[str, int, int, int]:
        return (host, port, 0, self.scope) if self.family == socket.AF_INET6 else (host, port)

    def sender(self, src: str) -> socket.socket:
        s = self.a.socket(self.family, socket.SOCK_DGRAM)
        s.bind(self.sockaddr(src, PEER_PORT))
        self.hops(s, 255)
        return s

    def hops(self, s: socket.socket, n: int) -> None:
        if self.family == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, n)
        else:
            s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, n)

    def packet(self, state: State, your: int) -> bytes:
        return ControlPacket(
            state,
            my_discriminator=PEER_DISCR,
            your_discriminator=your,
            desired_min_tx=SLOW.desired_min_tx,
            required_min_rx=SLOW.required_min_rx,
            detect_mult=SLOW.detect_mult,
        ).encode()

    def send(self, data: bytes, n: int = 1, s: socket.socket | None = None) -> None:
        for _ in range(n):
            (s or self.tx).sendto(data, self.sockaddr(self.local, 3784))

    def snap(self) -> dict[str, Any]:
        return self.engine.snapshot()

    def session(self) -> dict[str, Any]:
        return dict(self.snap()["sessions"][0])

    def socket_row(self) -> dict[str, Any]:
        return dict(self.snap()["sockets"][0])

    def wait_state(self, new: State) -> BfdEvent:
        return next_event(self.events, lambda ev: ev.new == new, 5.0, self.session)

    def up(self) -> bytes:
        """The three-way handshake; returns the steady packet (accepted once, so the engine
        now expects its repeats)."""
        mine = until(self.session, lambda s: s["local_discriminator"] > 0, "a discriminator")
        discr = int(mine["local_discriminator"])
        self.send(self.packet(State.DOWN, 0))
        self.wait_state(State.INIT)
        steady = self.packet(State.UP, discr)
        self.send(steady)
        self.wait_state(State.UP)
        self.send(steady)  # the first repeat: the one that tells the engine it is steady
        until(self.session, lambda s: s["packets_in"] >= 3, "the handshake read")
        return steady

    def kernel_packets(self) -> int:
        return int(self.snap()["engine"]["kernel_rx"]["packets"])

    def ns_counters(self) -> tuple[int, int]:
        """(UDP InErrors of both families, rx_dropped of b-a) in ``b``."""
        snmp = self.b.run(["cat", "/proc/net/snmp", "/proc/net/snmp6"]).stdout.splitlines()
        udp = [ln.split() for ln in snmp if ln.startswith("Udp:")]
        v4 = int(udp[1][udp[0].index("InErrors")])
        v6 = next(int(ln.split()[1]) for ln in snmp if ln.startswith("Udp6InErrors"))
        drops = int(self.b.run(["cat", "/sys/class/net/b-a/statistics/rx_dropped"]).stdout)
        return v4 + v6, drops


@pytest.fixture(params=list(ADDRS))
def rig(request: pytest.FixtureRequest, netns_lab: Lab) -> Iterator[Rig]:
    yield Rig(netns_lab, request.param)


def test_repeats_are_taken_in_the_kernel_without_errors_or_reads(rig: Rig) -> None:
    steady = rig.up()
    engine = rig.snap()["engine"]["kernel_rx"]
    assert engine["enabled"] and engine["interfaces"] == 1 and not engine["error"]
    assert rig.socket_row()["kernel_path"]
    read0 = rig.socket_row()["packets_in"]
    in0 = rig.session()["packets_in"]
    k0 = rig.kernel_packets()
    errors0 = rig.ns_counters()
    rig.send(steady, 20)
    until(rig.kernel_packets, lambda k: k >= k0 + 20, "20 repeats taken by the kernel")
    s = until(rig.session, lambda s: s["packets_in"] >= in0 + 20, "counted for the session")
    assert s["state"] == "up" and s["drops"] == {} and s["kernel_rx"]
    assert rig.socket_row()["packets_in"] == read0  # none of them was read from the socket
    assert rig.ns_counters() == errors0  # no UDP receive error, no interface drop
    counters = rig.snap()["counters"]
    assert counters["kernel_packets_in"] >= 20 and counters["packets_in"] >= in0 + 20


def test_a_changed_hop_limit_or_source_goes_to_the_socket_and_is_dropped(rig: Rig) -> None:
    steady = rig.up()
    k0 = rig.kernel_packets()
    rig.hops(rig.tx, 254)
    rig.send(steady, 3)
    row = until(rig.socket_row, lambda r: r["drops"].get("bad_ttl", 0) >= 3, "bad_ttl")
    assert row["drops"]["bad_ttl"] == 3
    rig.hops(rig.tx, 255)
    spoof = rig.sender(rig.other)  # the same bytes and port from another address
    try:
        rig.send(steady, 3, spoof)
        s = until(rig.session, lambda s: s["drops"].get("wrong_peer", 0) >= 3, "wrong_peer drops")
    finally:
        spoof.close()
    assert s["drops"]["wrong_peer"] == 3 and s["state"] == "up"
    assert rig.kernel_packets() == k0  # not one of the six was taken by the kernel
    # a packet that changes something is seen at once: the peer going Down
    rig.send(rig.packet(State.DOWN, int(s["local_discriminator"])))
    ev = rig.wait_state(State.DOWN)
    assert ev.reason == "neighbor_down" and ev.failure
    assert not rig.session()["kernel_rx"]  # Down: every packet matters again


def test_without_the_kernel_path_every_packet_is_read(netns_lab: Lab) -> None:
    rig = Rig(netns_lab, "ipv4", kernel_rx=False)
    steady = rig.up()
    engine = rig.snap()["engine"]["kernel_rx"]
    assert not engine["enabled"] and engine["error"] == "off"
    read0 = rig.socket_row()["packets_in"]
    rig.send(steady, 20)
    until(rig.socket_row, lambda r: r["packets_in"] >= read0 + 20, "20 repeats read")
    assert rig.kernel_packets() == 0 and rig.session()["state"] == "up"
    assert not rig.session()["kernel_rx"]
