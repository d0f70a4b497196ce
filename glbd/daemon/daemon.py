"""The daemon: runs the components it is given (``glbd.cli.glbd`` builds them from the config).

How the parts are wired to each other is :mod:`glbd.daemon.node`'s business.

Nothing on the loop blocks: netlink and pipes are async, BFD runs on its own thread. The loop's
lag (how late a 100 ms tick fires) is measured and exposed in ``glbctl status`` and metrics;
systemd's watchdog is pinged from the same loop.

Lifecycle: ``start()`` brings parts up in dependency order and tells systemd READY once the
control socket is bound and ExaBGP answered; SIGHUP (or ``glbctl reload``) validates the file and
applies only what changed, keeping the old config when the new one is bad; SIGTERM stops in order
(withdraw, stop ExaBGP, stop BFD, leave the FIB as configured); after ``glbctl
graceful-restart`` it stops as a graceful restart instead (:mod:`glbd.bgp.gracestop`: BFD
AdminDown, ExaBGP killed so the sessions close without a NOTIFICATION, nothing withdrawn
toward the peers that negotiated it, the FIB kept).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import resource
import signal
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from glbd import __version__
from glbd.base.reasons import StopKind
from glbd.bgp.gracestop import GracefulRestartArm
from glbd.config import config as cfgmod
from glbd.control import metrics_daemon, views
from glbd.control.metrics import MetricsServer, Row
from glbd.control.protocol import ReloadOutcome
from glbd.control.server import ControlServer
from glbd.daemon import log as logmod
from glbd.daemon import sched, systemd
from glbd.daemon.component import Component
from glbd.daemon.loopprio import LoopPriority, Policy
from glbd.daemon.parts import BfdPart
from glbd.daemon.privileges import capability_problem

log = structlog.get_logger(__name__)

#: the watchdog is no longer fed once the BFD engine has been dead this long (s): its restarts
#: back off up to 30 s, so this is two failed tries at the longest
BFD_WATCHDOG_S = 60.0


class StartError(Exception):
    def __init__(self, component: str) -> None:
        super().__init__(component)
        self.component = component


@dataclass
class LoopLag:
    """Event-loop lag: how late a periodic tick runs. Cheap enough to run always."""

    interval: float = 0.1
    last: float = 0.0
    max: float = 0.0
    ewma: float = 0.0
    ticks: int = 0
    late_10ms: int = 0

    def record(self, lag: float) -> None:
        self.last = lag
        self.max = max(self.max, lag)
        self.ewma = lag if self.ticks == 0 else 0.9 * self.ewma + 0.1 * lag
        self.ticks += 1
        if lag > 0.010:
            self.late_10ms += 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "last_ms": round(self.last * 1e3, 3),
            "max_ms": round(self.max * 1e3, 3),
            "ewma_ms": round(self.ewma * 1e3, 3),
            "ticks": self.ticks,
            "late_10ms": self.late_10ms,
        }


#: net allocations of tracked objects between two young-generation GC passes: CPython's 700
#: made passes that hold the loop frequent under load (docs/benchmarks-e2e.md)
GC_YOUNG_THRESHOLD = 20_000


@dataclass
class GcPauses:
    """Pauses of CPython's cyclic garbage collector, per generation (``gc.callbacks``): a pass
    holds the event loop like any long callback."""

    count: list[int] = field(default_factory=lambda: [0, 0, 0])
    total: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    max: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    over_5ms: int = 0
    #: objects moved out of the collector's reach once started (:meth:`settle`)
    frozen: int = 0
    _t0: float = 0.0
    _threshold: tuple[int, ...] = ()

    def install(self) -> None:
        """Count passes, and make young ones rarer (:data:`GC_YOUNG_THRESHOLD`)."""
        if self.on_gc not in gc.callbacks:
            self._threshold = gc.get_threshold()
            gc.set_threshold(GC_YOUNG_THRESHOLD, *self._threshold[1:])
            gc.callbacks.append(self.on_gc)

    def settle(self) -> None:
        """Once started: collect once and freeze what is left (``gc.freeze``). The modules,
        the config and the parts built at start then never need scanning again, and the
        generation counts left by the imports restart from zero; otherwise they brought a
        middle pass over all of it (20-40 ms at a leaf) at some moment of the first minute.
        Refcounting still frees frozen objects; only cycles among them would stay."""
        gc.collect()
        gc.freeze()
        self.frozen = gc.get_freeze_count()

    def remove(self) -> None:
        """Stop counting and give the process its thresholds back (an embedding process)."""
        if self.on_gc in gc.callbacks:
            gc.callbacks.remove(self.on_gc)
            gc.set_threshold(*self._threshold)
        if self.frozen:
            gc.unfreeze()
            self.frozen = 0

    def on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
            return
        g = min(2, int(info.get("generation", 0)))
        d = time.perf_counter() - self._t0
        self.count[g] += 1
        self.total[g] += d
        self.max[g] = max(self.max[g], d)
        if d > 0.005:
            self.over_5ms += 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "collections": list(self.count),
            "total_ms": [round(t * 1e3, 3) for t in self.total],
            "max_ms": [round(m * 1e3, 3) for m in self.max],
            "over_5ms": self.over_5ms,
            "frozen": self.frozen,
        }


@dataclass
class ReloadResult:
    ok: bool
    at: float
    message: str
    changes: dict[str, Any] = field(default_factory=dict)
    outcome: ReloadOutcome = ReloadOutcome.APPLIED
    #: the components that applied the new config, and those whose reconfigure raised
    applied: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "at": self.at,
            "message": self.message,
            "changes": self.changes,
            "outcome": str(self.outcome),
            "applied": list(self.applied),
            "failed": list(self.failed),
        }


ComponentFactory = Callable[["Daemon"], list[Component]]


class Daemon:
    def __init__(
        self,
        config_path: str,
        cfg: cfgmod.Config,
        components: ComponentFactory | None = None,
        heap_report: str | None = None,
    ) -> None:
        self.config_path = config_path
        #: file SIGUSR2 writes a tracemalloc report to (``glbd run --heap-report``), or None
        self.heap_report = heap_report
        self.cfg = cfg
        self.started_at = time.time()
        self.state = "starting"
        self.lag = LoopLag()
        self.gc_pauses = GcPauses()
        self.loop_priority = LoopPriority(cfg.rt_priority)
        self.last_reload: ReloadResult | None = None
        self.config_loaded_at = self.started_at  # unix time the config in force was loaded
        self._factory = components or _no_components
        self.components: list[Component] = []
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.control = ControlServer(cfg.control.socket, self._handlers())
        self.metrics: MetricsServer | None = None
        self._reload_lock = asyncio.Lock()
        #: components whose last reconfigure raised -> the config they last applied (the next
        #: reload hands them the changes since that one)
        self._behind: dict[str, cfgmod.Config] = {}
        #: a loaded config -> the one in force (fills in the unnumbered neighbors' learned
        #: peers: set by the part that learns them)
        self.resolve: Callable[[cfgmod.Config], cfgmod.Config] = lambda c: c

    # ---- lifecycle ---------------------------------------------------------------------

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig, fn in (
            (signal.SIGTERM, self.request_stop),
            (signal.SIGINT, self.request_stop),
            (signal.SIGHUP, self._sighup),
        ):
            loop.add_signal_handler(sig, fn)
        if self.heap_report:  # diagnosis only: tracemalloc slows allocation several-fold
            tracemalloc.start()
            loop.add_signal_handler(signal.SIGUSR2, _write_heap_report, self.heap_report)
        try:
            await self.start()
            await self._stop.wait()
        except StartError as e:
            log.error("start_failed", component=e.component, error=str(e.__cause__ or e))
            print(f"glbd: {e.component} failed to start: {e.__cause__ or e}", file=sys.stderr)
            return 1
        finally:
            await self.stop()
        return 0

    async def start(self) -> None:
        systemd.status("starting")
        self._tasks.append(asyncio.create_task(self._lag_task(), name="loop-lag"))
        self.gc_pauses.install()
        self._apply_priority(self.loop_priority.start())
        wd = systemd.watchdog_interval()
        if wd:
            self._tasks.append(asyncio.create_task(self._watchdog_task(wd), name="watchdog"))
        await self.control.start()
        if self.cfg.metrics.listen:
            self.metrics = MetricsServer(self.cfg.metrics.listen, self.samples)
            await self.metrics.start()
        self.components = self._factory(self)
        for c in self.components:
            t0 = time.perf_counter()
            try:
                await c.start()
            except Exception as e:  # stop what started, report one line; systemd restarts us
                raise StartError(c.name) from e
            log.info(
                "component_started", component=c.name, ms=round((time.perf_counter() - t0) * 1e3, 1)
            )
        self.gc_pauses.settle()
        self.state = "running"
        summary = (
            f"running: role {self.cfg.role}, {len(self.cfg.neighbors)} neighbors, "
            f"{len(self.components)} components"
        )
        systemd.ready(summary)
        log.info(
            "glbd_started",
            version=__version__,
            role=self.cfg.role,
            router_id=str(self.cfg.router_id),
            config=self.config_path,
        )

    def request_stop(self) -> None:
        self._stop.set()

    async def stop(self) -> None:
        if self.state == "stopped":
            return
        self.state = "stopping"
        systemd.stopping()
        kind = str(StopKind.PLANNED)
        for c in self.components:  # the bgp part decides the stop before anything stops
            prepare = getattr(c, "prepare_stop", None)
            if prepare is None:
                continue
            try:
                kind = await asyncio.wait_for(prepare(), 15.0)
            except Exception as e:  # a planned stop then, as far as the parts can
                log.error("component_prepare_stop_failed", component=c.name, error=repr(e))
        log.info("glbd_stopping", stop=kind)
        for c in reversed(self.components):
            try:
                await asyncio.wait_for(c.stop(), 15.0)
            except Exception as e:  # one part failing to stop must not keep the rest running
                log.error("component_stop_failed", component=c.name, error=repr(e))
        if self.metrics is not None:
            await self.metrics.stop()
        await self.control.stop()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self.gc_pauses.remove()
        self._apply_priority(self.loop_priority.stop())
        self.state = "stopped"
        log.info("glbd_stopped")

    # ---- reload ------------------------------------------------------------------------

    def _sighup(self) -> None:
        asyncio.get_running_loop().create_task(self.reload())

    async def reload(self) -> ReloadResult:
        """Validate -> diff -> apply only what changed. A bad file, or a change to a key read
        only at start (``cfgmod.RELOAD``), changes nothing."""
        async with self._reload_lock:
            systemd.notify(
                reloading=1,
                status="reloading",
                monotonic_usec=int(time.clock_gettime(time.CLOCK_MONOTONIC) * 1e6),
            )
            try:
                new = await asyncio.to_thread(cfgmod.load, self.config_path)
            except cfgmod.ConfigError as e:
                return self._reload_rejected(e)
            new = self.resolve(new)
            changes = cfgmod.diff(self.cfg, new)
            if changes["restart_required"]:
                return self._reload_needs_restart(changes)
            applied, errors = await self._reconfigure(new, changes)
            # After a partial failure the new config is in force all the same: the parts that
            # applied it run on it (the node's parts share one config), so `glbctl config` shows
            # what most of the daemon does; the failed parts are retried by the next reload.
            self._behind = {n: self._behind.get(n, self.cfg) for n in errors}
            self.cfg = new
            if "rt_priority" in changes["keys"]:
                self._apply_priority(self.loop_priority.set_priority(new.rt_priority))
            if "logging.level" in changes["keys"]:
                logmod.set_level(new.logging.level)
            res, status = self._reload_outcome(changes, applied, errors)
            self.config_loaded_at = res.at
            self.last_reload = res
            systemd.notify(ready=1, status=status)
            return res

    def _reload_rejected(self, e: cfgmod.ConfigError) -> ReloadResult:
        """A reload whose file does not validate: nothing changes, the old config runs."""
        res = ReloadResult(
            False,
            time.time(),
            f"rejected, old config kept: {e.format()}",
            outcome=ReloadOutcome.REJECTED,
        )
        log.error("reload_rejected", problems=[p.format(e.path) for p in e.problems])
        self.last_reload = res
        systemd.notify(ready=1, status=f"running (reload rejected: {len(e.problems)} problems)")
        return res

    def _reload_needs_restart(self, changes: dict[str, Any]) -> ReloadResult:
        """A reload that changes a key read only at start: nothing applied, the old config
        runs."""
        keys = ", ".join(changes["restart_required"])
        res = ReloadResult(
            False,
            time.time(),
            f"needs restart: {keys}; nothing applied, the old config runs",
            changes,
            ReloadOutcome.NEEDS_RESTART,
        )
        log.error("reload_rejected", restart_required=changes["restart_required"])
        self.last_reload = res
        systemd.notify(ready=1, status=f"running (reload refused: needs restart: {keys})")
        return res

    async def _reconfigure(
        self, new: cfgmod.Config, changes: dict[str, Any]
    ) -> tuple[list[str], dict[str, str]]:
        """Hand ``new`` to every component, with what changed since the config it last
        applied: the components that applied it, and the error of each one that raised."""
        applied: list[str] = []
        errors: dict[str, str] = {}
        for c in self.components:
            base = self._behind.get(c.name)
            try:
                await c.reconfigure(new, changes if base is None else cfgmod.diff(base, new))
            except Exception as e:
                log.error("reconfigure_failed", component=c.name, error=repr(e))
                errors[c.name] = repr(e)
            else:
                applied.append(c.name)
        return applied, errors

    @staticmethod
    def _reload_outcome(
        changes: dict[str, Any], applied: list[str], errors: dict[str, str]
    ) -> tuple[ReloadResult, str]:
        """The result of a reload that put the new config in force (logged), and the status
        it leaves for systemd."""
        if errors:
            res = ReloadResult(
                False,
                time.time(),
                "failed in "
                + ", ".join(f"{n} ({e})" for n, e in errors.items())
                + f"; applied in {', '.join(applied) or 'no component'}; the new config is "
                "in force, a reload retries what failed",
                changes,
                ReloadOutcome.FAILED,
                applied,
                list(errors),
            )
            log.error("reload_failed", failed=list(errors), applied=applied)
            return res, f"running (reload failed in {', '.join(errors)})"
        keys = ", ".join(changes["keys"])
        res = ReloadResult(
            True,
            time.time(),
            f"applied: {keys}" if keys else "applied: nothing changed",
            changes,
            ReloadOutcome.APPLIED,
            applied,
        )
        log.info("reload_applied", **changes)
        return res, "running (reloaded)"

    async def reapply(self) -> None:
        """Resolve the config in force again (an unnumbered neighbor's peer was learned or
        moved) and apply what changed: only neighbors can."""
        async with self._reload_lock:
            new = self.resolve(self.cfg)
            changes = cfgmod.diff(self.cfg, new)
            if new == self.cfg:
                return
            for c in self.components:
                try:
                    await c.reconfigure(new, changes)
                except Exception as e:
                    log.error("reconfigure_failed", component=c.name, error=repr(e))
            self.cfg = new
            log.info("neighbors_resolved_applied", **changes)

    # ---- background tasks ----------------------------------------------------------------

    async def _lag_task(self) -> None:
        loop = asyncio.get_running_loop()
        interval = self.lag.interval
        while True:
            t0, cpu0 = loop.time(), time.process_time()
            await asyncio.sleep(interval)
            t1 = loop.time()
            self.lag.record(max(0.0, t1 - t0 - interval))
            self._apply_priority(self.loop_priority.on_tick(time.process_time() - cpu0, t1 - t0))

    def _apply_priority(self, policy: Policy | None) -> None:
        """Real time for the loop's thread, or normal scheduling while it does bulk work."""
        if policy is None:
            return
        try:
            sched.apply(policy, self.loop_priority.priority)
        except OSError as e:
            self.loop_priority.refuse(e.strerror or str(e))
            log.warning("rt_priority_refused", priority=self.loop_priority.priority, error=str(e))

    async def _watchdog_task(self, every: float) -> None:
        """Feeds systemd's watchdog while the loop runs and the BFD engine is alive, or has
        been dead for less than BFD_WATCHDOG_S: an engine that cannot be brought back is a
        daemon without fast failover, and systemd restarts it (the FIB stays)."""
        while True:
            bfd = self._component("bfd")
            dead = bfd.dead_for() if isinstance(bfd, BfdPart) else 0.0
            if dead < BFD_WATCHDOG_S:
                systemd.watchdog()
            else:
                log.error("watchdog_withheld", bfd_engine_dead_s=round(dead, 1))
            await asyncio.sleep(every)

    # ---- control socket ------------------------------------------------------------------

    def _component(self, name: str) -> Component | None:
        return next((c for c in self.components if c.name == name), None)

    def _section(self, key: str, component: str) -> Callable[[dict[str, Any]], Any]:
        def handler(args: dict[str, Any]) -> Any:
            c = self._component(component)
            if c is None:
                return {key: [], "note": f"{component} is not running in this role/config"}
            return _section_of(c, key)

        return handler

    def _whole(self, component: str) -> Callable[[dict[str, Any]], Any]:
        def handler(args: dict[str, Any]) -> Any:
            c = self._component(component)
            return c.snapshot() if c is not None else {"note": f"{component} is not running"}

        return handler

    def _handlers(self) -> dict[str, Callable[[dict[str, Any]], Any]]:
        return {
            "status": lambda a: self.status(),
            "config": lambda a: self.cfg.redacted(),
            "counters": lambda a: self.counters(),
            "reload": self._reload_handler,
            "drain": lambda a: self._drain(True, a.get("peer")),
            "undrain": lambda a: self._drain(False, a.get("peer")),
            "graceful-restart": lambda a: self._graceful_restart(not a.get("cancel")),
            "neighbor-shutdown": lambda a: self._neighbor_admin(a["peer"], "shutdown"),
            "neighbor-enable": lambda a: self._neighbor_admin(a["peer"], "enable"),
            "neighbor-reset": lambda a: self._neighbor_admin(
                a["peer"], "reset", bool(a.get("soft"))
            ),
            "neighbors": self._filtered(self._section("neighbors", "bgp"), "peer"),
            "routes": self._routes,
            "bfd": self._rows("bfd", self._section("sessions", "bfd")),
            "links": self._rows("links", self._section("links", "quality")),
            "heartbeats": self._rows("heartbeats", self._section("heartbeats", "quality")),
            "quality": self._rows("quality", self._section("quality", "quality")),
            "profiles": self._profiles,
            "flowlet": self._whole("flowlet"),
            "colours": self._section("colours", "bgp"),
            "neighbor": self._neighbor,
            "log-level": self._log_level,
        }

    def _rows(self, cmd: str, handler: Callable[[dict[str, Any]], Any]) -> Any:
        """``handler`` cut to the rows ``--neighbor``/``--interface``/``--state`` select; a
        neighbor's name is resolved through the BGP neighbors and the config."""

        def filtered(args: dict[str, Any]) -> Any:
            f = views.row_filter(args, self._neighbor_rows() if args.get("neighbor") else [])
            return views.filter_section(cmd, handler(args), f)

        return filtered

    def _neighbor_rows(self) -> list[dict[str, Any]]:
        """The BGP neighbor rows, or the config's neighbors where bgp does not run."""
        rows = self._section("neighbors", "bgp")({})
        if isinstance(rows, list) and rows:
            return rows
        return [{"peer": str(n.address), "interface": n.interface} for n in self.cfg.neighbors]

    def _neighbor(self, args: dict[str, Any]) -> Any:
        """``glbctl neighbor PEER [received [--pre-policy] | advertised]``; the detail view
        also shows the neighbor's BFD sessions."""
        c = self._component("bgp")
        neighbor = getattr(c, "neighbor", None)
        if neighbor is None:
            return {"note": "bgp is not running in this role/config"}
        view = args.get("view") or "detail"
        result = neighbor(args["peer"], view, bool(args.get("pre_policy")))
        if view == "detail" and isinstance(result, dict) and "peer" in result:
            sessions = self._section("sessions", "bfd")({})
            rows = sessions if isinstance(sessions, list) else []  # else: bfd is not running
            result["bfd"] = [r for r in rows if r.get("peer") == result["peer"]]
        return result

    def _log_level(self, args: dict[str, Any]) -> dict[str, Any]:
        """``glbctl log-level LEVEL``: the level until the next reload that changes
        ``[logging] level``, or a restart (the file is not touched)."""
        before = logmod.current_level()
        logmod.set_level(args["level"])
        log.warning("glbctl_log_level", level=logmod.current_level(), previous=before)
        return {
            "level": logmod.current_level(),
            "previous": before,
            "config": self.cfg.logging.level,
            "note": "until a reload that changes [logging] level, or a restart",
        }

    def _filtered(self, handler: Callable[[dict[str, Any]], Any], key: str) -> Any:
        """``handler`` whose rows are cut to those ``key`` (``glbctl neighbors PEER``) selects."""

        def filtered(args: dict[str, Any]) -> Any:
            rows = handler(args)
            return views.select_neighbors(rows, args.get(key)) if isinstance(rows, list) else rows

        return filtered

    def _routes(self, args: dict[str, Any]) -> Any:
        c = self._component("bgp")
        routes = getattr(c, "routes", None)
        if routes is None:
            return {"routes": [], "note": "bgp is not running in this role/config"}
        return routes(args.get("prefix"))

    def _profiles(self, args: dict[str, Any]) -> Any:
        snap = self._whole("fib")(args)
        if args.get("changed") and isinstance(snap.get("profiles"), list):
            snap["profiles"] = [p for p in snap["profiles"] if views.profile_changed(p)]
        return snap

    def _neighbor_admin(self, peer: str, action: str, soft: bool = False) -> Any:
        """One neighbor's shutdown, enable, reset or drain (the bgp part resolves its name)."""
        admin = getattr(self._component("bgp"), "neighbor_admin", None)
        if admin is None:
            return {"note": "bgp is not running in this role/config"}
        return admin(peer, action, soft)

    def _drain(self, drain: bool, peer: str | None = None) -> Any:
        """``glbctl drain`` / ``undrain``: the router's drain state after the command; with a
        peer, that neighbor's alone."""
        if peer:
            return self._neighbor_admin(peer, "drain" if drain else "undrain")
        set_drain = getattr(self._component("bgp"), "set_drain", None)
        note = ""
        if set_drain is None:
            note = "bgp is not running in this role/config: nothing to drain"
        else:
            set_drain(drain)
        if not drain and self.cfg.bgp.drain:
            note = "drained by the config: set [bgp] drain = false and reload to undrain"
        log.warning("glbctl_drain" if drain else "glbctl_undrain", drained=self._drained())
        return {"drained": self._drained(), "by_config": self.cfg.bgp.drain, "note": note}

    def _graceful_restart(self, arm: bool) -> Any:
        """``glbctl graceful-restart`` (``--cancel``): arm the next stop as a graceful restart
        for :data:`glbd.bgp.gracestop.ARM_WINDOW_S`, or disarm it."""
        part = getattr(self._component("bgp"), "graceful_restart", None)
        if part is None:
            return {
                **self._graceful_status(),
                "keep": [],
                "withdraw": {},
                "note": "bgp is not running in this role/config: a stop has nothing to keep",
            }
        return part(arm)

    def _graceful_status(self) -> dict[str, Any]:
        part = getattr(self._component("bgp"), "graceful_restart_status", None)
        if part is not None:
            try:
                return dict(part())
            except Exception as e:  # status answers whatever state a part is in
                log.warning("graceful_restart_status_failed", error=repr(e))
        return GracefulRestartArm().snapshot(0.0, False, {})

    def _drained(self) -> bool:
        return bool(getattr(self._component("bgp"), "drained", False))

    async def _reload_handler(self, args: dict[str, Any]) -> Any:
        return (await self.reload()).to_dict()

    def status(self) -> dict[str, Any]:
        return {
            "version": __version__,
            "state": self.state,
            "pid": os.getpid(),
            "router_id": str(self.cfg.router_id),
            "local_as": self.cfg.local_as,
            "role": self.cfg.role,
            "config": self.config_path,
            "uptime_s": round(time.time() - self.started_at, 1),
            "loop_lag": self.lag.to_dict(),
            "gc": self.gc_pauses.to_dict(),
            "scheduling": self.loop_priority.to_dict(),
            "last_reload": self.last_reload.to_dict() if self.last_reload else None,
            "components": [c.name for c in self.components],
            "drained": self._drained(),
            "graceful_restart": self._graceful_status(),
            "bfd_engine": self._engine_summary(),
            "foreign_load": self._foreign_summary(),
        }

    def _foreign_summary(self) -> dict[str, Any] | None:
        """Where the foreign load is counted and whether it is (None: not at ingress)."""
        c = self._component("quality")
        snap = None if c is None else _section_of(c, "foreign")
        if not isinstance(snap, dict):
            return None
        keep = ("source", "counting", "error", "attached", "missing")
        return {k: snap[k] for k in keep if k in snap}

    def _engine_summary(self) -> dict[str, Any] | None:
        """The BFD engine's pid and scheduling lag (how late its timers fire)."""
        c = self._component("bfd")
        if c is None:
            return None
        try:
            eng = c.snapshot().get("engine")
        except Exception as e:  # a stuck engine must not break status
            return {"error": str(e)}
        return dict(eng) if isinstance(eng, dict) else None

    def counters(self) -> dict[str, Any]:
        out: dict[str, Any] = {"control": dict(self.control.counters)}
        if self.metrics is not None:
            out["metrics"] = dict(self.metrics.counters)
        for c in self.components:
            counters = _section_of(c, "counters")
            if counters is not None:
                out[c.name] = counters
        return out

    def samples(self) -> list[Row]:
        ok = self.last_reload.ok if self.last_reload else True
        out: list[Row] = list(
            metrics_daemon.daemon_samples(
                __version__,
                ok,
                self.config_loaded_at,
                self.lag.to_dict(),
                self.control.counters,
                self.gc_pauses.to_dict(),
                self.loop_priority.to_dict(),
                None if self.metrics is None else self.metrics.counters,
            )
        )
        for c in self.components:
            out.extend(c.samples())
        return out


