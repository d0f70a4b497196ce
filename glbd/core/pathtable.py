"""Path-quality table (pure): profiles of prefixes and their per-next-hop ECMP weights.

Inputs (plain method calls, no clock, no I/O):

* **local** link quality per fabric interface (:meth:`PathTable.set_local`; from
  :class:`glbd.core.linkq.LinkMonitor`): band 0..7, down flag, capacity;
* **remote** link qualities per helper (:meth:`PathTable.set_remote`; from a heartbeat
  :class:`heartbeat.receiver.RemoteUpdate`): every entry keyed by (spine BGP id, far-end node id,
  link id), or None when the helper's heartbeats expired (unknown);
* **routes** (:meth:`PathTable.set_prefix` / :meth:`on_next_hops_changed`; from the RIB): each
  prefix's next hops, each with its validated next-next-hop (NNH) set or None.

Profiles: prefixes whose next-hop set *and* per-next-hop NNH sets are equal share one profile,
keyed by a stable string (``pf-`` + 16 hex digits of a BLAKE2b hash of the canonical form), so the
FIB keeps one nexthop group per profile. There is no 3-stage assumption: a next hop may have
several NNHs (5-stage Clos, anycast prefixes).

Profile cap: every distinct NNHN list an UPDATE carries can make one more profile (and kernel
group), so the profiles that carry NNHN are capped (``PathTableParams.max_profiles``). A prefix
whose NNHN would make one beyond the cap is not refused: it falls back to the profile of its
next hops without NNHN (plain ECMP with local quality, shared by every such prefix with the same
next hops), counted (:class:`ProfileFallback`). When a profile slot frees up (its last prefix
left), the oldest waiting profile takes it at once and its prefixes move back to it.

Weight of next hop *n* in a profile (documented functions; see docs/heartbeat.md §7):

1. *local*: the band of n's interface (None = not measured).
2. *remote* (only when this node consumes heartbeats): for each NNH *s* of n, the aggregate of
   the helper's links to s. Parallel links stay distinct entries; the aggregate's quality is the
   capacity-weighted mean band of the links that are up, its usable capacity the sum of their
   capacities, and it is *down* when none is up. Several NNHs make a compound: the
   capacity-weighted mean quality and the summed usable capacity of the NNHs that are not down
   (the helper spreads over them). NNHs without an entry are ignored while at least one is
   known.
3. source and combined quality ``q`` (0..7, float):

   * ``glb``: remote known: ``q = combine(local, remote)``, default the bottleneck
     ``min(local, remote)`` (``"mean"`` is the alternative); remote down (every NNH down) gives
     weight 0 for the profiles behind it;
   * ``dlb``: remote unknown (no NNHN, invalid NNHN, no or expired heartbeat, NNH not
     reported, or load-balancer role off): DLB-style local fallback, ``q = local``; a locally down
     link gives weight 0;
   * ``static``: neither local nor remote known: ``q = 7`` (capacity/equal split).

4. *capacity* (WCMP): ``min(local capacity, n's share of the remote usable capacity)``, where
   the share divides the helper's usable capacity among the profile's next hops through that same
   helper in proportion to their local capacity (parallel local links must not count the
   helper's downstream capacity twice). With ``capacity_aware=False`` every capacity is 1.
5. ``raw = capacity x table(q)``; ``table`` is monotone, by default
   ``(1, 2, 3, 5, 8, 12, 18, 27)`` for q = 0..7 (roughly x1.5 per band; 27:1 between an idle
   and a saturated link, about the spare-capacity ratio of a <20 % and a >90 % loaded link),
   linearly interpolated for fractional q.
6. *memory* (``memory=True``, default): a per-profile controller state ``m`` in (0, 1] per next
   hop, stepped once per recompute (i.e. per change of an input the profile depends on, or per
   batch of them: the heartbeats read in one event-loop turn are one batch; band changes are
   already rate-limited by the monitor's hysteresis), deterministic, no clock.
   With ``r = raw / max(raw)`` and remote quality ``rq``: ``rq = 7`` (idle downstream) releases
   ``m`` to 1; ``rq >= memory_release_q`` (6: headroom) adds ``memory_increase`` (0.25); if
   ``r < m`` and ``r < memory_attack_below`` (0.5, a dead zone of about two bands) ``m`` falls to
   ``max(r, m x memory_decrease)`` (0.5); then the memories are scaled so the largest is 1.
   DLB, static and down next hops hold nothing (``m = 1``). The weight uses
   ``min(raw, m x max(raw))``: a remote link that was clearly worse than its alternatives keeps
   its low weight after moving traffic away has made the bands equal again (they flatten once
   every downlink is busy), until that link itself shows headroom. At fixed ``m`` the weight is
   still monotone in q.
7. per profile, weights are ``max(1, round(eff / max(eff) x max_weight))`` and 0 where raw is 0
   (``eff`` = raw after the memory). **Never all zero**: when every raw is 0, every next hop gets
   weight 1 (``guard`` in inputs).

Incremental: an index from interface and from (helper, NNH) to profiles means one changed link
recomputes only the profiles that depend on it, and a heartbeat rebuilds only its helper's rows
in them (the others keep their cached rows while the local inputs are unchanged). Each call
returns the profiles whose weights changed, the profiles removed and the prefixes whose profile
changed, and keeps no copy: the caller routes them once.

Size: one module over 600 lines on purpose: the profiles, their index and the weight function
share private state that a split would have to expose. ``_compute`` is one function over 80
lines because it is the per-profile hot loop (steps 1-7 above, in order): per-row helpers
would add a call per next hop to every recompute (``bench/quality_bench.py``).
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import itertools
import math
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from glbd.core.reasons import ProfileFallback, QualitySource, RemoteStatus
from glbd.core.rib import Role
from heartbeat import wire

if TYPE_CHECKING:
    from glbd.core.rib import NextHopsChanged

__all__ = [
    "DEFAULT_WEIGHT_TABLE",
    "Changes",
    "LocalLink",
    "NextHop",
    "PathTable",
    "PathTableParams",
    "RemoteLink",
    "Role",
    "Weight",
    "WeightInputs",
    "next_hop_from_rib",
]

DEFAULT_WEIGHT_TABLE: tuple[int, ...] = (1, 2, 3, 5, 8, 12, 18, 27)
#: the weight-relevant prefix of a heartbeat v1 entry: far end, link id, capacity, band, flags
_SIG = struct.Struct("!IIIBB6x")
MAX_Q = 7.0
#: profiles with NNHN a table keeps at most. A 64-leaf 3-stage fabric makes about one per
#: remote leaf (63) plus one per failure pattern or multi-homed leaf pair (C(64, 2) = 2016):
#: 4096 covers both with room, and 4096 kernel groups cost the kernel a few MB
DEFAULT_MAX_PROFILES = 4096
#: the fallback warning is logged at most this often (a flood of unique NNHN lists must not
#: flood the log; the counters have every one)
FALLBACK_WARN_INTERVAL_S = 60.0


def _ip(n: int) -> str:
    return str(ipaddress.IPv4Address(n))


# --- inputs ----------------------------------------------------------------------------------


class NextHop(NamedTuple):
    """A forwarding next hop = a BGP neighbour: its BGP id (32-bit int), address, interface.
    (A NamedTuple: hashed in C, it is a key of every weight map.)"""

    bgp_id: int
    address: str
    ifname: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"bgp_id": _ip(self.bgp_id), "address": self.address, "ifname": self.ifname}


class LocalLike(Protocol):
    """What :meth:`PathTable.set_local` reads (``glbd.core.linkq.LinkQuality`` fits)."""

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
    """A ``glbd.core.rib.NextHop`` as (NextHop, NNH set); None when the peer's BGP id is unknown."""
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
    #: weights with memory (function 6 in the module docstring): hold a GLB next hop's penalty
    #: while its remote link stays busy. False = stateless weights (``raw`` alone).
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
    #: profiles with NNHN at most; a prefix beyond it is routed over plain ECMP (module doc)
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
            "nnh": None if self.nnh is None else [_ip(i) for i in self.nnh],
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


