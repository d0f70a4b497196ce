"""Builds the daemon's parts from the config and routes events between them.

One :class:`Node` owns every part; four thin facades (``fib``, ``quality``, ``bfd``, ``bgp``)
expose them to the daemon as components (start order; stop runs in reverse)::

    fib      FibProgrammer: adopt what the kernel has (never flush), then follow the path table
    quality  LinkMonitor + HeartbeatEndpoint (sender: helper, receiver: load balancer) + PathTable
    bfd      BfdEngine in its own process; state changes hop onto the loop
    bgp      BgpSpeaker: ExaBGP child + Clos RIB (NNHN origination/validation)

Event routing (all on the event loop):

* RIB ``NextHopsChanged`` -> path table -> FIB sync (one group replace per changed profile);
* RIB ``PeerUp``/``PeerDown`` -> heartbeat neighbors (a heartbeat is accepted only from the BGP
  neighbor on that interface, by its BGP id) and the far-end ids in our own heartbeat entries;
* link monitor -> path table (local quality) and heartbeat sender (our links' entries);
* heartbeat receiver -> path table (remote quality; expiry = unknown -> DLB fallback);
* BFD Down (a failure) -> FIB fast failover (the next hop leaves every group at once, before any
  recomputation) -> RIB (strict mode, session teardown); BFD Up -> back in; a peer's AdminDown is
  not a failure.

FIB syncs are coalesced: while one runs, further changes only mark the table dirty and one more
sync follows. Until BGP has been up for ``fib_hold_s`` after start, adopted kernel state is left
alone (a restarted glbd must not withdraw routes it has not re-learned yet).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import os
import shutil
import socket
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from bfd.engine import BfdEngine, BfdEvent, EngineError, SessionConfig
from bfd.packet import AuthType, State
from bfd.session import AuthConfig, SessionParams
from glbd.app import config as cfgmod
from glbd.core.fibmodel import Desired, GroupSpec, Member, Resilient
from glbd.core.pathtable import Changes, PathTable, PathTableParams
from glbd.core.rib import NeighborParams, NextHopsChanged, PeerDown, PeerUp, RibParams, Role
from glbd.io.bgp import BgpEvent, BgpSpeaker, ProcessOptions, SpeakerLost, SpeakerReady
from glbd.io.fib import FibProgrammer
from glbd.io.fibkernel import failover_wire
from glbd.io.linkmon import (
    LinkMonitor,
    LinkMonParams,
    MonitorRunner,
    QualityChanged,
    StatsReader,
    parse_tc_handle,
)
from glbd.io.metrics import Sample
from heartbeat import wire
from heartbeat.receiver import Neighbor, Receiver, ReceiverParams, RemoteUpdate
from heartbeat.sender import Sender, SenderParams, initial_sequence
from heartbeat.transport import HeartbeatEndpoint

if TYPE_CHECKING:
    from glbd.app.daemon import Component, Daemon

log = structlog.get_logger(__name__)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def local_address_for(peer: IPAddress, interface: str) -> IPAddress:
    """Our address toward ``peer`` as the kernel would choose it (source address selection)."""
    fam = socket.AF_INET if peer.version == 4 else socket.AF_INET6
    with socket.socket(fam, socket.SOCK_DGRAM) as s:
        with contextlib.suppress(OSError):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, interface.encode())
        try:
            s.connect((str(peer), 179))
        except OSError as e:
            raise RuntimeError(
                f"neighbor {peer}: no local address toward it on {interface} ({e.strerror}); "
                "set neighbors.local_address or configure the interface"
            ) from None
        return ipaddress.ip_address(s.getsockname()[0].split("%")[0])


def _unscoped(a: IPAddress) -> IPAddress:
    """``a`` without its IPv6 zone (``fe80::1%eth0`` -> ``fe80::1``)."""
    if isinstance(a, ipaddress.IPv6Address) and a.scope_id is not None:
        return ipaddress.IPv6Address(str(a).split("%", 1)[0])
    return a


class Node:
    """Every part of one glbd, wired. Built from a validated config; no I/O until ``start``."""

    def __init__(self, daemon: Daemon, *, netns: str | None = None) -> None:
        self.daemon = daemon
        self.cfg = daemon.cfg
        self.netns = netns
        self.loop = asyncio.get_running_loop()
        self.started_at = time.monotonic()
        self.fib_hold_s = float(os.environ.get("GLBD_FIB_HOLD_S", "1.0"))
        self.counters: dict[str, int] = {
            "fib_syncs": 0,
            "fib_sync_errors": 0,
            "fib_fast_failovers": 0,
            "bfd_engine_failovers": 0,
            "bfd_failover_arms": 0,
            "bfd_failover_arm_errors": 0,
            "bfd_events": 0,
            "bgp_events": 0,
            "remote_updates": 0,
            "local_changes": 0,
        }
        self.last_fib_sync: dict[str, Any] = {}
        self._fib_dirty = False
        self._fib_task: asyncio.Task[None] | None = None
        self._fib_full = True  # the first sync, and after errors or config changes
        self._fib_keys: set[str] = set()  # profile keys the FIB has groups for
        # profile keys the last full sync left out (no member it could program), routes too
        self._fib_left_out: set[str] = set()
        # new/removed profiles as one incremental FibProgrammer.update (True) or a full apply
        # (False, see _fib_sync_loop); tests/test_wiring_fib_sync.py runs both
        self.fib_incremental_profiles = False
        self._fib_changes = _ChangeSet()  # what the next FIB sync has to bring over
        self._nets: dict[str, Any] = {}  # table prefix -> network object
        self._bgp_ready_at: float | None = None
        self.peer_ids: dict[IPAddress, int] = {}  # BGP neighbor -> its BGP id (from OPEN)
        self.iface_of: dict[IPAddress, str] = {n.address: n.interface for n in self.cfg.neighbors}
        self.fib: FibProgrammer | None = None
        self.table: PathTable | None = None
        self.monitor: LinkMonitor | None = None
        self.runner: MonitorRunner | None = None
        self.endpoint: HeartbeatEndpoint | None = None
        self.bfd: BfdEngine | None = None
        self.bgp: BgpSpeaker | None = None
        self._stats: StatsReader | None = None
        self._exabgp_dir: Path | None = None
        # the BFD engine's armed kernel failover, per session (interface, peer): what the FIB
        # wants armed and what the engine has (see _push_failover)
        self._fo_want: dict[tuple[str, str], bytes] = {}
        self._fo_armed: dict[tuple[str, str], bytes] = {}
        self._fo_task: asyncio.Task[None] | None = None

    # ---- construction -------------------------------------------------------------------

    def local_address(self, n: cfgmod.NeighborSection) -> IPAddress:
        return n.local_address or local_address_for(n.address, n.interface)

    def build_fib(self) -> FibProgrammer:

        f = self.cfg.fib
        return FibProgrammer(
            netns=self.netns,
            protocol=f.protocol,
            table=f.table,
            compat_mode=0 if f.set_compat_mode_off else None,
            reconcile_interval_s=f.reconcile_interval_s,
            route_audit_interval_s=f.route_audit_interval_s,
            resilient=self._resilient(),
            stale_s=f.stale_timer_s,
        )

    def table_params(self) -> PathTableParams:
        role = Role(self.cfg.role)
        if not self.cfg.heartbeat.enabled and role.load_balancer:
            role = Role.HELPER if role is Role.BOTH else role
        pq = self.cfg.path_quality
        return PathTableParams(
            role=role,
            combine=pq.combine,
            weight_table=tuple(pq.weight_table),
            max_weight=pq.max_weight,
            capacity_aware=pq.capacity_aware,
            memory=pq.weight_memory,
        )

    def build_table(self) -> PathTable:
        return PathTable(self.table_params())

    @property
    def _sample_interval_s(self) -> float:
        return self.cfg.link_quality.sample_interval_ms / 1e3

    def linkmon_params(self) -> Any:

        q = self.cfg.link_quality
        return LinkMonParams(
            sample_interval_s=q.sample_interval_ms / 1e3,
            ewma_alpha=q.ewma_alpha,
            load_min_pct=q.load_min_pct,
            load_max_pct=q.load_max_pct,
            queue_min_bytes=q.queue_min_bytes,
            queue_max_bytes=q.queue_max_bytes,
            rate_weight=q.rate_weight,
            hysteresis_margin=q.hysteresis_margin,
            hysteresis_samples=q.hysteresis_samples,
            default_capacity_mbps=q.default_capacity_mbps,
            capacity_mbps=dict(q.capacity_mbps),
            foreign_classes=frozenset(parse_tc_handle(h) for h in q.foreign_classes),
        )

    def build_endpoint(self) -> HeartbeatEndpoint | None:

        hb = self.cfg.heartbeat
        if not hb.enabled:
            return None
        key, accept = heartbeat_keys(hb)
        sender = receiver = None
        if self.cfg.is_helper:
            sender = Sender(
                SenderParams(
                    node_id=wire.node_id(str(self.cfg.router_id)),
                    interval_s=hb.interval_ms / 1e3,
                    min_spacing_s=hb.min_spacing_ms / 1e3,
                    on_change=hb.on_change,
                    key=key,
                ),
                initial_sequence(time.time()),
            )
        if self.cfg.is_load_balancer:
            receiver = Receiver(ReceiverParams(hold_multiplier=hb.hold_multiplier, keys=accept))
        return HeartbeatEndpoint(
            self.loop,
            sender=sender,
            receiver=receiver,
            on_remote=self.on_remote,
            group=str(hb.group),
            group6=str(hb.group6),
            port=hb.port,
        )

    def rib_params(self) -> Any:

        c = self.cfg
        return RibParams(
            router_id=c.router_id,
            local_as=c.local_as,
            role=Role(c.role),
            neighbors=tuple(
                NeighborParams(
                    address=n.address,
                    remote_as=n.remote_as,
                    local_address=self.local_address(n),
                    interface=n.interface,
                    hold_time=n.hold_time or c.bgp.hold_time,
                    description=n.description,
                    passive=None if n.passive == "auto" else n.passive,
                )
                for n in c.neighbors
            ),
            originated=tuple(c.originate),
            multipath_relax=c.bgp.multipath_relax,
            max_paths=c.bgp.max_paths,
            nnhn_strict_next_hop=c.bgp.nnhn_strict_next_hop,
            stale_timer_s=c.bgp.stale_timer_s,
            bfd_strict=c.bgp.bfd_strict,
            trust_packed_nnhn=c.bgp.trust_packed_nnhn,
            update_coalesce_s=c.bgp.update_coalesce_ms / 1e3,
        )

    def bfd_sessions(self) -> list[Any]:

        out = []
        for n in self.cfg.neighbors:
            b = self.cfg.neighbor_bfd(n)
            if not b.enabled:
                continue
            out.append(
                SessionConfig(
                    peer=str(n.address),
                    interface=n.interface,
                    local=str(self.local_address(n)),
                    params=SessionParams(
                        desired_min_tx=b.min_tx_ms * 1000,
                        required_min_rx=b.min_rx_ms * 1000,
                        detect_mult=b.detect_mult,
                        passive=b.passive,
                        cpi=b.cpi,
                        auth=_bfd_auth(b.auth),
                    ),
                )
            )
        return out

    # ---- start / stop per part ------------------------------------------------------------

    async def start_fib(self) -> None:
        self.fib = self.build_fib()
        self.fib.on_failover_map = self._failover_map_changed
        await self.fib.start(adopt=True)

    async def stop_fib(self) -> None:
        if self._fib_task is not None:
            self._fib_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._fib_task
        if self.fib is not None:
            await self.fib.stop(keep=self.cfg.fib.on_stop == "keep")

    async def start_quality(self) -> None:

        self.table = self.build_table()
        self.monitor = LinkMonitor(self.linkmon_params())
        self.monitor.set_interfaces(sorted({n.interface for n in self.cfg.neighbors}))
        self._stats = await StatsReader.open(netns=self.netns)
        self.runner = MonitorRunner(self.monitor, self._stats, self.on_local)
        self.runner.start()
        self.endpoint = self.build_endpoint()

    async def stop_quality(self) -> None:
        if self.runner is not None:
            await self.runner.stop()
        if self.endpoint is not None:
            self.endpoint.close()
        if self._stats is not None:
            self._stats.close()

    async def start_bfd(self) -> None:

        sessions = self.bfd_sessions()
        if not sessions:
            return

        def hop(ev: BfdEvent) -> None:  # engine thread -> event loop
            self.loop.call_soon_threadsafe(self.on_bfd, ev)

        self.bfd = BfdEngine(
            hop,
            mode=self.cfg.bfd.mode,
            rt_priority=(self.cfg.bfd.rt_priority or None) if os.geteuid() == 0 else None,
            on_exit=lambda rc: log.error("bfd_engine_exited", rc=rc),
            # a fresh interpreter on a busy box can take seconds to answer the first call
            call_timeout=float(os.environ.get("GLBD_BFD_CALL_TIMEOUT_S", "20")),
        )
        await asyncio.to_thread(self.bfd.start)
        for s in sessions:
            await asyncio.to_thread(self.bfd.add_session, s)
        self._fo_armed.clear()
        self._schedule_failover_push()

    async def stop_bfd(self) -> None:
        if self._fo_task is not None:
            self._fo_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._fo_task
        if self.bfd is not None:
            await asyncio.to_thread(self.bfd.stop)

    # ---- kernel failover armed in the BFD engine --------------------------------------------

    def _failover_map_changed(self, fm: dict[tuple[IPAddress, str], tuple[int, ...]]) -> None:
        """The FIB's member nexthop ids changed: re-arm the engine's failover requests (one
        RTM_DELNEXTHOP per id) for the sessions whose ids changed."""
        self._fo_want = {(ifname, str(gw)): failover_wire(ids) for (gw, ifname), ids in fm.items()}
        self._schedule_failover_push()

    def _schedule_failover_push(self) -> None:
        if self.bfd is None:
            return
        if self._fo_task is None or self._fo_task.done():
            self._fo_task = self.loop.create_task(self._push_failover())

    async def _push_failover(self) -> None:
        """Bring the engine's armed requests to ``_fo_want`` (or disarm all when
        ``bfd.kernel_failover`` is off), one control call per session that differs. Repeats
        until nothing changed meanwhile; a session the engine does not know is skipped."""
        while self.bfd is not None and self.bfd.running:
            enabled = self.cfg.bfd.kernel_failover
            # from the config alone (bfd_sessions() also resolves source addresses, which can
            # fail while an interface is down)
            sessions = {
                (n.interface, str(n.address))
                for n in self.cfg.neighbors
                if self.cfg.neighbor_bfd(n).enabled
            }
            todo = {
                k: (self._fo_want.get(k, b"") if enabled else b"")
                for k in sessions
                if self._fo_armed.get(k, b"") != (self._fo_want.get(k, b"") if enabled else b"")
            }
            self._fo_armed = {k: v for k, v in self._fo_armed.items() if k in sessions}
            if not todo:
                return
            for (ifname, peer), data in sorted(todo.items()):
                try:
                    await asyncio.to_thread(self.bfd.set_failover, ifname, peer, data)
                except EngineError as e:
                    self.counters["bfd_failover_arm_errors"] += 1
                    log.warning(
                        "bfd_failover_arm_failed", peer=peer, interface=ifname, error=str(e)
                    )
                    self._fo_armed[(ifname, peer)] = data  # do not retry in a loop
                    continue
                self.counters["bfd_failover_arms"] += 1
                self._fo_armed[(ifname, peer)] = data

    async def start_bgp(self) -> None:

        runtime = self._exabgp_dir = Path(self.cfg.control.socket).parent / f"exabgp-{os.getpid()}"
        self.bgp = BgpSpeaker(
            self.rib_params(),
            netns=self.netns,
            on_event=self.on_bgp,
            process=ProcessOptions(
                runtime_dir=runtime, exabgp_log_level=self.cfg.bgp.exabgp_log_level
            ),
        )
        await self.bgp.start()

    async def stop_bgp(self) -> None:
        if self.bgp is not None:
            await self.bgp.stop()
        if self._exabgp_dir is not None:
            shutil.rmtree(self._exabgp_dir, ignore_errors=True)

    # ---- reload: apply only what changed --------------------------------------------------
    # The daemon calls these in start order (fib, quality, bfd, bgp) with the validated new
    # config; each part takes what concerns it. The first one switches self.cfg.

    def _neighbors_changed(self, ch: dict[str, Any]) -> bool:
        return bool(ch["neighbors_added"] or ch["neighbors_removed"] or ch["neighbors_changed"])

    async def reconfigure_fib(self, new: cfgmod.Config, ch: dict[str, Any]) -> None:
        self.cfg = new
        self.iface_of = {n.address: n.interface for n in new.neighbors}
        if "fib" in ch["sections"]:
            # group type/buckets/timers apply to the next sync (make-before-break in the FIB);
            # protocol/table changes would orphan installed state: those need a restart
            log.info("reload_fib", note="group parameters apply from the next sync")
            self._fib_full = True
            self.schedule_fib_sync()

    async def reconfigure_quality(self, new: cfgmod.Config, ch: dict[str, Any]) -> None:
        if self.table is not None and {"path_quality", "heartbeat"} & set(ch["sections"]):
            # weight function or role (heartbeats on/off) changed: every profile is recomputed
            # from the inputs it has, and only the groups whose weights moved are rewritten
            params = self.table_params()
            if params != self.table.params:
                self._changed(self.table.set_params(params))
                log.info(
                    "reload_path_quality",
                    role=params.role.value,
                    combine=params.combine,
                    capacity_aware=params.capacity_aware,
                    weight_memory=params.memory,
                )
        if self.monitor is not None:
            if "link_quality" in ch["sections"]:
                moved = self.monitor.set_params(self.linkmon_params())
                if moved:
                    self.on_local(moved, self.monitor)
            if self._neighbors_changed(ch):
                self.monitor.set_interfaces(sorted({n.interface for n in new.neighbors}))
        ep = self.endpoint
        if ep is not None and "heartbeat" in ch["sections"]:
            hb = new.heartbeat
            key, accept = heartbeat_keys(hb)
            if ep.set_groups(str(hb.group), str(hb.group6), hb.port):
                log.info("reload_heartbeat_groups", group=str(hb.group), group6=str(hb.group6))
            if ep.sender is not None:
                ep.sender.set_params(
                    SenderParams(
                        node_id=wire.node_id(str(new.router_id)),
                        interval_s=hb.interval_ms / 1e3,
                        min_spacing_s=hb.min_spacing_ms / 1e3,
                        on_change=hb.on_change,
                        key=key,
                    ),
                    self.loop.time(),
                )
            if ep.receiver is not None:
                ep.receiver.set_params(
                    ReceiverParams(hold_multiplier=hb.hold_multiplier, keys=accept)
                )
        if self._neighbors_changed(ch):
            self.peer_ids = {p: i for p, i in self.peer_ids.items() if p in self.iface_of}
            self._update_heartbeat_neighbors()

    async def reconfigure_bfd(self, new: cfgmod.Config, ch: dict[str, Any]) -> None:
        if not (self._neighbors_changed(ch) or "bfd" in ch["sections"]):
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
        self._fo_armed.clear()
        self._schedule_failover_push()

    async def reconfigure_bgp(self, new: cfgmod.Config, ch: dict[str, Any]) -> None:
        if self.bgp is None:
            return
        if self._neighbors_changed(ch) or "bgp" in ch["sections"] or "originate" in ch["sections"]:
            self.bgp.reconfigure(self.rib_params())

    # ---- event routing --------------------------------------------------------------------

    def on_bgp(self, ev: BgpEvent) -> None:

        self.counters["bgp_events"] += 1
        if isinstance(ev, NextHopsChanged):
            if self.table is not None:
                self._changed(self.table.on_next_hops_changed(ev))
        elif isinstance(ev, PeerUp):
            if self._bgp_ready_at is None:
                self._bgp_ready_at = time.monotonic()
                self.loop.call_later(self.fib_hold_s, self.schedule_fib_sync)
            if ev.bgp_id is not None:
                self.peer_ids[ev.peer] = int(ev.bgp_id)
            self._update_heartbeat_neighbors()
            log.info("bgp_peer_up", peer=str(ev.peer), bgp_id=str(ev.bgp_id))
        elif isinstance(ev, PeerDown):
            self.peer_ids.pop(ev.peer, None)
            self._update_heartbeat_neighbors()
            log.info("bgp_peer_down", peer=str(ev.peer), reason=ev.reason)
        elif isinstance(ev, SpeakerLost):
            log.warning("exabgp_lost", generation=ev.generation, note="FIB left as it is")
        elif isinstance(ev, SpeakerReady):
            log.info("exabgp_ready", generation=ev.generation)
        else:
            log.info("bgp_event", event=type(ev).__name__)

    def _peer_interfaces(self) -> dict[IPAddress, cfgmod.NeighborSection]:
        """BGP peers that are up -> their configured neighbor. An IPv6 zone (``fe80::1%eth0``)
        on either side is ignored: the neighbor's interface is what scopes it."""
        by_addr = {_unscoped(n.address): n for n in self.cfg.neighbors}
        out: dict[IPAddress, cfgmod.NeighborSection] = {}
        for p in self.peer_ids:
            n = by_addr.get(_unscoped(p))
            if n is not None:
                out[p] = n
        return out

    def _heartbeat_source(self, n: cfgmod.NeighborSection) -> str | None:
        """Our address on an IPv6 neighbor's link (the BGP session's local address): IPv6
        heartbeats leave from it, so the receiver's source check matches the session peer even
        when the session runs over a global address. None for IPv4 (the kernel's choice, as
        always) or when it cannot be found (then the kernel picks)."""
        if n.address.version != 6:
            return None
        try:
            return str(_unscoped(self.local_address(n)))
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
                address=str(_unscoped(n.address)),
                local=self._heartbeat_source(n),
            )
            for p, n in self._peer_interfaces().items()
        ]
        self.endpoint.set_neighbors(nbs)

    def on_local(self, changes: list[QualityChanged], monitor: LinkMonitor) -> None:
        for ch in changes:
            q = ch.quality
            if ch.reason in ("residual", "capacity"):  # same band and flag: not link_band
                log.info(
                    "link_capacity",
                    ifname=q.ifname,
                    residual_mbps=q.residual_mbps,
                    capacity_mbps=q.capacity_mbps,
                    band=q.band,
                    reason=ch.reason,
                )
                continue
            log.info(
                "link_band",
                ifname=q.ifname,
                band=q.band,
                old_band=ch.old_band,
                down=q.down,
                load_pct=round(q.load_pct, 1),
                queue_bytes=int(q.queue_bytes),
                reason=ch.reason,
            )
        # the record marks the band decision, so it is written before the heartbeat leaves.
        # Entries are rebuilt on a change, or when the sender is due before the next sample
        # (the load figures they carry are then at most one sample old), not on every sample
        ep = self.endpoint
        if ep is not None and ep.sender is not None:
            due = ep.sender.next_deadline()
            if changes or due is None or due <= self.loop.time() + self._sample_interval_s:
                far = {ifn: nb.node_id for ifn, nb in ep.neighbors.items()}
                ep.update_links(monitor.entries(far))
        if not changes or self.table is None:
            return
        self.counters["local_changes"] += len(changes)
        agg: Changes | None = None
        for ch in changes:
            ifn = ch.quality.ifname
            lq = monitor.quality(ifn)
            c = self.table.set_local(ifn, None if lq is None else lq.usable())
            agg = c if agg is None else agg | c
        if agg:
            self._changed(agg)

    def on_remote(self, updates: list[RemoteUpdate]) -> None:
        if self.table is None:
            return
        self.counters["remote_updates"] += len(updates)
        agg: Changes | None = None
        for u in updates:
            c = self.table.set_remote(u.node_id, u.entries)
            agg = c if agg is None else agg | c
        if agg:
            self._changed(agg)

    def on_bfd(self, ev: BfdEvent) -> None:
        """BFD state changes. A failure takes the next hop out of every kernel group first: the
        failover task is queued before anything else is done here, and the RIB's recompute
        (every prefix of that peer: path table, FIB sync, BGP teardown) and the log record
        run after it, from the loop's ready queue."""
        self.counters["bfd_events"] += 1
        peer = ipaddress.ip_address(ev.peer)
        if ev.new is not State.UP and ev.failure and self.fib is not None:
            self.counters["fib_fast_failovers"] += 1
            if ev.failover_sent:
                # the engine already deleted the peer's member nexthops (bfd.failover): mirror
                # that and keep the member out until BFD is Up again
                self.counters["bfd_engine_failovers"] += 1
                self.fib.failed_over(peer, ev.interface)
            else:
                self.loop.create_task(self.fib.remove_nexthop(peer, ev.interface))
        # the record is written from the ready queue, after the failover task's first step has
        # handed its netlink messages to the kernel (rendering a JSON line costs ~0.2 ms)
        self.loop.call_soon(
            functools.partial(
                log.info,
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
        )
        if ev.new is State.UP:
            if self.fib is not None:
                self.loop.create_task(self.fib.restore_nexthop(peer, ev.interface))
            if self.bgp is not None:
                # through the ready queue like the Down below: a Down and the Up right after it
                # (a flap read from the engine in one go) must reach the RIB in that order, or
                # the Up is a no-op, the late Down marks the peer BFD-down for good, and its
                # paths never come back
                self.loop.call_soon(self.bgp.peer_bfd_up, peer)
        elif ev.failure:
            if self.bgp is not None:
                self.loop.call_soon(self.bgp.peer_bfd_down, peer)
        elif ev.reason == "neighbor_admin_down" and self.bgp is not None:
            self.loop.call_soon(self.bgp.peer_bfd_admin_down, peer)

    # ---- FIB sync -------------------------------------------------------------------------

    def _changed(self, changes: Changes) -> None:
        if changes:
            if self.table is not None:  # keep the table's own change set small (it copies)
                self._fib_changes.add(self.table.take_changes())
            self.schedule_fib_sync()

    def schedule_fib_sync(self) -> None:
        if self._bgp_ready_at is None or time.monotonic() - self._bgp_ready_at < self.fib_hold_s:
            # adopted state stays until BGP had a chance to re-learn it. The first sync is a
            # full apply, so pending changes are not needed: drop them, or the table keeps
            # copying a growing change set on every learned prefix (quadratic start-up)
            if self._fib_full and self.table is not None:
                self.table.take_changes()
                self._fib_changes.clear()
            return
        self._fib_dirty = True
        if self._fib_task is None or self._fib_task.done():
            self._fib_task = self.loop.create_task(self._fib_sync_loop())

    def _resilient(self) -> Resilient | None:
        f = self.cfg.fib
        if f.group_type != "resilient":
            return None
        return Resilient(
            buckets=f.resilient_buckets,
            idle_timer_s=f.resilient_idle_timer_s,
            unbalanced_timer_s=f.resilient_unbalanced_timer_s,
        )

    def desired(self) -> Any:

        assert self.table is not None
        res = self._resilient()
        groups = {}
        for key in self.table.profiles():
            weights = {
                Member(ipaddress.ip_address(nh.address), nh.ifname or ""): w.value
                for nh, w in self.table.weights(key).items()
                if w.value > 0 and nh.ifname
            }
            if weights:
                groups[key] = GroupSpec(weights=weights, resilient=res)
        prefixes = self.table.prefixes()
        routes = {self._net(p): k for p, k in prefixes.items() if k in groups}
        if len(self._nets) > 2 * len(prefixes) + 1024:  # forget prefixes long gone
            self._nets = {p: self._nets[p] for p in prefixes if p in self._nets}
        return Desired(groups=groups, routes=routes)

    def _net(self, prefix: str) -> Any:
        """The network object of a table prefix, parsed once (a full sync of 10k routes spent
        most of its time in ``ip_network``)."""
        net = self._nets.get(prefix)
        if net is None:
            net = self._nets[prefix] = ipaddress.ip_network(prefix)
        return net

    def _group_spec(self, key: str, res: Resilient | None) -> GroupSpec | None:
        assert self.table is not None
        weights = {
            Member(ipaddress.ip_address(nh.address), nh.ifname): w.value
            for nh, w in self.table.weights(key).items()
            if w.value > 0 and nh.ifname
        }
        return GroupSpec(weights=weights, resilient=res) if weights else None

    async def _fib_sync_loop(self) -> None:
        """Bring the FIB to the path table. Weight-only changes are one group replace per
        changed profile (``set_weights``); new and removed profiles and prefix moves are one
        incremental ``update`` (groups + the moved routes); only the first sync, a config
        change or an error need a full ``apply``."""
        while self._fib_dirty:
            self._fib_dirty = False
            if self.fib is None or self.table is None:
                return
            self._fib_changes.add(self.table.take_changes())
            ch = self._fib_changes.take()
            t0 = time.perf_counter()
            mode = "incremental"
            try:
                # new or removed profiles: a full apply. FibProgrammer.update can do them
                # incrementally, but with it leaf2 of the e2e fabric kept unequal kernel weights
                # after a BFD down/up (10:40 UTC). Not reproduced since (12:10-12:35 UTC: e2e 5x,
                # also under CPU load, and 90 rounds of cuts/drops/stalls all passed with the
                # incremental path); the one divergence found (a left-out profile coming back
                # without its routes) is fixed below and tests/test_wiring_fib_sync.py guards
                # it. The likely cause was a BFD Down/Up reaching the RIB out of order (fixed in
                # on_bfd, 4ac3beb), which kept a spine out of the path table in either mode; the
                # switch stays off until the incremental path has run the suite a while
                if self._fib_full or (
                    not self.fib_incremental_profiles
                    and (ch.removed or any(k not in self._fib_keys for k in ch.updated))
                ):
                    mode = "full"
                    desired = self.desired()
                    self._fib_left_out = set(self.table.profiles()) - desired.groups.keys()
                    result = await self.fib.apply(desired)
                    self._fib_keys = set(desired.groups)
                    self._fib_full = False
                else:
                    result = await self._fib_incremental(ch)
                self.counters["fib_syncs"] += 1
                self.last_fib_sync = {
                    "at": time.time(),
                    "mode": mode,
                    "ms": round((time.perf_counter() - t0) * 1e3, 3),
                    "result": _plain(result),
                }
            except Exception as e:  # the kernel said no: count, log, redo it fully next time
                self.counters["fib_sync_errors"] += 1
                self._fib_full = True
                log.error("fib_sync_failed", mode=mode, error=repr(e))

    async def _fib_incremental(self, ch: Changes) -> Any:
        assert self.fib is not None and self.table is not None
        res = self._resilient()
        specs: dict[str, GroupSpec] = {}
        self._fib_left_out -= ch.removed
        for key in sorted(ch.updated):
            spec = self._group_spec(key, res)
            # nothing usable left, or usable again after a full sync left the profile out
            # together with its routes (those prefixes did not move, so ch.prefixes does not
            # name them): let the full path decide
            if spec is None or key in self._fib_left_out:
                self._fib_full = True
                self._fib_dirty = True
                return None
            specs[key] = spec
        if not ch.prefixes and not ch.removed and all(k in self._fib_keys for k in specs):
            result: Any = None  # weights only: one group replace each, no route touched
            for key, spec in specs.items():
                result = await self.fib.set_weights(key, spec.weights, resilient=True)
            return result
        keys = (self._fib_keys | specs.keys()) - ch.removed
        add: dict[Any, str] = {}
        remove: list[Any] = []
        for p in ch.prefixes:
            pkey = self.table.profile_of(p)
            if pkey is not None and pkey in keys:
                add[self._net(p)] = pkey
            else:
                remove.append(self._net(p))
        result = await self.fib.update(
            groups=specs,
            remove_groups=ch.removed & self._fib_keys,
            add=add,
            remove=remove,
        )
        self._fib_keys = keys
        return result

    # ---- views ----------------------------------------------------------------------------

    def quality_snapshot(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "links": [
                q.to_dict() for q in (self.monitor.qualities().values() if self.monitor else [])
            ],
            "heartbeats": [self.endpoint.to_dict()] if self.endpoint else [],
            "quality": self.table.to_dict() if self.table else {},
            "counters": dict(self.counters),
        }
        return out

    def fib_snapshot(self) -> dict[str, Any]:
        """``glbctl profiles``: each profile's desired weights (path table) beside what the FIB
        programs and what the kernel has, with a ``diff`` flag per profile."""
        fib = self.fib.snapshot() if self.fib else {}
        groups = fib.get("groups", {})
        prof = self.table.profiles_dict() if self.table else {"profiles": []}
        rows = []
        for p in prof.get("profiles", []):
            g = groups.get(p["key"], {})
            installed = {lab.split("@")[0]: w for lab, w in g.get("installed", {}).items()}
            programmed = {lab.split("@")[0]: w for lab, w in g.get("programmed", {}).items()}
            weights = [
                {
                    **w,
                    "programmed": programmed.get(w["next_hop"], 0),
                    "installed": installed.get(w["next_hop"], 0),
                }
                for w in p["weights"]
            ]
            rows.append(
                {
                    **p,
                    "weights": weights,
                    "nhid": g.get("nhid"),
                    "excluded": g.get("excluded", {}),
                    "diff": bool(g.get("diff", True)) if g else True,
                    "note": g.get("note", ""),
                }
            )
        summary = {
            k: fib.get(k)
            for k in (
                "protocol",
                "table",
                "weight_bits",
                "compat_mode",
                "stale_remaining_s",
                "stale_held",
                "foreign_routes",
                "conflicts",
                "kernel",
                "last_errors",
            )
        }
        return {
            "profiles": rows,
            "fib": summary,
            "last_sync": self.last_fib_sync or None,  # null until the first sync
            "counters": fib.get("counters", {}),
        }

    def routes_snapshot(self) -> list[dict[str, Any]]:
        """``glbctl routes``: the RIB's per-prefix next hops / next-next hops, plus the kernel
        group each prefix points at and whether it matches what glbd wants."""
        rows = self.bgp.routes_snapshot() if self.bgp else []
        fib_routes = self.fib.snapshot().get("routes", {}) if self.fib else {}
        for r in rows:
            fr = fib_routes.get(r.get("prefix"))
            r["profile"] = self.table.profile_of(r["prefix"]) if self.table else None
            r["nhid"] = fr.get("installed_nhid") if fr else None
            r["weights"] = [
                {"next_hop": lab.split("@")[0], "ifname": lab.partition("@")[2], "installed": w}
                for lab, w in sorted((fr or {}).get("installed", {}).items())
            ]
            r["fib_diff"] = (
                bool(fr.get("diff"))
                if fr
                else (not r.get("originated") and bool(r.get("next_hops")))
            )
        return rows


_BFD_AUTH = {
    "simple": AuthType.SIMPLE_PASSWORD,
    "keyed-md5": AuthType.KEYED_MD5,
    "meticulous-keyed-md5": AuthType.METICULOUS_KEYED_MD5,
    "keyed-sha1": AuthType.KEYED_SHA1,
    "meticulous-keyed-sha1": AuthType.METICULOUS_KEYED_SHA1,
}


def heartbeat_keys(
    hb: cfgmod.HeartbeatSection,
) -> tuple[wire.HmacKey | None, dict[int, wire.HmacKey]]:
    """The key heartbeats are signed with and every key accepted, by key id (a rollover
    configures two)."""
    accept = {
        k.key_id: wire.HmacKey(k.key_id, k.secret.reveal())
        for k in hb.all_keys()
        if k.secret is not None
    }
    send = hb.send_key()
    return (None if send is None else accept.get(send.key_id)), accept


def _bfd_auth(a: cfgmod.BfdAuth | None) -> AuthConfig | None:
    if a is None or a.secret is None:
        return None
    accept = tuple((k.key_id, k.secret.reveal()) for k in a.accept if k.secret is not None)
    return AuthConfig(_BFD_AUTH[a.type], a.key_id, a.secret.reveal(), accept)


def _plain(v: Any) -> Any:
    if hasattr(v, "__dataclass_fields__"):
        return {k: _plain(getattr(v, k)) for k in v.__dataclass_fields__}
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple | set | frozenset):
        return [_plain(x) for x in v]
    if isinstance(v, int | float | str | bool) or v is None:
        return v
    return str(v)


