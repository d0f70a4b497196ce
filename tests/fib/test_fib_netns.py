"""FibProgrammer against the real kernel (namespaces from the lab harness); ``ip -j nexthop`` /
``ip -j route`` / ``ip monitor`` are the oracle."""

from __future__ import annotations

import asyncio
import gc
import ipaddress
import socket
import subprocess
import threading
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fibrig import Rig, member
from glbdlab.waits import until as eventually

from glbd.fib.fibkernel import get_compat_mode
from glbd.fib.fibmodel import Desired, GroupSpec, Member, Resilient
from glbd.fib.programmer import FibProgrammer

pytestmark = pytest.mark.netns

P = 200
#: nexthop ids of the monitor markers, far from any id glbd assigns in these tests
MARK = 900_000
N = ipaddress.ip_network
PFX_A = N("203.0.113.0/24")
PFX_B = N("198.51.100.0/24")
PFX_6 = N("2001:db8:99::/48")


@pytest.fixture
async def fib(rig: Rig) -> AsyncIterator[FibProgrammer]:
    f = FibProgrammer(
        netns=rig.r.name, protocol=P, table=254, reconcile_interval_s=2.0, stale_s=0.0
    )
    await f.start()
    try:
        yield f
    finally:
        await f.stop(keep=True)


def by_gw(rig: Rig) -> dict[int, str]:
    return {nh["id"]: nh["gateway"] for nh in rig.nexthops() if "gateway" in nh}


def group_weights(rig: Rig, nhid: int) -> dict[str, int]:
    gws = by_gw(rig)
    return {gws[i]: w for i, w in rig.group(nhid).items()}


def route_nhid(rig: Rig, prefix: str, v6: bool = False) -> int | None:
    for r in rig.routes(v6):
        if r["dst"] == prefix:
            return int(r["nhid"]) if "nhid" in r else None
    return None


def two_groups(wa: dict[Member, int], wb: dict[Member, int] | None = None) -> Desired:
    groups = {"a": GroupSpec(wa)}
    routes = {PFX_A: "a"}
    if wb is not None:
        groups["v6"] = GroupSpec(wb)
        routes[PFX_6] = "v6"
    return Desired(groups=groups, routes=routes)


async def test_install_reweight_ipv6_and_snapshot(rig: Rig, fib: FibProgrammer) -> None:
    assert fib.weight_bits == 16  # kernel 6.18: weight_high detected
    d = two_groups({member(1): 3, member(2): 1}, {member(1, True): 1, member(2, True): 5})
    res = await fib.apply(d)
    assert res.errors == ()
    nhid = route_nhid(rig, "203.0.113.0/24")
    assert nhid is not None
    assert group_weights(rig, nhid) == {"198.18.10.2": 3, "198.18.10.6": 1}
    assert all(nh["protocol"] != "kernel" for nh in rig.nexthops())
    nh6 = route_nhid(rig, "2001:db8:99::/48", v6=True)
    assert nh6 is not None
    assert group_weights(rig, nh6) == {"2001:db8:10:1::2": 1, "2001:db8:10:2::2": 5}
    # reweight: the group changes in place, the route keeps its nhid
    res = await fib.apply(
        two_groups(
            {member(1): 1, member(2): 7, member(3): 2}, {member(1, True): 1, member(2, True): 5}
        )
    )
    assert res.ops == 2 and res.errors == ()  # one member nexthop + one group replace
    assert route_nhid(rig, "203.0.113.0/24") == nhid
    assert group_weights(rig, nhid) == {"198.18.10.2": 1, "198.18.10.6": 7, "198.18.10.10": 2}
    # the path-quality fast path: one group, O(members), one replace
    res = await fib.set_weights("a", {member(1): 5, member(2): 1, member(3): 1})
    assert res.ops == 1 and res.errors == ()
    assert group_weights(rig, nhid) == {"198.18.10.2": 5, "198.18.10.6": 1, "198.18.10.10": 1}
    # several groups' weights: one update, one batch
    applies = fib.stats.applies
    res = await fib.set_group_weights(
        {
            "a": {member(1): 2, member(2): 1, member(3): 1},
            "v6": {member(1, True): 4, member(2, True): 1},
        }
    )
    assert res.ops == 2 and res.errors == () and fib.stats.applies == applies + 1
    assert group_weights(rig, nhid) == {"198.18.10.2": 2, "198.18.10.6": 1, "198.18.10.10": 1}
    assert group_weights(rig, nh6) == {"2001:db8:10:1::2": 4, "2001:db8:10:2::2": 1}
    with pytest.raises(KeyError):
        await fib.set_group_weights({"nope": {member(1): 1}})
    # 16-bit weights: ip 6.1 shows them wrong, so check through glbd's own kernel dump
    await fib.apply(two_groups({member(1): 1000, member(2): 300}))
    await fib.reconcile(full=True)
    snap = fib.snapshot()
    g = snap["groups"]["a"]
    assert g["installed"] == {"198.18.10.2@r-p1": 1000, "198.18.10.6@r-p2": 300}
    assert g["diff"] is False and snap["routes"]["203.0.113.0/24"]["diff"] is False
    assert route_nhid(rig, "2001:db8:99::/48", v6=True) is None  # v6 route removed


