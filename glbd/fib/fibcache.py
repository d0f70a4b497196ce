"""The FIB programmer's pure state: glbd's cached view of the kernel FIB and the bookkeeping
around it (desired state, ids, failed-over members, notes, stale hold, counters), updated from
dumps, notifications and the outcome of glbd's own writes. :mod:`glbd.fib.fibsnap` builds the
``glbctl routes``/``profiles`` snapshot from it.

No sockets, no clock: time comes in as ``now`` (monotonic seconds). The asyncio service
(:class:`glbd.fib.programmer.FibProgrammer`) feeds it and drains three signals after each call:
``wake`` (run a reconcile soon), ``need_full`` (that run also audits routes) and ``map_dirty``
(the failover map may have changed: compare it and report it).

Cache rules (the kernel's own, mirrored so that no dump is needed after each event):

* a successful write is folded in (:meth:`FibCache.account`); a delete of a member drops it from
  every group, and a group left empty goes with its routes;
* carrier loss or admin down flushes the link's nexthops (:meth:`FibCache.link_lost`);
* a notification of one of glbd's nexthops deleted by someone else is mirrored at once; a wanted,
  usable member is held out for ``foreign_delete_hold_s`` (most likely the BFD engine's
  failover, whose event may still be on its way) so that no write re-creates it meanwhile;
* another protocol's route on a wanted prefix is left alone and counted as a conflict.
"""

from __future__ import annotations

import errno
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

import structlog

from glbd.base.reasons import FibConflict
from glbd.fib.fibmodel import (
    Desired,
    IPAddress,
    IPNetwork,
    KGroup,
    KNexthop,
    KRoute,
    Member,
    Observed,
    RouteKey,
)
from glbd.fib.fibplan import (
    WEIGHT_MAX_8BIT,
    WEIGHT_MAX_16BIT,
    GroupDel,
    GroupSet,
    IdMap,
    NhDel,
    NhSet,
    Op,
    PlanParams,
    RouteDel,
    RouteSet,
    is_migration,
    route_metric,
    standby_metric,
    standby_note,
)
from glbd.fib.fibwire import parse_link, parse_route
from glbd.netlink import const as c
from glbd.netlink.codec import Message, NhMsg, RtMsg

__all__ = [
    "CONFLICT_REASONS",
    "FailoverMap",
    "FibCache",
    "FibStats",
    "StaleKeep",
]

log = structlog.get_logger(__name__)

#: (gateway, ifname) -> glbd's member nexthop ids to that next hop (what the BFD engine deletes)
FailoverMap = dict[tuple[IPAddress, str], tuple[int, ...]]

#: conflict reasons (stable names: counters, glbctl, metrics), see glbd.base.reasons
EXISTS_ON_CREATE = FibConflict.ROUTE_EXISTS_ON_CREATE.value
ROUTE_APPEARED = FibConflict.FOREIGN_ROUTE_APPEARED.value
ROUTE_REPLACED = FibConflict.GLBD_ROUTE_REPLACED.value
FOREIGN_PRESENT = FibConflict.FOREIGN_ROUTE_PRESENT.value
NH_ID_TAKEN = FibConflict.NEXTHOP_ID_TAKEN.value
NH_REOWNED = FibConflict.NEXTHOP_REOWNED.value
CONFLICT_REASONS = tuple(r.value for r in FibConflict)
_RTM_F_CLONED = 0x200  # a route-cache entry, not a route
#: own deletions remembered at most (see FibCache.sending)
DELETING_MAX = 4096


