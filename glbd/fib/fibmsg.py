"""The rtnetlink messages of glbd's FIB writes (pure): member nexthops, groups, routes, deletes.

Builders take plain values (ids, addresses, clock_t timers), so the codec knows nothing of the
planner's ops; :mod:`glbd.fib.fibcache` maps each op type to one builder here.

Ownership on the wire: glbd replaces (``NLM_F_REPLACE``) only an object of its own that it
knows is there; every other write is create-only (``NLM_F_EXCL``), so an object that appeared
unseen (another daemon's, an operator's) is refused with EEXIST instead of overwritten.

Routes have a single encoder, :func:`route_wire`, packed by hand: route writes are the bulk of
a 100k-route install. :func:`route_message` is its decoded form (tests, ``glbctl decode``).
"""

from __future__ import annotations

import functools
import ipaddress
import socket
import struct
from collections.abc import Iterable

from glbd.netlink import const as c
from glbd.netlink.codec import Attr, DecodeError, Message, NhMsg, decode

__all__ = [
    "CREATE_FLAGS",
    "REPLACE_FLAGS",
    "blackhole_nexthop",
    "encode_group",
    "failover_wire",
    "group_set",
    "group_set_wire",
    "nexthop_del",
    "nexthop_set",
    "parse_group_entries",
    "route_message",
    "route_wire",
]

REPLACE_FLAGS = c.NLM_F_REQUEST | c.NLM_F_CREATE | c.NLM_F_REPLACE
CREATE_FLAGS = c.NLM_F_REQUEST | c.NLM_F_CREATE | c.NLM_F_EXCL

_GRP = struct.Struct("=IBBH")  # struct nexthop_grp: id, weight, weight_high, resvd2
_NLA_HDR = struct.Struct("=HH")
_NLA_U32 = struct.Struct("=HHI")
_HDR_RT = struct.Struct("=IHHIIBBBBBBBBI")  # nlmsghdr + rtmsg
_RT_SCOPE_NOWHERE = 255  # on delete: matches a route of any scope
# the common bulk write in one pack: nlmsghdr + rtmsg + RTA_DST (IPv4) + RTA_TABLE + RTA_NH_ID
_RT4_NH = struct.Struct("=IHHIIBBBBBBBBIHH4sHHIHHI")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def _family(addr: IPAddress) -> int:
    return socket.AF_INET if addr.version == 4 else socket.AF_INET6


def encode_group(entries: Iterable[tuple[int, int]], weight_16bit: bool) -> bytes:
    """NHA_GROUP payload of ``(member id, weight)`` pairs; the wire carries weight - 1 (16 bits
    with weight_high on kernels >= 6.12, else 8)."""
    top = 0xFFFE if weight_16bit else 0xFF
    flat: list[int] = []
    for nhid, w in entries:
        wire = w - 1
        if wire < 0 or wire > top:
            raise ValueError(f"weight {w} out of range")
        flat += (nhid, wire & 0xFF, wire >> 8, 0)
    return _grp_struct(len(flat) >> 2).pack(*flat)


@functools.lru_cache(maxsize=256)
def _grp_struct(n: int) -> struct.Struct:
    """struct nexthop_grp x n (a group write packs its members in one call)."""
    return struct.Struct("=" + "IBBH" * n)


def parse_group_entries(data: bytes) -> tuple[tuple[int, int], ...]:
    """The sorted ``(member id, weight)`` pairs of an NHA_GROUP payload."""
    if len(data) % _GRP.size:
        raise DecodeError("bad_nha_group", f"{len(data)} bytes")
    return tuple(sorted((i, ((hi << 8) | lo) + 1) for i, lo, hi, _r in _GRP.iter_unpack(data)))


def nexthop_set(
    nid: int, gateway: IPAddress, ifindex: int, onlink: bool, *, protocol: int, replace: bool
) -> Message:
    """RTM_NEWNEXTHOP for one member nexthop (gateway on ``ifindex``)."""
    return Message(
        c.RTM_NEWNEXTHOP,
        REPLACE_FLAGS if replace else CREATE_FLAGS,
        header=NhMsg(_family(gateway), 0, protocol, c.RTNH_F_ONLINK if onlink else 0),
        attrs=(
            Attr.u32(c.NHA_ID, nid),
            Attr.u32(c.NHA_OIF, ifindex),
            Attr.addr(c.NHA_GATEWAY, gateway),
        ),
    )


def blackhole_nexthop(nid: int, *, protocol: int) -> Message:
    """RTM_NEWNEXTHOP, create-only, for an IPv4 blackhole nexthop (the weight-width probe)."""
    return Message(
        c.RTM_NEWNEXTHOP,
        c.NLM_F_CREATE | c.NLM_F_EXCL,
        header=NhMsg(socket.AF_INET, 0, protocol, 0),
        attrs=(Attr.u32(c.NHA_ID, nid), Attr.flag(c.NHA_BLACKHOLE)),
    )


def group_set(
    gid: int,
    entries: Iterable[tuple[int, int]],
    *,
    protocol: int,
    create: bool,
    weight_16bit: bool,
    resilient: tuple[int, int, int] | None = None,
) -> Message:
    """RTM_NEWNEXTHOP for a group; ``resilient``: (buckets, idle timer, unbalanced timer), the
    timers in clock_t (1/100 s), for a resilient group."""
    attrs = [Attr.u32(c.NHA_ID, gid), Attr(c.NHA_GROUP, encode_group(entries, weight_16bit))]
    if resilient is not None:
        buckets, idle_ct, unbalanced_ct = resilient
        attrs.append(Attr.u16(c.NHA_GROUP_TYPE, c.NEXTHOP_GRP_TYPE_RES))
        attrs.append(
            Attr.nest(
                c.NHA_RES_GROUP,
                (
                    Attr.u16(c.NHA_RES_GROUP_BUCKETS, buckets),
                    Attr.u32(c.NHA_RES_GROUP_IDLE_TIMER, idle_ct),
                    Attr.u32(c.NHA_RES_GROUP_UNBALANCED_TIMER, unbalanced_ct),
                ),
            )
        )
    flags = CREATE_FLAGS if create else REPLACE_FLAGS
    return Message(c.RTM_NEWNEXTHOP, flags, header=NhMsg(0, 0, protocol, 0), attrs=tuple(attrs))


