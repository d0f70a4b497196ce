"""Fabric colours in the RIB (docs/colours.md), in virtual time (every input carries ``now``):
a route coloured for another session colour is kept but hidden (never selected, never
re-advertised, shown and counted), a coloured route goes only to the sessions of its colours and
to uncoloured ones with its communities unchanged, coloured origination sends a primary copy and
backup copies, and a reload that changes a session's colour re-evaluates both."""

from __future__ import annotations

import ipaddress
from dataclasses import replace
from typing import Any

from glbd.base.reasons import HiddenReason
from glbd.bgp import exabgp_api as api
from glbd.bgp.rib import Rib
from glbd.bgp.ribtypes import (
    Advertise,
    NeighborParams,
    NextHopsChanged,
    Retract,
    RibParams,
    Role,
)
from glbd.colours.colour import ColourCommunity
from glbd.colours.colours import Origination

A = ipaddress.ip_address
N = ipaddress.ip_network
V4 = ipaddress.IPv4Address
C = ColourCommunity
GREEN, BLUE, RED = 1, 2, 3
HIDDEN = HiddenReason.COLOUR_MISMATCH.counter

#: a spine with a green leaf, a blue leaf and an uncoloured one
L1 = NeighborParams(A("172.16.11.1"), 65001, A("172.16.11.2"), "s1-l1", colour=GREEN)
L2 = NeighborParams(A("172.16.12.1"), 65002, A("172.16.12.2"), "s1-l2", colour=BLUE)
L3 = NeighborParams(A("172.16.13.1"), 65003, A("172.16.13.2"), "s1-l3")
LEAVES = (L1, L2, L3)


def spine(*leaves: NeighborParams, **kw: Any) -> Rib:
    """The spine's RIB (AS 65100) with ``leaves`` up; leaf i has BGP id 10.0.0.i."""
    kw.setdefault("update_coalesce_s", 0.0)
    r = Rib(RibParams(V4("10.0.0.11"), 65100, Role.HELPER, leaves or LEAVES, **kw))
    r.initial_decisions()
    for i, n in enumerate(leaves or LEAVES, 1):
        r.on_open(n.address, V4(f"10.0.0.{i}"))
        r.on_state(n.address, "up", 0.0)
    return r


def upd(
    n: NeighborParams,
    *prefixes: str,
    colours: tuple[ColourCommunity, ...] = (),
    as_path: tuple[int, ...] | None = None,
    withdraw: tuple[str, ...] = (),
) -> api.UpdateEvent:
    assert n.remote_as is not None
    path = as_path if as_path is not None else (n.remote_as,)
    return api.UpdateEvent(
        n.address,
        n.local_address,
        n.remote_as,
        65100,
        "receive",
        api.PathAttributes("igp", path, len(path), colours=colours),
        tuple(api.RouteAnnounced("ipv4 unicast", n.address, N(p)) for p in prefixes),
        tuple(("ipv4 unicast", N(p)) for p in withdraw),
    )


def adverts(effects: list[Any]) -> dict[tuple[str, str], Advertise]:
    return {(str(e.peer), str(e.prefix)): e for e in effects if isinstance(e, Advertise)}


def retracts(effects: list[Any]) -> set[tuple[str, str]]:
    return {(str(e.peer), str(e.prefix)) for e in effects if isinstance(e, Retract)}


def fwd(effects: list[Any]) -> dict[str, set[str]]:
    return {
        str(e.prefix): {str(h.peer) for h in e.next_hops}
        for e in effects
        if isinstance(e, NextHopsChanged)
    }


def row(r: Rib, peer: NeighborParams, prefix: str) -> dict[str, Any]:
    return next(x for x in r.received(peer.address) if x["prefix"] == prefix)


def counters(r: Rib, peer: NeighborParams) -> dict[str, int]:
    snap = r.neighbors_snapshot(0.0)
    c: dict[str, int] = next(x["counters"] for x in snap if x["peer"] == str(peer.address))
    return c


