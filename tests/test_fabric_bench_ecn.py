"""bench.fabric.ecn: the shallow profile's ECN marker marks as a switch's WRED/ECN profile
would, in the real kernel: never below the queue's threshold, nearly every packet of a full
queue, never a packet that is not ECN-capable, with a valid IPv4 checksum."""

from __future__ import annotations

import socket
import sys
import time

import pytest
from glbdlab.netns import Lab, Netns

from bench.fabric import ecn

RATE_BPS = 2_000_000
BURST = 8000
QLEN = 20  # packets of the pfifo under the tbf
SIZE = 1472  # UDP payload: full-size frames, as the pfifo limit counts them
WIRE = SIZE + 8 + 20 + 14
IP_RECVTOS = getattr(socket, "IP_RECVTOS", 13)
ECT0, CE = 0x02, 0x03


def _shape(a: Netns, marker: ecn.Marker | None) -> None:
    lines = [
        f"qdisc replace dev a-b root handle 1: tbf rate {RATE_BPS} burst {BURST} latency 1s",
        f"qdisc replace dev a-b parent 1:1 handle 10: pfifo limit {QLEN}",
    ]
    if marker is not None:
        lines += ecn.tc_lines("a-b", ecn.build_object(marker))
    a.run(["tc", "-batch", "-"], input="\n".join(lines) + "\n")


def _known_neighbour(a: Netns, b: Netns, addr: str) -> None:
    """``addr`` (b's end) resolved on a's link for good: nothing is sent to find it."""
    mac = b.run(["cat", "/sys/class/net/b-a/address"]).stdout.strip()
    a.ip("neigh", "replace", addr, "lladdr", mac, "dev", "a-b", "nud", "permanent")


#: per family: the socket options that set and receive the ECN bits, and the payload that
#: makes a full-size frame (IPv6's header is 20 octets longer)
_FAMILY = {
    socket.AF_INET: ((socket.IPPROTO_IP, socket.IP_TOS), (socket.IPPROTO_IP, IP_RECVTOS), SIZE),
    socket.AF_INET6: (
        (socket.IPPROTO_IPV6, socket.IPV6_TCLASS),
        (socket.IPPROTO_IPV6, getattr(socket, "IPV6_RECVTCLASS", 66)),
        SIZE - 20,
    ),
}


_ECN_LEVELS = (socket.IPPROTO_IP, socket.IPPROTO_IPV6)