@dataclass(frozen=True, slots=True)
class Changes:
    """What one or more inputs changed: profiles whose weights changed (incl. new ones),
    profiles that no longer exist, prefixes whose profile changed (incl. removed prefixes)."""

    updated: frozenset[str] = frozenset()
    removed: frozenset[str] = frozenset()
    prefixes: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.updated or self.removed or self.prefixes)

    def __or__(self, other: Changes) -> Changes:
        removed = self.removed | other.removed
        return Changes(
            (self.updated | other.updated) - other.removed,
            removed - other.updated,
            self.prefixes | other.prefixes,
        )


# --- internal state --------------------------------------------------------------------------


class _Agg(NamedTuple):
    quality: float  # capacity-weighted mean band of the up links (0 if none)
    usable: float  # Mbit/s up
    total: float
    down: bool
    links: int
    up: int


@dataclass(slots=True)
class _Profile:
    key: str
    nhs: dict[NextHop, frozenset[int] | None]
    prefixes: set[str] = field(default_factory=set)
    recomputes: int = 0
    #: (next hop, sorted NNH tuple or None), fixed for the profile's life
    items: list[tuple[NextHop, tuple[int, ...] | None]] = field(default_factory=list)
    #: indices into ``items`` per helper BGP id: the rows a helper's heartbeat can change
    by_bid: dict[int, list[int]] = field(default_factory=dict)
    #: weight value and source per next hop in ``items`` order (the FIB's view; change test)
    vals: list[int] = field(default_factory=list)
    srcs: list[QualitySource] = field(default_factory=list)
    #: every raw was 0, so every weight is 1 (step 7)
    guard: bool = False
    #: the controller's memory per next hop in ``items`` order (1.0 = nothing held)
    mem: list[float] = field(default_factory=list)
    #: per next hop in ``items`` order: (the inputs it was computed from, its row), so that a
    #: recompute after one remote link changed rebuilds one row, not 64 (see _compute)
    rows: list[tuple[tuple[Any, ...], tuple[QualitySource, WeightInputs]] | None] = field(
        default_factory=list
    )
    raws: list[float] = field(default_factory=list)
    #: remote quality per row that the controller steps (GLB, raw above 0), else None
    rqs: list[float | None] = field(default_factory=list)
    #: the local inputs the rows were built from: the table's local epoch, each next hop's
    #: local link and each helper's local capacity
    local_epoch: int = -1
    locs: list[LocalLink | None] = field(default_factory=list)
    spine_cap: dict[int, float] = field(default_factory=dict)
    #: the :class:`Weight` objects, built when somebody reads them (views, tests)
    wcache: dict[NextHop, Weight] | None = None
    #: some next hop has an NNH set: the profile counts against ``max_profiles``
    nnhn: bool = False

    def __post_init__(self) -> None:
        self.items = [
            (nh, None if nnh is None else tuple(sorted(nnh))) for nh, nnh in self.nhs.items()
        ]
        for i, (nh, _) in enumerate(self.items):
            self.by_bid.setdefault(nh.bgp_id, []).append(i)
        self.mem = [1.0] * len(self.items)
        self.rows = [None] * len(self.items)
        self.raws = [0.0] * len(self.items)
        self.rqs = [None] * len(self.items)

    @property
    def weights(self) -> dict[NextHop, Weight]:
        w = self.wcache
        if w is None:
            w = {}
            for (nh, _), v, row, m in zip(self.items, self.vals, self.rows, self.mem, strict=True):
                assert row is not None
                source, wi = row[1]
                if self.guard:
                    wi = wi._replace(guard=True)
                elif m < 1.0:
                    wi = wi._replace(memory=m)
                w[nh] = Weight(v, source, wi)
            self.wcache = w
        return w