async def test_resilient_buckets_follow_weights(rig: Rig, fib: FibProgrammer) -> None:
    res = Resilient(buckets=8, idle_timer_s=0.0, unbalanced_timer_s=0.0)
    d = Desired(groups={"r": GroupSpec({member(1): 1, member(2): 1}, res)}, routes={PFX_B: "r"})
    await fib.apply(d)
    nhid = route_nhid(rig, "198.51.100.0/24")
    assert nhid is not None

    def buckets() -> Counter[str]:
        gws = by_gw(rig)
        rows = rig.ip_json("nexthop", "bucket", "show", "id", str(nhid))
        return Counter(gws[b["bucket"]["nhid"]] for b in rows)

    assert buckets() == {"198.18.10.2": 4, "198.18.10.6": 4}
    await fib.apply(
        Desired(groups={"r": GroupSpec({member(1): 3, member(2): 1}, res)}, routes={PFX_B: "r"})
    )
    assert route_nhid(rig, "198.51.100.0/24") == nhid
    await eventually(lambda: buckets() == {"198.18.10.2": 6, "198.18.10.6": 2})
    (g,) = rig.ip_json("nexthop", "show", "id", str(nhid))
    assert g["type"] == "resilient" and g["resilient_args"]["buckets"] == 8
    # failover: the removed member's buckets move at once
    assert await fib.remove_nexthop("198.18.10.6") == 1
    assert buckets() == {"198.18.10.2": 8}


def busy_buckets(rig: Rig, *dests: str) -> None:
    """Every bucket of the groups behind ``dests`` used just now: a datagram from each of
    2000 source ports (the L4 hash policy spreads them over the buckets)."""
    rig.r.run(["sysctl", "-qw", "net.ipv4.fib_multipath_hash_policy=1"])
    with rig.r.entered():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for port in range(20000, 22000):
            s.close()
            with rig.r.entered():
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind(("0.0.0.0", port))
            for d in dests:
                s.sendto(b"x", (d, 9))
    finally:
        s.close()


async def test_a_share_that_falls_moves_busy_buckets_at_once(rig: Rig, fib: FibProgrammer) -> None:
    """Two resilient groups, every bucket busy, idle timer 100 s: the same weight change
    (member 1 from half to a quarter) moves member 1's excess buckets at once in the group with
    ``migrate_share`` and none in the group without; the idle timer is 100 s again after."""
    slow = Resilient(buckets=64, idle_timer_s=100.0, unbalanced_timer_s=0.0)
    fast = Resilient(buckets=64, idle_timer_s=100.0, unbalanced_timer_s=0.0, migrate_share=0.8)

    def desired(w1: int) -> Desired:
        ws = {member(1): w1, member(2): 3}
        return Desired(
            groups={"fast": GroupSpec(ws, fast), "slow": GroupSpec(ws, slow)},
            routes={PFX_B: "fast", PFX_A: "slow"},
        )

    await fib.apply(desired(3))
    ids = {k: route_nhid(rig, str(p)) for k, p in (("fast", PFX_B), ("slow", PFX_A))}

    def buckets(key: str) -> Counter[str]:
        gws = by_gw(rig)
        rows = rig.ip_json("nexthop", "bucket", "show", "id", str(ids[key]))
        return Counter(gws[b["bucket"]["nhid"]] for b in rows)

    half = {"198.18.10.2": 32, "198.18.10.6": 32}
    assert buckets("fast") == buckets("slow") == half
    busy_buckets(rig, "198.51.100.5", "203.0.113.5")
    await fib.apply(desired(1))
    assert rig.group(ids["fast"]) == rig.group(ids["slow"])  # both reweighted 1:3
    assert buckets("fast") == {"198.18.10.2": 16, "198.18.10.6": 48}
    assert buckets("slow") == half  # busy: they wait for the idle timer
    assert fib.snapshot(routes=False)["counters"]["migrations"] == 1
    for key in ("fast", "slow"):
        (g,) = rig.ip_json("nexthop", "show", "id", str(ids[key]))
        assert g["resilient_args"]["idle_timer"] == 100, g
    # a share that rises moves nothing busy: member 1 back to half
    busy_buckets(rig, "198.51.100.5")
    await fib.apply(desired(3))
    assert buckets("fast") == {"198.18.10.2": 16, "198.18.10.6": 48}
    assert fib.snapshot(routes=False)["counters"]["migrations"] == 1


