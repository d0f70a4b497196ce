"""Clos RIB (pure): Adj-RIB-In per peer, multipath selection, Adj-RIB-Out with next-hop-self,
NNHN origination (helper) and validation (load balancer), BFD strict mode, stale handling
across ExaBGP restarts and across a peer's graceful restart (RFC 4724, receiving speaker).

No sockets, no clock, no asyncio: every method takes ``now`` (monotonic seconds) where time
matters and returns a list of effects. Effects are the RIB's decisions for the BGP speaker
(:class:`Advertise`, :class:`Retract`, :class:`ResetPeer`; ``glbd.io.bgp`` turns them into
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
(:class:`~glbd.core.reasons.RouteRejected`): one of our own addresses (``nexthop_self``), a
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

Fabric colours (docs/colours.md, the rules of :mod:`glbd.core.colours`): a session may have a
colour (``NeighborParams.colour``), a path has the colours of its Color Extended Communities. A
coloured path received on a session of none of its colours is kept but hidden: never a
candidate for selection (so never forwarded over nor re-advertised), shown with its
:class:`~glbd.core.reasons.HiddenReason` and counted while it is hidden. A learned route goes to
the sessions of one of its colours and to the uncoloured ones, with its colour communities as
received; an originated prefix with a colour (``RibParams.origin_colours``) goes to each session
as the copy :func:`~glbd.core.colours.originate_to` gives it. A session's new colour (a reload)
re-evaluates its hidden paths and what every session is sent.
A helper attaches one NHC per prefix and peer: header AFI/SAFI = the prefix's family, header
next hop = the next hop sent, NNHN = [our router id; the BGP IDs of the peers of the multipath
set, ascending], and a 4-octet BGPID (our router id) when that next hop is link-local only
(draft-ietf-idr-nhc §2.2.1). It is recomputed whenever the multipath set changes; received
NHCs are never relayed: next-hop-self always, so neither a downstream NNHN, a downstream
BGPID nor an unknown TLV goes upstream (draft-ietf-idr-next-next-hop-nodes §5: MUST NOT
forward a downstream NNHN with next-hop-self).

Validation of a received NHC (load balancer), in order, each failure counted by name (a
:class:`~glbd.core.reasons.NhcStatus`; the route always stays: attribute discard): flags
optional transitive as ExaBGP reports them (``nhc_bad_flags``) -> decodes (else
``nhc_malformed_<reason>``) -> header AFI/SAFI equal the route's family
(``nhc_family_mismatch``) -> header next hop equals the route's next hop (all-zero accepted as
``nhc_nh_unspecified`` unless strict) -> a link-local-only next hop carries a BGPID
(``nhc_malformed_bgpid_missing``) equal to the peer's BGP ID, and AS when 8 octets
(``nhc_bgpid_mismatch``) -> has a usable NNHN (``nnhn_absent``, ``nnhn_discarded``,
``nnhn_zero_id``) -> NNHN[0] equals the peer's BGP ID (else ``nnhn_nh_bgp_id_mismatch``, a
stale relayed NNHN) -> not one of the later prefixes of a multi-prefix UPDATE (FRR 10.x computes
one NNHN per UPDATE from its first prefix, so the others are not trusted unless
``trust_packed_nnhn``).

Size: one module over 600 lines on purpose: the Adj-RIB-In is a single per-prefix index that
only ``_set_path``/``_del_path`` change, and selection, coalescing, stale
handling and advertisement all work on it; a split would expose that index across modules.
The parameter, event and decision types come first.
"""

from __future__ import annotations

import enum
import ipaddress
import re
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from itertools import islice
from typing import Any, TypeVar

import structlog

from glbd.codec import exabgp_api as api
from glbd.codec import nhc as nhcmod
from glbd.codec.colour import ColourCommunity
from glbd.core.colours import Origination, hidden, may_send, originate_to, route_colours
from glbd.core.prefixlist import PrefixList
from glbd.core.reasons import (
    NHC_DISREGARDED,
    HiddenReason,
    NhcDiscard,
    NhcStatus,
    ResetReason,
    RouteRejected,
    UpdateDelayEnd,
    nhc_malformed,
)

__all__ = [
    "Advertise",
    "Connected",
    "Decision",
    "Effect",
    "NeighborParams",
    "NextHop",
    "NextHopsChanged",
    "Path",
    "PeerDown",
    "PeerUp",
    "ResetPeer",
    "Retract",
    "Rib",
    "RibParams",
    "RibStats",
    "Role",
    "StaleTimerExpired",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Prefix = ipaddress.IPv4Network | ipaddress.IPv6Network

log = structlog.get_logger(__name__)

_ORIGIN_RANK = {"igp": 0, "egp": 1, "incomplete": 2}

#: the GRACEFUL_SHUTDOWN well-known community (RFC 8326): the sender is draining; a path that
#: carries it is least preferred and stays out of multipath while any other path exists
GRACEFUL_SHUTDOWN = (65535, 0)

_V = TypeVar("_V")


class Role(enum.Enum):
    HELPER = "helper"
    LOAD_BALANCER = "load-balancer"
    BOTH = "both"

    @property
    def helper(self) -> bool:
        return self in (Role.HELPER, Role.BOTH)

    @property
    def load_balancer(self) -> bool:
        return self in (Role.LOAD_BALANCER, Role.BOTH)


@dataclass(frozen=True)
class NeighborParams:
    address: IPAddress
    #: None: any AS but ours ("external")
    remote_as: int | None
    local_address: IPAddress
    interface: str | None = None
    hold_time: int = 9
    description: str = ""
    #: next-hop-self for IPv6 prefixes on an IPv4 session (None: IPv6 prefixes are not sent)
    local_address6: ipaddress.IPv6Address | None = None
    #: never open the TCP session, only accept it. None = automatic: passive when our address
    #: is the lower one, so two glbds never both connect (ExaBGP 5.0.15 is sometimes slow
    #: after a connection collision). Default False: always connect, as routers expect.
    passive: bool | None = False
    #: TCP MD5 signature key (RFC 2385) of the session, None: unsigned. Never in a repr.
    tcp_md5: bytes | None = field(default=None, repr=False)
    #: an unnumbered neighbor: a link-local session on ``interface`` that sends IPv4 prefixes
    #: with our IPv6 link-local next hop (RFC 8950)
    unnumbered: bool = False
    #: IP versions whose unicast family is activated: nothing of another is sent, and a route
    #: of another is rejected (``family_not_active``)
    families: tuple[int, ...] = (4, 6)
    #: received routes this list denies are rejected (``import_denied``); None: all taken
    import_filter: PrefixList | None = None
    #: nothing this list denies is advertised to the neighbor; None: no filter
    export_filter: PrefixList | None = None
    #: more prefixes than this from the neighbor: "warn" (logged and counted, kept) or
    #: "teardown" (Cease subcode 1, its routes go, and it stays down for
    #: ``max_prefixes_restart_s``: a session it re-opens sooner is closed again at once)
    max_prefixes: int | None = None
    max_prefixes_action: str = "teardown"
    max_prefixes_restart_s: float = 60.0
    #: the session's fabric colour (docs/colours.md); None: uncoloured
    colour: int | None = None

    @property
    def is_passive(self) -> bool:
        if self.passive is not None:
            return self.passive
        return (self.local_address.version, int(self.local_address)) < (
            self.address.version,
            int(self.address),
        )


@dataclass(frozen=True)
class RibParams:
    router_id: ipaddress.IPv4Address
    local_as: int
    role: Role
    neighbors: tuple[NeighborParams, ...]
    originated: tuple[Prefix, ...] = ()
    multipath_relax: bool = True
    max_paths: int = 128
    #: reject an all-zero NHC header next hop (FRR 10.x sends 0.0.0.0 on eBGP IPv4)
    nnhn_strict_next_hop: bool = False
    #: trust the NNHN of every prefix of a multi-prefix UPDATE (FRR packing defect: off)
    trust_packed_nnhn: bool = False
    #: keep paths of the peers of a dead ExaBGP this long, unless refreshed (End-of-RIB) earlier
    stale_timer_s: float = 60.0
    #: graceful restart (RFC 4724), receiving speaker: a peer whose OPEN offered it and
    #: whose session drops without a NOTIFICATION keeps its paths, stale, for the restart
    #: time its OPEN gave, then until its End-of-RIB or ``stale_path_time_s``
    graceful_restart: bool = False
    #: restarting speaker: ExaBGP advertises the capability for us (R, F on every family)
    #: and glbd sends End-of-RIB itself, so peers keep glbd's routes while it restarts
    restart_capability: bool = False
    #: the restart time glbd advertises (s, RFC 4724 §3: at most 4095)
    restart_time_s: int = 120
    #: once a restarting peer is back, how long its stale paths may wait for its End-of-RIB
    stale_path_time_s: float = 360.0
    #: draft-ietf-idr-bgp-bfd-strict-mode: a neighbor's routes are not used while BFD is down
    bfd_strict: bool = True
    #: UPDATE coalescing: an UPDATE that arrives when the RIB has been quiet for this long is
    #: selected and advertised at once; UPDATEs that follow within it are stored and selected
    #: together when it ends (``next_deadline``/``on_timer``). A table transfer from many
    #: peers then costs one selection per prefix per window instead of one per path, and
    #: session, BFD and End-of-RIB events are never delayed. 0 = select on every UPDATE.
    update_coalesce_s: float = 0.05
    #: at most this many prefixes are selected per ``on_timer`` call (the caller yields to its
    #: event loop between calls, so a big batch never blocks heartbeats for long)
    flush_batch: int = 2048
    #: drained (RFC 8326 graceful shutdown): everything glbd advertises carries the
    #: GRACEFUL_SHUTDOWN community and ``drain_prepend`` extra copies of our AS, so peers
    #: move their traffic to other paths while the sessions stay up
    drain: bool = False
    drain_prepend: int = 3
    #: initial-exchange deferral (FRR's update-delay): after the RIB starts (its first timed
    #: input) or our ExaBGP restarts, received paths are stored but not selected until every
    #: neighbor has sent End-of-RIB, is restarting itself, or has not established within
    #: ``update_delay_establish_wait_s``; at most this long. Then every waiting prefix is
    #: selected once (in ``flush_batch`` slices) instead of once per coalescing window per
    #: arriving path. Withdrawals of prefixes already selected, BFD and session losses are
    #: never deferred. 0 = off.
    update_delay_s: float = 0.0
    #: how long the deferral waits for a configured neighbor to establish at all
    update_delay_establish_wait_s: float = 10.0
    #: RFC 8212: an eBGP neighbor (its AS not ours) without an import filter has every route
    #: rejected (``no_import_policy``), and one without an export filter is sent nothing.
    #: Off here so a bare RibParams filters nothing; ``bgp.ebgp_requires_policy`` (on by
    #: default) is what a daemon runs with
    ebgp_requires_policy: bool = False
    #: how originated prefixes are coloured (docs/colours.md, "Origination and backup
    #: colours"); a prefix not here goes to every session uncoloured
    origin_colours: tuple[tuple[Prefix, Origination], ...] = ()


@dataclass(frozen=True, slots=True)
class Connected:
    """One address of this router (the io reads them from the kernel and passes them in,
    :meth:`Rib.set_connected`): ``address`` on ``interface``, reaching ``network`` on-link."""

    interface: str
    address: IPAddress
    network: Prefix


@dataclass(slots=True)
class RibStats:
    """Work counters of the selection machinery (for benchmarks and tests; not exported)."""

    #: best-path selections run (one per prefix and recompute)
    selections: int = 0
    #: of which computed (sorted over the candidates); the others shared the result of a
    #: prefix with the very same paths in the same recompute
    computed: int = 0
    #: selections whose outcome (best path's attributes, multipath set, NNHN) was new, so
    #: every peer's Adj-RIB-Out was compared with what it should hold
    adj_out_walks: int = 0
    #: selections whose outcome was unchanged: no Adj-RIB-Out walk
    adj_out_skips: int = 0
    #: ``_advert`` calls (one per peer per walk)
    adverts: int = 0


# -- effects -------------------------------------------------------------------------------


@dataclass(frozen=True)
class NextHop:
    """One forwarding next hop of a prefix, with the validated next-next-hop set (or None)."""

    peer: IPAddress
    peer_bgp_id: ipaddress.IPv4Address | None
    next_hop: IPAddress
    interface: str | None
    nnh: tuple[ipaddress.IPv4Address, ...] | None
    nnhn_status: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "peer": str(self.peer),
            "peer_bgp_id": None if self.peer_bgp_id is None else str(self.peer_bgp_id),
            "next_hop": str(self.next_hop),
            "interface": self.interface,
            "nnh": None if self.nnh is None else [str(i) for i in self.nnh],
            "nnhn_status": self.nnhn_status,
        }


