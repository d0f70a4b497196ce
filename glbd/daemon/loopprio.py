"""When glbd's event loop runs at real-time priority: while it mostly waits, so that a heartbeat,
a link sample or a BFD event is handled as soon as it arrives, not after whatever ordinary
process the kernel picked; not while it is busy with bulk work (a BGP table arriving, a full
FIB write), which at real-time priority would hold a CPU against everything else on it.

Decided once per loop-lag tick (100 ms) from the share of a CPU the process used, smoothed over
about three ticks (a single busy tick is the GLB loop's own burst, not bulk work): at or above
``busy_share`` it drops to normal scheduling, and returns to real time below ``quiet_share``.
Pure: the caller measures and applies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

__all__ = ["LoopPriority", "Policy"]


class Policy(StrEnum):
    REALTIME = "realtime"
    NORMAL = "normal"


@dataclass
class LoopPriority:
    #: real-time priority wanted (0: always normal)
    priority: int
    busy_share: float = 0.7
    quiet_share: float = 0.5
    #: weight of the newest tick in the smoothed share
    alpha: float = 0.3
    policy: Policy = Policy.NORMAL
    #: the loop is in bulk work (whatever the priority)
    busy: bool = False
    #: times real time was given up for bulk work, and taken back
    demotions: int = 0
    promotions: int = 0
    #: the kernel refused real time (no CAP_SYS_NICE, an RT limit): normal from then on
    refused: str = ""
    _last_share: float = field(default=0.0, repr=False)

    def start(self) -> Policy | None:
        """The policy to apply at start (None: nothing to do)."""
        if self.priority <= 0:
            return None
        self.policy = Policy.REALTIME
        return Policy.REALTIME

    def set_priority(self, priority: int) -> Policy | None:
        """A new priority (a reload): the policy to apply now, or None."""
        self.priority, self.refused = priority, ""
        if priority <= 0:
            return self.stop()
        if self.busy:
            return None  # real time once the bulk work is over
        self.policy = Policy.REALTIME
        return Policy.REALTIME  # also re-applied at a new priority

    def stop(self) -> Policy | None:
        """Back to normal scheduling (None: already there)."""
        if self.policy is Policy.NORMAL:
            return None
        self.policy = Policy.NORMAL
        return Policy.NORMAL

    def on_tick(self, cpu_s: float, wall_s: float) -> Policy | None:
        """One tick: ``cpu_s`` of CPU over ``wall_s``; returns a policy to apply, or None."""
        if wall_s <= 0:
            return None
        share = self._last_share = self.alpha * (cpu_s / wall_s) + (1 - self.alpha) * (
            self._last_share
        )
        if not self.busy and share >= self.busy_share:
            self.busy = True
        elif self.busy and share < self.quiet_share:
            self.busy = False
        if self.priority <= 0 or self.refused:
            return None
        if self.policy is Policy.REALTIME and self.busy:
            self.policy = Policy.NORMAL
            self.demotions += 1
            return Policy.NORMAL
        if self.policy is Policy.NORMAL and not self.busy:
            self.policy = Policy.REALTIME
            self.promotions += 1
            return Policy.REALTIME
        return None

    def refuse(self, why: str) -> None:
        """Applying real time failed: stay normal, say why."""
        self.refused = why
        self.policy = Policy.NORMAL

    def to_dict(self) -> dict[str, object]:
        return {
            "rt_priority": self.priority,
            "policy": self.policy.value,
            "busy": self.busy,
            "demotions": self.demotions,
            "promotions": self.promotions,
            "cpu_share": round(self._last_share, 3),
            "refused": self.refused or None,
        }
