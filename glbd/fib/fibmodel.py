"""FIB data model: what glbd wants (desired) and what the kernel has (observed). Pure data.

Desired state, keyed by stable strings that the path-quality table owns::

    Desired(
        groups={"prof-a": GroupSpec({Member(ip("198.18.10.2"), "eth1"): 3,
                                     Member(ip("198.18.10.6"), "eth2"): 1})},
        routes={ip_network("203.0.113.0/24"): "prof-a"},
    )

``standby`` adds a second route per prefix at the standby metric (the programmer's metric +
``STANDBY_METRIC_OFFSET`` in :mod:`glbd.fib.fibplan`) through another group: the kernel uses it
by itself when the primary route goes (its group emptied by carrier loss). docs/fib.md,
"Standby routes".

A :class:`Member` is one next hop: gateway + outgoing interface (``onlink`` for a gateway that
is not on a connected subnet). IPv6 link-local gateways need the interface, which every member
has. Weights are positive integers; 0 (or absence) means "not in the group".
"""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeAlias

__all__ = [
    "Desired",
    "GroupSpec",
    "GroupType",
    "IPAddress",
    "IPNetwork",
    "KGroup",
    "KLink",
    "KNexthop",
    "KRoute",
    "Member",
    "Observed",
    "Resilient",
    "RouteKey",
]

IPAddress: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network
RouteKey: TypeAlias = tuple[IPNetwork, int]  # (prefix, metric)


class GroupType(enum.Enum):
    HASH_THRESHOLD = "hash_threshold"  # NEXTHOP_GRP_TYPE_MPATH
    RESILIENT = "resilient"  # NEXTHOP_GRP_TYPE_RES


@dataclass(frozen=True, slots=True)
class Member:
    gateway: IPAddress
    ifname: str
    onlink: bool = False
    #: the hash, computed once: a sync hashes every member of every group several times, and
    #: an address hashes slowly (``hash(hex(int(ip)))``)
    _hash: int = field(init=False, repr=False, compare=False)
    #: the sort key, computed once too: id assignment sorts every member at each BGP step
    _key: tuple[int, int, str, bool] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.gateway, self.ifname, self.onlink)))
        key = (self.gateway.version, int(self.gateway), self.ifname, self.onlink)
        object.__setattr__(self, "_key", key)

    def __hash__(self) -> int:
        return self._hash

    def __lt__(self, other: Member) -> bool:
        return self._key < other._key

    @property
    def label(self) -> str:
        return f"{self.gateway}@{self.ifname}" + ("/onlink" if self.onlink else "")


@dataclass(frozen=True, slots=True)
class Resilient:
    """Resilient group parameters. ``buckets`` cannot change once the group exists (a change
    makes a new group, make-before-break). Timers are seconds; the kernel wants clock_t
    (1/100 s)."""

    buckets: int = 128
    idle_timer_s: float = 120.0
    unbalanced_timer_s: float = 0.0
    #: a member whose weight falls and whose share of the weights falls to this fraction of
    #: what it was, or lower, loses its excess buckets at once, busy or not (0: never; glbd's
    #: own setting, not the kernel's: not in a group read back)
    migrate_share: float = 0.0

    @property
    def idle_timer_ct(self) -> int:
        return round(self.idle_timer_s * 100)

    @property
    def unbalanced_timer_ct(self) -> int:
        return round(self.unbalanced_timer_s * 100)


@dataclass(frozen=True, slots=True)
class GroupSpec:
    weights: Mapping[Member, int]
    resilient: Resilient | None = None

    @property
    def type(self) -> GroupType:
        return GroupType.HASH_THRESHOLD if self.resilient is None else GroupType.RESILIENT


@dataclass(frozen=True, slots=True)
class Desired:
    groups: Mapping[str, GroupSpec] = field(default_factory=dict)
    routes: Mapping[IPNetwork, str] = field(default_factory=dict)  # prefix -> group key
    #: prefix -> group key of its standby route (the same prefix at the standby metric). A
    #: prefix is normally in ``routes`` too; one in ``standby`` alone is just a route at the
    #: standby metric, and the same key in both makes two routes through one group
    standby: Mapping[IPNetwork, str] = field(default_factory=dict)


# --- kernel view (only objects with glbd's protocol number, plus ids/keys to stay away from) --


@dataclass(frozen=True, slots=True)
class KLink:
    index: int
    name: str
    admin_up: bool
    carrier: bool

    @property
    def usable(self) -> bool:
        """The kernel accepts (and keeps) nexthops on this link."""
        return self.admin_up and self.carrier


@dataclass(frozen=True, slots=True)
class KNexthop:
    id: int
    protocol: int
    gateway: IPAddress | None
    ifindex: int
    onlink: bool = False


@dataclass(frozen=True, slots=True)
class KGroup:
    id: int
    protocol: int
    entries: tuple[tuple[int, int], ...]  # (member nexthop id, weight 1..65536), sorted by id
    resilient: Resilient | None = None


# not frozen (never mutated): one is made per route written, and a frozen dataclass's
# __init__ costs four times as much (a tenth of a 100k-route install)
@dataclass(slots=True, unsafe_hash=True)
class KRoute:
    prefix: IPNetwork
    table: int
    protocol: int
    metric: int
    nhid: int | None


@dataclass(slots=True)
class Observed:
    """Kernel state as far as glbd cares. ``nexthops``/``groups``/``routes`` hold glbd-owned
    objects only; ``foreign_ids`` are nexthop ids of other protocols (never reuse them) and
    ``foreign_routes`` are (prefix, metric) keys in glbd's table owned by someone else (never
    replace them)."""

    links: dict[str, KLink] = field(default_factory=dict)
    nexthops: dict[int, KNexthop] = field(default_factory=dict)
    groups: dict[int, KGroup] = field(default_factory=dict)
    routes: dict[RouteKey, KRoute] = field(default_factory=dict)
    foreign_ids: set[int] = field(default_factory=set)
    foreign_routes: set[RouteKey] = field(default_factory=set)
    weight_16bit: bool | None = None  # from NHA_OP_FLAGS in group dumps; None: not seen

    def copy(self) -> Observed:
        return Observed(
            dict(self.links),
            dict(self.nexthops),
            dict(self.groups),
            dict(self.routes),
            set(self.foreign_ids),
            set(self.foreign_routes),
            self.weight_16bit,
        )
