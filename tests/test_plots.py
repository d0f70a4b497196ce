"""bench/plots.py: the pictures are drawn from saved results, and glb_latency saves what a
CDF needs (every sample, not only its quantiles)."""

from __future__ import annotations

import json
from pathlib import Path

from bench import plots

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
FABRIC_RESULTS = Path(__file__).parent.parent / "bench/fabric/results/2026-11-24-residual.json"


def test_fabric_plot_from_saved_results(tmp_path: Path) -> None:
    out = plots.plot_fabric(FABRIC_RESULTS, tmp_path / "img/fabric.png")
    assert out.read_bytes().startswith(PNG_MAGIC)


def test_fabric_bounds_follow_the_saved_parameters() -> None:
    params = json.loads(FABRIC_RESULTS.read_text())["params"]
    bounds = plots.bounds(params)
    assert [label for label, _ in bounds["none"]] == ["fluid bound"]
    ecmp, opt = (t for _, t in bounds["before"])
    assert ecmp > opt > bounds["none"][0][1]


def test_latency_cdf_exact_from_samples_else_quantiles(tmp_path: Path) -> None:
    exact = {"name": "band, from the wire", "n": 4, "samples_ms": [3.0, 1.0, 2.0, 4.0]}
    assert plots.cdf(exact) == ([1.0, 2.0, 3.0, 4.0], [0.25, 0.5, 0.75, 1.0], True)
    coarse = {"name": "cut, from the wire", "n": 9, "min_ms": 1, "p50_ms": 2, "p99_ms": 5}
    assert plots.cdf(coarse) == ([1.0, 2.0, 5.0], [0.0, 0.5, 0.99], False)
    run = tmp_path / "latency.json"
    run.write_text(json.dumps({"date": "d", "series": [exact, coarse]}))
    out = plots.plot_latency([(run, "a"), (run, "b")], tmp_path / "cdf.png")
    assert out.read_bytes().startswith(PNG_MAGIC)


def test_glb_latency_json_carries_every_sample() -> None:
    from bench.glb_latency import Series

    d = Series("band, from the wire", "wire", values=[2.5, 1.25, 9.0]).to_dict()
    assert d["samples_ms"] == [1.25, 2.5, 9.0]
    assert d["p50_ms"] == 2.5