@functools.lru_cache(maxsize=1 << 14)
def _part(nh: NextHop, nnh: frozenset[int] | None) -> tuple[tuple[int, str, str], str]:
    """A next hop's sort key and its part of the canonical form, kept: BGP churn makes a new
    profile of mostly the same next hops at each step."""
    s = "-" if nnh is None else ",".join(f"{i:08x}" for i in sorted(nnh))
    return (
        (nh.bgp_id, nh.address, nh.ifname or ""),
        f"{nh.bgp_id:08x}/{nh.address}/{nh.ifname or ''}>{s}",
    )


def _canonical(nhs: Mapping[NextHop, frozenset[int] | None]) -> str:
    """Next hops sorted by (BGP id, address, interface), each with its sorted NNH ids."""
    return ";".join([p for _k, p in sorted([_part(nh, nnh) for nh, nnh in nhs.items()])])


def profile_key(nhs: Mapping[NextHop, frozenset[int] | None]) -> str:
    """The stable key of a profile (same next hops and NNH sets = same key, across runs)."""
    return "pf-" + hashlib.blake2b(_canonical(nhs).encode(), digest_size=8).hexdigest()


def _aggregate(links: Iterable[tuple[int, bool, float]]) -> _Agg:
    n = up = 0
    usable = total = qsum = 0.0
    for band, down, cap in links:
        n += 1
        c = max(float(cap), 1e-9)
        total += c
        if not down:
            up += 1
            usable += c
            qsum += band * c
    return _Agg(qsum / usable if usable else 0.0, usable, total, up == 0, n, up)


# --- the table -------------------------------------------------------------------------------


