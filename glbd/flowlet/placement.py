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

from collections.abc import Sequence

__all__ = ["MAX_BUCKETS", "bucket_order"]

#: the largest group whose order the program takes (its map value holds this many indices)
MAX_BUCKETS = 1024


def bucket_order(members: Sequence[int]) -> tuple[int, ...]:
    """The bucket indices of a group, listed member by member (members by id, each one's
    buckets by index), from the member of each bucket (``members[i]``: bucket i's)."""
    return tuple(sorted(range(len(members)), key=lambda i: (members[i], i)))