class _ChangeSet:
    """Path-table changes accumulated between two FIB syncs, merged in place: a burst of
    10k prefix moves costs 10k set inserts, where merging frozen ``Changes`` copies the
    growing set each time."""

    def __init__(self) -> None:
        self.updated: set[str] = set()
        self.removed: set[str] = set()
        self.prefixes: set[str] = set()

    def add(self, ch: Changes) -> None:
        # the algebra of Changes.__or__: a later removal cancels an update and vice versa
        self.updated |= ch.updated
        self.updated -= ch.removed
        self.removed |= ch.removed
        self.removed -= ch.updated
        self.prefixes |= ch.prefixes

    def clear(self) -> None:
        self.updated, self.removed, self.prefixes = set(), set(), set()

    def take(self) -> Changes:
        ch = Changes(frozenset(self.updated), frozenset(self.removed), frozenset(self.prefixes))
        self.clear()
        return ch


class _Facade:
    """A part of the node as the daemon sees it."""

    def __init__(self, name: str, node: Node) -> None:
        self.name = name
        self.node = node

    async def start(self) -> None:
        await getattr(self.node, f"start_{self.name}")()

    async def stop(self) -> None:
        await getattr(self.node, f"stop_{self.name}")()

    async def reconfigure(self, new: cfgmod.Config, changes: dict[str, Any]) -> None:
        await getattr(self.node, f"reconfigure_{self.name}")(new, changes)

    def snapshot(self) -> dict[str, Any]:
        n = self.node
        if self.name == "bgp":
            return {**n.bgp.snapshot(), "routes": n.routes_snapshot()} if n.bgp else {}
        if self.name == "bfd":
            return n.bfd.snapshot() if n.bfd else {"sessions": []}
        if self.name == "quality":
            return n.quality_snapshot()
        return n.fib_snapshot()

    def section(self, key: str) -> Any:
        """One part of the snapshot, built alone where building everything is costly (the
        routes of a big RIB): ``neighbors``, ``routes`` and ``counters`` of bgp."""
        n = self.node
        if self.name == "bgp" and n.bgp is not None:
            if key == "neighbors":
                return n.bgp.neighbors_snapshot()
            if key == "routes":
                return n.routes_snapshot()
            if key == "counters":
                return {
                    **dict(n.bgp.rib.counters),
                    "rib_pending": n.bgp.rib.pending,
                    "api_lines": n.bgp.parser.decoded,
                    "api_dropped": dict(n.bgp.parser.dropped),
                }
        if self.name == "fib" and key == "counters":
            return n.fib.snapshot().get("counters", {}) if n.fib else {}
        return self.snapshot().get(key)

    def samples(self) -> Iterable[Sample]:
        """Prometheus samples, derived from the same snapshot glbctl shows."""
        try:
            return list(_SAMPLERS[self.name](self.snapshot()))
        except Exception as e:  # a scrape must never break on one part's odd state
            log.warning("metrics_samples_failed", component=self.name, error=repr(e))
            return []


