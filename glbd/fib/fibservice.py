"""The FIB wing of one glbd: the programmer, the sync loop that runs
:class:`~glbd.fib.fibsync.FibSync`'s steps, the fast lane for weights, the fast failover on a
BFD failure and the BFD engine's armed failover.

Apart from :mod:`glbd.daemon.node` so that the node only routes events: path-table changes, BGP's
first session, BFD state changes, flowlet timeouts and reloads come in through the few methods
of :class:`FibService`; how the FIB follows them (the steps, their timer and task, the
hold-down, the lane, the failover) stays here. The programmer adopts what the kernel has at
start and never flushes it. The counters go into the node's dict under the names the views and
metrics read (``fib_syncs``, ``fib_fast_failovers``, ...).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import time
from collections.abc import Mapping
from typing import Any, Protocol

import structlog

from bfd.engine import BfdEngine, BfdEvent
from bfd.packet import State
from glbd.config import config as cfgmod
from glbd.config import params
from glbd.config.config_fib import FibSection
from glbd.control import metrics_daemon, views
from glbd.daemon.netns import read_sysctl
from glbd.fib.failover import FailoverArming
from glbd.fib.fibmodel import GroupSpec, IPNetwork, Member, Resilient
from glbd.fib.fibsync import FibSync, Step
from glbd.fib.programmer import FibProgrammer
from glbd.quality.pathchanges import Changes
from glbd.quality.pathtable import PathTable

log = structlog.get_logger(__name__)

#: how long BGP is up before adopted kernel state may change (``FibSync``'s hold-down; none
#: when the start adopted nothing)
FIB_HOLD_S = 1.0
#: the kernel's multipath hash: 0 hashes on addresses only
HASH_POLICY_SYSCTL = "net.ipv4.fib_multipath_hash_policy"

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = IPNetwork


class FibHost(Protocol):
    """What the FIB service reads of the node, each time it needs it: the config in force (a
    reload switches it), the path table (the quality part makes it), the BFD engine (it is
    restarted), and the counters and latency histograms it adds to."""

    loop: asyncio.AbstractEventLoop
    netns: str | None
    cfg: cfgmod.Config
    table: PathTable | None
    bfd: BfdEngine | None
    counters: dict[str, int]
    latency: metrics_daemon.Latencies


class FibService:
    """The FIB part: its :class:`FibProgrammer` (None until :meth:`start`), the FIB sync and
    the task and timer that run it, and the failover arming."""

    def __init__(self, host: FibHost) -> None:
        self._host = host
        self.loop = host.loop
        self.netns = host.netns
        self.counters = host.counters
        self.latency = host.latency
        self.fib: FibProgrammer | None = None
        self.sync = FibSync(FIB_HOLD_S)
        #: the flowlet timeout in force (None: flowlets off); an "auto" idle timer follows it
        self.flowlet_timeout_s: float | None = None
        #: the last step applied: when, mode, duration, the FIB's answer (``glbctl profiles``)
        self.last_sync: dict[str, Any] = {}
        #: the FIB's member nexthop ids -> the BFD engine's per-session kernel failover
        self.failover = FailoverArming(self.loop, lambda: host.bfd, lambda: host.cfg, self.counters)
        self._remote_since: float | None = None  # first weight-changing heartbeat not yet synced
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None

    @property
    def hold_s(self) -> float:
        """How long after BGP's first session the FIB leaves adopted state alone."""
        return self.sync.hold_s

    @hold_s.setter
    def hold_s(self, value: float) -> None:
        self.sync.hold_s = value

    def _resilient(self) -> Resilient | None:
        return params.resilient(self._host.cfg.fib, self.flowlet_timeout_s)

    # ---- start / stop ---------------------------------------------------------------------

    def build(self) -> FibProgrammer:
        f = self._host.cfg.fib
        return FibProgrammer(
            netns=self.netns,
            protocol=f.protocol,
            table=f.table,
            compat_mode=0 if f.set_compat_mode_off else None,
            reconcile_interval_s=f.reconcile_interval_s,
            route_audit_interval_s=f.route_audit_interval_s,
            resilient=params.resilient(f, self.flowlet_timeout_s),
            stale_s=f.stale_timer_s,
        )

    async def start(self) -> None:
        self.fib = self.build()
        self.fib.on_failover_map = self.failover.map_changed
        await self.fib.start(adopt=True)
        self.sync.adopted(self.fib.adopted)
        self._warn_l3_hash()

    def _warn_l3_hash(self) -> None:
        """A load balancer whose kernel hashes on addresses only puts every flow between two
        hosts on one next hop; flowlets set the policy themselves (``set_hash_policy``)."""
        cfg = self._host.cfg
        if not cfg.is_load_balancer or cfg.flowlet_active:
            return
        with contextlib.suppress(OSError):
            if read_sysctl(HASH_POLICY_SYSCTL, self.netns) == "0":
                log.warning(
                    "fib_hash_policy_l3_only",
                    sysctl=HASH_POLICY_SYSCTL,
                    hint="flows between two hosts share one next hop; set it to 1 (ports)",
                )

    async def stop(self) -> None:
        """Stop the sync, then the programmer (``fib.on_stop``: keep or remove what it wrote)."""
        if self._timer is not None:
            self._timer.cancel()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self.fib is not None:
            await self.fib.stop(keep=self._host.cfg.fib.on_stop == "keep")

    def reconfigure(self, f: FibSection) -> None:
        """A reload changed ``[fib]``: group type/buckets/timers apply to the next sync
        (make-before-break in the FIB); protocol/table changes would orphan installed state:
        those need a restart."""
        log.info("reload_fib", note="group parameters apply from the next sync")
        if self.fib is not None:  # the intervals from the reconcile's next run
            self.fib.reconcile_interval_s = f.reconcile_interval_s
            self.fib.route_audit_interval_s = f.route_audit_interval_s
            self.fib.resilient = params.resilient(f, self.flowlet_timeout_s)
        self.request_full()

    def set_flowlet_timeout(self, timeout_s: float | None) -> None:
        """The flowlet timeout changed (None: flowlets off): resilient groups whose idle timer
        follows it are rewritten by the next sync."""
        if timeout_s == self.flowlet_timeout_s:
            return
        before = self._resilient()
        self.flowlet_timeout_s = timeout_s
        after = self._resilient()
        if after == before:
            return
        if self.fib is not None:
            self.fib.resilient = after
        self.request_full()

    # ---- BFD ------------------------------------------------------------------------------

    def bfd_state(self, ev: BfdEvent, peer: IPAddress) -> None:
        """A BFD state change, before anything else sees it: a failure takes the next hop out
        of every kernel group (mirrored here when the engine already did it, else a task);
        Up puts it back. A peer's AdminDown is not a failure."""
        if self.fib is None:
            return
        if ev.new is not State.UP and ev.failure:
            self.counters["fib_fast_failovers"] += 1
            if ev.failover_sent:
                # the engine already deleted the peer's member nexthops (bfd.failover):
                # mirror that and keep the member out until BFD is Up again
                self.counters["bfd_engine_failovers"] += 1
                self.fib.failed_over(peer, ev.interface)
            else:
                self.loop.create_task(self.fib.remove_nexthop(peer, ev.interface))
        elif ev.new is State.UP:
            self.loop.create_task(self.fib.restore_nexthop(peer, ev.interface))

    def sessions_reset(self) -> None:
        """The BFD engine's sessions are new or re-created (unarmed): arm them all again."""
        self.failover.rearm(all_sessions=True)

    async def stop_failover(self) -> None:
        """The BFD part stops: the arming task goes with it."""
        await self.failover.stop()

    # ---- the FIB sync (the decision is glbd.fib.fibsync; this runs it) -------------------

    def remote_moved(self) -> None:
        """A heartbeat moved weights: timed until the FIB has them, only once syncs run (not
        through the start's hold-down)."""
        if self._remote_since is None and not self.sync.held(self.loop.time()):
            self._remote_since = time.monotonic()

    def table_changed(self, changes: Changes) -> None:
        """What the path table returned. New weights of groups the kernel has go out at once
        on the FIB's fast lane; the rest waits for the next step."""
        if not changes:
            return
        table = self._host.table
        if self.fib is not None and table is not None and not changes.prefixes:
            specs = self.sync.fast_weights(table, changes, self._resilient(), self.loop.time())
            if specs:
                taken = self.fib.weights_now({k: s.weights for k, s in specs.items()})
                if taken:
                    self.counters["fib_fast_weights"] += 1
                    since, self._remote_since = self._remote_since, None
                    self.latency.sent_now(since, time.monotonic())
                    changes = Changes(changes.updated - taken, changes.removed, changes.prefixes)
                    if not changes:
                        return
        self.sync.add(changes)
        self.schedule_sync()

    def pin(
        self,
        groups: Mapping[str, Mapping[Member, int]],
        routes: Mapping[Network, str],
        standby: Mapping[Network, str],
    ) -> None:
        """Prefixes whose group is not their profile's (fabric colours), with standby
        routes: the next step brings them over (``FibSync.pin``)."""
        res = self._resilient()
        specs = {k: GroupSpec(dict(w), resilient=res) for k, w in groups.items() if w}
        routes = {n: k for n, k in routes.items() if k in specs}
        standby = {n: k for n, k in standby.items() if k in specs}
        if self.sync.pin(specs, routes, standby, self.loop.time()):
            self._start_sync()

    def bgp_up(self, now: float) -> None:
        """A BGP session came up: the first one starts the hold-down."""
        self.sync.bgp_up(now)
        self._arm_timer()

    def schedule_sync(self) -> None:
        if self.sync.request(self.loop.time()):
            self._start_sync()

    def request_full(self) -> None:
        """The next step is a full apply (a reload, new resilient parameters)."""
        if self.sync.request_full(self.loop.time()):
            self._start_sync()

    def _start_sync(self) -> None:
        if self._task is None or self._task.done():
            self._task = self.loop.create_task(self._sync_loop())

    def _arm_timer(self) -> None:
        deadline = self.sync.next_deadline()
        if deadline is not None and self._timer is None:
            self._timer = self.loop.call_at(deadline, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self.sync.on_timer(self.loop.time()):
            self._start_sync()
        self._arm_timer()  # a timer that fired early: again

    async def _sync_loop(self) -> None:
        """Run the steps the FIB sync plans until nothing is dirty."""
        while self.sync.dirty:
            table = self._host.table
            if self.fib is None or table is None:
                self.sync.dirty = False
                return
            step = self.sync.plan(table, self._resilient())
            if step is None:
                return
            t0 = time.perf_counter()
            since, self._remote_since = self._remote_since, None  # this step carries them
            try:
                result = await self._run_step(step)
            except Exception as e:  # the kernel said no: count, log, redo it fully next time
                self._remote_since = since if since is not None else self._remote_since
                self.counters["fib_sync_errors"] += 1
                self.sync.failed()
                log.error("fib_sync_failed", mode=step.mode, error=repr(e))
                continue
            self.sync.done(step)
            if step.kind == "none":  # nothing written: the full step that follows carries them
                self._remote_since = since if since is not None else self._remote_since
            else:
                self.latency.synced(time.perf_counter() - t0, since, time.monotonic())
            self.counters["fib_syncs"] += 1
            self.last_sync = {
                "at": time.time(),
                "mode": step.mode,
                "ms": round((time.perf_counter() - t0) * 1e3, 3),
                "result": views.plain(result),
            }

    async def _run_step(self, step: Step) -> Any:
        assert self.fib is not None
        if step.kind == "apply":
            assert step.desired is not None
            return await self.fib.apply(step.desired)
        if step.kind == "set_weights":  # group replaces in one batch, no route touched
            return await self.fib.set_group_weights(
                {key: spec.weights for key, spec in step.groups.items()}
            )
        if step.kind == "update":
            return await self.fib.update(
                groups=step.groups,
                remove_groups=step.remove_groups,
                add=step.add,
                remove=step.remove,
            )
        return None  # "none": a full step follows

    # ---- views ----------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """``glbctl profiles``: the path table's profiles beside the FIB's groups."""
        fib = self.fib.snapshot(routes=False) if self.fib else {}
        return views.fib_snapshot(fib, self._host.table, self.last_sync)