@dataclass(slots=True)
class FibStats:
    applies: int = 0
    reconciles: int = 0
    #: reconciles whose dumps showed the kernel as expected: nothing planned
    reconciles_unchanged: int = 0
    full_reconciles: int = 0
    #: plans over every desired route (O(routes)); weight changes and BGP updates avoid them
    full_plans: int = 0
    #: weight writes sent at once on the fast lane (``FibProgrammer.weights_now``), and those
    #: the kernel refused
    lane_writes: int = 0
    lane_errors: int = 0
    ops: int = 0
    op_errors: int = 0
    failovers: int = 0
    #: group replaces that moved a member's busy buckets at once (its share fell, see
    #: ``Resilient.migrate_share``)
    migrations: int = 0
    #: failovers the BFD engine had already done in the kernel (glbd only mirrored them)
    engine_failovers: int = 0
    #: glbd-owned member nexthops deleted by someone else while wanted
    foreign_deletes: int = 0
    link_events: int = 0
    #: nexthop notifications received (the echoes of glbd's own writes are filtered out in the
    #: kernel, see glbd.netlink.rtnl.nexthop_event_filter)
    nexthop_events: int = 0
    overruns: int = 0
    route_events: int = 0
    #: objects glbd did not write because someone else's are there, by reason
    conflicts: dict[str, int] = field(default_factory=dict)
    last_errors: list[str] = field(default_factory=list)

    def conflict(self, reason: str, n: int = 1) -> None:
        self.conflicts[reason] = self.conflicts.get(reason, 0) + n


@dataclass(slots=True)
class StaleKeep:
    """Adopted objects not re-learned since an adopting restart (kept by the stale timer)."""

    routes: set[RouteKey]
    groups: set[int]
    nexthops: set[int]


