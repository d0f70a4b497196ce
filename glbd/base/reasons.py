"""glbd's own named reasons, shared by the cores, counters, logs, metrics and glbctl.

Every enum is an :class:`enum.StrEnum`: a member's value is the stable snake_case name that
``glbctl --json`` and metric labels show (``tests/vectors/glbctl_contract.json``), and a member
compares and hashes like that string.
"""

from __future__ import annotations

import enum

__all__ = [
    "NHC_DISREGARDED",
    "FibConflict",
    "GracefulStopFallback",
    "HiddenReason",
    "LinkChange",
    "MetricsDrop",
    "NdpIgnored",
    "NhcDiscard",
    "NhcStatus",
    "OriginReason",
    "ProfileFallback",
    "QualitySource",
    "RemoteStatus",
    "ResetReason",
    "RouteRejected",
    "StopKind",
    "UpdateDelayEnd",
    "nhc_malformed",
]


class QualitySource(enum.StrEnum):
    """Where a next hop's weight comes from (:class:`glbd.quality.pathmodel.Weight`)."""

    #: the helper's heartbeats for the next-next hops are known: local and remote combined
    GLB = "glb"
    #: remote unknown: the local link's band alone (DLB-style fallback)
    DLB = "dlb"
    #: neither known: capacity or equal split
    STATIC = "static"


class RemoteStatus(enum.StrEnum):
    """The remote part of a next hop's quality (``WeightInputs.remote_status``)."""

    OK = "ok"
    DOWN = "down"
    NNH_NOT_REPORTED = "nnh_not_reported"
    NO_HEARTBEAT = "no_heartbeat"
    NNHN_MISSING = "nnhn_missing"
    NOT_LOAD_BALANCER = "not_load_balancer"


class ResetReason(enum.StrEnum):
    """Why the RIB asks the speaker to close a BGP session
    (:class:`glbd.bgp.ribtypes.ResetPeer`)."""

    #: BFD declared the neighbor down (sent as Cease subcode 10 "BFD Down", RFC 9384)
    BFD_DOWN = "bfd_down"
    #: the neighbor sent more prefixes than its ``max_prefixes`` (Cease subcode 1 "Maximum
    #: Number of Prefixes Reached", RFC 4486), or reconnected within its restart time
    MAX_PREFIXES = "max_prefixes"


class RouteRejected(enum.StrEnum):
    """Why a received route was not taken into the Adj-RIB-In (per neighbor and in total:
    ``rejected_<reason>`` in ``glbctl counters``/``neighbors``, metric
    ``glbd_bgp_routes_rejected_total{reason}``)."""

    #: our AS is in its AS path
    AS_LOOP = "as_loop"
    #: the neighbor's import prefix list denies it
    IMPORT_DENIED = "import_denied"
    #: its address family is not activated for the neighbor (``families``)
    FAMILY_NOT_ACTIVE = "family_not_active"
    #: past the neighbor's ``max_prefixes`` with action "teardown" (the session is closed)
    MAX_PREFIXES = "max_prefixes"
    #: its next hop is one of this router's own addresses (it would route to itself)
    NEXTHOP_SELF = "nexthop_self"
    #: its next hop is outside every subnet of the session's interface (directly connected
    #: sessions only): the kernel cannot resolve it on that port
    NEXTHOP_OFFLINK = "nexthop_offlink"
    #: its next hop is unspecified, loopback or multicast: no gateway at all
    NEXTHOP_INVALID = "nexthop_invalid"
    #: an eBGP neighbor without an ``import`` list while ``bgp.ebgp_requires_policy`` is on
    #: (RFC 8212: no policy, no routes)
    NO_IMPORT_POLICY = "no_import_policy"

    @property
    def counter(self) -> str:
        return f"rejected_{self.value}"


class HiddenReason(enum.StrEnum):
    """Why a received route is kept but hidden: in the Adj-RIB-In, never selected nor
    re-advertised (``glbctl neighbor PEER received``: ``hidden``). ``hidden_<reason>`` in the
    neighbor's and the RIB's counters is how many routes are hidden now (a gauge)."""

    #: the route is coloured and none of its colours is the session's (docs/colours.md)
    COLOUR_MISMATCH = "colour_mismatch"

    @property
    def counter(self) -> str:
        return f"hidden_{self.value}"