class PathTable:
    def __init__(self, params: PathTableParams | None = None) -> None:
        self._p = params or PathTableParams()
        self._local: dict[str, LocalLink] = {}
        self._remote: dict[int, dict[tuple[int, int], tuple[int, bool, float]]] = {}
        self._agg: dict[tuple[int, int], _Agg] = {}
        self._prefix: dict[str, str] = {}
        self._profiles: dict[str, _Profile] = {}
        self._by_if: dict[str, set[str]] = {}
        self._by_remote: dict[tuple[int, int], set[str]] = {}
        self._rib_memo: dict[int, tuple[Any, dict[NextHop, frozenset[int] | None], str]] = {}
        self._conv: dict[int, tuple[Any, tuple[NextHop, frozenset[int] | None] | None]] = {}
        self.recomputes = 0
        #: next-hop rows looked at by recomputes (a heartbeat looks at its helper's rows only)
        self.rows_examined = 0
        #: bumped when a local input or the parameters change: a profile whose rows are of an
        #: older epoch looks at every row, not only at the helpers a heartbeat changed
        self._local_epoch = 0
        #: profiles with ``nnhn`` (what the cap counts)
        self._nnhn_profiles = 0
        #: profiles the cap keeps out: key -> (next hops, prefixes waiting), oldest first;
        #: each prefix is meanwhile in the profile of its next hops without NNHN
        self._waiting: dict[str, tuple[dict[NextHop, frozenset[int] | None], set[str]]] = {}
        self._waiting_of: dict[str, str] = {}  # prefix -> the profile it waits for
        #: prefixes sent to plain ECMP, by reason (every time, not only the ones still there)
        self.fallbacks: dict[ProfileFallback, int] = dict.fromkeys(ProfileFallback, 0)
        self.fallback_total = 0
        self._unlogged = 0
        self._warned_at: float | None = None

    @property
    def params(self) -> PathTableParams:
        return self._p

    def set_params(self, params: PathTableParams) -> Changes:
        self._p = params
        self._local_epoch += 1
        for prof in self._profiles.values():  # every row depends on the parameters
            prof.rows = [None] * len(prof.items)
        if not params.role.load_balancer:
            self._remote.clear()
            self._agg.clear()
        if not params.memory:
            for prof in self._profiles.values():
                prof.mem = [1.0] * len(prof.items)
        # a configuration change is not a measurement: no controller step
        return self._recompute(set(self._profiles), step=False) | self._promote()

    # --- inputs ----------------------------------------------------------------------------

    def set_local(self, ifname: str, q: LocalLike | None) -> Changes:
        """Local quality of a fabric interface (None = not measured / not monitored)."""
        new = None if q is None else LocalLink(q.band, q.down, float(q.capacity_mbps))
        if self._local.get(ifname) == new:
            return Changes()
        if new is None:
            del self._local[ifname]
        else:
            self._local[ifname] = new
        self._local_epoch += 1
        return self._recompute(self._by_if.get(ifname, set()))

    def set_remote(self, spine_id: int, entries: Iterable[RemoteLike] | None) -> Changes:
        """The complete link snapshot of helper ``spine_id`` (None = unknown/expired)."""
        return self.set_remotes(((spine_id, entries),))

    def set_remotes(self, snapshots: Iterable[tuple[int, Iterable[RemoteLike] | None]]) -> Changes:
        """Several helpers' snapshots at once (in order; a later one of the same helper wins):
        a profile through any of them is recomputed once, not once per helper, so a burst of
        heartbeats from a fabric's spines costs one recompute of each profile they touch."""
        if not self._p.role.load_balancer:
            return Changes()
        affected: set[str] = set()
        bids: set[int] = set()
        for spine_id, entries in snapshots:
            keys = self._put_remote(int(spine_id), entries)
            if keys:
                affected |= keys
                bids.add(int(spine_id))
        return self._recompute(affected, bids=bids) if affected else Changes()

    def _put_remote(self, spine_id: int, entries: Iterable[RemoteLike] | None) -> set[str]:
        """Store one snapshot and its aggregates; the keys of the profiles it affects."""
        links: dict[tuple[int, int], tuple[int, bool, float]] | None = None
        if isinstance(entries, wire.Entries):  # fast path: straight from the packed bytes
            links = {
                (fe, lid): (band, bool(fl & wire.ENTRY_FLAG_DOWN), float(cap))
                for fe, lid, cap, band, fl in _SIG.iter_unpack(entries.raw)
            }
        elif entries is not None:
            links = {
                (e.far_end_id, e.link_id): (e.band, e.down, float(e.capacity_mbps)) for e in entries
            }
        old = self._remote.get(spine_id)
        if links == old:
            return set()
        if links is None:
            del self._remote[spine_id]
        else:
            self._remote[spine_id] = links
        # far ends whose links changed (set algebra on the item views runs in C)
        diff = (old or {}).items() ^ (links or {}).items()
        groups: dict[int, list[tuple[int, bool, float]]] = {k[0]: [] for k, _v in diff}
        if links:
            for (fe, _lid), v in links.items():
                g = groups.get(fe)
                if g is not None:
                    g.append(v)
        affected: set[str] = set()
        agg_map = self._agg
        for fe, g in groups.items():
            k = (spine_id, fe)
            agg = _aggregate(g) if g else None
            if agg_map.get(k) == agg:
                continue
            if agg is None:
                del agg_map[k]
            else:
                agg_map[k] = agg
            affected |= self._by_remote.get(k, set())
        if old is None or links is None:
            # the helper appeared or expired: every profile through it changes its remote
            # status (no_heartbeat <-> nnh_not_reported), even for NNHs it does not report
            for (bid, _nnh), keys in self._by_remote.items():
                if bid == spine_id:
                    affected |= keys
        return affected

    def set_prefix(
        self, prefix: str, next_hops: Mapping[NextHop, frozenset[int] | None]
    ) -> Changes:
        """The forwarding next hops of ``prefix`` and each one's validated NNH set (None =
        missing/invalid NNHN). An empty mapping removes the prefix."""
        if not next_hops:
            return self.remove_prefix(prefix)
        nhs = {
            nh: (None if s is None else frozenset(int(i) for i in s)) for nh, s in next_hops.items()
        }
        return self._set_prefix(prefix, nhs, profile_key(nhs))

    def _set_prefix(
        self, prefix: str, nhs: dict[NextHop, frozenset[int] | None], key: str
    ) -> Changes:
        old = self._prefix.get(prefix)
        wanted = self._waiting_of.get(prefix)
        if wanted is not None:
            if wanted == key:
                return Changes()  # still waiting for a slot
            self._unwait(prefix, wanted)
        elif old == key:
            return Changes()
        if key not in self._profiles and self._at_cap(nhs, old, prefix):
            self._wait(prefix, key, nhs)
            nhs = dict.fromkeys(nhs)
            key = profile_key(nhs)
        if old == key:
            return Changes()  # moved between waiting and its own plain profile: same group
        removed = self._detach(prefix, old) if old is not None else frozenset()
        self._prefix[prefix] = key
        prof = self._profiles.get(key)
        updated: frozenset[str] = frozenset()
        if prof is None:
            prof = self._new_profile(key, nhs)
            updated = frozenset((key,))
        prof.prefixes.add(prefix)
        ch = Changes(updated, removed, frozenset((prefix,)))
        return ch | self._promote() if removed and self._waiting else ch

    def remove_prefix(self, prefix: str) -> Changes:
        old = self._prefix.pop(prefix, None)
        if old is None:
            return Changes()
        wanted = self._waiting_of.get(prefix)
        if wanted is not None:
            self._unwait(prefix, wanted)
        ch = Changes(frozenset(), self._detach(prefix, old), frozenset((prefix,)))
        return ch | self._promote() if ch.removed and self._waiting else ch

    # --- the profile cap -------------------------------------------------------------------

    def _at_cap(
        self, nhs: Mapping[NextHop, frozenset[int] | None], old: str | None, prefix: str
    ) -> bool:
        """A new profile of ``nhs`` would exceed the cap (a profile ``prefix`` leaves empty
        frees its slot first: a prefix moving between NNHN sets keeps its slot)."""
        if all(v is None for v in nhs.values()):
            return False  # plain: bounded by the next-hop sets, never capped
        n = self._nnhn_profiles
        op = None if old is None else self._profiles.get(old)
        if op is not None and op.nnhn and len(op.prefixes) == 1 and prefix in op.prefixes:
            n -= 1
        return n >= self._p.max_profiles

    def _wait(self, prefix: str, key: str, nhs: dict[NextHop, frozenset[int] | None]) -> None:
        entry = self._waiting.get(key)
        if entry is None:
            entry = self._waiting[key] = (nhs, set())
        entry[1].add(prefix)
        self._waiting_of[prefix] = key
        self.fallbacks[ProfileFallback.PROFILE_CAP] += 1
        self.fallback_total += 1
        self._unlogged += 1

    def _unwait(self, prefix: str, key: str) -> None:
        del self._waiting_of[prefix]
        prefixes = self._waiting[key][1]
        prefixes.discard(prefix)
        if not prefixes:
            del self._waiting[key]

    def _promote(self) -> Changes:
        """Waiting profiles take the slots that are free, oldest first: each is created and
        its prefixes move to it from their plain profiles (one group more, routes re-pointed)."""
        out = Changes()
        while self._waiting and self._nnhn_profiles < self._p.max_profiles:
            key = next(iter(self._waiting))
            nhs, prefixes = self._waiting.pop(key)
            prof = self._profiles.get(key) or self._new_profile(key, nhs)
            removed: set[str] = set()
            for p in prefixes:
                del self._waiting_of[p]
                removed |= self._detach(p, self._prefix[p])
                self._prefix[p] = key
                prof.prefixes.add(p)
            out = out | Changes(frozenset((key,)), frozenset(removed), frozenset(prefixes))
        return out

    def fallback_prefixes(self) -> int:
        """Prefixes routed over plain ECMP now because the cap keeps their profile out."""
        return len(self._waiting_of)

    def fallback_warning(self, now: float) -> dict[str, Any] | None:
        """The fields of a warning when prefixes fell back since the last one and that one is
        at least ``FALLBACK_WARN_INTERVAL_S`` old (``now``: monotonic seconds); else None."""
        if not self._unlogged or (
            self._warned_at is not None and now - self._warned_at < FALLBACK_WARN_INTERVAL_S
        ):
            return None
        n, self._unlogged, self._warned_at = self._unlogged, 0, now
        return {
            "reason": str(ProfileFallback.PROFILE_CAP),
            "fell_back": n,
            "fallback_prefixes": len(self._waiting_of),
            "max_profiles": self._p.max_profiles,
        }

    def on_next_hops_changed(self, ev: NextHopsChanged) -> Changes:
        """Convenience for the RIB's event. Next hops whose peer BGP id is unknown are used
        without remote quality (their NNH set is ignored)."""
        if not ev.next_hops:
            return self.remove_prefix(str(ev.prefix))
        # the RIB hands out one tuple object per next-hop set: convert and key it once for
        # all the prefixes that share it (the memo keeps the tuple, so its id stays unique)
        memo = self._rib_memo.get(id(ev.next_hops))
        if memo is None or memo[0] is not ev.next_hops:
            nhs: dict[NextHop, frozenset[int] | None] = {}
            for nh in ev.next_hops:
                conv = self._conv.get(id(nh))  # the RIB's views are shared objects too
                if conv is None or conv[0] is not nh:
                    if nh.peer_bgp_id is None:
                        c: tuple[NextHop, frozenset[int] | None] | None = (
                            NextHop(0, str(nh.next_hop), nh.interface),
                            None,
                        )
                    else:
                        c = next_hop_from_rib(nh)
                    if len(self._conv) >= 8192:
                        self._conv.clear()
                    conv = self._conv[id(nh)] = (nh, c)
                if conv[1] is not None:
                    nhs[conv[1][0]] = conv[1][1]
            if not nhs:
                return self.remove_prefix(str(ev.prefix))
            if len(self._rib_memo) >= 64:
                self._rib_memo.clear()
            memo = self._rib_memo[id(ev.next_hops)] = (ev.next_hops, nhs, profile_key(nhs))
        return self._set_prefix(str(ev.prefix), memo[1], memo[2])

    # --- outputs ---------------------------------------------------------------------------

    def profile_of(self, prefix: str) -> str | None:
        return self._prefix.get(prefix)

    def weights(self, key: str) -> Mapping[NextHop, Weight]:
        prof = self._profiles.get(key)
        return {} if prof is None else dict(prof.weights)

    def weight_values(
        self, key: str
    ) -> tuple[Sequence[tuple[NextHop, tuple[int, ...] | None]], Sequence[int]] | None:
        """A profile's next hops (each with its sorted NNH ids) and their weight values, in
        the same order: what the FIB needs, without the inputs. Read-only. The next hops are
        one sequence object for the profile's life, so a caller may key a cache on it."""
        prof = self._profiles.get(key)
        return None if prof is None else (prof.items, prof.vals)

    def next_hops(self, key: str) -> Mapping[NextHop, frozenset[int] | None]:
        prof = self._profiles.get(key)
        return {} if prof is None else dict(prof.nhs)

    def profiles(self) -> list[str]:
        return sorted(self._profiles)

    def prefixes(self) -> Mapping[str, str]:
        return dict(self._prefix)

    # --- internals -------------------------------------------------------------------------

    def _new_profile(self, key: str, nhs: dict[NextHop, frozenset[int] | None]) -> _Profile:
        prof = _Profile(key, nhs, nnhn=any(v is not None for v in nhs.values()))
        self._profiles[key] = prof
        self._nnhn_profiles += prof.nnhn
        self._index(prof, add=True)
        self._compute(prof)
        return prof

    def _detach(self, prefix: str, key: str) -> frozenset[str]:
        prof = self._profiles[key]
        prof.prefixes.discard(prefix)
        if prof.prefixes:
            return frozenset()
        del self._profiles[key]
        self._nnhn_profiles -= prof.nnhn
        self._index(prof, add=False)
        return frozenset((key,))

    def _index(self, prof: _Profile, *, add: bool) -> None:
        def upd(d: dict[Any, set[str]], k: Any) -> None:
            if add:
                d.setdefault(k, set()).add(prof.key)
            else:
                s = d.get(k)
                if s is not None:
                    s.discard(prof.key)
                    if not s:
                        del d[k]

        for nh, nnh in prof.nhs.items():
            if nh.ifname is not None:
                upd(self._by_if, nh.ifname)
            for s in nnh or ():
                upd(self._by_remote, (nh.bgp_id, s))

    def _recompute(
        self, keys: Iterable[str], *, step: bool = True, bids: Iterable[int] | None = None
    ) -> Changes:
        changed = set()
        for k in keys:
            prof = self._profiles.get(k)
            if prof is not None and self._compute(prof, step=step, bids=bids):
                changed.add(k)
        return Changes(frozenset(changed))

    def _remote_of(
        self, bgp_id: int, nnh: tuple[int, ...] | None, consume: bool
    ) -> tuple[RemoteStatus, float | None, float | None, bool]:
        """(status, quality, usable capacity, down) of a next hop's compound remote part."""
        if not consume:
            return RemoteStatus.NOT_LOAD_BALANCER, None, None, False
        if not nnh:
            return RemoteStatus.NNHN_MISSING, None, None, False
        if bgp_id not in self._remote:
            return RemoteStatus.NO_HEARTBEAT, None, None, False
        agg = self._agg
        if len(nnh) == 1:  # the 3-stage case, fast
            a = agg.get((bgp_id, nnh[0]))
            if a is None:
                return RemoteStatus.NNH_NOT_REPORTED, None, None, False
            if a.down:
                return RemoteStatus.DOWN, 0.0, 0.0, True
            return RemoteStatus.OK, a.quality, a.usable, False
        known = [a for s in nnh if (a := agg.get((bgp_id, s))) is not None]
        if not known:
            return RemoteStatus.NNH_NOT_REPORTED, None, None, False
        live = [a for a in known if not a.down]
        if not live:
            if len(known) == len(nnh):
                return RemoteStatus.DOWN, 0.0, 0.0, True
            return (
                RemoteStatus.NNH_NOT_REPORTED,
                None,
                None,
                False,
            )  # known ones down, others unknown
        usable = sum(a.usable for a in live)
        q = sum(a.quality * a.usable for a in live) / usable if usable else 0.0
        return RemoteStatus.OK, q, usable, False

    def _compute(
        self, prof: _Profile, *, step: bool = True, bids: Iterable[int] | None = None
    ) -> bool:
        """Steps 1-7 for one profile; True when a weight value or source changed. ``bids``:
        only these helpers' remote inputs changed since the last call, so only their rows are
        looked at (the rest and the local inputs are as the rows remember them)."""
        p = self._p
        prof.recomputes += 1
        self.recomputes += 1
        table = p.weight_table
        bottleneck = p.combine == "bottleneck"
        cap_aware = p.capacity_aware
        remote_of = self._remote_of
        consume = p.role.load_balancer
        agg = self._agg
        remote = self._remote
        items = prof.items
        cache = prof.rows
        raws = prof.raws
        rqs = prof.rqs
        todo: Iterable[int]
        if bids is not None and prof.local_epoch == self._local_epoch:
            by_bid = prof.by_bid
            todo = [i for b in bids for i in by_bid.get(b, ())]
        else:
            local = self._local
            prof.locs = [local.get(nh.ifname) if nh.ifname is not None else None for nh, _ in items]
            # local capacity per helper, for sharing its downstream capacity among parallel NHs
            spine_cap: dict[int, float] = {}
            for (nh, _), loc in zip(items, prof.locs, strict=True):
                if loc is not None and not loc.down:
                    spine_cap[nh.bgp_id] = spine_cap.get(nh.bgp_id, 0.0) + loc.capacity_mbps
            prof.spine_cap = spine_cap
            prof.local_epoch = self._local_epoch
            todo = range(len(items))
        self.rows_examined += len(todo)
        locs = prof.locs
        caps = prof.spine_cap
        for i in todo:
            # A row is a pure function of these inputs (and of the parameters, which clear
            # the cache): the local link, the helper's capacity share, whether the helper's
            # heartbeats are known and the aggregates of the NNHs. _Agg and LocalLink are
            # immutable and replaced on change, so unchanged inputs compare equal cheaply.
            nh, nnh = items[i]
            loc = locs[i]
            bid = nh.bgp_id
            if nnh is not None and len(nnh) == 1:
                rkey: Any = agg.get((bid, nnh[0]))
            elif nnh:
                rkey = tuple([agg.get((bid, x)) for x in nnh])
            else:
                rkey = None
            sig = (loc, caps.get(bid), bid in remote, rkey)
            hit = cache[i]
            if hit is not None and hit[0] == sig:
                continue
            status, rq, rcap, rdown = remote_of(bid, nnh, consume)
            if loc is None:
                lband = lcap = None
                ldown = False
            else:
                ldown = loc.down
                lband = 0 if ldown else loc.band
                lcap = loc.capacity_mbps
            if rq is not None:
                source = QualitySource.GLB
                if lband is None:
                    q = rq
                elif bottleneck:
                    q = lband if lband < rq else rq
                else:
                    q = (lband + rq) / 2.0
            elif lband is not None:
                source, q = QualitySource.DLB, float(lband)
            else:
                source, q = QualitySource.STATIC, MAX_Q
            if not cap_aware:
                cap = 1.0
            elif rcap is not None:
                if lcap is not None:
                    tot = caps.get(bid, 0.0)
                    share = rcap * (lcap / tot) if tot > 0 else rcap
                    cap = lcap if lcap < share else share
                else:
                    cap = rcap
            else:
                cap = 1.0 if lcap is None else lcap
            raw = 0.0 if (ldown or rdown) else cap * _interp(table, q)
            wi = WeightInputs(lband, ldown, lcap, rq, rdown, rcap, status, nnh, q, cap, raw)
            cache[i] = (sig, (source, wi))
            raws[i] = raw
            rqs[i] = rq if raw > 0.0 else None  # the rows the controller steps
        top = max(raws)
        if top <= 0.0:
            vals = [1] * len(items)
            guard = True
        else:
            guard = False
            mem = prof.mem
            eff = raws
            if p.memory:
                if step:
                    _step_memory(p, mem, raws, rqs, top)
                eff = [r if m >= 1.0 else min(r, m * top) for m, r in zip(mem, raws, strict=True)]
            scale = p.max_weight / max(eff)
            vals = [(round(r * scale) or 1) if r > 0 else 0 for r in eff]
        srcs = [c[1][0] for c in cache if c is not None]
        changed = vals != prof.vals or srcs != prof.srcs
        prof.vals, prof.srcs, prof.guard = vals, srcs, guard
        prof.wcache = None
        return changed

    # --- introspection ---------------------------------------------------------------------

    def profile_dict(self, key: str) -> dict[str, Any] | None:
        prof = self._profiles.get(key)
        if prof is None:
            return None
        return {
            "key": key,
            "prefixes": len(prof.prefixes),
            "example_prefixes": sorted(prof.prefixes)[:4],
            "recomputes": prof.recomputes,
            "next_hops": [
                {**nh.to_dict(), "weight": prof.weights[nh].to_dict()}
                for nh in sorted(prof.nhs, key=lambda n: (n.bgp_id, n.address, n.ifname or ""))
            ],
        }

    def to_dict(self) -> dict[str, Any]:
        """``glbctl quality``: inputs and every profile's weights."""
        return {
            "role": self._p.role.value,
            "combine": self._p.combine,
            "weight_table": list(self._p.weight_table),
            "max_weight": self._p.max_weight,
            "capacity_aware": self._p.capacity_aware,
            "weight_memory": self._p.memory,
            "recomputes": self.recomputes,
            "local": {
                k: {"band": v.band, "down": v.down, "capacity_mbps": v.capacity_mbps}
                for k, v in sorted(self._local.items())
            },
            "remote": {
                _ip(spine): [
                    {
                        "far_end_id": _ip(fe),
                        "link_id": lid,
                        "band": band,
                        "down": down,
                        "capacity_mbps": cap,
                    }
                    for (fe, lid), (band, down, cap) in sorted(links.items())
                ]
                for spine, links in sorted(self._remote.items())
            },
            "profiles": [self.profile_dict(k) for k in sorted(self._profiles)],
        }

    def profiles_dict(self) -> dict[str, Any]:
        """``glbctl profiles``: profile key -> prefixes and weights (compact)."""
        return {
            "profiles": [
                {
                    "key": k,
                    "prefixes": sorted(prof.prefixes),
                    "weights": [
                        {
                            "next_hop": nh.address,
                            "ifname": nh.ifname,
                            "value": w.value,
                            "source": w.source,
                        }
                        for nh, w in sorted(prof.weights.items(), key=lambda kv: kv[0].address)
                    ],
                }
                for k, prof in sorted(self._profiles.items())
            ]
        }


