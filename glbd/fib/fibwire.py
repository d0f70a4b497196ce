"""Kernel messages <-> the FIB model (pure): dumps and notifications to :class:`Observed`
objects, planner ops to rtnetlink messages.

Dumps to model: :func:`observe` (full messages) and :func:`routes_from_rows` (the select dump
of a route audit, :data:`ROUTE_WANT`); single messages: :func:`parse_link`,
:func:`parse_nexthop`, :func:`parse_route`. Ops to wire: :func:`op_wire` (bytes, the batch
fast path) and :func:`op_message`, through :data:`ENCODERS`: one builder of
:mod:`glbd.fib.fibmsg` per op type.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeAlias

from glbd.base.prefix import Net4, Net6, network
from glbd.fib import fibmsg
from glbd.fib.fibmodel import (
    IPNetwork,
    KGroup,
    KLink,
    KNexthop,
    KRoute,
    Observed,
    Resilient,
    RouteKey,
)
from glbd.fib.fibmsg import parse_group_entries
from glbd.fib.fibplan import GroupDel, GroupSet, NhDel, NhSet, Op, RouteDel, RouteSet
from glbd.netlink import const as c
from glbd.netlink.codec import (
    Attr,
    DecodeError,
    IfInfoMsg,
    Message,
    NhMsg,
    RtMsg,
    Selected,
    decode,
    pick_attrs,
)

__all__ = [
    "BUCKET_WANT",
    "ENCODERS",
    "LINK_KEEP",
    "ROUTE_WANT",
    "RowMemo",
    "observe",
    "op_message",
    "op_wire",
    "ops_wire",
    "parse_bucket",
    "parse_link",
    "parse_nexthop",
    "parse_route",
    "routes_from_rows",
]

# --- ops -> messages -------------------------------------------------------------------------

#: op type -> (op, protocol, table, weight_16bit) -> message (bytes for routes: the fast path)
Encoder: TypeAlias = Callable[[Any, int, int, bool], Message | bytes]


def _resilient(r: Resilient | None) -> tuple[int, int, int] | None:
    return None if r is None else (r.buckets, r.idle_timer_ct, r.unbalanced_timer_ct)


ENCODERS: dict[type, Encoder] = {
    NhSet: lambda op, proto, _t, _w: fibmsg.nexthop_set(
        op.id, op.member.gateway, op.ifindex, op.member.onlink, protocol=proto, replace=op.replace
    ),
    GroupSet: lambda op, proto, _t, w16: fibmsg.group_set_wire(
        op.id,
        op.entries,
        protocol=proto,
        create=op.create,
        weight_16bit=w16,
        resilient=_resilient(op.resilient),
    ),
    GroupDel: lambda op, _p, _t, _w: fibmsg.nexthop_del(op.id),
    NhDel: lambda op, _p, _t, _w: fibmsg.nexthop_del(op.id),
    RouteSet: lambda op, proto, table, _w: fibmsg.route_wire(
        op.prefix, op.metric, op.nhid, table=table, protocol=proto, replace=op.replace
    ),
    RouteDel: lambda op, proto, table, _w: fibmsg.route_wire(
        op.prefix, op.metric, None, table=table, protocol=proto
    ),
}


def op_wire(op: Op, *, protocol: int, table: int, weight_16bit: bool) -> bytes:
    """The request for ``op``, encoded (flags without NLM_F_ACK, seq 0: the batch sets them)."""
    m = _encode(op, protocol, table, weight_16bit)
    return m if isinstance(m, bytes) else m.encode()


def ops_wire(ops: Sequence[Op], *, protocol: int, table: int, weight_16bit: bool) -> list[bytes]:
    """:func:`op_wire` of every op; route writes (a 100k-route install) encoded inline."""
    route = fibmsg.route_wire
    out: list[bytes] = []
    for op in ops:
        if type(op) is RouteSet:
            msg = route(
                op.prefix, op.metric, op.nhid, table=table, protocol=protocol, replace=op.replace
            )
            out.append(msg)
        else:
            out.append(op_wire(op, protocol=protocol, table=table, weight_16bit=weight_16bit))
    return out


def op_message(op: Op, *, protocol: int, table: int, weight_16bit: bool) -> Message:
    """The request for ``op`` as a :class:`Message`."""
    m = _encode(op, protocol, table, weight_16bit)
    return m if isinstance(m, Message) else decode(m)


def _encode(op: Op, protocol: int, table: int, weight_16bit: bool) -> Message | bytes:
    enc = ENCODERS.get(type(op))
    if enc is None:
        raise TypeError(f"unknown op {op!r}")
    return enc(op, protocol, table, weight_16bit)


# --- dumps -> model --------------------------------------------------------------------------


#: what the FIB reads of a link: the fast dump (:func:`parse_link` of a :class:`Selected`)
LINK_KEEP = frozenset({c.IFLA_IFNAME, c.IFLA_CARRIER})


def parse_link(msg: Message | Selected) -> KLink | None:
    """A link from a message, or from a fast dump's row of :data:`LINK_KEEP` (the audit reads
    every link every few seconds: a full message decodes some 40 attributes a link)."""
    h = msg.header
    if not isinstance(h, IfInfoMsg):
        return None
    if isinstance(msg, Selected):
        raw = msg.attrs
        nm = raw.get(c.IFLA_IFNAME)
        name = (
            nm.split(b"\0", 1)[0].decode("utf-8", "replace") if nm is not None else f"if{h.index}"
        )
        cr = raw.get(c.IFLA_CARRIER)
        carrier = cr[0] != 0 if cr else bool(h.flags & c.IFF_LOWER_UP)
        return KLink(h.index, name, bool(h.flags & c.IFF_UP), carrier)
    a = msg.attr_map()
    name = a[c.IFLA_IFNAME].as_str() if c.IFLA_IFNAME in a else f"if{h.index}"
    carrier = (
        a[c.IFLA_CARRIER].as_u8() != 0 if c.IFLA_CARRIER in a else bool(h.flags & c.IFF_LOWER_UP)
    )
    return KLink(h.index, name, bool(h.flags & c.IFF_UP), carrier)


def _u32(attrs: dict[int, Attr], t: int) -> int:
    return attrs[t].as_u32() if t in attrs else 0


def parse_nexthop(msg: Message) -> tuple[KNexthop | KGroup | None, bool]:
    """(object or None if not a usable nexthop message, 16-bit weights flagged)."""
    h = msg.header
    if not isinstance(h, NhMsg):
        return None, False
    a = msg.attr_map()
    if c.NHA_ID not in a:
        return None, False
    nid = a[c.NHA_ID].as_u32()
    flag16 = c.NHA_OP_FLAGS in a and bool(
        a[c.NHA_OP_FLAGS].as_u32() & c.NHA_OP_FLAG_RESP_GRP_RESVD_0
    )
    if c.NHA_GROUP in a:
        res: Resilient | None = None
        gtype = a[c.NHA_GROUP_TYPE].as_u16() if c.NHA_GROUP_TYPE in a else 0
        if gtype == c.NEXTHOP_GRP_TYPE_RES:
            sub = {x.type: x for x in a[c.NHA_RES_GROUP].children()} if c.NHA_RES_GROUP in a else {}
            buckets = sub[c.NHA_RES_GROUP_BUCKETS].as_u16() if c.NHA_RES_GROUP_BUCKETS in sub else 0
            idle = _u32(sub, c.NHA_RES_GROUP_IDLE_TIMER)
            unb = _u32(sub, c.NHA_RES_GROUP_UNBALANCED_TIMER)
            res = Resilient(buckets, idle / 100, unb / 100)
        return KGroup(nid, h.protocol, parse_group_entries(a[c.NHA_GROUP].data), res), flag16
    gw = a[c.NHA_GATEWAY].as_addr() if c.NHA_GATEWAY in a else None
    oif = a[c.NHA_OIF].as_u32() if c.NHA_OIF in a else 0
    return KNexthop(nid, h.protocol, gw, oif, bool(h.flags & c.RTNH_F_ONLINK)), flag16


_U16 = struct.Struct("=H")
_U32 = struct.Struct("=I")

#: what the FIB reads of a bucket: the fast dump (:func:`parse_bucket` of a :class:`Selected`)
BUCKET_WANT = frozenset({c.NHA_ID, c.NHA_RES_BUCKET})
_BUCKET_SUB = frozenset({c.NHA_RES_BUCKET_INDEX, c.NHA_RES_BUCKET_NH_ID})


def parse_bucket(msg: Message | Selected) -> tuple[int, int, int] | None:
    """(group id, bucket index, member nexthop id) of an RTM_NEWNEXTHOPBUCKET message (or a
    row of the fast dump, :data:`BUCKET_WANT`), or None if it is not one, lacks a field or
    its nested attributes are malformed."""
    if msg.type != c.RTM_NEWNEXTHOPBUCKET or not isinstance(msg.header, NhMsg):
        return None
    if isinstance(msg, Selected):
        gid, nest = msg.attrs.get(c.NHA_ID), msg.attrs.get(c.NHA_RES_BUCKET)
        if gid is None or nest is None or len(gid) < 4:
            return None
        try:
            sub = pick_attrs(nest, 0, len(nest), _BUCKET_SUB)
        except DecodeError:
            return None
        index, member = sub.get(c.NHA_RES_BUCKET_INDEX), sub.get(c.NHA_RES_BUCKET_NH_ID)
        if index is None or member is None or len(index) < 2 or len(member) < 4:
            return None
        return _U32.unpack_from(gid)[0], _U16.unpack_from(index)[0], _U32.unpack_from(member)[0]
    a = msg.attr_map()
    if c.NHA_ID not in a or c.NHA_RES_BUCKET not in a:
        return None
    subs = {x.type: x for x in a[c.NHA_RES_BUCKET].children()}
    if c.NHA_RES_BUCKET_INDEX not in subs or c.NHA_RES_BUCKET_NH_ID not in subs:
        return None
    return (
        a[c.NHA_ID].as_u32(),
        subs[c.NHA_RES_BUCKET_INDEX].as_u16(),
        subs[c.NHA_RES_BUCKET_NH_ID].as_u32(),
    )


def parse_route(msg: Message) -> KRoute | None:
    h = msg.header
    if not isinstance(h, RtMsg) or h.family not in (c.AF_INET, c.AF_INET6):
        return None
    if h.flags & 0x200:  # RTM_F_CLONED
        return None
    a = msg.attr_map()
    table = a[c.RTA_TABLE].as_u32() if c.RTA_TABLE in a else h.table
    if c.RTA_DST in a:
        addr = a[c.RTA_DST].as_addr()
    else:
        addr = ipaddress.ip_address(0 if h.family == c.AF_INET else "::")
    try:
        prefix: IPNetwork = network((addr, h.dst_len))
    except ValueError as e:
        raise DecodeError("bad_route_prefix", str(e)) from None
    metric = a[c.RTA_PRIORITY].as_u32() if c.RTA_PRIORITY in a else 0
    nhid = a[c.RTA_NH_ID].as_u32() if c.RTA_NH_ID in a else None
    return KRoute(prefix, table, h.protocol, metric, nhid)


ROUTE_WANT = frozenset({c.RTA_DST, c.RTA_TABLE, c.RTA_PRIORITY, c.RTA_NH_ID})


RowMemo: TypeAlias = dict[tuple[Any, ...], tuple[RouteKey, KRoute | None]]


def routes_from_rows(
    rows: Iterable[Selected],
    *,
    protocol: int,
    table: int,
    memo: RowMemo | None = None,
    new_memo: RowMemo | None = None,
) -> tuple[dict[RouteKey, KRoute], set[RouteKey]]:
    """Fast path over a select dump (:data:`ROUTE_WANT`): (glbd's routes, foreign keys).

    ``memo`` (from the previous audit) maps the raw bytes of a row to the objects built for it
    last time, so an unchanged 100k-route table costs dict lookups instead of 100k
    ``ipaddress`` constructions; the rows seen are recorded in ``new_memo``."""
    ours: dict[RouteKey, KRoute] = {}
    foreign: set[RouteKey] = set()
    for row in rows:
        h = row.header
        if not isinstance(h, RtMsg) or h.flags & 0x200 or row.type != c.RTM_NEWROUTE:
            continue
        a = row.attrs
        tb = a.get(c.RTA_TABLE)
        if (_U32.unpack(tb[:4])[0] if tb is not None and len(tb) >= 4 else h.table) != table:
            continue
        dst = a.get(c.RTA_DST, b"")
        pr = a.get(c.RTA_PRIORITY)
        nh = a.get(c.RTA_NH_ID)
        raw = (h.family, dst, h.dst_len, pr, nh, h.protocol, h.type)
        hit = memo.get(raw) if memo is not None else None
        if hit is None:
            hit = _route_row(h, dst, pr, nh, protocol, table)
            if hit is None:
                continue
        if new_memo is not None:
            new_memo[raw] = hit
        key, kr = hit
        if kr is None:
            foreign.add(key)
        else:
            ours[key] = kr
    return ours, foreign


def _route_row(
    h: RtMsg, dst: bytes, pr: bytes | None, nh: bytes | None, protocol: int, table: int
) -> tuple[RouteKey, KRoute | None] | None:
    try:
        if h.family == c.AF_INET:
            prefix: IPNetwork = Net4((int.from_bytes(dst, "big") if dst else 0, h.dst_len))
        elif h.family == c.AF_INET6:
            prefix = Net6((int.from_bytes(dst, "big") if dst else 0, h.dst_len))
        else:
            return None
    except ValueError as e:
        raise DecodeError("bad_route_prefix", str(e)) from None
    metric = _U32.unpack(pr[:4])[0] if pr is not None and len(pr) >= 4 else 0
    key = (prefix, metric)
    if h.protocol != protocol:
        return key, None
    if h.type != c.RTN_UNICAST:
        return None
    nhid = _U32.unpack(nh[:4])[0] if nh is not None and len(nh) >= 4 else None
    return key, KRoute(prefix, table, h.protocol, metric, nhid)


def observe(
    links: Iterable[Message | Selected],
    nexthops: Iterable[Message],
    routes: Iterable[Message] | None,
    *,
    protocol: int,
    table: int,
    previous_routes: Observed | None = None,
) -> Observed:
    """Build :class:`Observed` from dumps. ``routes=None`` keeps ``previous_routes``' route
    cache, minus routes whose group no longer exists (the kernel deleted them with it)."""
    obs = Observed()
    for m in links:
        lk = parse_link(m)
        if lk is not None:
            obs.links[lk.name] = lk
    for m in nexthops:
        o, flag16 = parse_nexthop(m)
        if o is None:
            continue
        if flag16:
            obs.weight_16bit = True
        if o.protocol != protocol:
            obs.foreign_ids.add(o.id)
        elif isinstance(o, KGroup):
            obs.groups[o.id] = o
        else:
            obs.nexthops[o.id] = o
    if routes is not None:
        for m in routes:
            r = parse_route(m)
            if r is None or r.table != table or m.type != c.RTM_NEWROUTE:
                continue
            h = m.header
            if isinstance(h, RtMsg) and h.type != c.RTN_UNICAST and r.protocol == protocol:
                continue
            key = (r.prefix, r.metric)
            if r.protocol == protocol:
                obs.routes[key] = r
            else:
                obs.foreign_routes.add(key)
    elif previous_routes is not None:
        obs.foreign_routes = previous_routes.foreign_routes
        # an id now of another protocol was re-owned, not deleted: its routes are still there
        gone = (previous_routes.groups.keys() | previous_routes.nexthops.keys()) - (
            obs.groups.keys() | obs.nexthops.keys() | obs.foreign_ids
        )
        if gone:
            obs.routes = {k: r for k, r in previous_routes.routes.items() if r.nhid not in gone}
        else:
            obs.routes = previous_routes.routes  # shared: the cache is updated in place
    return obs