def _bfd_samples(snap: dict[str, Any]) -> Iterable[Sample]:
    for s in snap.get("sessions", []):
        lab = {"peer": str(s.get("peer")), "interface": str(s.get("interface"))}
        yield Sample(
            "glbd_bfd_up",
            1.0 if s.get("state") == "up" else 0.0,
            lab,
            "BFD session state is Up (1) or not (0)",
        )
        yield Sample(
            "glbd_bfd_flaps_total",
            float(s.get("flaps", 0)),
            lab,
            "BFD Up->Down transitions",
            kind="counter",
        )
        yield Sample(
            "glbd_bfd_detect_time_seconds",
            float(s.get("detect_time_ms") or 0) / 1e3,
            lab,
            "negotiated BFD detection time",
        )
        for reason, n in (s.get("drops") or {}).items():
            yield Sample(
                "glbd_bfd_drops_total",
                float(n),
                {**lab, "reason": str(reason)},
                "BFD packets dropped, by reason",
                kind="counter",
            )
    # drops before any session matched: their own metric, labelled by reason only, since there
    # is no peer to attribute them to (the source address is the sender's to choose), and
    # glbd_bfd_drops_total keeps one label set (peer, interface, reason)
    counters = snap.get("counters") or {}
    for reason, n in (counters.get("unmatched_drops") or {}).items():
        yield Sample(
            "glbd_bfd_unmatched_drops_total",
            float(n),
            {"reason": str(reason)},
            "BFD packets dropped before any session matched them, by reason",
            kind="counter",
        )
    if counters:
        yield Sample(
            "glbd_bfd_truncated_datagrams_total",
            float(counters.get("truncated_datagrams", 0)),
            help="BFD datagrams longer than a control packet can be (read up to 256 bytes, "
            "processed)",
            kind="counter",
        )
    eng = snap.get("engine", {})
    if eng:
        yield Sample(
            "glbd_bfd_timer_lag_max_seconds",
            float(eng.get("timer_lag_max_ms", 0)) / 1e3,
            help="max lateness of a BFD transmit/expiry timer",
        )


