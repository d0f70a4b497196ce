"""What the BFD kernel receive path must leave to the stack, on real sockets: the peer in ``a``
writes whole Ethernet frames (an ``AF_PACKET`` socket), so each test can change one thing the
kernel path must check and nothing else.

Each test first shows that a valid repeat written this way is taken by the kernel, then sends
the variant followed by a barrier (the same repeat with hop limit 254: never taken, read and
dropped as ``bad_ttl``) from the same CPU, so the variant has been through the program once the
barrier is counted; then it waits for one of the session's transmissions (the engine reads the
kernel's count before each) and checks that the kernel took nothing:

* a VLAN tag of any kind (802.1Q, 802.1ad, priority-tagged, QinQ): the frame is not for the
  untagged port;
* an IP destination other than the session's local address (another address of this host, or
  one it does not have);
* a bad IPv4 header checksum, a bad UDP checksum, an IPv6 UDP checksum of 0 (the stack drops
  them; an IPv4 UDP checksum of 0 means none, and is taken);
* a UDP source port other than the session's: the engine drops it too (``wrong_source_port``).
"""

from __future__ import annotations

import os
import random
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from bfdwait import until
from glbdlab.netns import Lab
from netsum import cksum
from test_kernel_rx import PEER_DISCR, PEER_PORT, Rig

from bfd.packet import State

pytestmark = pytest.mark.netns

#: addresses of the engine's namespace other than the session's local one, by family
OTHER_LOCAL = {socket.AF_INET: "198.18.0.5", socket.AF_INET6: "2001:db8:bfd::5"}
FOREIGN = {socket.AF_INET: "198.18.0.77", socket.AF_INET6: "2001:db8:bfd::77"}
Q, AD = 0x8100, 0x88A8


@dataclass
class Variant:
    """How a frame differs from a valid repeat (None: as a valid one has it)."""

    tags: list[tuple[int, int]] = field(default_factory=list)  # (TPID, VLAN id), outer first
    dst: str | None = None
    sport: int = PEER_PORT
    ip_csum: int | None = None
    udp_csum: int | None = None
    hops: int = 255


class RawPeer:
    """Writes Ethernet frames from the peer's side of the link."""

    def __init__(self, lab: Lab, rig: Rig) -> None:
        self.rig = rig
        mac = {
            i: bytes.fromhex(ns.run(["cat", f"/sys/class/net/{i}/address"]).stdout.strip()
                             .replace(":", ""))
            for ns, i in ((rig.a, "a-b"), (rig.b, "b-a"))
        }  # fmt: skip
        self.eth = mac["b-a"] + mac["a-b"]
        self.sock = rig.a.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        lab.on_close(self.sock.close)
        self.sock.bind(("a-b", 0))

    def frame(self, payload: bytes, v: Variant | None = None) -> bytes:
        v = v or Variant()
        fam = self.rig.family
        src = socket.inet_pton(fam, self.rig.peer)
        dst = socket.inet_pton(fam, v.dst or self.rig.local)
        ulen = 8 + len(payload)
        if fam == socket.AF_INET:
            pseudo = src + dst + struct.pack("!BBH", 0, socket.IPPROTO_UDP, ulen)
        else:
            pseudo = src + dst + struct.pack("!I3xB", ulen, socket.IPPROTO_UDP)
        udp = struct.pack("!HHHH", v.sport, 3784, ulen, 0) + payload
        csum = (cksum(pseudo + udp) or 0xFFFF) if v.udp_csum is None else v.udp_csum
        udp = udp[:6] + struct.pack("!H", csum) + udp[8:]
        if fam == socket.AF_INET:
            ident = random.randrange(1 << 16)  # varies, as from a connected socket
            ip = struct.pack(
                "!BBHHHBBH4s4s", 0x45, 0xC0, 20 + ulen, ident, 0x4000, v.hops, 17, 0, src, dst
            )
            ipc = cksum(ip) if v.ip_csum is None else v.ip_csum
            ip = ip[:10] + struct.pack("!H", ipc) + ip[12:]
            etype = 0x0800
        else:
            ip = struct.pack("!IHBB16s16s", 0x60000000, ulen, 17, v.hops, src, dst)
            etype = 0x86DD
        tags = b"".join(struct.pack("!HH", tpid, vid) for tpid, vid in v.tags)
        return self.eth + tags + struct.pack("!H", etype) + ip + udp

    def send(self, *frames: bytes) -> None:
        """Send ``frames`` in order from one CPU (a veth queues a frame on the sender's CPU:
        frames sent from one are received in order)."""
        cpus = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {min(cpus)})
        try:
            for f in frames:
                self.sock.send(f)
        finally:
            os.sched_setaffinity(0, cpus)


