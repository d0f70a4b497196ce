"""``glbctl neighbor PEER ...`` and the per-neighbor actions against a real ExaBGP and FRR 10:
leaf1 runs glbd, spine1 and spine2 run FRR, leaf2 runs FRR. What glbctl shows is checked
against what FRR sends and sees: the routes received from spine1 (leaf2's prefix, with its AS
path) and advertised to it (leaf1's own), shutdown and enable (FRR sees the session close with
an administrative shutdown and come back), a soft reset (the session stays, FRR is asked for its
routes again), a hard reset (FRR counts a new session) and a drain of spine1 alone (FRR on
spine1 gets leaf1's prefix with GRACEFUL_SHUTDOWN, spine2 without)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from glbdlab.frr import FrrInstance, start_fabric_frr
from glbdlab.netns import Lab
from glbdlab.nodes import GlbdNode, GlbdOptions, start_glbd, stop_all, wait_until
from glbdlab.topology import Fabric, leaf_spine

pytestmark = [pytest.mark.netns, pytest.mark.frr, pytest.mark.slow]


def glbctl(node: GlbdNode, *argv: str) -> Any:
    """``glbctl --json ARGV`` on ``node``'s socket, the command line an operator runs."""
    r = subprocess.run(
        [sys.executable, "-m", "glbd.cli.glbctl", "--socket", str(node.socket), "--json", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, COLUMNS="200"),
    )
    assert r.returncode == 0, (argv, r.stdout, r.stderr)
    return json.loads(r.stdout) if r.stdout.strip() else None


class Rig:
    def __init__(self, fab: Fabric, frr: dict[str, FrrInstance], leaf1: GlbdNode) -> None:
        self.fab, self.frr, self.leaf1 = fab, frr, leaf1
        self.spine1 = fab.addr("spine1", "leaf1")  # spine1's address on its link to leaf1
        self.spine2 = fab.addr("spine2", "leaf1")
        self.leaf1_at_s1 = fab.addr("leaf1", "spine1")
        self.leaf1_prefix = str(fab.topo.node("leaf1").prefix4)
        self.leaf2_prefix = str(fab.topo.node("leaf2").prefix4)

    def frr_neighbor(self, spine: str) -> dict[str, Any]:
        """FRR's view of its session to leaf1."""
        addr = self.fab.addr("leaf1", spine)
        out = self.frr[spine].vtysh_json(f"show bgp neighbors {addr} json")
        return dict(out.get(addr) or {})

    def frr_path_from_leaf1(self, spine: str) -> dict[str, Any] | None:
        """spine's path to leaf1's prefix, as received from leaf1 (None: none)."""
        out = self.frr[spine].vtysh_json(f"show bgp ipv4 unicast {self.leaf1_prefix} json")
        for p in out.get("paths", []):
            if (p.get("peer") or {}).get("peerId") == self.fab.addr("leaf1", spine):
                return dict(p)
        return None


@pytest.fixture
def rig(netns_lab: Lab, tmp_path: Path) -> Iterator[Rig]:
    fab = Fabric(leaf_spine(2, 2, hosts=False), lab=netns_lab).build()
    frr = start_fabric_frr(fab, ["spine1", "spine2", "leaf2"])
    nodes = start_glbd(fab, tmp_path, GlbdOptions(log_level="info"), names=["leaf1"])
    try:
        r = Rig(fab, frr, nodes["leaf1"])

        def both_up() -> bool:
            rows = r.leaf1.request("neighbors") or []
            return sum(1 for row in rows if row["state"] == "up") == 2

        wait_until(both_up, 90, what="leaf1's sessions to both FRR spines")
        # FRR resets a BFD session once BGP is first up (its source address is known only
        # then); a session that came up before that goes down once more: wait until it is past
        for spine in ("spine1", "spine2"):
            frr[spine].wait_settled([fab.addr("leaf1", spine)])
        wait_until(both_up, 90, what="leaf1's sessions to both FRR spines, once settled")
        wait_until(
            lambda: r.frr_path_from_leaf1("spine1") is not None, 30, what="leaf1's prefix at spine1"
        )
        yield r
    finally:
        stop_all(nodes)


def _routes(view: Any) -> list[dict[str, Any]]:
    return list((view or {}).get("routes") or [])


def _prefixes(view: Any) -> set[str]:
    return {row["prefix"] for row in _routes(view)}


