"""The BFD kernel receive program (bfd/engine/kernel_rx.py) without root: its bytes against a
golden vector, and its decisions run in a small eBPF interpreter (ebpfvm.py) on the frames the
netns tests send for real (test_kernel_rx*.py): a valid repeat is taken (dropped, stamped,
counted), and each single difference the stack would reject or the engine must see passes on
untouched."""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from ebpfvm import Maps, Packet, run
from netsum import cksum

from bfd.engine.kernel_rx import SLOT_SIZE, SLOTS, program, slot_bytes
from bfd.packet import State, encode_plain

VECTOR = Path(__file__).resolve().parents[1] / "vectors" / "bfd_kernel_rx_program.hex"
IDX_FD, SLOTS_FD = 3, 4
TAKEN, PASSED = 2, -1  # TCX_DROP, TCX_NEXT
IFINDEX = 7
DISCR, SLOT = 0x01020304, 5
SPORT = 49_152
ADDR = {
    socket.AF_INET: ("192.0.2.1", "192.0.2.2"),
    socket.AF_INET6: ("2001:db8:bfd::1", "2001:db8:bfd::2"),
}
PAYLOAD = encode_plain(State.UP, 0, 3, 0xA1A2A3A4, DISCR, 50_000, 50_000)


def test_the_program_is_the_golden_vector() -> None:
    """Any change to the instructions shows here first (the netns tests need root): update the
    vector with ``python -c 'from bfd.engine.kernel_rx import program;
    print(program(3, 4).hex())'`` only with a reason in the commit."""
    prog = program(IDX_FD, SLOTS_FD)
    assert len(prog) % 8 == 0
    assert prog.hex() == VECTOR.read_text().split()[-1]


@dataclass(frozen=True)
class Frame:
    family: int = socket.AF_INET
    ttl: int = 255
    src: str | None = None
    dst: str | None = None
    sport: int = SPORT
    dport: int = 3784
    payload: bytes = PAYLOAD
    udp_sum: int | None = None  # None: the right one
    ip_sum_delta: int = 0
    frag: int = 0
    ver_ihl: int = 0x45
    trailing: bytes = b""
    pkt_type: int = 0
    vlan_present: int = 0
    ifindex: int = IFINDEX

    def net(self) -> bytes:
        peer, local = ADDR[self.family]
        src = socket.inet_pton(self.family, self.src or peer)
        dst = socket.inet_pton(self.family, self.dst or local)
        body = self.payload + self.trailing
        ulen = 8 + len(body)
        pseudo = src + dst + struct.pack("!HH", socket.IPPROTO_UDP, ulen)
        udp0 = struct.pack("!HHHH", self.sport, self.dport, ulen, 0)
        s = cksum(pseudo + udp0 + body) or 0xFFFF
        udp = struct.pack(
            "!HHHH", self.sport, self.dport, ulen, s if self.udp_sum is None else self.udp_sum
        )
        if self.family == socket.AF_INET6:
            ip = struct.pack("!IHBB", 6 << 28, ulen, socket.IPPROTO_UDP, self.ttl) + src + dst
            return ip + udp + body
        hdr = struct.pack(
            "!BBHHHBBH4s4s",
            self.ver_ihl,
            0,
            20 + ulen,
            0x1234,
            self.frag,
            self.ttl,
            socket.IPPROTO_UDP,
            0,
            src,
            dst,
        )
        ip_sum = (cksum(hdr) + self.ip_sum_delta) & 0xFFFF
        return hdr[:10] + struct.pack("!H", ip_sum) + hdr[12:] + udp + body

    def ctx(self) -> bytearray:
        c = bytearray(192)  # struct __sk_buff
        struct.pack_into("=I", c, 4, self.pkt_type)
        c[16:18] = struct.pack("!H", 0x86DD if self.family == socket.AF_INET6 else 0x0800)
        struct.pack_into("=I", c, 20, self.vlan_present)
        struct.pack_into("=I", c, 40, self.ifindex)
        return c


class Kernel:
    """The program's two maps as the engine fills them (claim, expect)."""

    def __init__(self, family: int = socket.AF_INET) -> None:
        self.slots = bytearray(SLOT_SIZE * SLOTS)
        self.idx = {struct.pack("!I", DISCR): bytearray(struct.pack("=I", SLOT))}
        peer, local = ADDR[family]
        kind, raw = slot_bytes(IFINDEX, family, peer, SPORT, local, PAYLOAD)
        base = SLOT * SLOT_SIZE
        self.slots[base + 16 : base + 16 + len(raw)] = raw
        struct.pack_into("=I", self.slots, base + 20, kind)

    def run(self, f: Frame, now_ns: int = 5_000) -> int:
        maps = Maps(hashes={IDX_FD: self.idx}, arrays={SLOTS_FD: (self.slots, SLOT_SIZE)})
        prog = program(IDX_FD, SLOTS_FD)
        return run(prog, f.ctx(), Packet(f.net()), maps, {IDX_FD: 4, SLOTS_FD: 4}, now_ns)

    def stamp_count(self) -> tuple[int, int]:
        return struct.unpack_from("=QQ", self.slots, SLOT * SLOT_SIZE)