def out_to(r: Rib, peer: NeighborParams) -> dict[str, Advertise]:
    return {str(p): a for p, a in r.peers[peer.address].adj_out.items()}


# -- receiving ----------------------------------------------------------------------------------


def test_a_route_of_another_colour_is_kept_hidden_shown_and_counted() -> None:
    r = spine()
    eff = r.on_update(upd(L1, "10.1.0.0/24", colours=(C(BLUE),)), 1.0)
    assert eff == []  # not selected, not advertised
    assert r.next_hops(N("10.1.0.0/24")) == ()
    hid = row(r, L1, "10.1.0.0/24")
    assert hid["hidden"] == "colour_mismatch" and hid["used"] is False
    assert hid["colours"] == ["color:0:2"]
    assert counters(r, L1)[HIDDEN] == 1 and r.counters[HIDDEN] == 1
    assert r.neighbors_snapshot(0.0)[0]["prefixes_in"] == 1  # it is in the Adj-RIB-In

    # its own colour, several colours with its own among them, no colour: visible
    r.on_update(upd(L1, "10.2.0.0/24", colours=(C(GREEN),)), 2.0)
    r.on_update(upd(L1, "10.3.0.0/24", colours=(C(BLUE), C(GREEN))), 3.0)
    r.on_update(upd(L1, "10.4.0.0/24"), 4.0)
    for p in ("10.2.0.0/24", "10.3.0.0/24", "10.4.0.0/24"):
        assert row(r, L1, p)["hidden"] is None and row(r, L1, p)["used"] is True
    assert counters(r, L1)[HIDDEN] == 1

    # an uncoloured session hides nothing
    r.on_update(upd(L3, "10.5.0.0/24", colours=(C(RED),)), 5.0)
    assert row(r, L3, "10.5.0.0/24")["hidden"] is None
    assert HIDDEN not in counters(r, L3)


def test_the_gauge_follows_withdrawals_replacements_and_session_loss() -> None:
    r = spine()
    r.on_update(upd(L1, "10.1.0.0/24", "10.2.0.0/24", colours=(C(RED),)), 1.0)
    assert counters(r, L1)[HIDDEN] == 2 and r.counters[HIDDEN] == 2
    r.on_update(upd(L1, withdraw=("10.1.0.0/24",)), 2.0)
    assert counters(r, L1)[HIDDEN] == 1
    eff = r.on_update(upd(L1, "10.2.0.0/24", colours=(C(GREEN),)), 3.0)  # recoloured: visible
    assert counters(r, L1)[HIDDEN] == 0 and fwd(eff) == {"10.2.0.0/24": {str(L1.address)}}
    r.on_update(upd(L1, "10.2.0.0/24", colours=(C(RED),)), 4.0)  # and hidden again
    assert counters(r, L1)[HIDDEN] == 1 and r.next_hops(N("10.2.0.0/24")) == ()
    r.on_state(L1.address, "down", 5.0)
    assert counters(r, L1)[HIDDEN] == 0 and r.counters[HIDDEN] == 0


def test_a_neighbour_colouring_a_route_wrongly_cannot_attract_its_traffic() -> None:
    """L1 (green) sends a blue route with the shortest AS path: it is never a candidate, so
    the longer uncoloured path through L3 carries the prefix and L1 is sent that one."""
    r = spine()
    r.on_update(upd(L3, "10.9.0.0/24", as_path=(65003, 65010, 65011)), 1.0)
    eff = r.on_update(upd(L1, "10.9.0.0/24", colours=(C(BLUE),)), 2.0)
    assert eff == []
    assert {str(h.peer) for h in r.next_hops(N("10.9.0.0/24"))} == {str(L3.address)}
    assert out_to(r, L1)["10.9.0.0/24"].as_path == (65100, 65003, 65010, 65011)
    assert out_to(r, L2)["10.9.0.0/24"].colours == ()


# -- sending ------------------------------------------------------------------------------------


