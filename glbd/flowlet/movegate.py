"""When a flowlet gap may move its flow (``[flowlet] move = "on-change"``, docs/flowlet.md).

A gap longer than the flowlet timeout lets a flow change path without reordering, but moving
it also costs: the new path's queue is unknown, and a failed next hop should move only its own
flows. So the program moves a flow at a gap only with a *move chance*, and this gate decides the
chance from what the leaf programs: while the weights of a group have shifted by at least
``threshold`` of its traffic since the gate last opened, the chance is 1, falling linearly to 0
over ``decay_s``. Settled weights move nothing; a hotspot opens the gate for every flow.

The shift of a group is the total variation distance between its weight distributions, the
old one taken over the next hops still in the group (a next hop that left, or whose weight fell
to 0, takes its flows with it: the kernel moves them) and the new one over all of them (a next
hop that joined is a shift toward it). The gate keeps, per group, the weights at its last
opening, so a slow drift opens it once the drift adds up, while noise around a level does
not. A shift while the chance is still above ``refresh_below`` moves the reference but writes
nothing: weights that keep swinging cost the program a write every quarter of the decay at
most, not one per change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ALWAYS", "NEVER", "MoveChance", "MoveGate", "MoveGateParams", "weight_shift"]

#: a chance of 1: the program compares a 32-bit random draw with the chance
ONE = 1 << 32


@dataclass(frozen=True, slots=True)
class MoveChance:
    """The chance that a gap moves its flow: ``p0`` (in 1/2^32) at ``t0_ns`` (CLOCK_MONOTONIC,
    the program's clock), falling linearly to 0 over ``decay_ns`` (0: ``p0`` for good)."""

    p0: int = 0
    t0_ns: int = 0
    decay_ns: int = 0

    def at(self, now_ns: int) -> float:
        """The chance at ``now_ns``, as the program computes it (0..1)."""
        if not self.decay_ns:
            return self.p0 / ONE
        age = max(0, now_ns - self.t0_ns)
        if age >= self.decay_ns:
            return 0.0
        left = ((self.decay_ns - age) << 16) // self.decay_ns
        return ((self.p0 * left) >> 16) / ONE


#: every gap moves its flow (``move = "always"``)
ALWAYS = MoveChance(ONE, 0, 0)
#: no gap moves its flow
NEVER = MoveChance(0, 0, 0)


@dataclass(frozen=True, slots=True)
class MoveGateParams:
    #: the weight shift (share of a group's traffic) that opens the gate
    threshold: float = 0.05
    #: how long an opened gate takes to close again
    decay_s: float = 1.0
    #: a shift reopens the gate (one map write) only once the chance has fallen below this
    refresh_below: float = 0.75

    def __post_init__(self) -> None:
        if not 0 < self.threshold <= 1 or self.decay_s <= 0 or not 0 < self.refresh_below <= 1:
            raise ValueError("need 0 < threshold <= 1, decay_s > 0 and 0 < refresh_below <= 1")


def weight_shift(old: Mapping[Any, int], new: Mapping[Any, int]) -> float:
    """The share of a group's traffic that its weights ask to move from ``old`` to ``new``
    (next hops that left, or whose weight fell to 0 as their link went down, are not counted:
    the kernel moves their flows anyway)."""
    kept = {k: w for k, w in old.items() if new.get(k, 0) > 0 and w > 0}
    total_old, total_new = sum(kept.values()), sum(w for w in new.values() if w > 0)
    if total_old <= 0 or total_new <= 0:
        return 0.0
    return 0.5 * sum(
        abs(kept.get(k, 0) / total_old - max(w, 0) / total_new) for k, w in new.items()
    )


class MoveGate:
    """Pure: fed the weights of the groups that changed, answers the move chance to program
    when it should change (``None``: leave it)."""

    def __init__(self, params: MoveGateParams | None = None) -> None:
        self.params = params or MoveGateParams()
        #: per group, its weights when the gate last opened for it (or when first seen)
        self._ref: dict[str, dict[Any, int]] = {}
        self.chance = NEVER
        self.opened = 0
        #: shifts while the gate was still open enough: no write
        self.refreshes_skipped = 0
        #: the largest shift seen by the last ``observe``
        self.last_shift = 0.0

    def observe(
        self,
        changed: Mapping[str, Mapping[Any, int]],
        removed: Iterable[str],
        now_ns: int,
    ) -> MoveChance | None:
        """New weights of the groups in ``changed``; ``removed`` groups are gone."""
        for key in removed:
            self._ref.pop(key, None)
        shift, moved = 0.0, []
        for key, weights in changed.items():
            ref = self._ref.get(key)
            if ref is None:
                self._ref[key] = dict(weights)
                continue
            s = weight_shift(ref, weights)
            shift = max(shift, s)
            if s >= self.params.threshold:
                moved.append(key)
        self.last_shift = shift
        if not moved:
            return None
        for key in moved:  # the drift of these groups counts again from here
            self._ref[key] = dict(changed[key])
        if self.chance.at(now_ns) >= self.params.refresh_below:
            self.refreshes_skipped += 1
            return None
        self.opened += 1
        self.chance = MoveChance(ONE, now_ns, round(self.params.decay_s * 1e9))
        return self.chance

    def to_dict(self, now_ns: int) -> dict[str, float | int]:
        return {
            "chance": round(self.chance.at(now_ns), 3),
            "opened": self.opened,
            "refreshes_skipped": self.refreshes_skipped,
            "last_shift": round(self.last_shift, 3),
            "threshold": self.params.threshold,
            "decay_s": self.params.decay_s,
        }
