"""Path-quality data model (pure data): the inputs, parameters and outputs of the path table.

The table (:mod:`~glbd.quality.pathtable`), its weight functions
(:mod:`~glbd.quality.pathweight`), its profiles (:mod:`~glbd.quality.pathprofile`) and its views
(:mod:`~glbd.quality.pathview`) all speak these
types, and the app builds them from config and the RIB; they live apart so that none of those
modules has to import the table itself.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from glbd.base.reasons import QualitySource, RemoteStatus
from glbd.bgp.ribtypes import Role
from heartbeat.wire import node_str

__all__ = [
    "DEFAULT_MAX_PROFILES",
    "DEFAULT_WEIGHT_TABLE",
    "MAX_Q",
    "LocalLike",
    "LocalLink",
    "NextHop",
    "PathTableParams",
    "RemoteLike",
    "RemoteLink",
    "Weight",
    "WeightInputs",
    "next_hop_from_rib",
]

DEFAULT_WEIGHT_TABLE: tuple[int, ...] = (1, 2, 3, 5, 8, 12, 18, 27)
MAX_Q = 7.0
#: profiles with NNHN a table keeps at most. A 64-leaf 3-stage fabric makes about one per
#: remote leaf (63) plus one per failure pattern or multi-homed leaf pair (C(64, 2) = 2016):
#: 4096 covers both with room, and 4096 kernel groups cost the kernel a few MB
DEFAULT_MAX_PROFILES = 4096


# --- inputs ----------------------------------------------------------------------------------


class NextHop(NamedTuple):
    """A forwarding next hop = a BGP neighbour: its BGP id (32-bit int), address, interface.
    (A NamedTuple: hashed in C, it is a key of every weight map.)"""

    bgp_id: int
    address: str
    ifname: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"bgp_id": node_str(self.bgp_id), "address": self.address, "ifname": self.ifname}


class LocalLike(Protocol):
    """What :meth:`PathTable.set_local` reads (``glbd.quality.linkq.LinkQuality`` fits)."""

    @property
    def band(self) -> int: ...
    @property
    def down(self) -> bool: ...
    @property
    def capacity_mbps(self) -> float: ...


class RemoteLike(Protocol):
    """What :meth:`PathTable.set_remote` reads per entry (``heartbeat.wire.Entry`` fits)."""

    @property
    def far_end_id(self) -> int: ...
    @property
    def link_id(self) -> int: ...
    @property
    def band(self) -> int: ...
    @property
    def down(self) -> bool: ...
    @property
    def capacity_mbps(self) -> int: ...


@dataclass(frozen=True, slots=True)
class LocalLink:
    band: int
    down: bool = False
    capacity_mbps: float = 10_000.0


@dataclass(frozen=True, slots=True)
class RemoteLink:
    far_end_id: int
    link_id: int
    band: int
    down: bool = False
    capacity_mbps: int = 10_000


def next_hop_from_rib(nh: Any) -> tuple[NextHop, frozenset[int] | None] | None:
    """A ``glbd.bgp.ribtypes.NextHop`` as (NextHop, NNH set); None when the peer's BGP id is
    unknown."""
    if nh.peer_bgp_id is None:
        return None
    nnh = None if nh.nnh is None else frozenset(int(i) for i in nh.nnh)
    return NextHop(int(nh.peer_bgp_id), str(nh.next_hop), nh.interface), nnh


@dataclass(frozen=True, slots=True)
class PathTableParams:
    role: Role = Role.BOTH
    #: "bottleneck" (min of local and remote) or "mean" (their average)
    combine: str = "bottleneck"
    weight_table: tuple[int, ...] = DEFAULT_WEIGHT_TABLE
    max_weight: int = 255
    capacity_aware: bool = True
    #: weights with memory (function 6 in :mod:`glbd.quality.pathweight`): hold a GLB next hop's
    #: penalty while its remote link stays busy. False = stateless weights (``raw`` alone).
    memory: bool = True
    #: per controller step, a next hop's memory moves toward its current ratio by at most this
    #: factor (multiplicative decrease; 0.5 = at most halved per step)
    memory_decrease: float = 0.5
    #: dead zone: the memory only falls while the ratio is below this (0.5 = about two bands
    #: behind the profile's best next hop), so one-band wobble on evenly loaded links never
    #: accumulates into a skew
    memory_attack_below: float = 0.5
    #: remote quality from which the remote link counts as having headroom: the memory then
    #: grows by ``memory_increase`` per step (additive increase); at q = 7 it is released fully
    memory_release_q: float = 6.0
    memory_increase: float = 0.25
    #: profiles with NNHN at most; a prefix beyond it is routed over plain ECMP
    #: (:mod:`glbd.quality.pathtable`)
    max_profiles: int = DEFAULT_MAX_PROFILES

    def __post_init__(self) -> None:
        if self.combine not in ("bottleneck", "mean"):
            raise ValueError("combine must be 'bottleneck' or 'mean'")
        t = self.weight_table
        if len(t) != 8 or t[0] <= 0 or any(a > b for a, b in itertools.pairwise(t)):
            raise ValueError("weight_table: 8 positive, non-decreasing values (q = 0..7)")
        if not 1 <= self.max_weight <= 65535:
            raise ValueError("max_weight must be 1..65535")
        if not 0.0 < self.memory_decrease < 1.0:
            raise ValueError("memory_decrease must be in (0, 1)")
        if not 0.0 < self.memory_attack_below <= 1.0:
            raise ValueError("memory_attack_below must be in (0, 1]")
        if not 0.0 < self.memory_increase <= 1.0:
            raise ValueError("memory_increase must be in (0, 1]")
        if not 0.0 <= self.memory_release_q <= MAX_Q:
            raise ValueError("memory_release_q must be 0..7")
        if self.max_profiles < 1:
            raise ValueError("max_profiles must be at least 1")


# --- outputs ---------------------------------------------------------------------------------


class WeightInputs(NamedTuple):
    """Everything a weight came from (shown by ``glbctl quality``)."""

    local_band: int | None
    local_down: bool
    local_capacity_mbps: float | None
    remote_quality: float | None
    remote_down: bool
    remote_capacity_mbps: float | None
    #: why the remote part is what it is: ok | down | nnhn_missing | no_heartbeat |
    #: nnh_not_reported | not_load_balancer
    remote_status: RemoteStatus
    nnh: tuple[int, ...] | None
    quality: float
    capacity_mbps: float
    raw: float
    guard: bool = False
    #: the controller's memory (1 = no held penalty); the weight uses min(raw, memory x top)
    memory: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "local_band": self.local_band,
            "local_down": self.local_down,
            "local_capacity_mbps": self.local_capacity_mbps,
            "remote_quality": None
            if self.remote_quality is None
            else round(self.remote_quality, 3),
            "remote_down": self.remote_down,
            "remote_capacity_mbps": self.remote_capacity_mbps,
            "remote_status": self.remote_status,
            "nnh": None if self.nnh is None else [node_str(i) for i in self.nnh],
            "quality": round(self.quality, 3),
            "capacity_mbps": self.capacity_mbps,
            "raw": round(self.raw, 3),
            "guard": self.guard,
            "memory": round(self.memory, 3),
        }


class Weight(NamedTuple):
    value: int
    source: QualitySource
    inputs: WeightInputs

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "source": self.source, "inputs": self.inputs.to_dict()}
