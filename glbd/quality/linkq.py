"""Link quality: DLB-style quality bands 0..7 (7 = best) for every fabric interface (pure core).

:class:`LinkMonitor` has no netlink and no clock: every sample interval it gets the egress byte
counter and qdisc backlog of every monitored interface (:class:`LinkSample`, or
:class:`Columns` for many at once) and keeps

* an EWMA of the egress load in % of capacity (capacity = per-interface override, else the
  default; veth and shaped links have no true speed) and an EWMA of the queue depth (bytes);
* for each, a continuous *score* in [0, 8]: 8 at or below the min threshold, 0 at or above the
  max threshold, linear in between, so the 8 bands are equally spaced between min and max
  (Broadcom TH5 DLB: "8 equally spaced bands between Min and Max");
* the combined score ``rate_weight * load_score + (1 - rate_weight) * queue_score`` and its band
  ``clamp(ceil(score) - 1, 0, 7)``;
* a congestion onset -- a sample that finds the link saturated (load over the interval at or
  above the max threshold) with its queue building (backlog at least ``onset_queue_bytes`` and
  above the previous sample's) -- is taken as measured instead of through the EWMA, so the band
  falls on that very sample; a sample that sees only part of one (saturated before a queue
  forms, or a queue building over an interval that was partly idle) asks for one more sample
  half an interval later (:meth:`LinkMonitor.recheck_due`), when an onset would lower the band;
* hysteresis on the *reported* band: a drop of two or more bands, a link going down (quality 0
  with the down flag) or coming back goes out at once; a one-band drop goes out only when the
  score is ``hysteresis_margin`` of a band past the boundary, or has stayed on the other side for
  ``hysteresis_samples`` consecutive samples; a better band (``confirm_improvements``) only once
  ``hysteresis_samples`` samples in a row were better, as the worst of them. A value wobbling
  around a boundary, or a link loaded in bursts, therefore never flaps the band every sample;
* the residual capacity (:meth:`LinkMonitor.on_foreign`): the capacity minus the rate of the tc
  classes no load balancer can steer, which heartbeats report as the link's capacity.

The defaults of :class:`LinkMonParams` and the reason for each are in docs/heartbeat.md §6.
The counters come from :mod:`glbd.quality.linkstats`; :mod:`glbd.quality.linkrunner` feeds them in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from glbd.base.reasons import LinkChange
from heartbeat import wire

__all__ = [
    "FOREIGN_TAU_S",
    "MAX_BAND",
    "NO_COLUMNS",
    "RESIDUAL_CONFIRM",
    "RESIDUAL_DEADBAND",
    "RESIDUAL_FLOOR",
    "RESIDUAL_STEP",
    "Columns",
    "LinkMonParams",
    "LinkMonitor",
    "LinkQuality",
    "LinkSample",
    "QualityChanged",
    "band_of",
    "parse_tc_handle",
    "score",
]

MAX_BAND = 7


@dataclass(frozen=True, slots=True)
class LinkMonParams:
    """Monitor parameters (``[link_quality]`` in the config; same names and defaults)."""

    sample_interval_s: float = 0.010
    ewma_alpha: float = 0.25
    load_min_pct: float = 10.0
    load_max_pct: float = 90.0
    queue_min_bytes: int = 3_000
    queue_max_bytes: int = 300_000
    rate_weight: float = 0.5
    hysteresis_margin: float = 0.25
    hysteresis_samples: int = 3
    #: congestion onset: a sample that finds the link at or above ``load_max_pct`` over the
    #: interval with its queue building (backlog at least this many bytes and above the
    #: previous sample's) is taken as measured, past the EWMA (0: off)
    onset_queue_bytes: int = 1_000
    #: a sample that sees an onset only in part (the link saturated over the interval with no
    #: queue building yet, or a queue building over an interval not yet saturated), where an
    #: onset would lower the band, asks for one more sample this share of the interval later
    #: (at most one such sample per interval; 0: off)
    onset_recheck: float = 0.5
    #: a better band goes out only after ``hysteresis_samples`` samples in a row better than
    #: the reported one, as the worst of them (False: also by ``hysteresis_margin``, or at once
    #: two bands up)
    confirm_improvements: bool = True
    default_capacity_mbps: float = 10_000.0
    capacity_mbps: Mapping[str, float] = field(default_factory=dict)
    #: tc handles (``(major << 16) | minor``) of the egress classes whose traffic the load
    #: balancers cannot steer (strict-priority classes above the steered one): the parent
    #: handles of their leaf qdiscs. Their rate is taken off the capacity a heartbeat reports
    #: (residual capacity, see :meth:`LinkMonitor.on_foreign`). Empty: capacity as configured.
    foreign_classes: frozenset[int] = frozenset()
    #: the foreign load comes from glbd's ingress counter (bytes that did not enter where a
    #: load balancer steers them, :meth:`LinkMonitor.on_foreign` all the same), not classes
    foreign_ingress: bool = False
    #: the foreign load is read every this many samples
    foreign_every: int = 5
    #: the band from the foreign load alone (its rate against the capacity), not from all
    #: traffic and the queue: load the balancers steer themselves does not lower it
    band_from_foreign: bool = False
    #: the sampling interval while every link is quiet (up, below ``load_min_pct``, backlog at
    #: most ``queue_min_bytes``, reported at the best band); None: always
    #: ``sample_interval_s``. A link going down or up wakes the runner at once either way
    idle_sample_interval_s: float | None = None

    def __post_init__(self) -> None:
        if not 0 < self.ewma_alpha <= 1:
            raise ValueError("ewma_alpha must be in (0, 1]")
        if not self.load_min_pct < self.load_max_pct:
            raise ValueError("load_min_pct must be below load_max_pct")
        if not self.queue_min_bytes < self.queue_max_bytes:
            raise ValueError("queue_min_bytes must be below queue_max_bytes")
        if not 0 <= self.rate_weight <= 1:
            raise ValueError("rate_weight must be in [0, 1]")
        if not 0 <= self.hysteresis_margin < 1 or self.hysteresis_samples < 1:
            raise ValueError("hysteresis_margin in [0, 1), hysteresis_samples >= 1")
        if self.default_capacity_mbps <= 0 or any(v <= 0 for v in self.capacity_mbps.values()):
            raise ValueError("capacities must be > 0")
        if self.onset_queue_bytes < 0:
            raise ValueError("onset_queue_bytes must be >= 0")
        if not 0 <= self.onset_recheck < 1:
            raise ValueError("onset_recheck must be in [0, 1)")
        if self.foreign_every < 1:
            raise ValueError("foreign_every must be >= 1")
        if self.foreign_ingress and self.foreign_classes:
            raise ValueError("foreign_ingress and foreign_classes exclude each other")
        if self.band_from_foreign and not self.counts_foreign:
            raise ValueError("band_from_foreign needs foreign_classes or foreign_ingress")
        if (
            self.idle_sample_interval_s is not None
            and self.idle_sample_interval_s < self.sample_interval_s
        ):
            raise ValueError("idle_sample_interval_s must be >= sample_interval_s")

    def capacity_of(self, ifname: str) -> float:
        return self.capacity_mbps.get(ifname, self.default_capacity_mbps)

    @property
    def counts_foreign(self) -> bool:
        """Some foreign load is read (classes or the ingress counter)."""
        return self.foreign_ingress or bool(self.foreign_classes)


def score(value: float, lo: float, hi: float) -> float:
    """8 at or below ``lo``, 0 at or above ``hi``, linear in between."""
    if value <= lo:
        return 8.0
    if value >= hi:
        return 0.0
    return 8.0 * (hi - value) / (hi - lo)


#: the residual capacity a heartbeat reports never falls below this share of the capacity (a
#: link full of foreign traffic still carries some: strict priority is rarely 100 %)
RESIDUAL_FLOOR = 0.05
#: residual capacity is reported in steps of this share of the capacity, and moves only when
#: the measured value is more than ``RESIDUAL_DEADBAND`` steps away from the reported one
RESIDUAL_STEP = 0.05
RESIDUAL_DEADBAND = 1.5
#: a smaller shift (inside the deadband) is reported once this many readings in a row round to
#: the same other step, so the report converges on the true residual instead of stopping up to
#: the deadband short of it
RESIDUAL_CONFIRM = 3
#: time constant of the foreign classes' rate average, seconds: a steady stream that starts is
#: reported at ~95 % of its rate within 0.3 s (the load EWMA's 40 ms would make the residual
#: jump with every burst of a bursty class; the deadband below absorbs the rest)
FOREIGN_TAU_S = 0.1


def parse_tc_handle(text: str) -> int:
    """A tc class handle as tc writes it, ``"10:2"`` (hex major:minor) -> ``0x00100002``."""
    major, sep, minor = text.partition(":")
    try:
        if not sep or not major or not minor:
            raise ValueError
        hi, lo = int(major, 16), int(minor, 16)
    except ValueError:
        raise ValueError(
            f"{text!r} is not a tc class handle (hex major:minor, e.g. 10:2)"
        ) from None
    if not (0 < hi <= 0xFFFF and 0 < lo <= 0xFFFF):
        raise ValueError(f"{text!r}: major and minor must be 1..ffff")
    return (hi << 16) | lo


def band_of(s: float) -> int:
    """Band of a score: [0,1] -> 0, (1,2] -> 1, ..., (7,8] -> 7 (8 equal bands, 7 = best)."""
    return min(MAX_BAND, max(0, math.ceil(s) - 1))


class LinkSample(NamedTuple):
    """Counters of one interface at one instant (from :class:`glbd.quality.linkstats.StatsReader`
    or a test).
    A NamedTuple: 128 of them are built every 10 ms."""

    ifname: str
    up: bool
    tx_bytes: int
    backlog_bytes: int = 0
    ifindex: int = 0


class Columns(NamedTuple):
    """One sample of several interfaces as columns (position i of every tuple is one
    interface): what :meth:`glbd.quality.linkstats.StatsReader.read_columns` returns and
    :meth:`LinkMonitor.on_columns` takes, without a per-interface object."""

    ifnames: tuple[str, ...]
    up: tuple[bool, ...]
    tx_bytes: tuple[int, ...]
    backlog_bytes: tuple[int, ...]
    ifindex: tuple[int, ...]


#: a sample of no interface
NO_COLUMNS = Columns((), (), (), (), ())


@dataclass(frozen=True, slots=True)
class LinkQuality:
    """The current quality of one monitored link."""

    ifname: str
    ifindex: int
    band: int
    down: bool
    load_pct: float
    queue_bytes: float
    capacity_mbps: float
    score: float
    #: capacity left to steerable traffic (capacity minus the foreign classes' rate, see
    #: :meth:`LinkMonitor.on_foreign`); what heartbeats report as the link's capacity
    residual_mbps: float | None = None
    #: the foreign load's rate, Mbit/s (EWMA; None: not counted, or no reading yet)
    foreign_mbps: float | None = None

    def usable(self) -> LinkQuality:
        """This quality with the residual as its capacity: what steerable traffic can use (the
        local part of a load balancer's path table)."""
        if self.residual_mbps is None:
            return self
        return replace(self, capacity_mbps=self.residual_mbps)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ifname": self.ifname,
            "ifindex": self.ifindex,
            "band": self.band,
            "down": self.down,
            "load_pct": round(self.load_pct, 2),
            "queue_bytes": round(self.queue_bytes),
            "capacity_mbps": self.capacity_mbps,
            "residual_mbps": self.residual_mbps,
            "foreign_mbps": None if self.foreign_mbps is None else round(self.foreign_mbps, 3),
            "score": round(self.score, 3),
        }


