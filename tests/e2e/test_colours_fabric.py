"""Fabric colours end to end (docs/colours.md): a 3 x 2 leaf-spine fabric with glbd on every
node. spine1's sessions are green, spine2's blue, spine3's red; leaf2 originates its prefix
green with blue and red as backups, so the primary copy (AIGP 0) reaches leaf1 through spine1
only and the backup copies through spine2 and spine3.

leaf1 must route leaf2's prefix through spine1 alone, with a standby route through spine2 and
spine3 pre-armed at the next metric. When leaf1's link to spine1 loses carrier the kernel moves
the traffic to the standby route; when spine1 loses leaf2 (a remote failure) glbd moves it.
Either way the colour comes back to spine1 only after the hold-down, and host1 reaches host2
throughout."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from glbdlab.frr import start_fabric_frr
from glbdlab.netns import Lab
from glbdlab.nodes import GlbdNode, GlbdOptions, start_glbd, stop_all, wait_until
from glbdlab.topology import Fabric, leaf_spine

pytestmark = [pytest.mark.netns, pytest.mark.slow]

TOPO = leaf_spine(3, 2)
P2 = str(TOPO.node("leaf2").prefix4)
HOLD_S = 3.0
NAMES = "{ green = 1, blue = 2, red = 3 }"
SPINE_COLOUR = {"spine1": "green", "spine2": "blue", "spine3": "red"}
#: nftables: a spine stops sending BFD (single-hop control, UDP 3784); its links stay up
SILENCE_BFD = (
    "add table inet glbcolours\n"
    "add chain inet glbcolours out { type filter hook output priority 0; }\n"
    "add rule inet glbcolours out udp dport 3784 drop\n"
)


def colour_config(fab: Fabric) -> dict[str, str]:
    """Per node: the spines colour every session, the leaves each uplink by its spine."""
    extra = {
        s: f'[colours]\nnames = {NAMES}\ndefault = "{c}"\nhold_down_s = {HOLD_S}'
        for s, c in SPINE_COLOUR.items()
    }
    for leaf in ("leaf1", "leaf2"):
        lines = ["[colours]", f"names = {NAMES}", f"hold_down_s = {HOLD_S}"]
        for s, c in SPINE_COLOUR.items():
            lines += [
                "[[colours.session]]",
                f'interface = "{fab.ifname(leaf, s)}"',
                f'colour = "{c}"',
            ]
        extra[leaf] = "\n".join(lines)
    extra["leaf2"] += (
        f'\n[[colours.originate]]\nprefix = "{P2}"\ncolour = "green"\n'
        'backup_colours = ["blue", "red"]'
    )
    return extra


def routes_by_metric(fab: Fabric, node: str, prefix: str) -> dict[int, set[str]]:
    """metric -> the gateways of that route's nexthop group (kernel truth)."""
    ns = fab.ns(node)
    nhs = {nh["id"]: nh for nh in json.loads(ns.ip("-j", "nexthop", "show").stdout or "[]")}
    out: dict[int, set[str]] = {}
    for r in json.loads(ns.ip("-j", "route", "show", prefix, check=False).stdout or "[]"):
        grp = nhs.get(r.get("nhid"), {})
        out[int(r.get("metric", 0))] = {
            nhs[m["id"]]["gateway"] for m in grp.get("group", []) if m["id"] in nhs
        }
    return out


def path(node: GlbdNode) -> dict[str, Any]:
    (row,) = [r for r in node.request("colours")["paths"] if r["colour"] == 1]
    return row


def gw(fab: Fabric, spine: str) -> str:
    return fab.addr(spine, "leaf1")


def bfd_up(node: GlbdNode, peer: str) -> bool:
    return any(r["peer"] == peer and str(r["state"]).lower() == "up" for r in node.request("bfd"))


def frr_spines(fab: Fabric) -> None:
    """FRR 10 on the spines: eBGP to every leaf with AIGP on (``neighbor X aigp``) and NNHN
    toward the leaves; FRR passes the colour community and the AIGP on, unchanged."""
    leaves = ["leaf1", "leaf2"]
    for s in SPINE_COLOUR:
        aigp = [f" neighbor {fab.addr(leaf, s)} aigp" for leaf in leaves]
        start_fabric_frr(fab, [s], extra_bgp=aigp, nhc_to=leaves, bfd_interval_ms=50)