#: nlmsghdr + nhmsg + NHA_ID + the NHA_GROUP attribute's header: a plain group write in one pack
_GRP_HDR = struct.Struct("=IHHIIBBBxIHHIHH")


def group_set_wire(
    gid: int,
    entries: Iterable[tuple[int, int]],
    *,
    protocol: int,
    create: bool,
    weight_16bit: bool,
    resilient: tuple[int, int, int] | None = None,
) -> bytes:
    """:func:`group_set`, encoded: the same bytes, without building attribute objects for the
    common write (weights of a hash-threshold group, several per heartbeat that moves them)."""
    if resilient is not None:
        return group_set(
            gid,
            entries,
            protocol=protocol,
            create=create,
            weight_16bit=weight_16bit,
            resilient=resilient,
        ).encode()
    grp = encode_group(entries, weight_16bit)
    return (
        _GRP_HDR.pack(
            _GRP_HDR.size + len(grp),
            c.RTM_NEWNEXTHOP,
            CREATE_FLAGS if create else REPLACE_FLAGS,
            0,
            0,
            0,
            0,
            protocol,
            0,
            8,
            c.NHA_ID,
            gid,
            4 + len(grp),
            c.NHA_GROUP,
        )
        + grp
    )


def nexthop_del(nid: int, *, flags: int = c.NLM_F_REQUEST, seq: int = 0) -> Message:
    """RTM_DELNEXTHOP of one id (member or group)."""
    return Message(c.RTM_DELNEXTHOP, flags, seq, header=NhMsg(), attrs=(Attr.u32(c.NHA_ID, nid),))


def route_wire(
    prefix: IPNetwork,
    metric: int,
    nhid: int | None,
    *,
    table: int,
    protocol: int,
    replace: bool = False,
) -> bytes:
    """RTM_NEWROUTE pointing ``prefix`` at nexthop ``nhid``, or RTM_DELROUTE when ``nhid`` is
    None (a delete names glbd's protocol: it never takes another protocol's route)."""
    plen = prefix.prefixlen
    if nhid is not None and not metric and plen and prefix.version == 4:
        return _RT4_NH.pack(
            _RT4_NH.size,
            c.RTM_NEWROUTE,
            REPLACE_FLAGS if replace else CREATE_FLAGS,
            0,
            0,
            socket.AF_INET,
            plen,
            0,
            0,
            table if table < 256 else 0,
            protocol,
            c.RT_SCOPE_UNIVERSE,
            c.RTN_UNICAST,
            0,
            8,
            c.RTA_DST,
            int(prefix.network_address).to_bytes(4, "big"),
            8,
            c.RTA_TABLE,
            table,
            8,
            c.RTA_NH_ID,
            nhid,
        )
    parts = []
    if prefix.prefixlen:
        packed = prefix.network_address.packed
        parts.append(_NLA_HDR.pack(4 + len(packed), c.RTA_DST) + packed)
    parts.append(_NLA_U32.pack(8, c.RTA_TABLE, table))
    if nhid is not None:
        parts.append(_NLA_U32.pack(8, c.RTA_NH_ID, nhid))
        mtype, scope, rtype = c.RTM_NEWROUTE, c.RT_SCOPE_UNIVERSE, c.RTN_UNICAST
        flags = REPLACE_FLAGS if replace else CREATE_FLAGS
    else:
        mtype, flags, scope, rtype = c.RTM_DELROUTE, c.NLM_F_REQUEST, _RT_SCOPE_NOWHERE, 0
    if metric:
        parts.append(_NLA_U32.pack(8, c.RTA_PRIORITY, metric))
    body = b"".join(parts)
    fam = socket.AF_INET if prefix.version == 4 else socket.AF_INET6
    rtm_table = table if table < 256 else 0  # a table >= 256 goes in RTA_TABLE only
    return (
        _HDR_RT.pack(
            _HDR_RT.size + len(body),
            mtype,
            flags,
            0,
            0,
            fam,
            prefix.prefixlen,
            0,
            0,
            rtm_table,
            protocol,
            scope,
            rtype,
            0,
        )
        + body
    )


def route_message(
    prefix: IPNetwork,
    metric: int,
    nhid: int | None,
    *,
    table: int,
    protocol: int,
    replace: bool = False,
) -> Message:
    """:func:`route_wire` as a :class:`Message`."""
    return decode(route_wire(prefix, metric, nhid, table=table, protocol=protocol, replace=replace))


def failover_wire(ids: Iterable[int]) -> bytes:
    """The requests the BFD engine sends when a peer fails (``bfd.failover``): one
    ``RTM_DELNEXTHOP`` per nexthop id, with ``NLM_F_ACK`` and the id as the sequence number so
    that a refusal names the id. Deleting a member nexthop makes the kernel drop it from every
    group at once (keeping the other members' weights) and delete a group it empties, with that
    group's routes: the same end state as glbd's own failover, in one datagram."""
    return b"".join(
        nexthop_del(i, flags=c.NLM_F_REQUEST | c.NLM_F_ACK, seq=i).encode()
        for i in sorted(set(ids))
    )
