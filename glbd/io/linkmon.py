"""Link-quality monitor: DLB-style quality bands 0..7 (7 = best) for every fabric interface.

Pure core :class:`LinkMonitor` (no netlink, no clock): every sample interval it gets the egress
byte counter and qdisc backlog of every monitored interface (:class:`LinkSample`) and keeps

* an EWMA of the egress load in % of capacity (capacity = per-interface override, else the
  default; veth and shaped links have no true speed) and an EWMA of the queue depth (bytes);
* for each, a continuous *score* in [0, 8]: 8 at or below the min threshold, 0 at or above the
  max threshold, linear in between, so the 8 bands are equally spaced between min and max
  (Broadcom TH5 DLB: "8 equally spaced bands between Min and Max");
* the combined score ``rate_weight * load_score + (1 - rate_weight) * queue_score`` and its band
  ``clamp(ceil(score) - 1, 0, 7)``;
* hysteresis on the *reported* band: a change of two or more bands, a link going down (quality 0
  with the down flag) or coming back goes out at once; a one-band change goes out only when the
  score is ``hysteresis_margin`` of a band past the boundary, or has stayed on the other side for
  ``hysteresis_samples`` consecutive samples. A value wobbling around a boundary therefore never
  flaps the band every sample.

Defaults and why (Junos/Broadcom DLB spirit, scaled to a software loop; docs/heartbeat.md §6):

==========================  ===========  ==================================================
parameter                   default      reason
==========================  ===========  ==================================================
sample_interval_s           0.010        Apstra GLB "message TX interval" 10 ms; half the
                                         20 ms heartbeat, so each heartbeat sees a new sample
ewma_alpha                  0.25         Broadcom ``EcmpDynamicEgressBytesExponent`` 2 (weight
                                         2^-2); time constant ~4 samples = 40 ms
load_min_pct/load_max_pct   10 / 90      Broadcom example 500/9000 Mbit/s per 10G = 5/90 %;
                                         Junos flowlet 20/50, per-packet 80/99. 10..90 gives
                                         10-point bands over the whole useful range
queue_min/max_bytes         3000/300000  TH5 example 103/563 cells x 254 B = 26/143 KB per
                                         port; a Linux qdisc queues more (txqueuelen 1000):
                                         two MTU packets is "empty", 300 KB (240 µs at 10G)
                                         is "full"
rate_weight                 0.5          Junos: load and queue "weighted equally by default"
hysteresis_margin           0.25 band    a quarter band (2.5 load points) past the boundary
hysteresis_samples          3            30 ms: about one and a half heartbeat intervals
==========================  ===========  ==================================================

:class:`StatsReader` reads all counters in two netlink dumps per sample (one RTM_GETSTATS dump
for ``IFLA_STATS_LINK_64`` of every interface, one RTM_GETQDISC dump for root-qdisc backlog),
never a per-interface request and never /proc; link state comes from RTNLGRP_LINK events.
Both dumps are read as columns through layouts learned once (:mod:`glbd.codec.netlink.columns`) and
handed to :meth:`LinkMonitor.on_columns` without a per-interface object. :class:`MonitorRunner`
is the asyncio timer that ties the two together (128 interfaces every 10 ms: ~8 % of a core on
the project machine, docs/heartbeat.md §8).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import operator
import os
import socket
import struct
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias, TypeVar

import structlog

from heartbeat import wire

if TYPE_CHECKING:
    from glbd.codec.netlink.columns import DumpColumns
    from glbd.io.netlink import NetlinkSocket

__all__ = [
    "Columns",
    "LinkMonParams",
    "LinkMonitor",
    "LinkQuality",
    "LinkSample",
    "MonitorRunner",
    "QualityChanged",
    "StatsReader",
    "band_of",
    "score",
]

log = structlog.get_logger(__name__)

_T = TypeVar("_T")
# a read that yields (None) only while its socket has nothing queued yet, then returns _T
Steps: TypeAlias = Generator[None, None, _T]

MAX_BAND = 7
TC_H_ROOT = 0xFFFFFFFF  # tcmsg parent of a root qdisc


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
    default_capacity_mbps: float = 10_000.0
    capacity_mbps: Mapping[str, float] = field(default_factory=dict)
    #: tc handles (``(major << 16) | minor``) of the egress classes whose traffic the load
    #: balancers cannot steer (strict-priority classes above the steered one): the parent
    #: handles of their leaf qdiscs. Their rate is taken off the capacity a heartbeat reports
    #: (residual capacity, see :meth:`LinkMonitor.on_foreign`). Empty: capacity as configured.
    foreign_classes: frozenset[int] = frozenset()
    #: the foreign classes are read every this many samples
    foreign_every: int = 5

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
        if self.foreign_every < 1:
            raise ValueError("foreign_every must be >= 1")

    def capacity_of(self, ifname: str) -> float:
        return self.capacity_mbps.get(ifname, self.default_capacity_mbps)


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


def _cap(mbps: float) -> int:
    return min(0xFFFFFFFF, round(mbps))


def _bp(load_pct: float | None) -> int:
    return min(0xFFFF, round((load_pct or 0.0) * 100))


def _qb(queue: float) -> int:
    return min(0xFFFFFFFF, round(queue))


def band_of(s: float) -> int:
    """Band of a score: [0,1] -> 0, (1,2] -> 1, ..., (7,8] -> 7 (8 equal bands, 7 = best)."""
    return min(MAX_BAND, max(0, math.ceil(s) - 1))


class LinkSample(NamedTuple):
    """Counters of one interface at one instant (from :class:`StatsReader` or a test).
    A NamedTuple: 128 of them are built every 10 ms."""

    ifname: str
    up: bool
    tx_bytes: int
    backlog_bytes: int = 0
    ifindex: int = 0


class Columns(NamedTuple):
    """One sample of several interfaces as columns (position i of every tuple is one
    interface): what :meth:`StatsReader.read_columns` returns and
    :meth:`LinkMonitor.on_columns` takes, without a per-interface object."""

    ifnames: tuple[str, ...]
    up: tuple[bool, ...]
    tx_bytes: tuple[int, ...]
    backlog_bytes: tuple[int, ...]
    ifindex: tuple[int, ...]


_NO_COLUMNS = Columns((), (), (), (), ())


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

    def usable(self) -> LinkQuality:
        """This quality with the residual as its capacity: what steerable traffic can use (the
        local part of a load balancer's path table)."""
        if self.residual_mbps is None:
            return self
        return replace(self, capacity_mbps=self.residual_mbps)

    def to_entry(self, far_end_id: int, link_id: int | None = None) -> wire.Entry:
        """The heartbeat entry for this link (``link_id`` defaults to the ifindex)."""
        cap = self.capacity_mbps if self.residual_mbps is None else self.residual_mbps
        return wire.Entry(
            far_end_id,
            self.ifindex if link_id is None else link_id,
            _cap(cap),
            0 if self.down else self.band,
            wire.ENTRY_FLAG_DOWN if self.down else 0,
            _bp(self.load_pct),
            _qb(self.queue_bytes),
        )

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
            "score": round(self.score, 3),
        }


