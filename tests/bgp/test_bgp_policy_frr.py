"""Policy basics against FRR 10.x in namespaces: a glbd spine with an import prefix list, IPv4
only, and max_prefixes teardown toward an FRR leaf. FRR sees only the IPv4 unicast capability,
the denied prefix never reaches glbd's forwarding, and once FRR sends one prefix too many the
session closes with Cease/Maximum Number of Prefixes Reached and stays down until the restart
time has passed: no session at all meanwhile, on either side."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import pytest
from bgp_helpers import frr_bgp_conf, link, make_node, stop_all, wait_for
from glbdlab.frr import FrrInstance
from glbdlab.netns import Lab

from glbd.bgp import prefixlist
from glbd.bgp.ribtypes import Role

pytestmark = [pytest.mark.netns, pytest.mark.frr, pytest.mark.slow]


def frr_conf(peer: str, networks: Iterable[str]) -> str:
    """FRR leaf2 with ``peer`` activated for IPv4 and IPv6 unicast."""
    return frr_bgp_conf(
        65002, "10.0.0.2", [(peer, 65100)], networks=networks, multipath=False, ipv6=True
    )


async def test_import_filter_families_and_max_prefixes_teardown(netns_lab: Lab) -> None:
    lab = netns_lab
    s1, l2 = lab.netns("spine1"), lab.netns("leaf2")
    leaf, spine = link(lab, l2, "l2-s1", s1, "s1-l2", "172.16.12")
    node = make_node(s1.name, "10.0.0.11", 65100, Role.HELPER, [(leaf, 65002, spine, "s1-l2")])
    n = node.speaker.params.neighbors[0]
    node.speaker.reconfigure(
        replace(
            node.speaker.params,
            neighbors=(
                replace(
                    n,
                    families=(4,),
                    import_filter=prefixlist.parse(["deny 10.9.0.0/16 le 32", "10.0.0.0/8 le 24"]),
                    max_prefixes=3,
                    max_prefixes_restart_s=8.0,
                ),
            ),
        )
    )
    nets = ["10.1.0.0/24", "10.2.0.0/24", "10.9.1.0/24"]
    try:
        frr = FrrInstance(l2, hostname="leaf2").start(frr_conf(spine, nets))
        await node.speaker.start()

        def exabgp_config() -> str:
            return node.speaker.supervisor.config_path.read_text()

        def row() -> dict[str, Any]:
            return node.speaker.neighbors_snapshot()[0]

        def counters() -> dict[str, int]:
            return dict(row()["counters"])

        def fwd() -> list[str]:
            return sorted(str(p) for p in node.speaker.rib.forwarding())

        await wait_for(lambda: fwd() == ["10.1.0.0/24", "10.2.0.0/24"], 60, "permitted routes")
        assert counters()["rejected_import_denied"] == 1
        nb = frr.vtysh_json(f"show bgp neighbors {spine} json")[spine]
        mp = nb["neighborCapabilities"]["multiprotocolExtensions"]
        print(f"\nFRR's view of glbd's families: {json.dumps(mp)}")
        assert "advertisedAndReceived" in json.dumps(mp["ipv4Unicast"])
        assert "received" not in json.dumps(mp.get("ipv6Unicast", {})).lower().replace(
            "advertised", ""
        )

        # sessions FRR has seen come up, before the hold (a reconnection during it adds one)
        frr_established = nb["connectionsEstablished"]
        # two more permitted prefixes: 4 > 3, Cease/1 and the session is held down
        frr.vtysh(
            "configure terminal",
            "router bgp 65002",
            "address-family ipv4 unicast",
            "network 10.3.0.0/24",
            "network 10.4.0.0/24",
        )
        await wait_for(lambda: counters().get("rejected_max_prefixes", 0) >= 1, 30, "teardown")
        assert fwd() == []
        established = counters()["established"]
        await wait_for(
            lambda: (
                "Maximum Number of Prefixes"
                in json.dumps(frr.vtysh_json(f"show bgp neighbors {spine} json"))
            ),
            30,
            "FRR saw Cease/Maximum Number of Prefixes Reached",
        )
        # held down: ExaBGP's config leaves the neighbor out until the restart time
        await wait_for(lambda: "neighbor 172.16.12.1" not in exabgp_config(), 30, "held down")
        assert fwd() == []
        # FRR withdraws two: after the restart time the session stays up
        frr.vtysh(
            "configure terminal",
            "router bgp 65002",
            "address-family ipv4 unicast",
            "no network 10.3.0.0/24",
            "no network 10.4.0.0/24",
        )
        await wait_for(lambda: fwd() == ["10.1.0.0/24", "10.2.0.0/24"], 60, "back after hold")
        assert row()["state"] == "up"
        # none during the hold: one that came up while held is closed again at once and
        # counted. After it, one session or two: on a busy CI machine the first session after
        # the hold was once closed within a second, ExaBGP giving no reason (both ends connect
        # as the hold ends), and the second stayed up
        assert counters().get("max_prefixes_held", 0) == 0, counters()
        assert 1 <= counters()["established"] - established <= 2, counters()
        nb = frr.vtysh_json(f"show bgp neighbors {spine} json")[spine]
        assert 1 <= nb["connectionsEstablished"] - frr_established <= 2, nb[
            "connectionsEstablished"
        ]
    finally:
        await stop_all((node,))
