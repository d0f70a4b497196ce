"""FIB safety against the real kernel: glbd never replaces a route it does not own, never arms
a failover for a nexthop id it no longer owns, and after an adopting restart holds only what it
has not re-learned yet."""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fibrig import Rig, member
from glbdlab.waits import until as eventually

from glbd.fib.fibmodel import Desired, GroupSpec
from glbd.fib.programmer import FibProgrammer

pytestmark = pytest.mark.netns

P = 200
N = ipaddress.ip_network
PFX_A = N("203.0.113.0/24")
PFX_B = N("198.51.100.0/24")
PFX_C = N("192.0.2.0/24")
PFX_6 = N("2001:db8:99::/48")


@pytest.fixture
async def fib(rig: Rig) -> AsyncIterator[FibProgrammer]:
    # the route audit is far away: what these tests check must not depend on it
    f = FibProgrammer(
        netns=rig.r.name,
        protocol=P,
        table=254,
        reconcile_interval_s=2.0,
        route_audit_interval_s=3600.0,
        stale_s=0.0,
    )
    await f.start()
    try:
        yield f
    finally:
        await f.stop(keep=True)


def route(rig: Rig, prefix: str) -> dict[str, Any] | None:
    v6 = ":" in prefix
    for r in rig.routes(v6):
        if r["dst"] == prefix:
            return r
    return None


def gateways(rig: Rig) -> set[str]:
    return {nh["gateway"] for nh in rig.nexthops() if "gateway" in nh}


async def test_foreign_static_route_is_left_alone_counted_shown_then_taken_over(
    rig: Rig, fib: FibProgrammer
) -> None:
    """An operator's static route for a prefix glbd wants (same table, same metric) is never
    replaced, whether glbd learns it from the kernel's answer to its create or from the route
    event; it is counted, shown in the snapshot, and glbd installs its own route as soon as the
    static one is deleted."""
    v4 = {member(1): 1, member(2): 1}
    v6 = {member(1, True): 1}
    await fib.apply(Desired(groups={"a": GroupSpec(v4), "b": GroupSpec(v6)}, routes={PFX_A: "a"}))
    # the operator's routes appear between two syncs, unknown to glbd's route cache
    rig.r.ip("route", "add", str(PFX_C), "via", "198.18.10.10", "proto", "static")
    rig.r.ip("-6", "route", "add", str(PFX_6), "via", "2001:db8:10:3::2", "proto", "static")
    res = await fib.update(add={PFX_C: "a", PFX_6: "b"})
    assert res.errors == ()
    for pfx, gw in ((PFX_C, "198.18.10.10"), (PFX_6, "2001:db8:10:3::2")):
        r = route(rig, str(pfx))
        assert r is not None and r.get("protocol") == "static" and r.get("gateway") == gw
    snap = fib.snapshot()
    assert {r["prefix"] for r in snap["foreign_routes"]} == {str(PFX_C), str(PFX_6)}
    assert snap["routes"][str(PFX_C)]["note"] == "foreign_route"
    assert sum(snap["conflicts"].values()) >= 2
    # nothing rewrites them later either (a full sync, a reconcile)
    await fib.apply(
        Desired(
            groups={"a": GroupSpec(v4), "b": GroupSpec(v6)},
            routes={PFX_A: "a", PFX_C: "a", PFX_6: "b"},
        )
    )
    await fib.reconcile(full=False)
    r = route(rig, str(PFX_C))
    assert r is not None and r.get("protocol") == "static"
    # the operator removes them: glbd installs its own routes without waiting for an audit
    rig.r.ip("route", "del", str(PFX_C), "proto", "static")
    rig.r.ip("-6", "route", "del", str(PFX_6), "proto", "static")

    def ours(pfx: str) -> bool:
        r = route(rig, pfx)
        return r is not None and r.get("protocol") != "static" and "nhid" in r

    await eventually(lambda: ours(str(PFX_C)) and ours(str(PFX_6)))
    snap = fib.snapshot()
    assert snap["foreign_routes"] == []
    assert snap["routes"][str(PFX_C)]["note"] == ""


async def test_static_route_added_over_ours_is_learned_at_once(
    rig: Rig, fib: FibProgrammer
) -> None:
    """An operator replaces glbd's route: glbd learns it from the route event (no audit), does
    not write it back, and takes the prefix again once the operator's route is gone."""
    await fib.apply(Desired(groups={"a": GroupSpec({member(1): 1})}, routes={PFX_A: "a"}))
    rig.r.ip("route", "replace", str(PFX_A), "via", "198.18.10.6", "proto", "static")
    await eventually(
        lambda: [r["prefix"] for r in fib.snapshot()["foreign_routes"]] == [str(PFX_A)]
    )
    assert fib.snapshot()["conflicts"]["glbd_route_replaced"] == 1
    await fib.apply(Desired(groups={"a": GroupSpec({member(1): 2})}, routes={PFX_A: "a"}))
    r = route(rig, str(PFX_A))
    assert r is not None and r.get("protocol") == "static"
    rig.r.ip("route", "del", str(PFX_A), "proto", "static")
    await eventually(lambda: (route(rig, str(PFX_A)) or {}).get("nhid") is not None)