@dataclass(frozen=True)
class NextHopsChanged:
    """The forwarding next-hop set of ``prefix`` changed; empty = no longer reachable."""

    prefix: Prefix
    next_hops: tuple[NextHop, ...]


@dataclass(frozen=True)
class PeerUp:
    peer: IPAddress
    bgp_id: ipaddress.IPv4Address | None


@dataclass(frozen=True)
class PeerDown:
    peer: IPAddress
    reason: str


@dataclass(frozen=True)
class StaleTimerExpired:
    peers: tuple[IPAddress, ...]
    prefixes_removed: int


Event = NextHopsChanged | PeerUp | PeerDown | StaleTimerExpired


# -- decisions for the BGP speaker ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Advertise:
    """Advertise ``prefix`` to ``peer`` with these attributes (``nhc``: the NHC attribute
    value, :meth:`glbd.codec.nhc.Nhc.encode_value`)."""

    peer: IPAddress
    prefix: Prefix
    next_hop: IPAddress
    as_path: tuple[int, ...]
    origin: str = "igp"
    communities: tuple[tuple[int, int], ...] = ()
    nhc: bytes | None = None
    #: Color Extended Communities (a learned route's as received, or an originated copy's)
    colours: tuple[ColourCommunity, ...] = ()


@dataclass(frozen=True, slots=True)
class Retract:
    """Withdraw ``prefix`` (advertised with ``next_hop``) from ``peer``."""

    peer: IPAddress
    prefix: Prefix
    next_hop: IPAddress


@dataclass(frozen=True, slots=True)
class ResetPeer:
    """Close the BGP session with ``peer`` (a Cease NOTIFICATION that says why)."""

    peer: IPAddress
    reason: ResetReason


Decision = Advertise | Retract | ResetPeer
Effect = Event | Decision


