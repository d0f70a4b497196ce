"""The BGP service the daemon composes: supervised ExaBGP + the pure Clos RIB.

Usage::

    from glbd.bgp.speaker import BgpSpeaker
    from glbd.bgp.ribtypes import NeighborParams, RibParams, Role

    params = RibParams(
        router_id=IPv4Address("10.0.0.11"), local_as=65100, role=Role.HELPER,
        neighbors=(NeighborParams(ip_address("172.16.11.1"), 65001,
                                  ip_address("172.16.11.2"), interface="s1-l1"),),
        originated=(ip_network("10.11.0.0/24"),),
    )
    speaker = BgpSpeaker(params, netns=None, on_event=handle)   # handle(BgpEvent) -> None
    await speaker.start()
    ...
    speaker.peer_bfd_down(ip_address("172.16.11.1"))           # from the BFD engine
    speaker.neighbors_snapshot(); speaker.routes_snapshot()    # glbctl neighbors / routes
    await speaker.stop()                                       # withdraw, stop ExaBGP

Events passed to ``on_event`` (all frozen dataclasses): :class:`glbd.bgp.ribtypes.PeerUp`,
:class:`glbd.bgp.ribtypes.PeerDown`, :class:`glbd.bgp.ribtypes.NextHopsChanged` (per prefix:
the forwarding next hops with their validated NNH sets; empty = unreachable),
:class:`glbd.bgp.ribtypes.StaleTimerExpired`,
:class:`SpeakerLost` (ExaBGP died: keep the FIB as it is; paths are stale until refreshed or
the stale timer) and :class:`SpeakerReady` (ExaBGP (re)started and connected).

The RIB's decisions (:class:`glbd.bgp.ribtypes.Advertise`, ``Retract``, ``ResetPeer``) become
ExaBGP API commands here (:func:`command_for`); the RIB knows nothing of the speaker's transport.
"""

from __future__ import annotations

import asyncio
import ipaddress
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import structlog

from glbd.base.reasons import ResetReason
from glbd.bgp import exabgp_api as api
from glbd.bgp.exabgp import ExabgpNeighbor, ExabgpParams, ExabgpSupervisor
from glbd.bgp.rib import Rib
from glbd.bgp.ribtypes import (
    Advertise,
    Connected,
    Decision,
    Effect,
    NextHopsChanged,
    PeerDown,
    PeerUp,
    ResetPeer,
    Retract,
    RibParams,
    StaleTimerExpired,
)
from glbd.daemon.netns import in_netns
from glbd.netlink import const as c
from glbd.netlink.codec import IfAddrMsg, IfInfoMsg
from glbd.netlink.ifwatch import dump_links_and_addresses

__all__ = [
    "BgpEvent",
    "BgpSpeaker",
    "NextHopsChanged",
    "PeerDown",
    "PeerUp",
    "ProcessOptions",
    "SpeakerLost",
    "SpeakerReady",
    "StaleTimerExpired",
    "command_for",
]

log = structlog.get_logger(__name__)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Prefix = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class SpeakerLost:
    """ExaBGP died. Forwarding must stay as it is; the RIB keeps the paths as stale."""

    generation: int


@dataclass(frozen=True)
class SpeakerReady:
    generation: int


BgpEvent = PeerUp | PeerDown | NextHopsChanged | StaleTimerExpired | SpeakerLost | SpeakerReady

#: Cease subcodes (RFC 4486, RFC 9384) by why the RIB resets a session
_CEASE_SUBCODE = {ResetReason.BFD_DOWN: 10, ResetReason.MAX_PREFIXES: 1}
#: how long a max_prefixes hold waits for ExaBGP to report the session down before it
#: reloads the neighbor out anyway (s)
HELD_CLOSE_WAIT_S = 2.0
#: how long ``glbctl neighbor-shutdown`` waits for ExaBGP to take the withdrawals before it
#: closes the session anyway (s)
SHUTDOWN_WITHDRAW_WAIT_S = 2.0


