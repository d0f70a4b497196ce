"""glbd's own named reasons, shared by the cores, counters, logs, metrics and glbctl.

Every enum is an :class:`enum.StrEnum`: a member's value is the stable snake_case name that
``glbctl --json`` and metric labels show (``tests/vectors/glbctl_contract.json``), and a member
compares and hashes like that string.
"""

from __future__ import annotations

import enum

__all__ = ["FibConflict", "QualitySource", "RemoteStatus", "ResetReason"]


class QualitySource(enum.StrEnum):
    """Where a next hop's weight comes from (:class:`glbd.core.pathtable.Weight`)."""

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
    """Why the RIB asks the speaker to close a BGP session (:class:`glbd.core.rib.ResetPeer`)."""

    #: BFD declared the neighbor down (sent as Cease subcode 10 "BFD Down", RFC 9384)
    BFD_DOWN = "bfd_down"


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
