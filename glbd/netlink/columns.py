"""Column reads of periodic dumps whose layout repeats (pure: no sockets, no clock).

A dump polled every few milliseconds (the link monitor's RTM_GETSTATS and RTM_GETQDISC every
10 ms) comes back with the same messages, the same attributes at the same offsets, each time;
only the counters change. :class:`DumpColumns` finds the wanted fields of one datagram with an
ordinary attribute walk (a ``locate`` function), compiles one :class:`struct.Struct` covering
every message of that datagram, and from then on reads every field of every message with one
``unpack_from`` and a few strided slices (C loops, no per-message Python code).

Each fast read is checked against the learned layout with C-level tuple compares: the
datagram length; every message's length, type and flags (so ``NLM_F_DUMP_INTR`` is seen); the
sequence number; and the header word (``nla_len``/``nla_type``) of every attribute a field was
found in. Any difference (an interface or qdisc added or replaced, an interrupted dump, a stale
reply) falls back to the walk, which also re-learns. The fast path therefore returns what the
walk returns, or is not used. The walk frames messages with the codec's
:func:`~glbd.netlink.codec.iter_frames` (it runs only to learn or re-learn a layout, so
the framer's per-message object costs nothing on the steady path); malformed framing raises
:class:`~glbd.netlink.codec.DecodeError` from it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from glbd.netlink import const as c
from glbd.netlink.codec import DecodeError, iter_frames

__all__ = ["Chunk", "DumpColumns", "Locate", "attr_find", "attr_offsets"]

Buffer = bytes | bytearray | memoryview
# locate(buf, body_start, msg_end) -> (value offsets, one per field, -1 for a field absent
# from this message (read as 0); offsets of the attribute headers that guard them), or None
# when the message has none of the fields (every field 0)
Locate = Callable[[Any, int, int], tuple[Sequence[int], Sequence[int]] | None]

_NLA = struct.Struct("=HH")
_S32 = struct.Struct("=i")
_U32 = struct.Struct("=I")
_DONE = struct.Struct("=IHHI4xi")  # NLMSG_DONE: nlmsg_len, type, flags, seq, error
_SIZES = {"B": 1, "H": 2, "I": 4, "i": 4, "Q": 8, "q": 8}
_FIELD = {f: struct.Struct("=" + f) for f in _SIZES}
_MAX_LAYOUTS = 8


def attr_offsets(buf: Any, off: int, end: int) -> dict[int, tuple[int, int]]:
    """type -> (header offset, payload end) of the first attribute of each type in
    ``buf[off:end]`` (flag bits stripped). Stops quietly at a malformed attribute."""
    out: dict[int, tuple[int, int]] = {}
    unpack = _NLA.unpack_from
    while off + 4 <= end:
        ln, t = unpack(buf, off)
        if ln < 4 or off + ln > end:
            break
        t &= c.NLA_TYPE_MASK
        if t not in out:
            out[t] = (off, off + ln)
        off += (ln + 3) & ~3
    return out


def attr_find(buf: Any, off: int, end: int, typ: int) -> tuple[int, int, list[int]]:
    """The first attribute of type ``typ`` in ``buf[off:end]``, as the walk finds it:
    (header offset or -1, payload end, offsets of every header passed up to and including
    it -- the guards that make a learned layout mean the same path)."""
    passed: list[int] = []
    unpack = _NLA.unpack_from
    while off + 4 <= end:
        ln, t = unpack(buf, off)
        passed.append(off)
        if ln < 4 or off + ln > end:
            break
        if t & c.NLA_TYPE_MASK == typ:
            return off, off + ln, passed
        off += (ln + 3) & ~3
    return -1, -1, passed


class Chunk(NamedTuple):
    """What one datagram of a dump held."""

    cols: tuple[tuple[int, ...], ...]  # one tuple per field; one value per data message
    done: bool = False  # NLMSG_DONE (or an ACK) seen: the dump is over
    intr: bool = False  # NLM_F_DUMP_INTR on one of our messages: the dump must be redone
    error: int = 0  # positive errno from NLMSG_ERROR
    fast: bool = False  # read through a learned layout


class _Layout:
    __slots__ = ("flags", "gst", "gvals", "k", "lens", "nf", "st", "tail", "values")

    def __init__(
        self,
        st: struct.Struct,
        nf: int,
        k: int,
        lens: tuple[int, ...],
        flags: tuple[int, ...],
        values: tuple[int, ...],
        gst: struct.Struct,
        gvals: tuple[int, ...],
        tail: int,
    ) -> None:
        self.st = st  # every row: nlmsg_len, type, flags, seq, then the fields
        self.nf = nf  # items per row in st
        self.k = k  # rows
        self.lens = lens
        self.flags = flags
        self.values = values  # position of each field within a row's items
        self.gst = gst  # every guard word of every row (attribute headers on the path)
        self.gvals = gvals
        self.tail = tail  # offset after the last row


class DumpColumns:
    """Reads the fields ``fmts`` (one :mod:`struct` code each: B H I i Q q) of every
    ``msg_type`` message of a dump, datagram by datagram, as columns."""

    def __init__(self, msg_type: int, fmts: str, locate: Locate) -> None:
        if not fmts or any(f not in _SIZES for f in fmts):
            raise ValueError(f"field formats must be some of {''.join(_SIZES)}")
        self._type = msg_type
        self._fmts = fmts
        self._locate = locate
        self._layouts: dict[tuple[int, int], _Layout] = {}
        self._learned: _Layout | None = None
        self._done = Chunk(((),) * len(fmts), True)
        self.fast_reads = 0
        self.walks = 0

    def read(self, buf: Buffer, n: int, seq: int, part: int = 0) -> Chunk:
        """The fields of the data messages in ``buf[:n]`` that answer request ``seq``;
        ``part``: which datagram of the dump this is (0, 1, ...: layouts are learned per
        part and length)."""
        if n == 20 and _DONE.unpack_from(buf, 0) == (20, c.NLMSG_DONE, c.NLM_F_MULTI, seq, 0):
            return self._done  # a datagram with only NLMSG_DONE (e.g. after a qdisc dump)
        key = (part, n)
        lay = self._layouts.get(key)
        if lay is not None:
            ch = self._fast(lay, buf, n, seq)
            if ch is not None:
                self.fast_reads += 1
                return ch
            del self._layouts[key]
        self.walks += 1
        ch = self._walk(buf, n, seq)
        if self._learned is not None:
            if len(self._layouts) >= _MAX_LAYOUTS:
                self._layouts.clear()
            self._layouts[key] = self._learned
            self._learned = None
        return ch

    # --- fast path ------------------------------------------------------------------------

    def _fast(self, lay: _Layout, buf: Buffer, n: int, seq: int) -> Chunk | None:
        t = lay.st.unpack_from(buf, 0)
        nf, k = lay.nf, lay.k
        if (
            t[0::nf] != lay.lens
            or t[1::nf].count(self._type) != k
            or t[2::nf] != lay.flags
            or t[3::nf].count(seq) != k
        ):
            return None
        if lay.gst.unpack_from(buf, 0) != lay.gvals:
            return None
        done, intr, err = False, False, 0
        tl = lay.tail
        if n - tl == 20 and _DONE.unpack_from(buf, tl) == (20, c.NLMSG_DONE, c.NLM_F_MULTI, seq, 0):
            done = True  # the usual tail: a plain NLMSG_DONE
        elif tl < n:
            tail = self._walk(buf, n, seq, tl)
            if tail.cols[0]:  # data after the learned rows: not this layout
                return None
            done, intr, err = tail.done, tail.intr, tail.error
        cols = tuple(t[p::nf] for p in lay.values)
        return Chunk(cols, done, intr, err, True)

    # --- walk (and learn) -----------------------------------------------------------------

    def _walk(self, buf: Buffer, n: int, seq: int, start: int = 0) -> Chunk:
        fmts = self._fmts
        nvals = len(fmts)
        cols: list[list[int]] = [[] for _ in fmts]
        done = intr = False
        err = 0
        learnable = start == 0
        rows: list[tuple[int, int, int, Sequence[int], Sequence[int]]] = []
        tail = -1
        off = start
        for fr in iter_frames(buf, start, n):
            off = fr.start - 16
            ln, typ, flags, rseq = fr.end - off, fr.type, fr.flags, fr.seq
            nxt = off + ((ln + 3) & ~3)
            if rseq != seq:
                learnable = False
                off = nxt
                continue
            if flags & c.NLM_F_DUMP_INTR:
                intr = True
                learnable = False
            if typ == c.NLMSG_DONE or typ == c.NLMSG_ERROR:
                if typ == c.NLMSG_ERROR:
                    if ln < 20:
                        raise DecodeError("short_error", f"{ln - 16} bytes")
                    err = -_S32.unpack_from(buf, off + 16)[0]
                done = True
                if tail < 0:
                    tail = off
                break
            if typ != self._type:
                learnable = False
                off = nxt
                continue
            if tail >= 0:
                learnable = False  # data after a non-data message
            found = self._locate(buf, off + 16, off + ln)
            if found is None or len(found[0]) != nvals:
                learnable = False
                for col in cols:
                    col.append(0)
            else:
                vals, guards = found
                for i, (fm, vo) in enumerate(zip(fmts, vals, strict=True)):
                    if vo < 0:  # absent from this message: 0, and no layout
                        learnable = False
                        cols[i].append(0)
                        continue
                    if vo < off + 16 or vo + _SIZES[fm] > off + ln:
                        raise DecodeError("field_outside_message", f"offset {vo} at {off}")
                    cols[i].append(_FIELD[fm].unpack_from(buf, vo)[0])
                rows.append((off, ln, flags, vals, guards))
            off = nxt
        if tail < 0:
            tail = off
        if learnable and rows and tail <= n:
            self._learn(buf, rows, n, tail)
        return Chunk(tuple(tuple(col) for col in cols), done, intr, err, False)

    def _learn(
        self,
        buf: Buffer,
        rows: list[tuple[int, int, int, Sequence[int], Sequence[int]]],
        n: int,
        tail: int,
    ) -> None:
        """One Struct for the fields of ``rows`` (back to back from offset 0, the fields in the
        same order in every row, no overlaps) and one for their guard words; otherwise no
        layout and the walk stays in use."""
        fmts = self._fmts
        nv = len(fmts)
        order: list[int] | None = None
        parts = ["="]
        gparts = ["="]
        gat = 0
        expect = 0
        for off, ln, _fl, vals, guards in rows:
            if off != expect:
                return
            expect = off + ((ln + 3) & ~3)
            items = sorted((vo, fm, i) for i, (fm, vo) in enumerate(zip(fmts, vals, strict=True)))
            row_order = [slot for _o, _f, slot in items]
            if order is None:
                order = row_order
            elif row_order != order:
                return
            parts.append("IHHI")  # nlmsg_len, type, flags, seq (the pid is skipped)
            at = off + 12
            for o, fm, _slot in items:
                if o < off + 16 or o < at:
                    return  # inside the nlmsghdr, or overlapping the previous field
                if o > at:
                    parts.append(f"{o - at}x")
                parts.append(fm)
                at = o + _SIZES[fm]
            if at > expect:
                return
            if expect > at:
                parts.append(f"{expect - at}x")
            for go in sorted(set(guards)):
                if go < gat or go < off + 16 or go + 4 > off + ln:
                    return
                if go > gat:
                    gparts.append(f"{go - gat}x")
                gparts.append("HH")  # nla_len, nla_type: small ints, no allocation
                gat = go + 4
        if order is None or expect != tail or tail > n:
            return
        st = struct.Struct("".join(parts))
        gst = struct.Struct("".join(gparts))
        if st.size != tail or gst.size > tail:
            return
        self._learned = _Layout(
            st,
            4 + nv,
            len(rows),
            tuple(r[1] for r in rows),
            tuple(r[2] for r in rows),
            tuple(4 + order.index(i) for i in range(nv)),
            gst,
            gst.unpack_from(buf, 0),
            tail,
        )