async def read_connected(netns: str | None = None) -> list[Connected]:
    """Every interface address in ``netns`` with the subnet it reaches on-link (a point-to-point
    address: its peer's)."""
    links, addrs = await dump_links_and_addresses(netns)
    names: dict[int, str] = {}
    for m in links:
        name = m.attr(c.IFLA_IFNAME)
        if isinstance(m.header, IfInfoMsg) and name is not None:
            names[m.header.index] = name.as_str()
    out: list[Connected] = []
    for m in addrs:
        h = m.header
        if not isinstance(h, IfAddrMsg) or h.index not in names:
            continue
        remote = m.attr(c.IFA_ADDRESS)
        local = m.attr(c.IFA_LOCAL) or remote
        if local is None:
            continue
        own, on_link = local.as_addr(), (remote or local).as_addr()
        net = ipaddress.ip_network(f"{on_link}/{h.prefixlen}", strict=False)
        out.append(Connected(names[h.index], own, net))
    return out


def command_for(d: Decision) -> api.Command:
    """The ExaBGP API command that carries out one RIB decision."""
    if isinstance(d, Advertise):
        return api.Announce(
            d.peer,
            d.prefix,
            d.next_hop,
            as_path=d.as_path,
            origin=d.origin,
            communities=d.communities,
            nhc=d.nhc,
            colours=d.colours,
            aigp=d.aigp,
        )
    if isinstance(d, Retract):
        return api.Withdraw(d.peer, d.prefix, d.next_hop)
    return api.Teardown(d.peer, _CEASE_SUBCODE[d.reason])


def _eor_families(families: Iterable[str]) -> list[str]:
    """ExaBGP's names ("ipv4 unicast") of the unicast families of an OPEN ("ipv4/unicast");
    IPv4 unicast when the OPEN had no multiprotocol capability (RFC 4760)."""
    out = [f.replace("/", " ") for f in families if f in ("ipv4/unicast", "ipv6/unicast")]
    return out or ([] if families else ["ipv4 unicast"])


def _md5_reason(reason: str, kernel: dict[str, int]) -> str:
    counts = ", ".join(f"{k} {v}" for k, v in kernel.items())
    hint = MD5_HINT + (f"; kernel now: {counts}" if counts else "")
    return f"{reason}; {hint}" if reason else hint


@dataclass(frozen=True)
class ProcessOptions:
    """How ExaBGP is run (defaults fit production)."""

    exabgp: tuple[str, ...] = ()
    runtime_dir: Path | None = None
    window: int = 64
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0
    stop_grace_s: float = 5.0
    drain_timeout_s: float = 5.0
    exabgp_log_level: str = "WARNING"
    #: a TCP MD5 session not up this long (after ExaBGP (re)started or reloaded, or after it
    #: went down) is logged once (``bgp_session_not_established``) with the kernel's MD5 counters
    md5_hint_after_s: float = 30.0
    #: ExaBGP listens on [::]:179 (the only way it can accept a link-local session) even
    #: when no link-local neighbor is known yet at start; also on with one at start
    listen_link_local: bool = False
    #: ExaBGP hands received messages over raw (``ExabgpParams.raw_messages``)
    raw_messages: bool = True


#: the kernel's TCP MD5 counters (``nstat``: TcpExtTCPMD5NotFound, ...): a segment without the
#: signature we expect, a signature we do not expect, a signature that does not verify
MD5_COUNTERS = ("TCPMD5NotFound", "TCPMD5Unexpected", "TCPMD5Failure")

MD5_HINT = (
    "TCP MD5 is configured: the kernel drops segments whose signature is missing or wrong "
    "without a word to BGP, so a key mismatch shows only as a session that never comes up "
    "(check both keys; nstat -az TcpExtTCPMD5Failure TcpExtTCPMD5NotFound TcpExtTCPMD5Unexpected)"
)


