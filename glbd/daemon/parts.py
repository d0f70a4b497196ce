"""The node's four parts as the daemon sees them (:class:`glbd.daemon.component.Component`), in
start order: fib, quality, bfd, bgp. Each starts, stops and reloads its part of the
:class:`~glbd.daemon.node.Node` and shows its snapshot and Prometheus samples."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

import structlog

from glbd.config import config as cfgmod
from glbd.config import params
from glbd.control import metrics_parts, views
from glbd.control.metrics import Row
from glbd.control.protocol import ArgsError
from glbd.daemon import privileges
from glbd.daemon.component import Component, Host
from glbd.daemon.node import Node
from glbd.daemon.recheck import Recheck
from glbd.flowlet.loader import FlowletAttachment, FlowletError
from glbd.flowlet.movegate import MoveChance, MoveGate
from glbd.flowlet.placement import LayoutTracker, listed
from glbd.flowlet.skew import SkewEstimator
from glbd.quality.pathchanges import Changes
from glbd.unnumbered.part import UnnumberedPart

log = structlog.get_logger(__name__)


class _Part:
    name = ""

    def __init__(self, node: Node) -> None:
        self.node = node

    def snapshot(self) -> dict[str, Any]:
        raise NotImplementedError

    def section(self, key: str) -> Any:
        """One key of the snapshot (parts override it where building everything is costly)."""
        return self.snapshot().get(key)

    def _samples(self, snap: dict[str, Any]) -> Iterable[Row]:
        raise NotImplementedError

    def sample_view(self) -> dict[str, Any]:
        """What the samples are derived from: the snapshot glbctl shows, or the part of it
        they need where the whole is costly."""
        return self.snapshot()

    def samples(self) -> Iterable[Row]:
        """Prometheus samples, derived from the same snapshot glbctl shows."""
        try:
            return list(self._samples(self.sample_view()))
        except Exception as e:  # a scrape must never break on one part's odd state
            log.warning("metrics_samples_failed", component=self.name, error=repr(e))
            return []


class FibPart(_Part):
    name = "fib"

    async def start(self) -> None:
        await self.node.fib_service.start()

    async def stop(self) -> None:
        await self.node.fib_service.stop()

    async def reconfigure(self, new: cfgmod.Config, changes: dict[str, Any]) -> None:
        await self.node.reconfigure_fib(new, changes)

    def snapshot(self) -> dict[str, Any]:
        return self.node.fib_service.snapshot()

    def section(self, key: str) -> Any:
        if key == "counters":
            fib = self.node.fib
            return fib.snapshot(routes=False).get("counters", {}) if fib else {}
        return super().section(key)

    def _samples(self, snap: dict[str, Any]) -> Iterable[Row]:
        yield from metrics_parts.fib_samples(cast(metrics_parts.FibView, snap))
        yield from self.node.latency.families()


class QualityPart(_Part):
    name = "quality"

    async def start(self) -> None:
        await self.node.start_quality()

    async def stop(self) -> None:
        await self.node.stop_quality()

    async def reconfigure(self, new: cfgmod.Config, changes: dict[str, Any]) -> None:
        await self.node.reconfigure_quality(new, changes)

    def snapshot(self) -> dict[str, Any]:
        return self.node.quality_snapshot()

    def section(self, key: str) -> Any:
        if key == "counters":
            ep = self.node.endpoint
            return views.quality_counters(self.node.counters, ep.to_dict() if ep else None)
        if key == "foreign":
            return self.node.foreign.snapshot()
        return super().section(key)

    def _samples(self, snap: dict[str, Any]) -> Iterable[Row]:
        return metrics_parts.quality_samples(cast(metrics_parts.QualityView, snap))


class BfdPart(_Part):
    name = "bfd"

    async def start(self) -> None:
        await self.node.start_bfd()

    async def stop(self) -> None:
        await self.node.stop_bfd()

    async def reconfigure(self, new: cfgmod.Config, changes: dict[str, Any]) -> None:
        await self.node.reconfigure_bfd(new, changes)

    def snapshot(self) -> dict[str, Any]:
        bfd, since = self.node.bfd, self.node.bfd_down_since
        if since is not None:
            return {
                "sessions": [],
                "engine": {
                    "error": "the BFD engine died and is being restarted: fast failover is off",
                    "down_for_s": round(time.monotonic() - since, 3),
                },
            }
        return bfd.snapshot() if bfd else {"sessions": []}

    def dead_for(self) -> float:
        """How long the BFD engine has been dead (0 while it runs)."""
        since = self.node.bfd_down_since
        return 0.0 if since is None else time.monotonic() - since

    def section(self, key: str) -> Any:
        """``sessions`` also lists the neighbors waiting for their port (not in the samples)."""
        rows = super().section(key)
        if key == "sessions":
            rows = list(rows or [])
            have = {(r["interface"], r["peer"]) for r in rows}
            waiting = self.node.addrs.bfd_rows(self.node.cfg)
            rows += [w for w in waiting if (w["interface"], w["peer"]) not in have]
        return rows

    def _samples(self, snap: dict[str, Any]) -> Iterable[Row]:
        return metrics_parts.bfd_samples(cast(metrics_parts.BfdView, snap))


class BgpPart(_Part):
    name = "bgp"

    async def start(self) -> None:
        await self.node.start_bgp()

    async def stop(self) -> None:
        await self.node.stop_bgp()

    async def prepare_stop(self) -> str:
        """Before any part stops: the kind of stop (a graceful restart sends BFD AdminDown
        now)."""
        return str((await self.node.prepare_stop()).kind)

    def graceful_restart(self, arm: bool) -> dict[str, Any]:
        return self.node.graceful_restart(arm)

    def graceful_restart_status(self) -> dict[str, Any]:
        return self.node.graceful_restart_status()

    async def reconfigure(self, new: cfgmod.Config, changes: dict[str, Any]) -> None:
        await self.node.reconfigure_bgp(new, changes)

    def snapshot(self) -> dict[str, Any]:
        n = self.node
        return {**n.bgp.snapshot(), "routes": list(self.routes())} if n.bgp else {}

    def section(self, key: str) -> Any:
        """``neighbors``, ``routes`` and ``counters`` are built alone (the routes of a big
        RIB are costly)."""
        bgp = self.node.bgp
        if key == "colours":
            hidden = bgp.rib.counters.get("hidden_colour_mismatch", 0) if bgp else 0
            return {**self.node.colours.snapshot(), "hidden_routes": hidden}
        if bgp is not None:
            if key == "neighbors":  # and those waiting for their port (not in the samples)
                return bgp.neighbors_snapshot() + self.node.addrs.bgp_rows()
            if key == "routes":
                return self.routes()
            if key == "counters":
                return {
                    **dict(bgp.rib.counters),
                    "rib_pending": bgp.rib.pending,
                    "api_lines": bgp.parser.decoded,
                    "api_dropped": dict(bgp.parser.dropped),
                }
        return super().section(key)

    def routes(self, prefix: str | None = None) -> Iterator[dict[str, Any]]:
        """``glbctl routes [PREFIX]``: the selected RIB rows joined with the FIB, built one
        by one as the answer streams (the control server yields to the loop between parts),
        so a 64 x 10k RIB neither blocks the daemon nor sits whole in its memory."""
        n = self.node
        if n.bgp is None:
            return iter(())
        want = views.route_filter(prefix)
        rows = n.bgp.rib.iter_routes(want)
        if n.origin is not None:  # what is originated and why, and the candidates withdrawn
            rows = n.origin.join(rows, want)
        look = n.fib.route_lookup().get if n.fib else _no_route
        return views.iter_routes(rows, look, n.table)

    def neighbor(self, name: str, view: str = "detail", pre_policy: bool = False) -> Any:
        """``glbctl neighbor PEER [received|advertised]``: one neighbor (by address, BGP id or
        interface) in detail, or its Adj-RIB-In / Adj-RIB-Out."""
        bgp = self.node.bgp
        if bgp is None:
            return {"note": "bgp is not running in this role/config"}
        row = self._one_neighbor(name)
        peer = row["peer"]
        addr = _address(peer)
        st = bgp.rib.peers.get(addr) if addr is not None else None
        if view == "detail":
            if st is not None:
                n = st.params
                row["config"] = {
                    "hold_time": n.hold_time,
                    "passive": n.is_passive,
                    "families": [f"ipv{v}" for v in n.families],
                    "import": None if n.import_filter is None else str(n.import_filter),
                    "export": None if n.export_filter is None else str(n.export_filter),
                    "max_prefixes": n.max_prefixes,
                    "max_prefixes_action": n.max_prefixes_action,
                    "unnumbered": n.unnumbered,
                    "description": n.description,
                }
                row["drained"] = st.drained or bgp.drained  # alone, or with the router
            return row
        if view == "advertised":
            rows = bgp.rib.advertised(addr) if addr is not None else []
            return {"peer": peer, "view": "advertised", "routes": rows}
        rejected = {
            k.removeprefix("rejected_"): v
            for k, v in (row.get("counters") or {}).items()
            if k.startswith("rejected_")
        }
        if pre_policy:  # the routes taken and those refused (each with why), this session
            rows = bgp.rib.received_pre_policy(addr) if addr is not None else []
            return {
                "peer": peer,
                "view": "received (pre-policy)",
                "rejected": rejected,
                "routes": rows,
            }
        rows = bgp.rib.received(addr) if addr is not None else []
        return {"peer": peer, "view": "received", "rejected": rejected, "routes": rows}

    def neighbor_admin(self, name: str, action: str, soft: bool = False) -> dict[str, Any]:
        """``glbctl neighbor-shutdown|neighbor-enable|neighbor-reset PEER``, ``glbctl
        drain|undrain PEER``: one neighbor only; until undone or a restart."""
        bgp = self.node.bgp
        if bgp is None:
            return {"note": "bgp is not running in this role/config"}
        peer = str(self._one_neighbor(name)["peer"])
        addr = _address(peer)
        if addr is None or addr not in bgp.rib.peers:
            raise ArgsError(f"{name!r} has no BGP session yet (waiting for its port)")
        if action == "reset" and bgp.is_shut(addr):
            raise ArgsError(f"{peer} is shut down: glbctl neighbor-enable {peer} first")
        if action == "shutdown":
            bgp.shutdown_peer(addr)
        elif action == "enable":
            bgp.enable_peer(addr)
        elif action == "reset":
            bgp.reset_peer(addr, soft)
        else:
            bgp.set_peer_drain(addr, action == "drain")
        log.warning("glbctl_neighbor", peer=peer, action=action, soft=soft)
        st = bgp.rib.peers[addr]
        return {
            "peer": peer,
            "action": f"soft {action}" if soft else action,
            "shutdown": bgp.is_shut(addr),
            "drained": st.drained or bgp.drained,
            "state": "shutdown" if bgp.is_shut(addr) else st.state,
        }

    def _one_neighbor(self, name: str) -> dict[str, Any]:
        """The neighbor row ``name`` selects (an unknown or ambiguous name is a bad argument)."""
        bgp = self.node.bgp
        assert bgp is not None
        rows = views.select_neighbors(bgp.neighbors_snapshot() + self.node.addrs.bgp_rows(), name)
        if not rows:
            raise ArgsError(f"no neighbor {name!r} (see glbctl neighbors)")
        if len(rows) > 1:
            peers = ", ".join(str(r["peer"]) for r in rows)
            raise ArgsError(f"{name!r} names {len(rows)} neighbors ({peers}): give the address")
        return rows[0]

    def sample_view(self) -> dict[str, Any]:
        """Established or configured sessions and counters only: no per-route rows on a
        scrape."""
        bgp = self.node.bgp
        if bgp is None:
            return {}
        return {
            "neighbors": bgp.neighbors_snapshot(),
            "counters": self.section("counters"),
            "exabgp": bgp.supervisor.snapshot(),
            "drained": self.node.drained,
            "colours": self.node.colours.snapshot() if self.node.colours.paths else None,
        }

    @property
    def drained(self) -> bool:
        return self.node.drained

    def set_drain(self, drain: bool) -> None:
        self.node.set_drain(drain)

    def _samples(self, snap: dict[str, Any]) -> Iterable[Row]:
        return metrics_parts.bgp_samples(cast(metrics_parts.BgpView, snap))


def _no_route(_prefix: str) -> None:
    return None


def _address(text: Any) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """A neighbor row's peer as the RIB keys it (None: a waiting unnumbered port)."""
    try:
        return ipaddress.ip_address(str(text))
    except ValueError:
        return None


