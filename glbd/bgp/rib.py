"""Clos RIB (pure): Adj-RIB-In per peer, multipath selection, Adj-RIB-Out with next-hop-self,
NNHN origination (helper) and validation (load balancer), BFD strict mode, stale handling
across ExaBGP restarts and across a peer's graceful restart (RFC 4724, receiving speaker).

No sockets, no clock, no asyncio: every method takes ``now`` (monotonic seconds) where time
matters and returns a list of effects. Effects are the RIB's decisions for the BGP speaker
(:class:`Advertise`, :class:`Retract`, :class:`ResetPeer`; ``glbd.bgp.speaker`` turns them into
ExaBGP commands) and the events for the rest of the daemon (:class:`PeerUp`, :class:`PeerDown`,
:class:`NextHopsChanged`, :class:`StaleTimerExpired`). Events for the FIB side always come before
the decisions of the same call, so a BFD failure leaves forwarding before any BGP message is
written.

Selection (eBGP only, as in a Clos fabric):

1. paths from peers that are not usable (session down, or BFD down in strict mode) are ignored;
2. a locally originated prefix beats any learned path;
3. a path without the GRACEFUL_SHUTDOWN community (RFC 8326, a draining peer), then
   shortest AS path (an AS_SET counts 1), then lowest origin (igp < egp < incomplete), then
   lowest peer BGP ID, then lowest peer address picks the best path;
4. the multipath set is every path equal to the best on graceful shutdown, AS-path length
   and origin; without
   multipath-relax they must also share the neighbor AS (the first AS of the path). At most
   ``max_paths`` paths, in the order of rule 3.

A received route whose next hop cannot forward is rejected and counted by reason
(:class:`~glbd.base.reasons.RouteRejected`): one of our own addresses (``nexthop_self``), a
global address outside the subnets of a directly connected session's interface
(``nexthop_offlink``, from the addresses the io passes to :meth:`Rib.set_connected`), or no
gateway at all (``nexthop_invalid``). It is an implicit withdraw of that peer's path only: the
prefix's other paths are selected as usual, and the FIB never sees a nexthop it would refuse.

Advertisement to peer Q: the best path's AS path with our AS prepended, next hop = our local
address on that session (next-hop-self), nothing to a peer that contributed a path of the
multipath set, nothing to a peer whose AS is already in the path (it would drop it anyway).
With ``RibParams.ebgp_requires_policy`` (RFC 8212), nothing to an eBGP peer without an export
filter and nothing taken from one without an import filter (``no_import_policy``).
Drained (``RibParams.drain``), every advertisement also carries GRACEFUL_SHUTDOWN and
``drain_prepend`` extra copies of our AS (for peers that ignore the community).

Fabric colours (docs/colours.md, :mod:`glbd.colours.colours`; AIGP and the primary colour in
:mod:`glbd.bgp.ribcolour`): a coloured path received on a session of none of its colours is kept
but hidden (never selected, shown and counted); a learned route goes to the sessions of its
colours and the uncoloured ones as received; an originated one as ``originate_to``'s copy, the
primary copy with AIGP 0; a :class:`NextHopsChanged` says the prefix's primary colour too. A
reload that recolours a session re-evaluates its hidden paths and what every session is sent.
A helper attaches one NHC per prefix and peer: header AFI/SAFI = the prefix's family, header
next hop = the next hop sent, NNHN = [our router id; the BGP IDs of the peers of the multipath
set, ascending], and a 4-octet BGPID (our router id) when that next hop is link-local only
(draft-ietf-idr-nhc §2.2.1). It is recomputed whenever the multipath set changes; received
NHCs are never relayed: next-hop-self always, so neither a downstream NNHN, a downstream
BGPID nor an unknown TLV goes upstream (draft-ietf-idr-next-next-hop-nodes §5: MUST NOT
forward a downstream NNHN with next-hop-self).

A received NHC is validated (load balancer) in the order :mod:`glbd.bgp.ribcheck` gives, each
failure counted by name (a :class:`~glbd.base.reasons.NhcStatus`); the route always stays
(attribute discard).

Layout: this module holds :class:`Rib`, which takes the inputs, keeps the forwarding table,
the Adj-RIB-Outs and the coalescing, and compares each selection with them. Its types are in
:mod:`glbd.bgp.ribtypes`; the Adj-RIB-In index, changed only through its methods, in
:mod:`glbd.bgp.ribadjin`; received routes (import policy, next-hop and NHC checks) reach it
through :mod:`glbd.bgp.ribcheck`; selection and the advertisement a peer should hold are in
:mod:`glbd.bgp.ribselect`; the update delay, stale handling (graceful restart) and
max-prefix are collaborators in :mod:`glbd.bgp.ribdelay`, :mod:`glbd.bgp.ribstale` and
:mod:`glbd.bgp.ribmaxpfx`; the ``glbctl`` rows are built in :mod:`glbd.bgp.ribviews`.
"""