async def test_link_down_up_member_removed_and_recreated(rig: Rig, fib: FibProgrammer) -> None:
    await fib.apply(two_groups({member(1): 2, member(2): 1}))
    nhid = route_nhid(rig, "203.0.113.0/24")
    assert nhid is not None
    rig.peer_link(1, up=False)  # carrier loss: the kernel silently drops member 1
    await eventually(lambda: group_weights(rig, nhid) == {"198.18.10.6": 1})
    rig.peer_link(2, up=False)  # last member: group and route vanish, silently
    await eventually(lambda: route_nhid(rig, "203.0.113.0/24") is None)
    await eventually(lambda: fib.snapshot()["groups"]["a"]["note"] == "no_usable_member")
    rig.peer_link(1, up=True)
    rig.peer_link(2, up=True)
    await eventually(lambda: route_nhid(rig, "203.0.113.0/24") == nhid)
    await eventually(lambda: group_weights(rig, nhid) == {"198.18.10.2": 2, "198.18.10.6": 1})
    assert fib.snapshot()["groups"]["a"]["diff"] is False
    # local admin down: same silent flush, same repair
    rig.r.ip("link", "set", "r-p2", "down")
    await eventually(lambda: group_weights(rig, nhid) == {"198.18.10.2": 2})
    await eventually(
        lambda: fib.snapshot()["groups"]["a"]["excluded"] == {"198.18.10.6@r-p2": "admin_down"}
    )
    rig.r.ip("link", "set", "r-p2", "up")
    await eventually(lambda: group_weights(rig, nhid) == {"198.18.10.2": 2, "198.18.10.6": 1})


async def test_a_weight_change_that_makes_a_group_usable_again_brings_its_routes(
    rig: Rig, fib: FibProgrammer
) -> None:
    """The weight fast path plans one group; when that group comes back from "no usable
    member", the routes it lost (not named by the change) come back with it."""
    await fib.apply(two_groups({member(1): 1}))
    rig.peer_link(1, up=False)
    await eventually(lambda: route_nhid(rig, "203.0.113.0/24") is None)
    await eventually(lambda: fib.snapshot()["groups"]["a"]["note"] == "no_usable_member")
    await fib.set_weights("a", {member(1): 1, member(2): 2})
    nhid = route_nhid(rig, "203.0.113.0/24")
    assert nhid is not None and group_weights(rig, nhid) == {"198.18.10.6": 2}


