"""Exact spread placement on resilient groups (pure): the order of a group's buckets that the
flowlet program aims a destination's points at (docs/flowlet.md, "Spread placement").

The program gives the flowlets to a destination the points of a van der Corput sequence, so
any n consecutive flowlets cover [0, 1) evenly. A resilient group maps a hash to bucket
``hash % buckets``; the kernel keeps each member's bucket count in proportion to its weight,
but after weights change a member's buckets are scattered, so evenly spread buckets are no
longer evenly spread members. Listing the buckets member by member and aiming the point at
position ``floor(x * buckets)`` of that list makes the spread exact again: a member holding
k of n buckets receives k/n of the points, wherever its buckets lie.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence

__all__ = ["MAX_BUCKETS", "LayoutTracker", "bucket_order", "shared"]

#: the largest group whose order the program takes (its map value holds this many indices)
MAX_BUCKETS = 1024


def bucket_order(members: Sequence[int]) -> tuple[int, ...]:
    """The bucket indices of a group, listed member by member (members by id, each one's
    buckets by index), from the member of each bucket (``members[i]``: bucket i's)."""
    return tuple(sorted(range(len(members)), key=lambda i: (members[i], i)))


class LayoutTracker:
    """Which groups' bucket tables to read, and each group's bucket order (pure).

    The kernel moves a resilient group's buckets after a weight change on its own timers (a
    bucket idle for the idle timer; a busy one after the unbalanced timer, if any), so a
    table read once goes stale. A group is read when it is new or its members or weights
    changed, then every call for ``settle_s`` after, and while its buckets are not yet
    shared by the weights (each member within one bucket of its share) at most every
    ``recheck_s``; a settled group is not read again."""

    def __init__(self, settle_s: float = 2.0, recheck_s: float = 5.0) -> None:
        self.settle_s = settle_s
        self.recheck_s = recheck_s
        #: group id -> (its entries, read again until, last read, settled)
        self._groups: dict[int, tuple[tuple[tuple[int, int], ...], float, float, bool]] = {}
        self.orders: dict[int, tuple[int, ...]] = {}

    def due(self, groups: Mapping[int, tuple[tuple[int, int], ...]], now: float) -> list[int]:
        """The groups (id -> (member, weight) entries, as programmed) to read now; groups no
        longer given are forgotten."""
        for gid in [g for g in self._groups if g not in groups]:
            del self._groups[gid]
            self.orders.pop(gid, None)
        out = []
        for gid, entries in groups.items():
            known = self._groups.get(gid)
            if known is None or known[0] != entries:
                self._groups[gid] = (entries, now + self.settle_s, -math.inf, False)
                out.append(gid)
                continue
            _, until, last, settled = known
            if now < until or (not settled and now - last >= self.recheck_s):
                out.append(gid)
        return out

    def observed(self, gid: int, members: Sequence[int], now: float) -> bool:
        """A group's table as read (the member of each bucket; () if it could not be): True
        if its bucket order changed."""
        known = self._groups.get(gid)
        if known is None:
            return False
        entries, until, _, _ = known
        self._groups[gid] = (entries, until, now, bool(members) and shared(members, entries))
        order = bucket_order(members) if 0 < len(members) <= MAX_BUCKETS else ()
        if self.orders.get(gid, ()) == order:
            return False
        if order:
            self.orders[gid] = order
        else:
            self.orders.pop(gid, None)
        return True


def shared(members: Sequence[int], entries: Sequence[tuple[int, int]]) -> bool:
    """Whether the buckets are shared by the weights: every member within one bucket of its
    share (the kernel rounds each share to a whole number of buckets)."""
    total = sum(w for _, w in entries)
    n = len(members)
    counts = Counter(members)
    return total > 0 and all(abs(counts.get(m, 0) - n * w / total) < 1 for m, w in entries)
