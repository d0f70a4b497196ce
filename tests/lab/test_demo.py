"""The README's main job: `glbd-lab demo` runs the whole GLB loop and exits 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.netns, pytest.mark.slow]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_demo_runs_the_loop_and_prints_the_timeline() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "glbdlab.cli", "demo"], capture_output=True, text=True, timeout=240
    )
    out = r.stdout
    assert r.returncode == 0, out[-3000:] + r.stderr[-2000:]
    for line in (
        "BGP established + groups installed",
        "congestion on",
        "leaf1 RTM_NEWNEXTHOP (weights moved)",
        "cut spine1--leaf2",
        "spine1 back in leaf1's group",
        "fabric torn down",
    ):
        assert line in out, line
    assert "<- unchanged: the decision is next-next-hop specific" in out
    results = json.loads(out[out.index("Results") + len("Results") :])
    assert results["prefix_specific"] is True
    assert results["cut_failover_ms"] < 1000