def _quality_samples(snap: dict[str, Any]) -> Iterable[Sample]:
    for q in snap.get("links", []):
        lab = {"ifname": str(q.get("ifname"))}
        yield Sample("glbd_link_band", float(q.get("band", 0)), lab, "link quality band 0..7")
        yield Sample("glbd_link_down", 1.0 if q.get("down") else 0.0, lab, "link down flag")
        yield Sample(
            "glbd_link_load_percent",
            float(q.get("load_pct", 0)),
            lab,
            "EWMA egress load, percent of capacity",
        )
        yield Sample(
            "glbd_link_queue_bytes", float(q.get("queue_bytes", 0)), lab, "EWMA qdisc backlog"
        )
        res, cap = q.get("residual_mbps"), q.get("capacity_mbps", 0)
        yield Sample(
            "glbd_link_reported_capacity_mbps",
            float(cap if res is None else res),
            lab,
            "capacity the heartbeats report: the residual when foreign_classes are set",
        )
    for hb in snap.get("heartbeats", []):
        rx = hb.get("receiver") or {}
        yield Sample(
            "glbd_heartbeats_accepted_total",
            float(rx.get("accepted", 0)),
            help="heartbeats accepted",
            kind="counter",
        )
        for reason, n in (rx.get("drops") or {}).items():
            yield Sample(
                "glbd_heartbeat_drops_total",
                float(n),
                {"reason": str(reason)},
                "heartbeats dropped, by reason",
                kind="counter",
            )
        for sd in rx.get("senders", []):
            yield Sample(
                "glbd_heartbeat_age_seconds",
                float(sd.get("age_ms") or 0) / 1e3,
                {"sender": str(sd.get("node_id"))},
                "age of the last heartbeat",
            )
        tx = hb.get("sender") or {}
        if tx:
            yield Sample(
                "glbd_heartbeats_sent_total",
                float(tx.get("sent", 0)),
                help="heartbeats sent",
                kind="counter",
            )
    for k, v in snap.get("counters", {}).items():
        yield Sample(f"glbd_{k}_total", float(v), help=f"glbd {k}", kind="counter")


