"""Request builders and payload parsers for the rtnetlink messages glbd uses (pure).

Link-quality fast path (one dump every 10 ms, only the attributes asked for)::

    sock = await NetlinkSocket.open(netns="leaf1")
    rows = await sock.dump_select(link_dump(), IfInfoMsg, LINK_WANT)
    for r in rows:
        st = link_state(r)            # ifindex, name, operstate, carrier, tx_bytes, ...
    rows = await sock.dump_select(qdisc_dump(), TcMsg, QDISC_WANT)
    for r in rows:
        q = qdisc_queue(r)            # ifindex, handle, parent, kind, qlen, backlog, drops
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from glbd.netlink import const as c
from glbd.netlink.client import Selected
from glbd.netlink.codec import (
    Attr,
    DecodeError,
    IfInfoMsg,
    Message,
    NhMsg,
    RtMsg,
    TcMsg,
    pick_attrs,
)

__all__ = [
    "LINK_WANT",
    "QDISC_WANT",
    "LinkState",
    "QdiscQueue",
    "link_dump",
    "link_state",
    "nexthop_dump",
    "qdisc_dump",
    "qdisc_queue",
    "route_dump",
]

_STATS64 = struct.Struct("=24Q")  # first 24 u64 of rtnl_link_stats64 (kernel may send more)
_GNET_QUEUE = struct.Struct("=IIIII")  # qlen backlog drops requeues overlimits
_U32 = struct.Struct("=I")

LINK_WANT = frozenset({c.IFLA_IFNAME, c.IFLA_OPERSTATE, c.IFLA_CARRIER, c.IFLA_STATS64})
QDISC_WANT = frozenset({c.TCA_KIND, c.TCA_STATS2})


def link_dump(*, skip_stats: bool = False) -> Message:
    attrs = (Attr.u32(c.IFLA_EXT_MASK, c.RTEXT_FILTER_SKIP_STATS),) if skip_stats else ()
    return Message(c.RTM_GETLINK, c.NLM_F_REQUEST | c.NLM_F_DUMP, header=IfInfoMsg(), attrs=attrs)


def qdisc_dump() -> Message:
    return Message(c.RTM_GETQDISC, c.NLM_F_REQUEST | c.NLM_F_DUMP, header=TcMsg())


def route_dump(family: int = 0, *, table: int = 0, protocol: int = 0) -> Message:
    """Route dump; with the socket's strict checking the kernel filters by table/protocol."""
    attrs = (Attr.u32(c.RTA_TABLE, table),) if table else ()
    hdr = RtMsg(family=family, table=table if table < 256 else 0, protocol=protocol)
    return Message(c.RTM_GETROUTE, c.NLM_F_REQUEST | c.NLM_F_DUMP, header=hdr, attrs=attrs)


def nexthop_dump(family: int = 0) -> Message:
    return Message(c.RTM_GETNEXTHOP, c.NLM_F_REQUEST | c.NLM_F_DUMP, header=NhMsg(family=family))


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
