"""A small eBPF interpreter for the instructions bfd/engine/kernel_rx.py's assembler emits, so
the BFD receive program's decisions can be tested without root or a kernel.

It runs 64-bit ALU (mov, add, and, rsh), loads and stores of 1-8 bytes, the 64-bit atomic add,
ld_imm64 of a map fd, ja/jeq/jne, calls of the three helpers the program uses, and exit.
Registers hold integers or pointers into one of the program's memories (the context, the stack,
a map value); an access outside its memory raises, as the verifier would refuse it. Anything
else raises too: a program that needs more has changed, and so must this.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

MASK = (1 << 64) - 1
STACK = 512


class VmError(RuntimeError):
    """The program did something this interpreter (or the verifier) does not allow."""


@dataclass(frozen=True)
class Ptr:
    mem: bytearray
    off: int

    def span(self, size: int) -> slice:
        if not 0 <= self.off <= len(self.mem) - size:
            raise VmError(f"access of {size} at {self.off} outside {len(self.mem)} bytes")
        return slice(self.off, self.off + size)


@dataclass(frozen=True)
class MapRef:
    fd: int


@dataclass
class Maps:
    """The maps by fd: hash maps as dicts of key bytes -> value memory, arrays as one memory
    of ``entries`` values of ``value_size`` bytes."""

    hashes: dict[int, dict[bytes, bytearray]] = field(default_factory=dict)
    arrays: dict[int, tuple[bytearray, int]] = field(default_factory=dict)

    def lookup(self, fd: int, key: bytes) -> Ptr | None:
        if fd in self.hashes:
            v = self.hashes[fd].get(key)
            return None if v is None else Ptr(v, 0)
        mem, size = self.arrays[fd]
        (i,) = struct.unpack("=I", key[:4])
        return Ptr(mem, i * size) if i * size < len(mem) else None


@dataclass
class Packet:
    """What the helpers see of the packet: its bytes from the network header on."""

    net: bytes


def _s64(v: int) -> int:
    v &= MASK
    return v - (1 << 64) if v >> 63 else v


def run(
    prog: bytes,
    ctx: bytearray,
    packet: Packet,
    maps: Maps,
    key_sizes: dict[int, int],
    now_ns: int = 1_000_000,
    max_steps: int = 10_000,
) -> int:
    """Run ``prog`` on ``ctx`` (the __sk_buff bytes); returns r0 at exit, signed."""
    ins = [struct.unpack_from("<BBhi", prog, i) for i in range(0, len(prog), 8)]
    regs: list[int | Ptr | MapRef] = [0] * 11
    stack = bytearray(STACK)
    regs[1], regs[10] = Ptr(ctx, 0), Ptr(stack, STACK)
    order = sys.byteorder

    def val(r: int) -> int:
        v = regs[r]
        if not isinstance(v, int):
            raise VmError(f"r{r} is a pointer where a scalar is needed")
        return v

    def ptr(r: int) -> Ptr:
        v = regs[r]
        if not isinstance(v, Ptr):
            raise VmError(f"r{r} is not a pointer")
        return v

    helpers: dict[int, Callable[[], int | Ptr]] = {}

    def load_bytes_relative() -> int:
        off, to, size, start = val(2), ptr(3), val(4), val(5)
        if start != 1:  # BPF_HDR_START_NET
            raise VmError(f"skb_load_bytes_relative start {start}")
        if off + size > len(packet.net):
            return -14 & MASK  # -EFAULT: the packet is shorter
        to.mem[to.span(size)] = packet.net[off : off + size]
        return 0

    def map_lookup() -> int | Ptr:
        m, key = regs[1], ptr(2)
        if not isinstance(m, MapRef):
            raise VmError("map_lookup_elem without a map")
        size = key_sizes[m.fd]
        found = maps.lookup(m.fd, bytes(key.mem[key.span(size)]))
        return 0 if found is None else found

    helpers = {1: map_lookup, 5: lambda: now_ns, 68: load_bytes_relative}
    pc = steps = 0
    while True:
        steps += 1
        if steps > max_steps or not 0 <= pc < len(ins):
            raise VmError(f"ran off the program at {pc}")
        code, regbyte, off, imm = ins[pc]
        dst, src = regbyte & 0x0F, regbyte >> 4
        cls, op = code & 0x07, code & 0xF0
        pc += 1
        if code == 0x18:  # ld_imm64: a map fd (src 1)
            if src != 1:
                raise VmError("ld_imm64 of anything but a map fd")
            regs[dst] = MapRef(imm)
            pc += 1
        elif cls == 0x07:  # ALU64
            operand: int | Ptr | MapRef = regs[src] if code & 0x08 else imm & MASK
            if op == 0xB0:
                regs[dst] = operand
            elif op == 0x00 and isinstance(regs[dst], Ptr):
                p = ptr(dst)
                regs[dst] = Ptr(p.mem, p.off + _s64(val(src) if code & 0x08 else imm))
            elif op in (0x00, 0x50, 0x70) and isinstance(operand, int):
                a = val(dst)
                regs[dst] = (
                    (a + operand) if op == 0x00 else (a & operand) if op == 0x50 else a >> operand
                ) & MASK
            else:
                raise VmError(f"ALU64 op {op:#x} on {regs[dst]!r}, {operand!r}")
        elif cls in (0x01, 0x03) and code & 0xE0 == 0x60:  # LDX/STX MEM
            size = {0x00: 4, 0x08: 2, 0x10: 1, 0x18: 8}[code & 0x18]
            if cls == 0x01:
                p = ptr(src)
                at = Ptr(p.mem, p.off + off)
                regs[dst] = int.from_bytes(at.mem[at.span(size)], order)
            else:
                p = ptr(dst)
                at = Ptr(p.mem, p.off + off)
                at.mem[at.span(size)] = (val(src) & ((1 << 8 * size) - 1)).to_bytes(size, order)
        elif code == 0xDB and imm == 0x00:  # atomic 64-bit add
            p = ptr(dst)
            at = Ptr(p.mem, p.off + off)
            old = int.from_bytes(at.mem[at.span(8)], order)
            at.mem[at.span(8)] = ((old + val(src)) & MASK).to_bytes(8, order)
        elif cls == 0x05:  # JMP
            if op == 0x00:
                pc += off
            elif op in (0x10, 0x50):
                # a map value's pointer against 0: the null check after a lookup
                null_check = isinstance(regs[dst], Ptr) and not code & 0x08 and imm == 0
                a = 1 if null_check else val(dst)
                b = val(src) if code & 0x08 else imm & MASK
                if (a == b) == (op == 0x10):
                    pc += off
            elif op == 0x80:
                if imm not in helpers:
                    raise VmError(f"helper {imm}")
                regs[0] = helpers[imm]()
                for r in range(1, 6):  # clobbered by the call
                    regs[r] = 0
            elif op == 0x90:
                return _s64(val(0))
            else:
                raise VmError(f"jump op {op:#x}")
        else:
            raise VmError(f"instruction {code:#x} at {pc - 1}")
