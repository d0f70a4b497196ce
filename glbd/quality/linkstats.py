"""Netlink counters for the link-quality core (:mod:`glbd.quality.linkq`): all interfaces at once.

:class:`StatsReader` reads every sample in two dumps (one RTM_GETSTATS dump for
``IFLA_STATS_LINK_64`` of every interface, one RTM_GETQDISC dump for the root-qdisc backlogs),
never a per-interface request and never /proc; link state comes from RTNLGRP_LINK events. Both
dumps are read as columns through layouts learned once (:mod:`glbd.netlink.columns`) and
returned as :class:`~glbd.quality.linkq.Columns`, without a per-interface object. Requests are
built and replies walked with the netlink codec (:mod:`glbd.netlink.codec`) and the
request builders of :mod:`glbd.netlink.rtnl`.

The reads are generators that yield only while the socket has nothing queued yet, so the
runner (:mod:`glbd.quality.linkrunner`) can finish a sample inside one timer callback.
"""

from __future__ import annotations

import asyncio
import operator
import os
import socket
import struct
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TypeAlias, TypeVar

from glbd.netlink import const as c
from glbd.netlink.codec import (
    DecodeError,
    ErrorMsg,
    IfInfoMsg,
    Message,
    TcMsg,
    decode_frame,
    iter_frames,
    pick_attrs,
)
from glbd.netlink.columns import DumpColumns
from glbd.netlink.rtnl import (
    link_dump,
    qdisc_backlog_fields,
    qdisc_dump,
    stats_dump,
    stats_tx_fields,
)
from glbd.netlink.rtsocket import NetlinkSocket, open_route_socket
from glbd.quality.linkq import Columns, LinkSample

__all__ = ["StatsReader", "Steps", "foreign_bytes"]

_T = TypeVar("_T")
#: a read that yields (None) only while its socket has nothing queued yet, then returns _T
Steps: TypeAlias = Generator[None, None, _T]

_U64 = struct.Struct("=Q")
_SEQ = struct.Struct("=I")
_SEQ_OFFSET = 8  # of nlmsg_seq in struct nlmsghdr (len u32, type u16, flags u16, seq u32)
_LINK_ATTRS = frozenset({c.IFLA_IFNAME, c.IFLA_OPERSTATE, c.IFLA_CARRIER})
_STATS2 = frozenset({c.TCA_STATS2})
_STATS_BASIC = frozenset({c.TCA_STATS_BASIC})


def foreign_bytes(rows: Iterable[tuple[int, bytes]], parents: frozenset[int]) -> dict[int, int]:
    """From the messages of an RTM_GETQDISC dump (``(type, body)``): per ifindex, the bytes
    sent by the qdiscs attached to one of the classes ``parents`` (TCA_STATS2 /
    TCA_STATS_BASIC). Malformed messages are skipped."""
    out: dict[int, int] = {}
    hsize = TcMsg.ST.size
    for typ, body in rows:
        if typ != c.RTM_NEWQDISC or len(body) < hsize:
            continue
        h = TcMsg.decode(body)
        if h.parent not in parents:
            continue
        try:
            stats2 = pick_attrs(body, hsize, len(body), _STATS2).get(c.TCA_STATS2)
            if stats2 is None:
                continue
            basic = pick_attrs(stats2, 0, len(stats2), _STATS_BASIC).get(c.TCA_STATS_BASIC)
        except DecodeError:
            continue
        if basic is not None and len(basic) >= _U64.size:
            out[h.ifindex] = out.get(h.ifindex, 0) + _U64.unpack_from(basic)[0]
    return out


@dataclass(slots=True)
class _LinkInfo:
    name: str
    up: bool


def _is_up(flags: int, operstate: int, carrier: bool) -> bool:
    """Admin up, carrier, and operstate UP or UNKNOWN (e.g. lo)."""
    return bool(flags & c.IFF_UP) and carrier and operstate in (c.IF_OPER_UNKNOWN, c.IF_OPER_UP)