@dataclass(frozen=True, slots=True)
class QualityChanged:
    """Effect: the reported band or down flag of a link changed."""

    quality: LinkQuality
    old_band: int | None
    old_down: bool | None
    #: with the band and flag unchanged: RESIDUAL (:meth:`LinkMonitor.on_foreign`) or CAPACITY
    #: (:meth:`LinkMonitor.set_params`)
    reason: LinkChange


class _Link:
    __slots__ = (
        "band",
        "capacity",
        "changes",
        "down",
        "foreign",
        "foreign_bytes",
        "foreign_t",
        "ifindex",
        "kcap",
        "last_backlog",
        "last_t",
        "last_tx",
        "load",
        "peak_queue",
        "pending",
        "queue",
        "res_pending",
        "residual",
        "score",
        "up_min",
    )

    def __init__(self, capacity: float) -> None:
        self.capacity = capacity
        self.kcap = 8e-4 / capacity  # bytes -> % of capacity per second (bits / (Mbit/s))
        self.ifindex = 0
        self.last_tx: int | None = None
        self.last_t = 0.0
        self.load: float | None = None  # EWMA %, None until two samples
        self.queue = 0.0
        self.peak_queue = 0.0  # the highest ``queue`` since take_peak_queue_delay_us
        self.score = 8.0
        self.band: int | None = None  # reported; None = not measured yet
        self.down = False
        self.pending = 0  # consecutive samples one band away, same direction (sign)
        self.last_backlog = 0
        self.up_min = 0  # worst band of the better samples pending (confirm_improvements)
        self.changes = 0
        self.foreign_bytes: int | None = None  # last foreign-class byte count
        self.foreign_t = 0.0
        self.foreign: float | None = None  # EWMA rate of the foreign classes, Mbit/s
        self.residual: float | None = None  # reported residual capacity (None: capacity)
        self.res_pending = 0  # readings in a row that round to another step inside the deadband