# -- state ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, weakref_slot=True)
class Path:
    """One peer's path, without the prefix: interned, so every prefix of one UPDATE (and
    every UPDATE with the same attributes) shares one object."""

    peer: IPAddress
    next_hop: IPAddress
    as_path: tuple[int, ...]
    as_path_length: int
    origin: str
    communities: tuple[tuple[int, int], ...]
    nnh: tuple[ipaddress.IPv4Address, ...] | None
    nnhn_status: str
    stale: bool = False
    #: its Color Extended Communities in wire order (empty: uncoloured)
    colours: tuple[ColourCommunity, ...] = ()
    #: their colour values, for the rules (made once per interned path, not per check)
    colour_set: frozenset[int] = field(default=frozenset(), compare=False, hash=False, repr=False)
    #: memo of the forwarding view (:class:`NextHop`) of this path, rebuilt when the peer's
    #: BGP ID or interface differ from the ones it was built with
    view: NextHop | None = field(default=None, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        if self.colours:
            object.__setattr__(self, "colour_set", route_colours(self.colours))

    def key(self) -> tuple[Any, ...]:
        return (
            self.peer,
            self.next_hop,
            self.as_path,
            self.as_path_length,
            self.origin,
            self.communities,
            self.nnh,
            self.nnhn_status,
            self.stale,
            self.colours,
        )


@dataclass(frozen=True, slots=True)
class Refused:
    """A route a peer sent that its import policy (or the AS loop check) refused: kept for
    ``glbctl neighbor PEER received --pre-policy`` only, never selected."""

    reason: RouteRejected
    next_hop: IPAddress
    as_path: tuple[int, ...]
    origin: str
    communities: tuple[tuple[int, int], ...]
    colours: tuple[ColourCommunity, ...] = ()


#: refused routes kept per peer for the pre-policy view; past it they are only counted
#: (``refused_not_kept``): a peer sending what it may not cannot grow glbd's memory
REFUSED_KEPT = 4096

#: the per-prefix index: prefix -> [the interned prefix, path of slot 0, path of slot 1, ...]
#: (None where that peer has no path; no trailing Nones). One list per prefix is the whole
#: Adj-RIB-In: ~8 bytes per path instead of two dict entries.
_Entry = list[Any]


@dataclass(eq=False)
class PeerState:
    params: NeighborParams
    #: this peer's position in every prefix's entry of the index (entry[slot + 1])
    slot: int = 0
    bgp_id: ipaddress.IPv4Address | None = None
    pending_bgp_id: ipaddress.IPv4Address | None = None
    state: str = "idle"  # idle | connected | up | down | stale
    established_at: float | None = None
    #: the graceful restart capability of the peer's latest OPEN (bound at "up", like its ID)
    pending_gr: api.GracefulRestart | None = None
    #: the peer's capability in the current (or last) session if glbd helps, else None
    gr: api.GracefulRestart | None = None
    #: the peer is restarting gracefully: its stale paths wait for it (helper role)
    gr_helping: bool = False
    #: this peer's stale paths go at this time unless its End-of-RIB comes first
    stale_deadline: float | None = None
    #: the NOTIFICATION of the current session, if any: (direction, code)
    notification: tuple[str, int] | None = None
    #: an End-of-RIB came in this session
    eor_received: bool = False
    bfd_down: bool = False
    stale: bool = False
    #: max_prefixes teardown: the session is kept down until then
    held_until: float | None = None
    #: max_prefixes warn: over the limit now (logged once per crossing)
    over_max: bool = False
    #: how many prefixes this peer has a path for (its Adj-RIB-In lives in the index)
    n_paths: int = 0
    #: drained alone (``glbctl drain PEER``): advertised to as if the router were drained
    drained: bool = False
    adj_out: dict[Prefix, Advertise] = field(default_factory=dict)
    #: this session's routes refused before the Adj-RIB-In (the pre-policy view's rest)
    refused: dict[Prefix, Refused] = field(default_factory=dict)
    counters: Counter[str] = field(default_factory=Counter)
    last_down_reason: str = ""
    #: UPDATEs whose routes this session hides (only to space out the log lines)
    hidden_updates: int = 0
    index: dict[Prefix, _Entry] = field(default_factory=dict, repr=False)

    @property
    def usable(self) -> bool:
        return (self.state == "up" or self.stale) and not self.bfd_down

    def paths(self) -> Iterator[tuple[Prefix, Path]]:
        """This peer's Adj-RIB-In (a scan of the index: for views and peer-wide events)."""
        if not self.n_paths:
            return
        i = self.slot + 1
        for e in self.index.values():
            if len(e) > i and e[i] is not None:
                yield e[0], e[i]


@dataclass(frozen=True, slots=True, eq=False)
class _Selection:
    """One selection over one list of paths (slot by slot), shared by every prefix with it."""

    #: the paths selected over: held so their identities (the cache key) stay theirs
    paths: tuple[Path | None, ...]
    best: Path | None
    mp: list[tuple[PeerState, Path]]
    mp_peers: frozenset[PeerState]
    #: the NNHN we send: the multipath peers' BGP IDs
    mp_ids: tuple[ipaddress.IPv4Address, ...]
    #: the forwarding view (interned), for a prefix not originated here
    fwd: tuple[NextHop, ...]
    #: the multipath peers' slots, ascending
    slots: tuple[int, ...]
    #: what the Adj-RIB-Outs of a prefix not originated here follow from: the best path's
    #: attributes, the multipath peers and the NNHN (interned: compared by identity first)
    outcome: tuple[Any, ...]


_NO_SELECTION = _Selection((), None, [], frozenset(), (), (), (), (None, (), ()))
#: the outcome of an originated prefix: its advertisements depend on no path
_ORIGINATED: tuple[Any, ...] = ("originated",)


class Rib:
    def __init__(self, params: RibParams) -> None:
        self.params = params
        self._index: dict[Prefix, _Entry] = {}
        #: slot -> peer (None: a free slot, left by a removed neighbor)
        self._slots: list[PeerState | None] = []
        self.peers: dict[IPAddress, PeerState] = {}
        for n in params.neighbors:
            self._add_peer(n)
        self.originated: set[Prefix] = set(params.originated)
        self._origin_colours: dict[Prefix, Origination] = dict(params.origin_colours)
        #: event counts, and the ``hidden_<reason>`` gauges (the sum of the peers')
        self.counters: Counter[str] = Counter()
        self._fwd: dict[Prefix, tuple[NextHop, ...]] = {}
        self._stale_deadline: float | None = None
        #: interned paths (weak: a path no prefix uses any more goes away)
        self._paths: weakref.WeakValueDictionary[tuple[Any, ...], Path] = (
            weakref.WeakValueDictionary()
        )
        #: interned forwarding sets (see ``_intern_fwd``)
        self._fwd_sets: dict[tuple[int, ...], tuple[NextHop, ...]] = {}
        #: NHC values by NNHN ids, then by the next hop sent and the prefix's IP version
        self._nhc_cache: dict[
            tuple[ipaddress.IPv4Address, ...], dict[tuple[IPAddress, int], bytes]
        ] = {}
        #: UPDATE coalescing: prefixes whose Adj-RIB-In changed but are not selected yet
        self._dirty: set[Prefix] = set()
        self._flush_at: float | None = None
        self._quiet_at = float("-inf")  # an UPDATE from then on is selected at once
        #: per prefix, the outcome of its last selection that the Adj-RIB-Outs follow from
        #: (originated, the best path's attributes, the multipath peers, the NNHN): the same
        #: outcome again needs no walk over every peer. Interned (prefixes share them)
        self._outcome: dict[Prefix, tuple[Any, ...]] = {}
        self._outcomes: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self.stats = RibStats()
        #: selections by the prefix's paths, slot by slot (their identities): within one
        #: recompute (peers unchanged), prefixes with the same paths from the same peers, a
        #: fabric's common case, share one selection. Emptied when the recompute ends
        self._selections: dict[tuple[int, ...], _Selection] = {}
        #: initial-exchange deferral: on from the start (if configured), its clock starts at
        #: the first timed input; the neighbors that sent End-of-RIB since it began
        self._delaying = params.update_delay_s > 0 and bool(params.neighbors)
        self._delay_until: float | None = None
        self._delay_wait_until: float | None = None
        self._delay_waited = False  # the establish-wait is over
        self._delay_eor: set[IPAddress] = set()
        #: next-hop check (``_next_hop_rejected``): this router's addresses and on-link
        #: subnets by interface (``set_connected``), and the own addresses the params name
        self._own: frozenset[IPAddress] = frozenset()
        self._own_ll: dict[str, frozenset[IPAddress]] = {}
        self._subnets: dict[str, tuple[Prefix, ...]] = {}
        self._own_params: tuple[RibParams, frozenset[IPAddress]] | None = None
        #: RFC 8212: the policy sides each neighbor was last logged as missing
        self._policy_logged: dict[IPAddress, tuple[str, ...]] = {}
        self._log_policy()

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
        self._delay_clock(now)
        st = self._peer(peer)
        if st is None:
            return []
        out = self._on_state(st, peer, state, now, reason)
        if self._delaying:
            self._delay_check(now)
        return out

    def _on_state(
        self, st: PeerState, peer: IPAddress, state: str, now: float, reason: str
    ) -> list[Effect]:
        if state == "up" and st.held_until is not None:
            if now < st.held_until:  # max_prefixes: closed again until the restart time
                st.counters["max_prefixes_held"] += 1
                st.notification = ("send", 6)
                return [ResetPeer(peer, ResetReason.MAX_PREFIXES)]
            st.held_until = None
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
                out += self._gr_reestablished(st, now)
            return _events_first(out)
        if state == "down":
            return self._peer_down(st, reason or "down", now)
        st.state = state if st.state != "up" else st.state
        return []

    def set_connected(self, connected: Iterable[Connected]) -> None:
        """This router's addresses and on-link subnets, per interface (all of them: a next hop
        on any of them is our own). Applies to routes received from now on; until it is called
        only the neighbors' local addresses count as our own and no next hop is off-link."""
        own: set[IPAddress] = set()
        own_ll: dict[str, set[IPAddress]] = {}
        subnets: dict[str, list[Prefix]] = {}
        for c in connected:
            if c.address.version == 6 and c.address.is_link_local:
                own_ll.setdefault(c.interface, set()).add(c.address)
                continue  # fe80::/64 is on every port: never a subnet for the check
            own.add(c.address)
            subnets.setdefault(c.interface, []).append(c.network)
        self._own = frozenset(own)
        self._own_ll = {k: frozenset(v) for k, v in own_ll.items()}
        self._subnets = {k: tuple(v) for k, v in subnets.items()}

    def _next_hop_rejected(self, st: PeerState, nh: IPAddress) -> RouteRejected | None:
        """Why ``nh``, received from ``st``, cannot forward (None: usable). Our own address,
        a global one outside the session interface's subnets while the session's peer is
        inside them, or no gateway at all: the kernel would refuse such a nexthop, and a
        prefix's other paths must not wait on it."""
        if nh.is_unspecified or nh.is_loopback or nh.is_multicast:
            return RouteRejected.NEXTHOP_INVALID
        n = st.params
        if nh.version == 6 and nh.is_link_local:  # on-link on the session's port by definition
            mine = self._own_ll.get(n.interface or "", frozenset())
            if nh in mine or nh == n.local_address or nh == n.local_address6:
                return RouteRejected.NEXTHOP_SELF
            return None
        if nh in self._own or nh in self._params_own():
            return RouteRejected.NEXTHOP_SELF
        subnets = self._subnets.get(n.interface or "", ())
        nets = [x for x in subnets if x.version == nh.version]
        if not nets or any(nh in x for x in nets):
            return None
        peer = n.address  # a directly connected session (either family) or a multihop one
        if (peer.version == 6 and peer.is_link_local) or any(peer in x for x in subnets):
            return RouteRejected.NEXTHOP_OFFLINK
        return None

    def _params_own(self) -> frozenset[IPAddress]:
        """The neighbors' global local addresses (our side of each session), per params."""
        have = self._own_params
        if have is not None and have[0] is self.params:
            return have[1]
        own = frozenset(
            a
            for n in self.params.neighbors
            for a in (n.local_address, n.local_address6)
            if a is not None and not (a.version == 6 and a.is_link_local)
        )
        self._own_params = (self.params, own)
        return own

    def _check_next_hops(
        self,
        st: PeerState,
        announced: tuple[api.RouteAnnounced, ...],
        changed: set[Prefix],
    ) -> tuple[api.RouteAnnounced, ...]:
        """The announced routes whose next hop can forward; a rejected one is counted by reason
        and is an implicit withdraw of the path it replaces. One check per distinct next hop
        (an UPDATE has one, shared by its routes)."""
        peer = st.params.address
        first = announced[0].next_hop
        if (
            all(a.next_hop is first for a in announced)
            and self._next_hop_rejected(st, peer if first is None else first) is None
        ):
            return announced
        out: list[api.RouteAnnounced] = []
        verdicts: dict[IPAddress, RouteRejected | None] = {}
        for a in announced:
            nh = peer if a.next_hop is None else a.next_hop
            if nh not in verdicts:
                verdicts[nh] = self._next_hop_rejected(st, nh)
            why = verdicts[nh]
            if why is None:
                out.append(a)
                continue
            self._reject(st, why, 1)
            if self._del_path(st, a.prefix):
                changed.add(a.prefix)
            k = st.counters[why.counter]
            if k & (k - 1) == 0:  # 1st, 2nd, 4th, 8th... per peer and reason
                log.warning(
                    "bgp_next_hop_rejected",
                    peer=str(peer),
                    prefix=str(a.prefix),
                    next_hop=str(nh),
                    reason=why,
                    count=k,
                )
        return tuple(out)

    def on_update(self, ev: api.UpdateEvent, now: float) -> list[Effect]:
        """Store the UPDATE's paths; select and advertise now, or at the end of the coalescing
        window (``RibParams.update_coalesce_s``) if another UPDATE came shortly before, or at
        the end of the initial-exchange deferral (``RibParams.update_delay_s``)."""
        self._delay_clock(now)
        st = self._peer(ev.peer)
        if st is None:
            return []
        if ev.direction != "receive":
            return []
        st.counters["updates_in"] += 1
        if st.held_until is not None and now < st.held_until:
            self._reject(st, RouteRejected.MAX_PREFIXES, len(ev.announced))
            return []
        if ev.eor is not None:
            eor_out = self._end_of_rib(st, ev.eor)
            if self._delaying:
                self._delay_eor.add(st.params.address)
                self._delay_check(now)
            return eor_out
        changed: set[Prefix] = set()
        for _family, prefix in ev.withdrawn:
            if self._del_path(st, prefix):
                changed.add(prefix)
            st.counters["withdrawn_in"] += 1
            if st.refused:
                st.refused.pop(prefix, None)
        attrs = ev.attributes
        if ev.announced and GRACEFUL_SHUTDOWN in attrs.communities:
            st.counters["graceful_shutdown_in"] += len(ev.announced)
        if self.params.local_as in attrs.as_path and ev.announced:
            self._reject(st, RouteRejected.AS_LOOP, len(ev.announced))
            for a in ev.announced:  # an implicit withdraw of any earlier path
                if self._del_path(st, a.prefix):
                    changed.add(a.prefix)
                self._keep_refused(st, a, ev, RouteRejected.AS_LOOP)
            return self._defer(changed, now)
        nb = st.params
        announced = ev.announced
        if nb.import_filter is not None or len(nb.families) < 2 or self._no_import(nb):
            announced = self._import(st, announced, changed, ev)
        if st.refused:  # taken now: no longer refused
            for a in announced:
                st.refused.pop(a.prefix, None)
        if announced:
            announced = self._check_next_hops(st, announced, changed)
        decoded: nhcmod.Nhc | None = None
        decode_error = ""
        if attrs.nhc is not None:
            try:
                decoded = nhcmod.decode_value(attrs.nhc)
            except nhcmod.DecodeError as exc:
                decode_error = exc.reason
            if decoded is not None and decoded.discarded and self.params.role.load_balancer:
                for d in decoded.discarded:  # once per UPDATE, however many prefixes
                    key = NhcDiscard(d).counter
                    st.counters[key] += 1
                    self.counters[key] += 1
        made: dict[tuple[IPAddress, str], Path] = {}  # one Path per distinct result
        # one validation per next hop and family, not per prefix: the NHC is the UPDATE's
        checked: dict[tuple[IPAddress, str, int], tuple[Any, NhcStatus, bool]] = {}
        # ExaBGP 5.0 lists an IPv4 prefix FRR 10 sends with an IPv6 next hop (RFC 8950) twice
        # in one UPDATE: a repeat of the first prefix is that prefix, not a packed one
        first = ev.announced[0].prefix if ev.announced else None
        first_hash = hash(first)
        check_packed = not self.params.trust_packed_nnhn
        # the routes of one UPDATE share next hop and family objects: the last verdict and
        # path are reused by identity, without hashing addresses per prefix
        last: tuple[Any, ...] = ()
        verdict: tuple[Any, NhcStatus, bool] = (None, NhcStatus.ABSENT, False)
        path: Path | None = None
        path_for: tuple[Any, ...] = ()
        for a in announced:
            next_hop = a.next_hop if a.next_hop is not None else ev.peer
            kind = type(a.prefix)
            if (
                not last
                or last[0] is not next_hop
                or last[1] is not a.family
                or last[2] is not kind
            ):
                last = (next_hop, a.family, kind)
                ck = (next_hop, a.family, a.prefix.version)
                have = checked.get(ck)
                if have is None:
                    have = checked[ck] = self._validate(
                        st, a, next_hop, attrs, decoded, decode_error
                    )
                verdict = have
            nnh, status, unspecified = verdict
            if unspecified:
                self.counters["nhc_nh_unspecified"] += 1
                st.counters["nhc_nh_unspecified"] += 1
            if (
                nnh is not None
                and check_packed
                and a.prefix is not first
                and (hash(a.prefix) != first_hash or a.prefix != first)
            ):
                nnh, status = None, NhcStatus.NNHN_PACKED_UNTRUSTED
            if status in NHC_DISREGARDED:
                st.counters[status] += 1
                self.counters[status] += 1
                n = st.counters[status]
                if n & (n - 1) == 0:  # 1st, 2nd, 4th, 8th... per peer and reason
                    log.info(
                        "nhc_ignored",
                        peer=str(ev.peer),
                        prefix=str(a.prefix),
                        reason=status,
                        count=n,
                        peer_bgp_id=str(st.bgp_id),
                    )
            if path is None or path_for[0] is not next_hop or path_for[1] is not status:
                path = made.get((next_hop, status))
                path_for = (next_hop, status)
            if path is None or (path.nnh is not nnh and path.nnh != nnh):
                path = made[(next_hop, status)] = self._intern(
                    Path(
                        ev.peer,
                        next_hop,
                        attrs.as_path,
                        attrs.as_path_length,
                        attrs.origin,
                        attrs.communities,
                        nnh,
                        status,
                        colours=attrs.colours,
                    )
                )
            stored = self._store_path(st, a.prefix, path)
            if stored is not None:
                changed.add(stored)
        st.counters["announced_in"] += len(announced)
        if attrs.colours and announced and nb.colour is not None:
            self._log_hidden(st, announced[0].prefix, attrs.colours)
        if nb.max_prefixes is not None and (st.n_paths > nb.max_prefixes or st.over_max):
            out = self._max_prefixes(st, changed, now)
            if out is not None:
                return out
        return self._defer(changed, now)

    def _import(
        self,
        st: PeerState,
        announced: tuple[api.RouteAnnounced, ...],
        changed: set[Prefix],
        ev: api.UpdateEvent,
    ) -> tuple[api.RouteAnnounced, ...]:
        """The announced routes the neighbor's families and import filter take; a rejected
        one is an implicit withdraw of the path it replaces."""
        n = st.params
        out = []
        refused = self._no_import(n)
        for a in announced:
            if refused:
                why = RouteRejected.NO_IMPORT_POLICY
            elif a.prefix.version not in n.families:
                why = RouteRejected.FAMILY_NOT_ACTIVE
            elif n.import_filter is not None and not n.import_filter.permits(a.prefix):
                why = RouteRejected.IMPORT_DENIED
            else:
                out.append(a)
                continue
            self._reject(st, why, 1)
            if self._del_path(st, a.prefix):
                changed.add(a.prefix)
            self._keep_refused(st, a, ev, why)
        return tuple(out)

    def _keep_refused(
        self, st: PeerState, a: api.RouteAnnounced, ev: api.UpdateEvent, why: RouteRejected
    ) -> None:
        if a.prefix not in st.refused and len(st.refused) >= REFUSED_KEPT:
            st.counters["refused_not_kept"] += 1
            return
        attrs = ev.attributes
        st.refused[a.prefix] = Refused(
            why,
            a.next_hop if a.next_hop is not None else ev.peer,
            attrs.as_path,
            attrs.origin,
            attrs.communities,
            attrs.colours,
        )

    def _is_ebgp(self, n: NeighborParams) -> bool:
        return n.remote_as is None or n.remote_as != self.params.local_as

    def _no_import(self, n: NeighborParams) -> bool:
        """RFC 8212: this eBGP neighbor has no import filter, so nothing it sends is taken."""
        return self.params.ebgp_requires_policy and n.import_filter is None and self._is_ebgp(n)

    def _no_export(self, n: NeighborParams) -> bool:
        """RFC 8212: this eBGP neighbor has no export filter, so nothing is sent to it."""
        return self.params.ebgp_requires_policy and n.export_filter is None and self._is_ebgp(n)

    def policy_missing(self, n: NeighborParams) -> tuple[str, ...]:
        """The sides ("import", "export") RFC 8212 refuses for this neighbor: () when none."""
        sides = (("import", self._no_import(n)), ("export", self._no_export(n)))
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

    def _reject(self, st: PeerState, why: RouteRejected, n: int) -> None:
        if n:
            st.counters[why.counter] += n
            self.counters[why.counter] += n

    def _max_prefixes(self, st: PeerState, changed: set[Prefix], now: float) -> list[Effect] | None:
        """The neighbor's prefix count crossed ``max_prefixes`` (or fell back under it)."""
        n = st.params
        assert n.max_prefixes is not None
        over = st.n_paths > n.max_prefixes
        if over == st.over_max:
            return None
        st.over_max = over
        if not over:
            log.info("bgp_max_prefixes_ok", peer=str(n.address), prefixes=st.n_paths)
            return None
        st.counters["max_prefixes_exceeded"] += 1
        log.warning(
            "bgp_max_prefixes_exceeded",
            peer=str(n.address),
            prefixes=st.n_paths,
            max_prefixes=n.max_prefixes,
            action=n.max_prefixes_action,
        )
        if n.max_prefixes_action != "teardown":
            return None
        # Cease/1: its routes go now, and it stays down for the restart time
        self._reject(st, RouteRejected.MAX_PREFIXES, st.n_paths - n.max_prefixes)
        st.over_max = False
        st.held_until = now + n.max_prefixes_restart_s
        st.last_down_reason = "max_prefixes"
        st.notification = ("send", 6)
        changed |= {p for p, _ in st.paths()}
        self._clear_paths(st)
        out = self._select_or_hold(changed)
        out.append(ResetPeer(n.address, ResetReason.MAX_PREFIXES))
        return _events_first(out)

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
        self._delay_clock(now)
        st.counters["bfd_down"] += 1
        out: list[Effect] = []
        if self.params.bfd_strict or not st.bfd_down:
            st.bfd_down = True
            out += self._select_or_hold({p for p, _ in st.paths()})
        out.append(ResetPeer(peer, ResetReason.BFD_DOWN))
        st.notification = ("send", 6)  # our Cease: a deliberate close, never a restart
        return _events_first(out)

    def peer_shutdown(self, peer: IPAddress, now: float) -> list[Effect]:
        """``glbctl neighbor-shutdown``: the session is closed by us (a Cease: never a
        graceful restart), its paths go now; it stays down until the speaker lists it again."""
        st = self._peer(peer)
        if st is None:
            return []
        self._delay_clock(now)
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
        if self.params.update_delay_s > 0 and self.peers:
            self._delaying = True
            self._delay_until = self._delay_wait_until = None
            self._delay_waited = False
            self._delay_eor.clear()
            self._flush_at = None
            self._delay_clock(now)
        for st in self.peers.values():
            st.state = "down"
            st.last_down_reason = "exabgp restart"
            st.refused.clear()
            if st.n_paths:
                self._mark_stale(st)
                if st.stale_deadline is None:
                    st.stale_deadline = now + self.params.stale_timer_s
        self._rearm_stale()
        return []

    def converged(self) -> bool:
        """Our side of a restart is over (RFC 4724 §4.1: the restarting speaker sends its
        End-of-RIB once it has its peers' routes): every peer sent End-of-RIB in its current
        session (a peer that is down: in its last one; one never up since we started has not)
        or is restarting itself (its Restart State bit: waiting for each other would
        deadlock), and no path is stale from our own ExaBGP's restart. The caller bounds the
        wait (a neighbor that never comes up). Never while the initial-exchange deferral
        lasts or prefixes wait for selection: our End-of-RIB must follow our routes."""
        if self._delaying or self._dirty:
            return False
        return all(
            (st.eor_received or (st.state == "up" and st.gr is not None and st.gr.restarting))
            and not (st.stale and not st.gr_helping)
            for st in self.peers.values()
        )

    def next_deadline(self) -> float | None:
        ds = [d for d in (self._stale_deadline, self._flush_at) if d is not None]
        if self._delaying:
            ds += [d for d in (self._delay_until, self._delay_wait_until) if d is not None]
        return min(ds) if ds else None

    def on_timer(self, now: float) -> list[Effect]:
        out: list[Effect] = []
        if self._delaying:
            self._delay_clock(now)
            if self._delay_wait_until is not None and now >= self._delay_wait_until:
                self._delay_wait_until = None
                self._delay_waited = True
            self._delay_check(now)
        if self._flush_at is not None and now >= self._flush_at:
            out += self._flush(now)
        if self._stale_deadline is None or now < self._stale_deadline:
            return out
        changed: set[Prefix] = set()
        peers: list[IPAddress] = []
        removed = 0
        for addr, st in self.peers.items():
            if st.stale_deadline is None or now < st.stale_deadline:
                continue
            st.stale_deadline = None
            if not st.stale:
                continue
            peers.append(addr)
            if st.gr_helping:
                st.counters["gr_stale_timer_expired"] += 1
                log.info("bgp_gr_stale_expired", peer=str(addr), state=st.state)
            removed += self._sweep(st, changed)
        self._rearm_stale()
        out += self._select_or_hold(changed)
        return _events_first([StaleTimerExpired(tuple(peers), removed), *out])

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
        return self._delaying

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
        policy_changed = False
        # a session's colour or an originated prefix's: what is hidden and what every session
        # is sent may change, so everything is selected and advertised again
        colours_changed = params.origin_colours != self.params.origin_colours
        new = {n.address: n for n in params.neighbors}
        for addr in list(self.peers):
            if addr not in new:
                st = self.peers.pop(addr)
                changed |= {p for p, _ in st.paths()} | set(st.adj_out)
                self._clear_paths(st)
                self._slots[st.slot] = None
                st.stale_deadline = None
                self._rearm_stale()
        for addr, n in new.items():
            st_old = self.peers.get(addr)
            if st_old is None:
                self._add_peer(n)
                touched.add(addr)
            elif st_old.params != n:
                old = st_old.params
                session = (
                    n.remote_as,
                    n.local_address,
                    n.hold_time,
                    n.is_passive,
                    n.tcp_md5,
                    n.families,
                )
                if session != (
                    old.remote_as,
                    old.local_address,
                    old.hold_time,
                    old.is_passive,
                    old.tcp_md5,
                    old.families,
                ):
                    touched.add(addr)
                    changed |= {p for p, _ in st_old.paths()} | set(st_old.adj_out)
                    self._clear_paths(st_old)
                    st_old.adj_out.clear()
                st_old.params = n
                if n.colour != old.colour:
                    colours_changed = True
                    log.info(
                        "bgp_session_colour",
                        peer=str(addr),
                        colour=n.colour,
                        was=old.colour,
                        hidden=self._recount_hidden(st_old),
                    )
                if (n.import_filter, n.export_filter) != (old.import_filter, old.export_filter):
                    # a route the new import filter denies goes now; one it newly permits
                    # comes with the neighbor's next UPDATE of it (no copy of rejected routes)
                    policy_changed = True
                    if n.import_filter is not None:
                        for prefix, _ in list(st_old.paths()):
                            if not n.import_filter.permits(prefix):
                                self._del_path(st_old, prefix)
                                self._reject(st_old, RouteRejected.IMPORT_DENIED, 1)
                                changed.add(prefix)
        knobs_changed = (
            params.multipath_relax,
            params.max_paths,
            params.drain,
            params.drain_prepend,
            params.ebgp_requires_policy,
        ) != (
            self.params.multipath_relax,
            self.params.max_paths,
            self.params.drain,
            self.params.drain_prepend,
            self.params.ebgp_requires_policy,
        )
        self.params = params
        for st in self.peers.values():
            if st.n_paths and self._no_import(st.params):  # RFC 8212: its paths go now
                for prefix, _ in list(st.paths()):
                    self._del_path(st, prefix)
                    self._reject(st, RouteRejected.NO_IMPORT_POLICY, 1)
                    changed.add(prefix)
        self._log_policy()
        self.originated = set(params.originated)
        self._origin_colours = dict(params.origin_colours)
        self._outcome.clear()  # neighbors' parameters feed every Adj-RIB-Out
        if self._delaying and params.update_delay_s <= 0:
            self._delay_end(UpdateDelayEnd.END_OF_RIB, None)
        if knobs_changed or touched or policy_changed or colours_changed:
            changed |= set(self._fwd)
            changed |= set(self._index)
            for st in self.peers.values():
                changed |= set(st.adj_out)
            changed |= self.originated
        return self._recompute(changed), touched

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

    def routes_snapshot(self) -> list[dict[str, Any]]:
        return list(self.iter_routes())

    def iter_routes(self, want: Callable[[Prefix], bool] | None = None) -> Iterator[dict[str, Any]]:
        """``glbctl routes`` rows, built one at a time as they are taken (a 64 x 10k RIB is
        ~100 MB of rows): the prefixes are listed when iteration starts, each row is read
        from the RIB as it is then, and a prefix gone meanwhile is skipped."""
        prefixes = set(self._fwd) | self.originated
        prefixes |= set(self._index)
        order = sorted(prefixes if want is None else filter(want, prefixes), key=_family_order)
        for p in order:
            if p not in self._fwd and p not in self.originated and p not in self._index:
                continue
            yield self._route_row(p)

    def _route_row(self, p: Prefix) -> dict[str, Any]:
        best, mp = self._select(p)
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
        rows = []
        for prefix, path in sorted(st.paths(), key=lambda pp: _family_order(pp[0])):
            why = _hidden_on(st.params.colour, path)
            rows.append(
                {
                    **_attrs_row(prefix, path),
                    "nnh": None if path.nnh is None else [str(i) for i in path.nnh],
                    "nnhn_status": path.nnhn_status,
                    "stale": path.stale,
                    "used": any(nh.peer == peer for nh in self._fwd.get(prefix, ())),
                    # kept but never selected (docs/colours.md): why, else None
                    "hidden": None if why is None else str(why),
                }
            )
        return rows

    def received_pre_policy(self, peer: IPAddress) -> list[dict[str, Any]]:
        """``glbctl neighbor PEER received --pre-policy``: what the peer sent in this session
        before its import policy: the routes taken (``received``) and those refused, each
        with ``refused``: why (None: taken). Refused routes are kept up to REFUSED_KEPT."""
        st = self.peers.get(peer)
        if st is None:
            return []
        rows = [{**r, "refused": None} for r in self.received(peer)]
        for prefix, ref in st.refused.items():
            rows.append({**_attrs_row(prefix, ref), "refused": str(ref.reason)})
        return sorted(rows, key=_row_order)

    def advertised(self, peer: IPAddress) -> list[dict[str, Any]]:
        """``glbctl neighbor PEER advertised``: the peer's Adj-RIB-Out, as sent (after the
        export policy, with drain's community and prepends)."""
        st = self.peers.get(peer)
        if st is None:
            return []
        return [
            {
                "prefix": str(prefix),
                "next_hop": str(adv.next_hop),
                "as_path": list(adv.as_path),
                "origin": adv.origin,
                "communities": [f"{a}:{b}" for a, b in adv.communities],
                "colours": [c.text() for c in adv.colours],
                "nhc": None if adv.nhc is None else adv.nhc.hex(),
            }
            for prefix, adv in sorted(st.adj_out.items(), key=lambda pa: _family_order(pa[0]))
        ]

    def neighbors_snapshot(self, now: float) -> list[dict[str, Any]]:
        rows = []
        for addr, st in self.peers.items():
            rows.append(
                {
                    "peer": str(addr),
                    "remote_as": st.params.remote_as,
                    "interface": st.params.interface,
                    "local_address": str(st.params.local_address),
                    "tcp_md5": st.params.tcp_md5 is not None,
                    "bgp_id": None if st.bgp_id is None else str(st.bgp_id),
                    "state": "stale" if st.stale else st.state,
                    "graceful_restart": None if st.gr is None else st.gr.to_dict(),
                    "gr_helping": st.gr_helping,
                    "stale_for_s": None
                    if st.stale_deadline is None
                    else round(max(0.0, st.stale_deadline - now), 3),
                    "bfd_down": st.bfd_down,
                    "held_for_s": None
                    if st.held_until is None or st.held_until <= now
                    else round(st.held_until - now, 3),
                    "uptime_s": None
                    if st.state != "up" or st.established_at is None
                    else round(now - st.established_at, 3),
                    "prefixes_in": st.n_paths,
                    "prefixes_out": len(st.adj_out),
                    # initial-exchange deferral: "waiting" for this neighbor's End-of-RIB
                    # (or establishment), "done", or None when the RIB is not deferring
                    "update_delay": None
                    if not self._delaying
                    else "waiting"
                    if self._delay_waits_for(st, now)
                    else "done",
                    "last_down_reason": st.last_down_reason,
                    # RFC 8212: the sides refused for want of a policy ([] when none)
                    "policy_missing": list(self.policy_missing(st.params)),
                    "counters": dict(st.counters),
                }
            )
        return rows

    # ---- internals ---------------------------------------------------------------------

    def _add_peer(self, n: NeighborParams) -> PeerState:
        try:
            slot = self._slots.index(None)
        except ValueError:
            slot = len(self._slots)
            self._slots.append(None)
        st = PeerState(n, slot=slot, index=self._index)
        self._slots[slot] = st
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
        if self._delaying:
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
        if not self._delaying or not prefixes:
            return self._recompute(prefixes)
        now_ = {p for p in prefixes if p in self._fwd or p in self._outcome}
        self._dirty |= prefixes - now_
        return self._recompute(now_)

    def _delay_clock(self, now: float) -> None:
        """The deferral's deadlines run from the first timed input after it began."""
        if self._delaying and self._delay_until is None:
            self._delay_until = now + self.params.update_delay_s
            self._delay_wait_until = now + self.params.update_delay_establish_wait_s

    def _delay_waits_for(self, st: PeerState, now: float) -> bool:
        """The deferral still waits for this neighbor: it has not sent End-of-RIB since the
        deferral began, is not held down (max_prefixes), is not restarting itself (its R
        bit: it waits for our End-of-RIB), and is established or may still establish."""
        if not self._delaying or st.params.address in self._delay_eor:
            return False
        if st.held_until is not None and now < st.held_until:
            return False
        if st.state == "up":
            return not (st.gr is not None and st.gr.restarting)
        if self._delay_waited:
            return False
        return self._delay_wait_until is None or now < self._delay_wait_until

    def _delay_check(self, now: float) -> None:
        if not self._delaying or self._delay_until is None:
            return
        if now >= self._delay_until:
            self._delay_end(UpdateDelayEnd.TIMER, now)
        elif not any(self._delay_waits_for(st, now) for st in self.peers.values()):
            self._delay_end(UpdateDelayEnd.END_OF_RIB, now)

    def _delay_end(self, reason: UpdateDelayEnd, now: float | None) -> None:
        """The deferral is over: every waiting prefix is due now, selected in ``flush_batch``
        slices by ``on_timer`` (the caller's loop runs between slices)."""
        waiting = [str(a) for a, st in self.peers.items() if self._delay_waits_for(st, now or 0)]
        self._delaying = False
        self.counters[reason.counter] += 1
        log.info(
            "bgp_update_delay_end",
            reason=str(reason),
            prefixes=len(self._dirty),
            waited_for=waiting[:8],
        )
        self._delay_until = self._delay_wait_until = None
        self._delay_waited = False
        self._delay_eor.clear()
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

    def _validate(
        self,
        st: PeerState,
        route: api.RouteAnnounced,
        next_hop: IPAddress,
        attrs: api.PathAttributes,
        decoded: nhcmod.Nhc | None,
        decode_error: str,
    ) -> tuple[tuple[ipaddress.IPv4Address, ...] | None, NhcStatus, bool]:
        """The route's NNHN and status, and whether its NHC's next hop is all-zero and was
        accepted (the caller counts ``nhc_nh_unspecified`` per route)."""
        if attrs.nhc is None:
            return None, NhcStatus.ABSENT, False
        if not self.params.role.load_balancer:
            return None, NhcStatus.NOT_VALIDATED, False
        if nhcmod.flags_problem(attrs.nhc_flags) is not None:
            return None, NhcStatus.NHC_BAD_FLAGS, False
        if decoded is None:
            return None, nhc_malformed(decode_error), False
        if (decoded.afi, decoded.safi) != _family_afi_safi(route):
            return None, NhcStatus.NHC_FAMILY_MISMATCH, False
        match = decoded.next_hop_match(next_hop)
        if match is nhcmod.NextHopMatch.MISMATCH:
            return None, NhcStatus.NHC_NH_MISMATCH, False
        unspecified = match is nhcmod.NextHopMatch.UNSPECIFIED
        if unspecified and self.params.nnhn_strict_next_hop:
            return None, NhcStatus.NHC_NH_UNSPECIFIED_REJECTED, False
        nnh, status = self._check_nnhn(st, decoded)
        return nnh, status, unspecified

    def _check_nnhn(
        self, st: PeerState, decoded: nhcmod.Nhc
    ) -> tuple[tuple[ipaddress.IPv4Address, ...] | None, NhcStatus]:
        if decoded.link_local_only:  # the address alone does not name the router (§3.3)
            bid = decoded.bgpid
            if bid is None:
                return None, NhcStatus.NHC_MALFORMED_BGPID_MISSING
            if (
                st.bgp_id is None
                or bid.bgp_id != st.bgp_id
                or bid.asn
                not in (
                    None,
                    st.params.remote_as,
                )
            ):
                return None, NhcStatus.NHC_BGPID_MISMATCH
        if decoded.nnhn is None:
            if "nnhn_zero_id" in decoded.discarded:
                return None, NhcStatus.NNHN_ZERO_ID
            if any(d.startswith("nnhn_") for d in decoded.discarded):
                return None, NhcStatus.NNHN_DISCARDED
            return None, NhcStatus.NNHN_ABSENT
        if st.bgp_id is None or decoded.nnhn.nh_bgp_id != st.bgp_id:
            return None, NhcStatus.NNHN_NH_BGP_ID_MISMATCH
        return decoded.nnhn.nnh_ids, NhcStatus.VALID

    def _peer_down(self, st: PeerState, reason: str, now: float) -> list[Effect]:
        st.refused.clear()  # the next session sends its routes again
        was_up = st.state == "up"
        st.state = "down"
        st.established_at = None
        st.last_down_reason = reason
        notification, st.notification = st.notification or _notification_in(reason), None
        out: list[Effect] = []
        if st.stale and not was_up:  # ExaBGP restart churn: keep stale paths until EOR/timer
            return out
        if was_up and self._gr_applies(st, notification):
            return self._gr_start(st, reason, now)
        st.stale = False  # a re-established session failed again: everything goes
        st.gr_helping = False
        st.stale_deadline = None
        self._rearm_stale()
        if was_up:
            out.append(PeerDown(st.params.address, reason))
        changed = {p for p, _ in st.paths()}
        self._clear_paths(st)
        out += self._select_or_hold(changed)
        return _events_first(out)

    def _gr_applies(self, st: PeerState, notification: tuple[str, int] | None) -> bool:
        """RFC 4724 §4.2: a session with graceful restart that ends without a NOTIFICATION
        (TCP reset or close) is a restart of the peer; our own NOTIFICATION for an expired
        hold timer too (its control plane stalled). Any other NOTIFICATION is a deliberate
        close, and a BFD failure is a forwarding failure, not a restart: paths go at once."""
        gr = st.gr
        if gr is None or gr.restart_time <= 0 or not gr.families or st.bfd_down:
            return False
        return notification is None or notification == ("send", 4)

    def _gr_start(self, st: PeerState, reason: str, now: float) -> list[Effect]:
        """The peer is restarting: its paths of the families its capability named stay in
        use, stale, for its restart time; the others go now. Forwarding does not change."""
        assert st.gr is not None
        changed: set[Prefix] = set()
        keep = _versions(st.gr.families)
        for prefix, _ in list(st.paths()):
            if prefix.version not in keep and self._del_path(st, prefix):
                changed.add(prefix)
        self._mark_stale(st)
        st.gr_helping = st.stale
        st.stale_deadline = now + st.gr.restart_time if st.stale else None
        self._rearm_stale()
        st.counters["gr_restarts"] += 1
        log.info(
            "bgp_gr_helper_start",
            peer=str(st.params.address),
            reason=reason,
            restart_time=st.gr.restart_time,
            stale_paths=st.n_paths,
        )
        out: list[Effect] = [PeerDown(st.params.address, reason)]
        out += self._select_or_hold(changed)
        return _events_first(out)

    def _gr_reestablished(self, st: PeerState, now: float) -> list[Effect]:
        """A restarting peer is back (RFC 4724 §4.2): without the capability now, every stale
        path goes; a family whose Forwarding State bit is clear (its forwarding was not kept)
        loses its stale paths; the rest wait for that family's End-of-RIB, at most
        ``stale_path_time_s``."""
        gr = st.gr
        keep = _versions(gr.forwarding) if gr is not None else set()
        changed: set[Prefix] = set()
        for version in (4, 6):
            if version not in keep:
                self._sweep(st, changed, version)
        if st.stale:
            st.stale_deadline = now + self.params.stale_path_time_s
        else:
            st.gr_helping = False
            st.stale_deadline = None
        self._rearm_stale()
        if changed:
            st.counters["gr_stale_flushed"] += 1
            log.info(
                "bgp_gr_stale_flushed",
                peer=str(st.params.address),
                capability=gr is not None,
                forwarding=[] if gr is None else list(gr.forwarding),
                prefixes=len(changed),
            )
        return self._select_or_hold(changed)

    def _mark_stale(self, st: PeerState) -> None:
        for prefix, path in list(st.paths()):
            if not path.stale:
                self._set_path(st, prefix, self._intern(_with_stale(path, True)))
        st.stale = st.n_paths > 0

    def _rearm_stale(self) -> None:
        """The RIB's stale deadline: the earliest of its peers'."""
        ds = [st.stale_deadline for st in self.peers.values() if st.stale_deadline is not None]
        self._stale_deadline = min(ds) if ds else None

    def _end_of_rib(self, st: PeerState, family: str) -> list[Effect]:
        """End-of-RIB for one family: the peer's stale paths of that family are gone."""
        st.counters["eor_in"] += 1
        st.eor_received = True
        if not st.stale or st.state != "up":
            return []
        version = 6 if family.startswith("ipv6") else 4
        changed: set[Prefix] = set()
        self._sweep(st, changed, version)
        if not st.stale:
            st.gr_helping = False
            st.stale_deadline = None
            self._rearm_stale()
        return self._select_or_hold(changed)

    def _sweep(self, st: PeerState, changed: set[Prefix], version: int | None = None) -> int:
        removed = 0
        for prefix, path in list(st.paths()):
            if path.stale and (version is None or prefix.version == version):
                self._del_path(st, prefix)
                changed.add(prefix)
                removed += 1
        st.stale = any(p.stale for _, p in st.paths())
        if not st.stale:
            st.gr_helping = False
        return removed

    # ---- Adj-RIB-In (the per-prefix index): change it only through these -----------------

    def _set_path(self, st: PeerState, prefix: Prefix, path: Path) -> Prefix:
        """Store ``path`` as ``st``'s path to ``prefix``; returns the interned prefix (one
        network object per prefix across all peers)."""
        p = self._store_path(st, prefix, path)
        if p is None:  # that very path was there already
            p = self._index[prefix][0]
        return p

    def _store_path(self, st: PeerState, prefix: Prefix, path: Path) -> Prefix | None:
        """Store ``path`` as ``st``'s path to ``prefix`` in one index lookup: the interned
        prefix if ``path`` is new for it, else None (the same path again changes nothing)."""
        entry = self._index.get(prefix)
        if entry is None:
            entry = self._index[prefix] = [prefix]
        i = st.slot + 1
        if len(entry) <= i:
            entry.extend([None] * (i + 1 - len(entry)))
        have = entry[i]
        if have is path:
            return None
        if have is None:
            st.n_paths += 1
        elif have.colours and st.params.colour is not None:
            self._count_hidden(st, have, -1)
        entry[i] = path
        if path.colours and st.params.colour is not None:
            self._count_hidden(st, path, 1)
        p: Prefix = entry[0]
        return p

    def _del_path(self, st: PeerState, prefix: Prefix) -> bool:
        entry = self._index.get(prefix)
        i = st.slot + 1
        if entry is None or len(entry) <= i or entry[i] is None:
            return False
        if entry[i].colours and st.params.colour is not None:
            self._count_hidden(st, entry[i], -1)
        entry[i] = None
        st.n_paths -= 1
        while entry[-1] is None:
            entry.pop()
        if len(entry) == 1:
            del self._index[prefix]
        return True

    def _clear_paths(self, st: PeerState) -> None:
        for prefix, _ in list(st.paths()):
            self._del_path(st, prefix)

    def _count_hidden(self, st: PeerState, path: Path, n: int) -> None:
        """``path`` enters (``n`` 1) or leaves (-1) ``st``'s Adj-RIB-In: the hidden gauges."""
        why = _hidden_on(st.params.colour, path)
        if why is not None:
            st.counters[why.counter] += n
            self.counters[why.counter] += n

    def _recount_hidden(self, st: PeerState) -> int:
        """The session's colour changed: its hidden gauges counted again. Returns how many of
        its paths are hidden now."""
        for why in HiddenReason:
            self.counters[why.counter] -= st.counters.pop(why.counter, 0)
        n = 0
        if st.params.colour is not None:
            for _prefix, path in st.paths():
                if _hidden_on(st.params.colour, path) is not None:
                    self._count_hidden(st, path, 1)
                    n += 1
        return n

    def _log_hidden(
        self, st: PeerState, prefix: Prefix, colours: tuple[ColourCommunity, ...]
    ) -> None:
        """An UPDATE whose routes the session hides: logged for the 1st, 2nd, 4th, 8th... such
        UPDATE of the session (a misconfigured neighbour sends many)."""
        why = hidden(route_colours(colours), st.params.colour)
        if why is None:
            return
        st.hidden_updates += 1
        k = st.hidden_updates
        if k & (k - 1) == 0:
            log.warning(
                "bgp_route_hidden",
                peer=str(st.params.address),
                prefix=str(prefix),
                route_colours=sorted(route_colours(colours)),
                session_colour=st.params.colour,
                reason=why,
                count=k,
            )

    @staticmethod
    def _sort_key(item: tuple[PeerState, Path]) -> tuple[bool, int, int, int, int, int]:
        st, path = item
        bid = int(st.bgp_id) if st.bgp_id is not None else 2**32
        return (
            GRACEFUL_SHUTDOWN in path.communities,
            path.as_path_length,
            _ORIGIN_RANK.get(path.origin, 3),
            bid,
            path.peer.version,
            int(path.peer),
        )

    def _select(self, prefix: Prefix) -> tuple[Path | None, list[Path]]:
        entry = self._index.get(prefix)
        sel = _NO_SELECTION if entry is None else self._select_paths(tuple(entry[1:]))
        return sel.best, [p for _st, p in sel.mp]

    def _selection(self, prefix: Prefix) -> _Selection:
        """The prefix's best path and multipath set, shared with the prefixes of the same
        recompute that have the very same paths."""
        entry = self._index.get(prefix)
        if entry is None:
            return _NO_SELECTION
        key = tuple(map(id, islice(entry, 1, None)))
        sel = self._selections.get(key)
        if sel is not None:
            return sel
        sel = self._select_paths(tuple(islice(entry, 1, None)))
        if len(self._selections) >= 2048:
            self._selections.clear()
        self._selections[key] = sel  # holds the paths: their ids are not reused meanwhile
        return sel

    def _select_paths(self, paths: tuple[Path | None, ...]) -> _Selection:
        self.stats.computed += 1
        cands = [
            (st, p)
            for st, p in zip(self._slots, paths, strict=False)
            if p is not None
            and st is not None
            and st.usable
            and (not p.colours or _hidden_on(st.params.colour, p) is None)
        ]
        if not cands:
            return _Selection(paths, None, [], frozenset(), (), (), (), _NO_SELECTION.outcome)
        cands.sort(key=self._sort_key)
        best = cands[0][1]
        relax = self.params.multipath_relax
        gshut = GRACEFUL_SHUTDOWN in best.communities
        mp = [
            c
            for c in cands
            if (GRACEFUL_SHUTDOWN in c[1].communities) == gshut
            and c[1].as_path_length == best.as_path_length
            and c[1].origin == best.origin
            and (relax or (c[1].as_path[:1] == best.as_path[:1]))
        ][: self.params.max_paths]
        # an NNHN names BGP Identifiers only: never None or 0.0.0.0 (RFC 6286 §2.1)
        mp_ids = tuple(st.bgp_id for st, _p in mp if st.bgp_id is not None and int(st.bgp_id))
        fwd = tuple(
            sorted(
                (self._next_hop_view(st, p) for st, p in mp),
                key=lambda nh: (nh.peer.version, int(nh.peer)),
            )
        )
        if fwd:
            fwd = self._intern_fwd(fwd)
        slots = tuple(sorted(st.slot for st, _p in mp))
        outcome = (best.as_path, best.origin, best.communities, best.colours), slots, mp_ids
        return _Selection(
            paths,
            best,
            mp,
            frozenset(st for st, _p in mp),
            mp_ids,
            fwd,
            slots,
            self._intern_outcome(outcome),
        )

    def _recompute(self, prefixes: set[Prefix]) -> list[Effect]:
        if self._dirty and prefixes:
            self._dirty -= prefixes
            if not self._dirty:
                self._flush_at = None
        events: list[Effect] = []
        decisions: list[Effect] = []
        stats = self.stats
        outcomes = self._outcome
        for prefix in sorted(prefixes, key=lambda n: (n.version, n)):
            sel = self._selection(prefix)
            stats.selections += 1
            best, mp_peers, mp_ids = sel.best, sel.mp_peers, sel.mp_ids
            originated = prefix in self.originated
            fwd = sel.fwd if not originated else ()
            if fwd != self._fwd.get(prefix, ()):
                if fwd:
                    self._fwd[prefix] = fwd
                else:
                    self._fwd.pop(prefix, None)
                events.append(NextHopsChanged(prefix, fwd))
            # what every Adj-RIB-Out entry of the prefix follows from (with the neighbors'
            # and drain parameters, which clear the cache when they change)
            outcome = _ORIGINATED if originated else sel.outcome
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
                self._nhc_values(mp_ids)
                if self.params.role.helper and mp_ids and not originated
                else None
            )
            for st in self.peers.values():
                want = self._advert(prefix, originated, best, st, mp_peers, mp_ids, nhcs)
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
        self._selections.clear()
        return events + decisions

    def _intern_outcome(self, outcome: tuple[Any, ...]) -> tuple[Any, ...]:
        """One tuple per distinct selection outcome (a fabric has few): ~8 bytes per prefix,
        and an unchanged outcome is the same object."""
        return _bounded_intern(self._outcomes, outcome, outcome)

    def _intern_fwd(self, fwd: tuple[NextHop, ...]) -> tuple[NextHop, ...]:
        """One tuple object per next-hop set: prefixes with the same next hops share it, and
        a consumer may cache what it derives from one by identity. Keyed by the identities of
        the (memoised) views; the table holds the tuple, so those views stay alive and their
        ids cannot be reused while the entry exists."""
        return _bounded_intern(self._fwd_sets, tuple(map(id, fwd)), fwd)

    @staticmethod
    def _next_hop_view(st: PeerState, p: Path) -> NextHop:
        v = p.view
        if v is not None and v.peer_bgp_id == st.bgp_id and v.interface == st.params.interface:
            return v
        v = NextHop(p.peer, st.bgp_id, p.next_hop, st.params.interface, p.nnh, p.nnhn_status)
        object.__setattr__(p, "view", v)  # a memo, not part of the path's value
        return v

    def _nhc_values(
        self, mp_ids: tuple[ipaddress.IPv4Address, ...]
    ) -> dict[tuple[IPAddress, int], bytes]:
        """NHC values for one NNHN, by the next hop sent and the prefix's IP version (filled as
        peers need them): the same for every prefix with that multipath set, so it is encoded
        once per peer and family, not per prefix and peer."""
        by_nh = self._nhc_cache.get(mp_ids)
        if by_nh is None:
            if len(self._nhc_cache) >= 1024:
                self._nhc_cache.clear()
            by_nh = self._nhc_cache[mp_ids] = {}
        return by_nh

    def _own_nhc(
        self, nh: IPAddress, version: int, mp_ids: tuple[ipaddress.IPv4Address, ...]
    ) -> bytes:
        """Our NHC for routes of IP ``version`` sent with next hop ``nh``: built afresh, never
        from a received one. A link-local-only next hop gets our BGP ID (4 octets, as FRR)."""
        bgpid = nhcmod.BgpId(self.params.router_id) if nhcmod.is_link_local(nh) else None
        return nhcmod.Nhc.for_next_hop(
            nh,
            afi=nhcmod.AFI_IPV4 if version == 4 else nhcmod.AFI_IPV6,
            nnhn=nhcmod.Nnhn(self.params.router_id, mp_ids),
            bgpid=bgpid,
        ).encode_value()

    def _advert(
        self,
        prefix: Prefix,
        originated: bool,
        best: Path | None,
        st: PeerState,
        mp_peers: frozenset[PeerState],
        mp_ids: tuple[ipaddress.IPv4Address, ...],
        nhcs: dict[tuple[IPAddress, int], bytes] | None,
    ) -> Advertise | None:
        if not originated and (
            best is None
            or st in mp_peers
            or st.params.remote_as in best.as_path
            or (best.colours and not may_send(best.colour_set, st.params.colour))
        ):
            return None
        n = st.params
        if n.export_filter is None:
            if self._no_export(n):
                return None
        elif not n.export_filter.permits(prefix):
            return None
        if prefix.version not in n.families:
            return None
        if prefix.version == 6:
            nh: IPAddress | None = (
                n.local_address if n.local_address.version == 6 else n.local_address6
            )
        else:
            nh = n.local_address if n.local_address.version == 4 or n.unnumbered else None
        if nh is None:
            return None
        drain = self.params.drain or st.drained
        own = (self.params.local_as,) * (1 + self.params.drain_prepend if drain else 1)
        if originated:
            colours: tuple[ColourCommunity, ...] = ()
            origin = self._origin_colours.get(prefix) if self._origin_colours else None
            if origin is not None:
                copy = originate_to(origin, n.colour)
                if copy is None:  # a session of a colour that is neither its nor a backup
                    return None
                if copy.colour is not None:
                    colours = (ColourCommunity(copy.colour),)
            return Advertise(
                n.address,
                prefix,
                nh,
                as_path=own,
                communities=(GRACEFUL_SHUTDOWN,) if drain else (),
                colours=colours,
            )
        assert best is not None
        communities = best.communities
        if drain and GRACEFUL_SHUTDOWN not in communities:
            communities = (*communities, GRACEFUL_SHUTDOWN)
        value: bytes | None = None
        if nhcs is not None:
            value = nhcs.get((nh, prefix.version))
            if value is None:
                value = nhcs[(nh, prefix.version)] = self._own_nhc(nh, prefix.version, mp_ids)
        return Advertise(
            n.address,
            prefix,
            nh,
            as_path=(*own, *best.as_path),
            origin=best.origin,
            communities=communities,
            nhc=value,
            colours=best.colours,
        )