@dataclass(frozen=True, slots=True)
class QualityChanged:
    """Effect: the reported band or down flag of a link changed."""

    quality: LinkQuality
    old_band: int | None
    old_down: bool | None
    #: "new" | "down" | "up" | "jump" | "margin" | "persisted" | "removed"; or, with the band
    #: and flag unchanged, "residual" (:meth:`LinkMonitor.on_foreign`) or "capacity" (a reload
    #: changed the usable capacity: :meth:`LinkMonitor.set_params`)
    reason: str


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
        "last_t",
        "last_tx",
        "load",
        "pending",
        "queue",
        "res_pending",
        "residual",
        "score",
    )

    def __init__(self, capacity: float) -> None:
        self.capacity = capacity
        self.kcap = 8e-4 / capacity  # bytes -> % of capacity per second (bits / (Mbit/s))
        self.ifindex = 0
        self.last_tx: int | None = None
        self.last_t = 0.0
        self.load: float | None = None  # EWMA %, None until two samples
        self.queue = 0.0
        self.score = 8.0
        self.band: int | None = None  # reported; None = not measured yet
        self.down = False
        self.pending = 0  # consecutive samples one band away, same direction (sign)
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

    @property
    def params(self) -> LinkMonParams:
        return self._p

    def set_params(self, params: LinkMonParams) -> list[QualityChanged]:
        """New parameters (a reload). Returns a change (reason ``"capacity"``) per link whose
        usable capacity moved (its configured capacity, or a residual dropped because the
        foreign classes are gone), so the heartbeats and the path table's local part follow."""
        self._p = params
        out: list[QualityChanged] = []
        for name, ln in self._links.items():
            before = ln.capacity if ln.residual is None else ln.residual
            ln.capacity = params.capacity_of(name)
            ln.kcap = 8e-4 / ln.capacity
            if not params.foreign_classes:
                ln.foreign_bytes = ln.foreign = ln.residual = None
                ln.res_pending = 0
            elif ln.residual is not None and ln.residual >= ln.capacity:
                ln.residual = None
            after = ln.capacity if ln.residual is None else ln.residual
            if after != before:
                out.append(QualityChanged(self._quality(name, ln), ln.band, ln.down, "capacity"))
        return out

    def on_foreign(self, bytes_by_ifindex: Mapping[int, int], now: float) -> list[QualityChanged]:
        """Byte counters of the foreign classes (summed per interface; an interface without
        any counts 0) at ``now``: their rate (averaged with the time constant
        :data:`FOREIGN_TAU_S`) is taken off each link's capacity. The result, floored at
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
                    QualityChanged(self._quality(name, ln), ln.band, ln.down, "residual")
                )
        return changed

    def set_interfaces(self, ifnames: Iterable[str]) -> list[QualityChanged]:
        """The fabric interfaces to monitor. Removed ones report a final change."""
        want = set(ifnames)
        out = []
        for name in [n for n in self._links if n not in want]:
            ln = self._links.pop(name)
            if ln.band is not None:
                out.append(QualityChanged(self._quality(name, ln), ln.band, ln.down, "removed"))
        for name in sorted(want - set(self._links)):
            self._links[name] = _Link(self._p.capacity_of(name))
        self._names = frozenset(self._links)
        self._order = None
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
        return self.on_columns(Columns(*cols) if cols else _NO_COLUMNS, now)

    def _resolve(self, names: tuple[str, ...]) -> None:
        links = self._links
        self._order = names
        self._order_links = [links.get(n) for n in names]
        self._order_ifindex = None
        present = set(names)
        self._order_missing = [n for n in links if n not in present]

    def on_columns(self, cols: Columns, now: float) -> list[QualityChanged]:
        """:meth:`on_samples` with the sample as columns (the reader's fast path)."""
        names, ups, txs, backlogs, ifindexes = cols
        if names != self._order:
            self._resolve(tuple(names))
        if ifindexes != self._order_ifindex:
            self._order_ifindex = tuple(ifindexes)
            for ln, ifindex in zip(self._order_links, ifindexes, strict=True):
                if ln is not None:
                    ln.ifindex = ifindex
        p = self._p
        out: list[QualityChanged] = []
        alpha = p.ewma_alpha
        rw = p.rate_weight
        rq = 1.0 - rw
        lmin, lmax, qmin, qmax = (
            p.load_min_pct,
            p.load_max_pct,
            p.queue_min_bytes,
            p.queue_max_bytes,
        )
        lk = 8.0 / (lmax - lmin)
        qk = 8.0 / (qmax - qmin)
        margin = p.hysteresis_margin
        persist = p.hysteresis_samples
        for ln, name, up, tx, backlog in zip(
            self._order_links, names, ups, txs, backlogs, strict=True
        ):
            if ln is None:
                continue
            if not up:
                if not ln.down:
                    out.append(self._set(name, ln, 0, True, "down"))
                ln.last_tx = None
                ln.load = None
                ln.queue = 0.0
                ln.score = 0.0
                continue
            last_tx = ln.last_tx
            dt = now - ln.last_t
            ln.last_tx = tx
            ln.last_t = now
            if last_tx is None or tx < last_tx or dt <= 0:
                continue  # first sample after start/up, or counters reset: re-baseline
            load = (tx - last_tx) * ln.kcap / dt
            if ln.load is None:
                lv = ln.load = load
                qv = ln.queue = float(backlog)
            else:
                lv = ln.load = ln.load + alpha * (load - ln.load)
                qv = ln.queue = ln.queue + alpha * (backlog - ln.queue)
            ls = 8.0 if lv <= lmin else 0.0 if lv >= lmax else (lmax - lv) * lk
            qs = 8.0 if qv <= qmin else 0.0 if qv >= qmax else (qmax - qv) * qk
            sc = ln.score = rw * ls + rq * qs
            ic = int(sc)  # band = clamp(ceil(sc) - 1, 0, 7), inlined
            raw = ic if sc > ic else ic - 1
            raw = 0 if raw < 0 else MAX_BAND if raw > MAX_BAND else raw
            cur = ln.band
            if cur is None or ln.down:
                out.append(self._set(name, ln, raw, False, "new" if cur is None else "up"))
                continue
            if raw == cur:
                ln.pending = 0
                continue
            diff = raw - cur
            if diff >= 2 or diff <= -2:
                out.append(self._set(name, ln, raw, False, "jump"))
            elif (diff > 0 and sc >= cur + 1 + margin) or (diff < 0 and sc <= cur - margin):
                out.append(self._set(name, ln, raw, False, "margin"))
            else:
                ln.pending = ln.pending + diff if ln.pending * diff >= 0 else diff
                if abs(ln.pending) >= persist:
                    out.append(self._set(name, ln, raw, False, "persisted"))
        for name in self._order_missing:
            ln = self._links[name]
            if not ln.down:
                ln.last_tx = None
                ln.load = None
                ln.score = 0.0
                out.append(self._set(name, ln, 0, True, "down"))
        return out

    def _set(self, name: str, ln: _Link, band: int, down: bool, reason: str) -> QualityChanged:
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
        )

    def quality(self, ifname: str) -> LinkQuality | None:
        ln = self._links.get(ifname)
        return None if ln is None or ln.band is None else self._quality(ifname, ln)

    def qualities(self) -> dict[str, LinkQuality]:
        """Every measured link (a link without two samples yet is absent: unknown)."""
        return {n: self._quality(n, ln) for n, ln in self._links.items() if ln.band is not None}

    def entries(self, far_end: Mapping[str, int]) -> list[wire.Entry]:
        """Heartbeat entries for the measured links that have a far end (BGP id) known."""
        out = []
        entry = wire.Entry
        down_flag = wire.ENTRY_FLAG_DOWN
        for name, ln in self._links.items():
            fe = far_end.get(name)
            band = ln.band
            if fe is None or band is None:
                continue
            # the figures of LinkQuality.to_entry (_cap/_bp/_qb), inlined: this runs for
            # every link every sample in the daemon
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