def tcp_md5_counters(netns: str | None = None) -> dict[str, int]:
    """The kernel's TCP MD5 drop counters in ``netns`` (``/proc/net/netstat``, per namespace);
    {} if unreadable."""
    try:
        with in_netns(netns), open("/proc/thread-self/net/netstat") as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if names.startswith("TcpExt:") and values.startswith("TcpExt:"):
            row = dict(zip(names.split()[1:], values.split()[1:], strict=False))
            return {k: int(row[k]) for k in MD5_COUNTERS if k in row}
    return {}


class BgpSpeaker:
    name = "bgp"

    def __init__(
        self,
        params: RibParams,
        *,
        netns: str | None = None,
        on_event: Callable[[BgpEvent], None] | None = None,
        process: ProcessOptions = ProcessOptions(),
    ) -> None:
        self.params = params
        self.netns = netns
        self._on_event = on_event or (lambda ev: None)
        self.process = process
        # ExaBGP reads its listening addresses once, at start
        self._listen_any6 = process.listen_link_local or any(n.unnumbered for n in params.neighbors)
        self.rib = Rib(params)
        #: drained (``set_drain``); a later ``reconfigure`` keeps it: the caller decides it
        #: from the config and ``glbctl drain``
        self._drain = params.drain
        #: neighbors held down after a max_prefixes teardown, until (``_now`` time): left out
        #: of ExaBGP's config meanwhile, so it does not reconnect to them
        self._held: dict[IPAddress, float] = {}
        #: held neighbors whose session ExaBGP has not reported down since their teardown
        self._held_closing: dict[IPAddress, asyncio.Future[None]] = {}
        self._held_timer: asyncio.TimerHandle | None = None
        self._held_tasks: set[asyncio.Task[None]] = set()
        #: neighbors shut down by ``glbctl neighbor-shutdown``: out of ExaBGP's config too
        self._shut: set[IPAddress] = set()
        self.rib.initial_decisions()  # fills Adj-RIB-Out; sent when ExaBGP is ready
        self.parser = api.ApiParser()
        self.supervisor = ExabgpSupervisor(
            self.exabgp_params(),
            netns=netns,
            on_line=self._on_line,
            on_lost=self._on_lost,
            on_ready=self._on_ready,
            on_error=self._on_command_error,
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._armed_for: float | None = None
        self._md5_check: asyncio.TimerHandle | None = None
        #: TCP MD5 sessions not up, since when (``_check_md5``)
        self._md5_down_since: dict[IPAddress, float] = {}
        self.events_emitted = 0
        #: graceful restart: the families of each peer's OPEN, and the established peers
        #: still owed our End-of-RIB (ExaBGP runs with manual-eor), since when
        self._families: dict[IPAddress, tuple[str, ...]] = {}
        self._eor_owed: dict[IPAddress, float] = {}
        #: peers this ExaBGP process has established a session with: ExaBGP sets the Restart
        #: State bit only on the first, and only then does our End-of-RIB wait (RFC 4724 §4.1)
        self._established_once: set[IPAddress] = set()
        self._eor_check: asyncio.TimerHandle | None = None
        #: neighbors a route command failed for: ExaBGP did not know them yet (a neighbor
        #: added by a reload the commands overtook); their Adj-RIB-Out is sent again when
        #: the session comes up, which ExaBGP reports only for a neighbor it knows
        self._unsynced: set[IPAddress] = set()

    # ---- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._arm()
        await self.refresh_connected()
        await self.supervisor.start()

    async def refresh_connected(self) -> None:
        """Read this namespace's interface addresses and give them to the RIB's next-hop check
        (:meth:`glbd.bgp.rib.Rib.set_connected`). At start and whenever the caller learns the
        addresses changed; a failed read keeps what the RIB had (logged)."""
        try:
            rows = await read_connected(self.netns)
        except (OSError, ValueError) as e:
            log.warning("bgp_connected_unknown", error=str(e))
            return
        self.rib.set_connected(rows)

    async def stop(self, keep: Collection[IPAddress] = ()) -> None:
        """Withdraw everything glbd announces, wait for the acks, stop ExaBGP. ``keep``: the
        sessions of a graceful restart: nothing withdrawn toward them, and ExaBGP is killed
        (SIGKILL) once the others' withdrawals are acknowledged, so its kernel closes every
        session without a NOTIFICATION (with a NOTIFICATION the peer would not keep the
        routes: RFC 4724 §4.2)."""
        for peer, st in self.rib.peers.items():
            if peer in keep:
                continue
            for prefix, adv in list(st.adj_out.items()):
                self.supervisor.send(api.Withdraw(adv.peer, prefix, adv.next_hop))
        await self.supervisor.stop(kill=bool(keep))
        if self._md5_check is not None:
            self._md5_check.cancel()
            self._md5_check = None
        if self._eor_check is not None:
            self._eor_check.cancel()
            self._eor_check = None
        if self._held_timer is not None:
            self._held_timer.cancel()
            self._held_timer = None
        self._loop = None
        self._arm()

    def gr_sessions(self) -> dict[IPAddress, bool]:
        """The sessions that are up -> whether the peer's OPEN offered graceful restart (with
        our own capability, ``restart_capability``, it is negotiated)."""
        return {p: st.gr is not None for p, st in self.rib.peers.items() if st.state == "up"}

    # ---- inputs from other components --------------------------------------------------

    def peer_bfd_down(self, peer: IPAddress) -> None:
        self._apply(self.rib.peer_bfd_down(peer, self._now()))

    def peer_bfd_up(self, peer: IPAddress) -> None:
        self._apply(self.rib.peer_bfd_up(peer, self._now()))

    def peer_bfd_admin_down(self, peer: IPAddress) -> None:
        self._apply(self.rib.peer_bfd_admin_down(peer, self._now()))

    def set_originated(self, prefixes: Iterable[Prefix]) -> None:
        self._apply(self.rib.set_originated(prefixes))

    def set_drain(self, drain: bool) -> None:
        """Drain (RFC 8326 graceful shutdown) or undrain: everything advertised is sent again
        with (without) GRACEFUL_SHUTDOWN and the extra prepends; sessions stay up."""
        self._drain = drain
        self._apply(self.rib.set_drain(drain))

    @property
    def drained(self) -> bool:
        return self.rib.drained

    # ---- one neighbor (glbctl) ---------------------------------------------------------

    def set_peer_drain(self, peer: IPAddress, drain: bool) -> None:
        """Drain (undrain) one neighbor: see :meth:`glbd.bgp.rib.Rib.set_peer_drain`."""
        self._apply(self.rib.set_peer_drain(peer, drain))

    def shutdown_peer(self, peer: IPAddress) -> None:
        """Close the session and keep it closed until :meth:`enable_peer` or a restart. The
        RIB takes the neighbor down now, so its routes leave forwarding at once; everything
        advertised to it is withdrawn first, then ExaBGP's config leaves it out (the reload
        closes the session). The withdrawals come first because where graceful restart was
        negotiated ExaBGP closes without a NOTIFICATION and the peer would keep our routes,
        stale, for the restart time."""
        if peer not in self.rib.peers or peer in self._shut:
            return
        self._shut.add(peer)
        for prefix, adv in list(self.rib.peers[peer].adj_out.items()):
            self.supervisor.send(api.Withdraw(adv.peer, prefix, adv.next_hop))
        self._apply(self.rib.peer_shutdown(peer, self._now()))
        if self._loop is None:
            self.supervisor.reload(self.exabgp_params())
            return
        task = self._loop.create_task(self._close_when_withdrawn())
        self._held_tasks.add(task)
        task.add_done_callback(self._held_tasks.discard)

    async def _close_when_withdrawn(self) -> None:
        await self.supervisor.drain(SHUTDOWN_WITHDRAW_WAIT_S)
        self.supervisor.reload(self.exabgp_params())

    def enable_peer(self, peer: IPAddress) -> None:
        """Undo :meth:`shutdown_peer`: ExaBGP lists the neighbor again, with what glbd
        advertises to it (ExaBGP dropped those routes with the neighbor)."""
        if peer not in self._shut:
            return
        self._shut.discard(peer)
        self.supervisor.reload(self.exabgp_params())
        self._send_adj_out(peer)

    def is_shut(self, peer: IPAddress) -> bool:
        return peer in self._shut

    def reset_peer(self, peer: IPAddress, soft: bool = False) -> None:
        """Hard: close the session (Cease 4, Administrative Reset); ExaBGP opens it again.
        Soft: no session change: ask the peer for its routes again (route refresh: they come
        through the import policy in force) and send it everything glbd advertises again."""
        if peer not in self.rib.peers:
            return
        if not soft:
            self.supervisor.send(api.Teardown(peer, 4))
            return
        for family in _eor_families(self._families.get(peer, ())):
            self.supervisor.send(api.RouteRefresh(peer, family))
        self.supervisor.send(api.FlushAdjRibOut(peer))

    def reconfigure(self, params: RibParams) -> None:
        """Apply a new config without a restart: originated prefixes and multipath knobs take
        effect at once; added, removed or redefined neighbors make ExaBGP reload its config
        (sessions to unchanged neighbors stay up) and get their Adj-RIB-Out replayed.
        ``router_id``, ``local_as`` and ``role`` need a restart (ValueError). The drain state
        stays as ``set_drain`` left it."""
        params = replace(params, drain=self._drain)
        self._shut &= {n.address for n in params.neighbors}  # a neighbor added again starts up
        effects, touched = self.rib.reconfigure(params)
        neighbors_changed = {n.address: n for n in params.neighbors} != {
            n.address: n for n in self.params.neighbors
        } or (params.restart_capability, params.restart_time_s) != (
            self.params.restart_capability,
            self.params.restart_time_s,
        )
        self.params = params
        if neighbors_changed:
            self.supervisor.reload(self.exabgp_params())
            self._watch_md5()
        self._apply(effects)
        for addr in touched:
            self._send_adj_out(addr)

    # ---- views -------------------------------------------------------------------------

    def neighbors_snapshot(self) -> list[dict[str, Any]]:
        """``glbctl neighbors``: a TCP MD5 session that is not up says why it may not be; a
        neighbor shut down by glbctl is in state ``shutdown``."""
        rows = self.rib.neighbors_snapshot(self._now())
        for r in rows if self._shut else ():
            if ipaddress.ip_address(r["peer"]) in self._shut:
                r["state"] = "shutdown"
        if any(r["tcp_md5"] and r["state"] != "up" for r in rows):
            kernel = tcp_md5_counters(self.netns)
            for r in rows:
                if r["tcp_md5"] and r["state"] != "up":
                    r["last_down_reason"] = _md5_reason(r["last_down_reason"], kernel)
        return rows

    def routes_snapshot(self) -> list[dict[str, Any]]:
        return self.rib.routes_snapshot()

    def snapshot(self) -> dict[str, Any]:
        return {
            "neighbors": self.neighbors_snapshot(),
            "routes": self.routes_snapshot(),
            "exabgp": self.supervisor.snapshot(),
            "drained": self.drained,
            "counters": {
                **dict(self.rib.counters),
                "rib_pending": self.rib.pending,
                "api_lines": self.parser.decoded,
                "api_dropped": dict(self.parser.dropped),
            },
        }

    def exabgp_params(self) -> ExabgpParams:
        """ExaBGP's configuration for the current :attr:`params` (what the supervisor runs)."""
        p = self.params
        return ExabgpParams(
            router_id=str(p.router_id),
            local_as=p.local_as,
            neighbors=tuple(
                ExabgpNeighbor(
                    str(n.address),
                    str(n.local_address),
                    n.remote_as,
                    n.hold_time,
                    n.is_passive,
                    md5=n.tcp_md5,
                    restart_time=p.restart_time_s if p.restart_capability else None,
                    interface=n.interface if n.unnumbered else None,
                    families=tuple(f"ipv{v}" for v in sorted(n.families)),
                )
                for n in p.neighbors
                if n.address not in self._held and n.address not in self._shut
            ),
            exabgp=self.process.exabgp,
            runtime_dir=self.process.runtime_dir,
            window=self.process.window,
            backoff_initial_s=self.process.backoff_initial_s,
            backoff_max_s=self.process.backoff_max_s,
            stop_grace_s=self.process.stop_grace_s,
            drain_timeout_s=self.process.drain_timeout_s,
            log_level=self.process.exabgp_log_level,
            listen_any6=self._listen_any6,
            raw_messages=self.process.raw_messages,
        )

    # ---- internals ---------------------------------------------------------------------

    def _not_external(self, ev: api.OpenEvent) -> bool:
        """A ``remote_as = "external"`` neighbor (ExaBGP's ``peer-as auto``) that opened with
        our own AS: closed (Cease 5, connection rejected), counted and logged."""
        n = next((n for n in self.params.neighbors if n.address == ev.peer), None)
        if n is None or n.remote_as is not None or ev.asn != self.params.local_as:
            return False
        self.rib.counters["peer_as_not_external"] += 1
        log.warning("bgp_peer_as_rejected", peer=str(ev.peer), asn=ev.asn, expected="external")
        self.supervisor.send(api.Teardown(ev.peer, 5))
        return True

    @staticmethod
    def _now() -> float:
        return time.monotonic()

    def _on_line(self, line: str) -> None:
        ev = self.parser.feed(line)
        if ev is None:
            log.warning("exabgp_line_dropped", error=self.parser.last_error)
            return
        now = self._now()
        if isinstance(ev, api.OpenEvent):
            if ev.direction == "receive":
                if self._not_external(ev):
                    return
                self._families[ev.peer] = ev.families
                self._apply(self.rib.on_open(ev.peer, ev.router_id, ev.graceful_restart))
        elif isinstance(ev, api.StateEvent):
            if ev.state in ("up", "down"):
                log.info("bgp_peer_state", peer=str(ev.peer), state=ev.state, reason=ev.reason)
            self._apply(self.rib.on_state(ev.peer, ev.state, now, ev.reason))
            if ev.state == "down":  # a key changed on one side shows as no come-back
                closing = self._held_closing.pop(ev.peer, None)
                if closing is not None and not closing.done():
                    closing.set_result(None)
                self._watch_md5((ev.peer,))
                self._eor_owed.pop(ev.peer, None)
            elif ev.state == "up":
                self._md5_down_since.pop(ev.peer, None)
                self._replay_unsynced(ev.peer)
                if self.params.restart_capability and ev.peer in self.rib.peers:
                    restarting = ev.peer not in self._established_once
                    self._established_once.add(ev.peer)
                    # a reconnection (no R bit) never waits: two routers that both waited
                    # for the other's End-of-RIB would only send theirs at the time limit
                    self._eor_owed[ev.peer] = now if restarting else float("-inf")
                    self._send_eors()
        elif isinstance(ev, api.UpdateEvent):
            self._apply(self.rib.on_update(ev, now))
        elif isinstance(ev, api.NotificationEvent):
            log.info(
                "bgp_notification",
                peer=str(ev.peer),
                direction=ev.direction,
                code=ev.code,
                subcode=ev.subcode,
            )
            self._apply(self.rib.on_notification(ev))

    def _on_command_error(self, cmd: api.Command) -> None:
        # a teardown or a soft reset for a session that is not up changes no Adj-RIB-Out
        resets = api.Teardown | api.RouteRefresh | api.FlushAdjRibOut
        if isinstance(cmd, resets) or cmd.neighbor not in self.rib.peers:
            return
        self._unsynced.add(cmd.neighbor)

    def _replay_unsynced(self, peer: IPAddress) -> None:
        """Send ``peer`` its Adj-RIB-Out again if a command for it failed (queued before the
        End-of-RIB the caller may send next); ExaBGP ignores a route it already has."""
        if peer not in self._unsynced:
            return
        self._unsynced.discard(peer)
        st = self.rib.peers.get(peer)
        if st is None:
            return
        st.counters["adj_out_replays"] += 1
        log.info("bgp_adj_rib_out_replayed", peer=str(peer), routes=len(st.adj_out))
        self._send_adj_out(peer)

    def _send_adj_out(self, peer: IPAddress) -> None:
        """Queue everything glbd advertises to ``peer`` (ExaBGP ignores a route it has)."""
        st = self.rib.peers.get(peer)
        for adv in st.adj_out.values() if st is not None else ():
            self.supervisor.send(command_for(adv))

    def _on_lost(self) -> None:
        self._unsynced.clear()
        self._eor_owed.clear()
        self._established_once.clear()
        self._apply(self.rib.speaker_lost(self._now()))
        self._emit(SpeakerLost(self.supervisor.generation))

    def _on_ready(self) -> None:
        for adv in self.rib.adj_rib_out():
            self.supervisor.send(command_for(adv))
        self._watch_md5()
        self._emit(SpeakerReady(self.supervisor.generation))

    def _watch_md5(self, peers: Iterable[IPAddress] | None = None) -> None:
        """Start timing the TCP MD5 sessions of ``peers`` (default: all) that are not up; one
        still not up ``md5_hint_after_s`` later is logged once (until it comes up)."""
        now = self._now()
        for st in self.rib.peers.values():
            if st.params.tcp_md5 is None or st.state == "up":
                continue
            if peers is None or st.params.address in peers:
                self._md5_down_since.setdefault(st.params.address, now)
        self._arm_md5_check()

    def _arm_md5_check(self) -> None:
        if self._md5_check is not None or self._loop is None or not self._md5_down_since:
            return
        due = min(self._md5_down_since.values()) + self.process.md5_hint_after_s
        self._md5_check = self._loop.call_later(max(0.0, due - self._now()), self._check_md5)

    def _check_md5(self) -> None:
        """Log each TCP MD5 session not up for ``md5_hint_after_s``: a key mismatch is otherwise
        silent (the kernel drops the segments; ExaBGP only sees timeouts)."""
        self._md5_check = None
        now = self._now()
        late = []
        for addr, since in list(self._md5_down_since.items()):
            st = self.rib.peers.get(addr)
            if st is None or st.state == "up" or st.params.tcp_md5 is None:
                del self._md5_down_since[addr]
            elif now - since >= self.process.md5_hint_after_s:
                del self._md5_down_since[addr]  # logged once per episode
                late.append((st, now - since))
        if late:
            kernel = tcp_md5_counters(self.netns)
            for st, for_s in late:
                log.warning(
                    "bgp_session_not_established",
                    peer=str(st.params.address),
                    state=st.state,
                    tcp_md5=True,
                    for_s=round(for_s, 1),
                    hint=MD5_HINT,
                    **{f"kernel_{k.lower()}": v for k, v in kernel.items()},
                )
        self._arm_md5_check()

    def _apply(self, effects: list[Effect]) -> None:
        held: list[IPAddress] = []
        for e in effects:
            if isinstance(e, Advertise | Retract | ResetPeer):
                self.supervisor.send(command_for(e))
                if (
                    isinstance(e, ResetPeer)
                    and e.reason is ResetReason.MAX_PREFIXES
                    and self._hold(e.peer)
                ):
                    held.append(e.peer)
            else:
                self._emit(e)
        if held:
            # the config leaves them out before their Cease can go out: a reload ExaBGP takes
            # after it, however soon, never brings them back
            self.supervisor.write_config(self.exabgp_params())
        if held and self._loop is not None:
            for p in held:
                self._held_closing[p] = self._loop.create_future()
            task = self._loop.create_task(self._reload_held(held))
            self._held_tasks.add(task)
            task.add_done_callback(self._held_tasks.discard)
        self._arm()
        if self._eor_owed:
            self._send_eors()

    def _hold(self, peer: IPAddress) -> bool:
        """A max_prefixes teardown: keep ``peer`` out of ExaBGP's config until the RIB's
        restart time for it (ExaBGP would reconnect at once, and the RIB close it again).
        Between the Cease and the reload that removes it, glbd's ExaBGP launcher keeps the
        peer down (:mod:`glbd.bgp.exabgp_launch`: a Cease/1 teardown does not restart)."""
        st = self.rib.peers.get(peer)
        if st is None or st.held_until is None or peer in self._held:
            return False
        self._held[peer] = st.held_until
        return True

    async def _reload_held(self, peers: list[IPAddress]) -> None:
        """After the Cease has gone out: reload ExaBGP without the held neighbors (the config
        already leaves them out), and arm their release. ExaBGP acknowledges a teardown when it
        takes the command and sends the NOTIFICATION on a later turn, so the reload also waits
        for each session's down (an ExaBGP without glbd's launcher closes a neighbor removed
        first without its Cease/1, and reconnects to one removed late)."""
        await self.supervisor.drain(self.process.drain_timeout_s)
        closing = [f for p in peers if (f := self._held_closing.get(p)) is not None]
        if closing:
            await asyncio.wait(closing, timeout=HELD_CLOSE_WAIT_S)
        for p in peers:
            self._held_closing.pop(p, None)
        if self._loop is None:
            return
        self.supervisor.reload(self.exabgp_params())
        self._arm_held()

    def _arm_held(self) -> None:
        if self._held_timer is not None:
            self._held_timer.cancel()
            self._held_timer = None
        if self._held and self._loop is not None:
            delay = max(0.0, min(self._held.values()) - self._now())
            self._held_timer = self._loop.call_later(delay, self._release_held)

    def _release_held(self) -> None:
        """Held neighbors whose restart time is over go back into ExaBGP's config, with the
        routes glbd advertises to them (ExaBGP dropped them with the neighbor)."""
        self._held_timer = None
        now = self._now()
        done = [p for p, until in self._held.items() if until <= now]
        for p in done:
            del self._held[p]
        if done:
            log.info("bgp_max_prefixes_released", peers=[str(p) for p in done])
            self.supervisor.reload(self.exabgp_params())
            for p in done:
                self._send_adj_out(p)
        self._arm_held()

    def _send_eors(self) -> None:
        """Send End-of-RIB to the peers owed one: after a reconnection at once; after our
        restart (the first session of this ExaBGP) once the RIB has its peers' routes
        (``Rib.converged``) or ``restart_time_s`` after the session came up. Queued after
        every route already queued, so the peer sweeps only what glbd no longer advertises."""
        now = self._now()
        limit = self.params.restart_time_s
        due = [p for p, since in self._eor_owed.items() if now - since >= limit]
        if self.rib.converged():
            due = list(self._eor_owed)
        for peer in due:
            del self._eor_owed[peer]
            families = _eor_families(self._families.get(peer, ()))
            for family in families:
                self.supervisor.send(api.EndOfRib(peer, family))
            st = self.rib.peers.get(peer)
            if st is not None:
                st.counters["eor_out"] += len(families)
            log.info("bgp_eor_sent", peer=str(peer), families=families)
        if self._eor_check is not None:
            self._eor_check.cancel()
            self._eor_check = None
        if self._eor_owed and self._loop is not None:
            first = min(self._eor_owed.values()) + limit
            self._eor_check = self._loop.call_later(max(0.0, first - now), self._send_eors)

    def _emit(self, ev: BgpEvent) -> None:
        self.events_emitted += 1
        try:
            self._on_event(ev)
        except Exception:
            log.exception("bgp_event_handler_failed", event=type(ev).__name__)

    def _arm(self) -> None:
        """One loop timer, re-armed at the RIB's next deadline after every change (none once
        stopped). A deadline already due runs on the next loop iteration, after pending I/O,
        so a big coalesced batch selected in slices lets I/O run between slices."""
        deadline = self.rib.next_deadline() if self._loop is not None else None
        if self._timer is not None:
            if deadline == self._armed_for:
                return  # the common case: an UPDATE that did not move the deadline
            self._timer.cancel()
            self._timer = None
        self._armed_for = deadline
        if self._loop is None or deadline is None:
            return
        at = self._loop.time() + max(0.0, deadline - self._now())
        self._timer = self._loop.call_at(at, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._apply(self.rib.on_timer(self._now()))