def _family_afi_safi(route: api.RouteAnnounced) -> tuple[int, int]:
    """The (AFI, SAFI) of ExaBGP's family name ("ipv4 unicast" -> (1, 1))."""
    afi, _, safi = route.family.partition(" ")
    return (
        _AFI.get(afi, nhcmod.AFI_IPV4 if route.prefix.version == 4 else nhcmod.AFI_IPV6),
        _SAFI.get(safi, -1),
    )


_AFI = {"ipv4": nhcmod.AFI_IPV4, "ipv6": nhcmod.AFI_IPV6}
_SAFI = {"unicast": 1, "multicast": 2}


def _attrs_row(prefix: Prefix, p: Path | Refused) -> dict[str, Any]:
    """A received route's prefix and attributes, as the neighbor views show them."""
    return {
        "prefix": str(prefix),
        "next_hop": str(p.next_hop),
        "as_path": list(p.as_path),
        "origin": p.origin,
        "communities": [f"{a}:{b}" for a, b in p.communities],
        "colours": [c.text() for c in p.colours],
    }


def _row_order(row: dict[str, Any]) -> tuple[int, Prefix]:
    return _family_order(ipaddress.ip_network(row["prefix"]))


def _family_order(p: Prefix) -> tuple[int, Prefix]:
    """IPv4 before IPv6, each in address order."""
    return (p.version, p)


