"""AIGP and the primary colour in the RIB (docs/colours.md, "Origination and backup colours"),
in virtual time (every input carries ``now``): a coloured origination's primary copy carries
AIGP (``PRIMARY_AIGP``) on its colour's sessions and its backup copies none; a spine passes a
route's AIGP on, unchanged, to coloured sessions only; a receiving leaf derives a prefix's
primary colour from its visible copy with the lowest AIGP and says it in NextHopsChanged (also
when only the colour moved); each next hop carries its session's colour; AIGP from an
uncoloured session is ignored."""

from __future__ import annotations

import ipaddress
from dataclasses import replace
from typing import Any

from glbd.bgp import exabgp_api as api
from glbd.bgp.rib import Rib
from glbd.bgp.ribcolour import PRIMARY_AIGP
from glbd.bgp.ribtypes import Advertise, NeighborParams, NextHopsChanged, RibParams, Role
from glbd.bgp.speaker import command_for
from glbd.colours.colour import ColourCommunity
from glbd.colours.colours import Origination

A = ipaddress.ip_address
N = ipaddress.ip_network
V4 = ipaddress.IPv4Address
C = ColourCommunity
GREEN, BLUE, RED = 1, 2, 3
P = "10.100.0.0/24"

#: a leaf's uplinks: green to spine1, blue to spine2, red to spine3, uncoloured to spine4
S1 = NeighborParams(A("172.16.1.0"), 65101, A("172.16.1.1"), "up1", colour=GREEN)
S2 = NeighborParams(A("172.16.2.0"), 65102, A("172.16.2.1"), "up2", colour=BLUE)
S3 = NeighborParams(A("172.16.3.0"), 65103, A("172.16.3.1"), "up3", colour=RED)
S4 = NeighborParams(A("172.16.4.0"), 65104, A("172.16.4.1"), "up4")
UPLINKS = (S1, S2, S3, S4)


def router(*neighbors: NeighborParams, **kw: Any) -> Rib:
    """A RIB (AS 65001, id 10.0.0.1) with ``neighbors`` up; neighbour i has BGP id 10.0.1.i."""
    kw.setdefault("update_coalesce_s", 0.0)
    r = Rib(RibParams(V4("10.0.0.1"), 65001, Role.LOAD_BALANCER, neighbors, **kw))
    r.initial_decisions()
    for i, n in enumerate(neighbors, 1):
        r.on_open(n.address, V4(f"10.0.1.{i}"))
        r.on_state(n.address, "up", 0.0)
    return r


def upd(
    n: NeighborParams,
    *prefixes: str,
    colours: tuple[ColourCommunity, ...] = (),
    aigp: int | None = None,
    withdraw: tuple[str, ...] = (),
) -> api.UpdateEvent:
    """An UPDATE from ``n`` (AS path: its AS, then 65009, the originating leaf)."""
    assert n.remote_as is not None
    path = (n.remote_as, 65009)
    return api.UpdateEvent(
        n.address,
        n.local_address,
        n.remote_as,
        65001,
        "receive",
        api.PathAttributes("igp", path, len(path), colours=colours, aigp=aigp),
        tuple(api.RouteAnnounced("ipv4 unicast", n.address, N(p)) for p in prefixes),
        tuple(("ipv4 unicast", N(p)) for p in withdraw),
    )


def adverts(effects: list[Any]) -> dict[NeighborParams, Advertise]:
    """The Advertise effects, by the neighbour they go to."""
    by_addr = {n.address: n for n in (*UPLINKS, *DOWNLINKS)}
    return {by_addr[e.peer]: e for e in effects if isinstance(e, Advertise)}


def changes(effects: list[Any]) -> list[NextHopsChanged]:
    return [e for e in effects if isinstance(e, NextHopsChanged)]


# -- sending: the primary copy is marked ----------------------------------------------------


def test_the_primary_copy_carries_the_aigp_mark_and_the_backups_none() -> None:
    p, q = N(P), N("10.200.0.0/24")
    r = Rib(
        RibParams(
            V4("10.0.0.1"),
            65001,
            Role.LOAD_BALANCER,
            UPLINKS,
            originated=(p, q),
            origin_colours=((p, Origination(GREEN, (BLUE,))),),
        )
    )
    out = [e for e in r.initial_decisions() if isinstance(e, Advertise)]
    got = {(str(e.prefix), e.peer): (e.colours, e.aigp) for e in out}
    assert got == {
        (P, S1.address): ((C(GREEN),), PRIMARY_AIGP),  # the primary copy, on its colour's session
        (P, S2.address): ((C(BLUE),), None),  # a backup copy
        (P, S4.address): ((C(GREEN),), None),  # the primary copy, uncoloured: no AIGP there
        # the uncoloured prefix goes everywhere without AIGP
        **{(str(q), n.address): ((), None) for n in UPLINKS},
    }
    cmds = {e.peer: command_for(e).encode() for e in out if e.prefix == p}
    assert cmds[S1.address].endswith("extended-community [ 0x030b000000000001 ] aigp 1")
    assert "aigp" not in cmds[S2.address] and "aigp" not in cmds[S4.address]
    rows = {row["prefix"]: row for row in r.advertised(S1.address)}
    assert rows[P]["aigp"] == PRIMARY_AIGP and rows[str(q)]["aigp"] is None


