"""Properties of colours in the RIB under random UPDATEs, withdrawals and session recolourings:
a hidden path is never forwarded over, every learned route advertised obeys the send rule with
its colours as received, and the hidden gauges equal a count from scratch."""

from __future__ import annotations

import ipaddress
from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from glbd.base.reasons import HiddenReason
from glbd.bgp import exabgp_api as api
from glbd.bgp.rib import Rib
from glbd.bgp.ribtypes import NeighborParams, RibParams, Role
from glbd.colours.colour import ColourCommunity
from glbd.colours.colours import hidden, may_send, route_colours

A = ipaddress.ip_address
N = ipaddress.ip_network
HIDDEN = HiddenReason.COLOUR_MISMATCH.counter
PEERS = tuple(
    NeighborParams(A(f"172.16.{i}.1"), 65000 + i, A(f"172.16.{i}.2"), f"p{i}") for i in range(4)
)
PREFIXES = [f"10.{i}.0.0/24" for i in range(5)]

colour_sets = st.lists(st.integers(1, 3), max_size=3).map(
    lambda cs: tuple(ColourCommunity(c) for c in cs)
)
session_colours = st.none() | st.integers(1, 3)
step = st.one_of(
    st.tuples(st.just("announce"), st.integers(0, 3), st.sampled_from(PREFIXES), colour_sets),
    st.tuples(st.just("withdraw"), st.integers(0, 3), st.sampled_from(PREFIXES)),
    st.tuples(st.just("colour"), st.integers(0, 3), session_colours),
    st.tuples(st.just("down"), st.integers(0, 3)),
)


def update(n: NeighborParams, prefix: str, colours: tuple[ColourCommunity, ...]) -> api.UpdateEvent:
    assert n.remote_as is not None
    return api.UpdateEvent(
        n.address,
        n.local_address,
        n.remote_as,
        65100,
        "receive",
        api.PathAttributes("igp", (n.remote_as,), 1, colours=colours),
        (api.RouteAnnounced("ipv4 unicast", n.address, N(prefix)),),
    )


def check(r: Rib) -> None:
    total = 0
    for addr, ps in r.peers.items():
        colour = ps.params.colour
        n_hidden = 0
        for prefix, path in ps.paths():
            if hidden(route_colours(path.colours), colour) is not None:
                n_hidden += 1
                assert all(nh.peer != addr for nh in r.next_hops(prefix))
        assert ps.counters.get(HIDDEN, 0) == n_hidden
        total += n_hidden
        for prefix, adv in ps.adj_out.items():
            fwd = r.next_hops(prefix)
            if fwd:  # a learned route: a selected path's colours, as received
                used = [dict(r.peers[nh.peer].paths())[prefix] for nh in fwd]
                assert any(adv.colours == p.colours for p in used)
                assert may_send(route_colours(adv.colours), colour)
    assert r.counters.get(HIDDEN, 0) == total


@settings(max_examples=150, deadline=None)
@given(st.lists(session_colours, min_size=4, max_size=4), st.lists(step, max_size=40))
def test_hidden_paths_send_rule_and_gauges_hold_after_every_step(
    colours: list[int | None], steps: list[tuple[Any, ...]]
) -> None:
    peers = tuple(replace(p, colour=c) for p, c in zip(PEERS, colours, strict=True))
    rid = ipaddress.IPv4Address("10.0.0.11")
    r = Rib(RibParams(rid, 65100, Role.HELPER, peers, update_coalesce_s=0.0))
    for i, p in enumerate(peers):
        r.on_open(p.address, ipaddress.IPv4Address(f"10.0.0.{i + 1}"))
        r.on_state(p.address, "up", 0.0)
    now = 1.0
    for s in steps:
        now += 1.0
        kind, i = s[0], s[1]
        n = r.peers[PEERS[i].address]
        if kind == "announce":
            if n.state != "up":
                r.on_state(n.params.address, "up", now)
            r.on_update(update(n.params, s[2], s[3]), now)
        elif kind == "withdraw":
            ev = update(n.params, s[2], ())
            r.on_update(replace(ev, announced=(), withdrawn=(("ipv4 unicast", N(s[2])),)), now)
        elif kind == "colour":
            new = tuple(
                replace(p.params, colour=s[2]) if p is n else p.params for p in r.peers.values()
            )
            r.reconfigure(replace(r.params, neighbors=new))
        else:
            r.on_state(n.params.address, "down", now)
        check(r)