# --- netlink stats reader and the asyncio loop ---------------------------------------------


_NLHDR = struct.Struct("=IHHII")
_ATTR = struct.Struct("=HH")
_IFINFO = struct.Struct("=BxHiII")  # ifinfomsg: family, type, index, flags, change
_TCMSG = struct.Struct("=BxxxiIII")  # tcmsg: family, ifindex, handle, parent, info
_U32 = struct.Struct("=I")
_U64 = struct.Struct("=Q")
# the two per-sample requests, packed in one call each (nlmsghdr + family header)
_REQ_STATS = struct.Struct("=IHHIIBxxxII")  # + if_stats_msg: family, ifindex, filter_mask
_REQ_QDISC = struct.Struct("=IHHIIBxxxiIII")  # + tcmsg
_TCA_STATS2 = 7
_TCA_STATS_BASIC = 1
_DUMP = 0x301  # NLM_F_REQUEST | NLM_F_DUMP
RTM_GETSTATS = 94
RTM_NEWQDISC = 36
RTM_GETQDISC = 38
RTM_NEWSTATS = 92
IFLA_STATS_LINK_64 = 1


def _attrs(data: bytes, off: int, end: int) -> Iterator[tuple[int, int, int]]:
    """(type, start, end) of each netlink attribute in data[off:end]."""
    unpack = _ATTR.unpack_from
    while off + 4 <= end:
        ln, typ = unpack(data, off)
        if ln < 4 or off + ln > end:
            return
        yield typ & 0x3FFF, off + 4, off + ln
        off += (ln + 3) & ~3


