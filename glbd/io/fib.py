"""FibProgrammer: the asyncio service that keeps the kernel FIB equal to glbd's desired state.

Life cycle::

    fib = FibProgrammer(netns="leaf1", protocol=197, table=254, compat_mode=0)
    await fib.start(adopt=True)          # read kernel state, keep everything, start watching
    await fib.apply(Desired(groups=..., routes=...))   # plan + apply (idempotent)
    await fib.remove_nexthop("198.18.10.2")            # fast failover, one message per group
    await fib.restore_nexthop("198.18.10.2")           # let it back in (next reconcile)
    fib.on_failover_map = arm                  # nexthop ids per (gateway, ifname), on change
    fib.failed_over("198.18.10.2", "eth1")     # the BFD engine deleted them: mirror, hold out
    fib.snapshot()                       # desired vs installed, for glbctl routes/profiles
    await fib.stop(keep=True)            # default: leave the FIB as it is for the next start

Reconcile is level-triggered: after link/nexthop events (coalesced, at most one run per
``min_gap_s``) and every ``reconcile_interval_s``. Such a run dumps links and nexthops only
(cost ~ number of nexthops, not routes): routes are known from glbd's own successful writes plus
the kernel rule "a route goes away with its group". Every ``route_audit_interval_s`` (and after
a netlink overrun or a failed write) the run also dumps glbd's route table and repairs routes
changed behind glbd's back. The kernel's silent flush on carrier loss/admin down therefore
costs one nexthop dump; link up re-creates the members, groups and routes.

After an adopting start, glbd-owned objects that glbd has not re-learned (not in any desired
state since the start) are kept for ``stale_s`` (like BGP graceful restart), then removed; one
that was re-learned and then withdrawn goes with the next sync.

Ownership: glbd replaces only objects of its own that it knows are in the kernel; any other
write is create-only (NLM_F_EXCL). A route of another protocol on a prefix glbd wants is left
alone (learned from the route events at once, or from the kernel's EEXIST), counted under
``conflicts``, shown in ``foreign_routes``, and glbd installs its own when it goes away. A
member nexthop id that another daemon takes over (same id, its protocol) leaves the failover
map at once, so the BFD engine never deletes another daemon's nexthop.

Failover done by someone else (the BFD engine, :mod:`bfd.failover`): the engine holds, per BFD
session, ``RTM_DELNEXTHOP`` requests for the peer's member nexthops (:meth:`failover_map`,
reported through ``on_failover_map`` whenever the ids change) and sends them the instant the
session fails. The kernel drops the deleted member from every group. glbd learns it twice: from
the kernel's ``RTM_DELNEXTHOP`` event and from the BFD event. Whichever comes first, the cache
mirrors the deletion and the member is held out, so that no write in between re-creates it:

* the BFD event (:meth:`failed_over`) excludes the member until :meth:`restore_nexthop`;
* a deletion of a wanted, usable member that glbd did not plan holds it out for
  ``foreign_delete_hold_s`` only (0.5 s); if no failover claims it by then, the next reconcile
  re-creates it (an operator's ``ip nexthop del`` is repaired).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

import structlog

from glbd.codec.netlink import const as c
from glbd.codec.netlink.codec import Attr, Message, NhMsg, RtMsg
from glbd.core.fibmodel import (
    Desired,
    GroupSpec,
    IPAddress,
    IPNetwork,
    KGroup,
    KNexthop,
    KRoute,
    Member,
    Observed,
    Resilient,
    RouteKey,
)
from glbd.core.fibplan import (
    WEIGHT_MAX_8BIT,
    WEIGHT_MAX_16BIT,
    GroupDel,
    GroupSet,
    IdMap,
    IdRanges,
    NhDel,
    NhSet,
    Op,
    PlanParams,
    RouteDel,
    RouteSet,
    assign_ids,
    plan,
    programmed_weights,
    route_metric,
)
from glbd.io.fibkernel import (
    ROUTE_WANT,
    RowMemo,
    encode_group,
    get_compat_mode,
    observe,
    op_wire,
    parse_link,
    parse_route,
    routes_from_rows,
    set_compat_mode,
)
from glbd.io.netlink import NetlinkError, NetlinkSocket
from glbd.io.rtnl import link_dump, nexthop_dump, route_dump, route_event_filter

__all__ = ["DEFAULT_PROTOCOL", "ApplyResult", "FibProgrammer"]

log = structlog.get_logger(__name__)

DEFAULT_PROTOCOL = 200  # RTPROT value for glbd (glbd.app.config.RTPROT_GLBD); FRR uses 186-198


@dataclass(frozen=True, slots=True)
class ApplyResult:
    ops: int
    errors: tuple[str, ...] = ()
    duration_s: float = 0.0


@dataclass(slots=True)
class _Stats:
    applies: int = 0
    reconciles: int = 0
    full_reconciles: int = 0
    ops: int = 0
    op_errors: int = 0
    failovers: int = 0
    #: failovers the BFD engine had already done in the kernel (glbd only mirrored them)
    engine_failovers: int = 0
    #: glbd-owned member nexthops deleted by someone else while wanted
    foreign_deletes: int = 0
    link_events: int = 0
    nexthop_events: int = 0
    overruns: int = 0
    route_events: int = 0
    #: objects glbd did not write because someone else's are there, by reason
    conflicts: dict[str, int] = field(default_factory=dict)
    last_errors: list[str] = field(default_factory=list)

    def conflict(self, reason: str, n: int = 1) -> None:
        self.conflicts[reason] = self.conflicts.get(reason, 0) + n


#: conflict reasons (stable names: counters, glbctl, metrics)
EXISTS_ON_CREATE = "route_exists_on_create"  # the kernel refused a route create: EEXIST
ROUTE_APPEARED = "foreign_route_appeared"  # a route event: another's route on a wanted prefix
ROUTE_REPLACED = "glbd_route_replaced"  # another's route replaced one of glbd's routes
FOREIGN_PRESENT = "foreign_route_present"  # a prefix glbd starts to want is someone else's
NH_ID_TAKEN = "nexthop_id_taken"  # a member/group create refused: EEXIST (id in use)
NH_REOWNED = "nexthop_reowned"  # one of glbd's nexthop ids now carries another protocol
CONFLICT_REASONS = (
    EXISTS_ON_CREATE,
    FOREIGN_PRESENT,
    ROUTE_APPEARED,
    ROUTE_REPLACED,
    NH_ID_TAKEN,
    NH_REOWNED,
)


@dataclass(slots=True)
class _StaleKeep:
    """Adopted objects not re-learned since an adopting restart (kept by the stale timer)."""

    routes: set[RouteKey]
    groups: set[int]
    nexthops: set[int]


class FibProgrammer:
    def __init__(
        self,
        netns: str | None = None,
        protocol: int = DEFAULT_PROTOCOL,
        table: int = c.RT_TABLE_MAIN,
        *,
        metric: int = 0,
        resilient: Resilient | None = None,
        id_ranges: IdRanges | None = None,
        weight_bits: int | None = None,
        compat_mode: int | None = None,
        reconcile_interval_s: float = 5.0,
        route_audit_interval_s: float = 60.0,
        min_gap_s: float = 0.05,
        stale_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 1 <= protocol <= 255 or protocol in (c.RTPROT_KERNEL, c.RTPROT_BOOT):
            raise ValueError(f"bad route protocol {protocol}")
        if weight_bits not in (None, 8, 16):
            raise ValueError("weight_bits must be None (detect), 8 or 16")
        self.netns = netns
        self.protocol = protocol
        self.table = table
        self.metric = metric
        self.resilient = resilient
        self.id_ranges = id_ranges or IdRanges()
        self.compat_mode = compat_mode
        self.reconcile_interval_s = reconcile_interval_s
        self.route_audit_interval_s = route_audit_interval_s
        self._last_audit = 0.0
        self._row_memo: RowMemo = {}
        self.min_gap_s = min_gap_s
        self.stale_s = stale_s
        self._clock = clock
        self._weight_bits = weight_bits
        self._req: NetlinkSocket | None = None
        self._ev: NetlinkSocket | None = None
        self._rev: NetlinkSocket | None = None  # route events (filtered: others' routes only)
        #: route events seen while a route dump runs, replayed on its result
        self._route_log: list[tuple[int, RouteKey]] | None = None
        self._stale_keep: _StaleKeep | None = None
        self._obs = Observed()
        self._desired: Desired | None = None
        self._ids = IdMap()
        self._excluded: set[Member] = set()
        #: members of ``_excluded`` only until this time (deleted by someone else, unclaimed)
        self._held_until: dict[Member, float] = {}
        self.foreign_delete_hold_s = 0.5
        #: called with :meth:`failover_map` whenever it changes (the BFD engine's armed ids)
        self.on_failover_map: (
            Callable[[dict[tuple[IPAddress, str], tuple[int, ...]]], None] | None
        ) = None
        self._failover_map: dict[tuple[IPAddress, str], tuple[int, ...]] = {}
        self._notes: dict[str, str] = {}
        self._planned_routes: object = None  # the desired.routes mapping last planned in full
        self._realizable: dict[str, int] = {}
        self._routes_dirty = True
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._need_full = False
        self._stale_until = 0.0
        self._adopted = 0
        self._task: asyncio.Task[None] | None = None
        self.stats = _Stats()

    # -- life cycle ---------------------------------------------------------------------------
    async def start(self, adopt: bool = True) -> None:
        """Open the sockets, read the kernel and start watching. Never changes the FIB by
        itself: the first :meth:`apply` does. With ``adopt`` the glbd-owned objects found are
        reused, and the ones the desired state does not contain are removed only after
        ``stale_s``; without it they are removed at the first apply."""
        if self.compat_mode is not None:
            set_compat_mode(self.compat_mode, self.netns)
        # events first, so nothing between the dump and the subscription is lost
        self._ev = await NetlinkSocket.open(
            netns=self.netns,
            groups=(c.RTNLGRP_LINK, c.RTNLGRP_NEXTHOP),
            on_event=self._on_event,
            on_overrun=self._on_overrun,
        )
        self._rev = await NetlinkSocket.open(
            netns=self.netns,
            groups=(c.RTNLGRP_IPV4_ROUTE, c.RTNLGRP_IPV6_ROUTE),
            on_event=self._on_route_event,
            on_overrun=self._on_overrun,
        )
        try:
            self._rev.attach_filter(route_event_filter(self.protocol, self.table))
        except OSError as e:  # unfiltered still works (the handler checks), at more cost
            log.warning("fib_route_event_filter_failed", error=str(e))
        self._req = await NetlinkSocket.open(netns=self.netns)
        await self._refresh(full=True)
        o = self._obs
        self._adopted = len(o.nexthops) + len(o.groups) + len(o.routes)
        if adopt and self._adopted:
            self._stale_until = self._clock() + self.stale_s
            self._stale_keep = _StaleKeep(set(o.routes), set(o.groups), set(o.nexthops))
        if self._weight_bits is None:
            self._weight_bits = await self._detect_weight_bits()
        log.info(
            "fib_started",
            netns=self.netns,
            protocol=self.protocol,
            table=self.table,
            adopted=self._adopted,
            weight_bits=self._weight_bits,
            compat_mode=get_compat_mode(self.netns),
        )
        self._task = asyncio.create_task(self._run(), name="fib-reconcile")

    async def stop(self, keep: bool = True) -> None:
        """Stop watching. ``keep=True`` (default) leaves every route and nexthop in place for
        the next start; ``keep=False`` removes everything glbd owns (routes, groups, members)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        try:
            if not keep and self._req is not None:
                async with self._lock:
                    await self._refresh(full=True)
                    o = self._obs
                    ops: list[Op] = [RouteDel(k[0], k[1]) for k in sorted(o.routes, key=_rk)]
                    ops += [GroupDel(i) for i in sorted(o.groups)]
                    ops += [NhDel(i) for i in sorted(o.nexthops)]
                    await self._execute(ops)
        finally:
            for s in (self._ev, self._rev, self._req):
                if s is not None:
                    s.close()
            self._ev = self._rev = self._req = None

    # -- the service API ----------------------------------------------------------------------
    async def apply(self, desired: Desired) -> ApplyResult:
        """Make the kernel match ``desired`` (idempotent; only differences are written)."""
        self.stats.applies += 1
        async with self._lock:
            self._desired = desired
            return await self._sync()

    async def set_weights(
        self, key: str, weights: Mapping[Member, int], resilient: Resilient | bool | None = True
    ) -> ApplyResult:
        """Change one group's weights (the path-quality fast path): O(members), one
        RTM_NEWNEXTHOP replace, however many routes use the group. ``resilient=True`` keeps the
        group's current type/parameters. The group key must already be in the desired state."""
        async with self._lock:
            d = self._desired
            if d is None or key not in d.groups:
                raise KeyError(key)
            old = d.groups[key]
            res = old.resilient if resilient is True else resilient
            assert res is None or isinstance(res, Resilient)
            groups = dict(d.groups)
            groups[key] = GroupSpec(dict(weights), res)
            self._desired = Desired(groups=groups, routes=d.routes)  # same routes object
            self.stats.applies += 1
            return await self._sync()

    async def update_routes(
        self,
        add: Mapping[IPNetwork, str] | None = None,
        remove: Iterable[IPNetwork] = (),
    ) -> ApplyResult:
        """Add/re-point (``add``: prefix -> group key) and withdraw (``remove``) a few routes:
        O(delta) planning (plus one C-level copy of the route map), for BGP updates. The group
        keys must exist in the desired state (set by :meth:`apply`)."""
        return await self.update(add=add, remove=remove)

    async def update(
        self,
        groups: Mapping[str, GroupSpec] | None = None,
        remove_groups: Iterable[str] = (),
        add: Mapping[IPNetwork, str] | None = None,
        remove: Iterable[IPNetwork] = (),
    ) -> ApplyResult:
        """One incremental step of a BGP burst: new or changed groups, groups no longer
        wanted, routes added/re-pointed (``add``) and withdrawn (``remove``). Plans the groups
        (O(members)) and the named routes only; a full plan happens only when a group that
        some other route uses became (un)realizable. Routes move before their old group is
        deleted (the kernel would take a route down with its group)."""
        async with self._lock:
            d = self._desired
            if d is None:
                raise RuntimeError("apply() a desired state first")
            add = dict(add or {})
            gone = [pfx for pfx in remove if pfx not in add]
            dropped = set(remove_groups)
            new_groups = dict(d.groups)
            new_groups.update(groups or {})
            for key in dropped:
                new_groups.pop(key, None)
            routes = dict(d.routes)
            routes.update(add)
            for pfx in gone:
                routes.pop(pfx, None)
            clean = not self._routes_dirty and d.routes is self._planned_routes
            self._desired = Desired(groups=new_groups, routes=routes)
            self.stats.applies += 1
            if not clean:
                return await self._sync()
            t0 = time.perf_counter()
            only = [*add, *gone]
            self._ids = assign_ids(self._desired, self._obs, self._ids, self.id_ranges)
            self._relearn(add)
            pl = plan(self._desired, self._obs, self._ids, self._params(), only=only)
            realizable = dict(pl.realizable)
            if realizable != self._realizable:
                moved = {
                    k
                    for k in realizable.keys() | self._realizable.keys()
                    if realizable.get(k) != self._realizable.get(k)
                }
                named = set(only)
                if any(k in moved for pfx, k in routes.items() if pfx not in named):
                    return await self._sync()
            self._planned_routes = routes
            self._realizable = realizable
            named_s = {str(pfx) for pfx in only}
            kept = {
                k: v
                for k, v in self._notes.items()
                if k not in new_groups and k not in dropped and k not in named_s
            }
            self._count_foreign(pl.notes)
            self._notes = {**kept, **pl.notes}
            errors = await self._execute(list(pl.ops))
            return ApplyResult(len(pl.ops), tuple(errors), time.perf_counter() - t0)

    def group_spec(self, weights: Mapping[Member, int]) -> GroupSpec:
        """A GroupSpec of the configured default type (``resilient=`` of the constructor)."""
        return GroupSpec(dict(weights), self.resilient)

    async def remove_nexthop(self, gateway: str | IPAddress, ifname: str | None = None) -> int:
        """Fast failover: next hop ``gateway`` (on ``ifname``, or on any interface) is gone.
        Every glbd group that contains it is replaced without it at once (one message per
        group, all in a few datagrams; a group left empty is deleted with its routes), keeping
        the other members' installed weights. The member stays excluded until
        :meth:`restore_nexthop`. Returns the number of groups changed."""
        gw = ipaddress.ip_address(gateway)
        targets = {
            m
            for m in self._known_members()
            if m.gateway == gw and (ifname is None or m.ifname == ifname)
        }
        self._excluded |= targets
        self.stats.failovers += 1
        # No lock: failover must not wait behind a long reconcile. Ops that a concurrent
        # reconcile planned before this exclusion are stripped of it when they are encoded
        # (see _execute); ones already sent reach the kernel before these.
        ids = {self._ids.members[m] for m in targets if m in self._ids.members}
        link_idx = {
            lk.index for lk in self._obs.links.values() if ifname is None or lk.name == ifname
        }
        ids |= {
            nh.id
            for nh in self._obs.nexthops.values()
            if nh.gateway == gw and nh.ifindex in link_idx
        }
        ops: list[Op] = []
        keys = {v: k for k, v in self._ids.groups.items()}
        for gid, kg in sorted(self._obs.groups.items()):
            if not any(mid in ids for mid, _w in kg.entries):
                continue
            rest = tuple(e for e in kg.entries if e[0] not in ids)
            if rest:
                ops.append(GroupSet(gid, keys.get(gid, ""), rest, kg.resilient, create=False))
            else:
                ops.append(GroupDel(gid))
        if ops:
            await self._execute(ops)
        self._wake.set()  # a normal reconcile follows (re-scaling, cleanup)
        return len(ops)

    def failed_over(self, gateway: str | IPAddress, ifname: str | None = None) -> int:
        """The kernel side of a failover was done by someone else (the BFD engine deleted the
        member nexthops of ``gateway`` on ``ifname``, see :meth:`failover_map`): mirror the
        deletion in the cache and exclude the member until :meth:`restore_nexthop`, exactly as
        :meth:`remove_nexthop` would. Synchronous; returns the number of nexthops mirrored (0
        when the kernel event was already seen). A deletion the kernel refused is found by the
        reconcile this wakes, which then takes the excluded member out of its groups."""
        gw = ipaddress.ip_address(gateway)
        targets = {
            m
            for m in self._known_members()
            if m.gateway == gw and (ifname is None or m.ifname == ifname)
        }
        self._excluded |= targets
        for m in targets:
            self._held_until.pop(m, None)  # claimed: excluded until restored
        self.stats.failovers += 1
        self.stats.engine_failovers += 1
        ids = {self._ids.members[m] for m in targets if m in self._ids.members}
        mirrored = 0
        for i in sorted(ids):
            if i in self._obs.nexthops:
                self._account(NhDel(i))
                mirrored += 1
        self._report_failover_map()
        self._wake.set()
        return mirrored

    def failover_map(self) -> dict[tuple[IPAddress, str], tuple[int, ...]]:
        """(gateway, ifname) -> the ids of glbd's member nexthops to that next hop that the
        kernel has: what deleting takes the next hop out of every group. Only ids that glbd
        last saw in the kernel with its own protocol and that next hop's gateway and link
        (the engine deletes by id, and the kernel does not check who owns it)."""
        out: dict[tuple[IPAddress, str], list[int]] = {}
        have = self._obs.nexthops
        links = self._obs.links
        for m, i in self._ids.members.items():
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

    def _report_failover_map(self) -> None:
        if self.on_failover_map is None:
            return
        fm = self.failover_map()
        if fm != self._failover_map:
            self._failover_map = fm
            try:
                self.on_failover_map(fm)
            except Exception:  # a consumer's bug must not break the FIB
                log.exception("fib_failover_map_callback_failed")

    def _expire_held(self) -> None:
        if not self._held_until:
            return
        now = self._clock()
        for m, t in list(self._held_until.items()):
            if t <= now:
                del self._held_until[m]
                self._excluded.discard(m)

    async def restore_nexthop(self, gateway: str | IPAddress, ifname: str | None = None) -> None:
        """Undo :meth:`remove_nexthop` / :meth:`failed_over`; the member comes back with the
        next reconcile."""
        gw = ipaddress.ip_address(gateway)
        self._excluded = {
            m
            for m in self._excluded
            if not (m.gateway == gw and (ifname is None or m.ifname == ifname))
        }
        for m in [m for m in self._held_until if m not in self._excluded]:
            del self._held_until[m]
        async with self._lock:
            await self._sync()

    async def reconcile(self, full: bool = True) -> ApplyResult:
        """Re-read the kernel and repair (what the periodic task does)."""
        async with self._lock:
            await self._refresh(full=full)
            return await self._sync()

    def set_compat_mode(self, value: int) -> None:
        """Set ``net.ipv4.nexthop_compat_mode`` in glbd's namespace (see glbd.io.fibkernel)."""
        set_compat_mode(value, self.netns)

    @property
    def weight_bits(self) -> int:
        return self._weight_bits or 8

    def snapshot(self) -> dict[str, Any]:
        """Desired vs installed state (JSON-safe) for ``glbctl routes`` / ``glbctl profiles``.

        Top level: ``netns``, ``protocol``, ``table``, ``weight_bits``, ``compat_mode``,
        ``stale_remaining_s``, ``stale_held`` (adopted objects the stale timer still keeps),
        ``foreign_routes`` (rows ``prefix``, ``group``, ``metric``: wanted prefixes that another
        protocol's route holds), ``conflicts`` (writes glbd left out because the object is
        someone else's, by reason: every reason, 0 included), ``excluded`` (failed-over
        members), ``groups``, ``routes``, ``kernel`` (counts of glbd objects in the kernel),
        ``counters``, ``last_errors``.
        ``groups[key]``: ``nhid``, ``type``, ``desired`` (weights asked for, by member label),
        ``programmed`` (what glbd writes now: usable members only, scaled), ``installed``
        (kernel), ``excluded`` (member -> reason), ``routes`` (count), ``diff``
        (programmed != installed), ``note``. ``routes[prefix]``: ``group``, ``nhid``,
        ``installed_nhid``, ``desired``/``installed`` weights, ``diff``, ``note``."""
        d = self._desired or Desired()
        o = self._obs
        p = self._params()
        labels = {i: m.label for m, i in self._ids.members.items()}
        for nh in o.nexthops.values():
            labels.setdefault(nh.id, f"{nh.gateway}@if{nh.ifindex}")
        groups: dict[str, Any] = {}
        counts: dict[str, int] = {}
        for key in d.routes.values():
            counts[key] = counts.get(key, 0) + 1
        for key, spec in sorted(d.groups.items()):
            gid = self._ids.groups.get(key)
            kg = o.groups.get(gid) if gid is not None else None
            prog = {m.label: w for m, w in programmed_weights(spec, o, p).items()}
            inst = {labels.get(i, str(i)): w for i, w in kg.entries} if kg else {}
            groups[key] = {
                "nhid": gid,
                "type": spec.type.value,
                "desired": {m.label: w for m, w in sorted(spec.weights.items())},
                "programmed": prog,
                "installed": inst,
                "excluded": self._exclusions(spec),
                "routes": counts.get(key, 0),
                "diff": prog != inst,
                "note": self._notes.get(key, ""),
            }
        held = self._stale_kept()
        # wanted prefixes that someone else's route holds (glbd leaves them alone)
        foreign: list[dict[str, Any]] = []
        for pfx, metric in sorted(o.foreign_routes, key=_rk):
            fkey = d.routes.get(pfx)
            if fkey is not None and metric == route_metric(pfx, self.metric):
                foreign.append({"prefix": str(pfx), "group": fkey, "metric": metric})
        routes: dict[str, Any] = {}
        for prefix, key in sorted(d.routes.items(), key=lambda t: (t[0].version, t[0])):
            rk = (prefix, route_metric(prefix, self.metric))
            kr = o.routes.get(rk)
            g = groups.get(key, {})
            gid = self._ids.groups.get(key)
            installed = kr.nhid if kr else None
            routes[str(prefix)] = {
                "group": key,
                "nhid": gid,
                "installed_nhid": installed,
                "desired": g.get("programmed", {}),
                "installed": g.get("installed", {}) if installed == gid else {},
                "diff": installed != gid or bool(g.get("diff", True)),
                "note": self._notes.get(str(prefix), ""),
            }
        return {
            "netns": self.netns,
            "protocol": self.protocol,
            "table": self.table,
            "weight_bits": self.weight_bits,
            "compat_mode": get_compat_mode(self.netns),
            "stale_remaining_s": max(0.0, self._stale_until - self._clock()),
            "stale_held": {
                "routes": len(held.routes) if held else 0,
                "groups": len(held.groups) if held else 0,
                "nexthops": len(held.nexthops) if held else 0,
            },
            "foreign_routes": foreign,
            "conflicts": {r: self.stats.conflicts.get(r, 0) for r in CONFLICT_REASONS},
            "excluded": sorted(m.label for m in self._excluded),
            "groups": groups,
            "routes": routes,
            "kernel": {
                "nexthops": len(o.nexthops),
                "groups": len(o.groups),
                "routes": len(o.routes),
            },
            "counters": {
                "applies": self.stats.applies,
                "reconciles": self.stats.reconciles,
                "full_reconciles": self.stats.full_reconciles,
                "ops": self.stats.ops,
                "op_errors": self.stats.op_errors,
                "failovers": self.stats.failovers,
                "engine_failovers": self.stats.engine_failovers,
                "foreign_deletes": self.stats.foreign_deletes,
                "link_events": self.stats.link_events,
                "nexthop_events": self.stats.nexthop_events,
                "overruns": self.stats.overruns,
                "route_events": self.stats.route_events,
            },
            "last_errors": list(self.stats.last_errors),
        }

    # -- internals ----------------------------------------------------------------------------
    def _exclusions(self, spec: GroupSpec) -> dict[str, str]:
        out: dict[str, str] = {}
        for m, w in spec.weights.items():
            if w <= 0:
                out[m.label] = "weight_zero"
            elif m in self._held_until:
                out[m.label] = "deleted_elsewhere"
            elif m in self._excluded:
                out[m.label] = "removed"
            else:
                lk = self._obs.links.get(m.ifname)
                if lk is None:
                    out[m.label] = "no_link"
                elif not lk.admin_up:
                    out[m.label] = "admin_down"
                elif not lk.carrier:
                    out[m.label] = "no_carrier"
        return out

    def _known_members(self) -> set[Member]:
        ms = set(self._ids.members)
        if self._desired is not None:
            for spec in self._desired.groups.values():
                ms.update(spec.weights)
        return ms

    def _params(self) -> PlanParams:
        h = self._stale_kept()
        none: AbstractSet[Any] = frozenset()
        return PlanParams(
            protocol=self.protocol,
            metric=self.metric,
            max_weight=WEIGHT_MAX_16BIT if self._weight_bits == 16 else WEIGHT_MAX_8BIT,
            excluded=frozenset(self._excluded),
            keep_routes=h.routes if h else none,
            keep_groups=h.groups if h else none,
            keep_nexthops=h.nexthops if h else none,
        )

    def _count_foreign(self, notes: Mapping[str, str]) -> None:
        """Count a wanted prefix newly found held by someone else's route."""
        old = self._notes
        n = sum(1 for k, v in notes.items() if v == "foreign_route" and old.get(k) != v)
        if n:
            self.stats.conflict(FOREIGN_PRESENT, n)

    def _stale_kept(self) -> _StaleKeep | None:
        """What the stale timer still holds (None once it ran out)."""
        if self._stale_keep is not None and self._clock() >= self._stale_until:
            self._stale_keep = None
        return self._stale_keep

    def _relearn(self, prefixes: Iterable[IPNetwork] | None) -> None:
        """The desired state names these again: the stale timer no longer holds them.
        ``prefixes`` None: the whole desired route mapping (a full sync)."""
        h = self._stale_kept()
        d = self._desired
        if h is None or d is None:
            return
        h.groups.difference_update(self._ids.groups.values())
        h.nexthops.difference_update(self._ids.members.values())
        if prefixes is None:
            routes = d.routes
            h.routes.difference_update([rk for rk in h.routes if rk[0] in routes])
        else:
            h.routes.difference_update((pfx, route_metric(pfx, self.metric)) for pfx in prefixes)

    async def _sync(self) -> ApplyResult:
        """Plan against the cached kernel view and apply. Caller holds the lock.

        Routes are planned (O(routes)) only when they may need work: the desired route mapping
        is a different object, a refresh found routes gone, the set of groups that can exist
        changed, or the last route write failed. A weight change is O(members)."""
        d = self._desired
        if d is None:
            return ApplyResult(0)
        t0 = time.perf_counter()
        self._expire_held()
        self._ids = assign_ids(d, self._obs, self._ids, self.id_ranges)
        full = self._routes_dirty or d.routes is not self._planned_routes
        self._relearn(None if d.routes is not self._planned_routes else ())
        params = self._params()
        pl = plan(d, self._obs, self._ids, params, routes=full)
        if not full and dict(pl.realizable) != self._realizable:
            full = True
            pl = plan(d, self._obs, self._ids, params, routes=True)
        self._count_foreign(pl.notes)
        if full:
            self._notes = dict(pl.notes)
            self._planned_routes = d.routes
            self._routes_dirty = False
        else:
            kept = {k: v for k, v in self._notes.items() if k not in d.groups}
            self._notes = {**kept, **pl.notes}
        self._realizable = dict(pl.realizable)
        errors = await self._execute(list(pl.ops))
        return ApplyResult(len(pl.ops), tuple(errors), time.perf_counter() - t0)

    async def _execute(self, ops: Sequence[Op]) -> list[str]:
        if not ops:
            return []
        assert self._req is not None
        ops = self._strip_excluded(ops)
        # A create refused with EEXIST means the id is someone else's: nothing may then point
        # at it (a group at a foreign member, a route at a foreign group). So when there are
        # creates, members, groups and the rest go in separate batches, each filtered by what
        # the one before could not create. Without creates (weights, failover): one batch.
        nh = [op for op in ops if isinstance(op, NhSet)]
        grp = [op for op in ops if isinstance(op, GroupSet)]
        phases: list[list[Op]] = []
        if any(not op.replace for op in nh) or any(op.create for op in grp):
            rest: list[Op] = [op for op in ops if not isinstance(op, NhSet | GroupSet)]
            split: tuple[list[Op], ...] = ([*nh], [*grp], rest)
            phases = [p for p in split if p]
        else:
            phases = [list(ops)]
        not_created: set[int] = set()
        errors: list[str] = []
        for phase in phases:
            phase = self._without(phase, not_created)
            if phase:
                errors += await self._execute_batch(phase, not_created)
        if errors:
            self._routes_dirty = True
            self.stats.op_errors += len(errors)
            self.stats.last_errors = (self.stats.last_errors + errors)[-20:]
            self._need_full = True
            self._wake.set()
            log.warning("fib_op_errors", count=len(errors), first=errors[0])
        self._report_failover_map()
        return errors

    def _without(self, ops: list[Op], ids: set[int]) -> list[Op]:
        """``ops`` minus what would point at an id that was not created: a group keeps its
        other members (none left: not written), a route is left for the next plan."""
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
            self._routes_dirty = True  # re-planned with other ids
            self._wake.set()
        return out

    async def _execute_batch(self, ops: Sequence[Op], not_created: set[int]) -> list[str]:
        assert self._req is not None
        w16 = self._weight_bits == 16
        msgs: list[Message | bytes] = [
            op_wire(op, protocol=self.protocol, table=self.table, weight_16bit=w16) for op in ops
        ]
        failed = dict(await self._req.batch(msgs))
        self.stats.ops += len(ops)
        errors: list[str] = []
        foreign: list[IPNetwork] = []
        for i, op in enumerate(ops):
            err = failed.get(i)
            if err is None:
                self._account(op)
                continue
            if isinstance(op, RouteDel | GroupDel | NhDel) and err.errno in (
                errno.ENOENT,
                errno.ESRCH,
            ):
                self._account(op)  # already gone: the goal is reached
                continue
            created = (isinstance(op, NhSet) and not op.replace) or (
                isinstance(op, GroupSet) and op.create
            )
            if created:
                assert isinstance(op, NhSet | GroupSet)
                not_created.add(op.id)
            if err.errno == errno.EEXIST and isinstance(op, RouteSet) and not op.replace:
                # someone else's route holds the prefix: leave it, wait for it to go
                self._obs.foreign_routes.add((op.prefix, op.metric))
                self._notes[str(op.prefix)] = "foreign_route"
                self.stats.conflict(EXISTS_ON_CREATE)
                foreign.append(op.prefix)
                continue
            if err.errno == errno.EEXIST and created:
                assert isinstance(op, NhSet | GroupSet)
                self._obs.foreign_ids.add(op.id)  # never reused; the next plan picks another
                self.stats.conflict(NH_ID_TAKEN)
                self._routes_dirty = True
                self._wake.set()
                log.warning("fib_nexthop_id_taken", id=op.id)
                continue
            if (
                isinstance(op, GroupSet)
                and err.errno == errno.EINVAL
                and w16
                and any(w > 256 for _i, w in op.entries)
            ):
                self._weight_bits = 8  # kernel without weight_high: scale into 1..255
                self._wake.set()
            errors.append(f"{type(op).__name__} {_op_id(op)}: {err}")
        if foreign:
            log.warning("fib_foreign_routes", count=len(foreign), first=str(foreign[0]))
            # if one was glbd's own after all (a stale cache), the route audit says so
            self._need_full = True
            self._wake.set()
        return errors

    def _strip_excluded(self, ops: Sequence[Op]) -> list[Op]:
        """Drop failed-over members from group writes planned before the failover."""
        gone = {self._ids.members[m] for m in self._excluded if m in self._ids.members}
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

    def _account(self, op: Op) -> None:
        """Fold a successful op into the cached kernel view."""
        o = self._obs
        if isinstance(op, NhSet):
            m = op.member
            o.nexthops[op.id] = KNexthop(op.id, self.protocol, m.gateway, op.ifindex, m.onlink)
        elif isinstance(op, GroupSet):
            o.groups[op.id] = KGroup(op.id, self.protocol, op.entries, op.resilient)
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
            self._routes_dirty = True
        elif isinstance(op, NhDel):
            o.nexthops.pop(op.id, None)
            for gid, kg in list(o.groups.items()):
                rest = tuple(e for e in kg.entries if e[0] != op.id)
                if len(rest) != len(kg.entries):
                    if rest:
                        o.groups[gid] = KGroup(gid, kg.protocol, rest, kg.resilient)
                    else:
                        del o.groups[gid]
                        o.routes = {k: r for k, r in o.routes.items() if r.nhid != gid}
                        self._routes_dirty = True

    async def _refresh(self, full: bool) -> None:
        """Re-read links and nexthops (cheap); with ``full`` also glbd's route table (the
        fast select dump: only the header and four attributes per route)."""
        assert self._req is not None
        links = await self._req.dump(link_dump(skip_stats=True))
        nhs = await self._req.dump(nexthop_dump())
        obs = observe(
            links,
            nhs,
            None,
            protocol=self.protocol,
            table=self.table,
            previous_routes=self._obs,
        )
        if full:
            rows = []
            self._route_log = []
            try:
                for fam in (2, 10):  # AF_INET, AF_INET6
                    rows += await self._req.dump_select(
                        route_dump(fam, table=self.table), RtMsg, ROUTE_WANT
                    )
            except BaseException:
                self._route_log = None
                raise
            # in slices, yielding to the loop: a 100k-route audit must not stall other tasks
            memo: RowMemo = {}
            routes: dict[RouteKey, KRoute] = {}
            foreign: set[RouteKey] = set()
            for i in range(0, len(rows), 5000):
                r, f = routes_from_rows(
                    rows[i : i + 5000],
                    protocol=self.protocol,
                    table=self.table,
                    memo=self._row_memo,
                    new_memo=memo,
                )
                routes.update(r)
                foreign |= f
                await asyncio.sleep(0)
            self._row_memo = memo
            # route events that came during the dump are newer than (or equal to) what it saw
            log_, self._route_log = self._route_log or [], None
            for t, key in log_:
                if t == c.RTM_NEWROUTE:
                    foreign.add(key)
                    routes.pop(key, None)
                else:
                    foreign.discard(key)
            obs.routes, obs.foreign_routes = routes, foreign
            if routes != self._obs.routes or foreign != self._obs.foreign_routes:
                self._routes_dirty = True
            self._last_audit = self._clock()
            self.stats.full_reconciles += 1
        elif len(obs.routes) != len(self._obs.routes):
            self._routes_dirty = True
        if obs.weight_16bit and self._weight_bits is None:
            self._weight_bits = 16
        self._obs = obs
        self.stats.reconciles += 1
        self._report_failover_map()  # the dump may show an id gone or re-owned

    async def _detect_weight_bits(self) -> int:
        """16-bit group weights (kernel >= 6.12, weight_high) or 8-bit. Known from an
        NHA_OP_FLAGS in any group dump; otherwise probe with a throw-away blackhole nexthop and a
        one-member group of weight 300 in glbd's id range (needs ``lo`` up). The probe ids are
        free ones, created exclusively, and only what the probe created is deleted."""
        if self._obs.weight_16bit:
            return 16
        assert self._req is not None
        r = self.id_ranges
        o = self._obs
        taken = o.foreign_ids | o.nexthops.keys() | o.groups.keys()
        nh_id = next(i for i in range(r.member_base + r.size - 1, 0, -1) if i not in taken)
        grp_id = next(i for i in range(r.group_base + r.size - 1, 0, -1) if i not in taken)
        hdr = NhMsg(0, 0, self.protocol, 0)
        create = c.NLM_F_CREATE | c.NLM_F_EXCL
        bits = 8
        created: list[int] = []
        try:
            await self._req.request(
                Message(
                    c.RTM_NEWNEXTHOP,
                    create,
                    header=NhMsg(2, 0, self.protocol, 0),
                    attrs=(Attr.u32(c.NHA_ID, nh_id), Attr.flag(c.NHA_BLACKHOLE)),
                )
            )
            created.append(nh_id)
            try:
                await self._req.request(
                    Message(
                        c.RTM_NEWNEXTHOP,
                        create,
                        header=hdr,
                        attrs=(
                            Attr.u32(c.NHA_ID, grp_id),
                            Attr(c.NHA_GROUP, encode_group([(nh_id, 300)], True)),
                        ),
                    )
                )
                created.append(grp_id)
                bits = 16
            except NetlinkError as e:
                log.info("fib_weight_probe", result="8bit", error=str(e))
        except NetlinkError as e:
            log.info("fib_weight_probe", result="unknown", error=str(e))
        finally:
            for i in reversed(created):
                with contextlib.suppress(NetlinkError):
                    await self._req.request(
                        Message(c.RTM_DELNEXTHOP, 0, header=NhMsg(), attrs=(Attr.u32(c.NHA_ID, i),))
                    )
        return bits

    # -- events and the reconcile loop --------------------------------------------------------
    def _on_event(self, msg: Message) -> None:
        t = msg.type
        if t in (c.RTM_NEWLINK, c.RTM_DELLINK):
            lk = parse_link(msg)
            if lk is None:
                return
            self.stats.link_events += 1
            old = self._obs.links.get(lk.name)
            if t == c.RTM_DELLINK:
                self._obs.links.pop(lk.name, None)
                self._link_lost(lk.index)
                self._wake.set()
            elif old is None or old.usable != lk.usable or old.index != lk.index:
                self._obs.links[lk.name] = lk
                if old is not None and old.usable and (not lk.usable or old.index != lk.index):
                    self._link_lost(old.index)
                self._wake.set()
        elif t in (c.RTM_NEWNEXTHOP, c.RTM_DELNEXTHOP):
            h = msg.header
            if not isinstance(h, NhMsg):
                return
            self.stats.nexthop_events += 1
            if h.protocol != self.protocol:
                a = msg.attr(c.NHA_ID)
                if a is not None and t == c.RTM_NEWNEXTHOP:
                    nid = a.as_u32()
                    self._obs.foreign_ids.add(nid)
                    if nid in self._obs.nexthops or nid in self._obs.groups:
                        self._reowned(nid)
            elif t == c.RTM_DELNEXTHOP:
                self._nexthop_deleted(msg)
                self._wake.set()  # ours deleted (by us or by someone): check

    def _reowned(self, nid: int) -> None:
        """Someone replaced one of glbd's nexthop ids with an object of its own protocol (the
        kernel does not check the owner). It is no longer glbd's: out of the cache and the
        failover map at once (the BFD engine must never delete it), and the next sync moves
        glbd's member or group to another id and re-points its groups and routes."""
        o = self._obs
        # glbd's routes on a re-owned group are still glbd's: the next sync re-points them
        o.nexthops.pop(nid, None)
        o.groups.pop(nid, None)
        self.stats.conflict(NH_REOWNED)
        self._routes_dirty = True
        log.warning("fib_nexthop_reowned", id=nid)
        self._report_failover_map()
        self._wake.set()

    def _on_route_event(self, msg: Message) -> None:
        """A route of another protocol appeared in or left glbd's table (the socket's BPF
        filter drops glbd's own). A new one on a prefix glbd wants is left alone (and replaces
        glbd's route if it took its place); when it goes, glbd installs its own."""
        h = msg.header
        if not isinstance(h, RtMsg) or h.protocol == self.protocol or h.flags & 0x200:
            return  # RTM_F_CLONED: a cache entry, not a route
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
        if self._route_log is not None:
            self._route_log.append((msg.type, key))
        o = self._obs
        d = self._desired
        wanted = d is not None and r.prefix in d.routes
        if msg.type == c.RTM_NEWROUTE:
            known = key in o.foreign_routes
            o.foreign_routes.add(key)
            if o.routes.pop(key, None) is not None:
                self.stats.conflict(ROUTE_REPLACED)
                log.warning("fib_route_replaced", prefix=str(r.prefix), protocol=h.protocol)
            elif wanted and not known:
                self.stats.conflict(ROUTE_APPEARED)
            if wanted:
                self._notes[str(r.prefix)] = "foreign_route"
        else:
            if key not in o.foreign_routes:
                return
            o.foreign_routes.discard(key)
        if wanted:
            self._routes_dirty = True
            self._wake.set()

    def _nexthop_deleted(self, msg: Message) -> None:
        """One of ours is gone from the kernel: mirror it at once. A wanted member on a usable
        link that glbd did not delete itself (its plan deletes only members it no longer
        needs) is held out for ``foreign_delete_hold_s``: most likely the BFD engine's failover,
        whose event may still be on its way; a write planned meanwhile must not re-create it."""
        a = msg.attr(c.NHA_ID)
        if a is None:
            return
        nid = a.as_u32()
        if nid in self._obs.nexthops:
            self._account(NhDel(nid))
        member = next((m for m, i in self._ids.members.items() if i == nid), None)
        if member is None or member in self._excluded:
            self._report_failover_map()
            return
        lk = self._obs.links.get(member.ifname)
        d = self._desired
        wanted = d is not None and any(g.weights.get(member, 0) > 0 for g in d.groups.values())
        if wanted and lk is not None and lk.usable:
            self.stats.foreign_deletes += 1
            self._excluded.add(member)
            self._held_until[member] = self._clock() + self.foreign_delete_hold_s
        self._report_failover_map()

    def _link_lost(self, ifindex: int) -> None:
        """Mirror the kernel's silent flush in the cache: members on the link disappear,
        groups shrink, an emptied group vanishes with its routes. The reconcile confirms."""
        for nid in [i for i, nh in self._obs.nexthops.items() if nh.ifindex == ifindex]:
            self._account(NhDel(nid))
        self._routes_dirty = True

    def _on_overrun(self) -> None:
        self.stats.overruns += 1
        self._need_full = True
        self._wake.set()

    async def _run(self) -> None:
        stale_pending = self._stale_until > 0
        backoff = 0.0
        while True:
            timeout = self.reconcile_interval_s
            if stale_pending:
                timeout = min(timeout, max(0.0, self._stale_until - self._clock()))
            if self._held_until:  # a held-out member comes back when its hold ends
                timeout = min(timeout, max(0.0, min(self._held_until.values()) - self._clock()))
            # a plain timer instead of asyncio.wait_for (3.11's wait_for can swallow a cancel)
            timed_out = False

            def _tick() -> None:
                nonlocal timed_out
                timed_out = True
                self._wake.set()

            timer = asyncio.get_running_loop().call_later(timeout, _tick)
            try:
                await self._wake.wait()
            finally:
                timer.cancel()
            full = self._need_full or (
                timed_out and self._clock() - self._last_audit >= self.route_audit_interval_s
            )
            if stale_pending and self._clock() >= self._stale_until:
                stale_pending = False
                full = True
            self._wake.clear()
            self._need_full = False
            ok = False
            try:
                async with self._lock:
                    await self._refresh(full=full)
                    ok = not (await self._sync()).errors
            except (OSError, ValueError) as e:
                log.warning("fib_reconcile_failed", error=str(e))
                self._need_full = True
            except Exception:  # never let the reconcile task die
                log.exception("fib_reconcile_crashed")
                self._need_full = True
            # bounded cost: at most one run per min_gap_s; back off while the kernel refuses
            backoff = 0.0 if ok else min(max(2 * backoff, 0.5), 30.0)
            await asyncio.sleep(max(self.min_gap_s, backoff))


def _rk(k: RouteKey) -> tuple[int, Any]:
    return (k[0].version, k)


def _op_id(op: Op) -> str:
    if isinstance(op, RouteSet | RouteDel):
        return str(op.prefix)
    return str(op.id)