def _family(addr: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def _send(a: Netns, dst: tuple[str, int], n: int, pps: float, tos: int) -> None:
    """``n`` datagrams numbered 0.., one every 1/pps s; a late sender never catches up, so
    the queue can only be shorter than planned, never longer."""
    family = _family(dst[0])
    (level, opt), _, size = _FAMILY[family]
    with a.socket(family, socket.SOCK_DGRAM) as tx:
        tx.setsockopt(level, opt, tos)
        for i in range(n):
            tx.sendto(i.to_bytes(4, "big") + bytes(size - 4), dst)
            time.sleep(1 / pps)  # pacing the offered load, not waiting for a condition


def _receive(rx: socket.socket, want: int) -> list[tuple[int, int]]:
    """(sequence number, ECN bits) of what arrives, until ``want`` or a quiet second."""
    got: list[tuple[int, int]] = []
    rx.settimeout(1.0)
    while len(got) < want:
        try:
            data, anc, _, _ = rx.recvmsg(SIZE, socket.CMSG_SPACE(4))
        except TimeoutError:
            break
        # IPv4's TOS arrives as one octet, IPv6's traffic class as a host-order int
        tos = next((int.from_bytes(c[2][:4], sys.byteorder) for c in anc if c[0] in _ECN_LEVELS), 0)
        got.append((int.from_bytes(data[:4], "big"), tos & 3))
    return got


def _exchange(
    lab: Lab,
    marker: ecn.Marker | None,
    n: int,
    pps: float,
    tos: int,
    addrs: tuple[str, str] = ("198.18.0.1/30", "198.18.0.2/30"),
) -> list[tuple[int, int]]:
    """``n`` datagrams from a to b through a's shaped link: what b receives."""
    a, b = lab.pair(a_addr=addrs[0], b_addr=addrs[1])
    _shape(a, marker)
    dst = addrs[1].split("/")[0]
    _known_neighbour(a, b, dst)  # no datagram waits for (and is lost to) address resolution
    family = _family(dst)
    _, (level, opt), _ = _FAMILY[family]
    with b.socket(family, socket.SOCK_DGRAM) as rx:
        rx.setsockopt(level, opt, 1)
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
        rx.bind((dst, 0))
        _send(a, rx.getsockname()[:2], n, pps, tos)
        return _receive(rx, n)


MARKER = ecn.Marker(RATE_BPS, BURST, QLEN * ecn.MTU_WIRE)
LINE_PPS = RATE_BPS / 8 / WIRE  # 165 packets a second fill the link


def test_marker_thresholds_and_build() -> None:
    assert MARKER.min_bytes == int(QLEN * 1514 * 0.55)
    assert MARKER.max_bytes == int(QLEN * 1514 * 0.90)
    assert "-DMIN_BYTES=16654ULL" in MARKER.defines()
    assert ecn.build_object(MARKER).stat().st_size > 0
    # the bench's tbf burst, as tc reads it
    assert ecn.tc_size_bytes("64kbit") == 8000 and ecn.tc_size_bytes("8kb") == 8192
    assert ecn.tc_size_bytes("1500") == ecn.tc_size_bytes("1500b") == 1500


@pytest.mark.netns
def test_a_queue_below_the_threshold_is_never_marked(netns_lab: Lab) -> None:
    got = _exchange(netns_lab, MARKER, 120, LINE_PPS / 2, ECT0)
    assert len(got) == 120
    assert all(e == ECT0 for _, e in got)


@pytest.mark.netns
def test_a_full_queue_marks_ecn_capable_packets(netns_lab: Lab) -> None:
    got = _exchange(netns_lab, MARKER, 600, 3 * LINE_PPS, ECT0)
    marked = [seq for seq, e in got if e == CE]
    # the queue fills and drops: what arrives is at least the link's share, checksums valid
    assert 600 / 3 * 0.5 < len(got) < 600
    assert len(marked) > 0.6 * len(got)
    # a queue that never held the threshold marks nothing: the tbf's burst leaves at once,
    # and the first packets of the overload find less than MIN_BYTES queued behind it
    first = (BURST + MARKER.min_bytes) // WIRE
    assert min(marked) >= first
    a_marks = ecn.counters(netns_lab.namespaces["a"], "a-b")
    assert a_marks["marked"] >= len(marked) and a_marks["over"] > 0


@pytest.mark.netns
def test_packets_that_are_not_ecn_capable_are_dropped_not_marked(netns_lab: Lab) -> None:
    got = _exchange(netns_lab, MARKER, 600, 3 * LINE_PPS, 0)
    assert 600 / 3 * 0.5 < len(got) < 600
    assert all(e == 0 for _, e in got)


@pytest.mark.netns
def test_without_the_marker_a_full_queue_only_drops(netns_lab: Lab) -> None:
    got = _exchange(netns_lab, None, 600, 3 * LINE_PPS, ECT0)
    assert len(got) < 600
    assert all(e == ECT0 for _, e in got)


@pytest.mark.netns
def test_the_marker_hands_every_packet_to_the_next_filter(netns_lab: Lab) -> None:
    # glbd's foreign-load counter sits behind the marker on the same egress hook: a marker
    # that ended classification would hide the hotspot's traffic from it
    a, b = netns_lab.pair()
    _shape(a, MARKER)
    _known_neighbour(a, b, "198.18.0.2")
    # a classic BPF filter behind it that drops everything (direct action, returns TC_ACT_SHOT)
    drop = ["filter", "add", "dev", "a-b", "egress", "pref", "2", "bpf", "da", "bytecode"]
    a.run(["tc", *drop, "1,6 0 0 2,"])
    with b.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx:
        rx.bind(("198.18.0.2", 0))
        _send(a, rx.getsockname(), 20, LINE_PPS, ECT0)
        assert _receive(rx, 20) == []
    assert ecn.counters(a, "a-b")["packets"] >= 20


@pytest.mark.netns
def test_ipv6_packets_are_marked_in_their_traffic_class(netns_lab: Lab) -> None:
    addrs = ("fd00:ec::1/64", "fd00:ec::2/64")
    got = _exchange(netns_lab, MARKER, 600, 3 * LINE_PPS, ECT0, addrs)
    assert 600 / 3 * 0.5 < len(got) < 600
    assert sum(e == CE for _, e in got) > 0.6 * len(got)
    assert {e for _, e in got} <= {ECT0, CE}