async def test_adopt_on_restart_without_transient_removal(rig: Rig) -> None:
    d = two_groups({member(1): 2, member(2): 1}, {member(1, True): 1, member(3, True): 1})
    f1 = FibProgrammer(netns=rig.r.name, protocol=P)
    await f1.start()
    await f1.apply(d)
    before_nh = rig.nexthops()
    before_rt = rig.routes() + rig.routes(v6=True)
    await f1.stop(keep=True)
    mon = rig.r.popen(["ip", "-o", "monitor", "nexthop", "route"], stdout=subprocess.PIPE)
    seen: list[str] = []
    reader = threading.Thread(
        target=lambda: seen.extend(line.decode() for line in mon.stdout or ()), daemon=True
    )
    reader.start()

    def printed(n: int) -> bool:
        return any(f"Deleted id {MARK + n} " in ln for ln in seen)

    def pulse(n: int) -> bool:
        """A nexthop nobody else uses, added and deleted: once the monitor has printed its
        deletion, it has printed every event before it."""
        if not printed(n):
            rig.r.ip("nexthop", "add", "id", str(MARK + n), "blackhole")
            rig.r.ip("nexthop", "del", "id", str(MARK + n))
        return printed(n)

    async def marker(n: int) -> None:
        await eventually(lambda: printed(n) or pulse(n), interval=0.2)

    try:
        await marker(0)  # the monitor is subscribed: pulses until one is printed
        f2 = FibProgrammer(netns=rig.r.name, protocol=P, stale_s=0.0)
        await f2.start(adopt=True)
        res = await f2.apply(d)
        await f2.reconcile(full=True)
        await f2.stop(keep=True)
        assert res.ops == 0 and res.errors == ()
        await marker(1)  # everything the restart did is printed
    finally:
        mon.terminate()
        mon.wait(timeout=5)
        reader.join(timeout=5)
    between = seen[seen.index(next(ln for ln in seen if f"Deleted id {MARK} " in ln)) + 1 :]
    between = [ln for ln in between if not any(f"id {MARK + n} " in ln for n in (0, 1))]
    assert between == []  # not one add, replace or delete during the restart
    assert rig.nexthops() == before_nh
    assert rig.routes() + rig.routes(v6=True) == before_rt


async def test_foreign_objects_untouched_and_remove_on_stop(rig: Rig) -> None:
    rig.r.ip_batch(
        [
            "nexthop add id 2000000 via 198.18.10.2 dev r-p1 proto 186",  # in glbd's id range
            "route add 192.0.2.0/24 via 198.18.10.6 proto static",
            "route add 203.0.113.0/24 nhid 2000000 proto 186",  # glbd wants this prefix too
        ]
    )
    f = FibProgrammer(netns=rig.r.name, protocol=P)
    await f.start()
    try:
        d = Desired(
            groups={"a": GroupSpec({member(1): 1, member(2): 1})}, routes={PFX_A: "a", PFX_B: "a"}
        )
        await f.apply(d)
        snap = f.snapshot()
        assert snap["routes"]["203.0.113.0/24"]["note"] == "foreign_route"
        assert snap["groups"]["a"]["nhid"] != 2000000
    finally:
        await f.stop(keep=False)
    nhs = rig.nexthops()
    assert [(n["id"], n["protocol"]) for n in nhs] == [(2000000, "bgp")]
    dsts = {r["dst"]: r.get("protocol") for r in rig.routes()}
    assert dsts["192.0.2.0/24"] == "static" and dsts["203.0.113.0/24"] == "bgp"
    assert "198.51.100.0/24" not in dsts


async def test_failover_one_message_per_group_then_restore(rig: Rig, fib: FibProgrammer) -> None:
    groups = {f"p{i}": GroupSpec({member(1): 1 + i, member(2): 1, member(3): 2}) for i in range(20)}
    routes = {N(f"203.0.113.{4 * i}/30"): f"p{i}" for i in range(20)}
    solo = {"solo": GroupSpec({member(1): 1})}
    await fib.apply(Desired(groups={**groups, **solo}, routes={**routes, PFX_B: "solo"}))
    assert await fib.remove_nexthop("198.18.10.2", "r-p1") == 21
    gws = by_gw(rig)
    for nh in rig.nexthops():
        if "group" in nh:
            assert "198.18.10.2" not in {gws[e["id"]] for e in nh["group"]}
    assert route_nhid(rig, "198.51.100.0/24") is None  # its only member is gone
    assert fib.snapshot()["groups"]["p3"]["excluded"] == {"198.18.10.2@r-p1": "removed"}
    await fib.restore_nexthop("198.18.10.2")
    assert route_nhid(rig, "198.51.100.0/24") is not None
    nhid = route_nhid(rig, "203.0.113.12/30")
    assert nhid is not None and group_weights(rig, nhid)["198.18.10.2"] == 4


async def test_compat_mode_helper(rig: Rig) -> None:
    f = FibProgrammer(netns=rig.r.name, protocol=P, compat_mode=0)
    await f.start()
    try:
        assert get_compat_mode(rig.r.name) == 0
        assert f.snapshot()["compat_mode"] == 0
    finally:
        await f.stop()


