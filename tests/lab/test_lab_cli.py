"""glbd-lab's poke commands against a detached lab running real glbd daemons."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from glbdlab.nodes import wait_until

from glbd.cli import glbctl as ctl

pytestmark = [pytest.mark.netns, pytest.mark.slow]


def lab(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "glbdlab.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_up_congest_cut_restore_down() -> None:
    r = lab("up", "--detach", "--rate", "20")
    assert r.returncode == 0, r.stderr
    tag = re.search(r"detached: lab (\w+)", r.stdout)
    assert tag, r.stdout
    t = tag.group(1)
    sock = f"/run/glbd-lab/{t}/leaf1/glbd.sock"
    try:

        def weights() -> dict[str, int]:
            prof = ctl.request(sock, "profiles")
            p = next((p for p in prof["profiles"] if "198.19.2.0/24" in p["prefixes"]), None)
            if p is None:  # not learned yet: the loop below waits for it
                return {}
            return {w["ifname"]: w["value"] for w in p["weights"]}

        wait_until(lambda: len(weights()) == 2, 30, what="both uplinks weighted")
        assert weights() == {"spine1": 255, "spine2": 255}
        st = lab("status", t)
        assert st.returncode == 0 and "leaf1: glbd BGP" in st.stdout
        c = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "glbdlab.cli",
                "congest",
                "spine1",
                "leaf2",
                "--tag",
                t,
                "--seconds",
                "3",
            ],
            stdout=subprocess.DEVNULL,
        )

        def moved() -> bool:
            w = weights()
            return w.get("spine1", 255) < w.get("spine2", 0)

        wait_until(moved, 6, what="congest moving leaf1's weight off spine1")
        assert c.wait(30) == 0
        assert lab("cut", "spine1", "leaf2", "--tag", t).returncode == 0
        wait_until(lambda: "spine1" not in weights(), 5, what="spine1 cut off")
        assert lab("restore", "spine1", "leaf2", "--tag", t).returncode == 0
        wait_until(lambda: len(weights()) == 2, 15, what="spine1 restored")
        bad = lab("cut", "spine9", "leaf2", "--tag", t)
        assert bad.returncode == 1 and "no node 'spine9'" in bad.stderr
    finally:
        d = lab("down", t)
    assert d.returncode == 0, d.stderr
    out = subprocess.run(["ip", "-j", "netns", "list"], capture_output=True, text=True).stdout
    assert not [n for n in json.loads(out or "[]") if n["name"].startswith(f"glb-{t}-")]
    assert not os.path.exists(f"/run/glbd-lab/{t}")
