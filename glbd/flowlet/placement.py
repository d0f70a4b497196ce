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
from collections.abc import Container, Mapping, Sequence
from ipaddress import IPv4Network, IPv6Network

__all__ = [
    "MAX_BUCKETS",
    "MAX_GROUPS",
    "MAX_PREFIXES",
    "READ_BUCKETS_PER_CALL",
    "LayoutTracker",
    "bucket_order",
    "listed",
    "listed_routes",
    "shared",
]

#: the largest group whose order the program takes (its map value holds this many indices)
MAX_BUCKETS = 1024
#: the most groups the program holds an order for (its ``orders`` map) and the most prefixes
#: it maps to a group (its ``layouts`` trie): what is beyond them aims as without a list
MAX_GROUPS = 1024
MAX_PREFIXES = 65536
#: the most buckets whose tables are read per call (per second; at least one group): a table
#: is one dump of a message per bucket (~15 us each in glbd), so weights that change
#: everywhere at once, or a neighbour flapping its quality, cost at most ~2 % of a core
#: however many groups there are (bench/fib_bench.py)
READ_BUCKETS_PER_CALL = 1024

Net = IPv4Network | IPv6Network


def bucket_order(members: Sequence[int]) -> tuple[int, ...]:
    """The bucket indices of a group, listed member by member (members by id, each one's
    buckets by index), from the member of each bucket (``members[i]``: bucket i's)."""
    return tuple(sorted(range(len(members)), key=lambda i: (members[i], i)))


def listed(
    buckets: Mapping[int, int], routes: Mapping[Net, int], limit: int = MAX_GROUPS
) -> set[int]:
    """The groups (id -> bucket count) that get an order: those of at most
    :data:`MAX_BUCKETS` buckets, at most ``limit`` of them, those most prefixes use first
    (``routes``: prefix -> group id), then by id."""
    ok = [g for g, n in buckets.items() if 0 < n <= MAX_BUCKETS]
    if len(ok) <= limit:
        return set(ok)
    uses = Counter(routes.values())
    return set(sorted(ok, key=lambda g: (-uses[g], g))[:limit])


def listed_routes(
    routes: Mapping[Net, int], groups: Container[int], limit: int = MAX_PREFIXES
) -> dict[Net, int]:
    """The prefixes the program maps to their group: those whose group is in ``groups``, at
    most ``limit`` of them, IPv4 before IPv6 and each by address (a stable choice: the same
    routes keep their lists from one walk to the next)."""
    out = {n: g for n, g in routes.items() if g in groups}
    if len(out) <= limit:
        return out
    keep = sorted(out, key=lambda n: (n.version, int(n.network_address), n.prefixlen))[:limit]
    return {n: out[n] for n in keep}


class LayoutTracker:
    """Which groups' bucket tables to read, and each group's bucket order (pure).

    The kernel moves a resilient group's buckets after a weight change on its own timers (a
    bucket idle for the idle timer; a busy one after the unbalanced timer, if any), so a
    table read once goes stale. A group is read when it is new or its members or weights
    changed, then every call for ``settle_s`` after, and while its buckets are not yet
    shared by the weights (each member within one bucket of its share) at most every
    ``recheck_s``; a settled group is not read again. Groups of at most ``budget`` buckets
    in all are read per call (at least one), those read longest ago (or never) first: the
    rest stay due."""

    def __init__(
        self, settle_s: float = 2.0, recheck_s: float = 5.0, budget: int = READ_BUCKETS_PER_CALL
    ) -> None:
        self.settle_s = settle_s
        self.recheck_s = recheck_s
        self.budget = budget
        #: group id -> (its entries, read again until, last read, settled, read turn)
        self._groups: dict[int, tuple[tuple[tuple[int, int], ...], float, float, bool, int]] = {}
        self._turn = 0  # reads so far: who goes first among groups due alike
        self.orders: dict[int, tuple[int, ...]] = {}

    def due(
        self,
        groups: Mapping[int, tuple[tuple[int, int], ...]],
        now: float,
        sizes: Mapping[int, int] | None = None,
    ) -> list[int]:
        """The groups (id -> (member, weight) entries, as programmed; ``sizes``: id -> bucket
        count, 128 where not given) to read now; groups no longer given are forgotten."""
        for gid in [g for g in self._groups if g not in groups]:
            del self._groups[gid]
            self.orders.pop(gid, None)
        out: list[tuple[float, int, int]] = []
        for gid, entries in groups.items():
            known = self._groups.get(gid)
            if known is None or known[0] != entries:
                # a change: due now; the last read stays, so groups that keep changing take
                # turns with the others instead of going first every time
                last, turn = (-math.inf, -1) if known is None else (known[2], known[4])
                self._groups[gid] = (entries, now + self.settle_s, last, False, turn)
                out.append((last, turn, gid))
                continue
            _, until, last, settled, turn = known
            if now < until or (not settled and now - last >= self.recheck_s):
                out.append((last, turn, gid))
        take: list[int] = []
        spent = 0
        for _, _, gid in sorted(out):
            n = 128 if sizes is None else sizes.get(gid, 128)
            if take and spent + n > self.budget:
                break
            take.append(gid)
            spent += n
        return take

    def observed(self, gid: int, members: Sequence[int], now: float) -> bool:
        """A group's table as read (the member of each bucket; () if it could not be): True
        if its bucket order changed."""
        known = self._groups.get(gid)
        if known is None:
            return False
        entries, until, _, _, _ = known
        self._turn += 1
        settled = bool(members) and shared(members, entries)
        self._groups[gid] = (entries, until, now, settled, self._turn)
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
