"""glbd.flowlet.placement: a group's buckets listed member by member, and the kernel's bucket
table read back as the member of each bucket (real kernel, a resilient group scattered by a
weight change)."""

from __future__ import annotations

import itertools
import re
from ipaddress import ip_network

import pytest
from flowletrig import Rig, Start, member_of_new_flow
from glbdlab.netns import Lab
from hypothesis import given
from hypothesis import strategies as hs

from glbd.fib.fibread import read_buckets
from glbd.flowlet.placement import (
    MAX_BUCKETS,
    MAX_GROUPS,
    MAX_PREFIXES,
    LayoutTracker,
    bucket_order,
    listed,
    listed_routes,
    shared,
)
from glbd.netlink.rtsocket import NetlinkSocket


def test_buckets_are_listed_member_by_member() -> None:
    assert bucket_order([7, 5, 7, 5, 9]) == (1, 3, 0, 2, 4)
    assert bucket_order([]) == ()


@given(hs.lists(hs.integers(1, 6), max_size=200), hs.integers(1, 64))
def test_evenly_spread_positions_land_on_members_by_their_bucket_counts(
    members: list[int], points: int
) -> None:
    order = bucket_order(members)
    assert sorted(order) == list(range(len(members)))
    n = len(members)
    if not n:
        return
    # positions floor(j * n / points) for j < points: a member with k buckets gets
    # within one of k * points / n of them, wherever its buckets are
    got = [members[order[j * n // points]] for j in range(points)]
    for m in set(members):
        want = members.count(m) * points / n
        assert abs(got.count(m) - want) <= 1


@pytest.mark.netns
async def test_the_bucket_table_is_read_back_from_the_kernel(netns_lab: Lab) -> None:
    a, _b = netns_lab.pair()
    for i in range(1, 5):
        a.ip("nexthop", "add", "id", str(i), "via", "198.18.0.2", "dev", "a-b")
    group = ["id", "10", "group", "1/2/3/4", "type", "resilient", "buckets", "32"]
    a.ip("nexthop", "add", *group, "idle_timer", "0")
    # weights that move buckets, then back: the members' buckets are no longer runs
    a.ip("nexthop", "replace", "id", "10", "group", "1/2/3/4,3", "type", "resilient")
    a.ip("nexthop", "replace", "id", "10", "group", "1/2/3/4", "type", "resilient")
    shown = a.run(["ip", "nexthop", "bucket", "show", "id", "10"]).stdout
    want = {int(i): int(m) for i, m in re.findall(r"index (\d+) .*?nhid (\d+)", shown)}
    s = await NetlinkSocket.open(netns=a.name)
    try:
        got = await read_buckets(s, 10)
        assert await read_buckets(s, 1) == ()  # a plain nexthop has none
    finally:
        s.close()
    assert got == tuple(want[i] for i in range(32))
    assert sorted(got) == sorted([1, 2, 3, 4] * 8)
    runs = [m for m, _ in itertools.groupby(got)]
    assert len(runs) > 4  # scattered: a quarter of the buckets is no longer a member's


def _scatter(rig: Rig, v6: bool) -> None:
    """The router's group of one family at 1:1 with its buckets scattered by weight changes
    and back (64 buckets: the second member holds 0-7 and 24-47, the first 8-23 and 48-63):
    each quarter of the bucket space no longer belongs to one member."""
    rig.group((1, 1), "resilient")
    gid, a, b = ("20", "3", "4") if v6 else ("10", "1", "2")
    for w in ("{a},3/{b}", "{a}/{b}", "{a}/{b},3", "{a}/{b}", "{a},5/{b},3", "{a}/{b}"):
        w = w.format(a=a, b=b)
        rig.r.ip("nexthop", "replace", "id", gid, "group", w, "type", "resilient")


async def _placed(rig: Rig, flowlet: Start, layout: bool, v6: bool) -> list[int]:
    """Flows on m2 of 4 new flows to each of 12 destinations of one family."""
    att = await flowlet(timeout_us=2_000_000, buckets=64)
    gid = 20 if v6 else 10
    net = ip_network("2001:db8:ff::/64" if v6 else "203.0.113.0/24")
    if layout:
        s = await NetlinkSocket.open(netns=rig.r.name)
        try:
            members = await read_buckets(s, gid)
        finally:
            s.close()
        assert len(members) == 64 and len(list(itertools.groupby(members))) > 2
        assert att.set_layouts({net: gid}, {gid: bucket_order(members)}) == 2
        assert att.set_layouts({net: gid}, {gid: bucket_order(members)}) == 0  # nothing moved
    return [sum(member_of_new_flow(rig, str(net[d]), v6) for _ in range(4)) for d in range(2, 14)]


@pytest.mark.netns
@pytest.mark.parametrize("v6", [False, True], ids=["ipv4", "ipv6"])
async def test_a_layout_makes_spread_placement_exact_on_scattered_buckets(
    rig: Rig, flowlet: Start, v6: bool
) -> None:
    _scatter(rig, v6)
    assert await _placed(rig, flowlet, layout=True, v6=v6) == [2] * 12


@pytest.mark.netns
@pytest.mark.parametrize("v6", [False, True], ids=["ipv4", "ipv6"])
async def test_without_a_layout_scattered_buckets_split_unevenly(
    rig: Rig, flowlet: Start, v6: bool
) -> None:
    """The control: the points of the quarters that both members share land on either, so a
    destination's 4 flows split 2:2 only half the time (all twelve: 2e-4)."""
    _scatter(rig, v6)
    assert await _placed(rig, flowlet, layout=False, v6=v6) != [2] * 12


@pytest.mark.netns
async def test_the_program_is_given_no_more_groups_than_its_map_holds(
    rig: Rig, flowlet: Start
) -> None:
    """More groups than the ``orders`` map holds: the groups most prefixes use get a list,
    the rest (and prefixes over a group without a list) are counted as left out; new groups
    displacing others in a full map are written (what goes is deleted first), never an
    error."""
    att = await flowlet(timeout_us=2_000_000, buckets=64)
    order = tuple(range(64))
    n = MAX_GROUPS + 20
    routes = {ip_network((0x0A000000 + (g << 8), 24)): g for g in range(1, n + 1)}
    routes[ip_network("192.0.2.0/24")] = 5000  # a group with no order (not read yet)
    orders = dict.fromkeys(range(1, n + 31), order)
    assert att.set_layouts(routes, orders) == 2 * MAX_GROUPS
    snap = att.snapshot()
    assert (snap["layouts"], snap["layouts_left_out"]) == (MAX_GROUPS, 20 + 1)
    for g in range(n + 1, n + 31):  # 30 new groups of two prefixes each go first
        routes |= {ip_network((0x0B000000 + (g << 9) + (i << 8), 24)): g for i in (0, 1)}
    assert att.set_layouts(routes, orders) == 30 + 30 + 30 + 60  # 30 groups out, 30 in
    snap = att.snapshot()
    assert (snap["layouts"], snap["layouts_left_out"]) == (60 + MAX_GROUPS - 30, 20 + 1 + 30)


E = ((1, 1), (2, 1))  # a group's (member, weight) entries


def test_a_group_is_read_when_new_or_changed_and_while_it_settles() -> None:
    t = LayoutTracker(settle_s=2.0, recheck_s=5.0)
    assert t.due({10: E}, 0.0) == [10]
    assert t.observed(10, [1, 1, 2, 2], 0.0) is True
    assert t.orders == {10: (0, 1, 2, 3)}
    assert t.due({10: E}, 1.0) == [10]  # within settle_s: the kernel may still move buckets
    assert t.observed(10, [1, 1, 2, 2], 1.0) is False  # the same order: nothing to write
    assert t.due({10: E}, 2.5) == []  # settled and shared by the weights: not read again
    assert t.due({10: ((1, 3), (2, 1))}, 3.0) == [10]  # new weights: read again
    assert t.due({}, 4.0) == [] and t.orders == {}  # a group gone is forgotten


def test_a_group_whose_buckets_lag_its_weights_is_read_again_every_recheck() -> None:
    t = LayoutTracker(settle_s=1.0, recheck_s=5.0)
    w31 = ((1, 3), (2, 1))
    t.due({10: w31}, 0.0)
    t.observed(10, [1, 1, 2, 2], 0.0)  # busy buckets not moved yet: 2:2 for 3:1
    assert t.due({10: w31}, 2.0) == []
    assert t.due({10: w31}, 5.0) == [10]
    assert t.observed(10, [2, 1, 1, 1], 5.0) is True  # bucket 0 moved, to 1's share
    assert t.orders[10] == (1, 2, 3, 0)
    assert t.due({10: w31}, 20.0) == []


def test_an_unreadable_or_oversized_table_has_no_order() -> None:
    t = LayoutTracker()
    t.due({10: E}, 0.0)
    t.observed(10, [1, 2], 0.0)
    assert t.observed(10, (), 1.0) is True and t.orders == {}
    t.observed(10, [1, 2] * (MAX_BUCKETS // 2 + 1), 2.0)
    assert t.orders == {}


def test_buckets_are_shared_by_the_weights_within_one_each() -> None:
    assert shared([1, 1, 1, 2], ((1, 3), (2, 1)))
    assert not shared([1, 1, 2, 2], ((1, 3), (2, 1)))
    assert shared([1] * 43 + [2] * 21, ((1, 2), (2, 1)))
    assert not shared([1, 1, 1, 2], ((1, 1), (2, 1), (3, 1)))


def test_reads_per_call_are_budgeted_and_every_group_takes_its_turn() -> None:
    """Weights that change everywhere each second (a neighbour flapping its quality) cost at
    most ``budget`` buckets read a call, and no group waits behind the others for good."""
    t = LayoutTracker(settle_s=2.0, recheck_s=5.0, budget=4 * 128)
    read: list[int] = []
    for sec in range(10):
        w = ((1, 1 + sec % 2), (2, 1))  # every group's weights change every call
        due = t.due({g: w for g in range(10)}, float(sec))
        assert len(due) == 4
        for g in due:
            t.observed(g, [1, 2], float(sec))
        read += due
    assert set(read) == set(range(10))  # 40 reads: each of the 10 groups read 4 times
    assert max(read.count(g) for g in range(10)) - min(read.count(g) for g in range(10)) <= 1


def test_a_group_beyond_the_budget_stays_due_until_read() -> None:
    t = LayoutTracker(settle_s=1.0, recheck_s=5.0, budget=1024)
    sizes = {10: 1024, 11: 64, 12: 2048}
    assert t.due({10: E, 11: E}, 0.0, sizes) == [10]
    t.observed(10, [1, 2], 0.0)
    assert t.due({10: E, 11: E}, 3.0, sizes) == [11]  # past its settle time, still never read
    t.observed(11, [1, 2], 3.0)
    assert t.due({10: E, 11: E}, 4.0, sizes) == []
    assert t.due({12: E}, 5.0, sizes) == [12]  # one group over the budget is still read


def test_the_groups_listed_are_those_the_program_has_room_for() -> None:
    nets = [ip_network(f"10.0.{i}.0/24") for i in range(6)]
    routes = {nets[0]: 3, nets[1]: 3, nets[2]: 2, nets[3]: 1, nets[4]: 4, nets[5]: 4}
    buckets = {1: 128, 2: 128, 3: 128, 4: 128, 5: MAX_BUCKETS + 1, 6: 0}
    assert listed(buckets, routes) == {1, 2, 3, 4}  # too many buckets, or none: no list
    assert listed(buckets, routes, limit=2) == {3, 4}  # the groups most prefixes use
    assert listed(buckets, routes, limit=3) == {1, 3, 4}  # a tie: the lower id
    assert listed_routes(routes, {3, 4}) == {nets[0]: 3, nets[1]: 3, nets[4]: 4, nets[5]: 4}
    v6 = ip_network("2001:db8::/64")
    got = listed_routes({**routes, v6: 1}, {1, 2, 3, 4}, limit=3)
    assert got == {nets[0]: 3, nets[1]: 3, nets[2]: 2}  # IPv4 first, by address


def test_no_more_than_the_maps_hold_is_given_to_the_program() -> None:
    routes = {ip_network(f"10.{i >> 8}.{i & 255}.0/24"): i % (MAX_GROUPS + 10) for i in range(9)}
    assert len(listed({g: 8 for g in range(MAX_GROUPS + 10)}, routes)) == MAX_GROUPS
    many = {ip_network((i << 8, 24)): 1 for i in range(MAX_PREFIXES + 5)}
    assert len(listed_routes(many, {1})) == MAX_PREFIXES
