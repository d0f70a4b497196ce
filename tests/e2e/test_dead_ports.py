"""A router boots with ports down: glbd starts with the neighbours it can reach and adds the
others when their port comes up; a port deleted later takes its neighbour back to waiting.

leaf1 (automatic local addresses, as in conf/leaf.toml) starts with its port to spine2 down and
its port to spine3 not there at all; spine3's only port is missing too. Real glbd daemons on a
3-spine x 1-leaf fabric of namespaces.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from glbdlab.nodes import GlbdNode, GlbdOptions, stop_all, wait_until
from glbdlab.topology import Fabric

pytestmark = [pytest.mark.netns, pytest.mark.slow]

TIMEOUT = 60.0


def _row(rows: list[dict[str, Any]], peer: str) -> dict[str, Any]:
    return next(r for r in rows if r["peer"] == peer)


def _up(node: GlbdNode, peer: str) -> bool:
    """BGP established and BFD Up with ``peer``, as glbctl shows them."""
    bgp = _row(node.request("neighbors"), peer)
    bfd = _row(node.request("bfd"), peer)
    return bool(bgp["state"] == "up" and str(bfd["state"]).lower() == "up")


def _waiting_for_port(node: GlbdNode, peer: str) -> bool:
    """``peer`` shown waiting for its interface by ``glbctl neighbors`` and ``glbctl bfd``."""
    bgp = _row(node.request("neighbors"), peer)
    bfd = _row(node.request("bfd"), peer)
    return bool(bgp["state"] == bfd["state"] == "waiting_for_interface")


def _create_link(fab: Fabric, a: str, b: str) -> None:
    """(Re)create the veth a--b with its addresses, as the topology has it."""
    ln = fab.topo.link(a, b)
    fab.lab.veth(
        fab.ns(ln.a),
        ln.a_if,
        fab.ns(ln.b),
        ln.b_if,
        a_addr=[ln.a_addr4, ln.a_addr6],
        b_addr=[ln.b_addr4, ln.b_addr6],
    )


def _reload_renaming_spine1(node: GlbdNode, name: str) -> None:
    """Reload ``node`` with spine1's description changed (the neighbors changed: every part
    re-reads them) and check every part took it."""
    text = node.config.read_text()
    node.config.write_text(text.replace('description = "spine1', f'description = "{name}'))
    assert node.request("reload", timeout=30)["ok"]
    assert node.events("reconfigure_failed") == []


def test_leaf_starts_with_a_down_and_a_missing_port_and_adds_them_when_they_come_up(
    lab_fabric: Callable[..., Fabric], tmp_path: Path
) -> None:
    fab = lab_fabric(spines=3, leaves=1, hosts=False)
    topo = fab.topo
    link3 = topo.link("leaf1", "spine3")
    fab.cut("leaf1", "spine2")  # leaf1's end administratively down: no route, no source address
    fab.ns("leaf1").ip("link", "del", link3.a_if)  # deletes both ends of the veth
    peer = {s: fab.addr(s, "leaf1") for s in ("spine1", "spine2", "spine3")}

    opts = GlbdOptions(bfd_interval_ms=100)
    nodes = {n: GlbdNode(fab, n, tmp_path, opts) for n in ("leaf1", "spine1", "spine2", "spine3")}
    leaf = nodes["leaf1"]
    # the leaf finds its source addresses itself, as in production
    leaf.config.write_text(
        "".join(
            ln
            for ln in leaf.config.read_text().splitlines(keepends=True)
            if not ln.startswith("local_address")
        )
    )
    try:
        for n in nodes.values():
            n.start()
        for n in nodes.values():
            n.wait_ready()

        wait_until(lambda: _up(leaf, peer["spine1"]), TIMEOUT, what="BGP + BFD with spine1")
        bgp = leaf.request("neighbors")
        bfd = leaf.request("bfd")
        assert _row(bgp, peer["spine2"])["state"] == "no_local_address"
        assert _row(bfd, peer["spine2"])["state"] == "no_local_address"
        assert _row(bgp, peer["spine3"])["state"] == "waiting_for_interface"
        assert _row(bfd, peer["spine3"])["state"] == "waiting_for_interface"
        assert _row(nodes["spine3"].request("neighbors"), fab.addr("leaf1", "spine3"))["state"] == (
            "waiting_for_interface"
        )

        # a reload while ports are down: the waiting neighbors stay waiting
        _reload_renaming_spine1(leaf, "spine1 a")
        assert _row(leaf.request("neighbors"), peer["spine3"])["state"] == "waiting_for_interface"

        fab.restore("leaf1", "spine2")
        wait_until(lambda: _up(leaf, peer["spine2"]), TIMEOUT, what="BGP + BFD with spine2")

        _create_link(fab, "leaf1", "spine3")
        wait_until(lambda: _up(leaf, peer["spine3"]), TIMEOUT, what="BGP + BFD with spine3")
        for n, ifname in ((leaf, link3.a_if), (nodes["spine3"], link3.b_if)):  # heartbeats too
            wait_until(
                lambda n=n, ifname=ifname: ifname in n.request("heartbeats")[0]["sockets"],
                TIMEOUT,
                what=f"a heartbeat socket on {n.name}'s {ifname}",
            )
        assert _up(leaf, peer["spine1"])
        # one log line per neighbour that waited, however often it was retried
        waits = leaf.events("neighbor_waiting")
        assert sorted((w["neighbor"], w["reason"]) for w in waits) == [
            (peer["spine2"], "no_local_address"),
            (peer["spine3"], "waiting_for_interface"),
        ]

        # a port that goes down later: a reload keeps its sessions, which come back with it
        fab.cut("leaf1", "spine2")
        _reload_renaming_spine1(leaf, "spine1 b")
        assert _row(leaf.request("neighbors"), peer["spine2"])["state"] != "no_local_address"
        fab.restore("leaf1", "spine2")
        wait_until(lambda: _up(leaf, peer["spine2"]), TIMEOUT, what="BGP + BFD with spine2 again")

        # a port deleted later, no reload: its neighbour waits again (its BGP session out of
        # ExaBGP and its BFD session out of the engine: glbctl shows the waiting rows, which
        # it shows only for neighbours neither has), and comes back with the port
        fab.ns("leaf1").ip("link", "del", link3.a_if)
        wait_until(
            lambda: _waiting_for_port(leaf, peer["spine3"]), TIMEOUT, what="spine3 waiting again"
        )
        assert _up(leaf, peer["spine1"]) and _up(leaf, peer["spine2"])
        _create_link(fab, "leaf1", "spine3")
        wait_until(lambda: _up(leaf, peer["spine3"]), TIMEOUT, what="BGP + BFD with spine3 again")
        assert len(leaf.events("neighbor_waiting")) == 3  # the new wait, logged once

        # a port deleted later, then a reload: the neighbour stays waiting (ExaBGP cannot bind
        # its old address), the others keep running, and it comes back with the port
        fab.ns("leaf1").ip("link", "del", link3.a_if)
        _reload_renaming_spine1(leaf, "spine1 c")
        wait_until(
            lambda: _waiting_for_port(leaf, peer["spine3"]), TIMEOUT, what="spine3 waiting again"
        )
        _create_link(fab, "leaf1", "spine3")
        wait_until(lambda: _up(leaf, peer["spine3"]), TIMEOUT, what="BGP + BFD with spine3 again")
        assert _up(leaf, peer["spine2"])
        assert len(leaf.events("neighbor_waiting")) == 4  # the new wait, logged once
        # the healthy neighbour never went down
        assert [e for e in leaf.events("bgp_peer_down") if e["peer"] == peer["spine1"]] == []
    finally:
        stop_all(nodes)
