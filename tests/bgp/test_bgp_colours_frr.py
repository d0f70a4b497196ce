"""Fabric colours (docs/colours.md) against FRR 10.x in namespaces: a glbd spine with a green
session to FRR leaf2 and a blue one to FRR leaf3. leaf2 colours its routes with an outbound
route-map (``set extcommunity color``): its green route is used, its blue one is kept but
hidden (shown and counted, never forwarded nor re-advertised), its uncoloured one goes
everywhere; a reload that recolours leaf2's session flips which one is hidden without touching
the session. Sending: glbd's coloured origination (primary copy green, backup copy blue) and a
coloured route it passes on reach FRR with their Color Extended Community, which an FRR route-map
matches (``match extcommunity``)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

import pytest
from bgp_helpers import A, N, frr_bgp_conf, frr_paths, link, make_node, stop_all, wait_for
from glbdlab.frr import FrrInstance
from glbdlab.netns import Lab

from glbd.bgp.ribtypes import Advertise, Role
from glbd.bgp.speaker import command_for
from glbd.colours.colour import ColourCommunity
from glbd.colours.colours import Origination

pytestmark = [pytest.mark.netns, pytest.mark.frr, pytest.mark.slow]

GREEN, BLUE = 1, 2
P_GREEN, P_BLUE, P_PLAIN = "10.1.0.0/24", "10.2.0.0/24", "10.3.0.0/24"
OWN = "10.100.0.0/24"  # glbd's: green, backup blue


def leaf2_conf(peer: str) -> str:
    """FRR leaf2 announcing a green, a blue and an uncoloured prefix to ``peer``. FRR 10.7 writes
    a colour with its two CO bits first (RFC 9256 §8.8: the top of the flags), ``00:1``."""
    conf = frr_bgp_conf(
        65002,
        "10.0.0.2",
        [(peer, 65100)],
        networks=[P_GREEN, P_BLUE, P_PLAIN],
        neighbor_extra={peer: ["route-map COLOUR out"]},
        multipath=False,
    )
    return conf + "\n".join(
        [
            f"ip prefix-list GREEN seq 5 permit {P_GREEN}",
            f"ip prefix-list BLUE seq 5 permit {P_BLUE}",
            "route-map COLOUR permit 10",
            " match ip address prefix-list GREEN",
            f" set extcommunity color 00:{GREEN}",
            "route-map COLOUR permit 20",
            " match ip address prefix-list BLUE",
            f" set extcommunity color 00:{BLUE}",
            "route-map COLOUR permit 30",
            "",
        ]
    )


#: the local preference FRR leaf3 sets on a route whose colour its route-map matches
BLUE_PREF = 222


def leaf3_conf(peer: str) -> str:
    """FRR leaf3, whose inbound route-map matches the blue colour community (``match
    extcommunity`` on an expanded list over FRR's text form, ``Color:00:2``) and marks what it
    matched with a local preference."""
    conf = frr_bgp_conf(
        65003,
        "10.0.0.3",
        [(peer, 65100)],
        neighbor_extra={peer: ["route-map BLUE-IN in"]},
        multipath=False,
    )
    return conf + "\n".join(
        [
            f"bgp extcommunity-list expanded BLUE seq 5 permit Color:[0-9]+:{BLUE}$",
            "route-map BLUE-IN permit 10",
            " match extcommunity BLUE",
            f" set local-preference {BLUE_PREF}",
            "route-map BLUE-IN permit 20",
            "",
        ]
    )


def frr_colours(frr: FrrInstance, prefix: str) -> list[list[int]] | None:
    """The colours of each of FRR's paths for ``prefix`` (from ``extendedCommunity``'s text,
    FRR's ``Color:`` items), None when it has no path."""
    paths = frr_paths(frr, prefix)
    if not paths:
        return None
    out = []
    for p in paths:
        text = str((p.get("extendedCommunity") or {}).get("string", ""))
        out.append(sorted(int(m) for m in re.findall(r"(?i)colou?r:(?:\d+:)?(\d+)", text)))
    return out


def test_the_speaker_puts_a_routes_colours_in_the_exabgp_command() -> None:
    adv = Advertise(A("192.0.2.1"), N("10.0.0.0/24"), A("192.0.2.2"), (65100,))
    cmd = command_for(replace(adv, colours=(ColourCommunity(1),))).encode()
    assert "extended-community [ 0x030b000000000001 ]" in cmd, cmd


def spine(
    s1: Any,
    l2: tuple[str, str],
    l3: tuple[str, str],
    originated: tuple[str, ...] = (),
    origin_colours: tuple[tuple[Any, Origination], ...] = (),
) -> Any:
    """glbd spine1 (AS 65100): leaf2's session green, leaf3's blue."""
    node = make_node(
        s1.name,
        "10.0.0.11",
        65100,
        Role.HELPER,
        [(l2[0], 65002, l2[1], "s1-l2"), (l3[0], 65003, l3[1], "s1-l3")],
        originated,
        origin_colours=origin_colours,
    )
    p = node.speaker.params
    colours = (replace(p.neighbors[0], colour=GREEN), replace(p.neighbors[1], colour=BLUE))
    node.speaker.reconfigure(replace(p, neighbors=colours))
    return node


async def test_frr_colours_are_hidden_or_used_by_session_colour_and_a_reload_flips_them(
    netns_lab: Lab,
) -> None:
    lab = netns_lab
    s1, l2, l3 = lab.netns("spine1"), lab.netns("leaf2"), lab.netns("leaf3")
    leaf2, spine2 = link(lab, l2, "l2-s1", s1, "s1-l2", "172.16.12")
    leaf3, spine3 = link(lab, l3, "l3-s1", s1, "s1-l3", "172.16.13")
    node = spine(s1, (leaf2, spine2), (leaf3, spine3))
    try:
        FrrInstance(l2, hostname="leaf2").start(leaf2_conf(spine2))
        frr3 = FrrInstance(l3, hostname="leaf3").start(
            frr_bgp_conf(65003, "10.0.0.3", [(spine3, 65100)], multipath=False)
        )
        await node.speaker.start()
        rib = node.speaker.rib

        def fwd() -> list[str]:
            return sorted(str(p) for p in rib.forwarding())

        def rows() -> dict[str, dict[str, Any]]:
            return {r["prefix"]: r for r in rib.received(A(leaf2))}

        def counters() -> dict[str, int]:
            snap = node.speaker.neighbors_snapshot()
            return dict(next(r for r in snap if r["peer"] == leaf2)["counters"])

        await wait_for(lambda: len(rows()) == 3, 60, "leaf2's three routes")
        await wait_for(lambda: fwd() == [P_GREEN, P_PLAIN], 30, "the green and plain ones used")
        got = rows()
        print(f"\nglbd's received from leaf2: {json.dumps(got, indent=1)}")
        assert got[P_GREEN]["colours"] == ["color:0:1"] and got[P_GREEN]["hidden"] is None
        assert got[P_BLUE]["colours"] == ["color:0:2"]
        assert got[P_BLUE]["hidden"] == "colour_mismatch" and got[P_BLUE]["used"] is False
        assert got[P_PLAIN]["colours"] == [] and got[P_PLAIN]["hidden"] is None
        assert counters()["hidden_colour_mismatch"] == 1
        assert rib.counters["hidden_colour_mismatch"] == 1
        # leaf3's session is blue: the uncoloured route reaches it, the green one does not,
        # and the hidden blue one is never re-advertised
        await wait_for(lambda: frr_paths(frr3, P_PLAIN), 30, "the uncoloured route at leaf3")
        assert frr_paths(frr3, P_GREEN) == [] and frr_paths(frr3, P_BLUE) == []

        # a reload colours leaf2's session blue: the session stays, the routes swap
        established = counters()["established"]
        p = node.speaker.params
        node.speaker.reconfigure(
            replace(p, neighbors=(replace(p.neighbors[0], colour=BLUE), p.neighbors[1]))
        )
        await wait_for(lambda: fwd() == [P_BLUE, P_PLAIN], 30, "the blue one used now")
        assert rows()[P_GREEN]["hidden"] == "colour_mismatch" and rows()[P_BLUE]["hidden"] is None
        assert counters()["hidden_colour_mismatch"] == 1
        assert counters()["established"] == established
        assert node.speaker.neighbors_snapshot()[0]["state"] == "up"
        # the blue route is advertised to blue leaf3 now
        await wait_for(lambda: frr_paths(frr3, P_BLUE), 30, "the blue route at leaf3")
        assert frr_paths(frr3, P_GREEN) == []
    finally:
        await stop_all((node,))


async def test_coloured_origination_and_pass_through_reach_frr_with_the_community(
    netns_lab: Lab,
) -> None:
    lab = netns_lab
    s1, l2, l3 = lab.netns("spine1"), lab.netns("leaf2"), lab.netns("leaf3")
    leaf2, spine2 = link(lab, l2, "l2-s1", s1, "s1-l2", "172.16.12")
    leaf3, spine3 = link(lab, l3, "l3-s1", s1, "s1-l3", "172.16.13")
    node = spine(
        s1,
        (leaf2, spine2),
        (leaf3, spine3),
        originated=(OWN,),
        origin_colours=((N(OWN), Origination(GREEN, (BLUE,))),),
    )
    try:
        frr2 = FrrInstance(l2, hostname="leaf2").start(leaf2_conf(spine2))
        frr3 = FrrInstance(l3, hostname="leaf3").start(leaf3_conf(spine3))
        await node.speaker.start()
        # the primary copy to green leaf2, the backup copy, blue, to blue leaf3
        await wait_for(lambda: frr_colours(frr2, OWN) == [[GREEN]], 60, "green copy at leaf2")
        await wait_for(lambda: frr_colours(frr3, OWN) == [[BLUE]], 30, "blue copy at leaf3")
        print(f"\nFRR leaf3's path for {OWN}: {json.dumps(frr_paths(frr3, OWN))}")
        # leaf3's inbound route-map matched glbd's colour (match extcommunity)
        assert [p.get("locPrf") for p in frr_paths(frr3, OWN)] == [BLUE_PREF]

        # leaf2's session uncoloured: its blue route is used and passed on to leaf3 as it came
        p = node.speaker.params
        node.speaker.reconfigure(
            replace(p, neighbors=(replace(p.neighbors[0], colour=None), p.neighbors[1]))
        )
        await wait_for(lambda: frr_colours(frr3, P_BLUE) == [[BLUE]], 30, "blue passed on")
        assert frr_colours(frr3, P_GREEN) is None  # green: not to a blue session
        await wait_for(lambda: frr_colours(frr2, OWN) == [[GREEN]], 30, "uncoloured: primary")
    finally:
        await stop_all((node,))