FAMILIES = [socket.AF_INET, socket.AF_INET6]


@pytest.mark.parametrize("family", FAMILIES)
def test_a_valid_repeat_is_taken_stamped_and_counted(family: int) -> None:
    k = Kernel(family)
    assert k.run(Frame(family), now_ns=5_000) == TAKEN
    assert k.stamp_count() == (5_000, 1)
    assert k.run(Frame(family), now_ns=9_000) == TAKEN
    assert k.stamp_count() == (9_000, 2)


def _changed(family: int) -> dict[str, Frame]:
    """One field changed each; the UDP checksum stays a valid repeat's, so no other check (the
    program compares the checksum too) hides a missing one."""
    valid = Frame(family).net()
    at = 26 if family == socket.AF_INET else 46
    (repeat_sum,) = struct.unpack_from("!H", valid, at)
    f = Frame(family, udp_sum=repeat_sum)
    other = "192.0.2.9" if family == socket.AF_INET else "2001:db8:bfd::9"
    payload = bytearray(PAYLOAD)
    payload[1] ^= 0x20  # the Poll bit
    return {
        "hop limit 254": replace(f, ttl=254),
        "another source": replace(f, src=other),
        "another destination": replace(f, dst=other),
        "another source port": replace(f, sport=SPORT + 1),
        "another destination port": replace(f, dport=4784),
        "a changed payload": replace(f, payload=bytes(payload)),
        "a bad UDP checksum": replace(f, udp_sum=repeat_sum ^ 0x0101),
        "a trailing byte": replace(f, trailing=b"\0"),
        "not for this host": replace(f, pkt_type=3),
        "a VLAN tag taken out by the kernel": replace(f, vlan_present=1),
        "another interface": replace(f, ifindex=IFINDEX + 1),
        "an unknown discriminator": replace(
            f, payload=encode_plain(State.UP, 0, 3, 0xA1A2A3A4, DISCR + 1, 50_000, 50_000)
        ),
    }


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("what", list(_changed(socket.AF_INET)))
def test_one_difference_goes_to_the_socket(family: int, what: str) -> None:
    k = Kernel(family)
    assert k.run(_changed(family)[what]) == PASSED, what
    assert k.stamp_count() == (0, 0)


@pytest.mark.parametrize(
    "frame",
    [
        Frame(ip_sum_delta=1),  # a bad IPv4 header checksum
        Frame(frag=0x2000),  # more fragments
        Frame(frag=0x0001),  # a fragment offset
        Frame(ver_ihl=0x46),  # options announced (the header checksum still right)
    ],
    ids=["bad IPv4 header checksum", "MF", "fragment offset", "IHL 6"],
)
def test_ipv4_only_checks(frame: Frame) -> None:
    k = Kernel()
    assert k.run(frame) == PASSED
    assert k.stamp_count() == (0, 0)


def test_a_zero_udp_checksum_is_taken_over_ipv4_only() -> None:
    assert Kernel().run(Frame(udp_sum=0)) == TAKEN
    assert Kernel(socket.AF_INET6).run(Frame(socket.AF_INET6, udp_sum=0)) == PASSED


def test_a_slot_switched_off_takes_nothing() -> None:
    k = Kernel()
    struct.pack_into("=I", k.slots, SLOT * SLOT_SIZE + 20, 0)  # what the engine's clear writes
    assert k.run(Frame()) == PASSED
    # and a slot of the other family does not match either
    k = Kernel(socket.AF_INET6)
    assert k.run(Frame(socket.AF_INET)) == PASSED


def test_a_short_packet_passes() -> None:
    k = Kernel()
    f = Frame()
    ctx = f.ctx()
    maps = Maps(hashes={IDX_FD: k.idx}, arrays={SLOTS_FD: (k.slots, SLOT_SIZE)})
    prog = program(IDX_FD, SLOTS_FD)
    assert run(prog, ctx, Packet(f.net()[:40]), maps, {IDX_FD: 4, SLOTS_FD: 4}) == PASSED