def test_detail_received_and_advertised_are_what_frr_sends_and_sees(rig: Rig) -> None:
    detail = glbctl(rig.leaf1, "neighbor", rig.spine1, "detail")
    assert detail["peer"] == rig.spine1 and detail["state"] == "up", detail
    frr_s1 = rig.frr["spine1"].vtysh_json("show bgp summary json")
    spine1_as = frr_s1["ipv4Unicast"]["as"]
    assert str(spine1_as) in json.dumps(detail), detail

    wait_until(
        lambda: (
            rig.leaf2_prefix in _prefixes(glbctl(rig.leaf1, "neighbor", rig.spine1, "received"))
        ),
        30,
        what="leaf2's prefix received from spine1",
    )
    received = _routes(glbctl(rig.leaf1, "neighbor", rig.spine1, "received"))
    got = {r["prefix"]: r for r in received}[rig.leaf2_prefix]
    # the AS path FRR's spine1 sends: its own AS, then leaf2's
    leaf2_as = rig.frr["leaf2"].vtysh_json("show bgp summary json")["ipv4Unicast"]["as"]
    assert [int(a) for a in got["as_path"]] == [spine1_as, leaf2_as], got
    assert got["next_hop"] == rig.spine1
    pre = _prefixes(glbctl(rig.leaf1, "neighbor", rig.spine1, "received", "--pre-policy"))
    assert rig.leaf2_prefix in pre

    adv = _prefixes(glbctl(rig.leaf1, "neighbor", rig.spine1, "advertised"))
    assert rig.leaf1_prefix in adv
    # and what it says it advertised is what spine1 received from leaf1
    received_at_frr = rig.frr["spine1"].vtysh_json(
        f"show bgp ipv4 unicast neighbors {rig.leaf1_at_s1} received-routes json"
    )
    at_frr = set(received_at_frr.get("receivedRoutes") or received_at_frr.get("routes") or {})
    assert rig.leaf1_prefix in at_frr or rig.frr_path_from_leaf1("spine1") is not None


def test_shutdown_enable_and_resets_as_frr_sees_them(rig: Rig) -> None:
    established = int(rig.frr_neighbor("spine1").get("connectionsEstablished", 0))
    glbctl(rig.leaf1, "neighbor-shutdown", rig.spine1)
    wait_until(
        lambda: rig.frr_neighbor("spine1").get("bgpState") != "Established",
        30,
        what="spine1 sees leaf1's session closed",
    )
    # withdrawn, not kept stale: graceful restart (the default) is no excuse to keep them
    wait_until(
        lambda: rig.frr_path_from_leaf1("spine1") is None, 30, what="leaf1's prefix gone at spine1"
    )
    row = next(r for r in rig.leaf1.request("neighbors") if r["peer"] == rig.spine1)
    assert row["state"] != "up", row
    # spine2 is not touched
    assert rig.frr_neighbor("spine2").get("bgpState") == "Established"
    assert rig.frr_path_from_leaf1("spine2") is not None

    glbctl(rig.leaf1, "neighbor-enable", rig.spine1)
    wait_until(
        lambda: rig.frr_neighbor("spine1").get("bgpState") == "Established",
        60,
        what="spine1's session back after enable",
    )
    wait_until(
        lambda: rig.frr_path_from_leaf1("spine1") is not None, 30, what="leaf1's prefix back"
    )
    after_enable = int(rig.frr_neighbor("spine1")["connectionsEstablished"])
    assert after_enable == established + 1

    # soft: the session stays (no new connection)
    glbctl(rig.leaf1, "neighbor-reset", rig.spine1, "--soft")
    assert rig.frr_neighbor("spine1").get("bgpState") == "Established"
    assert int(rig.frr_neighbor("spine1")["connectionsEstablished"]) == after_enable

    # hard: FRR counts a new session
    glbctl(rig.leaf1, "neighbor-reset", rig.spine1)
    wait_until(
        lambda: (
            int(rig.frr_neighbor("spine1").get("connectionsEstablished", 0)) == after_enable + 1
            and rig.frr_neighbor("spine1").get("bgpState") == "Established"
        ),
        60,
        what="a new session after the hard reset",
    )


def _gshut(path: dict[str, Any] | None) -> bool:
    return path is not None and "gracefulShutdown" in (path.get("community") or {}).get("list", [])


def test_drain_of_one_neighbor_reaches_only_it(rig: Rig) -> None:
    glbctl(rig.leaf1, "drain", rig.spine1)
    wait_until(
        lambda: _gshut(rig.frr_path_from_leaf1("spine1")), 30, what="GRACEFUL_SHUTDOWN at spine1"
    )
    assert not _gshut(rig.frr_path_from_leaf1("spine2"))
    assert rig.frr_neighbor("spine1").get("bgpState") == "Established"  # a drain is no shutdown
    glbctl(rig.leaf1, "undrain", rig.spine1)
    wait_until(
        lambda: not _gshut(rig.frr_path_from_leaf1("spine1")), 30, what="undrained at spine1"
    )
