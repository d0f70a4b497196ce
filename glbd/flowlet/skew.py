"""The flowlet timeout from the fabric's measured path delay skew (``[flowlet] timeout_us =
"auto"``, docs/flowlet.md).

A flow may move to another path after an idle gap only if the gap exceeds the delay
difference between the old path and the new one; otherwise the first packets on the new path
overtake the last ones on the old. In a leaf-spine fabric the paths differ by their queues:
propagation and serialisation are the same on every path, so the skew between two paths is at
most the queueing delay of the slower one. A path out of a leaf crosses one of the leaf's
uplinks and one spine's downlink; so

    skew <= max(local uplink queue / its rate) + max(spine downlink queue / its rate)

with the local figures from the link monitor and the remote ones from the spines' heartbeats
(each entry carries its queue and capacity). Queues come and go faster than they can be
measured, so the estimate keeps the **peak** of each term over a sliding window
(``window_s`` seconds in which something was queued, per-second buckets): the timeout rises
at once when a deeper queue is seen and falls only once the window has forgotten it. Idle
seconds (nothing queued beyond what the floor covers) do not count: an idle fabric says nothing
about the skew under load, and a timeout that fell to the floor while idle reordered the next
burst of traffic (seen in the fabric bench after a 40 s pause). It is never below
``floor_ns`` (the fabric's base skew: a queue below one sample is not seen) nor above
``ceiling_ns`` (the flow table's aging), and it moves on a geometric ladder (``step``), so
that a growing queue costs a handful of writes, not one per sample. Until one window has
passed since the first reading it is at least ``start_ns``: before the window has seen the
fabric's queues, the skew is unknown, and a timeout below it reorders every flow that moves
(erring long only costs moves); after a restart, at least the timeout the previous glbd left.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

__all__ = ["SkewEstimator", "SkewParams"]


@dataclass(frozen=True, slots=True)
class SkewParams:
    floor_ns: int = 500_000
    ceiling_ns: int = 10_000_000_000
    #: how long a peak queue delay is remembered
    window_s: float = 60.0
    #: ratio between two consecutive timeouts on the ladder
    step: float = 1.25
    #: the least timeout during the first window (0: none), capped at the ceiling
    start_ns: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.floor_ns <= self.ceiling_ns:
            raise ValueError("need 0 < floor_ns <= ceiling_ns")
        if self.window_s <= 0 or self.step <= 1:
            raise ValueError("need window_s > 0 and step > 1")


class SkewEstimator:
    """Pure: fed the current queue delays (``observe``), answers the timeout to program."""

    def __init__(self, params: SkewParams | None = None) -> None:
        self.params = params or SkewParams()
        #: (second, peak local us, peak remote us), oldest first
        self._buckets: deque[tuple[int, float, float]] = deque()
        self._since: float | None = None  # the first reading
        self._window_buckets = max(1, math.ceil(self.params.window_s))
        self._resumed_ns = 0
        self.timeout_ns = max(self.params.floor_ns, self._start_ns())
        self.changes = 0

    def _start_ns(self) -> int:
        return min(max(self.params.start_ns, self._resumed_ns), self.params.ceiling_ns)

    def resume(self, timeout_ns: int) -> bool:
        """Before the first reading: the timeout a previous glbd left in the program it
        measured the fabric for. It holds for the first window like ``start_ns`` (when
        higher), so a restart does not shorten a timeout that the queues needed. False (and
        nothing changes) once readings have begun."""
        if self._since is not None or timeout_ns <= 0:
            return False
        self._resumed_ns = timeout_ns
        self.timeout_ns = max(self.timeout_ns, self._start_ns())
        return True

    def observe(self, local_us: float, remote_us: float, now: float) -> int | None:
        """One reading of the deepest local and remote queue (in microseconds of drain
        time). Returns the new timeout (ns) when it moved on the ladder, else None."""
        if self._since is None:
            self._since = now
        sec = math.floor(now)
        b = self._buckets
        if b and b[-1][0] == sec:
            _s, lo, re = b[-1]
            if local_us > lo or remote_us > re:
                b[-1] = (sec, max(lo, local_us), max(re, remote_us))
        elif (local_us + remote_us) * 1000 > self.params.floor_ns:  # a loaded second
            b.append((sec, local_us, remote_us))
            while len(b) > self._window_buckets:
                b.popleft()
        want = self._ladder(self.skew_us() * 1000)
        if now - self._since < self.params.window_s:
            want = max(want, self._start_ns())
        if want == self.timeout_ns:
            return None
        self.timeout_ns = want
        self.changes += 1
        return want

    def skew_us(self) -> float:
        """The skew bound now: peak local plus peak remote queue delay over the window."""
        if not self._buckets:
            return 0.0
        return max(b[1] for b in self._buckets) + max(b[2] for b in self._buckets)

    def _ladder(self, skew_ns: float) -> int:
        """The smallest rung at or above ``skew_ns`` (rungs: floor x step^k, up to the ceiling)."""
        p = self.params
        if skew_ns <= p.floor_ns:
            return p.floor_ns
        k = math.ceil(math.log(skew_ns / p.floor_ns, p.step) - 1e-9)
        return min(p.ceiling_ns, round(p.floor_ns * p.step**k))

    def to_dict(self) -> dict[str, Any]:
        b = self._buckets
        return {
            "timeout_us": self.timeout_ns / 1e3,
            "skew_us": round(self.skew_us(), 1),
            "peak_local_us": round(max((x[1] for x in b), default=0.0), 1),
            "peak_remote_us": round(max((x[2] for x in b), default=0.0), 1),
            "window_s": self.params.window_s,
            "floor_us": self.params.floor_ns / 1e3,
            "start_us": self.params.start_ns / 1e3,
            "resumed_us": self._resumed_ns / 1e3,
            "changes": self.changes,
        }
