"""The fabric benchmark's pure parts: the fluid bound it prints, the optimum's weights, its
options, and the glbd configs it generates per contender (which glbd must accept: a config
the daemon rejects would only show as a benchmark that never converges)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from glbdlab.nodes import GlbdOptions, glbd_config
from glbdlab.topology import leaf_spine

from bench.fabric import model
from bench.fabric.run import FOREIGN_CLASSES, Params, leaf_extra, parse, shipped_flowlet
from glbd.config import config as cfgmod


def test_bound_and_optimum_weights() -> None:
    b = model.Bound(spines=4, leaves=4, rate_mbps=10.0, hot_mbps=7.5, pair_bytes=2_000_000)
    assert b.t_nohot == pytest.approx(1.25, abs=0.01)
    assert b.t_ecmp == pytest.approx(5.02, abs=0.01)
    assert b.t_opt == pytest.approx(1.54, abs=0.01)
    assert b.gain == pytest.approx(3.25, abs=0.01)
    assert b.min_hot_for_2x == pytest.approx(4 / 7)
    w = model.optimum_weights({"s1": 2.5, "s2": 10.0, "s3": 10.0, "s4": 0.0})
    assert w == {"s1": 25, "s2": 100, "s3": 100}


def test_exchange_bound_follows_what_happened() -> None:
    """The bound of one exchange starts the background (or the failure) when it happened."""
    b = model.Bound(spines=4, leaves=4, rate_mbps=10.0, hot_mbps=7.5, pair_bytes=2_000_000)
    assert model.exchange_bound(b, "none", None) == pytest.approx(b.t_nohot)
    assert model.exchange_bound(b, "before", None) == pytest.approx(b.t_opt)
    during = model.exchange_bound(b, "during", 0.5)
    assert b.t_nohot < during < b.t_opt  # full rate for the first 0.5 s
    # 0.5 s at 40 Mbit/s, the rest at 32.5 Mbit/s (goodput)
    g = model.WIRE_EFFICIENCY * 1e6 / 8
    assert during == pytest.approx(0.5 + (b.into_leaf - 0.5 * 40 * g) / (32.5 * g))
    assert model.exchange_bound(b, "during", 5.0) == pytest.approx(b.t_nohot)  # after the end
    fail = model.exchange_bound(b, "fail", 0.5)
    assert fail == pytest.approx(0.5 + (b.into_leaf - 0.5 * 40 * g) / (30 * g))
    assert model.exchange_bound(b, "before", None, 8.0) > b.t_opt  # the wire rate counts


def test_profiles_and_verdicts() -> None:
    from bench.fabric.report import report
    from bench.fabric.run import Exchange

    p, _, _ = parse(["--runs", "1"])
    sh = p.for_profile("shallow")
    assert (sh.latency, sh.cc, sh.flows, sh.ecn) == ("8ms", "cubic", 4, True)
    bbr = p.for_profile("shallow-bbr")
    assert (bbr.latency, bbr.cc, bbr.flows, bbr.ecn) == ("8ms", "bbr", 4, False)
    assert not p.for_profile("deep").ecn
    assert p.for_profile("deep").flows == 16
    assert parse(["--flows", "2"])[0].for_profile("deep").flows == 2

    def ex(k: str, case: str, t: float, reorder: int = 0, changed: int = 0) -> Exchange:
        e = Exchange(k, case, 0, True, t, profile="deep", bound_s=1.0, reorder=reorder)
        e.fail_running, e.fail_changed = 100, changed
        return e

    rows = [
        ex("glb", "none", 1.0), ex("ecmp", "none", 1.0), ex("frr", "none", 1.0),
        ex("glb", "before", 1.3, reorder=5), ex("ecmp", "before", 4.0), ex("frr", "before", 2.0),
        ex("glb", "fail", 1.2, changed=25), ex("ecmp", "fail", 1.5, changed=50),
    ]  # fmt: skip
    q = Params(runs=1, profiles=("deep",), cases=("none", "before", "fail"))
    meta = {"date": "d", "command": "c", "machine": "m", "load_start": "0"}
    text = report(q, rows, meta)
    verdicts = [ln for ln in text.splitlines() if "VERDICT" in ln]
    assert any("speed-up vs ecmp: 3.08x" in v and v.endswith(": met") for v in verdicts)
    assert any("speed-up vs frr: 1.54x" in v and v.endswith("NOT met") for v in verdicts)
    assert any("before, reorder events: 5 (ECMP 0)" in v and "NOT met" in v for v in verdicts)
    assert any("changed spine: 25 %" in v and v.endswith(": met") for v in verdicts)
    assert any("before, time / fluid bound: 1.30" in v and v.endswith(": met") for v in verdicts)
    assert "2x ECMP needs `glb` <= 2.00 s; it took 1.30 s, and 1.00 s with no hotspot\n" in text
    # a 2x target under glb's own time with no hotspot is said to be so
    rows += [ex("glb", "during", 1.2), ex("ecmp", "during", 1.5)]
    text = report(dataclasses.replace(q, cases=("none", "before", "during", "fail")), rows, meta)
    assert (
        "needs `glb` <= 0.75 s; it took 1.20 s, and 1.00 s with no hotspot (the target is below"
        in text
    )
    assert "CE received" not in text  # deep buffers mark nothing
    # an ECN profile's table says how many marked packets the hosts received
    marked = [dataclasses.replace(e, profile="shallow", ce=700 + i) for i, e in enumerate(rows)]
    text = report(dataclasses.replace(q, profiles=("shallow",)), marked, meta)
    assert "| reorder | retrans | CE received |" in text
    assert "| 0 | 0 | 701 |" in text  # ECMP with no hotspot


def test_options() -> None:
    p, only, _ = parse([])
    assert p.residual and p.memory and p.rps and only == ["glb", "ecmp", "frr"]
    assert not parse(["--no-rps"])[0].rps
    assert p.cases == ("none", "before", "during", "fail") and p.profiles == ("deep", "shallow")
    p, only, _ = parse(["--no-residual", "--no-memory", "--only", "ecmp,glb-res-frozen"])
    assert not p.residual and not p.memory and only == ["ecmp", "glb-res-frozen"]
    with pytest.raises(SystemExit):
        parse(["--only", "nonsense"])


def test_shipped_contender_config_is_the_default(tmp_path: Path) -> None:
    """``glb`` writes only what the topology requires: every tuning option is the default."""
    topo = leaf_spine(4, 4)
    opts = GlbdOptions(capacity_mbps=10.0, defaults_only=True)
    for node in ("leaf1", "spine1"):
        f = tmp_path / f"{node}.toml"
        f.write_text(glbd_config(topo, node, tmp_path, opts))
        cfg = cfgmod.load(f)
        default = cfgmod.Config.model_validate(
            {"router_id": cfg.router_id, "local_as": cfg.local_as, "role": cfg.role}
        )
        for part in ("bgp", "bfd", "heartbeat", "fib", "flowlet", "path_quality"):
            assert getattr(cfg, part) == getattr(default, part), part
        assert cfg.link_quality.foreign_classes == []
        assert set(cfg.link_quality.capacity_mbps.values()) == {10.0}
        assert len(cfg.neighbors) == 4


def test_flowlet_keys_go_to_the_leaves_and_a_fixed_timeout_to_every_flowlet_contender(
    tmp_path: Path,
) -> None:
    """``--flowlet-timeout-ms`` reaches ``glb`` (flowlets on by default) as well as the
    contenders that say so, never one that turns them off; spines get no [flowlet] table."""
    topo = leaf_spine(4, 4)
    fixed = Params(flowlet_timeout_ms=200.0)
    assert shipped_flowlet("glb", Params()) == {}
    assert shipped_flowlet("glb", fixed) == {"timeout_us": "200000"}
    assert shipped_flowlet("glb-nofl", fixed) == {"enabled": "false"}
    for key, enabled in (("glb", True), ("glb-fl-always", True), ("glb-nofl", False)):
        opts = GlbdOptions(
            capacity_mbps=10.0, defaults_only=True, flowlet=shipped_flowlet(key, fixed)
        )
        cfgs = {}
        for node in ("leaf1", "spine1"):
            f = tmp_path / f"{key}-{node}.toml"
            f.write_text(glbd_config(topo, node, tmp_path, opts))
            cfgs[node] = cfgmod.load(f)
        leaf = cfgs["leaf1"].flowlet
        assert leaf.enabled is enabled
        assert leaf.timeout_us == (200_000 if enabled else "auto")
        spine = cfgs["spine1"]
        default = {"router_id": spine.router_id, "local_as": spine.local_as, "role": spine.role}
        assert spine.flowlet == cfgmod.Config.model_validate(default).flowlet
    assert cfgmod.load(tmp_path / "glb-fl-always-leaf1.toml").flowlet.move == "always"


@pytest.mark.parametrize(
    ("key", "params", "table"),
    [
        ("glb-res", Params(), None),
        ("glb-res", Params(memory=False), {"weight_memory": False}),
        (
            "glb-res-frozen",
            Params(),
            {"weight_table": [1] * 8, "capacity_aware": False, "weight_memory": False},
        ),
    ],
)
def test_generated_configs_load(
    tmp_path: Path, key: str, params: Params, table: dict[str, object] | None
) -> None:
    topo = leaf_spine(4, 4)
    opts = GlbdOptions(
        capacity_mbps=params.rate,
        foreign_classes=FOREIGN_CLASSES if params.residual else (),
        extra=leaf_extra(key, params),
    )
    for node in ("leaf1", "spine1"):
        f = tmp_path / f"{node}.toml"
        f.write_text(glbd_config(topo, node, tmp_path, opts))
        cfg = cfgmod.load(f)
        pq = cfg.path_quality
        if node == "spine1":
            assert cfg.link_quality.foreign_classes == ["10:2"]
            assert pq.weight_memory and pq.capacity_aware  # helpers keep the defaults
        else:
            assert cfg.link_quality.foreign_classes == []  # only the helpers report residual
            for k, v in (table or {"weight_memory": True}).items():
                assert getattr(pq, k) == v


def test_a_flow_hash_overloads_its_busiest_link() -> None:
    deep = model.hash_spread(4, 4, 16)
    assert deep.median == 1.5 and deep.lo <= deep.median <= deep.hi
    assert model.hash_spread(4, 4, 16) == deep  # a fixed seed: every report says the same
    assert model.hash_spread(4, 4, 4).median > deep.median  # fewer flows, worse luck
    assert model.hash_spread(4, 4, 400, trials=200).median < 1.15  # many flows even out
    assert model.hash_spread(1, 4, 16, trials=10).median == 1.0  # one spine: nothing to hash


def test_the_placed_oracle_spreads_flows_by_weight() -> None:
    from bench.fabric.run import spread

    assert spread(16, [1.0, 1.0, 1.0, 1.0]) == [0, 1, 2, 3] * 4
    hot = spread(16, [2.5, 10.0, 10.0, 10.0])  # spine1 keeps a residual of 2.5 of 10 Mbit/s
    assert [hot.count(i) for i in range(4)] == [1, 5, 5, 5]
    assert spread(3, [0.0, 1.0]) == [1, 1, 1]