class FlowletPart(_Part):
    """glbd's flowlet program (:mod:`glbd.flowlet.loader`): attached on start when
    ``[flowlet] enabled``, checked every ``fib.reconcile_interval_s`` (new interfaces, a filter
    someone removed), counters read every second, removed on stop unless ``on_stop = "keep"``.
    A failure is logged and counted, never fatal: routing runs on without flowlets."""

    name = "flowlet"
    POLL_S = 1.0
    #: how often ``timeout_us = "auto"`` reads the queues: the link monitor keeps the peak of
    #: its samples in between (every 10 ms), so a slower read loses no local queue; read
    #: every 50 ms, this loop alone cost a leaf ~0.3 % of a core at idle
    SKEW_POLL_S = 0.2

    def __init__(self, node: Node) -> None:
        super().__init__(node)
        self.att: FlowletAttachment | None = None
        self.error: str | None = None
        self.skew: SkewEstimator | None = None
        self.gate: MoveGate | None = None
        self._started = False
        self._task: asyncio.Task[None] | None = None
        self._skew_task: asyncio.Task[None] | None = None
        self._move_task: asyncio.Task[None] | None = None
        self._move_pending: MoveChance | None = None
        #: spread placement on resilient groups: which bucket tables to read, their orders
        self.layouts = LayoutTracker()
        self._routes_due = 0.0  # when the prefixes' groups are next read
        self._routes: dict[Any, int] = {}  # prefix -> resilient group, as last read

    async def start(self) -> None:
        cfg = self.node.cfg
        f = cfg.flowlet
        if not cfg.flowlet_active:
            await self._remove_leftovers()
            return
        problem = privileges.flowlet_problem(cfg)
        if problem is not None:  # bpf() would fail: route without it, say so once
            if self.error != problem:
                log.warning("flowlet_unavailable", error=problem)
            self.error = problem
            return
        self.att = FlowletAttachment(netns=self.node.netns)
        loop = asyncio.get_running_loop()
        if f.timeout_us == "auto":
            self.skew = SkewEstimator(params.skew_params(self.node.cfg))
            self._skew_task = loop.create_task(self._follow_skew())
        self._set_gate(self.node.cfg)
        await self._apply(first=True)
        self._task = loop.create_task(self._run())

    def _set_gate(self, cfg: cfgmod.Config) -> None:
        """``move = "on-change"``: a gate fed every weight change decides when gaps move flows
        (glbd/flowlet/movegate.py); "always": none, every gap moves; "never": none, the
        chance stays 0."""
        if cfg.flowlet.move != "on-change":
            self.gate, self.node.on_weights = None, None
            return
        gp = params.move_gate_params(cfg)
        if self.gate is None or self.gate.params != gp:
            self.gate = MoveGate(gp)
        self.node.on_weights = self._weights_changed

    def _weights_changed(self, changes: Changes) -> None:
        table, gate = self.node.table, self.gate
        if table is None or gate is None:
            return
        changed = {}
        for key in changes.updated:
            wv = table.weight_values(key)
            if wv is not None:
                changed[key] = {nh: w for (nh, _nnh), w in zip(wv[0], wv[1], strict=True)}
        chance = gate.observe(changed, changes.removed, time.monotonic_ns())
        if chance is None or self.att is None or not self._started:
            return
        self._move_pending = chance
        if self._move_task is None or self._move_task.done():
            self._move_task = asyncio.get_running_loop().create_task(self._write_moves())

    async def _write_moves(self) -> None:
        """Write the newest move chance (one map write; later ones coalesce meanwhile)."""
        while self._move_pending is not None and self.att is not None:
            chance, self._move_pending = self._move_pending, None
            try:
                await self.att.set_move(chance)
            except (OSError, FlowletError) as e:
                self.att.state.events["errors"] += 1
                self.error = str(e)

    def _timeout_ns(self) -> int | None:
        return None if self.skew is None else self.skew.timeout_ns

    async def _follow_skew(self) -> None:
        """``timeout_us = "auto"``: the timeout follows the measured skew (docs/flowlet.md)."""
        assert self.skew is not None
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.SKEW_POLL_S)  # the sampling period
            local, remote = self.node.queue_delays_us()
            new = self.skew.observe(local, remote, loop.time())
            if new is None or self.att is None or not self._started:
                continue
            log.info(
                "flowlet_timeout",
                timeout_us=new / 1e3,
                peak_local_us=round(local, 1),
                peak_remote_us=round(remote, 1),
            )
            try:
                await self.att.set_timeout(new)
                self.node.set_flowlet_timeout(new / 1e9)
            except (OSError, FlowletError) as e:
                self.att.state.events["errors"] += 1
                self.error = str(e)

    async def _remove_leftovers(self) -> None:
        """A glbd that kept its program (``on_stop = "keep"``) or died left its pins: with
        flowlets off, its filters and pins go."""
        try:
            att = FlowletAttachment(netns=self.node.netns)
            if os.path.isdir(att.dir):  # False also where bpffs is not ours to read
                await att.stop()
                log.info("flowlet_leftovers_removed", dir=str(att.dir))
        except (OSError, FlowletError) as e:
            log.warning("flowlet_leftovers", error=str(e))

    async def _apply(self, first: bool = False) -> None:
        assert self.att is not None
        p = params.flowlet_params(self.node.cfg, self._timeout_ns())
        try:
            if first or not self._started:  # adopt first, also when the first try failed
                await self.att.start(p)
                self._started = True
                await self._resume_timeout()
            else:
                await self.att.apply(p)
            self.node.set_flowlet_timeout((self.att.params or p).timeout_ns / 1e9)
            self.error = None
        except (OSError, FlowletError) as e:
            self.att.state.events["errors"] += 1
            if self.error != str(e):
                log.error("flowlet_failed", error=str(e))
            self.error = str(e)

    async def _resume_timeout(self) -> None:
        """A restart that adopted the program keeps the timeout its predecessor measured for
        the first window (:meth:`SkewEstimator.resume`) rather than the start value."""
        assert self.att is not None and self.att.params is not None
        left = self.att.left_timeout_ns
        if self.skew is None or not left:
            return
        if self.skew.resume(left):
            log.info("flowlet_timeout_resumed", timeout_us=self.skew.timeout_ns / 1e3)
        if self.skew.timeout_ns != self.att.params.timeout_ns:  # capped, or measured since
            await self.att.set_timeout(self.skew.timeout_ns)

    async def _run(self) -> None:
        """Counters every second; at each reconcile tick, the full check (processes: ``ip``,
        ``tc`` per interface) as :class:`Recheck` schedules it: when an interface moved or
        an error was seen, every 12th tick (a filter someone removed), and while applying
        fails, at ever longer intervals (up to 64 ticks)."""
        att = self.att
        assert att is not None
        rc = Recheck()
        rc.done(self.error is None)
        n, due = 0, self._every()
        while True:
            await asyncio.sleep(self.POLL_S)  # the poll period
            n += 1
            if self.error is not None and not rc.failing:
                due = n  # an error a poll or a write saw: repaired now
            if n >= due:
                due = n + self._every()
                if rc.tick(lambda: self.error is not None or att.interfaces_moved()):
                    await self._apply()
                    rc.done(self.error is None)
                continue
            if rc.failing:
                continue
            try:
                await att.poll(full=False)
                await self._follow_layouts()
            except (OSError, FlowletError) as e:
                att.state.events["errors"] += 1
                self.error = str(e)

    async def _follow_layouts(self) -> None:
        """Spread placement on resilient groups: each group's bucket order, from the bucket
        tables the tracker says to read (glbd/flowlet/placement.py), and the group of each
        destination prefix (a walk over the routes: when an order changed, else once per
        reconcile tick); the program's maps are written where something changed."""
        fib, att = self.node.fib_service.fib, self.att
        p = None if att is None else att.params
        if fib is None or att is None or p is None or not (p.spread and p.buckets):
            return
        groups = fib.resilient_groups()
        now = time.monotonic()
        changed = False
        # only the groups the program can hold a list for are read (placement.listed)
        sizes = {g: k.resilient.buckets for g, k in groups.items() if k.resilient}
        chosen = listed(sizes, self._routes)
        entries = {g: groups[g].entries for g in chosen}
        for gid in self.layouts.due(entries, now, sizes):
            changed |= self.layouts.observed(gid, await fib.read_buckets(gid), now)
        if changed or now >= self._routes_due:
            self._routes_due = now + self.node.cfg.fib.reconcile_interval_s
            self._routes = fib.resilient_routes()
            att.set_layouts(self._routes, self.layouts.orders)

    def _every(self) -> int:
        """Poll periods per reconcile tick (``fib.reconcile_interval_s``, read each time: a
        reload may change it)."""
        return max(1, round(self.node.cfg.fib.reconcile_interval_s / self.POLL_S))

    async def stop(self) -> None:
        self.node.on_weights = None
        for task in (self._task, self._skew_task, self._move_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._task = self._skew_task = self._move_task = None
        self.skew = self.gate = None
        self._move_pending = None
        if self.att is not None:
            try:
                await self.att.stop(keep=self.node.cfg.flowlet.on_stop == "keep")
            except (OSError, FlowletError) as e:
                log.error("flowlet_stop_failed", error=str(e))
            self.att = None
            self._started = False
            self.node.set_flowlet_timeout(None)

    async def reconfigure(self, new: cfgmod.Config, changes: dict[str, Any]) -> None:
        neighbors = changes["neighbors_added"] or changes["neighbors_removed"]
        if "flowlet" not in changes["sections"] and not neighbors and self.att is None:
            return
        if not new.flowlet_active:
            await self.stop()
            self.error = None
        elif self.att is None:
            await self.start()
        elif (new.flowlet.timeout_us == "auto") != (self.skew is not None) or (
            self.skew is not None and self.skew.params != params.skew_params(new)
        ):
            await self._restart_skew(new)  # the program and its flows stay
            self._set_gate(new)
            await self._apply()
        else:
            self._set_gate(new)
            await self._apply()

    async def _restart_skew(self, cfg: cfgmod.Config) -> None:
        if self._skew_task is not None:
            self._skew_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._skew_task
        self._skew_task, self.skew = None, None
        if cfg.flowlet.timeout_us == "auto":
            self.skew = SkewEstimator(params.skew_params(cfg))
            self._skew_task = asyncio.get_running_loop().create_task(self._follow_skew())

    def snapshot(self) -> dict[str, Any]:
        f = self.node.cfg.flowlet
        if self.att is None:
            return {"enabled": self.node.cfg.flowlet_active, "error": self.error}
        return {
            "enabled": True,
            "error": self.error,
            **self.att.snapshot(),
            "timeout_source": "config" if self.skew is None else "auto",
            "skew": None if self.skew is None else self.skew.to_dict(),
            "move": f.move,
            "move_gate": None if self.gate is None else self.gate.to_dict(time.monotonic_ns()),
        }

    def section(self, key: str) -> Any:
        if key == "counters":
            snap = self.snapshot()
            return {**snap.get("counters", {}), **snap.get("events", {})} or None
        return super().section(key)

    def _samples(self, snap: dict[str, Any]) -> Iterable[Row]:
        return metrics_parts.flowlet_samples(cast(metrics_parts.FlowletView, snap))


PARTS: tuple[Callable[[Node], Component], ...] = (
    FibPart,
    QualityPart,
    BfdPart,
    BgpPart,
    FlowletPart,
)


def build_components(d: Host) -> list[Component]:
    """The parts of one node, in start order (stop runs in reverse)."""
    node = Node(d)
    # last: the neighbors it learns are set up by the parts before it
    return [*(part(node) for part in PARTS), UnnumberedPart(d, netns=node.netns)]  # type: ignore[arg-type]
