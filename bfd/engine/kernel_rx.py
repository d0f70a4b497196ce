"""The steady-state receive path in the kernel: a tc ingress BPF program (tcx link) that stamps
and consumes the peer's repeated packets, so the engine reads only packets that change something.

A session in the steady state receives the same 24 bytes every interval (RFC 5880: nothing but
the detection timer depends on them). For such a session the engine writes what it expects into
a *slot* of an mmap-able array map: the interface, the peer's address and UDP ports, the
session's local address, the UDP checksum and the payload it last accepted. The program, on
every IPv4/IPv6 packet the interface receives for this host, looks Your Discriminator up (a hash
map to the slot) and, if everything matches, writes the arrival time (``CLOCK_MONOTONIC``) and a
count into the slot and drops the packet (``TCX_DROP``): no socket queue, wakeup, ``recvmsg`` or
interpreter work. Anything else goes on untouched (``TCX_NEXT``) to the socket, the stack's own
checks and the engine's general path: a first packet, a change, a Poll or Final (the engine
clears the slot while it may have to answer), authentication, a packet from another address or
port or to another address, a hop limit below 255 (RFC 5881 §5), IPv4 options or fragments, any
trailing byte, a VLAN tag, or a checksum the stack might reject. The engine reads the stamps from
the mmap before each transmission and before a detection timeout, so detection still counts from
the arrival.

The program takes a frame only if the stack would have delivered it to the session's socket:

* No VLAN tag. On ingress the kernel moves the outer tag (802.1Q or 802.1ad, any id, 0 too)
  into the skb before tc runs (``__sk_buff.vlan_present``), and ``__sk_buff.protocol`` is the
  frame's ethertype after it (set from the frame by ``eth_type_trans`` and moved on with the
  tag): a tag still in the frame (the inner one of QinQ) shows as 0x8100/0x88A8, not IP.
* Addressed to the session's local address (the one its packets leave from), not only to this
  host's MAC (``PACKET_HOST``).
* The IPv4 header checksum: verified in the program, as ``ip_rcv`` does (it covers the
  identification, which a connected sender changes every packet).
* The UDP checksum: it covers the pseudo-header (source, destination, protocol, length), the
  UDP header and the payload, and the program matches every one of those bytes against the slot
  except the checksum itself. So the checksum of a valid repeat is a function of the slot alone:
  the engine computes it (:func:`udp_checksum`) and the program compares the field to it; the
  one other value the stack accepts is 0 over IPv4 ("no checksum"), taken too. Over IPv6 the
  slot's value is never 0, so a zero checksum is never taken. Hence a taken frame's checksum is
  always one the stack accepts. (The engine cannot compare against "the last packet the stack
  validated": a socket never shows the field. A frame from a local sender -- a veth peer, a
  virtio host -- may carry only the pseudo-header sum, ``CHECKSUM_PARTIAL``, which the stack
  trusts for that frame alone: such frames are not taken, they go to the socket.)
* From the UDP port the session learned (the engine drops another port while Up, see
  :mod:`.loop`).

Why a tc program and not a socket filter: a socket filter's drop counts as a UDP receive error
(``UdpInErrors``) and a socket drop, 100 a second per session. A tcx link (Linux 6.6+) belongs to
the file descriptor: it goes away with the engine process, so a crash leaves nothing attached.
A dropped packet shows only in the kernel's drop tracepoint (reason ``TC_INGRESS``).

Why an assembler here and not C built with clang (as glbd's flowlet program is): the ``bfd``
package uses only the standard library and must load without libbpf or bpftool, and the program
is 181 instructions with two maps; :class:`Asm` writes it and one ``bpf()`` call loads it, with
no ELF, BTF or pinned objects to clean up. What C would give, the assembler is held to by tests:
the bytes are a golden vector (tests/vectors/bfd_kernel_rx_program.hex), and every check is run
without root in an eBPF interpreter (tests/bfd/test_kernel_rx_program.py) on the frames the
netns tests send for real, each check removed once to show a test fails. Where it cannot load
or attach (an older kernel, no ``CAP_BPF``/``CAP_NET_ADMIN``), :func:`open_kernel_rx` says why
and the engine reads every packet itself, as before.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import mmap
import os
import platform
import socket
import struct
import sys
from typing import Any

__all__ = [
    "SLOTS",
    "KernelRx",
    "KernelRxError",
    "Slot",
    "open_kernel_rx",
    "program",
    "slot_bytes",
    "udp_checksum",
]

#: sessions that can use the kernel path at once (the rest use the general path)
SLOTS = 4096
SLOT_SIZE = 96
# slot layout (bytes): 0 stamp (u64, kernel), 8 count (u64, kernel), 16 ifindex (u32),
# 20 kind (u32: 0 off, 4 IPv4, 6 IPv6), 24 UDP ports as on the wire (u32), 28 the UDP checksum
# a valid repeat carries, as on the wire (2), 32 payload (24), 64 source address (16; IPv4 in
# the first 4), 80 destination address (16: the session's local address)
_SLOT = struct.Struct("=III2s2x24s8x16s16s")  # from offset 16: what the engine writes
_OFF_KIND = 20
_KIND = struct.Struct("=I")

_NR_BPF = {"x86_64": 321, "aarch64": 280, "riscv64": 280}.get(platform.machine())
_BPF_MAP_CREATE, _BPF_MAP_UPDATE_ELEM, _BPF_MAP_DELETE_ELEM = 0, 2, 3
_BPF_PROG_LOAD, _BPF_LINK_CREATE = 5, 28
_MAP_HASH, _MAP_ARRAY = 1, 2
_F_MMAPABLE = 1 << 10
_PROG_SCHED_CLS = 3
_TCX_INGRESS = 46
_ATTR_SIZE = 144
# helpers
_MAP_LOOKUP, _KTIME_GET_NS, _LOAD_BYTES_RELATIVE = 1, 5, 68
_HDR_START_NET = 1
_TCX_NEXT, _TCX_DROP = -1, 2
_PACKET_HOST = 0


class KernelRxError(OSError):
    """The kernel path cannot be used here (the message says why)."""


def _raw(data: bytes) -> int:
    """``data`` as the program reads it from memory (a host-order load of wire bytes)."""
    return int.from_bytes(data, sys.byteorder)


class Asm:
    """A minimal eBPF assembler: instructions with symbolic jump targets."""

    # classes, sizes, modes, operations
    LDX, STX, ALU64, JMP = 0x01, 0x03, 0x07, 0x05
    W, H, B, DW = 0x00, 0x08, 0x10, 0x18
    MEM, ATOMIC = 0x60, 0xC0
    K, X = 0x00, 0x08
    ADD, AND, RSH, MOV = 0x00, 0x50, 0x70, 0xB0
    JA, JEQ, JNE, CALL, EXIT = 0x00, 0x10, 0x50, 0x80, 0x90

    def __init__(self) -> None:
        #: (code, dst, src, off, imm, jump label or None)
        self.ins: list[tuple[int, int, int, int, int, str | None]] = []
        self.labels: dict[str, int] = {}

    def _i(self, code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> None:
        self.ins.append((code, dst, src, off, imm, None))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.ins)

    def mov(self, dst: int, imm: int) -> None:
        self._i(self.ALU64 | self.MOV | self.K, dst, imm=imm)

    def movr(self, dst: int, src: int) -> None:
        self._i(self.ALU64 | self.MOV | self.X, dst, src)

    def add(self, dst: int, imm: int) -> None:
        self._i(self.ALU64 | self.ADD | self.K, dst, imm=imm)

    def addr(self, dst: int, src: int) -> None:
        self._i(self.ALU64 | self.ADD | self.X, dst, src)

    def rsh(self, dst: int, imm: int) -> None:
        self._i(self.ALU64 | self.RSH | self.K, dst, imm=imm)

    def and_(self, dst: int, imm: int) -> None:
        self._i(self.ALU64 | self.AND | self.K, dst, imm=imm)

    def ldx(self, size: int, dst: int, src: int, off: int) -> None:
        self._i(self.LDX | self.MEM | size, dst, src, off)

    def stx(self, size: int, dst: int, off: int, src: int) -> None:
        self._i(self.STX | self.MEM | size, dst, src, off)

    def atomic_add(self, dst: int, off: int, src: int) -> None:
        self._i(self.STX | self.ATOMIC | self.DW, dst, src, off, self.ADD)

    def map_fd(self, dst: int, fd: int) -> None:
        """``ld_imm64 dst, map`` (two instructions; src 1 = BPF_PSEUDO_MAP_FD)."""
        self._i(0x18, dst, 1, imm=fd)
        self._i(0)

    def call(self, helper: int) -> None:
        self._i(self.JMP | self.CALL, imm=helper)

    def exit(self) -> None:
        self._i(self.JMP | self.EXIT)

    def jne(self, dst: int, imm: int, to: str) -> None:
        self.ins.append((self.JMP | self.JNE | self.K, dst, 0, 0, imm, to))

    def jner(self, dst: int, src: int, to: str) -> None:
        self.ins.append((self.JMP | self.JNE | self.X, dst, src, 0, 0, to))

    def jeq(self, dst: int, imm: int, to: str) -> None:
        self.ins.append((self.JMP | self.JEQ | self.K, dst, 0, 0, imm, to))

    def ja(self, to: str) -> None:
        self.ins.append((self.JMP | self.JA, 0, 0, 0, 0, to))

    def assemble(self) -> bytes:
        out = bytearray()
        for pc, (code, dst, src, off, imm, to) in enumerate(self.ins):
            if to is not None:
                off = self.labels[to] - pc - 1
            if imm >= 1 << 31:  # an unsigned 32-bit constant, as the s32 field holds it
                imm -= 1 << 32
            out += struct.pack("<BBhi", code, (src << 4) | dst, off, imm)
        return bytes(out)


def program(idx_fd: int, slots_fd: int) -> bytes:
    """The program's instructions, reading Your Discriminator -> slot from ``idx_fd`` and the
    slots from ``slots_fd``. Registers: r6 the packet's context, r9 the slot.

    Kept whole: a straight-line listing whose jumps name labels across it reads best as one."""
    a = Asm()
    r0, r1, r2, r3, r4, r5, r6, r9, fp = 0, 1, 2, 3, 4, 5, 6, 9, 10
    key = -88  # the lookup key on the stack, below the packet's bytes

    def load(base: int, size: int) -> None:
        """skb_load_bytes_relative(ctx, 0, fp + base, size, network header)"""
        a.movr(r1, r6)
        a.mov(r2, 0)
        a.movr(r3, fp)
        a.add(r3, base)
        a.mov(r4, size)
        a.mov(r5, _HDR_START_NET)
        a.call(_LOAD_BYTES_RELATIVE)
        a.jne(r0, 0, "pass")

    def lookup(map_fd: int) -> None:
        """r0 = map_lookup_elem(map, fp + key), or on to "pass" if absent."""
        a.map_fd(r1, map_fd)
        a.movr(r2, fp)
        a.add(r2, key)
        a.call(_MAP_LOOKUP)
        a.jeq(r0, 0, "pass")

    def slot(your: int, kind: int) -> None:
        """r9 = the slot Your Discriminator (on the stack at ``your``) names, of ``kind``."""
        a.ldx(a.W, r0, fp, your)
        a.stx(a.W, fp, key, r0)
        lookup(idx_fd)
        a.ldx(a.W, r0, r0, 0)
        a.stx(a.W, fp, key, r0)
        lookup(slots_fd)
        a.movr(r9, r0)
        a.ldx(a.W, r0, r9, _OFF_KIND)
        a.jne(r0, kind, "pass")
        a.ldx(a.W, r0, r9, 16)  # the interface
        a.ldx(a.W, r1, r6, 40)  # __sk_buff.ifindex
        a.jner(r0, r1, "pass")

    def same(size: int, slot_off: int, stack_off: int) -> None:
        a.ldx(size, r0, r9, slot_off)
        a.ldx(size, r1, fp, stack_off)
        a.jner(r0, r1, "pass")

    u16 = struct.Struct("!H").pack
    a.movr(r6, r1)
    a.ldx(a.W, r0, r6, 4)  # __sk_buff.pkt_type: addressed to this host
    a.jne(r0, _PACKET_HOST, "pass")
    a.ldx(a.W, r0, r6, 20)  # __sk_buff.vlan_present: a tag the kernel took out of the frame
    a.jne(r0, 0, "pass")
    a.ldx(a.W, r0, r6, 16)  # __sk_buff.protocol, network order
    a.jeq(r0, _raw(u16(0x86DD)), "v6")
    a.jne(r0, _raw(u16(0x0800)), "pass")
    # IPv4 without options: IP at fp-84 (20), UDP at fp-64 (8), BFD at fp-56 (24)
    load(-84, 52)
    a.ldx(a.B, r0, fp, -84)
    a.jne(r0, 0x45, "pass")
    a.ldx(a.H, r0, fp, -82)  # total length
    a.jne(r0, _raw(u16(52)), "pass")
    a.ldx(a.H, r0, fp, -78)  # flags and fragment offset: MF or an offset
    a.and_(r0, _raw(u16(0x3FFF)))
    a.jne(r0, 0, "pass")
    a.ldx(a.B, r0, fp, -76)  # TTL
    a.jne(r0, 255, "pass")
    a.ldx(a.B, r0, fp, -75)
    a.jne(r0, socket.IPPROTO_UDP, "pass")
    a.ldx(a.H, r0, fp, -60)  # UDP length
    a.jne(r0, _raw(u16(32)), "pass")
    # the header checksum (it covers the identification, which may change every packet): the
    # ones' complement sum of the header's ten words is 0xFFFF (in either byte order)
    a.mov(r1, 0)
    for i in range(10):
        a.ldx(a.H, r0, fp, -84 + 2 * i)
        a.addr(r1, r0)
    for _ in range(2):
        a.movr(r0, r1)
        a.rsh(r0, 16)
        a.and_(r1, 0xFFFF)
        a.addr(r1, r0)
    a.jne(r1, 0xFFFF, "pass")
    slot(-48, 4)
    same(a.W, 24, -64)  # ports
    same(a.W, 64, -72)  # source
    same(a.W, 80, -68)  # destination
    a.ldx(a.H, r0, fp, -58)  # UDP checksum: 0 is none (IPv4), else the one a repeat carries
    a.jeq(r0, 0, "v4sum")
    same(a.H, 28, -58)
    a.label("v4sum")
    for i in range(3):
        same(a.DW, 32 + 8 * i, -56 + 8 * i)
    a.ja("hit")
    # IPv6 without extension headers: IP at fp-72 (40), UDP at fp-32 (8), BFD at fp-24 (24)
    a.label("v6")
    load(-72, 72)
    a.ldx(a.B, r0, fp, -72)
    a.and_(r0, 0xF0)
    a.jne(r0, 0x60, "pass")
    a.ldx(a.H, r0, fp, -68)  # payload length
    a.jne(r0, _raw(u16(32)), "pass")
    a.ldx(a.B, r0, fp, -66)  # next header
    a.jne(r0, socket.IPPROTO_UDP, "pass")
    a.ldx(a.B, r0, fp, -65)  # hop limit
    a.jne(r0, 255, "pass")
    a.ldx(a.H, r0, fp, -28)  # UDP length
    a.jne(r0, _raw(u16(32)), "pass")
    slot(-16, 6)
    same(a.W, 24, -32)
    same(a.DW, 64, -64)
    same(a.DW, 72, -56)
    same(a.DW, 80, -48)
    same(a.DW, 88, -40)
    same(a.H, 28, -26)  # UDP checksum (never 0 in the slot: a 0 is not taken)
    for i in range(3):
        same(a.DW, 32 + 8 * i, -24 + 8 * i)
    a.label("hit")
    a.call(_KTIME_GET_NS)
    a.stx(a.DW, r9, 0, r0)
    a.mov(r1, 1)
    a.atomic_add(r9, 8, r1)
    a.mov(r0, _TCX_DROP)
    a.exit()
    a.label("pass")
    a.mov(r0, _TCX_NEXT)
    a.exit()
    return a.assemble()


_libc: Any = None
_addr = ctypes.addressof


def _bpf(cmd: int, attr: bytearray) -> int:
    global _libc
    if _NR_BPF is None:
        raise KernelRxError(errno.ENOSYS, f"no bpf() syscall number for {platform.machine()}")
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    buf = (ctypes.c_char * len(attr)).from_buffer(attr)
    rc = int(_libc.syscall(_NR_BPF, cmd, buf, len(attr)))
    if rc < 0:
        err = ctypes.get_errno()
        raise KernelRxError(err, os.strerror(err))
    return rc


def _map_create(kind: int, key: int, value: int, entries: int, flags: int, name: bytes) -> int:
    attr = bytearray(_ATTR_SIZE)
    struct.pack_into("=IIIII", attr, 0, kind, key, value, entries, flags)
    attr[28 : 28 + len(name)] = name
    return _bpf(_BPF_MAP_CREATE, attr)


def udp_checksum(src: bytes, dst: bytes, sport: int, payload: bytes) -> bytes:
    """The UDP checksum field (network order) of a datagram from ``src``:``sport`` to
    ``dst``:3784 carrying ``payload`` (RFC 768; RFC 8200 §8.1 for IPv6): the ones' complement
    of the ones' complement sum of the pseudo-header, the UDP header and the payload, sent as
    0xFFFF when it is 0."""
    ulen = 8 + len(payload)
    data = src + dst + struct.pack("!HHHHHH", socket.IPPROTO_UDP, ulen, sport, 3784, ulen, 0)
    data += payload + b"\0" * (len(payload) % 2)
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return struct.pack("!H", (~total & 0xFFFF) or 0xFFFF)


def slot_bytes(
    ifindex: int, family: int, src: str, sport: int, dst: str, payload: bytes
) -> tuple[int, bytes]:
    """The kind and the bytes the engine writes from offset 16 of a slot (the kind at
    offset 20 inside them is 0: it is written last, once the rest is in place)."""
    ports = _raw(struct.pack("!HH", sport, 3784))
    saddr = socket.inet_pton(family, src)
    daddr = socket.inet_pton(family, dst)
    kind = 6 if family == socket.AF_INET6 else 4
    csum = udp_checksum(saddr, daddr, sport, payload)
    return kind, _SLOT.pack(ifindex, 0, ports, csum, payload, saddr, daddr)


class Slot:
    """What the engine expects of one session's steady state (see the module's docstring)."""

    __slots__ = ("count", "index")

    def __init__(self, index: int) -> None:
        self.index = index
        #: the kernel's count when the engine last looked
        self.count = 0


class KernelRx:
    """One engine's program, maps and links. Every method runs on the engine loop's thread."""

    def __init__(self) -> None:
        self.idx_fd = self.slots_fd = self.prog_fd = -1
        self.links: dict[int, tuple[int, int]] = {}  # ifindex -> (link fd, references)
        self.free = list(range(SLOTS - 1, -1, -1))
        try:
            self.idx_fd = _map_create(_MAP_HASH, 4, 4, SLOTS, 0, b"glbd_bfd_idx")
            self.slots_fd = _map_create(
                _MAP_ARRAY, 4, SLOT_SIZE, SLOTS, _F_MMAPABLE, b"glbd_bfd_slots"
            )
            self.mm = mmap.mmap(self.slots_fd, SLOT_SIZE * SLOTS, mmap.MAP_SHARED)
            #: the slots as u64 words: slot i's stamp at 12 i, its count at 12 i + 1
            self.words = memoryview(self.mm).cast("Q")
            self.prog_fd = self._load(program(self.idx_fd, self.slots_fd))
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _load(insns: bytes) -> int:
        code = ctypes.create_string_buffer(insns, len(insns))
        lic = ctypes.create_string_buffer(b"Apache-2.0")
        log = ctypes.create_string_buffer(1 << 16)
        attr = bytearray(_ATTR_SIZE)
        struct.pack_into(
            "=IIQQIIQ", attr, 0, _PROG_SCHED_CLS, len(insns) // 8, _addr(code), _addr(lic),
            1, len(log), _addr(log),
        )  # fmt: skip
        attr[48:60] = b"glbd_bfd_rx\0"
        try:
            return _bpf(_BPF_PROG_LOAD, attr)
        except KernelRxError as exc:
            last = log.value.decode(errors="replace").strip().splitlines()[-3:]
            raise KernelRxError(exc.errno, f"{exc.strerror}: {' | '.join(last)}") from None

    # ------------------------------------------------------------------ interfaces

    def attach(self, ifname: str) -> int:
        """Run the program on ``ifname``'s ingress; returns its index (references counted:
        one link per interface, keyed by index so a re-created interface gets its own)."""
        index = socket.if_nametoindex(ifname)
        fd, refs = self.links.get(index, (-1, 0))
        if fd < 0:
            attr = bytearray(_ATTR_SIZE)
            struct.pack_into("=III", attr, 0, self.prog_fd, index, _TCX_INGRESS)
            fd = _bpf(_BPF_LINK_CREATE, attr)
        self.links[index] = (fd, refs + 1)
        return index

    def detach(self, index: int) -> None:
        fd, refs = self.links.get(index, (-1, 0))
        if fd < 0:
            return
        if refs > 1:
            self.links[index] = (fd, refs - 1)
            return
        del self.links[index]
        os.close(fd)

    # ------------------------------------------------------------------ slots

    def claim(self, discr: int) -> Slot | None:
        """A slot for the session whose local discriminator is ``discr`` (None: all taken)."""
        if not self.free:
            return None
        s = Slot(self.free.pop())
        _SLOT.pack_into(self.mm, s.index * SLOT_SIZE + 16, 0, 0, 0, b"", b"", b"", b"")
        attr = bytearray(_ATTR_SIZE)
        key = ctypes.create_string_buffer(struct.pack("!I", discr), 4)
        val = ctypes.create_string_buffer(struct.pack("=I", s.index), 4)
        struct.pack_into("=I4xQQQ", attr, 0, self.idx_fd, _addr(key), _addr(val), 0)
        try:
            _bpf(_BPF_MAP_UPDATE_ELEM, attr)
        except KernelRxError:
            self.free.append(s.index)
            raise
        return s

    def release(self, discr: int, s: Slot) -> None:
        self.clear(s)
        attr = bytearray(_ATTR_SIZE)
        key = ctypes.create_string_buffer(struct.pack("!I", discr), 4)
        struct.pack_into("=I4xQ", attr, 0, self.idx_fd, _addr(key))
        with contextlib.suppress(KernelRxError):  # gone already: the slot is off either way
            _bpf(_BPF_MAP_DELETE_ELEM, attr)
        self.free.append(s.index)

    def expect(
        self,
        s: Slot,
        ifindex: int,
        family: int,
        src: str,
        sport: int,
        dst: str,
        payload: bytes,
    ) -> None:
        """Let the kernel consume packets equal to ``payload`` from ``src``:``sport`` to
        ``dst`` (the session's local address)."""
        base = s.index * SLOT_SIZE
        _KIND.pack_into(self.mm, base + _OFF_KIND, 0)  # off while it changes
        kind, raw = slot_bytes(ifindex, family, src, sport, dst, payload)
        self.mm[base + 16 : base + 16 + len(raw)] = raw
        s.count = self.words[s.index * 12 + 1]
        _KIND.pack_into(self.mm, base + _OFF_KIND, kind)

    def clear(self, s: Slot) -> None:
        _KIND.pack_into(self.mm, s.index * SLOT_SIZE + _OFF_KIND, 0)

    def close(self) -> None:
        for fd, _ in self.links.values():
            os.close(fd)
        self.links.clear()
        if getattr(self, "words", None) is not None:
            self.words.release()
        if getattr(self, "mm", None) is not None:
            self.mm.close()
        for fd in (self.prog_fd, self.slots_fd, self.idx_fd):
            if fd >= 0:
                os.close(fd)
        self.prog_fd = self.slots_fd = self.idx_fd = -1


def open_kernel_rx() -> tuple[KernelRx | None, str]:
    """The engine's kernel path, or None and why not (one line)."""
    try:
        return KernelRx(), ""
    except OSError as exc:  # KernelRxError, or the mmap
        return None, f"{exc.strerror or exc}"