@pytest.mark.parametrize("spines", ["glbd", pytest.param("frr", marks=pytest.mark.frr)])
def test_a_colour_takes_its_spine_falls_back_and_returns_after_the_hold_down(
    netns_lab: Lab, tmp_path: Path, spines: str
) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    fab = Fabric(TOPO, lab=netns_lab).build()
    if spines == "frr":
        frr_spines(fab)
    names = ["leaf1", "leaf2", *([] if spines == "frr" else SPINE_COLOUR)]
    nodes = start_glbd(fab, tmp_path, GlbdOptions(extra=colour_config(fab)), names=names)
    leaf1 = nodes["leaf1"]
    s1, backups = {gw(fab, "spine1")}, {gw(fab, "spine2"), gw(fab, "spine3")}
    h1, a2 = fab.ns("host1"), fab.addr("host2", "leaf2")
    try:
        # the primary route through spine1 alone, the backups pre-armed one metric higher
        wait_until(
            lambda: routes_by_metric(fab, "leaf1", P2) == {0: s1, 1: backups},
            90,
            what="leaf2's prefix through spine1, standby through spine2 and spine3",
        )
        row = path(leaf1)
        assert row["state"] == "primary" and row["prefixes"] == [P2]
        wait_until(lambda: h1.ping(a2), 60, what="host1 reaches host2")

        # local failure: leaf1's link to spine1 loses carrier; the kernel drops the primary
        # route and the standby one carries the traffic
        fab.ns("spine1").ip("link", "set", fab.ifname("spine1", "leaf1"), "down")
        wait_until(
            lambda: (
                0 not in routes_by_metric(fab, "leaf1", P2)
                or routes_by_metric(fab, "leaf1", P2).get(0) == backups
            ),
            10,
            what="off spine1",
        )
        wait_until(lambda: h1.ping(a2), 30, what="host1 reaches host2 in the fallback")
        wait_until(lambda: path(leaf1)["state"] == "fallback", 10, what="fallback")
        assert {"link_down", "bfd_down"} & set(path(leaf1)["reasons"])
        fab.ns("spine1").ip("link", "set", fab.ifname("spine1", "leaf1"), "up")
        # healthy again: the hold-down runs before the colour returns
        wait_until(lambda: path(leaf1)["hold_left_s"] is not None, 60, what="hold-down")
        assert path(leaf1)["state"] == "fallback"
        assert routes_by_metric(fab, "leaf1", P2).get(0) == backups
        wait_until(
            lambda: routes_by_metric(fab, "leaf1", P2) == {0: s1, 1: backups},
            60,
            what="back on spine1 after the hold-down",
        )
        back = path(leaf1)
        assert back["state"] == "primary" and back["fallbacks"] == 1
        assert back["last_switch"]["to"] == "primary"

        # BFD failure with the link up: spine1's BFD toward leaf1 silenced; the colour falls
        # back (the kernel group emptied by BFD's armed failover, then glbd's write) and
        # returns after the hold-down once BFD is up again
        # BFD must be Up again after the link's return (BGP may be back before it on a busy
        # machine): silencing a session that never came Up is no failure, only BGP's loss
        wait_until(lambda: bfd_up(leaf1, gw(fab, "spine1")), 60, what="leaf1's BFD to spine1 up")
        spine1 = fab.ns("spine1")
        spine1.run(["nft", "-f", "-"], input=SILENCE_BFD)
        try:
            wait_until(
                lambda: routes_by_metric(fab, "leaf1", P2).get(0) == backups, 30, what="BFD down"
            )
            # the kernel's armed failover may move the route before the daemon reads the event
            wait_until(lambda: "bfd_down" in path(leaf1)["reasons"], 30, what="reason bfd_down")
            wait_until(lambda: h1.ping(a2), 30, what="host1 reaches host2 with BFD down")
        finally:
            spine1.run(["nft", "delete", "table", "inet", "glbcolours"])
        wait_until(
            lambda: routes_by_metric(fab, "leaf1", P2) == {0: s1, 1: backups},
            90,
            what="back on spine1 after BFD is up and the hold-down",
        )
        assert path(leaf1)["fallbacks"] == 2

        # remote failure: spine1 loses leaf2; only glbd on leaf1 can move the colour
        fab.ns("leaf2").ip("link", "set", fab.ifname("leaf2", "spine1"), "down")
        wait_until(
            lambda: routes_by_metric(fab, "leaf1", P2).get(0) == backups, 30, what="remote fallback"
        )
        why = set(path(leaf1)["reasons"])
        assert why & {"bgp_withdrawn", "heartbeat_link_down", "quality_zero"}, why
        wait_until(lambda: h1.ping(a2), 30, what="host1 reaches host2 in the fallback")
        fab.ns("leaf2").ip("link", "set", fab.ifname("leaf2", "spine1"), "up")
        wait_until(
            lambda: routes_by_metric(fab, "leaf1", P2) == {0: s1, 1: backups},
            90,
            what="back on spine1 after the remote failure",
        )
        assert path(leaf1)["fallbacks"] == 3
        # the other direction is uncoloured: plain GLB over every spine, no standby route
        p1 = str(TOPO.node("leaf1").prefix4)
        assert set(routes_by_metric(fab, "leaf2", p1)) == {0}
    finally:
        stop_all(nodes)