_NOTIFICATION_REASON = re.compile(r"^notification (sent|received) \((\d+),")


def _notification_in(reason: str) -> tuple[str, int] | None:
    """ExaBGP's "down" reason names a NOTIFICATION it sent or received ("notification sent
    (4,0)"); the API reports only received ones as events."""
    m = _NOTIFICATION_REASON.match(reason)
    if m is None:
        return None
    return ("send" if m.group(1) == "sent" else "receive", int(m.group(2)))


def _versions(families: Iterable[str]) -> set[int]:
    """IP versions of ExaBGP family names ("ipv4/unicast", "ipv6 unicast"); unicast only."""
    out: set[int] = set()
    for f in families:
        afi, _, safi = f.replace("/", " ").partition(" ")
        if safi == "unicast" and afi in ("ipv4", "ipv6"):
            out.add(4 if afi == "ipv4" else 6)
    return out


def _with_stale(path: Path, stale: bool) -> Path:
    return Path(
        path.peer,
        path.next_hop,
        path.as_path,
        path.as_path_length,
        path.origin,
        path.communities,
        path.nnh,
        path.nnhn_status,
        stale,
        path.colours,
    )


def _hidden_on(session: int | None, path: Path) -> HiddenReason | None:
    """Why a session of colour ``session`` hides ``path`` (None: it does not)."""
    if session is None or not path.colours:
        return None
    return hidden(path.colour_set, session)


def _events_first(effects: list[Effect]) -> list[Effect]:
    events = [e for e in effects if not isinstance(e, Advertise | Retract | ResetPeer)]
    decisions = [e for e in effects if isinstance(e, Advertise | Retract | ResetPeer)]
    return events + decisions


def _bounded_intern(table: dict[Any, _V], key: Any, value: _V) -> _V:
    """``table[key]`` if there, else ``value`` stored under ``key``; a table that reached 4096
    entries starts over (few distinct values in a fabric: a full one means churn)."""
    have = table.get(key)
    if have is not None:
        return have
    if len(table) >= 4096:
        table.clear()
    table[key] = value
    return value