class UpdateDelayEnd(enum.StrEnum):
    """Why the RIB's initial-exchange deferral (``bgp.update_delay_s``) ended: counted as
    ``update_delay_end_<reason>`` in ``glbctl counters``."""

    #: every neighbor sent End-of-RIB, did not establish within the establish-wait, or is
    #: restarting itself (the normal end)
    END_OF_RIB = "end_of_rib"
    #: ``update_delay_s`` passed first: some established neighbor never sent End-of-RIB
    TIMER = "timer"

    @property
    def counter(self) -> str:
        return f"update_delay_end_{self.value}"


class FibConflict(enum.StrEnum):
    """FIB writes glbd left out because the object is not glbd's (``glbctl profiles`` ``fib``
    ``conflicts``, metric ``glbd_fib_conflicts_total{reason}``), in the contract's order."""

    #: the kernel refused a route create: EEXIST
    ROUTE_EXISTS_ON_CREATE = "route_exists_on_create"
    #: a prefix glbd starts to want is someone else's
    FOREIGN_ROUTE_PRESENT = "foreign_route_present"
    #: a route event: another's route on a wanted prefix
    FOREIGN_ROUTE_APPEARED = "foreign_route_appeared"
    #: another's route replaced one of glbd's routes
    GLBD_ROUTE_REPLACED = "glbd_route_replaced"
    #: a member/group create refused: EEXIST (id in use)
    NEXTHOP_ID_TAKEN = "nexthop_id_taken"
    #: one of glbd's nexthop ids now carries another protocol
    NEXTHOP_REOWNED = "nexthop_reowned"


class NhcStatus(enum.StrEnum):
    """What became of a received route's NHC (``NextHop.nnhn_status``). Every value but
    ``absent``, ``not_validated`` and ``valid`` is a reason the NHC was disregarded (the route
    is kept: RFC 7606 attribute discard), counted per peer and in total (``glbctl counters``,
    metric ``glbd_nhc_disregarded_total{reason}``)."""

    #: no NHC on the route
    ABSENT = "absent"
    #: a helper only: received NHCs are not validated
    NOT_VALIDATED = "not_validated"
    #: a usable NNHN, the next-next hops are known
    VALID = "valid"
    #: the attribute flags are not optional transitive (draft-ietf-idr-nhc §2)
    NHC_BAD_FLAGS = "nhc_bad_flags"
    #: malformed attribute (``glbd.bgp.nhc.DecodeError.reason``), by reason
    NHC_MALFORMED_TOO_SHORT = "nhc_malformed_too_short"
    NHC_MALFORMED_UNKNOWN_AFI = "nhc_malformed_unknown_afi"
    NHC_MALFORMED_BAD_NEXT_HOP_LENGTH = "nhc_malformed_bad_next_hop_length"
    NHC_MALFORMED_BAD_LINK_LOCAL_NEXT_HOP = "nhc_malformed_bad_link_local_next_hop"
    NHC_MALFORMED_TRUNCATED_NEXT_HOP = "nhc_malformed_truncated_next_hop"
    NHC_MALFORMED_TRAILING_BYTES = "nhc_malformed_trailing_bytes"
    NHC_MALFORMED_TLV_OVERFLOW = "nhc_malformed_tlv_overflow"
    #: a link-local-only header next hop without a usable BGPID (draft-ietf-idr-nhc §3.3.1)
    NHC_MALFORMED_BGPID_MISSING = "nhc_malformed_bgpid_missing"
    #: the header's AFI/SAFI are not the route's family
    NHC_FAMILY_MISMATCH = "nhc_family_mismatch"
    #: the header next hop is not the route's (a relayed NHC)
    NHC_NH_MISMATCH = "nhc_nh_mismatch"
    #: an all-zero header next hop with ``nnhn_strict_next_hop``
    NHC_NH_UNSPECIFIED_REJECTED = "nhc_nh_unspecified_rejected"
    #: a link-local-only next hop whose BGPID is not the peer's (no semantic match, §3.3)
    NHC_BGPID_MISMATCH = "nhc_bgpid_mismatch"
    #: no NNHN characteristic
    NNHN_ABSENT = "nnhn_absent"
    #: the NNHN characteristic was malformed (length) and discarded
    NNHN_DISCARDED = "nnhn_discarded"
    #: the NNHN held 0.0.0.0, which is not a BGP Identifier: discarded
    NNHN_ZERO_ID = "nnhn_zero_id"
    #: the NNHN's first ID is not the peer's BGP ID (a stale relayed NNHN)
    NNHN_NH_BGP_ID_MISMATCH = "nnhn_nh_bgp_id_mismatch"
    #: a later prefix of a multi-prefix UPDATE (``trust_packed_nnhn`` off)
    NNHN_PACKED_UNTRUSTED = "nnhn_packed_untrusted"


