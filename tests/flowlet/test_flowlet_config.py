"""``[flowlet]``: defaults, checks, the parameters the program gets, check-config's warnings,
and the metrics derived from ``glbctl flowlet``'s snapshot."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from glbd.config import config as cfgmod
from glbd.config import params
from glbd.control import metrics_parts
from glbd.flowlet import loader as flowlet

BASE: dict[str, Any] = {
    "router_id": "10.0.0.1",
    "local_as": 65001,
    "role": "load-balancer",
    "neighbors": [
        {"address": "10.1.0.1", "remote_as": 65100, "interface": "swp1"},
        {"address": "10.2.0.1", "remote_as": 65100, "interface": "swp2"},
    ],
}


def _cfg(**flowlet_keys: Any) -> cfgmod.Config:
    return cfgmod.parse({**BASE, "flowlet": flowlet_keys})


def test_defaults_on_auto_timeout_every_non_fabric_interface() -> None:
    c = cfgmod.parse(BASE)
    assert c.flowlet.enabled and c.flowlet_active
    assert c.flowlet.timeout_us == "auto" and c.flowlet.move == "on-change"
    assert not _cfg(enabled=False).flowlet_active
    helper = cfgmod.parse({**BASE, "role": "helper", "flowlet": {"enabled": True}})
    assert helper.flowlet.enabled and not helper.flowlet_active  # no weighted groups to steer
    p = params.flowlet_params(c)  # "auto" before any measurement: the floor
    assert p.timeout_ns == 500_000 and p.aging_ns == 10 * 10**9 and p.table_size == 65_536
    assert params.flowlet_params(c, 160_000_000).timeout_ns == 160_000_000
    s = params.skew_params(c)
    assert (s.floor_ns, s.ceiling_ns, s.window_s) == (500_000, 5 * 10**9, 60.0)
    assert p.interfaces is None and p.exclude == ("swp1", "swp2")
    assert p.targets(["lo", "swp1", "swp2", "eth0", "vlan10"]) == ["eth0", "vlan10"]
    assert p.set_hash_policy
    # new flowlets spread, aimed at the resilient groups' buckets
    assert p.spread and p.buckets == c.fib.resilient_buckets == 128
    assert not params.flowlet_params(_cfg(placement="random")).spread
    ht = cfgmod.parse({**BASE, "fib": {"group_type": "hash-threshold"}})
    assert params.flowlet_params(ht).buckets == 0


def test_move_never_keeps_the_chance_at_zero() -> None:
    """``move = "never"``: the program starts with chance 0 (move_on_change) and no gate
    ever raises it (the daemon makes a gate for "on-change" only)."""
    assert params.flowlet_params(_cfg(move="never")).move_on_change
    assert params.flowlet_params(_cfg(move="on-change")).move_on_change
    assert not params.flowlet_params(_cfg(move="always")).move_on_change
    with pytest.raises(cfgmod.ConfigError, match=r"flowlet\.move"):
        _cfg(move="sometimes")


def test_named_interfaces() -> None:
    c = _cfg(enabled=True, interfaces=["eth0"], timeout_us=250)
    p = params.flowlet_params(c, 160_000_000)  # a fixed timeout ignores the estimate
    assert p.interfaces == ("eth0",) and p.timeout_ns == 250_000


def test_resilient_idle_timer_auto_follows_the_flowlet_timeout() -> None:
    fib = cfgmod.parse(BASE).fib
    assert fib.resilient_idle_timer_s == "auto"
    res = params.resilient(fib)
    assert res is not None and res.idle_timer_s == params.IDLE_TIMER_S  # flowlets off
    res = params.resilient(fib, 0.1601)  # up to the kernel's 10 ms tick
    assert res is not None and res.idle_timer_s == pytest.approx(0.17)
    res = params.resilient(fib, 0.0005)
    assert res is not None and res.idle_timer_s == pytest.approx(0.01)
    fixed = cfgmod.parse({**BASE, "fib": {"resilient_idle_timer_s": 2.5}}).fib
    res = params.resilient(fixed, 0.1)
    assert res is not None and res.idle_timer_s == 2.5
    ht = cfgmod.parse({**BASE, "fib": {"group_type": "hash-threshold"}}).fib
    assert params.resilient(ht, 0.1) is None


@pytest.mark.parametrize(
    ("keys", "where"),
    [
        ({"timeout_us": 0}, "flowlet.timeout_us"),
        ({"table_size": 10}, "flowlet.table_size"),
        ({"interfaces": ["bad name"]}, "flowlet.interfaces"),
        ({"timeout_us": 2_000_000, "aging_s": 1}, "flowlet"),
        ({"timeout_floor_us": 2_000_000, "aging_s": 1}, "flowlet"),
        ({"timeout_us": "sometimes"}, "flowlet.timeout_us"),
        ({"skew_window_s": 0}, "flowlet.skew_window_s"),
        ({"on_stop": "flush"}, "flowlet.on_stop"),
        ({"timeout": 5}, "flowlet.timeout"),
    ],
)
def test_bad_values_are_rejected_with_their_key(keys: dict[str, Any], where: str) -> None:
    with pytest.raises(cfgmod.ConfigError) as e:
        _cfg(**keys)
    assert [p.key for p in e.value.problems] == [where], e.value.format()


def test_check_config_warns_about_fabric_ports_and_missing_tools(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _cfg(enabled=False, interfaces=["swp1"]).flowlet.warnings(["swp1"]) == []
    c = _cfg(enabled=True, interfaces=["swp1", "eth0"])
    monkeypatch.setattr(flowlet, "problems", lambda: ["'bpftool' is missing"])
    w = c.flowlet.warnings(["swp1", "swp2"])
    assert w[0] == "flowlet: enabled, but 'bpftool' is missing"
    assert w[1].startswith("flowlet.interfaces: swp1 is a neighbor's port")


def test_samples_per_interface_and_skip_reason() -> None:
    counters = dict.fromkeys(flowlet.COUNTERS, 0)
    counters.update(packets=10, flowlets=5, moved=4, new_flows=1, skip_not_ip=3)
    snap = {
        "enabled": True,
        "error": None,
        "timeout_us": 500.0,
        "table_size": 1024,
        "table_entries": 1024,
        "evictions": 7,
        "layouts": 3,
        "layouts_left_out": 2,
        "interfaces": [{"interface": "eth0", "attached": True, **counters}],
        "events": {"loaded": 1, "errors": 0},
    }
    got = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for s in metrics_parts.flowlet_samples(cast(metrics_parts.FlowletView, snap))
    }
    eth0 = (("interface", "eth0"),)
    assert got[("glbd_flowlet_timeout_seconds", ())] == 0.0005
    assert got[("glbd_flowlet_table_entries", ())] == 1024.0
    assert got[("glbd_flowlet_evictions_total", ())] == 7.0
    assert got[("glbd_flowlet_layouts", ())] == 3.0
    assert got[("glbd_flowlet_layouts_left_out", ())] == 2.0
    assert got[("glbd_flowlet_attached", eth0)] == 1.0
    assert got[("glbd_flowlet_moved_total", eth0)] == 4.0
    assert got[("glbd_flowlet_skipped_total", (*eth0, ("reason", "not_ip")))] == 3.0
    reasons = {dict(k[1])["reason"] for k in got if k[0] == "glbd_flowlet_skipped_total"}
    assert reasons == {str(r) for r in flowlet.FlowletSkip}
    assert got[("glbd_flowlet_events_total", (("event", "loaded"),))] == 1.0


@pytest.mark.parametrize("key", ["glb-flowlet", "glb-flowlet-ht"])
def test_fabric_bench_flowlet_contenders_configs_load(tmp_path: Path, key: str) -> None:
    """bench.fabric's flowlet contenders: flowlets on the leaves only with glbd's defaults
    (the "auto" timeout and idle timer); ``--flowlet-timeout-ms`` fixes both."""
    from glbdlab.nodes import GlbdOptions, glbd_config
    from glbdlab.topology import leaf_spine

    from bench.fabric.run import FOREIGN_CLASSES, Params, fib_extra, leaf_extra, parse

    p = Params()
    opts = GlbdOptions(capacity_mbps=p.rate, foreign_classes=FOREIGN_CLASSES,
                       extra=leaf_extra(key, p))  # fmt: skip
    for node, enabled in (("leaf1", True), ("spine1", False)):
        f = tmp_path / f"{node}.toml"
        f.write_text(glbd_config(leaf_spine(4, 4), node, tmp_path, opts))
        cfg = cfgmod.load(f)
        assert cfg.flowlet_active is enabled
        if enabled:
            assert cfg.flowlet.timeout_us == "auto" and cfg.flowlet.interfaces is None
            assert cfg.fib.resilient_idle_timer_s == "auto"
    assert "resilient_idle_timer_s" not in fib_extra(key, p)
    q, only, _ = parse(["--only", key, "--flowlet-timeout-ms", "20"])
    assert only == [key] and q.flowlet_timeout_s == 0.02
    assert fib_extra(key, q)["resilient_idle_timer_s"] == "0.02"
    assert "timeout_us = 20000" in leaf_extra(key, q)["leaf"]


def test_occupancy_and_evictions_follow_the_flows_inserted() -> None:
    """Nothing but the full table's LRU deletes an entry: the flows inserted give both."""
    att = flowlet.FlowletAttachment(netns=None)
    att.state.table_size = 4
    zero = dict.fromkeys(flowlet.COUNTERS, 0)
    att.state.counters = {"eth0": {**zero, "new_flows": 2}, "eth1": {**zero, "new_flows": 1}}
    snap = att.snapshot()
    assert (snap["table_entries"], snap["evictions"]) == (3, 0)
    att.state.counters["eth1"]["new_flows"] = 5
    snap = att.snapshot()
    assert (snap["table_entries"], snap["evictions"]) == (4, 3)