from __future__ import annotations

import ipaddress
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from itertools import islice
from typing import Any

import structlog

from glbd.base.reasons import ResetReason, RouteRejected, UpdateDelayEnd
from glbd.bgp import exabgp_api as api
from glbd.bgp import ribviews
from glbd.bgp.ribadjin import AdjRibIn
from glbd.bgp.ribcheck import Inbound
from glbd.bgp.ribcolour import origin_as, recoloured, set_colour
from glbd.bgp.ribdelay import UpdateDelay
from glbd.bgp.ribmaxpfx import MaxPrefixes
from glbd.bgp.ribselect import ORIGINATED, Selector
from glbd.bgp.ribstale import StaleHandler, notification_in
from glbd.bgp.ribtypes import (
    GRACEFUL_SHUTDOWN,
    Advertise,
    Connected,
    Effect,
    IPAddress,
    NeighborParams,
    NextHop,
    NextHopsChanged,
    Path,
    PeerDown,
    PeerState,
    PeerUp,
    Prefix,
    ResetPeer,
    Retract,
    RibParams,
    RibStats,
    StaleTimerExpired,
    count_rejected,
    events_first,
    no_export_policy,
    no_import_policy,
)

__all__ = ["Rib"]

log = structlog.get_logger(__name__)


class Rib:
    """The RIB: every input method returns its effects (events first, then decisions)."""

    def __init__(self, params: RibParams) -> None:
        #: event counts, and the ``hidden_<reason>`` gauges (the sum of the peers')
        self.counters: Counter[str] = Counter()
        self.stats = RibStats()
        self._adj = AdjRibIn(self.counters)
        #: the Adj-RIB-In's index: read here, changed only through ``self._adj``
        self._index = self._adj.index
        self.peers: dict[IPAddress, PeerState] = {}
        #: interned paths (weak: a path no prefix uses any more goes away)
        self._paths: weakref.WeakValueDictionary[tuple[Any, ...], Path] = (
            weakref.WeakValueDictionary()
        )
        self._sel = Selector(params, self._index, self._adj.slots, self.stats)
        self._delay = UpdateDelay(params, self.counters)
        self._stale = StaleHandler(params, self._adj, self.peers, self._intern)
        self._max = MaxPrefixes(self._adj, self.counters)
        self._in = Inbound(params, self._adj, self.counters, self._intern, self._max.keep_refused)
        self._params = params
        for n in params.neighbors:
            self._add_peer(n)
        self.originated: set[Prefix] = set(params.originated)
        self._fwd: dict[Prefix, tuple[NextHop, ...]] = {}
        #: the primary colour of each prefix that has one (the last NextHopsChanged's)
        self._colour: dict[Prefix, int] = {}
        #: UPDATE coalescing: prefixes whose Adj-RIB-In changed but are not selected yet
        self._dirty: set[Prefix] = set()
        self._flush_at: float | None = None
        self._quiet_at = float("-inf")  # an UPDATE from then on is selected at once
        #: per prefix, the outcome of its last selection that the Adj-RIB-Outs follow from
        #: (originated, the best path's attributes, the multipath peers, the NNHN): the same
        #: outcome again needs no walk over every peer. Interned (prefixes share them)
        self._outcome: dict[Prefix, tuple[Any, ...]] = {}
        #: RFC 8212: the policy sides each neighbor was last logged as missing
        self._policy_logged: dict[IPAddress, tuple[str, ...]] = {}
        self._log_policy()

    @property
    def params(self) -> RibParams:
        return self._params

    @params.setter
    def params(self, params: RibParams) -> None:
        # the collaborators that read the parameters always see the RIB's
        self._params = params
        self._sel.params = self._delay.params = self._stale.params = self._in.params = params

    # ---- inputs ------------------------------------------------------------------------

    def on_open(
        self,
        peer: IPAddress,
        router_id: ipaddress.IPv4Address,
        graceful_restart: api.GracefulRestart | None = None,
    ) -> list[Effect]:
        """A received OPEN: remember the peer's BGP ID and graceful restart capability until
        the session comes up."""
        st = self._peer(peer)
        if st is not None:
            st.pending_bgp_id = router_id
            st.pending_gr = graceful_restart
        return []

    def on_state(self, peer: IPAddress, state: str, now: float, reason: str = "") -> list[Effect]:
        self._delay.clock(now)
        st = self._peer(peer)
        if st is None:
            return []
        out = self._on_state(st, peer, state, now, reason)
        if self._delay.active:
            self._delay_check(now)
        return out

    def _on_state(
        self, st: PeerState, peer: IPAddress, state: str, now: float, reason: str
    ) -> list[Effect]:
        if state == "up" and self._max.refuse_up(st, now):
            return [ResetPeer(peer, ResetReason.MAX_PREFIXES)]
        if state == "up":
            st.state = "up"
            st.established_at = now
            st.bgp_id = st.pending_bgp_id or st.bgp_id
            st.gr = st.pending_gr if self.params.graceful_restart else None
            st.notification = None
            st.eor_received = False
            st.counters["established"] += 1
            out: list[Effect] = [PeerUp(peer, st.bgp_id)]
            if not st.stale:
                out += self._select_or_hold({p for p, _ in st.paths()})
            elif st.gr_helping:
                out += self._select_or_hold(self._stale.reestablished(st, now))
            return events_first(out)
        if state == "down":
            return self._peer_down(st, reason or "down", now)
        st.state = state if st.state != "up" else st.state
        return []

    def set_connected(self, connected: Iterable[Connected]) -> None:
        """This router's addresses and on-link subnets, per interface (all of them: a next hop
        on any of them is our own). Applies to routes received from now on; until it is called
        only the neighbors' local addresses count as our own and no next hop is off-link."""
        self._in.set_connected(connected)

    def on_update(self, ev: api.UpdateEvent, now: float) -> list[Effect]:
        """Store the UPDATE's paths; select and advertise now, or at the end of the coalescing
        window (``RibParams.update_coalesce_s``) if another UPDATE came shortly before, or at
        the end of the initial-exchange deferral (``RibParams.update_delay_s``)."""
        self._delay.clock(now)
        st = self._peer(ev.peer)
        if st is None:
            return []
        if ev.direction != "receive":
            return []
        st.counters["updates_in"] += 1
        if self._max.held(st, now):
            count_rejected(self.counters, st, RouteRejected.MAX_PREFIXES, len(ev.announced))
            return []
        if ev.eor is not None:
            eor_out = self._select_or_hold(self._stale.end_of_rib(st, ev.eor))
            if self._delay.active:
                self._delay.end_of_rib(st.params.address)
                self._delay_check(now)
            return eor_out
        changed: set[Prefix] = set()
        for _family, prefix in ev.withdrawn:
            if self._adj.del_path(st, prefix):
                changed.add(prefix)
            st.counters["withdrawn_in"] += 1
            if st.refused:
                st.refused.pop(prefix, None)
        attrs = ev.attributes
        if ev.announced and GRACEFUL_SHUTDOWN in attrs.communities:
            st.counters["graceful_shutdown_in"] += len(ev.announced)
        if self.params.local_as in attrs.as_path and ev.announced:
            count_rejected(self.counters, st, RouteRejected.AS_LOOP, len(ev.announced))
            for a in ev.announced:  # an implicit withdraw of any earlier path
                if self._adj.del_path(st, a.prefix):
                    changed.add(a.prefix)
                self._max.keep_refused(st, a, ev, RouteRejected.AS_LOOP)
            return self._defer(changed, now)
        nb = st.params
        announced = ev.announced
        if nb.import_filter is not None or len(nb.families) < 2 or self._no_import(nb):
            announced = self._in.take(st, announced, changed, ev)
        if st.refused:  # taken now: no longer refused
            for a in announced:
                st.refused.pop(a.prefix, None)
        if announced:
            announced = self._in.check(st, announced, changed)
        self._in.store(st, ev, announced, changed)
        st.counters["announced_in"] += len(announced)
        if attrs.colours and announced and nb.colour is not None:
            self._adj.log_hidden(st, announced[0].prefix, attrs.colours)
        if (
            nb.max_prefixes is not None
            and (st.n_paths > nb.max_prefixes or st.over_max)
            and self._max.check(st, changed, now)
        ):
            out = self._select_or_hold(changed)
            out.append(ResetPeer(nb.address, ResetReason.MAX_PREFIXES))
            return events_first(out)
        return self._defer(changed, now)

    def _no_import(self, n: NeighborParams) -> bool:
        return no_import_policy(self.params, n)

    def policy_missing(self, n: NeighborParams) -> tuple[str, ...]:
        """The sides ("import", "export") RFC 8212 refuses for this neighbor: () when none."""
        sides = (("import", self._no_import(n)), ("export", no_export_policy(self.params, n)))
        return tuple(side for side, missing in sides if missing)

    def _log_policy(self) -> None:
        """Log each neighbor whose missing policy changed (once, not per route)."""
        seen: dict[IPAddress, tuple[str, ...]] = {}
        for addr, st in self.peers.items():
            missing = seen[addr] = self.policy_missing(st.params)
            if missing and self._policy_logged.get(addr) != missing:
                log.warning(
                    "ebgp_no_policy",
                    peer=str(addr),
                    missing=list(missing),
                    detail="RFC 8212 (bgp.ebgp_requires_policy): set the neighbor's "
                    + " and ".join(missing)
                    + " list, e.g. a permit-all one, to exchange routes",
                )
        self._policy_logged = seen

    def on_notification(self, ev: api.NotificationEvent) -> list[Effect]:
        st = self._peer(ev.peer)
        if st is not None:
            st.counters[f"notification_{ev.direction}"] += 1
            st.last_down_reason = f"notification {ev.direction} ({ev.code},{ev.subcode})"
            st.notification = (ev.direction, ev.code)
        return []

    def peer_bfd_down(self, peer: IPAddress, now: float) -> list[Effect]:
        """BFD declared the neighbor down: its paths leave forwarding at once (events first)
        and the session is torn down (Cease, subcode 10 "BFD Down")."""
        st = self._peer(peer)
        if st is None:
            return []
        self._delay.clock(now)
        st.counters["bfd_down"] += 1
        out: list[Effect] = []
        if self.params.bfd_strict or not st.bfd_down:
            st.bfd_down = True
            out += self._select_or_hold({p for p, _ in st.paths()})
        out.append(ResetPeer(peer, ResetReason.BFD_DOWN))
        st.notification = ("send", 6)  # our Cease: a deliberate close, never a restart
        return events_first(out)

    def peer_shutdown(self, peer: IPAddress, now: float) -> list[Effect]:
        """``glbctl neighbor-shutdown``: the session is closed by us (a Cease: never a
        graceful restart), its paths go now; it stays down until the speaker lists it again."""
        st = self._peer(peer)
        if st is None:
            return []
        self._delay.clock(now)
        st.counters["shutdown"] += 1
        st.notification = ("send", 6)
        return self._peer_down(st, "shutdown (glbctl)", now)

    def peer_bfd_up(self, peer: IPAddress, now: float) -> list[Effect]:
        st = self._peer(peer)
        if st is None or not st.bfd_down:
            return []
        st.bfd_down = False
        return self._select_or_hold({p for p, _ in st.paths()})

    def peer_bfd_admin_down(self, peer: IPAddress, now: float) -> list[Effect]:
        """The peer's BFD went AdminDown: not a failure (RFC 5882 §3.2); nothing changes."""
        st = self._peer(peer)
        if st is not None:
            st.counters["bfd_admin_down"] += 1
        return []

    def speaker_lost(self, now: float) -> list[Effect]:
        """ExaBGP died: every session is gone, but forwarding is kept. Paths become stale and
        stay in use until each peer's End-of-RIB or until the stale timer. The initial-exchange
        deferral starts again: the new sessions' tables are selected once, as at a start."""
        if self._delay.restart(now, bool(self.peers)):
            self._flush_at = None
        self._stale.speaker_lost(now)
        return []

    def converged(self) -> bool:
        """Our side of a restart is over (RFC 4724 §4.1: the restarting speaker sends its
        End-of-RIB once it has its peers' routes): every peer sent End-of-RIB in its current
        session (a peer that is down: in its last one; one never up since we started has not)
        or is restarting itself (its Restart State bit: waiting for each other would
        deadlock), and no path is stale from our own ExaBGP's restart. The caller bounds the
        wait (a neighbor that never comes up). Never while the initial-exchange deferral
        lasts or prefixes wait for selection: our End-of-RIB must follow our routes."""
        if self._delay.active or self._dirty:
            return False
        return all(
            (st.eor_received or (st.state == "up" and st.gr is not None and st.gr.restarting))
            and not (st.stale and not st.gr_helping)
            for st in self.peers.values()
        )

    def next_deadline(self) -> float | None:
        ds = [d for d in (self._stale.deadline, self._flush_at) if d is not None]
        if self._delay.active:
            ds += [d for d in (self._delay.until, self._delay.wait_until) if d is not None]
        return min(ds) if ds else None

    def on_timer(self, now: float) -> list[Effect]:
        out: list[Effect] = []
        if self._delay.active:
            self._delay.tick(now)
            self._delay_check(now)
        if self._flush_at is not None and now >= self._flush_at:
            out += self._flush(now)
        changed: set[Prefix] = set()
        expired = self._stale.expire(now, changed)
        if expired is None:
            return out
        peers, removed = expired
        out += self._select_or_hold(changed)
        return events_first([StaleTimerExpired(tuple(peers), removed), *out])

    def flush(self) -> list[Effect]:
        """Select every prefix that waits for the end of the coalescing window, now."""
        changed, self._dirty = self._dirty, set()
        self._flush_at = None
        return self._recompute(changed)

    @property
    def pending(self) -> int:
        """Prefixes whose paths changed but are not selected yet (coalescing, deferral)."""
        return len(self._dirty)

    @property
    def update_delay_active(self) -> bool:
        """The initial-exchange deferral is on: arriving paths wait for selection."""
        return self._delay.active

    def set_originated(self, prefixes: Iterable[Prefix]) -> list[Effect]:
        new = set(prefixes)
        changed = new ^ self.originated
        self.originated = new
        return self._recompute(changed)

    def reconfigure(self, params: RibParams) -> tuple[list[Effect], set[IPAddress]]:
        """Apply new parameters (router id, local AS and role must not change: restart).
        Returns the effects and the peers whose ExaBGP session is new or redefined (the
        caller reloads ExaBGP and replays their Adj-RIB-Out). Validation knobs apply to
        UPDATEs received from now on."""
        if (params.router_id, params.local_as, params.role) != (
            self.params.router_id,
            self.params.local_as,
            self.params.role,
        ):
            raise ValueError("router_id, local_as and role need a restart")
        changed: set[Prefix] = set(self.originated) ^ set(params.originated)
        touched: set[IPAddress] = set()
        # a session's colour or an originated prefix's, or a policy: what is hidden and what
        # every session is sent may change, so everything is selected and advertised again
        redo = params.origin_colours != self.params.origin_colours
        new = {n.address: n for n in params.neighbors}
        for addr in list(self.peers):
            if addr not in new:
                changed |= self._remove_peer(addr)
        for addr, n in new.items():
            st_old = self.peers.get(addr)
            if st_old is None:
                self._add_peer(n)
                touched.add(addr)
            elif st_old.params != n:
                redo |= self._redefine_peer(st_old, n, changed, touched)
        knobs_changed = _knobs(params) != _knobs(self.params)
        self.params = params
        for st in self.peers.values():
            if st.n_paths and self._no_import(st.params):  # RFC 8212: its paths go now
                for prefix, _ in list(st.paths()):
                    self._adj.del_path(st, prefix)
                    count_rejected(self.counters, st, RouteRejected.NO_IMPORT_POLICY, 1)
                    changed.add(prefix)
        self._log_policy()
        self.originated = set(params.originated)
        self._sel.origin_colours = dict(params.origin_colours)
        self._outcome.clear()  # neighbors' parameters feed every Adj-RIB-Out
        if self._delay.active and params.update_delay_s <= 0:
            self._delay_end(UpdateDelayEnd.END_OF_RIB, None)
        if knobs_changed or touched or redo:
            changed |= set(self._fwd)
            changed |= set(self._index)
            for st in self.peers.values():
                changed |= set(st.adj_out)
            changed |= self.originated
        return self._recompute(changed), touched

    def _remove_peer(self, addr: IPAddress) -> set[Prefix]:
        """A neighbor no longer configured: its paths go and its slot is free. Returns the
        prefixes it had paths for or was sent."""
        st = self.peers.pop(addr)
        changed = {p for p, _ in st.paths()} | set(st.adj_out)
        self._adj.clear_paths(st)
        self._adj.free(st)
        st.stale_deadline = None
        self._stale.rearm()
        return changed

    def _redefine_peer(
        self, st: PeerState, n: NeighborParams, changed: set[Prefix], touched: set[IPAddress]
    ) -> bool:
        """New parameters for a neighbor: a redefined session (added to ``touched``) loses its
        paths and Adj-RIB-Out; a route its new import filter denies goes now (one it newly
        permits comes with its next UPDATE: rejected routes are not kept). Returns whether its
        colour or policy changed."""
        old = st.params
        if _session(n) != _session(old):
            touched.add(n.address)
            changed |= {p for p, _ in st.paths()} | set(st.adj_out)
            self._adj.clear_paths(st)
            st.adj_out.clear()
        st.params = n
        redo = False
        if n.colour != old.colour:
            redo = True
            log.info(
                "bgp_session_colour",
                peer=str(n.address),
                colour=n.colour,
                was=old.colour,
                hidden=recoloured(self._adj, st, self._intern),
            )
        if (n.import_filter, n.export_filter) != (old.import_filter, old.export_filter):
            redo = True
            if n.import_filter is not None:
                for prefix, _ in list(st.paths()):
                    if not n.import_filter.permits(prefix):
                        self._adj.del_path(st, prefix)
                        count_rejected(self.counters, st, RouteRejected.IMPORT_DENIED, 1)
                        changed.add(prefix)
        return redo

    def set_drain(self, drain: bool) -> list[Effect]:
        """Drain (or undrain) the router: every advertisement is sent again with (or without)
        the GRACEFUL_SHUTDOWN community and the extra prepends. Sessions and forwarding stay."""
        if drain == self.params.drain:
            return []
        self.params = replace(self.params, drain=drain)
        self._outcome.clear()
        self.counters["drain" if drain else "undrain"] += 1
        log.info("bgp_drain" if drain else "bgp_undrain", prefixes_out=len(self.adj_rib_out()))
        changed = set(self.originated)
        for st in self.peers.values():
            changed |= set(st.adj_out)
        return self._recompute(changed)

    @property
    def drained(self) -> bool:
        return self.params.drain

    def set_peer_drain(self, peer: IPAddress, drain: bool) -> list[Effect]:
        """Drain (or undrain) one neighbor: what it is sent goes again with (without)
        GRACEFUL_SHUTDOWN and the extra prepends, so it alone moves its traffic off this
        router; the others' advertisements and every session stay as they are."""
        st = self.peers.get(peer)
        if st is None or st.drained == drain:
            return []
        st.drained = drain
        st.counters["drain" if drain else "undrain"] += 1
        self._outcome.clear()  # the same selection outcome now needs other advertisements
        return self._recompute(set(self.originated) | set(st.adj_out))

    def adj_rib_out(self) -> list[Advertise]:
        """Everything glbd advertises, per peer (replayed into a restarted ExaBGP)."""
        return [cmd for st in self.peers.values() for cmd in st.adj_out.values()]

    def initial_decisions(self) -> list[Effect]:
        """Advertisements of the originated prefixes (call once after construction)."""
        return self._recompute(set(self.originated))

    # ---- views -------------------------------------------------------------------------

    def next_hops(self, prefix: Prefix) -> tuple[NextHop, ...]:
        return self._fwd.get(prefix, ())

    def forwarding(self) -> dict[Prefix, tuple[NextHop, ...]]:
        return dict(self._fwd)

    def interned_paths(self) -> int:
        """Distinct path attribute sets held: prefixes with the same attributes share one."""
        return len(self._paths)

    def routes_snapshot(self) -> list[dict[str, Any]]:
        return list(self.iter_routes())

    def iter_routes(self, want: Callable[[Prefix], bool] | None = None) -> Iterator[dict[str, Any]]:
        """``glbctl routes`` rows, built one at a time as they are taken (a 64 x 10k RIB is
        ~100 MB of rows): the prefixes are listed when iteration starts, each row is read
        from the RIB as it is then, and a prefix gone meanwhile is skipped."""
        prefixes = set(self._fwd) | self.originated
        prefixes |= set(self._index)
        order = sorted(
            prefixes if want is None else filter(want, prefixes), key=ribviews.family_order
        )
        for p in order:
            if p not in self._fwd and p not in self.originated and p not in self._index:
                continue
            yield self._route_row(p)

    def _route_row(self, p: Prefix) -> dict[str, Any]:
        best, mp = self._sel.select(p)
        entry = self._index.get(p)
        return {
            "prefix": str(p),
            "originated": p in self.originated,
            "paths": 0 if entry is None else sum(x is not None for x in entry[1:]),
            "as_path": [] if best is None else list(best.as_path),
            "next_hops": [nh.to_dict() for nh in self._fwd.get(p, ())],
            "advertised_to": sorted(str(a) for a, st in self.peers.items() if p in st.adj_out),
            "multipath": len(mp),
        }

    def received(self, peer: IPAddress) -> list[dict[str, Any]]:
        """``glbctl neighbor PEER received``: the peer's Adj-RIB-In *after* its import policy
        (a refused route is counted as ``rejected_<reason>`` and shown only by
        :meth:`received_pre_policy`); ``used``: the path is in its prefix's forwarding set
        now."""
        st = self.peers.get(peer)
        if st is None:
            return []
        return ribviews.received_rows(st, self._fwd)

    def received_pre_policy(self, peer: IPAddress) -> list[dict[str, Any]]:
        """``glbctl neighbor PEER received --pre-policy``: what the peer sent in this session
        before its import policy: the routes taken (``received``) and those refused, each
        with ``refused``: why (None: taken). Refused routes are kept up to REFUSED_KEPT."""
        st = self.peers.get(peer)
        if st is None:
            return []
        return ribviews.pre_policy_rows(st, self.received(peer))

    def advertised(self, peer: IPAddress) -> list[dict[str, Any]]:
        """``glbctl neighbor PEER advertised``: the peer's Adj-RIB-Out, as sent (after the
        export policy, with drain's community and prepends)."""
        st = self.peers.get(peer)
        if st is None:
            return []
        return ribviews.advertised_rows(st)

    def neighbors_snapshot(self, now: float) -> list[dict[str, Any]]:
        return [
            ribviews.neighbor_row(
                st, now, self._delay_state(st, now), self.policy_missing(st.params)
            )
            for st in self.peers.values()
        ]

    def _delay_state(self, st: PeerState, now: float) -> str | None:
        """The initial-exchange deferral for this neighbor: "waiting" for its End-of-RIB (or
        establishment), "done", or None when the RIB is not deferring."""
        if not self._delay.active:
            return None
        return "waiting" if self._delay.waits_for(st, now) else "done"

    # ---- internals ---------------------------------------------------------------------

    def _add_peer(self, n: NeighborParams) -> PeerState:
        st = self._adj.add_peer(n)
        self.peers[n.address] = st
        return st

    def _peer(self, peer: IPAddress) -> PeerState | None:
        st = self.peers.get(peer)
        if st is None:
            self.counters["unknown_peer"] += 1
        return st

    def _intern(self, path: Path) -> Path:
        key = path.key()
        have = self._paths.get(key)
        if have is not None:
            return have
        self._paths[key] = path
        return path

    def _defer(self, changed: set[Prefix], now: float) -> list[Effect]:
        """Coalescing: select ``changed`` now if the RIB was quiet, else at the window's end."""
        if not changed:
            return []
        self._dirty |= changed
        if self._delay.active:
            return []
        if self._flush_at is None and now >= self._quiet_at:
            self._quiet_at = now + self.params.update_coalesce_s
            return self.flush()
        if self._flush_at is None:
            self._flush_at = self._quiet_at
        return []

    def _select_or_hold(self, prefixes: set[Prefix]) -> list[Effect]:
        """Select ``prefixes`` now, except, while the initial-exchange deferral lasts, those
        never selected yet (nothing of them is in forwarding or advertised): they wait with
        the arrivals. A loss (session, BFD, stale sweep) of a selected prefix is never held."""
        if not self._delay.active or not prefixes:
            return self._recompute(prefixes)
        now_ = {p for p in prefixes if p in self._fwd or p in self._outcome}
        self._dirty |= prefixes - now_
        return self._recompute(now_)

    def _delay_check(self, now: float) -> None:
        reason = self._delay.due(now, self.peers.values())
        if reason is not None:
            self._delay_end(reason, now)

    def _delay_end(self, reason: UpdateDelayEnd, now: float | None) -> None:
        """The deferral is over: every waiting prefix is due now, selected in ``flush_batch``
        slices by ``on_timer`` (the caller's loop runs between slices)."""
        self._delay.end(reason, now, self.peers.values(), len(self._dirty))
        if self._dirty:
            self._flush_at = now if now is not None else float("-inf")

    def _flush(self, now: float) -> list[Effect]:
        """End of a coalescing window: select up to ``flush_batch`` waiting prefixes; the
        rest are due at once (the caller lets its event loop run in between)."""
        self._quiet_at = now + self.params.update_coalesce_s
        if len(self._dirty) <= self.params.flush_batch:
            return self.flush()
        batch = set(islice(self._dirty, self.params.flush_batch))
        self._dirty -= batch
        self._flush_at = now
        return self._recompute(batch)

    def _peer_down(self, st: PeerState, reason: str, now: float) -> list[Effect]:
        st.refused.clear()  # the next session sends its routes again
        was_up = st.state == "up"
        st.state = "down"
        st.established_at = None
        st.last_down_reason = reason
        notification, st.notification = st.notification or notification_in(reason), None
        out: list[Effect] = []
        if st.stale and not was_up:  # ExaBGP restart churn: keep stale paths until EOR/timer
            return out
        if was_up and self._stale.applies(st, notification):
            # a graceful restart: its paths stay, stale; forwarding does not change
            changed = self._stale.start(st, reason, now)
            out.append(PeerDown(st.params.address, reason))
            out += self._select_or_hold(changed)
            return events_first(out)
        self._stale.stop(st)  # a re-established session failed again: everything goes
        if was_up:
            out.append(PeerDown(st.params.address, reason))
        changed = {p for p, _ in st.paths()}
        self._adj.clear_paths(st)
        out += self._select_or_hold(changed)
        return events_first(out)

    def _recompute(self, prefixes: set[Prefix]) -> list[Effect]:
        if self._dirty and prefixes:
            self._dirty -= prefixes
            if not self._dirty:
                self._flush_at = None
        events: list[Effect] = []
        decisions: list[Effect] = []
        stats = self.stats
        outcomes = self._outcome
        selection, advert = self._sel.selection, self._sel.advert
        for prefix in sorted(prefixes, key=lambda n: (n.version, n)):
            sel = selection(prefix)
            stats.selections += 1
            best, mp_peers, mp_ids = sel.best, sel.mp_peers, sel.mp_ids
            originated = prefix in self.originated
            fwd, colour = ((), None) if originated else (sel.fwd, sel.colour)
            if fwd != self._fwd.get(prefix, ()) or colour != self._colour.get(prefix):
                if fwd:
                    self._fwd[prefix] = fwd
                else:
                    self._fwd.pop(prefix, None)
                set_colour(self._colour, prefix, colour)
                events.append(NextHopsChanged(prefix, fwd, colour, origin_as(best, colour)))
            # what every Adj-RIB-Out entry of the prefix follows from (with the neighbors'
            # and drain parameters, which clear the cache when they change)
            outcome = ORIGINATED if originated else sel.outcome
            have_outcome = outcomes.get(prefix)
            if have_outcome is outcome or (have_outcome is not None and have_outcome == outcome):
                stats.adj_out_skips += 1
                continue
            if best is None and not originated:
                outcomes.pop(prefix, None)
            else:
                outcomes[prefix] = outcome
            stats.adj_out_walks += 1
            stats.adverts += len(self.peers)
            nhcs = (
                self._sel.nhc_values(mp_ids)
                if self.params.role.helper and mp_ids and not originated
                else None
            )
            for st in self.peers.values():
                want = advert(prefix, originated, best, st, mp_peers, mp_ids, nhcs)
                have = st.adj_out.get(prefix) if st.adj_out else None
                if want == have:
                    continue
                if want is None:
                    assert have is not None
                    del st.adj_out[prefix]
                    decisions.append(Retract(have.peer, prefix, have.next_hop))
                else:
                    st.adj_out[prefix] = want
                    decisions.append(want)
        self._sel.done()
        return events + decisions


def _session(n: NeighborParams) -> tuple[Any, ...]:
    """What defines a neighbor's ExaBGP session: a change needs a new one."""
    return (n.remote_as, n.local_address, n.hold_time, n.is_passive, n.tcp_md5, n.families)


def _knobs(p: RibParams) -> tuple[Any, ...]:
    """The parameters every selection and advertisement follows from."""
    return (p.multipath_relax, p.max_paths, p.drain, p.drain_prepend, p.ebgp_requires_policy)