#: the statuses that disregard the NHC (counted)
NHC_DISREGARDED = frozenset(NhcStatus) - {
    NhcStatus.ABSENT,
    NhcStatus.NOT_VALIDATED,
    NhcStatus.VALID,
}


class NhcDiscard(enum.StrEnum):
    """A characteristic dropped on its own while the rest of the NHC stays usable
    (``glbd.bgp.nhc.Nhc.discarded``; draft-ietf-idr-nhc §2.4). Counted once per received
    UPDATE by a load balancer as ``nhc_characteristic_<value>`` (``glbctl counters``, metric
    ``glbd_nhc_characteristics_discarded_total{reason}``)."""

    #: NNHN shorter than 8 octets or not a multiple of 4
    NNHN_BAD_LENGTH = "nnhn_bad_length"
    #: NNHN holding 0.0.0.0
    NNHN_ZERO_ID = "nnhn_zero_id"
    #: a second NNHN (only the first counts)
    NNHN_EXTRA_INSTANCE = "nnhn_extra_instance"
    #: BGPID neither 4 nor 8 octets
    BGPID_BAD_LENGTH = "bgpid_bad_length"
    #: BGPID 0.0.0.0
    BGPID_ZERO = "bgpid_zero"
    #: a second BGPID (only the first counts)
    BGPID_EXTRA_INSTANCE = "bgpid_extra_instance"

    @property
    def counter(self) -> str:
        return f"nhc_characteristic_{self.value}"


class MetricsDrop(enum.StrEnum):
    """Why the metrics endpoint closed a connection without answering it (``glbctl counters``
    ``metrics`` ``dropped_<reason>``, metric ``glbd_metrics_connections_dropped_total{reason}``)."""

    #: the connection cap was reached: closed at once, before reading anything
    OVER_LIMIT = "over_limit"
    #: no whole request head within the request timeout (idle or slow client)
    REQUEST_TIMEOUT = "request_timeout"
    #: the client did not take the answer within the request timeout
    RESPONSE_TIMEOUT = "response_timeout"

    @property
    def counter(self) -> str:
        return f"dropped_{self.value}"


def nhc_malformed(reason: str) -> NhcStatus:
    """The status for a :class:`glbd.bgp.nhc.DecodeError` reason."""
    return NhcStatus(f"nhc_malformed_{reason}")


class NdpIgnored(enum.StrEnum):
    """Why a router advertisement from a link-local address other than an unnumbered port's
    learned peer did not (yet) move that port's peer (:class:`glbd.unnumbered.ndpeers.NdpPeers`;
    counted with the NDP drops: ``glbctl counters`` ``unnumbered`` ``dropped_<reason>``,
    metric ``glbd_ndp_dropped_total{reason}``)."""

    #: the learned peer's BGP session is Established: nothing else moves it while it is up
    PEER_ESTABLISHED = "peer_established"
    #: counted as a candidate, not yet heard ``confirm`` times over ``confirm_span_s`` without
    #: the learned peer in between (or, after a restart, the remembered peer was not heard)
    CANDIDATE_UNCONFIRMED = "candidate_unconfirmed"
    #: confirmed, but the port's peer moved less than ``min_change_interval_s`` ago
    CHANGE_RATE_LIMITED = "change_rate_limited"
    #: the port is not an unnumbered port being watched
    PORT_NOT_WATCHED = "port_not_watched"


