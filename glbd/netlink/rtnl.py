"""Request builders and payload parsers for the rtnetlink messages glbd uses (pure).

Link-quality fast path (one dump every 10 ms, only the attributes asked for)::

    sock = await NetlinkSocket.open(netns="leaf1")
    rows = await sock.dump_select(link_dump(), IfInfoMsg, LINK_WANT)
    for r in rows:
        st = link_state(r)            # ifindex, name, operstate, carrier, tx_bytes, ...
    rows = await sock.dump_select(qdisc_dump(), TcMsg, QDISC_WANT)
    for r in rows:
        q = qdisc_queue(r)            # ifindex, handle, parent, kind, qlen, backlog, drops

Counters only (no names, no state; far fewer bytes than a link dump)::

    for m in await sock.dump(stats_dump()):   # RTM_GETSTATS, IFLA_STATS_LINK_64 only
        s = link_stats(m)             # ifindex, rx/tx bytes/packets/dropped
"""

from __future__ import annotations

import struct
import sys
from dataclasses import dataclass
from typing import Any

from glbd.netlink import const as c
from glbd.netlink.codec import (
    Attr,
    DecodeError,
    IfInfoMsg,
    IfStatsMsg,
    Message,
    NhMsg,
    RtMsg,
    Selected,
    TcMsg,
    pick_attrs,
)
from glbd.netlink.columns import attr_find

__all__ = [
    "LINK_WANT",
    "QDISC_WANT",
    "LinkState",
    "LinkStats",
    "QdiscQueue",
    "link_dump",
    "link_state",
    "link_stats",
    "nexthop_bucket_dump",
    "nexthop_dump",
    "qdisc_backlog_fields",
    "qdisc_dump",
    "qdisc_queue",
    "route_dump",
    "route_event_filter",
    "stats_dump",
    "stats_tx_fields",
]

_STATS64 = struct.Struct("=24Q")  # first 24 u64 of rtnl_link_stats64 (kernel may send more)
_GNET_QUEUE = struct.Struct("=IIIII")  # qlen backlog drops requeues overlimits
_U32 = struct.Struct("=I")

LINK_WANT = frozenset({c.IFLA_IFNAME, c.IFLA_OPERSTATE, c.IFLA_CARRIER, c.IFLA_STATS64})
QDISC_WANT = frozenset({c.TCA_KIND, c.TCA_STATS2})


def link_dump(*, skip_stats: bool = False) -> Message:
    attrs = (Attr.u32(c.IFLA_EXT_MASK, c.RTEXT_FILTER_SKIP_STATS),) if skip_stats else ()
    return Message(c.RTM_GETLINK, c.NLM_F_REQUEST | c.NLM_F_DUMP, header=IfInfoMsg(), attrs=attrs)


def stats_dump(filter_mask: int = c.stats_filter_bit(c.IFLA_STATS_LINK_64)) -> Message:
    """RTM_GETSTATS dump of every interface; by default only ``IFLA_STATS_LINK_64``."""
    return Message(
        c.RTM_GETSTATS, c.NLM_F_REQUEST | c.NLM_F_DUMP, header=IfStatsMsg(filter_mask=filter_mask)
    )


def qdisc_dump() -> Message:
    return Message(c.RTM_GETQDISC, c.NLM_F_REQUEST | c.NLM_F_DUMP, header=TcMsg())


def route_dump(family: int = 0, *, table: int = 0, protocol: int = 0) -> Message:
    """Route dump; with the socket's strict checking the kernel filters by table/protocol."""
    attrs = (Attr.u32(c.RTA_TABLE, table),) if table else ()
    hdr = RtMsg(family=family, table=table if table < 256 else 0, protocol=protocol)
    return Message(c.RTM_GETROUTE, c.NLM_F_REQUEST | c.NLM_F_DUMP, header=hdr, attrs=attrs)


# classic BPF opcodes (linux/filter.h)
_BPF_LDB_ABS = 0x30  # BPF_LD | BPF_B | BPF_ABS
_BPF_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_BPF_RET_K = 0x06  # BPF_RET | BPF_K
_NLMSGHDR_LEN = 16
_RTM_TABLE_OFF = _NLMSGHDR_LEN + 4  # rtmsg: family dst_len src_len tos table protocol ...
_RTM_PROTOCOL_OFF = _NLMSGHDR_LEN + 5
_NLMSG_TYPE_OFF = 4  # nlmsghdr: len(u32) type(u16) flags(u16) seq pid, host byte order
_NHM_PROTOCOL_OFF = _NLMSGHDR_LEN + 2  # nhmsg: family scope protocol resvd flags


