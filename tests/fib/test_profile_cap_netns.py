"""The profile cap in the real kernel: prefixes with unique NNHN lists, more than the cap, all
get a route, and glbd's nexthop groups stay at the cap plus the one plain-ECMP group
(``glbd.quality.pathtable``; the pure test is ``tests/quality/test_pathtable_cap.py``)."""

from __future__ import annotations

import pytest
from fibrig import V4_GW, Rig

from glbd.fib.fibsync import FibSync
from glbd.fib.programmer import FibProgrammer
from glbd.quality.pathmodel import NextHop, PathTableParams
from glbd.quality.pathprofile import profile_key
from glbd.quality.pathtable import PathTable

pytestmark = pytest.mark.netns

CAP = 3
NHS = [NextHop(1, V4_GW[0], "r-p1"), NextHop(2, V4_GW[1], "r-p2")]


def unique(i: int) -> dict[NextHop, frozenset[int] | None]:
    return {NHS[0]: frozenset({1000 + i}), NHS[1]: frozenset({2000 + i})}


def kernel(rig: Rig) -> tuple[int, dict[str, int]]:
    """(glbd's groups in the kernel, prefix -> nhid of glbd's routes)."""
    groups = [nh for nh in rig.nexthops() if "group" in nh]  # the namespace is glbd's alone
    routes = {r["dst"]: int(r["nhid"]) for r in rig.routes() if "nhid" in r}
    return len(groups), routes


async def test_groups_stay_at_the_cap_and_every_prefix_is_routed(rig: Rig) -> None:
    table = PathTable(PathTableParams(max_profiles=CAP))
    sync = FibSync(0.0)
    fib = FibProgrammer(netns=rig.r.name, protocol=200, table=254, stale_s=0.0)
    await fib.start()
    try:
        n = 4 * CAP
        for i in range(n):
            table.set_prefix(f"10.{i}.0.0/16", unique(i))
        await fib.apply(sync.desired(table, None))
        ngroups, routes = kernel(rig)
        assert ngroups == CAP + 1
        assert set(routes) == {f"10.{i}.0.0/16" for i in range(n)}
        plain = {routes[f"10.{i}.0.0/16"] for i in range(CAP, n)}
        assert len(plain) == 1  # one plain ECMP group for the excess
        assert table.fallback_prefixes() == n - CAP

        # a withdrawn prefix frees a slot: the oldest waiting one gets a group of its own
        table.remove_prefix("10.0.0.0/16")
        await fib.apply(sync.desired(table, None))
        ngroups, routes = kernel(rig)
        assert ngroups == CAP + 1 and "10.0.0.0/16" not in routes
        assert routes[f"10.{CAP}.0.0/16"] not in plain
        assert fib.snapshot(routes=False)["groups"][profile_key(unique(CAP))]["diff"] is False
    finally:
        await fib.stop(keep=False)
