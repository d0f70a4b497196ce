"""The FIB programmer's reads of the kernel: the refresh dumps and the start-up weight probe.

Both only talk to the request socket and fold nothing into the programmer's state (the caller does),
so they live apart from :mod:`glbd.fib.programmer`, which holds the lock, the write path and the
reconcile task. :func:`read_kernel` dumps links and nexthops and, for a route audit, glbd's route
table (select dump, folded in slices with loop yields); :func:`detect_weight_bits` finds out whether
the kernel takes 16-bit group weights (docs/fib.md, "Weights").
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog

from glbd.fib import fibmsg
from glbd.fib.fibcache import FibCache
from glbd.fib.fibmodel import KRoute, Observed, RouteKey
from glbd.fib.fibplan import IdRanges
from glbd.fib.fibwire import (
    BUCKET_WANT,
    LINK_KEEP,
    ROUTE_WANT,
    RowMemo,
    parse_bucket,
    routes_from_rows,
)
from glbd.netlink.codec import IfInfoMsg, Message, NhMsg, RtMsg, Selected
from glbd.netlink.rtnl import link_dump, nexthop_bucket_dump, nexthop_dump, route_dump
from glbd.netlink.rtsocket import NetlinkError, NetlinkSocket

__all__ = [
    "AUDIT_SLICE",
    "Audit",
    "Read",
    "detect_weight_bits",
    "read_buckets",
    "read_kernel",
]

log = structlog.get_logger(__name__)

AUDIT_SLICE = 5000  # route rows folded per loop turn: an audit must not stall other tasks
#: a route audit: glbd's routes in its table, and the keys of routes that are not glbd's
Audit = tuple[dict[RouteKey, KRoute], set[RouteKey]]
#: one refresh's dumps: links, nexthops and the route audit (None when not audited)
Read = tuple[list[Selected], list[Message], Audit | None]


async def read_kernel(
    req: NetlinkSocket, fc: FibCache, full: bool, memo: RowMemo
) -> tuple[Read, RowMemo | None]:
    """Dump links (the fast dump: name and carrier) and nexthops; with ``full`` also glbd's
    route table (four attributes per route). ``fc.route_log`` records the route events that
    come during the route dump. Returns the dumps and, after an audit, the row memo for the
    next one (``memo`` is the previous audit's). Routes are keyed by (prefix, metric): glbd's
    standby routes (the standby metric) are read back, and adopted, as its own like the
    primary ones (its protocol number is what makes a route glbd's)."""
    links = await req.dump_select(link_dump(skip_stats=True), IfInfoMsg, LINK_KEEP)
    nhs = await req.dump(nexthop_dump())
    if not full:
        return (links, nhs, None), None
    rows = []
    fc.route_log = []
    try:
        for fam in (2, 10):  # AF_INET, AF_INET6
            rows += await req.dump_select(route_dump(fam, table=fc.table), RtMsg, ROUTE_WANT)
    except BaseException:
        fc.route_log = None
        raise
    new_memo: RowMemo = {}
    audit: Audit = ({}, set())
    for i in range(0, len(rows), AUDIT_SLICE):
        r, f = routes_from_rows(
            rows[i : i + AUDIT_SLICE],
            protocol=fc.protocol,
            table=fc.table,
            memo=memo,
            new_memo=new_memo,
        )
        audit[0].update(r)
        audit[1].update(f)
        await asyncio.sleep(0)
    return (links, nhs, audit), new_memo


async def read_buckets(req: NetlinkSocket, group_id: int) -> tuple[int, ...]:
    """The member nexthop id of each bucket of resilient group ``group_id``, by bucket
    index; () if the group has no buckets (it is gone, or not resilient)."""
    try:
        rows = await req.dump_select(nexthop_bucket_dump(group_id), NhMsg, BUCKET_WANT)
    except NetlinkError as e:
        log.debug("fib_bucket_dump", group=group_id, error=str(e))
        return ()
    found = [b for b in map(parse_bucket, rows) if b is not None and b[0] == group_id]
    out = [0] * len(found)
    for _gid, index, member in found:
        if index >= len(out):  # a hole: the dump raced a change of the bucket count
            return ()
        out[index] = member
    return tuple(out)


async def detect_weight_bits(
    req: NetlinkSocket, o: Observed, ranges: IdRanges, protocol: int
) -> int:
    """16-bit group weights (kernel >= 6.12, weight_high) or 8-bit. Known from an
    NHA_OP_FLAGS in any group dump; otherwise probe with a throw-away blackhole nexthop and a
    one-member group of weight 300 in glbd's id range (needs ``lo`` up). The probe ids are
    free ones, created exclusively, and only what the probe created is deleted."""
    if o.weight_16bit:
        return 16
    taken = o.foreign_ids | o.nexthops.keys() | o.groups.keys()
    nh_id = next(i for i in range(ranges.member_base + ranges.size - 1, 0, -1) if i not in taken)
    grp_id = next(i for i in range(ranges.group_base + ranges.size - 1, 0, -1) if i not in taken)
    bits = 8
    created: list[int] = []
    try:
        await req.request(fibmsg.blackhole_nexthop(nh_id, protocol=protocol))
        created.append(nh_id)
        try:
            grp = [(nh_id, 300)]
            msg = fibmsg.group_set(grp_id, grp, protocol=protocol, create=True, weight_16bit=True)
            await req.request(msg)
            created.append(grp_id)
            bits = 16
        except NetlinkError as e:
            log.info("fib_weight_probe", result="8bit", error=str(e))
    except NetlinkError as e:
        log.info("fib_weight_probe", result="unknown", error=str(e))
    finally:
        for i in reversed(created):
            with contextlib.suppress(NetlinkError):
                await req.request(fibmsg.nexthop_del(i))
    return bits
