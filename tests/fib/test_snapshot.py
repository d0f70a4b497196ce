"""The FibProgrammer snapshot is an API (glbctl routes/profiles): its keys are pinned here."""

from __future__ import annotations

import ipaddress
import json

from glbd.fib.fibmodel import Desired, GroupSpec, KGroup, KLink, KRoute, Member, Observed
from glbd.fib.fibplan import IdMap
from glbd.fib.programmer import FibProgrammer

M1 = Member(ipaddress.ip_address("198.18.10.2"), "eth1")
M2 = Member(ipaddress.ip_address("198.18.10.6"), "eth2")
PFX = ipaddress.ip_network("203.0.113.0/24")


async def test_snapshot_keys_and_diff_flag() -> None:
    f = FibProgrammer(netns=None, protocol=200)
    f.cache.desired = Desired(groups={"p": GroupSpec({M1: 3, M2: 1})}, routes={PFX: "p"})
    f.cache.ids = IdMap(members={M1: 11, M2: 12}, groups={"p": 21})
    f.cache.obs = Observed(
        links={"eth1": KLink(2, "eth1", True, True), "eth2": KLink(3, "eth2", True, False)},
        groups={21: KGroup(21, 200, ((11, 2),))},
        routes={(PFX, 0): KRoute(PFX, 254, 200, 0, 21)},
    )
    snap = f.snapshot()
    json.dumps(snap)
    assert set(snap) == {
        "netns",
        "protocol",
        "table",
        "weight_bits",
        "compat_mode",
        "stale_remaining_s",
        "excluded",
        "groups",
        "routes",
        "kernel",
        "counters",
        "last_errors",
        "stale_held",
        "foreign_routes",
        "conflicts",
    }
    assert set(snap["stale_held"]) == {"routes", "groups", "nexthops"}
    assert snap["foreign_routes"] == []
    assert set(snap["conflicts"]) == {
        "route_exists_on_create",
        "foreign_route_present",
        "foreign_route_appeared",
        "glbd_route_replaced",
        "nexthop_id_taken",
        "nexthop_reowned",
    }
    g = snap["groups"]["p"]
    assert set(g) == {
        "nhid",
        "type",
        "desired",
        "programmed",
        "installed",
        "excluded",
        "routes",
        "diff",
        "note",
    }
    assert g["desired"] == {"198.18.10.2@eth1": 3, "198.18.10.6@eth2": 1}
    assert g["programmed"] == {"198.18.10.2@eth1": 3}  # eth2 has no carrier
    assert g["installed"] == {"198.18.10.2@eth1": 2}
    assert g["excluded"] == {"198.18.10.6@eth2": "no_carrier"}
    assert g["diff"] is True
    r = snap["routes"]["203.0.113.0/24"]
    assert set(r) == {"group", "nhid", "installed_nhid", "desired", "installed", "diff", "note"}
    assert r["nhid"] == r["installed_nhid"] == 21 and r["diff"] is True
    assert all(isinstance(v, int) for v in snap["counters"].values())
