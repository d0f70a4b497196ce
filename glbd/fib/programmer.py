"""FibProgrammer: the asyncio service that keeps the kernel FIB equal to glbd's desired state.

Life cycle::

    fib = FibProgrammer(netns="leaf1", protocol=197, table=254, compat_mode=0)
    await fib.start(adopt=True)          # read kernel state, keep everything, start watching
    await fib.apply(Desired(groups=..., routes=...))   # plan + apply (idempotent)
    await fib.update(groups=..., add=..., remove=...)  # one incremental step (BGP, profiles)
    await fib.set_weights("prof-a", weights)             # one group's weights: an update
    fib.weights_now({"prof-a": weights})   # the fast lane: sent before it returns
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
costs one nexthop dump; link up re-creates the members, groups and routes. The dumps are read
without the write lock (a weight change does not wait for them) and read again under it if
glbd wrote or a link or nexthop notification came meanwhile.

After an adopting start, glbd-owned objects that glbd has not re-learned (not in any desired
state since the start) are kept for ``stale_s`` (like BGP graceful restart), then removed; one
that was re-learned and then withdrawn goes with the next sync.

The cache, the failover bookkeeping and the snapshot are pure (:mod:`glbd.fib.fibcache`,
:mod:`glbd.fib.fibsnap`), and so are the decisions of an ``update`` step and of the fast lane
(:mod:`glbd.fib.fibstep`); the kernel reads (the refresh dumps, the start-up weight probe)
are in :mod:`glbd.fib.fibread`. This module moves bytes, holds the lock and re-arms one timer.
Ownership rules and failover by the BFD engine: docs/fib.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import ipaddress
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import structlog

from glbd.fib.fibcache import FailoverMap, FibCache, FibStats, StaleKeep, route_sort_key
from glbd.fib.fibkernel import get_compat_mode, set_compat_mode
from glbd.fib.fibmodel import (
    Desired,
    GroupSpec,
    IPAddress,
    IPNetwork,
    KGroup,
    KLink,
    Member,
    Resilient,
)
from glbd.fib.fibplan import (
    GroupDel,
    GroupSet,
    IdRanges,
    NhDel,
    NhSet,
    Op,
    PlanParams,
    RouteDel,
    assign_ids,
    plan,
)
from glbd.fib.fibread import Audit, Read, detect_weight_bits, read_buckets, read_kernel
from glbd.fib.fibsnap import RouteLookup, snapshot
from glbd.fib.fibstep import (
    RouteMaps,
    as_expected,
    lane_groups,
    lane_in_place,
    route_maps,
    routes_planned,
    step_desired,
    step_ids,
    step_needs_full,
    step_notes,
)
from glbd.fib.fibwire import RowMemo, observe, ops_wire
from glbd.netlink import const as c
from glbd.netlink.codec import Message, Selected
from glbd.netlink.rtnl import nexthop_event_filter, route_event_filter
from glbd.netlink.rtsocket import NetlinkError, NetlinkSocket

__all__ = ["DEFAULT_PROTOCOL", "ApplyResult", "FibProgrammer"]

log = structlog.get_logger(__name__)

DEFAULT_PROTOCOL = (
    200  # RTPROT value for glbd (glbd.config.config_fib.RTPROT_GLBD); FRR uses 186-198
)
#: a step this large (routes planned or ops written) allocates a few hundred thousand objects
#: that live until it ends; the collector's passes over the whole heap while they pile up cost
#: a fifth of a 100k-route install, one pass over them afterwards far less
_GC_PAUSE_AT = 5000


@contextlib.contextmanager
def _gc_paused(size: int) -> Iterator[None]:
    """Cyclic GC off for one large FIB step (nested: the outermost one turns it back on)."""
    if size < _GC_PAUSE_AT or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@dataclass(frozen=True, slots=True)
class ApplyResult:
    ops: int
    errors: tuple[str, ...] = ()
    duration_s: float = 0.0


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
        self.min_gap_s = min_gap_s
        self.stale_s = stale_s
        #: the pure state: kernel view, desired state, ids, failover bookkeeping, counters
        self.cache = FibCache(protocol, table, metric)
        #: called with :meth:`failover_map` whenever it changes (the BFD engine's armed ids)
        self.on_failover_map: Callable[[FailoverMap], None] | None = None
        self._clock = clock
        self._weight_bits = weight_bits
        self._last_audit = 0.0
        self._row_memo: RowMemo = {}
        #: netlink write batches sent so far: a refresh read without the lock is read again
        #: if glbd wrote (or the kernel notified a change) meanwhile
        self._writes = 0
        #: the desired state the kernel was last brought to without an error (every write
        #: since went through ``update``); a reconcile whose dumps show the kernel as the
        #: cache expects then has nothing to plan
        self._clean_for: Desired | None = None
        #: the links as that sync saw them (a link event changes what a plan would do even
        #: when the kernel's nexthops are as expected)
        self._clean_links: dict[str, KLink] = {}
        self._req: NetlinkSocket | None = None
        self._ev: NetlinkSocket | None = None
        self._rev: NetlinkSocket | None = None  # route events (filtered: others' routes only)
        self._planned_routes: RouteMaps | None = None  # the route mappings last planned in full
        self._realizable: dict[str, int] = {}
        self._lock = asyncio.Lock()
        #: the group keys the write holding the lock names (an ``update``); None: any group
        self._busy: frozenset[str] | None = None
        #: (the desired state the last fast-lane write made, the one it started from): an
        #: ``update`` that ran meanwhile still leaves the kernel clean for the lane's state
        self._lane_parent: tuple[Desired, Desired] | None = None
        self._lane_tasks: set[asyncio.Task[None]] = set()
        self._reading = asyncio.Lock()  # the dumps of a refresh (see _read)
        self._wake = asyncio.Event()
        self._adopted = 0
        self._task: asyncio.Task[None] | None = None
        self.stats: FibStats = self.cache.stats

    @property
    def adopted(self) -> int:
        """Nexthops, groups and routes of ours the kernel had at :meth:`start`."""
        return self._adopted

    @property
    def foreign_delete_hold_s(self) -> float:
        return self.cache.foreign_delete_hold_s

    @foreign_delete_hold_s.setter
    def foreign_delete_hold_s(self, v: float) -> None:
        self.cache.foreign_delete_hold_s = v

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
        try:
            self._ev.attach_filter(nexthop_event_filter(self.protocol))
        except OSError as e:  # unfiltered still works (the handler ignores them), at more cost
            log.warning("fib_nexthop_event_filter_failed", error=str(e))
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
        o = self.cache.obs
        self._adopted = len(o.nexthops) + len(o.groups) + len(o.routes)
        if adopt and self._adopted:
            self.cache.stale_until = self._clock() + self.stale_s
            self.cache.stale_keep = StaleKeep(set(o.routes), set(o.groups), set(o.nexthops))
        if self._weight_bits is None:
            self._weight_bits = await detect_weight_bits(
                self._req, self.cache.obs, self.id_ranges, self.protocol
            )
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
        if self._lane_tasks:  # the fast lane's answers (they come at once from the kernel)
            await asyncio.gather(*self._lane_tasks, return_exceptions=True)
        try:
            if not keep and self._req is not None:
                async with self._lock:
                    await self._refresh(full=True)
                    o = self.cache.obs
                    ops: list[Op] = [RouteDel(*k) for k in sorted(o.routes, key=route_sort_key)]
                    ops += [*map(GroupDel, sorted(o.groups)), *map(NhDel, sorted(o.nexthops))]
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
            self.cache.desired = desired
            return await self._sync()

    async def set_weights(self, key: str, weights: Mapping[Member, int]) -> ApplyResult:
        """Change one group's weights (the path-quality fast path): an :meth:`update` of that
        group alone, O(members), one RTM_NEWNEXTHOP replace however many routes use it; the
        group keeps its type. The group key must already be in the desired state."""
        return await self.set_group_weights({key: weights})

    async def set_group_weights(self, weights: Mapping[str, Mapping[Member, int]]) -> ApplyResult:
        """:meth:`set_weights` for several groups at once, each keeping its type: one
        :meth:`update`, one netlink batch of group replaces (not one round trip per group,
        which would queue the last behind all the others)."""
        d = self.cache.desired
        if d is None:
            raise KeyError(next(iter(weights), ""))
        missing = [k for k in weights if k not in d.groups]
        if missing:
            raise KeyError(missing[0])
        return await self.update(
            groups={k: GroupSpec(dict(w), d.groups[k].resilient) for k, w in weights.items()}
        )

    def weights_now(self, weights: Mapping[str, Mapping[Member, int]]) -> frozenset[str]:
        """The fast lane of weight changes: replace these groups' weights now, in the
        caller's callback, not after the write in flight and the next loop turn. Takes the
        groups the kernel has with the same members (the change is one group replace each)
        that the write holding the lock does not name; returns their keys. The others are
        left to the caller's next :meth:`set_group_weights` or :meth:`update`. The kernel's
        answers are folded in when they come; a refusal makes the next sync a full one."""
        fc = self.cache
        d = fc.desired
        if d is None or self._req is None or (self._lock.locked() and self._busy is None):
            return frozenset()
        take = lane_groups(fc, d, weights, self._busy if self._lock.locked() else None)
        if not take:
            return frozenset()
        new = replace(d, groups={**d.groups, **take})  # routes and standby as they are
        pl = plan(
            new,
            fc.obs,
            fc.ids,
            self._params(self._clock()),
            groups=take.keys(),
            known=self._realizable,
        )
        if not lane_in_place(pl, self._realizable, take):  # structural: the steps plan it
            return frozenset()
        root = self._lane_parent[1] if self._lane_parent and self._lane_parent[0] is d else d
        self._lane_parent = (new, root)
        if self._clean_for is d:
            self._clean_for = new
        fc.desired = new
        ops = self.cache.strip_excluded(list(pl.ops))
        if ops:
            self.stats.lane_writes += 1
            w16 = self._weight_bits == 16
            msgs = ops_wire(ops, protocol=self.protocol, table=self.table, weight_16bit=w16)
            self._writes += 1
            fc.sending(ops)
            try:
                fut = self._req.send_now(msgs)
            except OSError as e:
                self._lane_failed([f"fast lane: {e}"])
                return frozenset(take)
            task = asyncio.get_running_loop().create_task(self._lane_answers(ops, fut, w16))
            self._lane_tasks.add(task)
            task.add_done_callback(self._lane_tasks.discard)
        return frozenset(take)

    async def _lane_answers(
        self,
        ops: Sequence[Op],
        fut: asyncio.Future[list[tuple[int, NetlinkError]]],
        w16: bool,
    ) -> None:
        try:
            failed = dict(await fut)
        except Exception as e:  # the socket failed: the kernel's state is not known
            self._lane_failed([f"fast lane: {e!r}"])
            return
        errors, no_w16 = self.cache.written(ops, failed, set(), w16)
        if no_w16:
            self._weight_bits = 8
        if errors:
            self._lane_failed(errors)
            return
        self.cache.failed([])
        self._kick()

    def _lane_failed(self, errors: list[str]) -> None:
        self._clean_for = None
        self._lane_parent = None
        self.stats.lane_errors += 1
        self.cache.failed(errors)
        self._kick()

    def _descends(self, cur: Desired | None, base: Desired) -> bool:
        """``cur`` is ``base`` or what fast-lane writes made of it (weights only)."""
        lp = self._lane_parent
        return cur is base or (lp is not None and lp[0] is cur and lp[1] is base)

    async def update(
        self,
        groups: Mapping[str, GroupSpec] | None = None,
        remove_groups: Iterable[str] = (),
        add: Mapping[IPNetwork, str] | None = None,
        remove: Iterable[IPNetwork] = (),
    ) -> ApplyResult:
        """One incremental step of a BGP burst: new or changed groups, groups no longer
        wanted, routes added/re-pointed (``add``: prefix -> group key) and withdrawn
        (``remove``). Plans the named groups and routes only (O(the change)); a full plan
        happens only when a group that some other route uses became (un)realizable. Routes
        move before their old group is deleted (the kernel would take a route down with its
        group). The group keys must exist in the desired state (set by :meth:`apply`).
        Standby routes (``Desired.standby``) change only with :meth:`apply`: a step keeps
        them, re-plans those of the prefixes it names, and falls back to a full plan when a
        group a standby route uses moves."""
        remove_groups = frozenset(remove_groups)
        async with self._lock:
            self._busy = frozenset(groups or ()) | remove_groups
            try:
                return await self._update(groups, remove_groups, add, remove)
            finally:
                self._busy = None

    async def _update(
        self,
        groups: Mapping[str, GroupSpec] | None,
        remove_groups: Iterable[str],
        add: Mapping[IPNetwork, str] | None,
        remove: Iterable[IPNetwork],
    ) -> ApplyResult:
        """The body of :meth:`update`, under its lock."""
        fc = self.cache
        d = fc.desired
        if d is None:
            raise RuntimeError("apply() a desired state first")
        add = dict(add or {})
        dropped = set(remove_groups)
        changed = dict(groups or {})
        clean = not fc.routes_dirty and routes_planned(d, self._planned_routes)
        new_desired, only = step_desired(d, changed, dropped, add, remove)
        fc.desired = new_desired
        self.stats.applies += 1
        if not clean:
            return await self._sync_all()
        t0 = time.perf_counter()
        now = self._clock()
        fc.expire_held(now)
        # an incremental step plans the named groups and routes alone (O(the change), not
        # O(the table)); the groups it drops are deleted by their previous ids
        before = fc.ids
        dying = [before.groups[k] for k in dropped if k in before.groups]
        fc.ids = step_ids(
            new_desired, fc.obs, before, changed, dropped, self.id_ranges, self.metric
        )
        fc.relearn(add, now)
        pl = plan(
            new_desired,
            fc.obs,
            fc.ids,
            self._params(now),
            only=only,
            groups=changed.keys(),
            known=self._realizable,
            dying=dying,
        )
        realizable = dict(pl.realizable)
        # a group a route uses, primary or standby, moved: a full plan re-points it
        if step_needs_full(
            realizable, self._realizable, d.groups, new_desired.routes, only, new_desired.standby
        ):
            return await self._sync_all()
        self._planned_routes = route_maps(new_desired)
        self._realizable = realizable
        fc.count_foreign(pl.notes)
        fc.notes = step_notes(fc.notes, pl.notes, changed, dropped, only)
        was_clean = self._clean_for is d
        self._clean_for = None
        errors = await self._execute(list(pl.ops))
        # the step planned only what it changed: the rest is as clean as it was
        if was_clean and not errors and self._descends(fc.desired, new_desired):
            self._clean_for = fc.desired
        return ApplyResult(len(pl.ops), tuple(errors), time.perf_counter() - t0)

    async def reconcile(self, full: bool = True) -> ApplyResult:
        """Re-read the kernel and repair (what the periodic task does); ``full`` also audits
        glbd's route table."""
        seen = self._changes_seen()
        # the dumps are read without the lock, so a weight change is not held behind them
        # (they take several loop turns on a large table); if glbd wrote or the kernel said
        # something changed meanwhile, they may predate it and are read again under the lock
        read = await self._read(full)
        async with self._lock:
            if self._changes_seen() != seen:
                read = await self._read(full)
            before = self.cache.obs
            self._take(*read)
            if not full and as_expected(self.cache, before, self._clean_for, self._clean_links):
                self.stats.reconciles_unchanged += 1
                return ApplyResult(0)
            return await self._sync()

    def _changes_seen(self) -> tuple[int, int, int, int]:
        """glbd's write batches and the kernel's notifications so far."""
        st = self.cache.stats
        return (self._writes, st.link_events, st.nexthop_events, st.overruns)

    # -- failover -----------------------------------------------------------------------------
    async def remove_nexthop(self, gateway: str | IPAddress, ifname: str | None = None) -> int:
        """Fast failover: next hop ``gateway`` (on ``ifname``, or any) is gone. Every group
        that holds it is replaced without it at once (see ``FibCache.failover_ops``); it stays
        excluded until :meth:`restore_nexthop`. Returns the number of groups changed."""
        # No lock: failover must not wait behind a long reconcile. Ops that a concurrent
        # reconcile planned before this exclusion are stripped of it when they are encoded
        # (see _execute); ones already sent reach the kernel before these.
        ops = self.cache.failover_ops(ipaddress.ip_address(gateway), ifname)
        if ops:
            await self._execute(ops)
        self._kick()
        return len(ops)

    def failed_over(self, gateway: str | IPAddress, ifname: str | None = None) -> int:
        """The BFD engine deleted the member nexthops of ``gateway`` on ``ifname`` (see
        :meth:`failover_map`): mirror it and exclude the member until :meth:`restore_nexthop`.
        Returns the nexthops mirrored (0 when the kernel event came first); a deletion the
        kernel refused is found by the reconcile this wakes."""
        n = self.cache.failed_over(ipaddress.ip_address(gateway), ifname)
        self._kick()
        return n

    def failover_map(self) -> FailoverMap:
        """(gateway, ifname) -> the ids of glbd's member nexthops to that next hop that the
        kernel has (see :meth:`glbd.fib.fibcache.FibCache.failover_map`)."""
        return self.cache.failover_map()

    async def restore_nexthop(self, gateway: str | IPAddress, ifname: str | None = None) -> None:
        """Undo :meth:`remove_nexthop` / :meth:`failed_over`; the member comes back with the
        next reconcile."""
        self.cache.restore(ipaddress.ip_address(gateway), ifname)
        async with self._lock:
            await self._sync()

    # -- views --------------------------------------------------------------------------------
    def set_compat_mode(self, value: int) -> None:
        """Set ``net.ipv4.nexthop_compat_mode`` in glbd's namespace (see glbd.fib.fibkernel)."""
        set_compat_mode(value, self.netns)

    @property
    def weight_bits(self) -> int:
        return self._weight_bits or 8

    def snapshot(self, routes: bool = True) -> dict[str, Any]:
        """Desired vs installed state (JSON-safe) for ``glbctl routes`` / ``glbctl profiles``:
        ``netns``, ``protocol``, ``table``, ``weight_bits``, ``compat_mode`` and the keys of
        :func:`glbd.fib.fibsnap.snapshot` (per-prefix ``routes`` only if ``routes``)."""
        return {
            "netns": self.netns,
            "protocol": self.protocol,
            "table": self.table,
            "weight_bits": self.weight_bits,
            "compat_mode": get_compat_mode(self.netns),
            **snapshot(self.cache, self._clock(), self._weight_bits, routes=routes),
        }

    def route_lookup(self) -> RouteLookup:
        """Per-prefix rows of ``snapshot()["routes"]``, read one at a time (``glbctl routes``
        streams them; the whole mapping of a big FIB is not built)."""
        return RouteLookup.of(self.cache, self._clock(), self._weight_bits)

    def resilient_groups(self) -> dict[int, KGroup]:
        """glbd's resilient groups as last written or read back."""
        return {gid: g for gid, g in self.cache.obs.groups.items() if g.resilient is not None}

    def resilient_routes(self) -> dict[IPNetwork, int]:
        """glbd's routes over one of its resilient groups: prefix -> group id (O(routes))."""
        res = self.resilient_groups()
        return {r.prefix: r.nhid for r in self.cache.obs.routes.values() if r.nhid in res}

    async def read_buckets(self, group_id: int) -> tuple[int, ...]:
        """The member of each bucket of resilient group ``group_id`` (() before start)."""
        return () if self._req is None else await read_buckets(self._req, group_id)

    # -- sync ---------------------------------------------------------------------------------
    def _params(self, now: float) -> PlanParams:
        return self.cache.params(now, self._weight_bits)

    def _kick(self) -> None:
        """Act on the cache's signals: wake the reconcile task, report a changed failover map."""
        fc = self.cache
        if fc.wake:
            fc.wake = False
            self._wake.set()
        if fc.map_dirty:
            fm = fc.take_failover_map()
            if fm is not None and self.on_failover_map is not None:
                try:
                    self.on_failover_map(fm)
                except Exception:  # a consumer's bug must not break the FIB
                    log.exception("fib_failover_map_callback_failed")

    async def _sync_all(self) -> ApplyResult:
        """:meth:`_sync` from within :meth:`update`: it may write any group."""
        self._busy = None
        return await self._sync()

    async def _sync(self) -> ApplyResult:
        """Plan against the cached kernel view and apply. Caller holds the lock.

        Routes are planned (O(routes)) only when they may need work: the desired route mapping
        is a different object, a refresh found routes gone, the set of groups that can exist
        changed, or the last route write failed. A weight change is O(members)."""
        d = self.cache.desired
        if d is None:
            return ApplyResult(0)
        # the routes are planned (O(routes) objects): pause the collector; a weight-only sync
        # of a large table allocates little and runs with it on
        full = self.cache.routes_dirty or not routes_planned(d, self._planned_routes)
        with _gc_paused(len(d.routes) + len(d.standby) if full else 0):
            return await self._sync_paused(d)

    async def _sync_paused(self, d: Desired) -> ApplyResult:
        fc = self.cache
        t0 = time.perf_counter()
        now = self._clock()
        links = dict(fc.obs.links)  # what this plan sees (see fibstep.as_expected)
        fc.expire_held(now)
        fc.ids = assign_ids(d, fc.obs, fc.ids, self.id_ranges, metric=self.metric)
        same = routes_planned(d, self._planned_routes)
        full = fc.routes_dirty or not same
        fc.relearn(() if same else None, now)
        params = self._params(now)
        pl = plan(d, fc.obs, fc.ids, params, routes=full)
        if not full and dict(pl.realizable) != self._realizable:
            full = True
            pl = plan(d, fc.obs, fc.ids, params, routes=True)
        fc.count_foreign(pl.notes)
        if full:
            self.stats.full_plans += 1
            fc.notes = dict(pl.notes)
            self._planned_routes = route_maps(d)
            fc.routes_dirty = False
        else:
            kept = {k: v for k, v in fc.notes.items() if k not in d.groups}
            fc.notes = {**kept, **pl.notes}
        self._realizable = dict(pl.realizable)
        self._clean_for = None
        errors = await self._execute(list(pl.ops))
        self._clean_for = fc.desired if not errors and self._descends(fc.desired, d) else None
        self._clean_links = links
        return ApplyResult(len(pl.ops), tuple(errors), time.perf_counter() - t0)

    async def _execute(self, ops: Sequence[Op]) -> list[str]:
        if not ops:
            return []
        with _gc_paused(len(ops)):
            return await self._execute_paused(ops)

    async def _execute_paused(self, ops: Sequence[Op]) -> list[str]:
        assert self._req is not None
        ops = self.cache.strip_excluded(ops)
        # A create refused with EEXIST means the id is someone else's: nothing may then point
        # at it (a group at a foreign member, a route at a foreign group). So when there are
        # creates, members, groups and the rest go in separate batches, each filtered by what
        # the one before could not create. Without creates (weights, failover): one batch.
        nh = [op for op in ops if isinstance(op, NhSet)]
        grp = [op for op in ops if isinstance(op, GroupSet)]
        phases: list[list[Op]] = [list(ops)]
        if any(not op.replace for op in nh) or any(op.create for op in grp):
            rest: list[Op] = [op for op in ops if not isinstance(op, NhSet | GroupSet)]
            split: tuple[list[Op], ...] = ([*nh], [*grp], rest)
            phases = [p for p in split if p]
        not_created: set[int] = set()
        errors: list[str] = []
        for phase in phases:
            phase = self.cache.without(phase, not_created)
            if phase:
                errors += await self._execute_batch(phase, not_created)
        self.cache.failed(errors)
        self._kick()
        return errors

    async def _execute_batch(self, ops: Sequence[Op], not_created: set[int]) -> list[str]:
        assert self._req is not None
        w16 = self._weight_bits == 16
        msgs = ops_wire(ops, protocol=self.protocol, table=self.table, weight_16bit=w16)
        self._writes += 1
        self.cache.sending(ops)
        failed = dict(await self._req.batch(msgs))
        errors, no_w16 = self.cache.written(ops, failed, not_created, w16)
        if no_w16:
            self._weight_bits = 8  # kernel without weight_high: scale into 1..255
        return errors

    async def _refresh(self, full: bool) -> None:
        """Re-read links and nexthops (cheap); with ``full`` also glbd's route table (the
        fast select dump: only the header and four attributes per route)."""
        self._take(*await self._read(full))

    def _take(self, links: list[Selected], nhs: list[Message], audit: Audit | None) -> None:
        """Fold a refresh's dumps into the cache (routes carried over unless audited)."""
        fc = self.cache
        obs = observe(
            links, nhs, None, protocol=self.protocol, table=self.table, previous_routes=fc.obs
        )
        self._weight_bits = fc.load(obs, audit, self._weight_bits)
        self._kick()

    async def _read(self, full: bool) -> Read:
        """The dumps of :meth:`_refresh` (links, nexthops, the route audit), not yet in the
        cache. One at a time: the kernel runs one dump per socket."""
        async with self._reading:
            assert self._req is not None
            read, memo = await read_kernel(self._req, self.cache, full, self._row_memo)
            if memo is not None:  # audited
                self._row_memo = memo
                self._last_audit = self._clock()
            return read

    # -- events and the reconcile loop --------------------------------------------------------
    def _on_event(self, msg: Message) -> None:
        self.cache.on_event(msg, self._clock())
        self._kick()

    def _on_route_event(self, msg: Message) -> None:
        self.cache.on_route_event(msg)
        self._kick()

    def _on_overrun(self) -> None:
        self.cache.on_overrun()
        self._kick()

    def _next_timeout(self, stale_pending: bool) -> float:
        """Until the next periodic run, the stale timer's end or a held member's release."""
        fc = self.cache
        timeout = self.reconcile_interval_s
        if stale_pending:
            timeout = min(timeout, max(0.0, fc.stale_until - self._clock()))
        if fc.held_until:  # a held-out member comes back when its hold ends
            timeout = min(timeout, max(0.0, min(fc.held_until.values()) - self._clock()))
        return timeout

    async def _run(self) -> None:
        fc = self.cache
        stale_pending = fc.stale_until > 0
        backoff = 0.0
        while True:
            # a plain timer instead of asyncio.wait_for (3.11's wait_for can swallow a cancel)
            timed_out = False

            def _tick() -> None:
                nonlocal timed_out
                timed_out = True
                self._wake.set()

            loop = asyncio.get_running_loop()
            timer = loop.call_later(self._next_timeout(stale_pending), _tick)
            try:
                await self._wake.wait()
            finally:
                timer.cancel()
            full = fc.need_full or (
                timed_out and self._clock() - self._last_audit >= self.route_audit_interval_s
            )
            if stale_pending and self._clock() >= fc.stale_until:
                stale_pending = False
                full = True
            self._wake.clear()
            fc.need_full = False
            ok = False
            try:
                ok = not (await self.reconcile(full=full)).errors
            except (OSError, ValueError) as e:
                log.warning("fib_reconcile_failed", error=str(e))
                fc.need_full = True
            except Exception:  # never let the reconcile task die
                log.exception("fib_reconcile_crashed")
                fc.need_full = True
            # bounded cost: at most one run per min_gap_s; back off while the kernel refuses
            backoff = 0.0 if ok else min(max(2 * backoff, 0.5), 30.0)
            await asyncio.sleep(max(self.min_gap_s, backoff))
