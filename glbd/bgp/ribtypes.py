"""The RIB's vocabulary (pure): its parameters (:class:`RibParams`, :class:`NeighborParams`,
:class:`Role`), the events it reports to the rest of the daemon (:class:`PeerUp`,
:class:`PeerDown`, :class:`NextHopsChanged`, :class:`StaleTimerExpired`), the decisions it
hands the BGP speaker (:class:`Advertise`, :class:`Retract`, :class:`ResetPeer`) and its state
records (:class:`Path`, :class:`Refused`, :class:`PeerState`).

Separate from :mod:`glbd.bgp.rib` so that the RIB's collaborators (the Adj-RIB-In index,
selection, the update delay, stale handling, max-prefix, the views) and the daemon's other
layers share these types without importing the RIB itself.
"""

from __future__ import annotations

import enum
import ipaddress
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from glbd.base.reasons import HiddenReason, ResetReason, RouteRejected
from glbd.bgp import exabgp_api as api
from glbd.bgp.prefixlist import PrefixList
from glbd.colours.colour import ColourCommunity
from glbd.colours.colours import Origination, hidden, route_colours

__all__ = [
    "GRACEFUL_SHUTDOWN",
    "REFUSED_KEPT",
    "Advertise",
    "Connected",
    "Decision",
    "Effect",
    "Entry",
    "Event",
    "IPAddress",
    "NeighborParams",
    "NextHop",
    "NextHopsChanged",
    "Path",
    "PeerDown",
    "PeerState",
    "PeerUp",
    "Prefix",
    "Refused",
    "ResetPeer",
    "Retract",
    "RibParams",
    "RibStats",
    "Role",
    "StaleTimerExpired",
    "count_rejected",
    "events_first",
    "hidden_on",
    "is_ebgp",
    "no_export_policy",
    "no_import_policy",
    "with_stale",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Prefix = ipaddress.IPv4Network | ipaddress.IPv6Network


#: the GRACEFUL_SHUTDOWN well-known community (RFC 8326): the sender is draining; a path that
#: carries it is least preferred and stays out of multipath while any other path exists
GRACEFUL_SHUTDOWN = (65535, 0)


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
    :meth:`glbd.bgp.rib.Rib.set_connected`): ``address`` on ``interface``, reaching
    ``network`` on-link."""

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
    """One forwarding next hop of a prefix, with the validated next-next-hop set (or None)
    and the fabric colour of the session it was learned on."""

    peer: IPAddress
    peer_bgp_id: ipaddress.IPv4Address | None
    next_hop: IPAddress
    interface: str | None
    nnh: tuple[ipaddress.IPv4Address, ...] | None
    nnhn_status: str
    #: the colour of the session (peer) this next hop was learned from; None: uncoloured
    colour: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "peer": str(self.peer),
            "peer_bgp_id": None if self.peer_bgp_id is None else str(self.peer_bgp_id),
            "next_hop": str(self.next_hop),
            "interface": self.interface,
            "nnh": None if self.nnh is None else [str(i) for i in self.nnh],
            "nnhn_status": self.nnhn_status,
            "colour": self.colour,
        }


@dataclass(frozen=True)
class NextHopsChanged:
    """The forwarding next-hop set of ``prefix`` or its primary colour changed; empty = no
    longer reachable."""

    prefix: Prefix
    next_hops: tuple[NextHop, ...]
    #: the prefix's primary colour: the colour of its visible received copy with the lowest
    #: AIGP (the primary copy, docs/colours.md); None: no copy carries AIGP (plain GLB)
    colour: int | None = None
    #: with a colour: the AS that originated the prefix (the last of the best path's AS path;
    #: None for a local one), which names the destination of a fabric without NNHN
    origin_as: int | None = None


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
    value, :meth:`glbd.bgp.nhc.Nhc.encode_value`)."""

    peer: IPAddress
    prefix: Prefix
    next_hop: IPAddress
    as_path: tuple[int, ...]
    origin: str = "igp"
    communities: tuple[tuple[int, int], ...] = ()
    nhc: bytes | None = None
    #: Color Extended Communities (a learned route's as received, or an originated copy's)
    colours: tuple[ColourCommunity, ...] = ()
    #: AIGP (RFC 7311): 0 on an originated primary copy, a learned route's as received; only
    #: on a coloured session (:func:`glbd.bgp.ribcolour.aigp_session`); None: none sent
    aigp: int | None = None


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
    #: its AIGP metric (RFC 7311); None: none, or received on an uncoloured session (ignored)
    aigp: int | None = None
    #: the colour values of ``colours``, for the rules (made once per interned path)
    colour_set: frozenset[int] = field(default=frozenset(), compare=False, hash=False, repr=False)
    #: memo of the forwarding view (:class:`NextHop`) of this path, rebuilt when the peer's
    #: BGP ID, interface or session colour differ from the ones it was built with
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
            self.aigp,
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
    aigp: int | None = None


#: refused routes kept per peer for the pre-policy view; past it they are only counted
#: (``refused_not_kept``): a peer sending what it may not cannot grow glbd's memory
REFUSED_KEPT = 4096

#: the per-prefix index: prefix -> [the interned prefix, path of slot 0, path of slot 1, ...]
#: (None where that peer has no path; no trailing Nones). One list per prefix is the whole
#: Adj-RIB-In: ~8 bytes per path instead of two dict entries.
Entry = list[Any]


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
    index: dict[Prefix, Entry] = field(default_factory=dict, repr=False)

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


def with_stale(path: Path, stale: bool) -> Path:
    """``path`` with its stale flag set to ``stale`` (not interned)."""
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
        path.aigp,
    )


def hidden_on(session: int | None, path: Path) -> HiddenReason | None:
    """Why a session of colour ``session`` hides ``path`` (None: it does not)."""
    if session is None or not path.colours:
        return None
    return hidden(path.colour_set, session)


def events_first(effects: list[Effect]) -> list[Effect]:
    """The events of ``effects`` (for the FIB side), then the decisions, each in order."""
    events = [e for e in effects if not isinstance(e, Advertise | Retract | ResetPeer)]
    decisions = [e for e in effects if isinstance(e, Advertise | Retract | ResetPeer)]
    return events + decisions


def is_ebgp(params: RibParams, n: NeighborParams) -> bool:
    return n.remote_as is None or n.remote_as != params.local_as


def no_import_policy(params: RibParams, n: NeighborParams) -> bool:
    """RFC 8212: this eBGP neighbor has no import filter, so nothing it sends is taken."""
    return params.ebgp_requires_policy and n.import_filter is None and is_ebgp(params, n)


def no_export_policy(params: RibParams, n: NeighborParams) -> bool:
    """RFC 8212: this eBGP neighbor has no export filter, so nothing is sent to it."""
    return params.ebgp_requires_policy and n.export_filter is None and is_ebgp(params, n)


def count_rejected(counters: Counter[str], st: PeerState, why: RouteRejected, n: int) -> None:
    """``n`` routes from ``st`` rejected for ``why``: counted for the peer and the RIB."""
    if n:
        st.counters[why.counter] += n
        counters[why.counter] += n