async def test_ipv6_link_local_members(rig: Rig, fib: FibProgrammer) -> None:
    ll = [Member(ipaddress.ip_address(f"fe80::{i}"), f"r-p{i}") for i in (1, 2)]
    d = Desired(groups={"ll": GroupSpec({ll[0]: 2, ll[1]: 1})}, routes={PFX_6: "ll"})
    res = await fib.apply(d)
    assert res.errors == ()
    nhid = route_nhid(rig, "2001:db8:99::/48", v6=True)
    assert nhid is not None
    assert group_weights(rig, nhid) == {"fe80::1": 2, "fe80::2": 1}
    devs = {nh["gateway"]: nh["dev"] for nh in rig.nexthops() if "gateway" in nh}
    assert devs == {"fe80::1": "r-p1", "fe80::2": "r-p2"}


async def test_update_routes_delta(rig: Rig, fib: FibProgrammer) -> None:
    await fib.apply(two_groups({member(1): 1, member(2): 1}))
    nhid = route_nhid(rig, "203.0.113.0/24")
    res = await fib.update(add={PFX_B: "a"}, remove=[PFX_A])
    assert res.ops == 2 and res.errors == ()
    assert route_nhid(rig, "198.51.100.0/24") == nhid
    assert route_nhid(rig, "203.0.113.0/24") is None
    snap = fib.snapshot()
    assert set(snap["routes"]) == {"198.51.100.0/24"} and snap["groups"]["a"]["routes"] == 1
    assert (await fib.reconcile(full=True)).ops == 0


async def test_update_moves_routes_to_a_new_group_without_a_full_plan(
    rig: Rig, fib: FibProgrammer
) -> None:
    """A BGP burst step: a new profile appears, the old one's prefixes move to it and it
    goes. One incremental update, no O(routes) plan; a route outside the step keeps its
    group. Then removing a group another route still uses falls back to the full plan."""
    await fib.apply(
        Desired(
            groups={"a": GroupSpec({member(1): 1}), "keep": GroupSpec({member(3, v6=True): 1})},
            routes={PFX_A: "a", PFX_6: "keep"},
        )
    )
    keep = route_nhid(rig, "2001:db8:99::/48", v6=True)
    assert keep is not None
    full_plans = fib.stats.full_plans
    res = await fib.update(
        groups={"b": GroupSpec({member(1): 1, member(2): 3})},
        remove_groups=["a"],
        add={PFX_A: "b", PFX_B: "b"},
    )
    assert res.errors == () and fib.stats.full_plans == full_plans  # no O(routes) plan
    new = route_nhid(rig, "203.0.113.0/24")
    assert new is not None and route_nhid(rig, "198.51.100.0/24") == new
    assert sorted(group_weights(rig, new).values()) == [1, 3]
    # the new group may take over the old one's id (its routes voted for it): either way
    # exactly two groups are left in the kernel
    groups = [nh["id"] for nh in rig.nexthops() if "group" in nh]
    assert len(groups) == 2 and keep in groups
    assert route_nhid(rig, "2001:db8:99::/48", v6=True) == keep
    snap = fib.snapshot()
    assert set(snap["groups"]) == {"b", "keep"}
    # "keep" still has a route that is not part of the step: this must plan everything
    full_plans = fib.stats.full_plans
    await fib.update(remove_groups=["keep"])
    assert fib.stats.full_plans == full_plans + 1
    assert (await fib.reconcile(full=True)).ops == 0


async def test_stale_objects_kept_then_removed_after_restart(rig: Rig) -> None:
    f1 = FibProgrammer(netns=rig.r.name, protocol=P)
    await f1.start()
    await f1.apply(
        Desired(
            groups={"a": GroupSpec({member(1): 1}), "b": GroupSpec({member(2): 1})},
            routes={PFX_A: "a", PFX_B: "b"},
        )
    )
    await f1.stop(keep=True)
    f2 = FibProgrammer(netns=rig.r.name, protocol=P, stale_s=1.0)
    await f2.start(adopt=True)
    try:
        await f2.apply(Desired(groups={"a": GroupSpec({member(1): 1})}, routes={PFX_A: "a"}))
        assert route_nhid(rig, "198.51.100.0/24") is not None  # kept during the stale timer
        assert f2.snapshot()["stale_remaining_s"] > 0
        await eventually(lambda: route_nhid(rig, "198.51.100.0/24") is None, timeout=10)
        assert route_nhid(rig, "203.0.113.0/24") is not None
        gws = {nh.get("gateway") for nh in rig.nexthops()}
        assert "198.18.10.6" not in gws
    finally:
        await f2.stop()


