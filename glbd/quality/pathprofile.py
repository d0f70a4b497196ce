"""Path-table profiles (pure): the state of one profile and the stable key that names it.

A profile is the set of prefixes whose next hops and per-next-hop NNH sets are equal; its key
(``pf-`` + 16 hex digits of a BLAKE2b hash of the canonical form) is the FIB's nexthop-group
name. :class:`Profile` holds what the weight functions (:mod:`glbd.quality.pathweight`) keep per
profile between recomputes; the table (:mod:`glbd.quality.pathtable`) owns the profiles and their
index, the views (:mod:`glbd.quality.pathview`) read them.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from glbd.base.reasons import QualitySource
from glbd.quality.pathmodel import LocalLink, NextHop, Weight, WeightInputs

__all__ = ["Profile", "profile_key"]


@dataclass(slots=True)
class Profile:
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
    #: recompute after one remote link changed rebuilds one row, not 64 (see pathweight)
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
