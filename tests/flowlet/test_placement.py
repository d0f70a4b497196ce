"""glbd.flowlet.placement: a group's buckets listed member by member, and the kernel's bucket
table read back as the member of each bucket (real kernel, a resilient group scattered by a
weight change)."""

from __future__ import annotations

import itertools
import re

import pytest
from glbdlab.netns import Lab
from hypothesis import given
from hypothesis import strategies as hs

from glbd.fib.fibread import read_buckets
from glbd.flowlet.placement import bucket_order
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