@pytest.mark.parametrize("carrier", [False, True], ids=["bfd", "bfd+carrier"])
async def test_bfd_down_up_as_incremental_updates_ends_equal(
    rig: Rig, fib: FibProgrammer, carrier: bool
) -> None:
    """What the daemon does on leaf2 of the e2e fabric when spine1 goes away and comes back,
    with new/removed profiles as incremental ``update`` steps (resilient groups, as there):
    failover, the prefixes move to a one-next-hop profile (the old one removed), the link
    comes back, restore, the prefixes move back to a two-next-hop profile under the old key
    (which takes the other group's id by route vote). The kernel must end with equal weights
    and agree with glbd's cache."""
    res = Resilient(buckets=128, idle_timer_s=1.0, unbalanced_timer_s=5.0)
    both = GroupSpec({member(1): 255, member(2): 255}, res)
    await fib.apply(Desired(groups={"ab": both}, routes={PFX_A: "ab", PFX_B: "ab"}))
    first = route_nhid(rig, "203.0.113.0/24")
    assert first is not None
    if carrier:
        rig.peer_link(1, up=False)  # the kernel silently drops member 1 from the group
    assert await fib.remove_nexthop("198.18.10.2", "r-p1") == 1
    await fib.update(
        groups={"b": GroupSpec({member(2): 255}, res)},
        remove_groups=["ab"],
        add={PFX_A: "b", PFX_B: "b"},
    )
    nhid = route_nhid(rig, "203.0.113.0/24")
    assert nhid is not None and group_weights(rig, nhid) == {"198.18.10.6": 255}
    if carrier:
        rig.peer_link(1, up=True)
    await fib.restore_nexthop("198.18.10.2", "r-p1")
    await fib.update(groups={"ab": both}, remove_groups=["b"], add={PFX_A: "ab", PFX_B: "ab"})

    def equal() -> bool:
        a, b = route_nhid(rig, "203.0.113.0/24"), route_nhid(rig, "198.51.100.0/24")
        return (
            a is not None
            and a == b
            and group_weights(rig, a) == {"198.18.10.2": 255, "198.18.10.6": 255}
        )

    def agreed() -> bool:
        # the kernel shows a background write before glbd has read its answer: the cache
        # agrees a loop turn later
        g = fib.snapshot(routes=False)["groups"]
        return set(g) == {"ab"} and g["ab"]["diff"] is False

    await eventually(lambda: equal() and agreed())
    assert len([nh for nh in rig.nexthops() if "group" in nh]) == 1
    snap = fib.snapshot()
    assert not any(r["diff"] for r in snap["routes"].values())
    assert (await fib.reconcile(full=True)).ops == 0  # the cache agreed with the kernel