def test_a_reload_that_recolours_the_origination_moves_the_mark() -> None:
    p = N(P)
    r = Rib(
        RibParams(
            V4("10.0.0.1"),
            65001,
            Role.LOAD_BALANCER,
            UPLINKS,
            originated=(p,),
            origin_colours=((p, Origination(GREEN, (BLUE,))),),
        )
    )
    r.initial_decisions()
    eff, touched = r.reconfigure(
        replace(r.params, origin_colours=((p, Origination(BLUE, (GREEN,))),))
    )
    assert touched == set()
    got = {e.peer: (e.colours, e.aigp) for e in eff if isinstance(e, Advertise)}
    assert got == {
        S1.address: ((C(GREEN),), None),  # green is the backup now
        S2.address: ((C(BLUE),), PRIMARY_AIGP),
        S4.address: ((C(BLUE),), None),
    }


# -- a spine passes the mark on ---------------------------------------------------------------

#: a spine's sessions to three leaves: green, green, uncoloured
DOWNLINKS = (
    NeighborParams(A("172.16.11.1"), 65011, A("172.16.11.0"), "d1", colour=GREEN),
    NeighborParams(A("172.16.12.1"), 65012, A("172.16.12.0"), "d2", colour=GREEN),
    NeighborParams(A("172.16.13.1"), 65013, A("172.16.13.0"), "d3"),
)
D1, D2, D3 = DOWNLINKS


def test_a_spine_passes_the_aigp_on_unchanged_to_coloured_sessions_only() -> None:
    spine = router(*DOWNLINKS)
    out = adverts(spine.on_update(upd(D1, P, colours=(C(GREEN),), aigp=0), 1.0))
    assert (out[D2].colours, out[D2].aigp) == ((C(GREEN),), 0)
    assert (out[D3].colours, out[D3].aigp) == ((C(GREEN),), None)  # uncoloured: AIGP off
    assert D1 not in out  # it came from there
    # a metric other than 0 goes on as it came; an AIGP change alone is advertised again
    out = adverts(spine.on_update(upd(D1, P, colours=(C(GREEN),), aigp=7), 2.0))
    assert out[D2].aigp == 7 and D3 not in out
    out = adverts(spine.on_update(upd(D1, P, colours=(C(GREEN),)), 3.0))
    assert out[D2].aigp is None
    rows = {row["prefix"]: row for row in spine.advertised(D2.address)}
    assert rows[P]["aigp"] is None


def test_aigp_from_an_uncoloured_session_is_ignored_and_counted() -> None:
    spine = router(*DOWNLINKS)
    eff = spine.on_update(upd(D3, P, colours=(C(GREEN),), aigp=0), 1.0)
    assert adverts(eff)[D1].aigp is None  # not passed on: it was never taken
    (row,) = spine.received(D3.address)
    assert row["aigp"] is None and row["used"] is True
    (ch,) = changes(eff)
    assert ch.colour is None  # and it marks no primary copy
    snap = {n["peer"]: n["counters"] for n in spine.neighbors_snapshot(1.0)}
    assert snap[str(D3.address)]["aigp_ignored"] == 1
    assert spine.counters["aigp_ignored"] == 1
    # on a coloured session the same route keeps it
    spine.on_update(upd(D1, P, colours=(C(GREEN),), aigp=0), 2.0)
    assert spine.received(D1.address)[0]["aigp"] == 0


# -- a receiving leaf: the primary colour ----------------------------------------------------


def test_the_primary_colour_comes_from_the_copy_with_aigp() -> None:
    leaf = router(*UPLINKS)
    eff = leaf.on_update(upd(S2, P, colours=(C(BLUE),)), 1.0)  # a backup copy
    (ch,) = changes(eff)
    assert ch.colour is None and [h.colour for h in ch.next_hops] == [BLUE]
    eff = leaf.on_update(upd(S1, P, colours=(C(GREEN),), aigp=0), 2.0)  # the primary copy
    (ch,) = changes(eff)
    assert ch.colour == GREEN
    # forwarding is still GLB over every copy; each next hop says its session's colour
    assert {(str(h.peer), h.colour) for h in ch.next_hops} == {
        (str(S1.address), GREEN),
        (str(S2.address), BLUE),
    }
    assert ch.next_hops[0].to_dict()["colour"] in (GREEN, BLUE)
    assert {row["prefix"]: row["aigp"] for row in leaf.received(S1.address)} == {P: 0}
    # the uncoloured session's next hop: colour None
    (ch,) = changes(leaf.on_update(upd(S4, P, colours=(C(GREEN),)), 3.0))
    assert ch.colour == GREEN
    assert {h.colour for h in ch.next_hops if h.peer == S4.address} == {None}