def _section_of(c: Component, key: str) -> Any:
    """A component's ``section(key)`` if it has one (built alone, cheap), else that key of
    its snapshot."""
    section = getattr(c, "section", None)
    if section is not None:
        return section(key)
    return c.snapshot().get(key)


def _no_components(d: Daemon) -> list[Component]:
    return []


#: ``sys.setswitchinterval`` for the daemon (see ``main``)
GIL_SWITCH_INTERVAL_S = 0.0005


def main(
    config_path: str,
    log_level: str | None = None,
    log_format: str | None = None,
    components: ComponentFactory | None = None,
    heap_report: str | None = None,
) -> int:
    """Run the daemon with the parts ``components`` builds (the CLI passes the node's; none
    runs the bare daemon: control socket, reload and lifecycle only)."""
    try:
        cfg = cfgmod.load(config_path)
    except cfgmod.ConfigError as e:
        print(e.format(), file=sys.stderr)
        print(f"{config_path}: config rejected; glbd not started", file=sys.stderr)
        return 1
    fmt: Any = log_format or cfg.logging.format
    logmod.setup(log_level or cfg.logging.level, fmt)
    problem = capability_problem(cfg)
    if problem:
        print(problem, file=sys.stderr)
        return 3
    # the BFD engine's events arrive on a reader thread; while the loop runs Python code that
    # thread waits for the GIL up to the switch interval (default 5 ms) before it can hand an
    # event over, which is the whole failover budget (detection + 5 ms)
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    raise_nofile()

    try:
        return asyncio.run(Daemon(config_path, cfg, components, heap_report).run())
    except KeyboardInterrupt:
        return 130
    except OSError as e:
        print(f"glbd: {e}", file=sys.stderr)
        return 1


def raise_nofile() -> None:
    """Lift the soft fd limit to the hard one, as the BFD engine does: the soft one is 1024 by
    default, and a socket that fails to open for want of a descriptor is a link without
    heartbeats until its retry."""
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = hard if hard != resource.RLIM_INFINITY else 1 << 20
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def _write_heap_report(path: str) -> None:
    """``glbd run --heap-report FILE ...`` then ``kill -USR2``: the 40 source lines holding
    the most memory, for memory work (bench/glb_memory.py)."""
    snap = tracemalloc.take_snapshot()
    stats = snap.statistics("lineno")
    total = sum(s.size for s in stats)
    with open(path, "w") as f:
        f.write(f"traced {total / 1e6:.1f} MB in {sum(s.count for s in stats)} blocks\n")
        for st in stats[:40]:
            f.write(f"{st.size / 1e6:8.2f} MB {st.count:9d} {st.traceback}\n")