class Strict:
    def __init__(self, lab: Lab, kind: str) -> None:
        self.rig = Rig(lab, kind)
        fam = self.rig.family
        self.rig.b.addr_add("b-a", OTHER_LOCAL[fam] + ("/32" if fam == socket.AF_INET else "/128"))
        self.raw = RawPeer(lab, self.rig)
        self.steady = self.rig.up()

    def taken_by_kernel(self, v: Variant | None = None, n: int = 1) -> None:
        """``n`` frames of ``v`` are taken by the kernel (not read from the socket)."""
        rig = self.rig
        k0 = rig.kernel_packets()
        read0 = rig.socket_row()["packets_in"]
        self.raw.send(*[self.raw.frame(self.steady, v)] * n)
        until(rig.kernel_packets, lambda k: k >= k0 + n, f"{n} taken by the kernel")
        assert rig.kernel_packets() == k0 + n
        assert rig.socket_row()["packets_in"] == read0

    def not_taken(self, v: Variant) -> int:
        """Send ``v`` then the barrier; returns how many the kernel took (waits for the engine
        to read the kernel's count after the barrier was read)."""
        rig = self.rig
        k0 = rig.kernel_packets()
        ttl0 = rig.socket_row()["drops"].get("bad_ttl", 0)
        barrier = self.raw.frame(self.steady, Variant(hops=254))
        self.raw.send(self.raw.frame(self.steady, v), barrier)
        until(rig.socket_row, lambda r: r["drops"].get("bad_ttl", 0) > ttl0, "the barrier")
        out0 = rig.session()["packets_out"]
        until(rig.session, lambda s: s["packets_out"] > out0, "a transmission (reads the count)")
        return rig.kernel_packets() - k0


KINDS = {"ipv4": socket.AF_INET, "ipv6": socket.AF_INET6}


@pytest.fixture(params=list(KINDS))
def strict(request: pytest.FixtureRequest, netns_lab: Lab) -> Iterator[Strict]:
    st = Strict(netns_lab, request.param)
    st.taken_by_kernel()  # the control: a valid repeat written this way is taken
    yield st


@pytest.mark.parametrize(
    "tags",
    [[(Q, 100)], [(AD, 200)], [(Q, 0)], [(AD, 200), (Q, 100)]],
    ids=["8021q", "8021ad", "priority-tag", "qinq"],
)
def test_a_vlan_tagged_frame_is_not_taken(strict: Strict, tags: list[tuple[int, int]]) -> None:
    assert strict.not_taken(Variant(tags=tags)) == 0
    strict.taken_by_kernel()


@pytest.mark.parametrize("which", ["other-local", "foreign"])
def test_another_destination_is_not_taken(strict: Strict, which: str) -> None:
    fam = strict.rig.family
    dst = OTHER_LOCAL[fam] if which == "other-local" else FOREIGN[fam]
    read0 = strict.rig.socket_row()["packets_in"]
    assert strict.not_taken(Variant(dst=dst)) == 0
    if which == "other-local":  # the stack delivers it: the engine reads it (and the barrier)
        assert strict.rig.socket_row()["packets_in"] >= read0 + 2
    strict.taken_by_kernel()


def test_a_bad_ipv4_header_checksum_is_not_taken(netns_lab: Lab) -> None:
    st = Strict(netns_lab, "ipv4")
    st.taken_by_kernel(n=3)  # IP ids (so header checksums) vary: each is checked, all taken
    good = st.raw.frame(st.steady)
    bad = struct.unpack_from("!H", good, 24)[0] ^ 0x0100
    assert st.not_taken(Variant(ip_csum=bad)) == 0


def test_a_bad_udp_checksum_is_not_taken(strict: Strict) -> None:
    good = strict.raw.frame(strict.steady)
    at = 14 + (20 if strict.rig.family == socket.AF_INET else 40) + 6
    bad = struct.unpack_from("!H", good, at)[0] ^ 0x0001
    assert strict.not_taken(Variant(udp_csum=bad)) == 0
    strict.taken_by_kernel()


def test_a_zero_udp_checksum_is_not_taken_over_ipv6(netns_lab: Lab) -> None:
    st = Strict(netns_lab, "ipv6")
    assert st.not_taken(Variant(udp_csum=0)) == 0


def test_a_zero_udp_checksum_is_taken_over_ipv4(netns_lab: Lab) -> None:
    st = Strict(netns_lab, "ipv4")  # none: the stack accepts it
    st.taken_by_kernel(Variant(udp_csum=0))


def test_another_source_port_is_not_taken_and_dropped(strict: Strict) -> None:
    assert strict.not_taken(Variant(sport=PEER_PORT + 1)) == 0
    s = until(strict.rig.session, lambda s: "wrong_source_port" in s["drops"], "the drop")
    assert s["drops"] == {"wrong_source_port": 1} and s["state"] == "up"
    strict.taken_by_kernel()  # the session's own port still is


def test_a_restarted_peer_on_a_new_port_is_heard_at_once(netns_lab: Lab) -> None:
    """The port is the remote session's: a new discriminator from a new port (the peer's BFD
    restarted) is judged, not dropped -- here it brings the session Down at once."""
    st = Strict(netns_lab, "ipv4")
    rig = st.rig
    restarted = rig.a.socket(rig.family, socket.SOCK_DGRAM)
    try:
        restarted.bind(rig.sockaddr(rig.peer, PEER_PORT + 2))
        rig.hops(restarted, 255)
        down = rig.packet(State.DOWN, 0)
        down = down[:4] + struct.pack("!I", PEER_DISCR + 1) + down[8:]
        rig.send(down, s=restarted)
        ev = rig.wait_state(State.DOWN)
    finally:
        restarted.close()
    assert ev.reason == "neighbor_down"
    assert "wrong_source_port" not in rig.session()["drops"]