async def test_failover_map_drops_an_id_another_daemon_took_over(rig: Rig) -> None:
    """The BFD engine deletes whatever id it is armed with. A member id of glbd's that another
    daemon replaced with its own nexthop (same id, its protocol) must be disarmed from the
    nexthop event itself, not from a later reconcile (which may be seconds away behind a long
    route audit or a write backoff: here nothing wakes it but the fix), and never touched again."""
    f = FibProgrammer(
        netns=rig.r.name,
        protocol=P,
        reconcile_interval_s=3600.0,
        route_audit_interval_s=3600.0,
        stale_s=0.0,
        weight_bits=16,
    )
    await f.start()
    try:
        maps: list[dict[Any, tuple[int, ...]]] = []
        f.on_failover_map = maps.append
        m1, m2 = member(1), member(2)
        await f.apply(Desired(groups={"p": GroupSpec({m1: 1, m2: 1})}, routes={PFX_A: "p"}))
        gw1 = (m1.gateway, "r-p1")
        (id1,) = maps[-1][gw1]
        rig.r.ip(
            "nexthop",
            "replace",
            "id",
            str(id1),
            "via",
            "198.18.10.2",
            "dev",
            "r-p1",
            "proto",
            "186",
        )
        await eventually(lambda: id1 not in maps[-1].get(gw1, ()))
        assert id1 not in {i for ids in f.failover_map().values() for i in ids}
        # glbd re-creates its member under another id and leaves the foreign one alone
        await f.reconcile(full=False)
        (new1,) = maps[-1][gw1]
        assert new1 != id1
        await f.apply(Desired(groups={"p": GroupSpec({m2: 1})}, routes={PFX_A: "p"}))
        await f.reconcile(full=True)
        (nh,) = rig.ip_json("nexthop", "show", "id", str(id1))
        assert nh["protocol"] == "bgp"
    finally:
        await f.stop(keep=True)


@pytest.mark.parametrize("step", ["apply", "update"])
async def test_withdraw_after_adopting_restart_is_final(rig: Rig, step: str) -> None:
    """After an adopting restart the stale hold keeps only what glbd has not re-learned: a
    prefix re-learned and then withdrawn goes at once with its group and member, while an
    adopted prefix glbd has not heard of again is still kept."""
    m1, m2, m3 = member(1), member(2), member(3)
    full = Desired(
        groups={"a": GroupSpec({m1: 1}), "b": GroupSpec({m2: 1}), "c": GroupSpec({m3: 1})},
        routes={PFX_A: "a", PFX_B: "b", PFX_C: "c"},
    )
    f1 = FibProgrammer(netns=rig.r.name, protocol=P)
    await f1.start()
    await f1.apply(full)
    await f1.stop(keep=True)
    f2 = FibProgrammer(netns=rig.r.name, protocol=P, stale_s=300.0, reconcile_interval_s=2.0)
    await f2.start(adopt=True)
    try:
        # BGP re-learns a and b (c not yet)
        relearned = Desired(
            groups={"a": full.groups["a"], "b": full.groups["b"]}, routes={PFX_A: "a", PFX_B: "b"}
        )
        res = await f2.apply(relearned)
        assert res.errors == ()
        # then every peer withdraws b
        if step == "apply":
            await f2.apply(Desired(groups={"a": full.groups["a"]}, routes={PFX_A: "a"}))
        else:
            await f2.update(remove_groups=["b"], remove=[PFX_B])
        await eventually(
            lambda: route(rig, str(PFX_B)) is None and "198.18.10.6" not in gateways(rig)
        )
        assert len([nh for nh in rig.nexthops() if "group" in nh]) == 2  # a, and c (held)
        assert route(rig, str(PFX_C)) is not None  # not re-learned: still held
        assert route(rig, str(PFX_A)) is not None
        assert f2.snapshot()["stale_remaining_s"] > 0
    finally:
        await f2.stop()


async def test_weight_probe_never_touches_another_daemons_nexthop(rig: Rig) -> None:
    """At start glbd may probe for 16-bit weights with a throw-away nexthop at the top of its
    id range. Another daemon's nexthop already at that id is neither replaced nor deleted."""
    top = 1_999_999  # IdRanges(): member_base + size - 1
    rig.r.ip("nexthop", "add", "id", str(top), "via", "198.18.10.2", "dev", "r-p1", "proto", "186")
    f = FibProgrammer(netns=rig.r.name, protocol=P)
    await f.start()
    try:
        assert f.weight_bits == 16
        (nh,) = rig.ip_json("nexthop", "show", "id", str(top))
        assert nh["protocol"] == "bgp" and nh.get("gateway") == "198.18.10.2"
        assert [n["id"] for n in rig.nexthops()] == [top]  # the probe cleaned up after itself
    finally:
        await f.stop(keep=True)
