"""``glbctl graceful-restart``, then SIGTERM and a new glbd: no packet lost.

A 2 x 2 leaf-spine fabric with hosts: FRR 10.x on both spines and on leaf2 (BFD 100 ms x 3,
FRR's default graceful restart helper mode), glbd on leaf1. 1000 datagrams a second flow
host1 -> host2 and host2 -> host1 through leaf1 while leaf1's glbd is armed, stopped with
SIGTERM and started again (what ``systemctl restart glbd`` does after the package's postinst
armed it), until the new glbd is up with both spines and every End-of-RIB is in.

* ``bgp.graceful_restart`` at its default (``"full"``): nothing lost in either direction; the
  old glbd sent BFD AdminDown and closed its sessions without a NOTIFICATION, the spines kept
  leaf1's prefix (stale) until the new glbd's End-of-RIB, leaf1's kernel kept forwarding.
* ``"helper"``: the armed stop falls back to a planned stop (withdraw first, logged), and the
  traffic into leaf1 is lost while it restarts (printed, for comparison).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from glbdlab.frr import FrrInstance, start_fabric_frr
from glbdlab.netns import Lab
from glbdlab.nodes import (
    GlbdNode,
    GlbdOptions,
    kernel_group_for,
    start_glbd,
    stop_all,
    wait_until,
)
from glbdlab.topology import Fabric, leaf_spine

from tests.seqtraffic import Stream

pytestmark = [pytest.mark.netns, pytest.mark.frr, pytest.mark.slow]

TOPO = leaf_spine(2, 2)
P1, P2 = str(TOPO.node("leaf1").prefix4), str(TOPO.node("leaf2").prefix4)
SPINES = ("spine1", "spine2")


@pytest.fixture
def fabric(netns_lab: Lab) -> Iterator[tuple[Fabric, dict[str, FrrInstance]]]:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    fab = Fabric(TOPO, lab=netns_lab).build()
    frr = start_fabric_frr(fab, [*SPINES, "leaf2"], bfd=True, bfd_interval_ms=100)
    yield fab, frr


def frr_leaf1_paths(frr: FrrInstance) -> list[dict[str, Any]]:
    r = frr.vtysh_json(f"show bgp ipv4 unicast {P1} json")
    paths = r.get("paths", []) if isinstance(r, dict) else []
    return paths if isinstance(paths, list) else []


def settled(fab: Fabric, frr: dict[str, FrrInstance], leaf1: GlbdNode, full: bool) -> bool:
    """leaf1 up with both spines, every End-of-RIB in (and out, with ``full``), BFD up; the
    spines' paths to leaf1's prefix fresh (not stale); leaf1 reaches leaf2's prefix through
    both spines."""
    rows = leaf1.request("neighbors")
    if len(rows) != 2:
        return False
    for r in rows:
        c = r["counters"]
        if r["state"] != "up" or not c.get("eor_in"):
            return False
        if full and not c.get("eor_out"):  # glbd's own End-of-RIB: only with "full"
            return False
    if any(b["state"] != "up" for b in leaf1.request("bfd")):
        return False
    for s in SPINES:
        paths = frr_leaf1_paths(frr[s])
        if not paths or any(p.get("stale") for p in paths):
            return False
    return len(kernel_group_for(fab, "leaf1", P2)) == 2


def frr_bfd_status(fab: Fabric, frr: dict[str, FrrInstance]) -> dict[str, str]:
    """Each spine's BFD session with leaf1 as FRR sees it."""
    out = {}
    for s in SPINES:
        peers = frr[s].vtysh_json("show bfd peers json")
        out[s] = next(p["status"] for p in peers if p["peer"] == fab.addr("leaf1", s))
    return out


def run_restart(
    fab: Fabric, frr: dict[str, FrrInstance], run_dir: Path, mode: str | None
) -> tuple[dict[str, Any], dict[str, Any], GlbdNode, dict[str, str]]:
    """leaf1's glbd (``bgp.graceful_restart = mode``; None: the default) armed, stopped and
    started again under traffic both ways: the two streams' results, the node and the spines'
    BFD sessions with it once it settled again (taken before leaf1 stops for good)."""
    leaf1 = GlbdNode(fab, "leaf1", run_dir, GlbdOptions(bfd_interval_ms=100))
    full = mode in (None, "full")
    if mode is not None:
        text = leaf1.config.read_text().replace("[bgp]\n", f'[bgp]\ngraceful_restart = "{mode}"\n')
        leaf1.config.write_text(text)
    leaf1.start()
    try:
        leaf1.wait_ready(60)
        wait_until(lambda: settled(fab, frr, leaf1, full), 90, what="leaf1 settled")
        for s in SPINES:
            frr[s].wait_bfd_up([fab.addr("leaf1", s)], timeout=30)
        h1, h2 = fab.ns("host1"), fab.ns("host2")
        a1, a2 = fab.addr("host1", "leaf1"), fab.addr("host2", "leaf2")
        with Stream(h1, h2, a2, port=47_001) as up, Stream(h2, h1, a1, port=47_002) as down:
            wait_until(lambda: up.received() > 200 and down.received() > 200, 30, what="traffic")
            armed = leaf1.request("graceful-restart")
            assert armed["armed"] is True, armed
            if full:
                assert armed["next_stop"] == "graceful_restart", armed
                assert sorted(armed["keep"]) == sorted(fab.addr(s, "leaf1") for s in SPINES)
            else:
                assert armed["next_stop"] == "planned" and armed["fallback"] == "not_full", armed
            status = leaf1.request("status")["graceful_restart"]
            assert status["armed"] and status["expires_in_s"] > 0, status
            assert leaf1.stop(30) == 0, leaf1.tail()
            leaf1.start()
            leaf1.wait_ready(60)
            wait_until(lambda: settled(fab, frr, leaf1, full), 120, what="the new glbd settled")
            # a few hundred datagrams more through the settled fabric
            mark = (up.received(), down.received())
            wait_until(
                lambda: up.received() > mark[0] + 300 and down.received() > mark[1] + 300,
                30,
                what="traffic after the restart",
            )
            up.stop_sending()
            down.stop_sending()
            bfd = frr_bfd_status(fab, frr)
        return up.result(), down.result(), leaf1, bfd
    finally:
        leaf1.stop()


