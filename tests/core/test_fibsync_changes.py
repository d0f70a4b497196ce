"""The FIB sync's change accumulator (``glbd.fib.fibsync.ChangeSet``) merges in place exactly
as ``Changes.__or__`` does."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as hs

from glbd.fib.fibsync import ChangeSet
from glbd.quality.pathchanges import Changes

_keys = hs.frozensets(hs.sampled_from(["pf-a", "pf-b", "pf-c", "pf-d"]), max_size=3)
_changes = hs.builds(Changes, _keys, _keys, hs.frozensets(hs.sampled_from(["p1", "p2", "p3"])))


@given(hs.lists(_changes, max_size=12), hs.integers(0, 12))
def test_in_place_merge_equals_the_frozen_algebra(seq: list[Changes], cut: int) -> None:
    acc = ChangeSet()
    folded = Changes()
    for ch in seq[:cut]:
        acc.add(ch)
        folded = folded | ch
    assert acc.take() == folded
    assert acc.take() == Changes()  # taking empties it
    for ch in seq[cut:]:
        acc.add(ch)
    acc.clear()
    assert acc.take() == Changes()