def test_a_coloured_route_goes_to_its_colours_and_the_uncoloured_with_the_community_as_is() -> None:
    r = spine()
    flagged = C(GREEN, flags=0x0005)  # flags are passed on unchanged, never read
    out = adverts(r.on_update(upd(L3, "10.1.0.0/24", colours=(flagged,)), 1.0))
    assert set(out) == {(str(L1.address), "10.1.0.0/24")}  # green only: L2 is blue
    assert out[(str(L1.address), "10.1.0.0/24")].colours == (flagged,)
    assert r.advertised(L1.address)[0]["colours"] == ["color:5:1"]

    out = adverts(r.on_update(upd(L1, "10.2.0.0/24", colours=(C(GREEN),)), 2.0))
    assert set(out) == {(str(L3.address), "10.2.0.0/24")}  # to the uncoloured session too
    assert out[(str(L3.address), "10.2.0.0/24")].colours == (C(GREEN),)

    two = (C(BLUE), C(GREEN))
    out = adverts(r.on_update(upd(L3, "10.3.0.0/24", colours=two), 3.0))
    assert {p for p, _ in out} == {str(L1.address), str(L2.address)}
    assert all(a.colours == two for a in out.values())  # wire order kept

    out = adverts(r.on_update(upd(L3, "10.4.0.0/24"), 4.0))
    assert {p for p, _ in out} == {str(L1.address), str(L2.address)}
    assert all(a.colours == () for a in out.values())


def test_a_recoloured_best_path_is_advertised_again() -> None:
    r = spine()
    r.on_update(upd(L3, "10.1.0.0/24", colours=(C(GREEN),)), 1.0)
    eff = r.on_update(upd(L3, "10.1.0.0/24", colours=(C(BLUE),)), 2.0)
    assert retracts(eff) == {(str(L1.address), "10.1.0.0/24")}
    assert adverts(eff)[(str(L2.address), "10.1.0.0/24")].colours == (C(BLUE),)


def test_the_exabgp_command_carries_the_colours_as_raw_hex() -> None:
    cmd = api.Announce(
        A("172.16.11.1"),
        N("10.1.0.0/24"),
        A("172.16.11.2"),
        as_path=(65100, 65003),
        colours=(C(1), C(0xFFFF_FFFF, 0x4000)),
    )
    assert api.encode_command(cmd) == (
        "neighbor 172.16.11.1 announce route 10.1.0.0/24 next-hop 172.16.11.2 origin igp "
        "as-path [ 65100 65003 ] extended-community [ 0x030b000000000001 0x030b4000ffffffff ]"
    )
    assert "extended-community" not in api.Announce(L1.address, N("10.1.0.0/24"), None).encode()


# -- origination --------------------------------------------------------------------------------


def test_origination_with_backup_colours_sends_primary_and_backup_copies() -> None:
    l4 = NeighborParams(A("172.16.14.1"), 65004, A("172.16.14.2"), "s1-l4", colour=RED)
    p, q = N("10.100.0.0/24"), N("10.200.0.0/24")
    r = Rib(
        RibParams(
            V4("10.0.0.11"),
            65100,
            Role.HELPER,
            (L1, L2, L3, l4),
            originated=(p, q),
            origin_colours=((p, Origination(GREEN, (BLUE,))),),
        )
    )
    out = adverts(r.initial_decisions())
    assert out[(str(L1.address), str(p))].colours == (C(GREEN),)  # the primary copy
    assert out[(str(L2.address), str(p))].colours == (C(BLUE),)  # a backup copy, blue
    assert out[(str(L3.address), str(p))].colours == (C(GREEN),)  # uncoloured: the primary
    assert (str(l4.address), str(p)) not in out  # red: neither its colour nor a backup
    for n in (L1, L2, L3, l4):  # an uncoloured prefix goes everywhere, uncoloured
        assert out[(str(n.address), str(q))].colours == ()

    # a reload without the backup colour takes the blue copy back; none of the others moves
    eff, touched = r.reconfigure(replace(r.params, origin_colours=((p, Origination(GREEN)),)))
    assert touched == set() and retracts(eff) == {(str(L2.address), str(p))}
    assert adverts(eff) == {}