async def test_failover_done_by_the_bfd_engine_is_mirrored_and_held(
    rig: Rig, fib: FibProgrammer
) -> None:
    """The BFD engine's failover (bfd.failover): glbd arms RTM_DELNEXTHOP for a next hop's
    member ids (failover_map, reported on change); when someone sends them, the kernel drops the
    member from every group and glbd mirrors it. Before the BFD event claims it, a write must
    not re-create the member (held out); after the claim it stays out until restore_nexthop. An
    unclaimed deletion (an operator's ``ip nexthop del``) is repaired after the hold."""
    from glbd.fib.fibmsg import failover_wire

    maps: list[dict[Any, tuple[int, ...]]] = []
    fib.on_failover_map = maps.append
    m1, m2, m3 = member(1), member(2), member(3)
    groups = {"p": GroupSpec({m1: 2, m2: 1, m3: 1}), "solo": GroupSpec({m1: 1})}
    await fib.apply(Desired(groups=groups, routes={PFX_A: "p", PFX_B: "solo"}))
    fm = maps[-1]
    gw1 = (m1.gateway, "r-p1")
    assert set(fm) == {gw1, (m2.gateway, "r-p2"), (m3.gateway, "r-p3")}
    (id1,) = fm[gw1]
    nhid = route_nhid(rig, "203.0.113.0/24")
    assert nhid is not None
    # the engine's datagram, sent from another socket in the namespace
    with rig.r.socket(16, 3, 0) as s:  # AF_NETLINK, SOCK_RAW, NETLINK_ROUTE
        s.sendto(failover_wire(fm[gw1]), (0, 0))
    assert group_weights(rig, nhid) == {"198.18.10.6": 1, "198.18.10.10": 1}
    assert route_nhid(rig, "198.51.100.0/24") is None  # its only member went, with the group
    await eventually(lambda: fib.stats.foreign_deletes == 1)
    assert fib.snapshot()["groups"]["p"]["excluded"] == {m1.label: "deleted_elsewhere"}
    assert gw1 not in maps[-1]  # disarmed: nothing left to delete
    # a weight change before the BFD event arrives must not bring member 1 back
    await fib.set_weights("p", {m1: 5, m2: 1, m3: 3})
    assert group_weights(rig, nhid) == {"198.18.10.6": 1, "198.18.10.10": 3}
    assert fib.failed_over(m1.gateway, "r-p1") == 0  # the kernel event was first
    assert fib.snapshot()["groups"]["p"]["excluded"] == {m1.label: "removed"}
    # the stimulus: the hold passes; the member is claimed, so it stays out after it
    await asyncio.sleep(fib.foreign_delete_hold_s + 0.3)
    assert "198.18.10.2" not in group_weights(rig, nhid)
    assert fib.stats.engine_failovers == 1
    await fib.restore_nexthop(m1.gateway, "r-p1")
    assert group_weights(rig, nhid) == {"198.18.10.2": 5, "198.18.10.6": 1, "198.18.10.10": 3}
    assert route_nhid(rig, "198.51.100.0/24") is not None
    assert maps[-1][gw1] == (id1,)  # same id, armed again
    # unclaimed: an operator deletes member 2; held briefly, then re-created by the reconcile
    (id2,) = maps[-1][(m2.gateway, "r-p2")]
    rig.r.ip("nexthop", "del", "id", str(id2))
    await eventually(lambda: fib.stats.foreign_deletes == 2)
    await eventually(lambda: group_weights(rig, nhid).get("198.18.10.6") == 1, timeout=4.0)
    assert fib.snapshot()["groups"]["p"]["excluded"] == {}