class LinkMonitor:
    """Pure link-quality core. Feed :meth:`on_samples` every sample interval."""

    def __init__(self, params: LinkMonParams | None = None) -> None:
        self._p = params or LinkMonParams()
        self._links: dict[str, _Link] = {}
        self._names: frozenset[str] = frozenset()
        # resolution of the last column order seen: its _Link per position, and the
        # monitored interfaces it lacks (down); recomputed only when the order changes
        self._order: tuple[str, ...] | None = None
        self._order_links: list[_Link | None] = []
        self._order_ifindex: tuple[int, ...] | None = None
        self._order_missing: list[str] = []
        self._recheck_at: float | None = None
        self._quiet = False  # the last sample found every link quiet (next_interval)

    @property
    def params(self) -> LinkMonParams:
        return self._p

    def set_params(self, params: LinkMonParams) -> list[QualityChanged]:
        """New parameters (a reload). Returns a change (reason ``"capacity"``) per link whose
        usable capacity moved (its configured capacity, or a residual dropped because the
        foreign load is gone), so the heartbeats and the path table's local part follow."""
        old, self._p = self._p, params
        out: list[QualityChanged] = []
        for name, ln in self._links.items():
            before = ln.capacity if ln.residual is None else ln.residual
            ln.capacity = params.capacity_of(name)
            ln.kcap = 8e-4 / ln.capacity
            if not params.counts_foreign or (
                params.foreign_ingress != old.foreign_ingress
            ):  # no foreign load, or another source: its readings start afresh
                ln.foreign_bytes = ln.foreign = ln.residual = None
                ln.res_pending = 0
            elif ln.residual is not None and ln.residual >= ln.capacity:
                ln.residual = None
            after = ln.capacity if ln.residual is None else ln.residual
            if after != before:
                out.append(
                    QualityChanged(self._quality(name, ln), ln.band, ln.down, LinkChange.CAPACITY)
                )
        return out

    def on_foreign(self, bytes_by_ifindex: Mapping[int, int], now: float) -> list[QualityChanged]:
        """Byte counters of the foreign load (the foreign classes summed per interface, or
        the ingress counter's foreign bytes; an interface without any counts 0) at ``now``:
        their rate (averaged with the time constant :data:`FOREIGN_TAU_S`) is taken off each
        link's capacity. The result, floored at
        :data:`RESIDUAL_FLOOR` of the capacity, moves in :data:`RESIDUAL_STEP` steps: at once
        past a :data:`RESIDUAL_DEADBAND`, after :data:`RESIDUAL_CONFIRM` readings in a row
        inside it, so heartbeats change only on a real shift. Returns a change (reason
        ``"residual"``) per link whose reported residual moved; the heartbeat entries carry it
        from the next :meth:`entries`."""
        changed: list[QualityChanged] = []
        for name, ln in self._links.items():
            if ln.down or ln.ifindex == 0:
                ln.foreign_bytes = None
                continue
            b = bytes_by_ifindex.get(ln.ifindex, 0)
            last, dt = ln.foreign_bytes, now - ln.foreign_t
            ln.foreign_bytes = b
            ln.foreign_t = now
            if last is None or b < last or dt <= 0:
                continue  # first reading, or the qdisc was replaced: re-baseline
            rate = (b - last) * 8e-6 / dt  # Mbit/s
            prev = ln.foreign
            alpha = 1.0 - math.exp(-dt / FOREIGN_TAU_S)
            f = ln.foreign = rate if prev is None else prev + alpha * (rate - prev)
            cap = ln.capacity
            step = cap * RESIDUAL_STEP
            measured = max(cap * RESIDUAL_FLOOR, cap - f)
            cur = cap if ln.residual is None else ln.residual
            target = min(cap, max(cap * RESIDUAL_FLOOR, round(measured / step) * step))
            if f < step / 2:  # (next to) nothing foreign: the full capacity, deadband or not
                target = cap
                move = ln.residual is not None
            elif abs(measured - cur) > RESIDUAL_DEADBAND * step:
                move = True
            elif abs(target - cur) > step / 2:
                ln.res_pending += 1
                move = ln.res_pending >= RESIDUAL_CONFIRM
            else:
                ln.res_pending = 0
                move = False
            if move:
                ln.residual = None if target >= cap else target
                ln.res_pending = 0
                changed.append(
                    QualityChanged(self._quality(name, ln), ln.band, ln.down, LinkChange.RESIDUAL)
                )
        return changed

    def set_interfaces(self, ifnames: Iterable[str]) -> list[QualityChanged]:
        """The fabric interfaces to monitor. Removed ones report a final change."""
        want = set(ifnames)
        out = []
        for name in [n for n in self._links if n not in want]:
            ln = self._links.pop(name)
            if ln.band is not None:
                out.append(
                    QualityChanged(self._quality(name, ln), ln.band, ln.down, LinkChange.REMOVED)
                )
        for name in sorted(want - set(self._links)):
            self._links[name] = _Link(self._p.capacity_of(name))
        self._names = frozenset(self._links)
        self._order = None
        self._quiet = False
        return out

    @property
    def interfaces(self) -> list[str]:
        return sorted(self._links)

    @property
    def interface_set(self) -> frozenset[str]:
        """The monitored interfaces; the same object until :meth:`set_interfaces`."""
        return self._names

    def on_samples(self, samples: Iterable[LinkSample], now: float) -> list[QualityChanged]:
        """One sample per monitored interface; an interface missing from ``samples`` (gone) is
        down. Returns the links whose reported band or down flag changed."""
        cols = tuple(zip(*samples, strict=True))
        return self.on_columns(Columns(*cols) if cols else NO_COLUMNS, now)

    def _resolve(self, names: tuple[str, ...]) -> None:
        links = self._links
        self._order = names
        self._order_links = [links.get(n) for n in names]
        self._order_ifindex = None
        present = set(names)
        self._order_missing = [n for n in links if n not in present]

    def next_interval(self) -> float:
        """How long after the last sample the next regular one is due: the idle interval
        while the last sample found every link quiet, else the sample interval."""
        p = self._p
        if self._quiet and p.idle_sample_interval_s is not None:
            return p.idle_sample_interval_s
        return p.sample_interval_s

    def recheck_due(self) -> float | None:
        """When the last sample wants the next one (``onset_recheck`` of an interval after
        it: it saw an onset in part, see :class:`LinkMonParams`), or None: the regular
        interval."""
        return self._recheck_at

    def on_columns(self, cols: Columns, now: float) -> list[QualityChanged]:
        """:meth:`on_samples` with the sample as columns (the reader's fast path)."""
        names, ups, txs, backlogs, ifindexes = cols
        self._align(names, ifindexes)
        p = self._p
        out: list[QualityChanged] = []
        alpha = p.ewma_alpha
        interval = p.sample_interval_s
        short = 0.75 * interval  # a shorter interval (a recheck) weighs less in the EWMAs
        long = 1.5 * interval  # and a longer one (idle sampling) more: one time constant
        quiet = True
        recheck = p.onset_recheck * interval if p.onset_queue_bytes else 0.0
        want_recheck = False
        rw, rq = p.rate_weight, 1.0 - p.rate_weight
        lmin, lmax = p.load_min_pct, p.load_max_pct
        qmin, qmax = p.queue_min_bytes, p.queue_max_bytes
        lk, qk = 8.0 / (lmax - lmin), 8.0 / (qmax - qmin)
        onset_q = p.onset_queue_bytes
        from_foreign = p.band_from_foreign
        for ln, name, up, tx, backlog in zip(
            self._order_links, names, ups, txs, backlogs, strict=True
        ):
            if ln is None:
                continue
            if not up:
                self._link_down(name, ln, out)
                continue
            last_tx = ln.last_tx
            dt = now - ln.last_t
            last_backlog = ln.last_backlog
            ln.last_tx = tx
            ln.last_t = now
            ln.last_backlog = backlog
            if last_tx is None or tx < last_tx or dt <= 0:
                quiet = False
                continue  # first sample after start/up, or counters reset: re-baseline
            load = (tx - last_tx) * ln.kcap / dt
            if ln.load is None:
                lv = ln.load = load
                qv = ln.queue = float(backlog)
            else:
                a = alpha if short <= dt <= long else 1.0 - (1.0 - alpha) ** (dt / interval)
                lv = ln.load = ln.load + a * (load - ln.load)
                qv = ln.queue = ln.queue + a * (backlog - ln.queue)
                saturated = load >= lmax
                building = backlog > last_backlog
                if onset_q and saturated and building and backlog >= onset_q:
                    # congestion onset: saturated with a queue building. Taken as measured
                    # (the EWMA would need several samples to cross a band boundary)
                    if load > lv:
                        lv = ln.load = load
                    if backlog > qv:
                        qv = ln.queue = float(backlog)
                elif recheck and (saturated or (building and backlog > 0)) and ln.band:
                    # an onset in part: one more sample soon, if an onset would lower the band
                    want_recheck = want_recheck or self._onset_lowers(ln.band, backlog, qv)
            if qv > ln.peak_queue:
                ln.peak_queue = qv
            if from_foreign:  # the non-steerable load alone, as a share of the capacity
                fv = (ln.foreign or 0.0) * 100.0 / ln.capacity
                sc = ln.score = 8.0 if fv <= lmin else 0.0 if fv >= lmax else (lmax - fv) * lk
            else:
                ls = 8.0 if lv <= lmin else 0.0 if lv >= lmax else (lmax - lv) * lk
                qs = 8.0 if qv <= qmin else 0.0 if qv >= qmax else (qmax - qv) * qk
                sc = ln.score = rw * ls + rq * qs
            if quiet and (sc < 8.0 or load >= lmin or backlog > qmin or ln.band != MAX_BAND):
                quiet = False
            ic = int(sc)  # band = clamp(ceil(sc) - 1, 0, 7), inlined
            raw = ic if sc > ic else ic - 1
            raw = 0 if raw < 0 else MAX_BAND if raw > MAX_BAND else raw
            if raw == ln.band and not ln.down:
                ln.pending = 0  # the steady state: the band holds
                continue
            change = self._band_step(name, ln, raw, sc)
            if change is not None:
                out.append(change)
        self._missing_down(out)
        self._recheck_at = now + recheck if want_recheck else None
        self._quiet = quiet and not out
        return out

    def _link_down(self, name: str, ln: _Link, out: list[QualityChanged]) -> None:
        """A link the sample found down: reported down once, its measurements dropped."""
        if not ln.down:
            out.append(self._set(name, ln, 0, True, LinkChange.DOWN))
        ln.last_tx = None
        ln.load = None
        ln.queue = 0.0
        ln.score = 0.0

    def _onset_lowers(self, band: int, backlog: int, queue: float) -> bool:
        """An onset in part: saturated with no queue yet, or a queue building over an interval
        that began before it. Whether taking it as measured would lower the link's ``band``
        (then a sample soon settles it)."""
        p = self._p
        rq = 1.0 - p.rate_weight
        qmin, qmax = p.queue_min_bytes, p.queue_max_bytes
        qk = 8.0 / (qmax - qmin)
        qo = backlog if backlog > queue else queue
        so = rq * (8.0 if qo <= qmin else 0.0 if qo >= qmax else (qmax - qo) * qk)
        return band_of(so) < band

    def _band_step(self, name: str, ln: _Link, raw: int, sc: float) -> QualityChanged | None:
        """The hysteresis on the reported band of a link whose sample (score ``sc``, band
        ``raw``) is off its band, or that is new or back up: the change to report, if any."""
        cur = ln.band
        if cur is None or ln.down:
            return self._set(name, ln, raw, False, LinkChange.NEW if cur is None else LinkChange.UP)
        p = self._p
        margin = p.hysteresis_margin
        persist = p.hysteresis_samples
        diff = raw - cur
        if diff > 0 and p.confirm_improvements:
            # better samples (a margin past the boundary) must persist: a link loaded in
            # bursts keeps the band of its bursts instead of flapping with them
            if sc < cur + 1 + margin:
                ln.pending = 0
                return None
            if ln.pending <= 0:
                ln.pending, ln.up_min = 1, raw
            else:
                ln.pending += 1
                ln.up_min = raw if raw < ln.up_min else ln.up_min
            if ln.pending >= persist:
                return self._set(name, ln, ln.up_min, False, LinkChange.PERSISTED)
            return None
        if diff >= 2 or diff <= -2:
            return self._set(name, ln, raw, False, LinkChange.JUMP)
        if (diff > 0 and sc >= cur + 1 + margin) or (diff < 0 and sc <= cur - margin):
            return self._set(name, ln, raw, False, LinkChange.MARGIN)
        ln.pending = ln.pending + diff if ln.pending * diff >= 0 else diff
        if abs(ln.pending) >= persist:
            return self._set(name, ln, raw, False, LinkChange.PERSISTED)
        return None

    def _align(self, names: tuple[str, ...], ifindexes: tuple[int, ...]) -> None:
        """Resolve a new column order (or new ifindexes) to the monitored links."""
        if names != self._order:
            self._resolve(tuple(names))
        if ifindexes != self._order_ifindex:
            self._order_ifindex = tuple(ifindexes)
            for ln, ifindex in zip(self._order_links, ifindexes, strict=True):
                if ln is not None:
                    ln.ifindex = ifindex

    def _missing_down(self, out: list[QualityChanged]) -> None:
        """A monitored interface missing from the sample is gone: down."""
        for name in self._order_missing:
            ln = self._links[name]
            if not ln.down:
                ln.last_tx = None
                ln.load = None
                ln.score = 0.0
                out.append(self._set(name, ln, 0, True, LinkChange.DOWN))

    def _set(
        self, name: str, ln: _Link, band: int, down: bool, reason: LinkChange
    ) -> QualityChanged:
        old_band, old_down = ln.band, (ln.down if ln.band is not None else None)
        ln.band = band
        ln.down = down
        ln.pending = 0
        ln.changes += 1
        return QualityChanged(self._quality(name, ln), old_band, old_down, reason)

    def _quality(self, name: str, ln: _Link) -> LinkQuality:
        return LinkQuality(
            name,
            ln.ifindex,
            0 if ln.band is None else ln.band,
            ln.down,
            ln.load or 0.0,
            ln.queue,
            ln.capacity,
            ln.score,
            ln.residual,
            ln.foreign,
        )

    def quality(self, ifname: str) -> LinkQuality | None:
        ln = self._links.get(ifname)
        return None if ln is None or ln.band is None else self._quality(ifname, ln)

    def usable(self, ifname: str) -> LinkQuality | None:
        """What steerable traffic can use of the link, as this router's path table and its
        heartbeats (:meth:`entries`) see it: the residual as its capacity and, with bands from
        the foreign load, band 7 while it is up (that load is in the capacity already; the
        weight multiplies the two, so the band would count it twice)."""
        q = self.quality(ifname)
        if q is None:
            return None
        q = q.usable()
        return replace(q, band=MAX_BAND) if self._p.band_from_foreign and not q.down else q

    def take_peak_queue_delay_us(self) -> float:
        """The deepest queue (the smoothed backlog, as the time it takes to drain at the link's
        residual capacity) any measured link held at a sample since the last call, in
        microseconds; the peaks start again from 0. A reader a few times a second so sees the
        queue of every sample, not just of the ones it happens to read."""
        out = 0.0
        for ln in self._links.values():
            peak, ln.peak_queue = ln.peak_queue, 0.0
            if ln.band is None or ln.down:
                continue
            cap = ln.residual or ln.capacity
            if cap > 0 and peak * 8 / cap > out:
                out = peak * 8 / cap
        return out

    def qualities(self) -> dict[str, LinkQuality]:
        """Every measured link (a link without two samples yet is absent: unknown)."""
        return {n: self._quality(n, ln) for n, ln in self._links.items() if ln.band is not None}

    def entries(self, far_end: Mapping[str, int]) -> list[wire.Entry]:
        """Heartbeat entries for the measured links that have a far end (BGP id) known: each
        link as :meth:`usable` gives it (inlined: this runs every sample), so with bands from
        the foreign load a link that is up goes out at band 7 (a link 75 % full of that load
        would otherwise get a sixtieth of a free link's weight, not the quarter its residual
        is worth). The band the monitor measured stays its own (``glbctl links``, metrics)."""
        out = []
        entry = wire.Entry
        down_flag = wire.ENTRY_FLAG_DOWN
        in_capacity = self._p.band_from_foreign
        for name, ln in self._links.items():
            fe = far_end.get(name)
            band = ln.band
            if fe is None or band is None:
                continue
            if in_capacity:
                band = MAX_BAND
            # the entry's figures, clamped to their wire widths, inlined: this runs for every
            # link every sample in the daemon
            load = ln.load
            bp = round(load * 100) if load else 0
            qb = round(ln.queue)
            cap = round(ln.capacity if ln.residual is None else ln.residual)
            out.append(
                entry(
                    fe,
                    ln.ifindex,
                    cap if cap < 0xFFFFFFFF else 0xFFFFFFFF,
                    0 if ln.down else band,
                    down_flag if ln.down else 0,
                    bp if bp < 0xFFFF else 0xFFFF,
                    qb if qb < 0xFFFFFFFF else 0xFFFFFFFF,
                )
            )
        return out

    def to_dict(self) -> dict[str, Any]:
        p = self._p
        return {
            "params": {
                "sample_interval_ms": p.sample_interval_s * 1000,
                "ewma_alpha": p.ewma_alpha,
                "load_min_pct": p.load_min_pct,
                "load_max_pct": p.load_max_pct,
                "queue_min_bytes": p.queue_min_bytes,
                "queue_max_bytes": p.queue_max_bytes,
                "rate_weight": p.rate_weight,
                "hysteresis_margin": p.hysteresis_margin,
                "hysteresis_samples": p.hysteresis_samples,
                "onset_queue_bytes": p.onset_queue_bytes,
                "onset_recheck": p.onset_recheck,
                "confirm_improvements": p.confirm_improvements,
            },
            "links": [
                {
                    **self._quality(n, ln).to_dict(),
                    "measured": ln.band is not None,
                    "changes": ln.changes,
                }
                for n, ln in sorted(self._links.items())
            ],
        }
