"""Scenarios over :mod:`bench.scale.sim`: steady-state cost, memory, settle after a degradation."""

from __future__ import annotations

import gc
import os
import statistics
import time
from dataclasses import dataclass, field, replace
from typing import Any

from heartbeat import wire
from heartbeat.sender import Sender

from .sim import (
    GOOD_BAND,
    Node,
    Sim,
    SimConfig,
    clone,
    deep_size,
    replay_cpu,
    rss_bytes,
    shared_ids,
)


@dataclass
class Degradation:
    name: str
    spine: Node
    entry: int  # index in the spine's entries
    #: (leaf name, prefix) pairs whose weights must change: the spine's weight goes down
    expect: set[tuple[str, str]]
    on_change: bool = True
    settle_s: float | None = None
    changed: set[tuple[str, str]] = field(default_factory=set)
    leaves_changed: int = 0
    ok: bool = False
    detail: str = ""
    min_ratio: float = 0.0  # degraded weight / other weights (max over affected profiles)


@dataclass
class Result:
    cfg: SimConfig
    numbers: dict[str, Any] = field(default_factory=dict)
    degradations: list[Degradation] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(d.ok for d in self.degradations)


def _pct(x: float) -> float:
    return round(100.0 * x, 3)


def run(cfg: SimConfig, *, measure: bool = True, log: Any = None) -> Result:
    """Build the fabric, converge BGP, run heartbeats, measure, degrade links, check."""

    def say(msg: str) -> None:
        if log is not None:
            log(msg)

    res = Result(cfg)
    num = res.numbers
    gc.collect()
    rss0 = rss_bytes()
    t_wall0 = time.perf_counter()
    t_cpu0 = time.process_time()
    sim = Sim(cfg)
    fab = sim.fab
    num["leaves"] = len(fab.leaves)
    num["spines"] = len(fab.spines)
    num["supers"] = len(fab.supers)
    num["links"] = sum(len(n.ports) for n in fab.nodes) // 2
    sim.build_heartbeats()
    # heartbeats start with the sessions, before the routes: every leaf's first snapshot of each
    # spine lands in an empty table (into a full one it recomputes every profile; measured below)
    iv = cfg.interval_s
    sim.start_heartbeats(0.0)
    t = 4 * iv
    sim.loop.run_until(t)
    say(
        f"  fabric: {num['leaves']} leaves, {num['spines']} spines, {num['supers']} super-spines,"
        f" {num['links']} links; converging BGP ({cfg.rib} RIB mesh)..."
    )
    sim.build_bgp()
    num["bgp_build_s"] = round(sim.timings["bgp_build_s"], 2)
    num["bgp_messages"] = sim.bgp_messages
    num["rib_mode"] = cfg.rib
    num["rib_real_leaves"] = sum(1 for lf in fab.leaves if lf.rib_real_in)
    num["rib_checks"] = sim.rib_checks
    lf0 = fab.leaves[0]
    assert lf0.table is not None
    num["profiles_per_leaf"] = len(lf0.table.profiles())
    num["prefixes_per_leaf_table"] = len(lf0.table.prefixes())
    num["next_hops_per_profile"] = max(
        (len(lf0.table.next_hops(k)) for k in lf0.table.profiles()), default=0
    )
    say(
        f"  BGP converged in {num['bgp_build_s']} s wall ({sim.bgp_messages} UPDATEs); leaf 0:"
        f" {num['prefixes_per_leaf_table']} prefixes, {num['profiles_per_leaf']} profiles"
    )

    t += 2 * iv
    sim.loop.run_until(t)
    missing = [lf.name for lf in fab.leaves if lf.rx is not None and lf.rx.accepted == 0]
    if missing:
        raise AssertionError(f"leaves without heartbeats after warm-up: {missing[:5]}")

    # --- steady window: per-node cost --------------------------------------------------------
    if measure and cfg.steady_s > 0:
        for n in fab.nodes:
            n.cpu_rx = n.cpu_tx = 0.0
            n.datagrams = 0
        probe = [fab.leaves[0], fab.leaves[-1]]
        sim.recording = {lf.name: [] for lf in probe}
        copies = {lf.name: (clone(lf.rx), clone(lf.table)) for lf in probe}
        sp0 = fab.spines[0]
        sender_copy: Sender = clone(sp0.sender)
        t_start = t
        # churn: each spine changes one random link's band (7 <-> 6) this often
        if cfg.churn_per_spine_s > 0:
            for sp in fab.spines:
                k = 0.0
                while True:
                    k += sim.rng.expovariate(cfg.churn_per_spine_s)
                    if k >= cfg.steady_s:
                        break
                    i = sim.rng.randrange(len(sp.entries))
                    band = 6 if sp.entries[i].band == GOOD_BAND else GOOD_BAND
                    sim.loop.at(t_start + k, sim.set_band, sp, i, band)
        w0, c0 = time.perf_counter(), time.process_time()
        t = t_start + cfg.steady_s
        sim.loop.run_until(t)
        w1, c1 = time.perf_counter(), time.process_time()
        rec = sim.recording
        sim.recording = None
        num["sim_wall_per_sim_s"] = round((w1 - w0) / cfg.steady_s, 3)
        num["sim_cpu_per_sim_s"] = round((c1 - c0) / cfg.steady_s, 3)
        leaf_cost = [lf.cpu_rx / cfg.steady_s for lf in fab.leaves]
        spine_cost = [sp.cpu_tx / cfg.steady_s for sp in fab.spines]
        num["leaf_datagrams_per_s"] = round(
            statistics.median(lf.datagrams for lf in fab.leaves) / cfg.steady_s
        )
        num["leaf_pct_core_insim_median"] = _pct(statistics.median(leaf_cost))
        num["leaf_pct_core_insim_max"] = _pct(max(leaf_cost))
        num["spine_pct_core_insim_median"] = _pct(statistics.median(spine_cost))
        num["spine_pct_core_insim_max"] = _pct(max(spine_cost))
        # replay: process CPU of a copy of the leaf's cores over its exact datagram stream
        rp = []
        dec = []
        for lf in probe:
            rx, table = copies[lf.name]
            stream = rec[lf.name]
            rp.append(replay_cpu(lf, stream, rx, table) / cfg.steady_s)
            t0 = time.process_time()
            for _now, data, _ifn, _src in stream:
                wire.decode(data)
            dec.append((time.process_time() - t0) / cfg.steady_s)
        num["leaf_pct_core_replay"] = _pct(max(rp))
        num["leaf_decode_only_pct_core"] = _pct(max(dec))
        num["leaf_ratio_to_decode"] = round(max(rp) / max(max(dec), 1e-9), 2)
        # one spine's snapshot expiring / appearing at a leaf with every profile present
        rx, table = clone(probe[0].rx), clone(probe[0].table)
        sid = fab.spines[0].rid_int
        entries = rx.remote(sid)
        gc.collect()
        c0 = time.process_time()
        table.set_remote(sid, None)
        c1 = time.process_time()
        table.set_remote(sid, entries)
        c2 = time.process_time()
        num["leaf_spine_expiry_ms"] = round((c1 - c0) * 1e3, 2)
        num["leaf_spine_new_ms"] = round((c2 - c1) * 1e3, 2)
        # a spine's sender: periodic sends for the same window, process CPU
        gc.collect()
        n_ticks = round(cfg.steady_s / iv)
        base = sender_copy.next_deadline() or t_start
        c0 = time.process_time()
        for i in range(n_ticks):
            sender_copy.on_timer(base + i * iv)
        num["spine_pct_core_replay"] = _pct((time.process_time() - c0) / cfg.steady_s)
        num["spine_entries"] = len(sp0.entries)
        num["spine_datagram_bytes"] = len(
            wire.Heartbeat(sp0.rid_int, 1, 20000, sp0.entries).encode(sender_copy.params.key)
        )
        say(
            f"  steady {cfg.steady_s} s simulated: leaf receiver+table "
            f"{num['leaf_pct_core_replay']} % of a core (replay, process CPU), "
            f"spine sender {num['spine_pct_core_replay']} %"
        )
        # restore every band, let it settle
        for sp in fab.spines:
            for i, e in enumerate(sp.entries):
                if e.band != GOOD_BAND:
                    sim.loop.at(t, sim.set_band, sp, i, GOOD_BAND)
        t += 6 * iv
        sim.loop.run_until(t)

    # --- memory per node ---------------------------------------------------------------------
    if measure:
        excl = shared_ids(sim)
        real = [lf for lf in fab.leaves if lf.rib_real_in][:3]
        num["leaf_bytes"] = round(
            statistics.median(deep_size([lf.rx, lf.table, lf.rib], excl) for lf in real)
        )
        num["leaf_bytes_hb_table"] = round(
            statistics.median(deep_size([lf.rx, lf.table], excl) for lf in real)
        )
        num["spine_bytes"] = round(
            statistics.median(
                deep_size([sp.sender, sp.entries, sp.rib], excl) for sp in fab.spines[:3]
            )
        )
        num["spine_bytes_sender"] = round(
            statistics.median(deep_size([sp.sender, sp.entries], excl) for sp in fab.spines[:3])
        )
        if fab.supers:
            num["super_bytes"] = round(
                statistics.median(deep_size([x.rib], excl) for x in fab.supers[:3])
            )
        gc.collect()
        num["rss_total_mb"] = round((rss_bytes() - rss0) / 2**20, 1)

    # --- degradations ------------------------------------------------------------------------
    for deg in _degradations(sim):
        t = _run_degradation(sim, deg, t)
        res.degradations.append(deg)
        say(
            f"  degrade {deg.name} (on-change {'on' if deg.on_change else 'off'}): settle "
            f"{None if deg.settle_s is None else round(deg.settle_s * 1e3, 2)} ms, "
            f"{deg.leaves_changed} leaves changed, correct={deg.ok} {deg.detail}"
        )

    num["wall_s"] = round(time.perf_counter() - t_wall0, 2)
    num["cpu_s"] = round(time.process_time() - t_cpu0, 2)
    num["loadavg"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return res


def _prefixes(lf: Node) -> set[str]:
    return {str(p) for p in lf.prefixes}


def _degradations(sim: Sim) -> list[Degradation]:
    fab = sim.fab
    cfg = sim.cfg
    out: list[Degradation] = []
    if cfg.stages == 3:
        sp = fab.spines[len(fab.spines) // 3]
        j = fab.leaves[len(fab.leaves) // 2]
        idx = next(i for i, e in enumerate(sp.entries) if e.far_end_id == j.rid_int)
        expect = {(lf.name, p) for lf in fab.leaves if lf is not j for p in _prefixes(j)}
        for oc in (True, False):
            out.append(Degradation(f"{sp.name}->{j.name}", sp, idx, expect, oc))
    else:
        # (a) a pod spine's uplink to one super-spine: compound quality for inter-pod prefixes
        sp = next(s for s in fab.spines if s.pod == 0 and s.plane == 0)
        x = next(n for n in fab.supers if n.plane == 0)
        idx = next(i for i, e in enumerate(sp.entries) if e.far_end_id == x.rid_int)
        expect = {
            (lf.name, p)
            for lf in fab.leaves
            if lf.pod == 0
            for other in fab.leaves
            if other.pod != 0
            for p in _prefixes(other)
        }
        for oc in (True, False):
            out.append(Degradation(f"{sp.name}->{x.name} (uplink)", sp, idx, expect, oc))
        # (b) a pod spine's downlink to a leaf of its pod: seen by the pod's other leaves
        pod = min(1, cfg.pods - 1)
        sp = next(s for s in fab.spines if s.pod == pod and s.plane == 0)
        j = [lf for lf in fab.leaves if lf.pod == pod][-1]
        idx = next(i for i, e in enumerate(sp.entries) if e.far_end_id == j.rid_int)
        expect = {
            (lf.name, p) for lf in fab.leaves if lf.pod == pod and lf is not j for p in _prefixes(j)
        }
        out.append(Degradation(f"{sp.name}->{j.name} (downlink)", sp, idx, expect, True))
    return out


def _run_degradation(sim: Sim, deg: Degradation, t: float) -> float:
    iv = sim.cfg.interval_s
    fab = sim.fab
    for sp in fab.spines:
        assert sp.sender is not None
        sp.sender.set_params(replace(sp.sender.params, on_change=deg.on_change), t)
    before = sim.snapshot()
    for lf in fab.leaves:
        lf.change_times = []
    sim.track_changes = True
    # degrade at a random phase of the spine's period
    t_d = t + iv + sim.rng.uniform(0, iv)
    sim.loop.at(t_d, sim.set_band, deg.spine, deg.entry, sim.cfg.degrade_band)
    t_end = t_d + 6 * iv
    sim.loop.run_until(t_end)
    sim.track_changes = False
    after = sim.snapshot()
    last = [max(lf.change_times) for lf in fab.leaves if lf.change_times]
    deg.leaves_changed = len(last)
    deg.settle_s = (max(last) - t_d) if last else None
    changed = set()
    for lf in fab.leaves:
        b, a = before[lf.name], after[lf.name]
        for p in set(a) | set(b):
            if a.get(p) != b.get(p):
                changed.add((lf.name, p))
    deg.changed = changed
    errors = []
    if changed != deg.expect:
        errors.append(
            f"{len(changed - deg.expect)} unexpected and "
            f"{len(deg.expect - changed)} missing weight changes"
        )
    ratios = []
    sid = deg.spine.rid_int
    for name, p in deg.expect & changed:
        w = dict(after[name][p])
        mine = w.get(sid)
        others = {v for k, v in w.items() if k != sid}
        if mine is None or len(others) != 1 or not mine < min(others):
            errors.append(f"{name} {p}: {w}")
            break
        ratios.append(mine / min(others))
    deg.min_ratio = round(max(ratios), 3) if ratios else 0.0
    if deg.settle_s is None or deg.settle_s > 2 * iv:
        errors.append(f"settle {deg.settle_s} > 2 intervals")
    deg.ok = not errors
    deg.detail = "; ".join(errors)
    # restore and let it settle again
    t = t_end
    sim.loop.at(t, sim.set_band, deg.spine, deg.entry, GOOD_BAND)
    t += 6 * iv
    sim.loop.run_until(t)
    restored = sim.snapshot()
    if restored != before:
        deg.ok = False
        deg.detail += "; weights not restored after the link recovered"
    return t