def _fib_samples(snap: dict[str, Any]) -> Iterable[Sample]:
    for p in snap.get("profiles") or []:
        for w in p.get("weights", []):
            yield Sample(
                "glbd_weight",
                float(w.get("value", 0)),
                {
                    "profile": str(p.get("key")),
                    "next_hop": str(w.get("next_hop")),
                    "source": str(w.get("source")),
                },
                "desired ECMP weight per profile",
            )
            yield Sample(
                "glbd_weight_installed",
                float(w.get("installed", 0)),
                {"profile": str(p.get("key")), "next_hop": str(w.get("next_hop"))},
                "weight in the kernel's nexthop group",
            )
        yield Sample(
            "glbd_profile_fib_diff",
            1.0 if p.get("diff") else 0.0,
            {"profile": str(p.get("key"))},
            "kernel group differs from what glbd programs (1) or not (0)",
        )
    fib = snap.get("fib") or {}
    yield Sample(
        "glbd_fib_foreign_routes",
        float(len(fib.get("foreign_routes") or [])),
        help="prefixes glbd wants that another protocol's route holds (left alone)",
    )
    for reason, n in (fib.get("conflicts") or {}).items():
        yield Sample(
            "glbd_fib_conflicts_total",
            float(n),
            {"reason": str(reason)},
            "FIB writes left out because the object is not glbd's, by reason",
            kind="counter",
        )
    for kind, n in (fib.get("stale_held") or {}).items():
        yield Sample(
            "glbd_fib_stale_held",
            float(n),
            {"kind": str(kind)},
            "adopted objects not re-learned since the restart, kept by the stale timer",
        )


def _bgp_samples(snap: dict[str, Any]) -> Iterable[Sample]:
    for n in snap.get("neighbors", []):
        lab = {"peer": str(n.get("peer"))}
        yield Sample(
            "glbd_bgp_peer_up",
            1.0 if n.get("state") == "up" else 0.0,
            lab,
            "BGP session established",
        )
        yield Sample(
            "glbd_bgp_prefixes_in", float(n.get("prefixes_in", 0)), lab, "prefixes received"
        )
    for reason, n in (snap.get("counters", {}).get("api_dropped") or {}).items():
        yield Sample(
            "glbd_exabgp_api_drops_total",
            float(n),
            {"reason": str(reason)},
            "malformed ExaBGP API lines",
            kind="counter",
        )


_SAMPLERS = {
    "bfd": _bfd_samples,
    "quality": _quality_samples,
    "fib": _fib_samples,
    "bgp": _bgp_samples,
}


def build_components(d: Daemon) -> list[Component]:
    if os.environ.get("GLBD_TEST_NO_COMPONENTS") == "1":  # lifecycle tests of the bare daemon
        return []
    node = Node(d)
    d.node = node  # type: ignore[attr-defined]
    return [_Facade(name, node) for name in ("fib", "quality", "bfd", "bgp")]
