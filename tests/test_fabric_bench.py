"""The fabric benchmark's pure parts: the fluid bound it prints, the optimum's weights, its
options, and the glbd configs it generates per contender (which glbd must accept: a config
the daemon rejects would only show as a benchmark that never converges)."""

from __future__ import annotations

from pathlib import Path

import pytest
from glbdlab.nodes import GlbdOptions, glbd_config
from glbdlab.topology import leaf_spine

from bench.fabric import model
from bench.fabric.run import FOREIGN_CLASSES, Params, leaf_extra, parse
from glbd.app import config as cfgmod


def test_bound_and_optimum_weights() -> None:
    b = model.Bound(spines=4, leaves=4, rate_mbps=10.0, hot_mbps=7.5, pair_bytes=2_000_000)
    assert b.t_nohot == pytest.approx(1.25, abs=0.01)
    assert b.t_ecmp == pytest.approx(5.02, abs=0.01)
    assert b.t_opt == pytest.approx(1.54, abs=0.01)
    assert b.gain == pytest.approx(3.25, abs=0.01)
    assert b.min_hot_for_2x == pytest.approx(4 / 7)
    w = model.optimum_weights({"s1": 2.5, "s2": 10.0, "s3": 10.0, "s4": 0.0})
    assert w == {"s1": 25, "s2": 100, "s3": 100}


def test_options() -> None:
    p, only, _ = parse([])
    assert p.residual and p.memory and "glb-ht" in only
    p, only, _ = parse(["--no-residual", "--no-memory", "--only", "ecmp,glb-res-frozen"])
    assert not p.residual and not p.memory and only == ["ecmp", "glb-res-frozen"]
    with pytest.raises(SystemExit):
        parse(["--only", "nonsense"])


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