# -- reload: a session's colour changes ---------------------------------------------------------


def test_a_session_colour_change_reevaluates_hidden_routes_and_the_adj_rib_out() -> None:
    r = spine()
    r.on_update(upd(L1, "10.1.0.0/24", colours=(C(BLUE),)), 1.0)  # hidden on green L1
    r.on_update(upd(L1, "10.2.0.0/24", colours=(C(GREEN),)), 2.0)  # visible on green L1
    r.on_update(upd(L3, "10.3.0.0/24", colours=(C(GREEN),)), 3.0)  # sent to green L1
    r.on_update(upd(L3, "10.4.0.0/24", colours=(C(BLUE),)), 4.0)  # not sent to green L1
    assert set(out_to(r, L1)) == {"10.3.0.0/24"}
    assert counters(r, L1)[HIDDEN] == 1

    blue = replace(L1, colour=BLUE)
    eff, touched = r.reconfigure(replace(r.params, neighbors=(blue, L2, L3)))
    assert touched == set()  # the session itself stays as it is
    # the blue route is visible now and re-advertised, the green one hidden and withdrawn
    assert fwd(eff) == {"10.1.0.0/24": {str(L1.address)}, "10.2.0.0/24": set()}
    assert retracts(eff) >= {
        (str(L3.address), "10.2.0.0/24"),
        (str(L1.address), "10.3.0.0/24"),
    }
    out = adverts(eff)
    assert out[(str(L3.address), "10.1.0.0/24")].colours == (C(BLUE),)
    assert out[(str(L2.address), "10.1.0.0/24")].colours == (C(BLUE),)
    assert out[(str(L1.address), "10.4.0.0/24")].colours == (C(BLUE),)
    assert set(out_to(r, L1)) == {"10.4.0.0/24"}
    assert row(r, L1, "10.1.0.0/24")["hidden"] is None
    assert row(r, L1, "10.2.0.0/24")["hidden"] == "colour_mismatch"
    assert counters(r, L1)[HIDDEN] == 1 and r.counters[HIDDEN] == 1

    # uncoloured: nothing hidden, everything sent; the blue route's next hop through L1 is
    # announced again, now with the session's colour None
    eff, _ = r.reconfigure(replace(r.params, neighbors=(replace(L1, colour=None), L2, L3)))
    assert fwd(eff) == {"10.1.0.0/24": {str(L1.address)}, "10.2.0.0/24": {str(L1.address)}}
    assert [h.colour for h in r.next_hops(N("10.1.0.0/24"))] == [None]
    assert counters(r, L1).get(HIDDEN, 0) == 0 and r.counters[HIDDEN] == 0
    assert set(out_to(r, L1)) == {"10.3.0.0/24", "10.4.0.0/24"}


def test_the_stale_copy_of_a_hidden_path_stays_hidden_and_counted_once() -> None:
    r = spine()
    r.on_update(upd(L1, "10.1.0.0/24", colours=(C(BLUE),)), 1.0)
    r.speaker_lost(2.0)  # every path stale, kept
    assert row(r, L1, "10.1.0.0/24")["stale"] is True
    assert row(r, L1, "10.1.0.0/24")["hidden"] == "colour_mismatch"
    assert counters(r, L1)[HIDDEN] == 1 and r.counters[HIDDEN] == 1
    r.on_timer(2.0 + r.params.stale_timer_s)
    assert counters(r, L1)[HIDDEN] == 0 and r.counters[HIDDEN] == 0


# -- a small fabric: leaf -> spine -> leaf ------------------------------------------------------


