"""Pure arithmetic of the fabric benchmark: the fluid-model bound, the offline optimum's weights,
utilisation from counter samples, summary statistics. No I/O (unit-testable)."""

from __future__ import annotations

import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: TCP payload per byte on the wire through tbf on a veth (1448 B of payload with timestamps
#: in a 1514 B frame: 20 IP + 32 TCP + 14 Ethernet)
WIRE_EFFICIENCY = 1448 / 1514


@dataclass(frozen=True)
class Bound:
    """Fluid model of the exchange (every link rate R, one spine->leaf link with residual R - b).

    The hot leaf must receive (L-1)*D bytes over S downlinks. ECMP puts 1/S of it on the hot
    link; the optimum fills every downlink to the hot leaf (capacity S*R - b). Every other leaf
    and every uplink needs (L-1)*D/(S*R) at most."""

    spines: int
    leaves: int
    rate_mbps: float
    hot_mbps: float
    pair_bytes: int

    def _goodput(self, mbps: float) -> float:  # bytes/s
        return mbps * 1e6 / 8 * WIRE_EFFICIENCY

    @property
    def into_leaf(self) -> float:
        return (self.leaves - 1) * self.pair_bytes

    @property
    def t_nohot(self) -> float:
        return self.into_leaf / self._goodput(self.spines * self.rate_mbps)

    @property
    def t_ecmp(self) -> float:
        resid = self.rate_mbps - self.hot_mbps
        if resid <= 0:
            return float("inf")
        return max(self.t_nohot, self.into_leaf / self.spines / self._goodput(resid))

    @property
    def t_opt(self) -> float:
        return max(
            self.t_nohot,
            self.into_leaf / self._goodput(self.spines * self.rate_mbps - self.hot_mbps),
        )

    @property
    def gain(self) -> float:
        """Best possible speed-up of any load balancer over ECMP: t_ecmp / t_opt."""
        return self.t_ecmp / self.t_opt

    @property
    def min_hot_for_2x(self) -> float:
        """Smallest background share b/R for which a 2x gain over ECMP is possible at all:
        (S R - b) / (S (R - b)) >= 2  <=>  b/R >= S / (2 S - 1)."""
        s = self.spines
        return s / (2 * s - 1)


def optimum_weights(residual: Mapping[str, float], scale: int = 100) -> dict[str, int]:
    """Static weights proportional to residual capacity (1..scale; 0 capacity -> left out)."""
    top = max(residual.values())
    return {k: max(1, round(v / top * scale)) for k, v in residual.items() if v > 0}


Samples = Sequence[Mapping[tuple[str, str], tuple[float, int]]]


def _at(samples: Samples, link: tuple[str, str], t: float) -> tuple[float, int]:
    """The (time, counter) reading of ``link`` closest to ``t``."""
    return min((s[link] for s in samples if link in s), key=lambda v: abs(v[0] - t))


def utilisation(
    samples: Samples, t_start: float, t_end: float, rate_mbps: float
) -> dict[tuple[str, str], float]:
    """Per link, the share (0..1) of ``rate_mbps`` used between its readings closest to
    ``t_start`` and ``t_end`` (each reading has its own time)."""
    if len(samples) < 2:
        return {}
    out: dict[tuple[str, str], float] = {}
    for link in samples[-1]:
        (ta, a), (tb, b) = _at(samples, link, t_start), _at(samples, link, t_end)
        if tb > ta:
            out[link] = (b - a) * 8 / (rate_mbps * 1e6 * (tb - ta))
    return out


def series(
    samples: Samples, link: tuple[str, str], t0: float, step: float, rate_mbps: float
) -> list[float]:
    """Utilisation (0..1) of ``link`` in consecutive ``step``-second bins from ``t0``."""
    out: list[float] = []
    if not samples or link not in samples[-1]:
        return out
    t_last = samples[-1][link][0]
    t = t0
    while t + step <= t_last + 1e-9:
        (ta, a), (tb, b) = _at(samples, link, t), _at(samples, link, t + step)
        out.append((b - a) * 8 / (rate_mbps * 1e6 * (tb - ta)) if tb > ta else 0.0)
        t += step
    return out


_SPARK = " .:-=+*#%@"


def spark(values: Sequence[float]) -> str:
    """0..1 values as characters (' ' idle ... '@' saturated)."""
    n = len(_SPARK) - 1
    return "".join(_SPARK[min(n, max(0, round(v * n)))] for v in values)


@dataclass(frozen=True)
class Summary:
    median: float
    lo: float
    hi: float
    n: int

    def fmt(self, digits: int = 2) -> str:
        if self.n == 0:
            return "n/a"
        return f"{self.median:.{digits}f} [{self.lo:.{digits}f}-{self.hi:.{digits}f}]"


def summarize(values: Sequence[float]) -> Summary:
    vals = [v for v in values if v == v]  # drop NaN
    if not vals:
        return Summary(float("nan"), float("nan"), float("nan"), 0)
    return Summary(statistics.median(vals), min(vals), max(vals), len(vals))


def _fluid_time(data: float, phases: Sequence[tuple[float, float]]) -> float:
    """Time to move ``data`` bytes when the capacity is ``phases[i][1]`` bytes/s from
    ``phases[i][0]`` s on (phases in time order, the first from 0)."""
    done = 0.0
    for i, (start, cap) in enumerate(phases):
        end = phases[i + 1][0] if i + 1 < len(phases) else float("inf")
        if cap > 0 and done + cap * (end - start) >= data:
            return start + (data - done) / cap
        done += cap * (end - start) if cap > 0 and end != float("inf") else 0.0
    return float("inf")


def exchange_bound(
    b: Bound, case: str, t_event: float | None, bg_wire_mbps: float | None = None
) -> float:
    """The fluid bound of one exchange from what happened in it: the background's rate on the
    wire (``bg_wire_mbps``, default ``b.hot_mbps``) from ``t_event`` s after the exchange
    started (``before``: from before it, ``during``: from ``t_event``), or one spine failed at
    ``t_event`` (``fail``: every leaf sends and receives over S-1 links from then on). The
    slowest leaf decides; every leaf moves (L-1) x D bytes each way."""
    g = b._goodput
    full = g(b.spines * b.rate_mbps)
    hot = bg_wire_mbps if bg_wire_mbps is not None else b.hot_mbps
    resid = g(max(0.0, b.spines * b.rate_mbps - hot))
    if case == "none" or (case in ("during", "fail") and t_event is None):
        return b.t_nohot
    if case == "before":
        return max(b.t_nohot, b.into_leaf / resid if resid else float("inf"))
    assert t_event is not None
    if case == "during":
        return max(b.t_nohot, _fluid_time(b.into_leaf, [(0.0, full), (t_event, resid)]))
    if case == "fail":
        rest = g((b.spines - 1) * b.rate_mbps)
        return _fluid_time(b.into_leaf, [(0.0, full), (t_event, rest)])
    raise ValueError(f"unknown case {case!r}")


def hash_spread(spines: int, leaves: int, flows: int, trials: int = 2000) -> Summary:
    """How much more than its balanced share the busiest fabric link carries when every flow
    (``flows`` per ordered leaf pair, equal sizes) is placed on a spine at random and never
    moved, as a flow hash places them: median and 10th-90th percentiles over ``trials``
    placements (fixed seed). Such a placement finishes no sooner than this many times the
    no-hotspot fluid bound, whatever the weights, unless running flows move."""
    rng = random.Random(1)
    balanced = flows * (leaves - 1) / spines
    ratios = []
    for _ in range(trials):
        up = [[0] * spines for _ in range(leaves)]
        down = [[0] * spines for _ in range(leaves)]
        for a in range(leaves):
            for b in range(leaves):
                if a == b:
                    continue
                for _ in range(flows):
                    s = rng.randrange(spines)
                    up[a][s] += 1
                    down[b][s] += 1
        ratios.append(max(max(r) for r in up + down) / balanced)
    ratios.sort()
    return Summary(
        statistics.median(ratios), ratios[trials // 10], ratios[trials * 9 // 10], trials
    )