class FibCache:
    """glbd's view of the kernel FIB (``obs``) and of what it wants there (``desired``)."""

    def __init__(self, protocol: int, table: int, metric: int = 0) -> None:
        self.protocol = protocol
        self.table = table
        self.metric = metric
        self.obs = Observed()
        self.desired: Desired | None = None
        self.ids = IdMap()
        #: failed-over members, kept out of every group
        self.excluded: set[Member] = set()
        #: members of ``excluded`` only until this time (deleted by someone else, unclaimed)
        self.held_until: dict[Member, float] = {}
        self.foreign_delete_hold_s = 0.5
        self.notes: dict[str, str] = {}  # group key / prefix -> why it is not as desired
        self.routes_dirty = True  # the next sync plans every route
        self.stale_keep: StaleKeep | None = None
        self.stale_until = 0.0
        #: route events seen while a route dump runs, replayed on its result
        self.route_log: list[tuple[int, RouteKey]] | None = None
        self.stats = FibStats()
        self.wake = False
        self.need_full = False
        self.map_dirty = False
        self._reported: FailoverMap = {}
        #: the member ids the reported map was computed from (a new IdMap may change it)
        self._map_members: object = None
        #: ids of glbd's own deletions on their way to the kernel: their notification is an
        #: echo, not someone else's deletion, and needs no reconcile
        self._deleting: set[int] = set()

    # -- signals ------------------------------------------------------------------------------
    def _wake(self) -> None:
        self.wake = True

    def take_failover_map(self) -> FailoverMap | None:
        """The failover map if it changed since it was last taken (clears ``map_dirty``)."""
        self.map_dirty = False
        self._map_members = self.ids.members
        fm = self.failover_map()
        if fm == self._reported:
            return None
        self._reported = fm
        return fm

    # -- the reducer --------------------------------------------------------------------------
    def account(self, op: Op) -> None:
        """Fold a successful op into the cached kernel view."""
        o = self.obs
        if isinstance(op, NhSet):
            self.map_dirty = True
            m = op.member
            o.nexthops[op.id] = KNexthop(op.id, self.protocol, m.gateway, op.ifindex, m.onlink)
        elif isinstance(op, GroupSet):
            o.groups[op.id] = KGroup(op.id, self.protocol, op.entries, op.resilient)
            if is_migration(op):
                self.stats.migrations += 1
        elif isinstance(op, RouteSet):
            o.routes[(op.prefix, op.metric)] = KRoute(
                op.prefix, self.table, self.protocol, op.metric, op.nhid
            )
            if o.foreign_routes:
                o.foreign_routes.discard((op.prefix, op.metric))
        elif isinstance(op, RouteDel):
            o.routes.pop((op.prefix, op.metric), None)
        elif isinstance(op, GroupDel):
            o.groups.pop(op.id, None)
            o.routes = {k: r for k, r in o.routes.items() if r.nhid != op.id}
            self.routes_dirty = True
        elif isinstance(op, NhDel):
            self.map_dirty = True
            o.nexthops.pop(op.id, None)
            for gid, kg in list(o.groups.items()):
                rest = tuple(e for e in kg.entries if e[0] != op.id)
                if len(rest) != len(kg.entries):
                    if rest:
                        o.groups[gid] = KGroup(gid, kg.protocol, rest, kg.resilient)
                    else:
                        del o.groups[gid]
                        o.routes = {k: r for k, r in o.routes.items() if r.nhid != gid}
                        self.routes_dirty = True

    def _account_all(self, ops: Sequence[Op]) -> None:
        """:meth:`account` for a batch the kernel took whole; route writes inline."""
        o = self.obs
        routes, foreign = o.routes, o.foreign_routes
        table, protocol = self.table, self.protocol
        for op in ops:
            if type(op) is RouteSet:
                key = (op.prefix, op.metric)
                routes[key] = KRoute(op.prefix, table, protocol, op.metric, op.nhid)
                if foreign:
                    foreign.discard(key)
            else:
                self.account(op)

    def load(
        self,
        obs: Observed,
        audit: tuple[dict[RouteKey, KRoute], set[RouteKey]] | None,
        weight_bits: int | None,
    ) -> int | None:
        """A refresh's dumps: ``obs`` (links and nexthops; routes carried over) and, after a
        route audit, (glbd's routes, foreign route keys). Returns the weight width if the
        dump showed 16-bit weights and none was known, else ``weight_bits``."""
        if audit is not None:
            routes, foreign = audit
            # route events that came during the dump are newer than (or equal to) what it saw
            log_, self.route_log = self.route_log or [], None
            for t, key in log_:
                if t == c.RTM_NEWROUTE:
                    foreign.add(key)
                    routes.pop(key, None)
                else:
                    foreign.discard(key)
            obs.routes, obs.foreign_routes = routes, foreign
            if routes != self.obs.routes or foreign != self.obs.foreign_routes:
                self.routes_dirty = True
            self.stats.full_reconciles += 1
        elif len(obs.routes) != len(self.obs.routes):
            self.routes_dirty = True
        if obs.weight_16bit and weight_bits is None:
            weight_bits = 16
        self.obs = obs
        self.stats.reconciles += 1
        self.map_dirty = True  # the dump may show an id gone or re-owned
        return weight_bits

    def on_event(self, msg: Message, now: float) -> None:
        """A link or nexthop notification."""
        t = msg.type
        if t in (c.RTM_NEWLINK, c.RTM_DELLINK):
            lk = parse_link(msg)
            if lk is None:
                return
            self.stats.link_events += 1
            old = self.obs.links.get(lk.name)
            if t == c.RTM_DELLINK:
                self.obs.links.pop(lk.name, None)
                self.link_lost(lk.index)
                self.map_dirty = True
                self._wake()
            elif old is None or old.usable != lk.usable or old.index != lk.index:
                self.obs.links[lk.name] = lk
                self.map_dirty = True
                if old is not None and old.usable and (not lk.usable or old.index != lk.index):
                    self.link_lost(old.index)
                self._wake()
        elif t in (c.RTM_NEWNEXTHOP, c.RTM_DELNEXTHOP):
            h = msg.header
            if not isinstance(h, NhMsg):
                return
            self.stats.nexthop_events += 1
            if h.protocol != self.protocol:
                a = msg.attr(c.NHA_ID)
                if a is not None and t == c.RTM_NEWNEXTHOP:
                    nid = a.as_u32()
                    self.obs.foreign_ids.add(nid)
                    if nid in self.obs.nexthops or nid in self.obs.groups:
                        self.reowned(nid)
            elif t == c.RTM_DELNEXTHOP:
                a = msg.attr(c.NHA_ID)
                if a is not None and a.as_u32() in self._deleting:
                    self._deleting.discard(a.as_u32())  # our own: ``written`` mirrors it
                    return
                self.nexthop_deleted(msg, now)
                self._wake()  # ours, deleted by someone else: check

    def reowned(self, nid: int) -> None:
        """Someone replaced one of glbd's nexthop ids with an object of its own protocol (the
        kernel does not check the owner). It is no longer glbd's: out of the cache and the
        failover map at once (the BFD engine must never delete it), and the next sync moves
        glbd's member or group to another id and re-points its groups and routes."""
        o = self.obs
        # glbd's routes on a re-owned group are still glbd's: the next sync re-points them
        o.nexthops.pop(nid, None)
        o.groups.pop(nid, None)
        self.stats.conflict(NH_REOWNED)
        self.routes_dirty = True
        log.warning("fib_nexthop_reowned", id=nid)
        self.map_dirty = True
        self._wake()

    def on_route_event(self, msg: Message) -> None:
        """A route of another protocol appeared in or left glbd's table (the socket's BPF
        filter drops glbd's own). A new one on a prefix glbd wants is left alone (and replaces
        glbd's route if it took its place); when it goes, glbd installs its own."""
        h = msg.header
        if not isinstance(h, RtMsg) or h.protocol == self.protocol or h.flags & _RTM_F_CLONED:
            return
        if msg.type not in (c.RTM_NEWROUTE, c.RTM_DELROUTE):
            return
        try:
            r = parse_route(msg)
        except ValueError:
            return
        if r is None or r.table != self.table:
            return
        self.stats.route_events += 1
        key = (r.prefix, r.metric)
        if self.route_log is not None:
            self.route_log.append((msg.type, key))
        o = self.obs
        d = self.desired
        wanted = d is not None and (r.prefix in d.routes or r.prefix in d.standby)
        if msg.type == c.RTM_NEWROUTE:
            known = key in o.foreign_routes
            o.foreign_routes.add(key)
            if o.routes.pop(key, None) is not None:
                self.stats.conflict(ROUTE_REPLACED)
                log.warning("fib_route_replaced", prefix=str(r.prefix), protocol=h.protocol)
            elif wanted and not known:
                self.stats.conflict(ROUTE_APPEARED)
            if wanted:
                self.notes[self.note_key(r.prefix, r.metric)] = "foreign_route"
        else:
            if key not in o.foreign_routes:
                return
            o.foreign_routes.discard(key)
        if wanted:
            self.routes_dirty = True
            self._wake()

    def nexthop_deleted(self, msg: Message, now: float) -> None:
        """One of ours is gone from the kernel: mirror it at once. A wanted member on a usable
        link that glbd did not delete itself (its plan deletes only members it no longer
        needs) is held out for ``foreign_delete_hold_s``: most likely the BFD engine's failover,
        whose event may still be on its way; a write planned meanwhile must not re-create it."""
        a = msg.attr(c.NHA_ID)
        if a is None:
            return
        nid = a.as_u32()
        if nid in self.obs.nexthops:
            self.account(NhDel(nid))
        self.map_dirty = True
        member = next((m for m, i in self.ids.members.items() if i == nid), None)
        if member is None or member in self.excluded:
            return
        lk = self.obs.links.get(member.ifname)
        d = self.desired
        wanted = d is not None and any(g.weights.get(member, 0) > 0 for g in d.groups.values())
        if wanted and lk is not None and lk.usable:
            self.stats.foreign_deletes += 1
            self.excluded.add(member)
            self.held_until[member] = now + self.foreign_delete_hold_s

    def link_lost(self, ifindex: int) -> None:
        """Mirror the kernel's silent flush in the cache: members on the link disappear,
        groups shrink, an emptied group vanishes with its routes. The reconcile confirms."""
        for nid in [i for i, nh in self.obs.nexthops.items() if nh.ifindex == ifindex]:
            self.account(NhDel(nid))
        self.routes_dirty = True

    def on_overrun(self) -> None:
        """An event socket lost notifications: the next run re-reads everything."""
        self.stats.overruns += 1
        self._deleting.clear()
        self.need_full = True
        self._wake()

    # -- failover -----------------------------------------------------------------------------
    def members_of(self, gateway: IPAddress, ifname: str | None) -> set[Member]:
        """The known members to ``gateway`` (on ``ifname``, or on any interface)."""
        ms = set(self.ids.members)
        if self.desired is not None:
            for spec in self.desired.groups.values():
                ms.update(spec.weights)
        return {m for m in ms if m.gateway == gateway and (ifname is None or m.ifname == ifname)}

    def failover_ops(self, gateway: IPAddress, ifname: str | None) -> list[Op]:
        """Exclude the next hop and return the group writes that take it out at once: each
        group that holds it is replaced without it (keeping the others' installed weights), or
        deleted when it would be left empty."""
        targets = self.members_of(gateway, ifname)
        self.excluded |= targets
        self.stats.failovers += 1
        ids = {self.ids.members[m] for m in targets if m in self.ids.members}
        link_idx = {
            lk.index for lk in self.obs.links.values() if ifname is None or lk.name == ifname
        }
        ids |= {
            nh.id
            for nh in self.obs.nexthops.values()
            if nh.gateway == gateway and nh.ifindex in link_idx
        }
        ops: list[Op] = []
        keys = {v: k for k, v in self.ids.groups.items()}
        for gid, kg in sorted(self.obs.groups.items()):
            if not any(mid in ids for mid, _w in kg.entries):
                continue
            rest = tuple(e for e in kg.entries if e[0] not in ids)
            if rest:
                ops.append(GroupSet(gid, keys.get(gid, ""), rest, kg.resilient, create=False))
            else:
                ops.append(GroupDel(gid))
        self._wake()  # a normal reconcile follows (re-scaling, cleanup)
        return ops

    def failed_over(self, gateway: IPAddress, ifname: str | None) -> int:
        """Someone else (the BFD engine) deleted the next hop's member nexthops: mirror it and
        exclude the members until :meth:`restore`. Returns the nexthops mirrored."""
        targets = self.members_of(gateway, ifname)
        self.excluded |= targets
        for m in targets:
            self.held_until.pop(m, None)  # claimed: excluded until restored
        self.stats.failovers += 1
        self.stats.engine_failovers += 1
        ids = {self.ids.members[m] for m in targets if m in self.ids.members}
        mirrored = 0
        for i in sorted(ids):
            if i in self.obs.nexthops:
                self.account(NhDel(i))
                mirrored += 1
        self.map_dirty = True
        self._wake()
        return mirrored

    def restore(self, gateway: IPAddress, ifname: str | None) -> None:
        """Let the next hop back in (the next sync re-creates its members)."""
        self.excluded = {
            m
            for m in self.excluded
            if not (m.gateway == gateway and (ifname is None or m.ifname == ifname))
        }
        for m in [m for m in self.held_until if m not in self.excluded]:
            del self.held_until[m]

    def expire_held(self, now: float) -> None:
        for m, t in list(self.held_until.items()):
            if t <= now:
                del self.held_until[m]
                self.excluded.discard(m)

    def failover_map(self) -> FailoverMap:
        """(gateway, ifname) -> the ids of glbd's member nexthops to that next hop that the
        kernel has: what deleting takes the next hop out of every group. Only ids that glbd
        last saw in the kernel with its own protocol and that next hop's gateway and link
        (the engine deletes by id, and the kernel does not check who owns it)."""
        out: dict[tuple[IPAddress, str], list[int]] = {}
        have = self.obs.nexthops
        links = self.obs.links
        for m, i in self.ids.members.items():
            nh = have.get(i)
            lk = links.get(m.ifname)
            if (
                nh is not None
                and lk is not None
                and nh.protocol == self.protocol
                and (nh.gateway, nh.ifindex, nh.onlink) == (m.gateway, lk.index, m.onlink)
            ):
                out.setdefault((m.gateway, m.ifname), []).append(i)
        return {k: tuple(sorted(v)) for k, v in out.items()}

    # -- planning inputs ----------------------------------------------------------------------
    def stale_kept(self, now: float) -> StaleKeep | None:
        """What the stale timer still holds (None once it ran out)."""
        if self.stale_keep is not None and now >= self.stale_until:
            self.stale_keep = None
        return self.stale_keep

    def params(self, now: float, weight_bits: int | None) -> PlanParams:
        h = self.stale_kept(now)
        none: AbstractSet[Any] = frozenset()
        return PlanParams(
            protocol=self.protocol,
            metric=self.metric,
            max_weight=WEIGHT_MAX_16BIT if weight_bits == 16 else WEIGHT_MAX_8BIT,
            excluded=frozenset(self.excluded),
            keep_routes=h.routes if h else none,
            keep_groups=h.groups if h else none,
            keep_nexthops=h.nexthops if h else none,
        )

    def relearn(self, prefixes: Iterable[IPNetwork] | None, now: float) -> None:
        """The desired state names these again: the stale timer no longer holds them.
        ``prefixes`` None: the whole desired route mapping (a full sync)."""
        h = self.stale_kept(now)
        d = self.desired
        if h is None or d is None:
            return
        h.groups.difference_update(self.ids.groups.values())
        h.nexthops.difference_update(self.ids.members.values())
        if prefixes is None:
            routes, standby = d.routes, d.standby
            h.routes.difference_update(
                [rk for rk in h.routes if rk[0] in routes or rk[0] in standby]
            )
        else:
            for pfx in prefixes:  # both of the prefix's routes: primary and standby
                h.routes.discard((pfx, route_metric(pfx, self.metric)))
                h.routes.discard((pfx, standby_metric(pfx, self.metric)))

    def note_key(self, prefix: IPNetwork, metric: int) -> str:
        """The ``notes`` key of glbd's route of ``prefix`` at ``metric`` (primary or standby)."""
        return (
            standby_note(prefix) if metric == standby_metric(prefix, self.metric) else str(prefix)
        )

    def count_foreign(self, notes: Mapping[str, str]) -> None:
        """Count a wanted prefix newly found held by someone else's route."""
        old = self.notes
        n = sum(1 for k, v in notes.items() if v == "foreign_route" and old.get(k) != v)
        if n:
            self.stats.conflict(FOREIGN_PRESENT, n)

    # -- writes and their outcome -------------------------------------------------------------
    def strip_excluded(self, ops: Sequence[Op]) -> list[Op]:
        """Drop failed-over members from group writes planned before the failover."""
        gone = {self.ids.members[m] for m in self.excluded if m in self.ids.members}
        if not gone:
            return list(ops)
        out: list[Op] = []
        for op in ops:
            if isinstance(op, GroupSet) and any(i in gone for i, _w in op.entries):
                rest = tuple(e for e in op.entries if e[0] not in gone)
                if not rest:
                    continue
                op = GroupSet(op.id, op.key, rest, op.resilient, op.create)
            out.append(op)
        return out

    def sending(self, ops: Sequence[Op]) -> None:
        """``ops`` go to the kernel now: remember the ids they delete, so that the kernel's
        notification of each is known as glbd's own. Bounded: an echo that never came (no
        event socket) costs at most one reconcile once the set is cleared."""
        if len(self._deleting) > DELETING_MAX:
            self._deleting.clear()
        self._deleting.update(op.id for op in ops if isinstance(op, GroupDel | NhDel))

    def without(self, ops: list[Op], ids: set[int]) -> list[Op]:
        """``ops`` minus what would point at an id that was not created: a group keeps its
        other members (none left: not written, and its id joins ``ids``), a route is left for
        the next plan."""
        if not ids:
            return ops
        out: list[Op] = []
        for op in ops:
            if isinstance(op, GroupSet) and any(i in ids for i, _w in op.entries):
                rest = tuple(e for e in op.entries if e[0] not in ids)
                if not rest:
                    if op.create:
                        ids.add(op.id)
                    continue
                op = GroupSet(op.id, op.key, rest, op.resilient, op.create)
            elif isinstance(op, RouteSet) and op.nhid in ids:
                continue
            out.append(op)
        if len(out) != len(ops):
            self.routes_dirty = True  # re-planned with other ids
            self._wake()
        return out

    def written(
        self, ops: Sequence[Op], failed: Mapping[int, OSError], not_created: set[int], w16: bool
    ) -> tuple[list[str], bool]:
        """Fold one batch's outcome in (``failed``: index -> the kernel's refusal). Ids that
        were not created join ``not_created``. Returns (errors, whether a group write showed
        the kernel has no 16-bit weights)."""
        self.stats.ops += len(ops)
        if not failed:  # the common case, 100k routes at a time: fold without the checks
            self._account_all(ops)
            return [], False
        errors: list[str] = []
        foreign: list[IPNetwork] = []
        no_w16 = False
        for i, op in enumerate(ops):
            err = failed.get(i)
            if isinstance(op, GroupDel | NhDel) and err is not None:
                self._deleting.discard(op.id)  # refused or already gone: no notification
            if err is None or (
                isinstance(op, RouteDel | GroupDel | NhDel)
                and err.errno in (errno.ENOENT, errno.ESRCH)  # already gone: goal reached
            ):
                self.account(op)
                continue
            created = (isinstance(op, NhSet) and not op.replace) or (
                isinstance(op, GroupSet) and op.create
            )
            if isinstance(op, NhSet | GroupSet) and created:
                not_created.add(op.id)
            if err.errno == errno.EEXIST and isinstance(op, RouteSet) and not op.replace:
                # someone else's route holds the prefix: leave it, wait for it to go
                self.obs.foreign_routes.add((op.prefix, op.metric))
                self.notes[self.note_key(op.prefix, op.metric)] = "foreign_route"
                self.stats.conflict(EXISTS_ON_CREATE)
                foreign.append(op.prefix)
                continue
            if err.errno == errno.EEXIST and isinstance(op, NhSet | GroupSet) and created:
                self.obs.foreign_ids.add(op.id)  # never reused; the next plan picks another
                self.stats.conflict(NH_ID_TAKEN)
                self.routes_dirty = True
                self._wake()
                log.warning("fib_nexthop_id_taken", id=op.id)
                continue
            if (
                isinstance(op, GroupSet)
                and err.errno == errno.EINVAL
                and w16
                and any(w > 256 for _i, w in op.entries)
            ):
                no_w16 = True  # kernel without weight_high: scale into 1..255
                self._wake()
            errors.append(f"{type(op).__name__} {_op_id(op)}: {err}")
        if foreign:
            log.warning("fib_foreign_routes", count=len(foreign), first=str(foreign[0]))
            # if one was glbd's own after all (a stale cache), the route audit says so
            self.need_full = True
            self._wake()
        return errors, no_w16

    def failed(self, errors: list[str]) -> None:
        """A sync's writes were refused: plan every route again, audit, retry soon."""
        if errors:
            self.routes_dirty = True
            self.stats.op_errors += len(errors)
            self.stats.last_errors = (self.stats.last_errors + errors)[-20:]
            self.need_full = True
            self._wake()
            log.warning("fib_op_errors", count=len(errors), first=errors[0])
        # the map follows member ids and member nexthops: ``account`` marks the latter, a new
        # id map the former; a weights-only write changes neither
        members = self.ids.members
        if errors or (members is not self._map_members and members != self._map_members):
            self.map_dirty = True


def route_sort_key(k: RouteKey) -> tuple[int, Any]:
    """IPv4 before IPv6, then by prefix and metric."""
    return (k[0].version, k)


def _op_id(op: Op) -> str:
    if isinstance(op, RouteSet | RouteDel):
        return str(op.prefix)
    return str(op.id)