def relay(effects: list[Any], to: NeighborParams, sender: NeighborParams) -> api.UpdateEvent:
    """The UPDATE ``to`` receives from ``sender`` for the Advertise effects sent to ``to``."""
    ads = [e for e in effects if isinstance(e, Advertise) and e.peer == to.address]
    assert len({(a.as_path, a.colours) for a in ads}) == 1
    a = ads[0]
    assert sender.remote_as is not None
    return api.UpdateEvent(
        sender.address,
        sender.local_address,
        sender.remote_as,
        65001,
        "receive",
        api.PathAttributes("igp", a.as_path, len(a.as_path), colours=a.colours),
        tuple(api.RouteAnnounced("ipv4 unicast", sender.address, e.prefix) for e in ads),
    )


def test_each_copy_stays_inside_its_colour_through_the_spines() -> None:
    """leaf1 originates P-green (backup blue) to a green spine and a blue spine; each spine
    passes its copy, in its own colour, to leaf2 over a session of that colour: leaf2 sees both,
    visible, and a blue copy on a green session would be hidden."""
    p = N("10.100.0.0/24")
    # leaf1's two uplinks: to spine1 (green) and spine2 (blue)
    up1 = NeighborParams(A("172.16.1.0"), 65100, A("172.16.1.1"), "up1", colour=GREEN)
    up2 = NeighborParams(A("172.16.2.0"), 65200, A("172.16.2.1"), "up2", colour=BLUE)
    leaf1 = Rib(
        RibParams(
            V4("10.0.0.1"),
            65001,
            Role.LOAD_BALANCER,
            (up1, up2),
            originated=(p,),
            origin_colours=((p, Origination(GREEN, (BLUE,))),),
        )
    )
    first = leaf1.initial_decisions()
    # each spine: its session to leaf1 and to leaf2, both of its colour
    out: dict[int, list[Any]] = {}
    for colour, asn, up in ((GREEN, 65100, up1), (BLUE, 65200, up2)):
        to1 = NeighborParams(up.local_address, 65001, up.address, "to-l1", colour=colour)
        to2 = NeighborParams(A(f"172.16.{colour}.8"), 65002, A(f"172.16.{colour}.9"), "to-l2")
        to2 = replace(to2, colour=colour)
        s = Rib(RibParams(V4(f"10.0.1.{colour}"), asn, Role.HELPER, (to1, to2)))
        for i, n in enumerate((to1, to2), 1):
            s.on_open(n.address, V4(f"10.0.0.{i}"))
            s.on_state(n.address, "up", 0.0)
        out[colour] = s.on_update(relay(first, up, to1), 1.0)
        sent = adverts(out[colour])[(str(to2.address), str(p))]
        assert sent.colours == (C(colour),) and sent.as_path == (asn, 65001)
    # leaf2 has a green session to spine1 and a blue one to spine2: both copies visible
    d1 = NeighborParams(A("172.16.1.9"), 65100, A("172.16.1.8"), "d1", colour=GREEN)
    d2 = NeighborParams(A("172.16.2.9"), 65200, A("172.16.2.8"), "d2", colour=BLUE)
    leaf2 = Rib(
        RibParams(V4("10.0.0.2"), 65002, Role.LOAD_BALANCER, (d1, d2), update_coalesce_s=0.0)
    )
    for i, n in enumerate((d1, d2), 1):
        leaf2.on_open(n.address, V4(f"10.0.1.{i}"))
        leaf2.on_state(n.address, "up", 0.0)
    to2_green = NeighborParams(A("172.16.1.8"), 65002, A("172.16.1.9"), "x")
    to2_blue = NeighborParams(A("172.16.2.8"), 65002, A("172.16.2.9"), "x")
    leaf2.on_update(relay(out[GREEN], to2_green, d1), 2.0)
    leaf2.on_update(relay(out[BLUE], to2_blue, d2), 2.0)
    assert {str(h.peer) for h in leaf2.next_hops(p)} == {str(d1.address), str(d2.address)}
    # the blue copy arriving on the green session (a miswired spine) is hidden there
    wrong = relay(out[BLUE], to2_blue, d1)
    leaf2.on_update(wrong, 3.0)
    assert row(leaf2, d1, str(p))["hidden"] == "colour_mismatch"
    assert {str(h.peer) for h in leaf2.next_hops(p)} == {str(d2.address)}