def _step_memory(
    p: PathTableParams, mem: list[float], raws: list[float], rqs: list[float | None], top: float
) -> None:
    """One step of the weight controller (function 6 in the module docstring), in place.

    ``rqs``: the remote quality of each GLB next hop with a raw above 0, None for the others.
    For each GLB next hop with ratio ``r = raw / top`` and remote quality ``rq``:
    ``rq = 7`` (idle downstream) releases the memory to 1; ``rq >= memory_release_q`` adds
    ``memory_increase`` (the remote link has headroom); then, if ``r`` is below the memory and
    below ``memory_attack_below`` (dead zone), the memory falls toward ``r``, by at most the
    factor ``memory_decrease`` per step. Other next hops (DLB,
    static, down) hold nothing. Finally the memories are scaled so the largest is 1 (only
    ratios matter, so a penalty everybody shares cancels out)."""
    dec, inc, rel = p.memory_decrease, p.memory_increase, p.memory_release_q
    below = p.memory_attack_below
    top_mem = 0.0
    for i, rq in enumerate(rqs):
        if rq is None:
            mem[i] = 1.0
            continue
        m = mem[i]
        if rq >= MAX_Q:
            m = 1.0
        elif rq >= rel:
            m = min(1.0, m + inc)
        r = raws[i] / top
        if r < m and r < below:
            m = max(r, m * dec)
        mem[i] = m
        if m > top_mem:
            top_mem = m
    if 0.0 < top_mem < 1.0:
        for i, rq in enumerate(rqs):
            if rq is not None:
                mem[i] = min(1.0, mem[i] / top_mem)


def _interp(table: tuple[int, ...], q: float) -> float:
    q = min(MAX_Q, max(0.0, q))
    lo = math.floor(q)
    if lo >= 7:
        return float(table[7])
    f = q - lo
    return table[lo] + f * (table[lo + 1] - table[lo])