def test_a_primary_colour_change_alone_is_announced() -> None:
    """The same copies, the same next hops; only the AIGP mark moves from one to the other:
    NextHopsChanged goes out with the new colour and the very same next hops."""
    leaf = router(*UPLINKS)
    leaf.on_update(upd(S1, P, colours=(C(GREEN),)), 1.0)
    leaf.on_update(upd(S2, P, colours=(C(BLUE),)), 1.0)
    before = leaf.next_hops(N(P))
    (ch,) = changes(leaf.on_update(upd(S1, P, colours=(C(GREEN),), aigp=0), 2.0))
    assert (ch.colour, ch.next_hops) == (GREEN, before)
    # the mark moves to the blue copy (a recoloured origination at the far leaf)
    assert changes(leaf.on_update(upd(S2, P, colours=(C(BLUE),), aigp=0), 3.0)) == []
    (ch,) = changes(leaf.on_update(upd(S1, P, colours=(C(GREEN),)), 3.0))
    assert (ch.colour, ch.next_hops) == (BLUE, before)
    # the same again: nothing
    assert changes(leaf.on_update(upd(S1, P, colours=(C(GREEN),)), 4.0)) == []
    # the primary copy withdrawn: no copy with AIGP is left
    (ch,) = changes(leaf.on_update(upd(S2, withdraw=(P,)), 5.0))
    assert ch.colour is None and {str(h.peer) for h in ch.next_hops} == {str(S1.address)}


def test_the_lowest_aigp_wins_then_the_lowest_colour() -> None:
    leaf = router(*UPLINKS)
    (ch,) = changes(leaf.on_update(upd(S3, P, colours=(C(RED),), aigp=5), 1.0))
    assert ch.colour == RED
    (ch,) = changes(leaf.on_update(upd(S2, P, colours=(C(BLUE),), aigp=3), 2.0))
    assert ch.colour == BLUE
    # equal metrics: the lowest colour; a copy of several colours: its lowest
    (ch,) = changes(leaf.on_update(upd(S3, P, colours=(C(RED), C(GREEN)), aigp=3), 3.0))
    assert ch.colour == GREEN


def test_a_hidden_copy_does_not_count() -> None:
    leaf = router(*UPLINKS)
    leaf.on_update(upd(S2, P, colours=(C(BLUE),)), 1.0)
    # a green copy with AIGP on the blue session (a miswired spine): hidden, not primary
    assert changes(leaf.on_update(upd(S2, P, colours=(C(GREEN),), aigp=0), 2.0)) != []
    assert leaf.received(S2.address)[0]["hidden"] == "colour_mismatch"
    assert leaf.next_hops(N(P)) == ()
    (ch,) = changes(leaf.on_update(upd(S1, P, colours=(C(GREEN),)), 3.0))
    assert ch.colour is None  # the only AIGP copy is the hidden one
    (ch,) = changes(leaf.on_update(upd(S3, P, colours=(C(RED),), aigp=9), 4.0))
    assert ch.colour == RED  # a visible copy, however high its metric


def test_the_colour_stays_while_the_primary_sessions_bfd_is_down() -> None:
    """The primary copy is kept (BFD strict: not used); the prefix's preferred fabric is the
    same, so its colour stays while the next hops move (docs/colours.md)."""
    leaf = router(*UPLINKS)
    leaf.on_update(upd(S1, P, colours=(C(GREEN),), aigp=0), 1.0)
    leaf.on_update(upd(S2, P, colours=(C(BLUE),)), 1.0)
    (ch,) = changes(leaf.peer_bfd_down(S1.address, 2.0))
    assert ch.colour == GREEN and {str(h.peer) for h in ch.next_hops} == {str(S2.address)}
    (ch,) = changes(leaf.on_state(S1.address, "down", 3.0, "hold timer expired"))
    assert ch.colour is None  # the session gone, its copy with it