class LinkChange(enum.StrEnum):
    """Why a link's reported quality changed (:class:`glbd.quality.linkq.QualityChanged`; the
    ``reason`` of the ``link_band`` log record)."""

    #: first sample of a link
    NEW = "new"
    #: oper-down, or no carrier
    DOWN = "down"
    #: up again
    UP = "up"
    #: the load moved the band by more than one at once
    JUMP = "jump"
    #: the load crossed a band edge by more than the hysteresis margin
    MARGIN = "margin"
    #: the load stayed in another band for the persistence time
    PERSISTED = "persisted"
    #: the link left the monitored set
    REMOVED = "removed"
    #: band and flag unchanged; the residual capacity reported in heartbeats moved
    RESIDUAL = "residual"
    #: band and flag unchanged; a reload changed the link's usable capacity
    CAPACITY = "capacity"


class ProfileFallback(enum.StrEnum):
    """Why a prefix is routed over plain ECMP of its next hops (its NNHN left out, so it shares
    the profile of its next-hop set) instead of a path-quality profile of its own
    (:class:`glbd.quality.pathtable.PathTable`; ``glbctl counters`` ``profile_fallback_<reason>``,
    metric ``glbd_profile_fallbacks_total{reason}``)."""

    #: its NNHN set would have made a new profile beyond ``PathTableParams.max_profiles``
    PROFILE_CAP = "profile_cap"

    @property
    def counter(self) -> str:
        return f"profile_fallback_{self.value}"


class OriginReason(enum.StrEnum):
    """Why a prefix glbd may originate is advertised or not (:class:`glbd.bgp.origin.Origins`;
    ``glbctl routes`` ``origin.reason``, the ``origin_announce``/``origin_withdraw`` log records).
    The first three advertise it, the others keep it withdrawn."""

    #: in ``originate``: always advertised
    STATIC = "static"
    #: a ``[[bgp.network]]`` entry whose interface is up
    INTERFACE_UP = "interface_up"
    #: a connected prefix of an interface of ``bgp.redistribute_connected`` that is up
    CONNECTED = "connected"
    #: its interface is down (administratively, or no carrier: not oper-up)
    INTERFACE_DOWN = "interface_down"
    #: its interface does not exist (not yet, or deleted)
    NO_INTERFACE = "no_interface"
    #: a connected prefix whose address left the interface
    NO_ADDRESS = "no_address"
    #: a connected prefix that ``bgp.redistribute_connected.prefix_list`` denies
    FILTERED = "filtered"
    #: a reload took it out of the config
    UNCONFIGURED = "unconfigured"

    @property
    def advertised(self) -> bool:
        return self in (OriginReason.STATIC, OriginReason.INTERFACE_UP, OriginReason.CONNECTED)


class StopKind(enum.StrEnum):
    """How a stop (SIGTERM) leaves BGP (:mod:`glbd.bgp.gracestop`; the ``glbd_stopping`` log
    record, ``glbctl status`` ``graceful_restart.next_stop``)."""

    #: withdraw everything glbd announces, then close the sessions: peers move traffic away
    PLANNED = "planned"
    #: ``glbctl graceful-restart`` armed it: BFD AdminDown, the sessions closed without a
    #: NOTIFICATION, nothing withdrawn, the FIB kept: peers that negotiated graceful restart
    #: keep forwarding on glbd's routes until the next glbd's End-of-RIB
    GRACEFUL_RESTART = "graceful_restart"


class GracefulStopFallback(enum.StrEnum):
    """Why a stop withdraws toward a neighbor (or toward all: a planned stop) instead of
    keeping its routes for a graceful restart (``graceful_restart.fallback`` in ``glbctl
    status``, the ``graceful_stop_fallback`` log record)."""

    #: nobody ran ``glbctl graceful-restart``
    NOT_ARMED = "not_armed"
    #: it was armed, but its window ended before the stop
    EXPIRED = "expired"
    #: ``bgp.graceful_restart`` is not "full": glbd does not advertise the capability, so no
    #: peer would keep its routes
    NOT_FULL = "not_full"
    #: the neighbor's OPEN had no graceful restart capability: it would not keep the routes
    PEER_NOT_CAPABLE = "peer_not_capable"
    #: no session is up whose peer negotiated graceful restart
    NO_CAPABLE_PEER = "no_capable_peer"
