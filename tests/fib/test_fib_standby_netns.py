"""Standby routes in the real kernel: a coloured prefix goes via its preferred next hop A
(r-p1); a second route at the standby metric goes via the standby group {B (r-p2), C (r-p3)}.
When r-p1 loses carrier (the peer end goes down, r-p1 stays admin-up) the kernel deletes the
member, the emptied primary group and its route by itself, and the lookup falls to the
standby route with no daemon running. Without a standby route the prefix is unroutable."""

from __future__ import annotations

import ipaddress
import json

import pytest
from fibrig import V4_GW, V6_GW, Rig, member
from glbdlab.waits import until as eventually

from glbd.fib.fibmodel import Desired, GroupSpec
from glbd.fib.programmer import FibProgrammer

pytestmark = pytest.mark.netns

P = 200
N = ipaddress.ip_network
PFX = N("203.0.113.0/24")
PFX6 = N("2001:db8:99::/48")
DST, DST6 = "203.0.113.5", "2001:db8:99::5"


def coloured(standby: bool) -> Desired:
    """Primary via A on r-p1; the standby groups (B twice C) exist in both cases, and have a
    route at the standby metric only with ``standby``."""
    return Desired(
        groups={
            "pri": GroupSpec({member(1): 1}),
            "sb": GroupSpec({member(2): 2, member(3): 1}),
            "pri6": GroupSpec({member(1, True): 1}),
            "sb6": GroupSpec({member(2, True): 2, member(3, True): 1}),
        },
        routes={PFX: "pri", PFX6: "pri6"},
        standby={PFX: "sb", PFX6: "sb6"} if standby else {},
    )


def via(rig: Rig, dst: str) -> str | None:
    """The gateway the kernel's route lookup picks for ``dst``; None: unroutable."""
    fam = ["-6"] if ":" in dst else []
    res = rig.r.ip(*fam, "-j", "route", "get", dst, check=False)
    if res.returncode != 0:
        assert "unreachable" in res.stderr, res.stderr
        return None
    (r,) = json.loads(res.stdout)
    return str(r["gateway"])


def glbd_routes(rig: Rig, v6: bool = False) -> dict[int, int]:
    """metric -> nhid of the routes of the coloured prefix of that family."""
    dst = str(PFX6 if v6 else PFX)
    return {
        int(r.get("metric", 0)): int(r["nhid"])
        for r in rig.routes(v6)
        if r["dst"] == dst and "nhid" in r
    }


def has_carrier(rig: Rig, ifname: str) -> bool:
    (lk,) = rig.ip_json("link", "show", ifname)
    return "NO-CARRIER" not in lk["flags"]


@pytest.mark.parametrize("standby", [True, False], ids=["standby", "no_standby"])
async def test_carrier_loss_falls_to_the_pre_armed_standby_route(rig: Rig, standby: bool) -> None:
    d = coloured(standby)
    f1 = FibProgrammer(netns=rig.r.name, protocol=P, stale_s=0.0)
    await f1.start()
    try:
        res = await f1.apply(d)
    finally:
        await f1.stop(keep=True)  # from here on the kernel acts alone: no daemon runs
    assert res.errors == ()
    assert via(rig, DST) == V4_GW[0] and via(rig, DST6) == V6_GW[0]  # the preferred one, A
    v4, v6 = glbd_routes(rig), glbd_routes(rig, v6=True)
    assert set(v4) == ({0, 1} if standby else {0})  # IPv4: metric 0, the standby 1
    assert set(v6) == ({1024, 1025} if standby else {1024})  # IPv6: 0 is 1024, standby 1025

    rig.peer_link(1, up=False)  # r-p1 stays admin-up and loses carrier
    if standby:
        await eventually(lambda: via(rig, DST) in V4_GW[1:], timeout=5, interval=0.05)
        await eventually(lambda: via(rig, DST6) in V6_GW[1:], timeout=5, interval=0.05)
        assert glbd_routes(rig) == {1: v4[1]} and glbd_routes(rig, v6=True) == {1025: v6[1025]}
    else:
        await eventually(lambda: via(rig, DST) is None, timeout=5, interval=0.05)
        await eventually(lambda: via(rig, DST6) is None, timeout=5, interval=0.05)
        assert glbd_routes(rig) == {} and glbd_routes(rig, v6=True) == {}

    # a restarted glbd adopts the standby routes as its own and, while r-p1 has no carrier,
    # has nothing to write: it does not fight the kernel
    f2 = FibProgrammer(netns=rig.r.name, protocol=P, stale_s=0.0)
    await f2.start(adopt=True)
    try:
        res = await f2.apply(d)
        assert res.ops == 0 and res.errors == ()
        assert (await f2.reconcile(full=True)).ops == 0
        row = f2.snapshot()["routes"][str(PFX)]
        assert row["installed_nhid"] is None and row["note"] == "group_down"
        if standby:
            assert row["standby"]["metric"] == 1 and row["standby"]["installed_nhid"] == v4[1]
            assert row["standby"]["diff"] is False
        else:
            assert "standby" not in row

        rig.peer_link(1, up=True)
        await eventually(lambda: has_carrier(rig, "r-p1"), timeout=5, interval=0.05)
        res = await f2.apply(d)
        assert res.errors == ()
        await eventually(lambda: via(rig, DST) == V4_GW[0], timeout=5, interval=0.05)
        await eventually(lambda: via(rig, DST6) == V6_GW[0], timeout=5, interval=0.05)
        back, back6 = glbd_routes(rig), glbd_routes(rig, v6=True)
        assert set(back) == set(v4) and set(back6) == set(v6)
        if standby:  # the standby routes never moved
            assert back[1] == v4[1] and back6[1025] == v6[1025]
        assert f2.stats.op_errors == 0
    finally:
        await f2.stop(keep=True)


async def test_a_running_glbd_leaves_the_standby_route_alone_through_carrier_loss(
    rig: Rig,
) -> None:
    d = coloured(standby=True)
    fib = FibProgrammer(netns=rig.r.name, protocol=P, reconcile_interval_s=2.0, stale_s=0.0)
    await fib.start()
    try:
        assert (await fib.apply(d)).errors == ()
        armed = glbd_routes(rig)
        rig.peer_link(1, up=False)
        await eventually(lambda: via(rig, DST) in V4_GW[1:], timeout=5, interval=0.05)
        # glbd saw the link go (its cache mirrors the flush) and has nothing to write
        await eventually(lambda: fib.snapshot()["groups"]["pri"]["note"] == "no_usable_member")
        ops = fib.stats.ops
        for _ in range(2):
            assert (await fib.reconcile(full=True)).ops == 0
        assert fib.stats.ops == ops and glbd_routes(rig) == {1: armed[1]}
        # carrier back: the link event alone brings the primary route back (no apply)
        rig.peer_link(1, up=True)
        await eventually(lambda: via(rig, DST) == V4_GW[0], timeout=5, interval=0.05)
        assert glbd_routes(rig)[1] == armed[1] and set(glbd_routes(rig)) == {0, 1}
    finally:
        await fib.stop(keep=True)