async def test_a_large_install_runs_without_collector_passes(rig: Rig, fib: FibProgrammer) -> None:
    """10k routes in one apply: the cyclic collector is paused for the step (its passes over a
    heap filling with the step's objects cost a fifth of an install) and running afterwards."""
    m = member(1)
    routes = {N(f"10.{i >> 8}.{i & 255}.0/24"): "a" for i in range(10_000)}
    runs: list[int] = []

    def seen(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            runs.append(info["generation"])

    gc.callbacks.append(seen)
    try:
        res = await fib.apply(Desired(groups={"a": GroupSpec({m: 1})}, routes=routes))
    finally:
        gc.callbacks.remove(seen)
    assert not res.errors and res.ops >= 10_000
    assert len(runs) <= 1, runs  # the one pass over the step's objects, once it is back on
    assert gc.isenabled()
    assert sum(1 for r in rig.routes(False) if "nhid" in r) >= 10_000


async def test_a_weight_change_is_not_held_behind_a_reconcile_reading_the_kernel(
    rig: Rig, fib: FibProgrammer
) -> None:
    """The reconcile reads the kernel without the lock: a weight change made while it reads
    (someone else's 20000 nexthops make its dump take many loop turns) goes out at once; the
    reconcile, seeing glbd wrote meanwhile, reads again and keeps the new weights."""
    await fib.apply(two_groups({member(1): 1, member(2): 1}))
    nhid = route_nhid(rig, "203.0.113.0/24")
    assert nhid is not None
    rig.r.ip_batch(
        [
            f"nexthop add id {MARK + 1 + i} via 198.18.10.2 dev r-p1 proto static"
            for i in range(20000)
        ]
    )
    task = asyncio.create_task(fib.reconcile(full=False))
    await asyncio.sleep(0)  # one loop turn: the reconcile has asked for its first dump
    res = await fib.set_weights("a", {member(1): 7, member(2): 1})
    assert res.errors == () and not task.done()
    assert group_weights(rig, nhid) == {"198.18.10.2": 7, "198.18.10.6": 1}
    assert (await task).errors == ()
    assert group_weights(rig, nhid) == {"198.18.10.2": 7, "198.18.10.6": 1}
    assert fib.snapshot()["groups"]["a"]["diff"] is False


async def test_a_reconcile_that_finds_the_kernel_as_expected_plans_nothing_and_drift_is_repaired(
    rig: Rig,
) -> None:
    """The periodic reconcile plans only when its dumps differ from what glbd expects: after
    glbd's own writes (a full sync, then a weights step) nothing is planned; a group changed
    behind glbd's back with glbd's own protocol (no notification reaches glbd) is repaired.
    Its own periodic run is an hour away: every reconcile here is the test's."""
    fib = FibProgrammer(netns=rig.r.name, protocol=P, table=254, reconcile_interval_s=3600.0)
    await fib.start()
    try:
        await _reconcile_cases(rig, fib)
    finally:
        await fib.stop(keep=True)


async def _reconcile_cases(rig: Rig, fib: FibProgrammer) -> None:
    await fib.apply(two_groups({member(1): 1, member(2): 1}))
    await fib.set_weights("a", {member(1): 3, member(2): 1})
    nhid = route_nhid(rig, "203.0.113.0/24")
    assert nhid is not None
    unchanged = fib.stats.reconciles_unchanged
    res = await fib.reconcile(full=False)
    assert res.ops == 0 and fib.stats.reconciles_unchanged == unchanged + 1
    ids = {gw: i for i, gw in by_gw(rig).items()}
    rig.r.ip("nexthop", "replace", "id", str(nhid), "group",
             f"{ids['198.18.10.2']},9/{ids['198.18.10.6']},1", "proto", str(P))  # fmt: skip
    assert group_weights(rig, nhid) == {"198.18.10.2": 9, "198.18.10.6": 1}
    res = await fib.reconcile(full=False)
    assert res.ops == 1 and fib.stats.reconciles_unchanged == unchanged + 1
    assert group_weights(rig, nhid) == {"198.18.10.2": 3, "198.18.10.6": 1}
    assert (await fib.reconcile(full=False)).ops == 0
    assert fib.stats.reconciles_unchanged == unchanged + 2


async def test_new_weights_go_out_on_the_fast_lane_beside_a_step_in_flight(
    rig: Rig, fib: FibProgrammer
) -> None:
    """A BGP step is waiting for the kernel's answers when a heartbeat changes another
    group's weights: the lane writes that group before the call returns, without waiting for
    the step. The group the step names, a change of members and a group the kernel does not
    have are not taken. In the end the cache agrees with the kernel."""
    m1, m2, m3 = member(1), member(2), member(3)
    await fib.apply(
        Desired(
            groups={"a": GroupSpec({m1: 1, m2: 1}), "c": GroupSpec({m2: 1, m3: 1})},
            routes={PFX_A: "a", PFX_B: "c"},
        )
    )
    gid_c = route_nhid(rig, "198.51.100.0/24")
    assert gid_c is not None
    await fib.reconcile(full=True)  # settled: the step below is incremental
    step = asyncio.get_running_loop().create_task(
        fib.update(groups={"a": GroupSpec({m1: 4, m2: 1})})
    )
    await asyncio.sleep(0)  # one turn: the step has sent its write and waits for the answer
    taken = fib.weights_now({"a": {m1: 1, m2: 9}, "c": {m2: 5, m3: 1}, "x": {m1: 1}, "c2": {m3: 1}})
    assert not step.done()
    assert taken == {"c"}
    assert group_weights(rig, gid_c) == {"198.18.10.6": 5, "198.18.10.10": 1}
    assert fib.weights_now({"c": {m2: 1}}) == set()  # m3 leaves: a structural change
    await step
    await eventually(lambda: fib.snapshot()["counters"]["lane_writes"] == 1)
    assert (await fib.reconcile(full=True)).ops == 0
    assert fib.snapshot()["counters"]["lane_errors"] == 0