def route_event_filter(protocol: int, table: int) -> list[tuple[int, int, int, int]]:
    """BPF program for a route-event socket (``NetlinkSocket.attach_filter``): keep only
    notifications about routes of another protocol, in ``table`` when it fits rtm_table
    (a table >= 256 shows as RT_TABLE_COMPAT there, so those are checked in Python). glbd's
    own routes are dropped in the kernel: its own writes, and in nexthop_compat_mode 1 one
    RTM_NEWROUTE per route for each group replace, would otherwise flood the socket."""
    rtm_table = table if table < 256 else 252  # RT_TABLE_COMPAT
    accept, drop = (_BPF_RET_K, 0, 0, 0xFFFFFFFF), (_BPF_RET_K, 0, 0, 0)
    return [
        (_BPF_LDB_ABS, 0, 0, _RTM_TABLE_OFF),
        (_BPF_JEQ_K, 0, 3, rtm_table),  # other table: drop
        (_BPF_LDB_ABS, 0, 0, _RTM_PROTOCOL_OFF),
        (_BPF_JEQ_K, 1, 0, protocol),  # glbd's own: drop
        accept,
        drop,
    ]


def nexthop_event_filter(protocol: int) -> list[tuple[int, int, int, int]]:
    """BPF program for a link + nexthop event socket: drop RTM_NEWNEXTHOP notifications of
    glbd's own protocol (the echoes of its own writes: a failover that replaces 1,000 groups
    would otherwise queue 1,000 notifications ahead of the ACKs it waits for); keep deletions,
    other protocols' nexthops and every link event."""
    # every rtnetlink type is < 256: its low byte (first in little-endian) identifies it
    lsb = _NLMSG_TYPE_OFF + (0 if sys.byteorder == "little" else 1)
    accept, drop = (_BPF_RET_K, 0, 0, 0xFFFFFFFF), (_BPF_RET_K, 0, 0, 0)
    return [
        (_BPF_LDB_ABS, 0, 0, lsb),
        (_BPF_JEQ_K, 0, 2, c.RTM_NEWNEXTHOP),  # anything else: keep
        (_BPF_LDB_ABS, 0, 0, _NHM_PROTOCOL_OFF),
        (_BPF_JEQ_K, 1, 0, protocol),  # glbd's own: drop
        accept,
        drop,
    ]


def nexthop_dump(family: int = 0) -> Message:
    return Message(c.RTM_GETNEXTHOP, c.NLM_F_REQUEST | c.NLM_F_DUMP, header=NhMsg(family=family))


def nexthop_bucket_dump(group_id: int) -> Message:
    """Every bucket of resilient group ``group_id``: one RTM_NEWNEXTHOPBUCKET reply each,
    with its index, idle time and member (the kernel filters by NHA_ID)."""
    return Message(
        c.RTM_GETNEXTHOPBUCKET,
        c.NLM_F_REQUEST | c.NLM_F_DUMP,
        header=NhMsg(),
        attrs=(Attr.u32(c.NHA_ID, group_id),),
    )


@dataclass(frozen=True, slots=True)
class LinkState:
    ifindex: int
    name: str
    flags: int
    operstate: int
    carrier: bool
    rx_bytes: int
    tx_bytes: int
    rx_packets: int
    tx_packets: int
    tx_dropped: int

    @property
    def up(self) -> bool:
        return bool(self.flags & c.IFF_UP) and self.carrier


def link_state(row: Selected) -> LinkState:
    h = row.header
    if not isinstance(h, IfInfoMsg):
        raise DecodeError("not_a_link", type(h).__name__)
    a = row.attrs
    name = a.get(c.IFLA_IFNAME, b"").split(b"\0", 1)[0].decode("utf-8", "replace")
    op = a.get(c.IFLA_OPERSTATE)
    car = a.get(c.IFLA_CARRIER)
    st = a.get(c.IFLA_STATS64)
    if st is not None and len(st) >= _STATS64.size:
        s = _STATS64.unpack_from(st)
        rxp, txp, rxb, txb, txd = s[0], s[1], s[2], s[3], s[7]
    else:
        rxp = txp = rxb = txb = txd = 0
    return LinkState(
        ifindex=h.index,
        name=name,
        flags=h.flags,
        operstate=op[0] if op else c.IF_OPER_UNKNOWN,
        carrier=bool(car[0]) if car else bool(h.flags & c.IFF_LOWER_UP),
        rx_bytes=rxb,
        tx_bytes=txb,
        rx_packets=rxp,
        tx_packets=txp,
        tx_dropped=txd,
    )


