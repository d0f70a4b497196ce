"""One glbd's parts, started, stopped and reloaded, and the events routed between them.

Parts (start order; stop runs in reverse; :mod:`glbd.daemon.parts` shows them to the daemon)::

    fib      FibService (glbd.fib.fibservice): FibProgrammer, FIB sync, fast lane, failover
    quality  LinkMonitor + HeartbeatEndpoint (sender: helper, receiver: load balancer) + PathTable
    bfd      BfdEngine in its own process; state changes hop onto the loop
    bgp      BgpSpeaker: ExaBGP child + Clos RIB (NNHN origination/validation)

The node holds no part's logic; it routes each event once, downward, on the event loop:

* RIB ``NextHopsChanged`` -> path table -> its ``Changes`` -> the flowlet move gate, then
  ``FibService.table_changed`` (fast lane, or :class:`glbd.fib.fibsync.FibSync`'s next step);
* RIB ``PeerUp``/``PeerDown`` -> heartbeat neighbors (a heartbeat is accepted only from the BGP
  neighbor on that interface, by its BGP id) and the far-end ids in our own heartbeat entries;
  ``PeerUp`` -> ``FibService.bgp_up`` (the first one starts the FIB hold-down);
* link monitor -> path table (local quality) and heartbeat sender (our links' entries);
* heartbeat receiver -> path table (remote quality; expiry = unknown -> DLB fallback);
* BFD Down (a failure) -> ``FibService.bfd_state`` (fast failover: the next hop leaves every
  group at once, before any recomputation), then from the ready queue the log record and the
  RIB (strict mode, session teardown); BFD Up -> back in; a peer's AdminDown is not a failure;
* FIB failover map -> the BFD engine's armed kernel failover, per session (the FIB service's);
* flowlet timeout, ``[fib]`` reload -> the FIB service (the next sync rewrites the groups);
* interface and address notifications -> origination (:mod:`glbd.bgp.origination`) -> the
  RIB's originated set (a host port down withdraws its prefixes at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import structlog

from bfd.engine import BfdEngine, BfdEvent, SessionConfig
from bfd.packet import Diag, State
from bfd.reasons import StateChangeReason
from glbd.base.reasons import GracefulStopFallback, StopKind
from glbd.bgp.gracestop import GracefulRestartArm, StopPlan
from glbd.bgp.neighbors import LocalAddresses
from glbd.bgp.origination import Origination
from glbd.bgp.ribtypes import NextHopsChanged, PeerDown, PeerUp, Prefix, RibParams
from glbd.bgp.speaker import BgpEvent, BgpSpeaker, ProcessOptions, SpeakerLost, SpeakerReady
from glbd.colours.service import ColourService
from glbd.config import config as cfgmod
from glbd.config import params
from glbd.config.config_peers import NeighborSection
from glbd.control import metrics_daemon, views
from glbd.daemon import caps
from glbd.daemon import log as logmod
from glbd.daemon.component import Host
from glbd.fib.fibservice import FibService
from glbd.fib.programmer import FibProgrammer
from glbd.quality.foreignservice import ForeignService
from glbd.quality.linkq import LinkMonitor, QualityChanged
from glbd.quality.linkrunner import MonitorRunner, log_link_change
from glbd.quality.linkstats import StatsReader
from glbd.quality.pathchanges import Changes
from glbd.quality.pathtable import PathTable
from glbd.unnumbered.ndpsock import NdpSpeaker
from heartbeat.receiver import Neighbor, Receiver, RemoteUpdate
from heartbeat.sender import Sender, initial_sequence
from heartbeat.transport import HeartbeatEndpoint

log = structlog.get_logger(__name__)

#: how long a session Up before the BFD engine died may take to come Up in the restarted one
#: before it counts as Down (a new session starts slow: one packet a second until Up)
BFD_CONFIRM_S = 3.0
#: restarts of an engine that keeps dying wait 0.5 s, then twice as long each time, up to
#: this; an engine that ran this long since its last exit restarts at once again
BFD_BACKOFF_MAX_S = 30.0
BFD_BACKOFF_RESET_S = 60.0
#: how long a fresh interpreter on a busy box may take to answer the BFD engine's first call
BFD_CALL_TIMEOUT_S = 20.0

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class Node:
    """Every part of one glbd, wired. Built from a validated config; no I/O until ``start``."""

    def __init__(self, host: Host, *, netns: str | None = None) -> None:
        self.host = host
        self.cfg = host.cfg
        self.netns = netns
        self.loop = asyncio.get_running_loop()
        self.started_at = time.monotonic()
        self.counters: dict[str, int] = {
            "fib_syncs": 0,
            "fib_sync_errors": 0,
            "fib_fast_weights": 0,
            "fib_fast_failovers": 0,
            "bfd_engine_failovers": 0,
            "bfd_engine_exits": 0,
            "bfd_engine_restarts": 0,
            "bfd_engine_unconfirmed": 0,
            "bfd_failover_arms": 0,
            "bfd_failover_arm_errors": 0,
            "bfd_events": 0,
            "bgp_events": 0,
            "remote_updates": 0,
            "local_changes": 0,
            "graceful_restart_arms": 0,
        }
        #: told every weight change of the path table (the flowlet part's move gate)
        self.on_weights: Callable[[Changes], None] | None = None
        self.latency = metrics_daemon.Latencies()
        self.peer_ids: dict[IPAddress, int] = {}  # BGP neighbor -> its BGP id (from OPEN)
        self.iface_of: dict[IPAddress, str] = {n.address: n.interface for n in self.cfg.neighbors}
        self.table: PathTable | None = None
        self.monitor: LinkMonitor | None = None
        self.runner: MonitorRunner | None = None
        #: the foreign load's ingress counter (``link_quality.foreign_from = "ingress"``)
        self.foreign = ForeignService(self.netns, self._foreign_state)
        self.endpoint: HeartbeatEndpoint | None = None
        self.bfd: BfdEngine | None = None
        #: sessions the engine last reported Up (checked again after it restarts)
        self._bfd_up: set[tuple[str, str]] = set()
        self._bfd_backoff = 0.0
        self._bfd_last_exit = float("-inf")
        #: since when (loop time) the engine is dead; None while it runs
        self.bfd_down_since: float | None = None
        self.bgp: BgpSpeaker | None = None
        #: what BGP originates: ``originate``, and the prefixes of up interfaces (bgp.network,
        #: bgp.redistribute_connected); set up with the bgp part
        self.origin: Origination | None = None
        #: ``glbctl drain`` since start (``[bgp] drain`` in the config drains too)
        self.drain_cmd = False
        #: ``glbctl graceful-restart``: the next stop keeps the routes at capable peers
        self.graceful = GracefulRestartArm()
        #: what the stop under way does (set by :meth:`prepare_stop`)
        self.stop_plan: StopPlan | None = None
        self._stats: StatsReader | None = None
        self._exabgp_dir: Path | None = None
        #: the FIB part: programmer, sync, fast lane, failover (it counts into ``counters``)
        self.fib_service = FibService(self)
        #: the leaf's colour paths (docs/colours.md): pinned groups and standby routes
        self.colours = ColourService(
            self.loop, self.cfg.colours.hold_down_s, lambda: self.table, self.fib_service
        )
        # neighbors whose port is down or missing wait here; the others start without them
        self.addrs = LocalAddresses(self.loop, self._neighbors_resolved, self._neighbors_lost)

    @property
    def fib(self) -> FibProgrammer | None:
        """The FIB service's programmer (None before the fib part starts)."""
        return self.fib_service.fib

    @fib.setter
    def fib(self, value: FibProgrammer | None) -> None:
        self.fib_service.fib = value

    # ---- construction -------------------------------------------------------------------

    def build_table(self) -> PathTable:
        return PathTable(params.table_params(self.cfg))

    def build_endpoint(self) -> HeartbeatEndpoint | None:
        hb = self.cfg.heartbeat
        if not hb.enabled:
            return None
        sender = receiver = None
        if self.cfg.is_helper:
            sender = Sender(params.sender_params(self.cfg), initial_sequence(time.time()))
        if self.cfg.is_load_balancer:
            receiver = Receiver(params.receiver_params(self.cfg))
        return HeartbeatEndpoint(
            self.loop,
            sender=sender,
            receiver=receiver,
            on_remote=self.on_remote,
            group=str(hb.group),
            group6=str(hb.group6),
            port=hb.port,
        )

    def bfd_sessions(self) -> list[SessionConfig]:
        """The sessions of the neighbors with a local address (before start: all, looked up)."""
        return params.bfd_sessions(self.cfg, self.addrs.local if self.addrs.ready else None)

    # ---- start / stop per part ------------------------------------------------------------

    async def start_quality(self) -> None:
        self.table = self.build_table()
        await self.foreign.start(*params.foreign_counter(self.cfg))
        self.monitor = LinkMonitor(self.foreign.effective(params.linkmon_params(self.cfg)))
        self.monitor.set_interfaces(params.interfaces(self.cfg))
        self._stats = await StatsReader.open(netns=self.netns)
        self.runner = MonitorRunner(self.monitor, self._stats, self.on_local)
        self.runner.foreign_source = self.foreign.read
        self.runner.start()
        self.endpoint = self.build_endpoint()
        if self.endpoint is not None and self.drained:
            self.endpoint.set_drain(True)

    async def stop_quality(self) -> None:
        if self.runner is not None:
            await self.runner.stop()
        await self.foreign.stop()
        if self.endpoint is not None:
            self.endpoint.close()
        if self._stats is not None:
            self._stats.close()

    async def start_bfd(self) -> None:
        self.addrs.ensure(self.cfg)
        sessions = self.bfd_sessions()
        if not params.bfd_session_keys(self.cfg):
            return

        def hop(ev: BfdEvent) -> None:  # engine thread -> event loop
            self.loop.call_soon_threadsafe(self.on_bfd, ev)

        def exited(rc: int | None) -> None:  # the engine's reader thread -> event loop
            self.loop.call_soon_threadsafe(self._bfd_exited, engine, rc)

        self.bfd = engine = BfdEngine(
            hop,
            mode=self.cfg.bfd.mode,
            rt_priority=(self.cfg.bfd.rt_priority or None) if caps.has("CAP_SYS_NICE") else None,
            on_exit=exited,
            call_timeout=BFD_CALL_TIMEOUT_S,
            log_priority=logmod.priority_prefixes(),  # its stderr is ours: same priorities
            kernel_rx=self.cfg.bfd.kernel_rx,
        )
        await asyncio.to_thread(self.bfd.start)
        for s in sessions:
            await asyncio.to_thread(self.bfd.add_session, s)
        self.fib_service.sessions_reset()

    def _bfd_exited(self, engine: BfdEngine, rc: int | None) -> None:
        """The engine died. Fast failover is off until it is back: restart it (at once, then
        with a growing delay while it keeps dying) with every session, and give each session
        that was Up BFD_CONFIRM_S to come Up again before it counts as Down (a link that
        died meanwhile must not wait for BGP's hold time)."""
        if engine is not self.bfd:
            return
        self.counters["bfd_engine_exits"] += 1
        now = self.loop.time()
        recent = now - self._bfd_last_exit < BFD_BACKOFF_RESET_S
        self._bfd_backoff = min(BFD_BACKOFF_MAX_S, self._bfd_backoff * 2 or 0.5) if recent else 0.0
        self._bfd_last_exit = now
        # time.monotonic, as the readers (status, watchdog) use: the loop's clock may differ
        self.bfd_down_since = time.monotonic()
        was_up = sorted(self._bfd_up)
        log.error(
            "bfd_engine_exited",
            rc=rc,
            restart_in_s=self._bfd_backoff,
            note="fast failover is off until the engine is back",
            sessions_up=len(was_up),
        )
        self.loop.call_later(
            self._bfd_backoff, lambda: self.loop.create_task(self._restart_bfd(engine, was_up))
        )

    async def _restart_bfd(self, dead: BfdEngine, was_up: list[tuple[str, str]]) -> None:
        if dead is not self.bfd:
            return  # stopped or reconfigured meanwhile
        with contextlib.suppress(Exception):
            await asyncio.to_thread(dead.stop)
        self._bfd_up.clear()
        try:
            await self.start_bfd()
        except Exception as e:  # counts as another exit: the next try comes later
            log.error("bfd_engine_restart_failed", error=repr(e))
            failed = self.bfd if self.bfd is not None else dead
            self.bfd = failed
            self._bfd_exited(failed, None)
            return
        self.counters["bfd_engine_restarts"] += 1
        self.bfd_down_since = None
        log.warning("bfd_engine_restarted", sessions=len(self.bfd_sessions()))
        if was_up:
            self.loop.call_later(BFD_CONFIRM_S, self._confirm_bfd, self.bfd, was_up)

    def _confirm_bfd(self, engine: BfdEngine | None, was_up: list[tuple[str, str]]) -> None:
        """Sessions Up before the engine died and not Up again in the new one: Down."""
        if engine is None or engine is not self.bfd:
            return
        for interface, peer in was_up:
            if (interface, peer) in self._bfd_up:
                continue
            self.counters["bfd_engine_unconfirmed"] += 1
            self.on_bfd(
                BfdEvent(
                    interface=interface,
                    peer=peer,
                    old=State.UP,
                    new=State.DOWN,
                    diag=Diag.CONTROL_DETECTION_TIME_EXPIRED,
                    reason=StateChangeReason.ENGINE_RESTART_UNCONFIRMED,
                    failure=True,
                    remote_cpi=False,
                    remote_diag=0,
                    local_discriminator=0,
                    at=time.monotonic(),
                )
            )

    async def stop_bfd(self) -> None:
        self.bfd_down_since = None  # BFD off is not a dead engine (status, watchdog)
        await self.addrs.close()
        await self.fib_service.stop_failover()
        if self.bfd is not None:
            engine, self.bfd = self.bfd, None
            await asyncio.to_thread(engine.stop)

    async def start_bgp(self) -> None:
        self.addrs.ensure(self.cfg)
        # the interfaces first: the speaker starts with the prefixes that are up
        self.origin = Origination(
            self.loop, params.origin_params(self.cfg), self._originated, netns=self.netns
        )
        await self.origin.start()
        runtime = self._exabgp_dir = Path(self.cfg.control.socket).parent / f"exabgp-{os.getpid()}"
        self.bgp = BgpSpeaker(
            self._rib_params(),
            netns=self.netns,
            on_event=self.on_bgp,
            process=ProcessOptions(
                runtime_dir=runtime,
                exabgp_log_level=self.cfg.bgp.exabgp_log_level,
                listen_link_local=bool(self.cfg.unnumbered),  # their peers may connect to us
            ),
        )
        await self.bgp.start()

    async def stop_bgp(self) -> None:
        self.colours.close()
        if self.origin is not None:
            self.origin.close()  # the stop withdraws everything: no change may race it
        await self.addrs.close()
        if self.bgp is not None:
            plan = self.stop_plan
            await self.bgp.stop(keep=plan.keep if plan is not None else ())
        if self._exabgp_dir is not None:
            shutil.rmtree(self._exabgp_dir, ignore_errors=True)

    # ---- graceful restart of glbd itself ----------------------------------------------------

    def _stop_plan(self) -> StopPlan:
        sessions = self.bgp.gr_sessions() if self.bgp is not None else {}
        full = self.cfg.bgp.graceful_restart == "full"
        return self.graceful.plan(self.loop.time(), full, sessions)

    def graceful_restart(self, arm: bool) -> dict[str, Any]:
        """``glbctl graceful-restart`` (``--cancel``: disarm): the next stop, within the
        window, keeps glbd's routes at the peers that negotiated graceful restart."""
        if arm:
            self.graceful.arm(self.loop.time())
            self.counters["graceful_restart_arms"] = self.graceful.arms
        else:
            self.graceful.disarm()
        plan = self._stop_plan()
        now = self.loop.time()
        log.warning(
            "glbctl_graceful_restart" if arm else "glbctl_graceful_restart_cancel",
            armed=self.graceful.armed(now),
            expires_in_s=self.graceful.expires_in(now),
            **plan.to_dict(),
        )
        note = ""
        if arm and plan.kind is StopKind.PLANNED:
            note = f"a stop now withdraws everything: {plan.fallback}"
        elif plan.withdraw:
            note = "a stop now withdraws toward the peers that did not negotiate graceful restart"
        return {
            "armed": self.graceful.armed(now),
            "expires_in_s": self.graceful.expires_in(now),
            "next_stop": str(plan.kind),
            "fallback": None if plan.fallback is None else str(plan.fallback),
            "keep": [str(p) for p in plan.keep],
            "withdraw": {str(p): str(r) for p, r in plan.withdraw.items()},
            "note": note,
        }

    def graceful_restart_status(self) -> dict[str, Any]:
        sessions = self.bgp.gr_sessions() if self.bgp is not None else {}
        full = self.cfg.bgp.graceful_restart == "full"
        return self.graceful.snapshot(self.loop.time(), full, sessions)

    async def prepare_stop(self) -> StopPlan:
        """Before any part stops: decide the stop. For a graceful restart, every BFD session
        goes AdminDown first (the peers count no failure: RFC 5882 §3.2) and the FIB and the
        flowlet program are kept whatever ``on_stop`` says (the next glbd adopts them and
        the kernel forwards meanwhile); the bgp part then closes the kept sessions without
        a NOTIFICATION."""
        plan = self.stop_plan = self._stop_plan()
        if plan.kind is StopKind.PLANNED:
            if plan.fallback is not GracefulStopFallback.NOT_ARMED:
                log.warning(
                    "graceful_stop_fallback",
                    note="armed, but this stop withdraws everything first (a planned stop)",
                    **plan.to_dict(),
                )
            return plan
        log.warning("graceful_restart_stop", **plan.to_dict())
        if plan.withdraw:
            log.warning(
                "graceful_stop_fallback",
                note="withdrawn first toward the peers that did not negotiate graceful restart",
                **plan.to_dict(),
            )
        self.cfg = self.cfg.model_copy(
            update={
                "fib": self.cfg.fib.model_copy(update={"on_stop": "keep"}),
                "flowlet": self.cfg.flowlet.model_copy(update={"on_stop": "keep"}),
            }
        )
        engine = self.bfd
        if engine is not None:
            try:
                rows = (await asyncio.to_thread(engine.snapshot)).get("sessions", [])
                for r in rows:
                    await asyncio.to_thread(engine.admin_down, r["interface"], r["peer"])
            except Exception as e:  # a dead engine sends nothing: peers see BFD time out
                log.error("graceful_restart_bfd_admin_down_failed", error=repr(e))
            else:
                log.info("graceful_restart_bfd_admin_down", sessions=len(rows))
        return plan

    # ---- reload: apply only what changed --------------------------------------------------
    # The daemon calls these in start order (fib, quality, bfd, bgp) with the validated new
    # config; each part takes what concerns it. The first one switches self.cfg.

    async def reconfigure_fib(self, new: cfgmod.Config, ch: dict[str, Any]) -> None:
        self.cfg = new
        self.iface_of = {n.address: n.interface for n in new.neighbors}
        if _neighbors_changed(ch) and self.addrs.ready:
            self.addrs.update(new)
        if "fib" in ch["sections"]:
            self.fib_service.reconfigure(new.fib)

    async def reconfigure_quality(self, new: cfgmod.Config, ch: dict[str, Any]) -> None:
        if self.table is not None and {"path_quality", "heartbeat"} & set(ch["sections"]):
            # weight function or role (heartbeats on/off) changed: every profile is recomputed
            # from the inputs it has, and only the groups whose weights moved are rewritten
            p = params.table_params(new)
            if p != self.table.params:
                self._table_changed(self.table.set_params(p))
                log.info(
                    "reload_path_quality",
                    role=p.role.value,
                    combine=p.combine,
                    capacity_aware=p.capacity_aware,
                    weight_memory=p.memory,
                )
        if self.monitor is not None:
            if {"link_quality", "fib"} & set(ch["sections"]) or _neighbors_changed(ch):
                await self.foreign.start(*params.foreign_counter(new))  # calls _foreign_state
            if "link_quality" in ch["sections"]:
                self._foreign_state()
            if _neighbors_changed(ch):
                self.monitor.set_interfaces(params.interfaces(new))
        ep = self.endpoint
        if ep is not None and "heartbeat" in ch["sections"]:
            hb = new.heartbeat
            if ep.set_groups(str(hb.group), str(hb.group6), hb.port):
                log.info("reload_heartbeat_groups", group=str(hb.group), group6=str(hb.group6))
            if ep.sender is not None:
                ep.sender.set_params(params.sender_params(new), self.loop.time())
            if ep.receiver is not None:
                ep.receiver.set_params(params.receiver_params(new))
        if _neighbors_changed(ch):
            self.peer_ids = {p: i for p, i in self.peer_ids.items() if p in self.iface_of}
            self._update_heartbeat_neighbors()

    async def reconfigure_bfd(self, new: cfgmod.Config, ch: dict[str, Any]) -> None:
        if not (_neighbors_changed(ch) or "bfd" in ch["sections"]):
            return
        want = {(s.interface, str(ipaddress.ip_address(s.peer))): s for s in self.bfd_sessions()}
        if self.bfd is None:
            if want:
                await self.start_bfd()
            return
        have = {
            (d["interface"], str(ipaddress.ip_address(d["peer"]))): d
            for d in self.bfd.snapshot().get("sessions", [])
        }
        for key in have.keys() - want.keys():
            await asyncio.to_thread(self.bfd.remove_session, key[0], key[1])
        for key, sess in want.items():
            if key in have:
                await asyncio.to_thread(self.bfd.update_session, sess)  # Poll/Final if timers moved
            else:
                await asyncio.to_thread(self.bfd.add_session, sess)
        # an update that changed the source address re-creates the session, unarmed: re-arm all
        self.fib_service.sessions_reset()

    async def reconfigure_bgp(self, new: cfgmod.Config, ch: dict[str, Any]) -> None:
        if self.bgp is None:
            return
        if _neighbors_changed(ch) or {"bgp", "originate", "colours"} & set(ch["sections"]):
            if self.origin is not None:
                await self.origin.reconfigure(params.origin_params(new))
            self.bgp.reconfigure(self._rib_params())
            self.colours.set_hold_down(new.colours.hold_down_s)
            await self.bgp.refresh_connected()  # the ports' addresses: next-hop checks
        self.apply_drain(new)

    def _rib_params(self) -> RibParams:
        """The RIB's parameters: the config's, originating what :attr:`origin` says now."""
        p = params.rib_params(self.cfg, self.addrs.local)
        return p if self.origin is None else replace(p, originated=self.origin.prefixes())

    def _originated(self, prefixes: tuple[Prefix, ...]) -> None:
        """An interface changed what is originated: announce and withdraw at once (the same
        path as ``originate``; nothing glbd does not originate is touched)."""
        if self.bgp is not None:
            self.bgp.set_originated(prefixes)

    @property
    def drained(self) -> bool:
        return self.cfg.bgp.drain or self.drain_cmd

    def set_drain(self, drain: bool) -> None:
        """``glbctl drain`` / ``undrain`` (the config's ``[bgp] drain`` still drains)."""
        self.drain_cmd = drain
        self.apply_drain(self.cfg)

    def apply_drain(self, cfg: cfgmod.Config) -> None:
        """Heartbeats first (load balancers move away within one heartbeat), then BGP
        (graceful shutdown: peers move away as the UPDATEs arrive)."""
        on = cfg.bgp.drain or self.drain_cmd
        if self.endpoint is not None:
            self.endpoint.set_drain(on)
        if self.bgp is not None and self.bgp.drained != on:
            self.bgp.set_drain(on)

    async def _neighbors_resolved(self, found: list[IPAddress]) -> None:
        """Neighbors whose port came up: their BGP and BFD sessions start now (BGP first: it
        takes them from the waiting rows before this yields)."""
        if self.bgp is not None:
            self.bgp.reconfigure(self._rib_params())
            # after: the port's addresses (next-hop checks) come before its first UPDATE can
            await self.bgp.refresh_connected()
        new = [s for s in self.bfd_sessions() if ipaddress.ip_address(s.peer) in found]
        if new and self.bfd is None:
            await self.start_bfd()
        elif new and self.bfd is not None:
            for s in new:
                await asyncio.to_thread(self.bfd.add_session, s)

    async def _neighbors_lost(self, lost: list[IPAddress]) -> None:
        """Neighbors whose port was deleted: their BGP and BFD sessions go (retried forever
        otherwise); they wait for the port again, as at start."""
        if self.bgp is not None:
            self.bgp.reconfigure(self._rib_params())
            await self.bgp.refresh_connected()
        if self.bfd is not None:
            gone = {params.unscoped(a) for a in lost}
            for d in self.bfd.snapshot().get("sessions", []):
                if params.unscoped(ipaddress.ip_address(d["peer"])) in gone:
                    await asyncio.to_thread(self.bfd.remove_session, d["interface"], d["peer"])

    # ---- event routing --------------------------------------------------------------------

    def on_bgp(self, ev: BgpEvent) -> None:
        self.counters["bgp_events"] += 1
        if isinstance(ev, NextHopsChanged):
            if self.table is not None:
                self._table_changed(self.table.on_next_hops_changed(ev))
                self.colours.next_hops_changed(ev)
                if self.table.fallback_total:
                    self._note_fallbacks(self.table)
        elif isinstance(ev, PeerUp):
            self.fib_service.bgp_up(self.loop.time())
            if ev.bgp_id is not None:
                self.peer_ids[ev.peer] = int(ev.bgp_id)
            self._update_heartbeat_neighbors()
            self._ndp_established()
            log.info("bgp_peer_up", peer=str(ev.peer), bgp_id=str(ev.bgp_id))
        elif isinstance(ev, PeerDown):
            self.peer_ids.pop(ev.peer, None)
            self._update_heartbeat_neighbors()
            self._ndp_established()
            log.info("bgp_peer_down", peer=str(ev.peer), reason=ev.reason)
        elif isinstance(ev, SpeakerLost):
            log.warning("exabgp_lost", generation=ev.generation, note="FIB left as it is")
        elif isinstance(ev, SpeakerReady):
            log.info("exabgp_ready", generation=ev.generation)
        else:
            log.info("bgp_event", event=type(ev).__name__)

    def _peer_interfaces(self) -> dict[IPAddress, NeighborSection]:
        """BGP peers that are up -> their configured neighbor. An IPv6 zone (``fe80::1%eth0``)
        on either side is ignored: the neighbor's interface is what scopes it."""
        by_addr = {params.unscoped(n.address): n for n in self.cfg.neighbors}
        out: dict[IPAddress, NeighborSection] = {}
        for p in self.peer_ids:
            n = by_addr.get(params.unscoped(p))
            if n is not None:
                out[p] = n
        return out

    def _heartbeat_source(self, n: NeighborSection) -> str | None:
        """Our address on an IPv6 neighbor's link (the BGP session's local address): IPv6
        heartbeats leave from it, so the receiver's source check matches the session peer even
        when the session runs over a global address. None for IPv4 (the kernel's choice, as
        always) or when it cannot be found (then the kernel picks)."""
        if n.address.version != 6:
            return None
        try:
            return str(params.unscoped(params.local_address(n)))
        except (RuntimeError, OSError) as e:
            log.warning("heartbeat_source_unknown", neighbor=str(n.address), error=str(e))
            return None

    def _update_heartbeat_neighbors(self) -> None:
        """The endpoint's neighbors: one per interface with a BGP session up; each interface's
        heartbeats use the family of its neighbor's address (IPv4 wins on a dual-stack link).
        The receiver checks source = the neighbor's address (zone dropped), node id = its BGP
        id (from OPEN) and hop limit 255."""
        if self.endpoint is None:
            return
        nbs = [
            Neighbor(
                ifname=n.interface,
                node_id=self.peer_ids[p],
                address=str(params.unscoped(n.address)),
                local=self._heartbeat_source(n),
            )
            for p, n in self._peer_interfaces().items()
        ]
        self.endpoint.set_neighbors(nbs)

    def _ndp_established(self) -> None:
        """Tell unnumbered peer discovery which ports have a BGP session Established, and to
        which address: another router's advertisements then cannot move it (core.ndpeers)."""
        parts = getattr(self.host, "components", ())
        speaker = next((getattr(c, "speaker", None) for c in parts if c.name == "unnumbered"), None)
        if isinstance(speaker, NdpSpeaker):
            up = self._peer_interfaces().values()
            speaker.set_established(
                {n.interface: n.address for n in up if isinstance(n.address, ipaddress.IPv6Address)}
            )

    def on_local(self, changes: list[QualityChanged], monitor: LinkMonitor) -> None:
        for ch in changes:
            log_link_change(ch)
        # the record marks the band decision, so it is written before the heartbeat leaves.
        # Entries are rebuilt on a change, or when the sender is due before the next sample
        # (the load figures they carry are then at most one sample old), not on every sample
        ep = self.endpoint
        if ep is not None and ep.sender is not None:
            due = ep.sender.next_deadline()
            interval = self.cfg.link_quality.sample_interval_ms / 1e3
            if changes or due is None or due <= self.loop.time() + interval:
                far = {ifn: nb.node_id for ifn, nb in ep.neighbors.items()}
                ep.update_links(monitor.entries(far))
        if not changes or self.table is None:
            return
        self.counters["local_changes"] += len(changes)
        agg: Changes | None = None
        for ch in changes:
            ifn = ch.quality.ifname
            c = self.table.set_local(ifn, monitor.usable(ifn))
            agg = c if agg is None else agg | c
        if agg:
            self._table_changed(agg)

    def on_remote(self, updates: list[RemoteUpdate]) -> None:
        if self.table is None:
            return
        self.counters["remote_updates"] += len(updates)
        agg = self.table.set_remotes((u.node_id, u.entries) for u in updates)
        if agg:
            self.fib_service.remote_moved()
            self._table_changed(agg)

    def on_bfd(self, ev: BfdEvent) -> None:
        """BFD state changes. A failure takes the next hop out of every kernel group first:
        the FIB service mirrors the failover or queues it as a task before anything else; the
        log record and the RIB (every prefix of that peer: path table, FIB sync, BGP teardown)
        follow from the loop's ready queue, in event order."""
        self.counters["bfd_events"] += 1
        if ev.new is State.UP:
            self._bfd_up.add((ev.interface, ev.peer))
        else:
            self._bfd_up.discard((ev.interface, ev.peer))
        peer = ipaddress.ip_address(ev.peer)
        self.fib_service.bfd_state(ev, peer)
        self.colours.bfd_state(ev)
        # one deferred step per event keeps a Down and the Up right after it (a flap read from
        # the engine in one go) in order at the RIB; out of order, the peer stays BFD-down
        self.loop.call_soon(self._bfd_to_rib, ev, peer)

    def _bfd_to_rib(self, ev: BfdEvent, peer: IPAddress) -> None:
        log.info(
            "bfd_state",
            peer=ev.peer,
            interface=ev.interface,
            old=ev.old.name,
            new=ev.new.name,
            reason=ev.reason,
            failure=ev.failure,
            failover_sent=ev.failover_sent,
            # engine decision -> here (pipe, reader thread, event loop): the daemon's share
            event_age_ms=round((time.monotonic() - ev.at) * 1e3, 2),
            # last accepted packet -> the engine's decision (a timeout: the detection time
            # plus the engine's own lateness)
            since_rx_ms=None if ev.last_rx is None else round((ev.at - ev.last_rx) * 1e3, 2),
        )
        if self.bgp is None:
            return
        if ev.new is State.UP:
            self.bgp.peer_bfd_up(peer)
        elif ev.failure:
            self.bgp.peer_bfd_down(peer)
        elif ev.reason is StateChangeReason.NEIGHBOR_ADMIN_DOWN:
            self.bgp.peer_bfd_admin_down(peer)

    # ---- the path table's changes ------------------------------------------------------

    def _note_fallbacks(self, table: PathTable) -> None:
        """Prefixes the profile cap routes over plain ECMP: counted by reason (``glbctl
        counters``, metrics) and logged at most once a minute (``PathTable.fallback_warning``)."""
        for why, n in table.fallbacks.items():
            self.counters[why.counter] = n
        self.counters["profile_fallback_prefixes"] = table.fallback_prefixes()
        warn = table.fallback_warning(self.loop.time())
        if warn is not None:
            log.warning("profile_cap_reached", **warn)

    def _table_changed(self, changes: Changes) -> None:
        """Route what the path table returned: the flowlet part's move gate first, then the
        FIB service (its fast lane, or the next sync step)."""
        if not changes:
            return
        if self.on_weights is not None:
            self.on_weights(changes)
        self.fib_service.table_changed(changes)
        self.colours.table_changed(changes)

    def _foreign_state(self) -> None:
        """The ingress counter started or stopped counting (or the config changed): the link
        monitor runs with what can be counted now."""
        if self.monitor is None:
            return
        p = self.foreign.effective(params.linkmon_params(self.cfg))
        if p != self.monitor.params:
            moved = self.monitor.set_params(p)
            if moved:
                self.on_local(moved, self.monitor)

    # ---- flowlets --------------------------------------------------------------------------

    def set_flowlet_timeout(self, timeout_s: float | None) -> None:
        """The flowlet timeout changed (None: flowlets off): to the FIB service, whose next
        sync rewrites the resilient groups whose idle timer follows it."""
        self.fib_service.set_flowlet_timeout(timeout_s)

    def queue_delays_us(self) -> tuple[float, float]:
        """The deepest queue, as drain time, on the fabric links of this node since the last
        call (the link monitor's peak over its samples; the call resets it) and on those of
        its neighbors (their last heartbeats): the two hops of a path out of a leaf."""
        local = 0.0 if self.monitor is None else self.monitor.take_peak_queue_delay_us()
        remote = 0.0
        ep = self.endpoint
        if ep is not None and ep.receiver is not None:
            for nb in ep.neighbors.values():
                entries = ep.receiver.remote(nb.node_id)
                if entries is not None:
                    remote = max(remote, entries.max_queue_delay_us())
        return local, remote

    # ---- views ----------------------------------------------------------------------------

    def quality_snapshot(self) -> dict[str, Any]:
        return views.quality_snapshot(
            [q.to_dict() for q in self.monitor.qualities().values()] if self.monitor else [],
            self.endpoint.to_dict() if self.endpoint else None,
            self.table,
            self.counters,
            self.foreign.snapshot(),
        )


def _neighbors_changed(ch: dict[str, Any]) -> bool:
    return bool(ch["neighbors_added"] or ch["neighbors_removed"] or ch["neighbors_changed"])
