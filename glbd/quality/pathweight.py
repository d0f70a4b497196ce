"""Path-quality weight functions (pure): a profile's next-hop weights from its inputs.

Apart from the table (:mod:`glbd.quality.pathtable`, which owns the inputs, the profiles and their
index and decides *which* profiles to recompute) because this is the quality model itself:
documented functions of the inputs and the profile's remembered state, nothing else (see
docs/heartbeat.md §7).

Weight of next hop *n* in a profile:

1. *local*: the band of n's interface (None = not measured).
2. *remote* (only when this node consumes heartbeats): for each NNH *s* of n, the aggregate of
   the helper's links to s. Parallel links stay distinct entries; the aggregate's quality is the
   capacity-weighted mean band of the links that are up, its usable capacity the sum of their
   capacities, and it is *down* when none is up. Several NNHs make a compound: the
   capacity-weighted mean quality and the summed usable capacity of the NNHs that are not down
   (the helper spreads over them). NNHs without an entry are ignored while at least one is
   known.
3. source and combined quality ``q`` (0..7, float):

   * ``glb``: remote known: ``q = combine(local, remote)``, default the bottleneck
     ``min(local, remote)`` (``"mean"`` is the alternative); remote down (every NNH down) gives
     weight 0 for the profiles behind it;
   * ``dlb``: remote unknown (no NNHN, invalid NNHN, no or expired heartbeat, NNH not
     reported, or load-balancer role off): DLB-style local fallback, ``q = local``; a locally down
     link gives weight 0;
   * ``static``: neither local nor remote known: ``q = 7`` (capacity/equal split).

4. *capacity* (WCMP): ``min(local capacity, n's share of the remote usable capacity)``, where
   the share divides the helper's usable capacity among the profile's next hops through that same
   helper in proportion to their local capacity (parallel local links must not count the
   helper's downstream capacity twice). With ``capacity_aware=False`` every capacity is 1.
5. ``raw = capacity x table(q)``; ``table`` is monotone, by default
   ``(1, 2, 3, 5, 8, 12, 18, 27)`` for q = 0..7 (roughly x1.5 per band; 27:1 between an idle
   and a saturated link, about the spare-capacity ratio of a <20 % and a >90 % loaded link),
   linearly interpolated for fractional q.
6. *memory* (``memory=True``, default): a per-profile controller state ``m`` in (0, 1] per next
   hop, stepped once per recompute (i.e. per change of an input the profile depends on, or per
   batch of them: the heartbeats read in one event-loop turn are one batch; band changes are
   already rate-limited by the monitor's hysteresis), deterministic, no clock.
   With ``r = raw / max(raw)`` and remote quality ``rq``: ``rq = 7`` (idle downstream) releases
   ``m`` to 1; ``rq >= memory_release_q`` (6: headroom) adds ``memory_increase`` (0.25); if
   ``r < m`` and ``r < memory_attack_below`` (0.5, a dead zone of about two bands) ``m`` falls to
   ``max(r, m x memory_decrease)`` (0.5); then the memories are scaled so the largest is 1.
   DLB, static and down next hops hold nothing (``m = 1``). The weight uses
   ``min(raw, m x max(raw))``: a remote link that was clearly worse than its alternatives keeps
   its low weight after moving traffic away has made the bands equal again (they flatten once
   every downlink is busy), until that link itself shows headroom. At fixed ``m`` the weight is
   still monotone in q.
7. per profile, weights are ``max(1, round(eff / max(eff) x max_weight))`` and 0 where raw is 0
   (``eff`` = raw after the memory). **Never all zero**: when every raw is 0, every next hop gets
   weight 1 (``guard`` in inputs).

Steps 1-5 of one next hop (a *row*) are written out inside the row loop of ``_build_rows``, not
in a per-row function: that loop is the per-profile hot path and a call per next hop would cost
every recompute (``bench/quality_bench.py``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from glbd.base.reasons import QualitySource, RemoteStatus
from glbd.quality.pathmodel import MAX_Q, LocalLink, PathTableParams, WeightInputs
from glbd.quality.pathprofile import Profile

__all__ = ["Agg", "aggregate", "compute_weights"]


class Agg(NamedTuple):
    """A helper's links to one far end, aggregated (step 2)."""

    quality: float  # capacity-weighted mean band of the up links (0 if none)
    usable: float  # Mbit/s up
    total: float
    down: bool
    links: int
    up: int


def aggregate(links: Iterable[tuple[int, bool, float]]) -> Agg:
    """The aggregate of (band, down, capacity) links."""
    n = up = 0
    usable = total = qsum = 0.0
    for band, down, cap in links:
        n += 1
        c = max(float(cap), 1e-9)
        total += c
        if not down:
            up += 1
            usable += c
            qsum += band * c
    return Agg(qsum / usable if usable else 0.0, usable, total, up == 0, n, up)