@dataclass(frozen=True, slots=True)
class QdiscQueue:
    ifindex: int
    handle: int
    parent: int
    kind: str
    qlen: int
    backlog: int  # bytes
    drops: int
    requeues: int
    overlimits: int


def qdisc_queue(row: Selected) -> QdiscQueue:
    h = row.header
    if not isinstance(h, TcMsg):
        raise DecodeError("not_a_qdisc", type(h).__name__)
    kind = row.attrs.get(c.TCA_KIND, b"").split(b"\0", 1)[0].decode("ascii", "replace")
    q = (0, 0, 0, 0, 0)
    st2 = row.attrs.get(c.TCA_STATS2)
    if st2 is not None:
        sub = pick_attrs(st2, 0, len(st2), frozenset({c.TCA_STATS_QUEUE}))
        qb = sub.get(c.TCA_STATS_QUEUE)
        if qb is not None and len(qb) >= _GNET_QUEUE.size:
            q = _GNET_QUEUE.unpack_from(qb)
    return QdiscQueue(h.ifindex, h.handle, h.parent, kind, *q)


@dataclass(frozen=True, slots=True)
class LinkStats:
    """The counters of one RTM_NEWSTATS message (``IFLA_STATS_LINK_64``)."""

    ifindex: int
    rx_packets: int
    tx_packets: int
    rx_bytes: int
    tx_bytes: int
    rx_dropped: int
    tx_dropped: int


def link_stats(msg: Message) -> LinkStats:
    """Counters of an RTM_NEWSTATS message; DecodeError without ``IFLA_STATS_LINK_64``."""
    h = msg.header
    if not isinstance(h, IfStatsMsg):
        raise DecodeError("not_a_stats_msg", type(h).__name__)
    a = msg.attr(c.IFLA_STATS_LINK_64)
    if a is None:
        raise DecodeError("no_link_64", f"ifindex {h.ifindex}")
    if len(a.data) < _STATS64.size:
        raise DecodeError("attr_too_short", f"IFLA_STATS_LINK_64: {len(a.data)} bytes")
    s = _STATS64.unpack_from(a.data)
    return LinkStats(h.ifindex, s[0], s[1], s[2], s[3], s[6], s[7])


# --- locate functions for glbd.netlink.columns.DumpColumns (periodic dumps, fast path) ---


def stats_tx_fields(buf: Any, start: int, end: int) -> tuple[list[int], list[int]] | None:
    """RTM_NEWSTATS body ``buf[start:end]``: offsets of (ifindex u32, tx_bytes u64), guarded
    by the attribute headers up to ``IFLA_STATS_LINK_64``; tx_bytes -1 (absent) without it."""
    if end - start < IfStatsMsg.ST.size:
        return None
    at, a_end, passed = attr_find(buf, start + IfStatsMsg.ST.size, end, c.IFLA_STATS_LINK_64)
    if at < 0 or a_end - at < 4 + 32:
        return [start + 4, -1], passed
    return [start + 4, at + 4 + 24], passed


def qdisc_backlog_fields(buf: Any, start: int, end: int) -> tuple[list[int], list[int]] | None:
    """RTM_NEWQDISC body: offsets of (ifindex i32, parent u32, backlog u32); the backlog from
    ``TCA_STATS2``/``TCA_STATS_QUEUE`` (else the legacy ``TCA_STATS``), guarded by the
    attribute headers on the way to it; backlog -1 (absent) without either."""
    if end - start < TcMsg.ST.size:
        return None
    first = start + TcMsg.ST.size
    s2, s2_end, passed = attr_find(buf, first, end, c.TCA_STATS2)
    if s2 >= 0:
        q, q_end, inner = attr_find(buf, s2 + 4, s2_end, c.TCA_STATS_QUEUE)
        if q >= 0 and q_end - q >= 4 + _GNET_QUEUE.size:
            return [start + 4, start + 12, q + 8], passed + inner
        passed += inner
    ts, ts_end, legacy = attr_find(buf, first, end, c.TCA_STATS)
    if ts >= 0 and ts_end - ts >= 4 + 36:  # struct tc_stats: backlog at 32
        return [start + 4, start + 12, ts + 4 + 32], passed + legacy
    return [start + 4, start + 12, -1], passed + legacy
