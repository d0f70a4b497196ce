"""The node's origination glue (``glbd.bgp.origination``) on a clock the test sets: a watch's
change reaches ``on_change`` with the whole set to originate, and ``glbctl routes`` shows each
originated prefix and each withdrawn candidate with its reason."""

from __future__ import annotations

import asyncio
import ipaddress
from typing import Any, cast

from glbd.bgp.origin import OriginParams
from glbd.bgp.origination import Origination
from glbd.cli import glbctl_render as ctl
from glbd.netlink.ifwatch import InterfaceWatch

N = ipaddress.ip_network
PARAMS = OriginParams(
    static=(N("10.99.0.0/24"),),
    networks=((N("198.19.9.0/24"), "host0"),),
    connected=("host*",),
)


class Clock:
    now = 0.0

    def time(self) -> float:
        return self.now


class Watch:
    """What the node's :class:`InterfaceWatch` would hold."""

    def __init__(self) -> None:
        self.links: dict[str, bool] = {"host0": True}
        self.connected: dict[str, frozenset[Any]] = {"host0": frozenset({N("198.19.1.0/24")})}


def rib_row(prefix: str, originated: bool) -> dict[str, Any]:
    return {
        "prefix": prefix,
        "originated": originated,
        "paths": 0 if originated else 1,
        "as_path": [],
        "next_hops": [],
        "advertised_to": [],
        "multipath": 0,
    }


def test_a_watch_change_goes_out_whole_and_routes_say_why() -> None:
    clock = Clock()
    sent: list[tuple[Any, ...]] = []
    o = Origination(cast(asyncio.AbstractEventLoop, clock), PARAMS, sent.append)
    assert o.prefixes() == (N("10.99.0.0/24"),)
    watch = Watch()
    o.watch = cast(InterfaceWatch, watch)
    clock.now = 1.0
    o._observe()
    assert sent == [(N("10.99.0.0/24"), N("198.19.1.0/24"), N("198.19.9.0/24"))]
    o._observe()  # nothing changed: nothing sent
    assert len(sent) == 1
    watch.links["host0"] = False
    clock.now = 3.0
    o._observe()
    assert sent[-1] == (N("10.99.0.0/24"),)

    clock.now = 4.5
    rib = [rib_row("10.5.0.0/24", False), rib_row("10.99.0.0/24", True)]
    rows = {r["prefix"]: r for r in o.join(iter(rib), None)}
    assert rows["10.5.0.0/24"]["origin"] is None  # learned
    assert rows["10.99.0.0/24"]["origin"]["reason"] == "static"
    # the candidates the RIB does not have: withdrawn, with why and since when
    assert rows["198.19.1.0/24"]["origin"] == {
        "source": "connected",
        "interface": "host0",
        "state": "withdrawn",
        "reason": "interface_down",
        "state_for_s": 1.5,
    }
    assert rows["198.19.1.0/24"]["originated"] is False
    assert set(rows["198.19.1.0/24"]) == set(rib[0]) | {"origin"}  # a RIB row's keys
    only = [r["prefix"] for r in o.join(iter(rib), lambda p: str(p).startswith("198.19.9."))]
    assert only == ["10.5.0.0/24", "10.99.0.0/24", "198.19.9.0/24"]  # RIB rows come filtered

    lines = {r["prefix"]: ctl._route_line(r) for r in rows.values()}
    assert "originated: static" in lines["10.99.0.0/24"]
    assert "withdrawn: interface_down host0" in lines["198.19.1.0/24"]
    assert "originated" not in lines["10.5.0.0/24"] and "withdrawn" not in lines["10.5.0.0/24"]