def foreign_bytes(rows: Iterable[tuple[int, bytes]], parents: frozenset[int]) -> dict[int, int]:
    """From the messages of an RTM_GETQDISC dump (``(type, body)``): per ifindex, the bytes
    sent by the qdiscs attached to one of the classes ``parents`` (TCA_STATS2 /
    TCA_STATS_BASIC). Malformed messages are skipped."""
    out: dict[int, int] = {}
    for typ, body in rows:
        if typ != RTM_NEWQDISC or len(body) < _TCMSG.size:
            continue
        _fam, ifindex, _handle, parent, _info = _TCMSG.unpack_from(body)
        if parent not in parents:
            continue
        for t, a, a_end in _attrs(body, _TCMSG.size, len(body)):
            if t != _TCA_STATS2:
                continue
            for t2, b, b_end in _attrs(body, a, a_end):
                if t2 == _TCA_STATS_BASIC and b_end - b >= 8:
                    out[ifindex] = out.get(ifindex, 0) + _U64.unpack_from(body, b)[0]
                    break
            break
    return out


@dataclass(slots=True)
class _LinkInfo:
    name: str
    up: bool


def _picker(pos: list[int]) -> Callable[[tuple[int, ...]], tuple[int, ...]]:
    """A C-level gather of ``pos`` from a tuple (``operator.itemgetter`` returns a bare
    value for one position and needs at least one)."""
    if len(pos) >= 2:
        return operator.itemgetter(*pos)
    if len(pos) == 1:
        p0 = pos[0]
        return lambda col: (col[p0],)
    return lambda col: ()


class _Plan:
    """How to turn the two dumps' columns into :class:`Columns`, valid while the link table,
    the wanted names and the dumps' ifindex order stay the same (they do between link
    events)."""

    __slots__ = ("get_bl", "get_tx", "idx_q", "idx_s", "ifindex", "names", "parent", "ups",
                 "ver", "want")  # fmt: skip

    def __init__(
        self,
        ver: int,
        want: frozenset[str] | None,
        idx_s: tuple[int, ...],
        idx_q: tuple[int, ...],
        parent: tuple[int, ...],
        links: Mapping[int, _LinkInfo],
    ) -> None:
        self.ver, self.want, self.idx_s, self.idx_q, self.parent = ver, want, idx_s, idx_q, parent
        root: dict[int, int] = {}
        for i, (ix, par) in enumerate(zip(idx_q, parent, strict=True)):
            if par == TC_H_ROOT and ix not in root:
                root[ix] = i
        none = len(idx_q)  # the 0 appended after the backlog column: no root qdisc
        pos_s: list[int] = []
        pos_q: list[int] = []
        names: list[str] = []
        ups: list[bool] = []
        ifx: list[int] = []
        for i, ix in enumerate(idx_s):
            info = links.get(ix)
            if info is None or (want is not None and info.name not in want):
                continue
            pos_s.append(i)
            pos_q.append(root.get(ix, none))
            names.append(info.name)
            ups.append(info.up)
            ifx.append(ix)
        self.names, self.ups, self.ifindex = tuple(names), tuple(ups), tuple(ifx)
        self.get_tx = _picker(pos_s)
        self.get_bl = _picker(pos_q)


