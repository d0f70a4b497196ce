"""bench/convergence.py at a tiny scale (2 neighbours x 20 prefixes): for glbd and for FRR it
must see every prefix in the kernel on a 2-wide group, then the peer restart take one spine out
of every group and bring it back; the bench exits non-zero and leaves the time empty when any
of those is not seen. Its summary (medians, glbd/FRR ratios) is checked on its own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import convergence

BENCH = Path(__file__).resolve().parent.parent / "bench" / "convergence.py"


@pytest.mark.netns
@pytest.mark.frr
@pytest.mark.slow
def test_tiny_run_converges_and_restarts_a_peer(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    res = subprocess.run(
        [sys.executable, str(BENCH), "--neighbors", "2", "--prefixes", "20",
         "--speakers", "glbd,frr", "--settle", "0.5", "--converge-timeout", "60",
         "--restart-timeout", "30", "--out", str(out)],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    data = json.loads(out.read_text())
    assert [r["speaker"] for r in data["results"]] == ["glbd", "frr"]
    for r in data["results"]:
        assert "error" not in r, r
        for key in ("converged_s", "converged_from_established_s", "restart_down_s",
                    "restart_up_s", "restart_up_from_restore_s"):  # fmt: skip
            assert isinstance(r[key], float) and r[key] >= 0, (r["speaker"], key, r[key])
        assert r["rss_converged_mb"]["total"] > 0
    assert set(data["summary"]["ratio_glbd_frr"]) >= {"converged_s", "restart_down_s"}


def test_summary_medians_and_ratios() -> None:
    def run(s: str, conv: float | None, down: float) -> dict[str, object]:
        return {"speaker": s, "converged_s": conv, "restart_down_s": down,
                "rss_converged_mb": {"total": 10.0}, "rss_max_mb": {"total": 12.0}}  # fmt: skip

    results = [run("glbd", 30.0, 1.0), run("glbd", 10.0, 3.0), run("glbd", None, 2.0),
               run("frr", 5.0, 1.0)]  # fmt: skip
    s = convergence.summarize(results, ["glbd", "frr"])
    assert s["glbd"]["converged_s"] == {"median": 20.0, "min": 10.0, "max": 30.0, "n": 2,
                                        "runs": 3}  # fmt: skip
    assert s["glbd"]["restart_down_s"]["median"] == 2.0
    assert s["ratio_glbd_frr"]["converged_s"] == 4.0
    assert s["ratio_glbd_frr"]["restart_up_s"] is None  # measured by neither