def compute_weights(
    p: PathTableParams,
    prof: Profile,
    local: Mapping[str, LocalLink],
    remote: Mapping[int, Any],
    agg: Mapping[tuple[int, int], Agg],
    epoch: int,
    *,
    step: bool = True,
    bids: Iterable[int] | None = None,
) -> tuple[bool, int]:
    """Steps 1-7 for one profile: (a weight value or source changed, rows looked at).

    ``local``, ``remote``, ``agg`` and ``epoch`` are the table's local links by interface,
    remote snapshots by helper, aggregates by (helper, NNH) and local epoch. ``bids``: only
    these helpers' remote inputs changed since the last call, so only their rows are looked at
    (the rest and the local inputs are as the rows remember them). ``step``: step the memory."""
    prof.recomputes += 1
    todo: Sequence[int]
    if bids is not None and prof.local_epoch == epoch:
        by_bid = prof.by_bid
        todo = [i for b in bids for i in by_bid.get(b, ())]
    else:
        _take_local(prof, local, epoch)
        todo = range(len(prof.items))
    _build_rows(p, prof, todo, remote, agg)
    return _settle(p, prof, step), len(todo)


def _take_local(prof: Profile, local: Mapping[str, LocalLink], epoch: int) -> None:
    """Remember the local inputs of every row: its local link and each helper's capacity."""
    items = prof.items
    prof.locs = [local.get(nh.ifname) if nh.ifname is not None else None for nh, _ in items]
    # local capacity per helper, for sharing its downstream capacity among parallel NHs
    spine_cap: dict[int, float] = {}
    for (nh, _), loc in zip(items, prof.locs, strict=True):
        if loc is not None and not loc.down:
            spine_cap[nh.bgp_id] = spine_cap.get(nh.bgp_id, 0.0) + loc.capacity_mbps
    prof.spine_cap = spine_cap
    prof.local_epoch = epoch


def _build_rows(
    p: PathTableParams,
    prof: Profile,
    todo: Iterable[int],
    remote: Mapping[int, Any],
    agg: Mapping[tuple[int, int], Agg],
) -> None:
    """Steps 1-5 for the rows ``todo`` whose inputs changed: their row, raw and remote
    quality, in place in ``prof``."""
    table = p.weight_table
    bottleneck = p.combine == "bottleneck"
    cap_aware = p.capacity_aware
    remote_of = _remote_of
    consume = p.role.load_balancer
    items = prof.items
    cache = prof.rows
    raws = prof.raws
    rqs = prof.rqs
    locs = prof.locs
    caps = prof.spine_cap
    for i in todo:
        # A row is a pure function of these inputs (and of the parameters, which clear
        # the cache): the local link, the helper's capacity share, whether the helper's
        # heartbeats are known and the aggregates of the NNHs. Agg and LocalLink are
        # immutable and replaced on change, so unchanged inputs compare equal cheaply.
        nh, nnh = items[i]
        loc = locs[i]
        bid = nh.bgp_id
        if nnh is not None and len(nnh) == 1:
            rkey: Any = agg.get((bid, nnh[0]))
        elif nnh:
            rkey = tuple([agg.get((bid, x)) for x in nnh])
        else:
            rkey = None
        sig = (loc, caps.get(bid), bid in remote, rkey)
        hit = cache[i]
        if hit is not None and hit[0] == sig:
            continue
        status, rq, rcap, rdown = remote_of(agg, remote, bid, nnh, consume)
        if loc is None:
            lband = lcap = None
            ldown = False
        else:
            ldown = loc.down
            lband = 0 if ldown else loc.band
            lcap = loc.capacity_mbps
        if rq is not None:
            source = QualitySource.GLB
            if lband is None:
                q = rq
            elif bottleneck:
                q = lband if lband < rq else rq
            else:
                q = (lband + rq) / 2.0
        elif lband is not None:
            source, q = QualitySource.DLB, float(lband)
        else:
            source, q = QualitySource.STATIC, MAX_Q
        if not cap_aware:
            cap = 1.0
        elif rcap is not None:
            if lcap is not None:
                tot = caps.get(bid, 0.0)
                share = rcap * (lcap / tot) if tot > 0 else rcap
                cap = lcap if lcap < share else share
            else:
                cap = rcap
        else:
            cap = 1.0 if lcap is None else lcap
        raw = 0.0 if (ldown or rdown) else cap * _interp(table, q)
        wi = WeightInputs(lband, ldown, lcap, rq, rdown, rcap, status, nnh, q, cap, raw)
        cache[i] = (sig, (source, wi))
        raws[i] = raw
        rqs[i] = rq if raw > 0.0 else None  # the rows the controller steps