class StatsReader:
    """All interfaces' egress byte counters in one RTM_GETSTATS dump (``IFLA_STATS_LINK_64``
    only) and all root-qdisc backlogs in one RTM_GETQDISC dump per sample; no per-interface
    request, no /proc.

    Link state (name, admin/oper up, carrier) does not change every sample: it comes from
    RTNLGRP_LINK notifications (so a link going down is seen at once, on the
    :class:`glbd.io.netlink.NetlinkSocket` event socket), from a link dump at start, after
    a notification overrun, and every ``link_refresh_s`` (5 s) as a safety net (a link dump
    of 129 interfaces parsed in Python costs ~3 ms: 0.3 % of a core at one per second).

    Cost (issue #8: 128 interfaces every 10 ms in < 10 % of a core): the dumps come back with
    the same layout every sample, so each datagram is read by a
    :class:`glbd.codec.netlink.columns.DumpColumns` -- one ``unpack_from`` of a Struct compiled for
    that layout, checked against it, a full attribute walk only when it changed -- and joined
    to the link table by a :class:`_Plan` (C-level gathers) that is rebuilt only when a link
    event or the dump order changes it. No per-interface Python code runs in the reader per
    sample. The socket is non-blocking; a dump that is not ready yet is awaited."""

    def __init__(
        self,
        nl: NetlinkSocket | socket.socket | None = None,
        *,
        link_refresh_s: float = 5.0,
    ) -> None:
        """Prefer ``await StatsReader.open(netns=...)``. ``StatsReader(nl)`` with a
        :class:`~glbd.io.netlink.NetlinkSocket` still works (compatibility): it reads
        link state and counters with one ``dump_select`` link dump per sample instead (about
        5x the CPU of the lean path)."""
        from glbd.codec.netlink.columns import DumpColumns
        from glbd.io.rtnl import qdisc_backlog_fields, stats_tx_fields

        self._compat: NetlinkSocket | None = None
        self._sock: socket.socket | None = None
        if isinstance(nl, socket.socket):
            self._sock = nl
        elif nl is not None:
            self._compat = nl
        self._seq = 1
        self._buf = bytearray(1 << 17)  # a dump datagram: ~32 KB (more if min_dump_alloc says so)
        self._links: dict[int, _LinkInfo] = {}
        self._links_ver = 0
        self._link_refresh_s = link_refresh_s
        self._links_at: float | None = None
        self._events: NetlinkSocket | None = None
        self._stats_cols = DumpColumns(RTM_NEWSTATS, "IQ", stats_tx_fields)
        self._qdisc_cols = DumpColumns(36, "iII", qdisc_backlog_fields)
        self._plan: _Plan | None = None
        # the two per-sample requests (the seq is patched in per dump)
        mask = 1 << (IFLA_STATS_LINK_64 - 1)
        self._stats_req = bytearray(
            _REQ_STATS.pack(_REQ_STATS.size, RTM_GETSTATS, _DUMP, 0, 0, 0, 0, mask)
        )
        self._qdisc_req = bytearray(
            _REQ_QDISC.pack(_REQ_QDISC.size, 38, _DUMP, 0, 0, 0, 0, 0, 0, 0)
        )
        self.dumps = 0
        self.link_dumps = 0
        self.link_events = 0

    @classmethod
    async def open(cls, *, netns: str | None = None, link_refresh_s: float = 5.0) -> StatsReader:
        """Open the stats socket and the link-event socket (in ``netns`` if given)."""
        from glbd.codec.netlink import const as c
        from glbd.io.netlink import NetlinkSocket
        from glbd.io.netns import in_netns

        with in_netns(netns):
            sock = socket.socket(
                socket.AF_NETLINK,
                socket.SOCK_RAW | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC,
                socket.NETLINK_ROUTE,
            )
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            sock.setsockopt(c.SOL_NETLINK, c.NETLINK_GET_STRICT_CHK, 1)
            sock.bind((0, 0))
        except BaseException:
            sock.close()
            raise
        self = cls(sock, link_refresh_s=link_refresh_s)
        try:
            self._events = await NetlinkSocket.open(
                netns=netns,
                groups=(c.RTNLGRP_LINK,),
                on_event=self._on_link_event,
                on_overrun=self._on_overrun,
            )
        except BaseException:
            sock.close()
            raise
        return self

    def close(self) -> None:
        if self._events is not None:
            self._events.close()
            self._events = None
        if self._sock is not None:
            self._sock.close()

    @property
    def fast_reads(self) -> int:
        """Dump datagrams read through a learned layout (the rest were walked)."""
        return self._stats_cols.fast_reads + self._qdisc_cols.fast_reads

    # --- link state ---------------------------------------------------------------------

    def _on_overrun(self) -> None:
        self._links_at = None  # events were lost: dump again on the next read

    def _set_link(self, index: int, info: _LinkInfo | None) -> None:
        old = self._links.get(index)
        if info is None:
            if old is not None:
                del self._links[index]
                self._links_ver += 1
        elif old != info:
            self._links[index] = info
            self._links_ver += 1

    def _on_link_event(self, msg: Any) -> None:
        from glbd.codec.netlink import const as c
        from glbd.codec.netlink.codec import IfInfoMsg

        h = msg.header
        if not isinstance(h, IfInfoMsg):
            return
        self.link_events += 1
        if msg.type == c.RTM_DELLINK:
            self._set_link(h.index, None)
            return
        if msg.type != c.RTM_NEWLINK:
            return
        am = msg.attr_map()
        name_a = am.get(c.IFLA_IFNAME)
        old = self._links.get(h.index)
        name = name_a.as_str() if name_a is not None else (old.name if old else "")
        op = am.get(c.IFLA_OPERSTATE)
        car = am.get(c.IFLA_CARRIER)
        operstate = op.as_u8() if op is not None else c.IF_OPER_UNKNOWN
        carrier = bool(car.as_u8()) if car is not None else bool(h.flags & c.IFF_LOWER_UP)
        self._set_link(h.index, _LinkInfo(name, self._is_up(h.flags, operstate, carrier)))

    @staticmethod
    def _is_up(flags: int, operstate: int, carrier: bool) -> bool:
        # IFF_UP (0x1), carrier, and operstate UP (6) or UNKNOWN (0, e.g. lo)
        return bool(flags & 0x1) and carrier and operstate in (0, 6)

    def _refresh_links(self) -> Steps[None]:
        rows = yield from self._dump(18, _IFINFO.pack(0, 0, 0, 0, 0) + _ext_mask_skip_stats())
        self.link_dumps += 1
        links: dict[int, _LinkInfo] = {}
        for typ, data in rows:
            if typ != 16 or len(data) < _IFINFO.size:
                continue
            _fam, _t, index, flags, _ch = _IFINFO.unpack_from(data, 0)
            name = ""
            operstate = 0
            carrier = bool(flags & 0x10000)
            for at, st, en in _attrs(data, _IFINFO.size, len(data)):
                if at == 3:
                    name = data[st:en].split(b"\0", 1)[0].decode("utf-8", "replace")
                elif at == 16 and en > st:
                    operstate = data[st]
                elif at == 33 and en > st:
                    carrier = bool(data[st])
            links[index] = _LinkInfo(name, self._is_up(flags, operstate, carrier))
        if links != self._links:
            self._links = links
            self._links_ver += 1

    # --- dumps --------------------------------------------------------------------------
    #
    # The reads are generators that yield only when the socket has nothing queued yet; the
    # kernel fills a dump's replies inside send() and recv(), so in practice they run to the
    # end at once and MonitorRunner needs no task, future or extra loop turn per sample.
    # read_columns() / finish() drive them on the event loop, awaiting readability.

    def _next_seq(self) -> int:
        # 1..250: small ints (no allocation when a datagram's 129 seq fields are unpacked);
        # plenty to tell this dump's replies from a previous, abandoned one
        self._seq = self._seq % 250 + 1
        return self._seq

    def _recv(self) -> Steps[int]:
        sock = self._sock
        assert sock is not None
        while True:
            try:
                return sock.recv_into(self._buf)
            except BlockingIOError:
                yield

    def _dump(self, msg_type: int, body: bytes) -> Steps[list[tuple[int, bytes]]]:
        """One dump request; returns (type, body) of every reply message (restarts once on
        NLM_F_DUMP_INTR). Raises OSError on a kernel error. (Link refresh: once a second.)"""
        sock = self._sock
        assert sock is not None
        rows: list[tuple[int, bytes]] = []
        for _attempt in range(3):
            seq = self._next_seq()
            sock.send(_NLHDR.pack(16 + len(body), msg_type, _DUMP, seq, 0) + body)
            rows = []
            intr = False
            done = False
            try:
                while not done:
                    n = yield from self._recv()
                    data = bytes(self._buf[:n])
                    off = 0
                    while off + 16 <= n:
                        ln, typ, flags, rseq, _pid = _NLHDR.unpack_from(data, off)
                        if ln < 16:
                            break
                        if rseq == seq:
                            if flags & 0x10:
                                intr = True
                            if typ == 3:  # NLMSG_DONE
                                done = True
                                break
                            if typ == 2:  # NLMSG_ERROR
                                err = -struct.unpack_from("=i", data, off + 16)[0]
                                if err:
                                    raise OSError(err, os.strerror(err))
                                done = True
                                break
                            rows.append((typ, data[off + 16 : off + ln]))
                        off += (ln + 3) & ~3
            except Exception:
                self._drain()
                raise
            if not intr:
                return rows
        return rows

    def _dump_columns(
        self, cols: DumpColumns, req: bytearray
    ) -> Steps[tuple[tuple[int, ...], ...]]:
        """One periodic dump read as columns (restarts on NLM_F_DUMP_INTR). Raises OSError on
        a kernel error; after any error the rest of the dump is drained."""
        sock = self._sock
        assert sock is not None
        buf = self._buf
        out: tuple[tuple[int, ...], ...] = ()
        for _attempt in range(3):
            seq = self._next_seq()
            _U32.pack_into(req, 8, seq)  # nlmsg_seq
            sock.send(req)
            out = ()
            intr = False
            part = 0
            try:
                while True:
                    try:
                        n = sock.recv_into(buf)
                    except BlockingIOError:
                        yield  # nothing queued yet (the rare case): wait for the socket
                        continue
                    ch = cols.read(buf, n, seq, part)
                    part += 1
                    if ch.error:
                        raise OSError(ch.error, os.strerror(ch.error))
                    intr = intr or ch.intr
                    if out:  # a dump longer than one datagram
                        out = tuple(a + b for a, b in zip(out, ch.cols, strict=True))
                    else:
                        out = ch.cols
                    if ch.done:
                        break
            except Exception:
                self._drain()
                raise
            if not intr:
                return out
        return out

    def drain(self) -> None:
        """Drop the rest of an abandoned dump (see :meth:`_drain`)."""
        if self._sock is not None:
            self._drain()

    def _drain(self) -> None:
        """Read and drop whatever is queued (the kernel refills a running dump on each read)."""
        assert self._sock is not None
        for _ in range(1000):
            try:
                self._sock.recv_into(self._buf)
            except OSError:  # BlockingIOError: empty
                return

    async def _readable(self, loop: asyncio.AbstractEventLoop) -> None:
        fut: asyncio.Future[None] = loop.create_future()
        assert self._sock is not None
        fd = self._sock.fileno()

        def ready() -> None:
            if not fut.done():
                fut.set_result(None)

        loop.add_reader(fd, ready)
        try:
            await fut
        finally:
            loop.remove_reader(fd)

    @property
    def can_step(self) -> bool:
        """Whether :meth:`read_steps` works (not for the compatibility ``StatsReader(nl)``)."""
        return self._sock is not None

    def read_steps(self, ifnames: Iterable[str] | None, now: float) -> Steps[Columns]:
        """:meth:`read_columns` as a generator that yields only while the socket has nothing
        queued yet (hand it to :meth:`finish` then); ``now`` is the loop's clock."""
        if self._links_at is None or now - self._links_at >= self._link_refresh_s:
            self._links_at = now
            try:
                yield from self._refresh_links()
            except BaseException:
                self._links_at = None  # failed: again on the next sample, not in 5 s
                raise
        idx_s, tx = yield from self._dump_columns(self._stats_cols, self._stats_req)
        idx_q, parent, backlog = yield from self._dump_columns(self._qdisc_cols, self._qdisc_req)
        self.dumps += 2
        p = self._plan
        if (
            p is None
            or p.ver != self._links_ver
            or (p.want is not ifnames and p.want != _as_set(ifnames))
            or p.idx_s != idx_s
            or p.idx_q != idx_q
            or p.parent != parent
        ):
            p = self._plan = _Plan(
                self._links_ver, _as_set(ifnames), idx_s, idx_q, parent, self._links
            )
        return Columns(p.names, p.ups, p.get_tx(tx), p.get_bl((*backlog, 0)), p.ifindex)

    def foreign_steps(self, parents: frozenset[int]) -> Steps[dict[int, int]]:
        """One RTM_GETQDISC dump read for :func:`foreign_bytes` (a generator like
        :meth:`read_steps`; hand it to :meth:`finish` if it yields)."""
        rows = yield from self._dump(RTM_GETQDISC, _TCMSG.pack(0, 0, 0, 0, 0))
        self.dumps += 1
        return foreign_bytes(rows, parents)

    async def finish(self, steps: Steps[_T], *, started: bool = True) -> _T:
        """Run a :meth:`read_steps` (or :meth:`foreign_steps`) generator to its end on the
        event loop (``started``: it has already yielded once, i.e. it is waiting for the
        socket)."""
        loop = asyncio.get_running_loop()
        if started:
            await self._readable(loop)
        while True:
            try:
                next(steps)
            except StopIteration as stop:
                result: _T = stop.value
                return result
            await self._readable(loop)

    async def read(self, ifnames: Iterable[str] | None = None) -> list[LinkSample]:
        """One sample of every interface (only ``ifnames`` if given) that the kernel lists."""
        cols = await self.read_columns(ifnames)
        return list(map(LinkSample, *cols))

    async def read_columns(self, ifnames: Iterable[str] | None = None) -> Columns:
        """:meth:`read` as :class:`Columns`. Pass the same frozenset every time (e.g.
        :attr:`LinkMonitor.interface_set`) and the join is reused from sample to sample."""
        if self._compat is not None:
            samples = await self._read_compat(self._compat, ifnames)
            cols = tuple(zip(*samples, strict=True))
            return Columns(*cols) if cols else _NO_COLUMNS
        loop = asyncio.get_running_loop()
        return await self.finish(self.read_steps(ifnames, loop.time()), started=False)

    async def _read_compat(
        self, nl: NetlinkSocket, ifnames: Iterable[str] | None
    ) -> list[LinkSample]:
        from glbd.codec.netlink import const as c
        from glbd.codec.netlink.codec import IfInfoMsg, TcMsg
        from glbd.io.rtnl import (
            LINK_WANT,
            QDISC_WANT,
            link_dump,
            link_state,
            qdisc_dump,
            qdisc_queue,
        )

        want = None if ifnames is None else set(ifnames)
        links = await nl.dump_select(link_dump(), IfInfoMsg, LINK_WANT)
        qdiscs = await nl.dump_select(qdisc_dump(), TcMsg, QDISC_WANT)
        self.dumps += 2
        backlog: dict[int, int] = {}
        for row in qdiscs:
            q = qdisc_queue(row)
            if q.parent == TC_H_ROOT:
                backlog[q.ifindex] = q.backlog
        out = []
        for row in links:
            st = link_state(row)
            if want is not None and st.name not in want:
                continue
            up = st.up and st.operstate in (c.IF_OPER_UP, c.IF_OPER_UNKNOWN)
            out.append(LinkSample(st.name, up, st.tx_bytes, backlog.get(st.ifindex, 0), st.ifindex))
        return out