@pytest.mark.parametrize("mode", [None, "helper"], ids=["default", "helper"])
def test_armed_restart_loses_nothing(
    fabric: tuple[Fabric, dict[str, FrrInstance]], tmp_path: Path, mode: str | None
) -> None:
    fab, frr = fabric
    up, down, leaf1, bfd = run_restart(fab, frr, tmp_path, mode)
    name = mode or "default (full)"
    print(f"\ngraceful_restart {name}:\n  host1 -> host2 {up}\n  host2 -> host1 {down}")
    stopping = leaf1.events("glbd_stopping")
    assert stopping, leaf1.tail()
    if mode == "helper":
        assert stopping[0]["stop"] == "planned"
        (fb,) = leaf1.events("graceful_stop_fallback")
        assert fb["fallback"] == "not_full"
        assert up["lost"] + down["lost"] > 0  # the planned stop's cost, for comparison
        return
    assert stopping[0]["stop"] == "graceful_restart"
    assert leaf1.events("graceful_restart_bfd_admin_down")[0]["sessions"] == 2
    assert up["lost"] == 0 and down["lost"] == 0, (up, down)
    # the spines counted no BFD failure: AdminDown, then Up again with the new glbd
    assert bfd == dict.fromkeys(SPINES, "up"), bfd


def test_armed_restart_between_glbds_keeps_the_routes(netns_lab: Lab, tmp_path: Path) -> None:
    """The same with glbd everywhere (spines: helpers, leaves: load balancers, every option at
    its default but the lab's timers): leaf1's spines take its AdminDown for no failure, help
    it through the restart (``gr_helping``) and the new glbd's End-of-RIB ends that; nothing
    is lost either way."""
    if os.geteuid() != 0:
        pytest.skip("needs root")
    fab = Fabric(TOPO, lab=netns_lab).build()
    nodes = start_glbd(fab, tmp_path, GlbdOptions())
    try:
        leaf1 = nodes["leaf1"]

        def spine_row(s: str) -> dict[str, Any]:
            rows = nodes[s].request("neighbors")
            return next(r for r in rows if r["peer"] == fab.addr("leaf1", s))

        def settled_all() -> bool:
            rows = leaf1.request("neighbors")
            if len(rows) != 2 or any(
                r["state"] != "up"
                or not r["counters"].get("eor_in")
                or not r["counters"].get("eor_out")
                for r in rows
            ):
                return False
            if any(b["state"] != "up" for b in leaf1.request("bfd")):
                return False
            if any(spine_row(s)["state"] != "up" or spine_row(s)["gr_helping"] for s in SPINES):
                return False
            if len(kernel_group_for(fab, "leaf1", P2)) != 2:
                return False
            if len(kernel_group_for(fab, "leaf2", P1)) != 2:
                return False
            # a spine programs its FIB 1 s after its first session came up (fibservice.FIB_HOLD_S)
            return all(kernel_group_for(fab, s, p) for s in SPINES for p in (P1, P2))

        wait_until(settled_all, 90, what="the glbd fabric settled")
        h1, h2 = fab.ns("host1"), fab.ns("host2")
        a1, a2 = fab.addr("host1", "leaf1"), fab.addr("host2", "leaf2")
        with Stream(h1, h2, a2, port=47_003) as up, Stream(h2, h1, a1, port=47_004) as down:
            wait_until(lambda: up.received() > 200 and down.received() > 200, 30, what="traffic")
            assert leaf1.request("graceful-restart")["next_stop"] == "graceful_restart"
            assert leaf1.stop(30) == 0, leaf1.tail()
            helping = wait_until(
                lambda: all(spine_row(s)["gr_helping"] for s in SPINES), 10, what="spines help"
            )
            leaf1.start()
            leaf1.wait_ready(60)
            wait_until(settled_all, 120, what="the new glbd settled")
            mark = (up.received(), down.received())
            wait_until(
                lambda: up.received() > mark[0] + 300 and down.received() > mark[1] + 300,
                30,
                what="traffic after the restart",
            )
            up.stop_sending()
            down.stop_sending()
        u, d = up.result(), down.result()
        print(f"\nglbd fabric, default:\n  host1 -> host2 {u}\n  host2 -> host1 {d}")
        assert helping
        for s in SPINES:
            assert spine_row(s)["counters"].get("bfd_admin_down", 0) >= 1
        assert u["lost"] == 0 and d["lost"] == 0, (u, d)
    finally:
        stop_all(nodes)
