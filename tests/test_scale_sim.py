"""Scale simulation (bench/scale) on tiny fabrics: the real cores settle within 2 heartbeat
intervals of virtual time after one link degrades, and exactly the affected weights move."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.scale.scenario import run
from bench.scale.sim import Sim, SimConfig

TINY3 = SimConfig(stages=3, leaves=8, spines=4, steady_s=0.0)
MINI5 = SimConfig(
    stages=5, pods=3, leaves_per_pod=4, spines_per_pod=2, supers_per_plane=2, steady_s=0.0
)


def _check(res_cfg: SimConfig, degs: list) -> None:
    assert degs
    for d in degs:
        assert d.ok, d.detail
        assert d.settle_s is not None and d.settle_s <= 2 * res_cfg.interval_s
        assert d.changed == d.expect
        assert 0 < d.min_ratio < 1  # the degraded spine's weight is strictly lower


@pytest.mark.parametrize("rib", ["full", "sample"])
def test_three_stage_settles_and_only_affected_prefixes_move(rib: str) -> None:
    cfg = SimConfig(**{**TINY3.__dict__, "rib": rib, "rib_sample": 2})
    res = run(cfg, measure=False)
    _check(cfg, res.degradations)
    on_change = next(d for d in res.degradations if d.on_change)
    periodic = next(d for d in res.degradations if not d.on_change)
    assert on_change.settle_s is not None and periodic.settle_s is not None
    # on-change: one link delay (+ the sender's spacing at most); periodic: < 1 interval + delay
    assert on_change.settle_s <= cfg.min_spacing_s + cfg.delay_s + cfg.jitter_s
    assert periodic.settle_s <= cfg.interval_s + cfg.delay_s + cfg.jitter_s
    # exactly the degraded leaf's prefixes, at every other leaf
    name = on_change.name.split("->")[1]
    assert {leaf for leaf, _p in on_change.changed} == {f"l{i}" for i in range(8)} - {name}
    if rib == "sample":
        assert res.numbers["rib_checks"] >= 1  # derivation == real Rib on the sampled leaves


def test_five_stage_compound_quality() -> None:
    res = run(MINI5, measure=False)
    _check(MINI5, res.degradations)
    uplink = res.degradations[0]
    # every leaf of pod 0, every prefix of the other pods; nothing intra-pod
    assert {leaf for leaf, _ in uplink.changed} == {"l0", "l1", "l2", "l3"}
    assert len(uplink.changed) == 4 * 8


def test_weights_are_equal_before_any_degradation_and_nnh_sets_are_compound() -> None:
    sim = Sim(MINI5)
    sim.build_heartbeats()
    sim.build_bgp()
    sim.start_heartbeats(0.0)
    sim.loop.run_until(4 * MINI5.interval_s)
    leaf = sim.fab.leaves[0]
    other_pod = sim.fab.leaves[-1]
    assert leaf.table is not None
    key = leaf.table.profile_of(str(other_pod.prefixes[0]))
    assert key is not None
    nhs = leaf.table.next_hops(key)
    assert len(nhs) == MINI5.spines_per_pod
    assert all(s is not None and len(s) == MINI5.supers_per_plane for s in nhs.values())
    ws = leaf.table.weights(key)
    assert {w.value for w in ws.values()} == {255}
    assert {w.source for w in ws.values()} == {"glb"}