def _ext_mask_skip_stats() -> bytes:
    # IFLA_EXT_MASK (29) = RTEXT_FILTER_SKIP_STATS (1 << 3): link dumps without counters
    return _ATTR.pack(8, 29) + _U32.pack(1 << 3)


def _as_set(ifnames: Iterable[str] | None) -> frozenset[str] | None:
    if ifnames is None or isinstance(ifnames, frozenset):
        return ifnames
    return frozenset(ifnames)


class MonitorRunner:
    """Samples every ``params.sample_interval_s`` (on the loop's clock, without drift) and
    calls ``on_update(changes, monitor)`` after every sample; ``changes`` may be empty (the
    raw figures moved). A failed dump is logged and counted; the next tick tries again.

    Each tick is a plain ``loop.call_at`` callback that runs the reader's
    :meth:`StatsReader.read_steps` to its end (it does not wait: the kernel answers a dump
    inside send/recv), then the core. Only if the socket had nothing queued yet does the rest
    of that sample continue in a task that awaits it. (A task sleeping 10 ms costs an extra
    future, task step and loop turn per sample: about 0.5 % of a core at 100 samples/s.)"""

    def __init__(
        self,
        monitor: LinkMonitor,
        reader: StatsReader,
        on_update: Callable[[list[QualityChanged], LinkMonitor], None],
    ) -> None:
        self.monitor = monitor
        self._reader = reader
        self._on_update = on_update
        self._handle: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self._next = 0.0
        self._running = False
        self.errors = 0
        self.samples = 0
        self.overruns = 0
        self.waits = 0  # samples that had to wait for the socket (continued in a task)
        self.foreign_skipped = 0  # foreign-class readings dropped (socket not ready at once)

    def start(self) -> None:
        if not self._running:
            self._running = True
            loop = asyncio.get_running_loop()
            self._next = loop.time()
            self._handle = loop.call_at(self._next, self._tick)

    async def stop(self) -> None:
        self._running = False
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _tick(self) -> None:
        self._handle = None
        loop = asyncio.get_running_loop()
        reader = self._reader
        try:
            if not reader.can_step:
                self._task = loop.create_task(self._sample_async(None), name="linkmon")
                return
            steps = reader.read_steps(self.monitor.interface_set, loop.time())
            try:
                next(steps)
            except StopIteration as done:
                self._sampled(done.value, loop)
            else:  # the socket had nothing queued yet: finish this sample in a task
                self.waits += 1
                self._task = loop.create_task(self._sample_async(steps), name="linkmon")
                return
        except Exception as e:
            self.errors += 1
            log.warning("link stats dump failed", error=str(e))
        self._arm(loop)

    async def _sample_async(self, steps: Steps[Columns] | None) -> None:
        loop = asyncio.get_running_loop()
        try:
            if steps is None:
                cols = await self._reader.read_columns(self.monitor.interface_set)
            else:
                cols = await self._reader.finish(steps)
            self._sampled(cols, loop)
        except asyncio.CancelledError:
            if steps is not None:
                steps.close()
            raise
        except Exception as e:
            self.errors += 1
            log.warning("link stats dump failed", error=str(e))
        self._task = None
        self._arm(loop)

    def _sampled(self, cols: Columns, loop: asyncio.AbstractEventLoop) -> None:
        mon = self.monitor
        changes = mon.on_columns(cols, loop.time())
        self.samples += 1
        p = mon.params
        if p.foreign_classes and self.samples % p.foreign_every == 0 and self._reader.can_step:
            more = self._read_foreign(p.foreign_classes, loop)
            if more:
                seen = {ch.quality.ifname for ch in changes}
                changes = changes + [ch for ch in more if ch.quality.ifname not in seen]
        self._on_update(changes, mon)

    def _read_foreign(
        self, parents: frozenset[int], loop: asyncio.AbstractEventLoop
    ) -> list[QualityChanged]:
        """The foreign classes' counters (one more qdisc dump), fed to the core before this
        sample's update is handed on, so the heartbeat built from it carries the residual. Its
        changes (reason "residual") join the sample's."""
        try:
            steps = self._reader.foreign_steps(parents)
            try:
                next(steps)
            except StopIteration as done:
                return self.monitor.on_foreign(done.value, loop.time())
            steps.close()  # not ready at once (rare): skip this reading, not the sample
            self._reader.drain()
            self.foreign_skipped += 1
        except Exception as e:
            self.errors += 1
            log.warning("foreign class dump failed", error=str(e))
        return []

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self._running:
            return
        step = self.monitor.params.sample_interval_s
        self._next += step
        now = loop.time()
        if self._next < now:  # fell behind (loop busy): skip ticks instead of bursting
            self.overruns += 1
            self._next = now + step
        self._handle = loop.call_at(self._next, self._tick)