def test_a_sessions_new_colour_reaches_its_next_hops_and_its_aigp() -> None:
    leaf = router(*UPLINKS)
    leaf.on_update(upd(S4, P, colours=(C(GREEN),), aigp=0), 1.0)  # ignored: S4 is uncoloured
    assert leaf.received(S4.address)[0]["aigp"] is None
    new = tuple(replace(n, colour=GREEN) if n is S4 else n for n in UPLINKS)
    eff, touched = leaf.reconfigure(replace(leaf.params, neighbors=new))
    assert touched == set()  # the session stays
    (ch,) = changes(eff)
    assert [h.colour for h in ch.next_hops] == [GREEN]
    assert ch.colour is None  # the AIGP it sent before was not kept: its next UPDATE brings it
    (ch,) = changes(leaf.on_update(upd(S4, P, colours=(C(GREEN),), aigp=0), 2.0))
    assert ch.colour == GREEN


def test_a_session_uncoloured_by_a_reload_drops_the_aigp_it_brought() -> None:
    leaf = router(*UPLINKS)
    leaf.on_update(upd(S1, P, colours=(C(GREEN),), aigp=0), 1.0)
    leaf.on_update(upd(S2, P, colours=(C(BLUE),)), 1.0)
    assert leaf.next_hops(N(P)) and leaf.received(S1.address)[0]["aigp"] == 0
    new = tuple(replace(n, colour=None) if n is S1 else n for n in UPLINKS)
    eff, touched = leaf.reconfigure(replace(leaf.params, neighbors=new))
    assert touched == set()
    (ch,) = changes(eff)
    assert ch.colour is None  # AIGP_SESSION is off there now: no primary copy is left
    assert {(str(h.peer), h.colour) for h in ch.next_hops} == {
        (str(S1.address), None),
        (str(S2.address), BLUE),
    }
    assert leaf.received(S1.address)[0]["aigp"] is None


# -- leaf -> spines -> leaf --------------------------------------------------------------------


def relay(effects: list[Any], to: NeighborParams, sender: NeighborParams) -> api.UpdateEvent:
    """The UPDATE ``sender`` delivers for the Advertise effects it sent to ``to``."""
    ads = [e for e in effects if isinstance(e, Advertise) and e.peer == to.address]
    (a,) = ads
    assert sender.remote_as is not None
    return api.UpdateEvent(
        sender.address,
        sender.local_address,
        sender.remote_as,
        65001,
        "receive",
        api.PathAttributes("igp", a.as_path, len(a.as_path), colours=a.colours, aigp=a.aigp),
        (api.RouteAnnounced("ipv4 unicast", sender.address, a.prefix),),
    )


def test_through_the_spines_the_far_leaf_finds_the_primary_colour() -> None:
    """leaf9 originates P green (backup blue) to a green spine and a blue spine; each passes
    its copy on to leaf1 in its own colour, the green one with the AIGP mark: leaf1 forwards over
    both and knows green is P's primary colour."""
    p = N(P)
    up1 = NeighborParams(A("172.16.91.0"), 65101, A("172.16.91.1"), "u1", colour=GREEN)
    up2 = NeighborParams(A("172.16.92.0"), 65102, A("172.16.92.1"), "u2", colour=BLUE)
    leaf9 = Rib(
        RibParams(
            V4("10.0.0.9"),
            65009,
            Role.LOAD_BALANCER,
            (up1, up2),
            originated=(p,),
            origin_colours=((p, Origination(GREEN, (BLUE,))),),
        )
    )
    first = leaf9.initial_decisions()
    delivered = {}
    for colour, up, down in ((GREEN, up1, S1), (BLUE, up2, S2)):
        to9 = NeighborParams(up.local_address, 65009, up.address, "to9", colour=colour)
        to1 = NeighborParams(down.local_address, 65001, down.address, "to1", colour=colour)
        assert down.remote_as is not None
        spine = Rib(
            RibParams(
                V4(f"10.0.2.{colour}"),
                down.remote_as,
                Role.HELPER,
                (to9, to1),
                update_coalesce_s=0.0,
            )
        )
        for i, n in enumerate((to9, to1), 1):
            spine.on_open(n.address, V4(f"10.0.0.{8 + i}"))
            spine.on_state(n.address, "up", 0.0)
        passed = spine.on_update(relay(first, up, to9), 1.0)
        delivered[colour] = relay(passed, to1, down)
    assert delivered[GREEN].attributes.aigp == PRIMARY_AIGP
    assert delivered[BLUE].attributes.aigp is None
    leaf1 = router(*UPLINKS)
    leaf1.on_update(delivered[BLUE], 2.0)
    (ch,) = changes(leaf1.on_update(delivered[GREEN], 2.0))
    assert ch.colour == GREEN
    assert {(str(h.peer), h.colour) for h in ch.next_hops} == {
        (str(S1.address), GREEN),
        (str(S2.address), BLUE),
    }