def _settle(p: PathTableParams, prof: Profile, step: bool) -> bool:
    """Steps 6-7 from the rows' raws: the weight values; True when a value or source changed."""
    raws = prof.raws
    top = max(raws)
    if top <= 0.0:
        vals = [1] * len(prof.items)
        guard = True
    else:
        guard = False
        mem = prof.mem
        eff = raws
        if p.memory:
            if step:
                _step_memory(p, mem, raws, prof.rqs, top)
            eff = [r if m >= 1.0 else min(r, m * top) for m, r in zip(mem, raws, strict=True)]
        scale = p.max_weight / max(eff)
        vals = [(round(r * scale) or 1) if r > 0 else 0 for r in eff]
    srcs = [c[1][0] for c in prof.rows if c is not None]
    changed = vals != prof.vals or srcs != prof.srcs
    prof.vals, prof.srcs, prof.guard = vals, srcs, guard
    prof.wcache = None
    return changed


def _remote_of(
    agg: Mapping[tuple[int, int], Agg],
    remote: Mapping[int, Any],
    bgp_id: int,
    nnh: tuple[int, ...] | None,
    consume: bool,
) -> tuple[RemoteStatus, float | None, float | None, bool]:
    """(status, quality, usable capacity, down) of a next hop's compound remote part."""
    if not consume:
        return RemoteStatus.NOT_LOAD_BALANCER, None, None, False
    if not nnh:
        return RemoteStatus.NNHN_MISSING, None, None, False
    if bgp_id not in remote:
        return RemoteStatus.NO_HEARTBEAT, None, None, False
    if len(nnh) == 1:  # the 3-stage case, fast
        a = agg.get((bgp_id, nnh[0]))
        if a is None:
            return RemoteStatus.NNH_NOT_REPORTED, None, None, False
        if a.down:
            return RemoteStatus.DOWN, 0.0, 0.0, True
        return RemoteStatus.OK, a.quality, a.usable, False
    known = [a for s in nnh if (a := agg.get((bgp_id, s))) is not None]
    if not known:
        return RemoteStatus.NNH_NOT_REPORTED, None, None, False
    live = [a for a in known if not a.down]
    if not live:
        if len(known) == len(nnh):
            return RemoteStatus.DOWN, 0.0, 0.0, True
        return (
            RemoteStatus.NNH_NOT_REPORTED,
            None,
            None,
            False,
        )  # known ones down, others unknown
    usable = sum(a.usable for a in live)
    q = sum(a.quality * a.usable for a in live) / usable if usable else 0.0
    return RemoteStatus.OK, q, usable, False


def _step_memory(
    p: PathTableParams, mem: list[float], raws: list[float], rqs: list[float | None], top: float
) -> None:
    """One step of the weight controller (function 6 in the module docstring), in place.

    ``rqs``: the remote quality of each GLB next hop with a raw above 0, None for the others.
    For each GLB next hop with ratio ``r = raw / top`` and remote quality ``rq``:
    ``rq = 7`` (idle downstream) releases the memory to 1; ``rq >= memory_release_q`` adds
    ``memory_increase`` (the remote link has headroom); then, if ``r`` is below the memory and
    below ``memory_attack_below`` (dead zone), the memory falls toward ``r``, by at most the
    factor ``memory_decrease`` per step. Other next hops (DLB,
    static, down) hold nothing. Finally the memories are scaled so the largest is 1 (only
    ratios matter, so a penalty everybody shares cancels out)."""
    dec, inc, rel = p.memory_decrease, p.memory_increase, p.memory_release_q
    below = p.memory_attack_below
    top_mem = 0.0
    for i, rq in enumerate(rqs):
        if rq is None:
            mem[i] = 1.0
            continue
        m = mem[i]
        if rq >= MAX_Q:
            m = 1.0
        elif rq >= rel:
            m = min(1.0, m + inc)
        r = raws[i] / top
        if r < m and r < below:
            m = max(r, m * dec)
        mem[i] = m
        if m > top_mem:
            top_mem = m
    if 0.0 < top_mem < 1.0:
        for i, rq in enumerate(rqs):
            if rq is not None:
                mem[i] = min(1.0, mem[i] / top_mem)


def _interp(table: tuple[int, ...], q: float) -> float:
    q = min(MAX_Q, max(0.0, q))
    lo = math.floor(q)
    if lo >= 7:
        return float(table[7])
    f = q - lo
    return table[lo] + f * (table[lo + 1] - table[lo])