def _link_info(data: bytes) -> tuple[int, _LinkInfo] | None:
    """(ifindex, info) of one RTM_NEWLINK body of a link dump; None if malformed."""
    hsize = IfInfoMsg.ST.size
    if len(data) < hsize:
        return None
    h = IfInfoMsg.decode(data)
    try:
        a = pick_attrs(data, hsize, len(data), _LINK_ATTRS)
    except DecodeError:
        return None
    name = a.get(c.IFLA_IFNAME, b"").split(b"\0", 1)[0].decode("utf-8", "replace")
    op = a.get(c.IFLA_OPERSTATE)
    car = a.get(c.IFLA_CARRIER)
    operstate = op[0] if op else c.IF_OPER_UNKNOWN
    carrier = bool(car[0]) if car else bool(h.flags & c.IFF_LOWER_UP)
    return h.index, _LinkInfo(name, _is_up(h.flags, operstate, carrier))


def _picker(pos: list[int]) -> Callable[[tuple[int, ...]], tuple[int, ...]]:
    """A C-level gather of ``pos`` from a tuple (``operator.itemgetter`` returns a bare
    value for one position and needs at least one)."""
    if len(pos) >= 2:
        return operator.itemgetter(*pos)
    if len(pos) == 1:
        p0 = pos[0]
        return lambda col: (col[p0],)
    return lambda col: ()


class _Plan:
    """How to turn the two dumps' columns into :class:`Columns`, valid while the link table,
    the wanted names and the dumps' ifindex order stay the same (they do between link
    events)."""

    __slots__ = ("get_bl", "get_tx", "idx_q", "idx_s", "ifindex", "names", "parent", "ups",
                 "ver", "want")  # fmt: skip

    def __init__(
        self,
        ver: int,
        want: frozenset[str] | None,
        idx_s: tuple[int, ...],
        idx_q: tuple[int, ...],
        parent: tuple[int, ...],
        links: Mapping[int, _LinkInfo],
    ) -> None:
        self.ver, self.want, self.idx_s, self.idx_q, self.parent = ver, want, idx_s, idx_q, parent
        root: dict[int, int] = {}
        for i, (ix, par) in enumerate(zip(idx_q, parent, strict=True)):
            if par == c.TC_H_ROOT and ix not in root:
                root[ix] = i
        none = len(idx_q)  # the 0 appended after the backlog column: no root qdisc
        pos_s: list[int] = []
        pos_q: list[int] = []
        names: list[str] = []
        ups: list[bool] = []
        ifx: list[int] = []
        for i, ix in enumerate(idx_s):
            info = links.get(ix)
            if info is None or (want is not None and info.name not in want):
                continue
            pos_s.append(i)
            pos_q.append(root.get(ix, none))
            names.append(info.name)
            ups.append(info.up)
            ifx.append(ix)
        self.names, self.ups, self.ifindex = tuple(names), tuple(ups), tuple(ifx)
        self.get_tx = _picker(pos_s)
        self.get_bl = _picker(pos_q)


def _as_set(ifnames: Iterable[str] | None) -> frozenset[str] | None:
    if ifnames is None or isinstance(ifnames, frozenset):
        return ifnames
    return frozenset(ifnames)


