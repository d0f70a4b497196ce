"""``glbctl drain`` on a real glbd fabric (2 spines x 2 leaves of namespaces): a drained spine
advertises band 0 in its heartbeats and its routes with GRACEFUL_SHUTDOWN, the leaves' kernels
move every prefix to the other spine with the sessions up; a reload keeps the drain; undrain
brings both spines back."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from glbdlab.nodes import GlbdNode, GlbdOptions, kernel_group_for, start_glbd, stop_all, wait_until
from glbdlab.topology import Fabric, leaf_spine

pytestmark = [pytest.mark.netns, pytest.mark.slow]

TOPO = leaf_spine(2, 2)
P2 = TOPO.node("leaf2").prefix4


def spine_addr(spine: str, leaf: str) -> str:
    return TOPO.link(spine, leaf).end(spine)[1].split("/")[0]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Fabric, dict[str, GlbdNode]]]:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    fab = Fabric(TOPO)
    nodes: dict[str, GlbdNode] = {}
    try:
        fab.build()
        nodes = start_glbd(fab, Path(tmp_path_factory.mktemp("drain")), GlbdOptions())
        yield fab, nodes
    finally:
        stop_all(nodes)
        fab.destroy()


def test_drain_reload_undrain(lab: tuple[Fabric, dict[str, GlbdNode]]) -> None:
    fab, nodes = lab
    s1, s2 = spine_addr("spine1", "leaf1"), spine_addr("spine2", "leaf1")
    spine1, leaf1 = nodes["spine1"], nodes["leaf1"]

    def via() -> set[str]:
        return set(kernel_group_for(fab, "leaf1", P2))

    def spine1_bands() -> set[int]:
        (hb,) = leaf1.request("heartbeats")
        senders = (hb.get("receiver") or {}).get("senders", [])
        return {
            e["band"]
            for s in senders
            if s["node_id"] == TOPO.node("spine1").router_id
            for e in s["entries"]
        }

    wait_until(lambda: via() == {s1, s2}, 60, what="leaf1 reaches leaf2 via both spines")
    assert spine1.request("status")["drained"] is False
    res = spine1.request("drain")
    assert res["drained"] is True and spine1.request("status")["drained"] is True
    wait_until(lambda: spine1_bands() == {0}, 10, what="spine1's links at band 0 at leaf1")
    wait_until(lambda: via() == {s2}, 30, what="leaf1 via spine2 only")
    rows = {n["peer"]: n for n in leaf1.request("neighbors")}
    assert rows[s1]["state"] == "up" and rows[s1]["counters"]["graceful_shutdown_in"] >= 1
    # a reload (same file) keeps the commanded drain
    assert spine1.request("reload")["ok"]
    assert spine1.request("status")["drained"] is True and via() == {s2}
    res = spine1.request("undrain")
    assert res["drained"] is False
    wait_until(lambda: via() == {s1, s2}, 30, what="leaf1 via both spines again")
    wait_until(lambda: 0 not in spine1_bands(), 10, what="spine1's measured bands again")