class StatsReader:
    """All interfaces' egress byte counters in one RTM_GETSTATS dump (``IFLA_STATS_LINK_64``
    only) and all root-qdisc backlogs in one RTM_GETQDISC dump per sample; no per-interface
    request, no /proc.

    Link state (name, admin/oper up, carrier) does not change every sample: it comes from
    RTNLGRP_LINK notifications (so a link going down is seen at once, on the
    :class:`glbd.netlink.rtsocket.NetlinkSocket` event socket), from a link dump at start, after
    a notification overrun, and every ``link_refresh_s`` (5 s) as a safety net (a link dump
    parsed in Python costs milliseconds, docs/heartbeat.md §6).

    Cost (target: 128 interfaces every 10 ms in < 10 % of a core): the dumps come back with
    the same layout every sample, so each datagram is read by a
    :class:`glbd.netlink.columns.DumpColumns` -- one ``unpack_from`` of a Struct compiled for
    that layout, checked against it, a full attribute walk only when it changed -- and joined
    to the link table by a :class:`_Plan` (C-level gathers) that is rebuilt only when a link
    event or the dump order changes it. No per-interface Python code runs in the reader per
    sample. The socket is non-blocking; a dump that is not ready yet is awaited."""

    def __init__(
        self,
        sock: socket.socket | None = None,
        *,
        link_refresh_s: float = 5.0,
    ) -> None:
        """Use ``await StatsReader.open(netns=...)``; ``sock`` is its NETLINK_ROUTE socket."""
        self._sock = sock
        self._seq = 1
        self._buf = bytearray(1 << 17)  # a dump datagram: ~32 KB (more if min_dump_alloc says so)
        self._links: dict[int, _LinkInfo] = {}
        self._links_ver = 0
        self._link_refresh_s = link_refresh_s
        self._links_at: float | None = None
        self._events: NetlinkSocket | None = None
        self._stats_cols = DumpColumns(c.RTM_NEWSTATS, "IQ", stats_tx_fields)
        self._qdisc_cols = DumpColumns(c.RTM_NEWQDISC, "iII", qdisc_backlog_fields)
        self._plan: _Plan | None = None
        # the two per-sample requests, encoded once (the seq is patched in per dump)
        self._stats_req = bytearray(stats_dump().encode())
        self._qdisc_req = bytearray(qdisc_dump().encode())
        self.dumps = 0
        self.link_dumps = 0
        self.link_events = 0
        self._watch: Callable[[], None] | None = None

    @classmethod
    async def open(cls, *, netns: str | None = None, link_refresh_s: float = 5.0) -> StatsReader:
        """Open the stats socket and the link-event socket (in ``netns`` if given)."""
        sock = open_route_socket(netns=netns, rcvbuf=1 << 20, force_rcvbuf=False)
        self = cls(sock, link_refresh_s=link_refresh_s)
        try:
            self._events = await NetlinkSocket.open(
                netns=netns,
                groups=(c.RTNLGRP_LINK,),
                on_event=self._on_link_event,
                on_overrun=self._on_overrun,
            )
        except BaseException:
            sock.close()
            raise
        return self

    def close(self) -> None:
        if self._events is not None:
            self._events.close()
            self._events = None
        if self._sock is not None:
            self._sock.close()

    @property
    def fast_reads(self) -> int:
        """Dump datagrams read through a learned layout (the rest were walked)."""
        return self._stats_cols.fast_reads + self._qdisc_cols.fast_reads

    # --- link state ---------------------------------------------------------------------

    def _on_overrun(self) -> None:
        self._links_at = None  # events were lost: dump again on the next read

    def watch_links(self, callback: Callable[[], None] | None) -> None:
        """Call ``callback`` when a link event changes an interface's state (up/down, name,
        gone); None stops it."""
        self._watch = callback

    def _set_link(self, index: int, info: _LinkInfo | None) -> None:
        old = self._links.get(index)
        if info is None:
            if old is None:
                return
            del self._links[index]
        elif old != info:
            self._links[index] = info
        else:
            return
        self._links_ver += 1
        if self._watch is not None:
            self._watch()

    def _on_link_event(self, msg: Message) -> None:
        h = msg.header
        if not isinstance(h, IfInfoMsg):
            return
        self.link_events += 1
        if msg.type == c.RTM_DELLINK:
            self._set_link(h.index, None)
            return
        if msg.type != c.RTM_NEWLINK:
            return
        am = msg.attr_map()
        name_a = am.get(c.IFLA_IFNAME)
        old = self._links.get(h.index)
        name = name_a.as_str() if name_a is not None else (old.name if old else "")
        op = am.get(c.IFLA_OPERSTATE)
        car = am.get(c.IFLA_CARRIER)
        operstate = op.as_u8() if op is not None else c.IF_OPER_UNKNOWN
        carrier = bool(car.as_u8()) if car is not None else bool(h.flags & c.IFF_LOWER_UP)
        self._set_link(h.index, _LinkInfo(name, _is_up(h.flags, operstate, carrier)))

    def _refresh_links(self) -> Steps[None]:
        rows = yield from self._dump(link_dump(skip_stats=True))
        self.link_dumps += 1
        links: dict[int, _LinkInfo] = {}
        for typ, data in rows:
            got = _link_info(data) if typ == c.RTM_NEWLINK else None
            if got is not None:
                links[got[0]] = got[1]
        if links != self._links:
            self._links = links
            self._links_ver += 1

    # --- dumps --------------------------------------------------------------------------
    #
    # The reads are generators that yield only when the socket has nothing queued yet; the
    # kernel fills a dump's replies inside send() and recv(), so in practice they run to the
    # end at once and the runner needs no task, future or extra loop turn per sample.
    # read_columns() / finish() drive them on the event loop, awaiting readability.

    def _next_seq(self) -> int:
        # 1..250: small ints (no allocation when a datagram's 129 seq fields are unpacked);
        # plenty to tell this dump's replies from a previous, abandoned one
        self._seq = self._seq % 250 + 1
        return self._seq

    def _recv(self) -> Steps[int]:
        sock = self._sock
        assert sock is not None
        while True:
            try:
                return sock.recv_into(self._buf)
            except BlockingIOError:
                yield

    def _dump(self, req: Message) -> Steps[list[tuple[int, bytes]]]:
        """One dump request; returns (type, body) of every reply message (restarts on
        NLM_F_DUMP_INTR). Raises OSError on a kernel error, DecodeError on bad framing; after
        any error the rest of the dump is drained. (Link refresh and foreign classes only.)"""
        sock = self._sock
        assert sock is not None
        rows: list[tuple[int, bytes]] = []
        for _attempt in range(3):
            seq = self._next_seq()
            sock.send(replace(req, seq=seq).encode())
            try:
                rows, intr = yield from self._dump_rows(seq)
            except Exception:
                self._drain()
                raise
            if not intr:
                return rows
        return rows

    def _dump_rows(self, seq: int) -> Steps[tuple[list[tuple[int, bytes]], bool]]:
        """The replies to dump ``seq`` up to its NLMSG_DONE, and whether it was interrupted."""
        rows: list[tuple[int, bytes]] = []
        intr = False
        while True:
            n = yield from self._recv()
            data = bytes(self._buf[:n])
            for fr in iter_frames(data):
                if fr.seq != seq:
                    continue
                intr = intr or bool(fr.flags & c.NLM_F_DUMP_INTR)
                if fr.type == c.NLMSG_DONE:
                    return rows, intr
                if fr.type == c.NLMSG_ERROR:
                    h = decode_frame(data, fr).header
                    err = -h.error if isinstance(h, ErrorMsg) else 0
                    if err:
                        raise OSError(err, os.strerror(err))
                    return rows, intr
                rows.append((fr.type, data[fr.start : fr.end]))

    def _dump_columns(
        self, cols: DumpColumns, req: bytearray
    ) -> Steps[tuple[tuple[int, ...], ...]]:
        """One periodic dump read as columns (restarts on NLM_F_DUMP_INTR). Raises OSError on
        a kernel error; after any error the rest of the dump is drained."""
        sock = self._sock
        assert sock is not None
        buf = self._buf
        out: tuple[tuple[int, ...], ...] = ()
        for _attempt in range(3):
            seq = self._next_seq()
            _SEQ.pack_into(req, _SEQ_OFFSET, seq)
            sock.send(req)
            out = ()
            intr = False
            part = 0
            try:
                while True:
                    try:
                        n = sock.recv_into(buf)
                    except BlockingIOError:
                        yield  # nothing queued yet (the rare case): wait for the socket
                        continue
                    ch = cols.read(buf, n, seq, part)
                    part += 1
                    if ch.error:
                        raise OSError(ch.error, os.strerror(ch.error))
                    intr = intr or ch.intr
                    if out:  # a dump longer than one datagram
                        out = tuple(a + b for a, b in zip(out, ch.cols, strict=True))
                    else:
                        out = ch.cols
                    if ch.done:
                        break
            except Exception:
                self._drain()
                raise
            if not intr:
                return out
        return out

    def drain(self) -> None:
        """Drop the rest of an abandoned dump (see :meth:`_drain`)."""
        if self._sock is not None:
            self._drain()

    def _drain(self) -> None:
        """Read and drop whatever is queued (the kernel refills a running dump on each read)."""
        assert self._sock is not None
        for _ in range(1000):
            try:
                self._sock.recv_into(self._buf)
            except OSError:  # BlockingIOError: empty
                return

    async def _readable(self, loop: asyncio.AbstractEventLoop) -> None:
        fut: asyncio.Future[None] = loop.create_future()
        assert self._sock is not None
        fd = self._sock.fileno()

        def ready() -> None:
            if not fut.done():
                fut.set_result(None)

        loop.add_reader(fd, ready)
        try:
            await fut
        finally:
            loop.remove_reader(fd)

    def read_steps(self, ifnames: Iterable[str] | None, now: float) -> Steps[Columns]:
        """:meth:`read_columns` as a generator that yields only while the socket has nothing
        queued yet (hand it to :meth:`finish` then); ``now`` is the loop's clock."""
        if self._links_at is None or now - self._links_at >= self._link_refresh_s:
            self._links_at = now
            try:
                yield from self._refresh_links()
            except BaseException:
                self._links_at = None  # failed: again on the next sample, not in 5 s
                raise
        idx_s, tx = yield from self._dump_columns(self._stats_cols, self._stats_req)
        idx_q, parent, backlog = yield from self._dump_columns(self._qdisc_cols, self._qdisc_req)
        self.dumps += 2
        p = self._plan
        if (
            p is None
            or p.ver != self._links_ver
            or (p.want is not ifnames and p.want != _as_set(ifnames))
            or p.idx_s != idx_s
            or p.idx_q != idx_q
            or p.parent != parent
        ):
            p = self._plan = _Plan(
                self._links_ver, _as_set(ifnames), idx_s, idx_q, parent, self._links
            )
        return Columns(p.names, p.ups, p.get_tx(tx), p.get_bl((*backlog, 0)), p.ifindex)

    def foreign_steps(self, parents: frozenset[int]) -> Steps[dict[int, int]]:
        """One RTM_GETQDISC dump read for :func:`foreign_bytes` (a generator like
        :meth:`read_steps`; hand it to :meth:`finish` if it yields)."""
        rows = yield from self._dump(qdisc_dump())
        self.dumps += 1
        return foreign_bytes(rows, parents)

    async def finish(self, steps: Steps[_T], *, started: bool = True) -> _T:
        """Run a :meth:`read_steps` (or :meth:`foreign_steps`) generator to its end on the
        event loop (``started``: it has already yielded once, i.e. it is waiting for the
        socket)."""
        loop = asyncio.get_running_loop()
        if started:
            await self._readable(loop)
        while True:
            try:
                next(steps)
            except StopIteration as stop:
                result: _T = stop.value
                return result
            await self._readable(loop)

    async def read(self, ifnames: Iterable[str] | None = None) -> list[LinkSample]:
        """One sample of every interface (only ``ifnames`` if given) that the kernel lists."""
        cols = await self.read_columns(ifnames)
        return list(map(LinkSample, *cols))

    async def read_columns(self, ifnames: Iterable[str] | None = None) -> Columns:
        """:meth:`read` as :class:`Columns`. Pass the same frozenset every time (e.g.
        :attr:`~glbd.quality.linkq.LinkMonitor.interface_set`) and the join is reused from sample
        to sample."""
        loop = asyncio.get_running_loop()
        return await self.finish(self.read_steps(ifnames, loop.time()), started=False)
