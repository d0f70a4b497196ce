"""The pure decisions of the FIB programmer's steps (glbd.fib.fibstep), without a kernel; the
programmer itself is tested against the kernel in tests/fib."""

from __future__ import annotations

from ipaddress import ip_address, ip_network

from glbd.fib.fibcache import FibCache
from glbd.fib.fibmodel import Desired, GroupSpec, KGroup, Member
from glbd.fib.fibplan import GroupSet, IdMap, Plan
from glbd.fib.fibstep import (
    lane_groups,
    lane_in_place,
    step_desired,
    step_needs_full,
    step_notes,
)

M1 = Member(ip_address("198.18.10.2"), "eth1")
M2 = Member(ip_address("198.18.10.6"), "eth2")
P1 = ip_network("203.0.113.0/24")
P2 = ip_network("198.51.100.0/24")


def _desired() -> Desired:
    return Desired(
        groups={"a": GroupSpec({M1: 1, M2: 1}), "b": GroupSpec({M1: 1})}, routes={P1: "a"}
    )


def test_a_weight_step_keeps_the_routes_mapping() -> None:
    d = _desired()
    new, only = step_desired(d, {"a": GroupSpec({M1: 3, M2: 1})}, set(), {}, ())
    assert new.routes is d.routes and only == []
    assert new.groups["a"].weights[M1] == 3


def test_a_route_step_names_its_prefixes_and_drops_groups() -> None:
    d = _desired()
    new, only = step_desired(d, {}, {"b"}, {P2: "a"}, [P1, P2])
    assert only == [P2, P1]  # added, then withdrawn (a re-pointed prefix is not withdrawn)
    assert dict(new.routes) == {P2: "a"} and "b" not in new.groups


def test_a_full_plan_only_when_an_unnamed_route_uses_a_moved_group() -> None:
    groups = _desired().groups
    routes = {P1: "a", P2: "b"}
    assert not step_needs_full({"a": 1}, {"a": 1}, groups, routes, [])
    assert step_needs_full({"a": 2}, {"a": 1}, groups, routes, [])
    assert not step_needs_full({"a": 2}, {"a": 1}, groups, routes, [P1])
    assert not step_needs_full({"c": 3}, {}, groups, {P1: "c"}, [P1])  # new in this step


def test_notes_of_what_the_step_planned_are_replaced() -> None:
    notes = {"a": "x", "b": "y", str(P1): "foreign_route"}
    assert step_notes(notes, {"a": "z"}, {"a"}, (), [P1]) == {"b": "y", "a": "z"}


def test_the_lane_takes_known_groups_with_the_same_members_not_busy_ones() -> None:
    fc = FibCache(200, 254)
    d = _desired()
    fc.ids = IdMap(members={M1: 1_000_001, M2: 1_000_002}, groups={"a": 2_000_001, "b": 2_000_002})
    fc.obs.groups[2_000_001] = KGroup(2_000_001, 200, ((1_000_001, 1), (1_000_002, 1)))
    w = {"a": {M1: 2, M2: 1}, "b": {M1: 1}, "c": {M1: 1}}
    assert set(lane_groups(fc, d, w, None)) == {"a"}  # b: not in the kernel, c: not desired
    assert lane_groups(fc, d, w, frozenset({"a"})) == {}
    assert lane_groups(fc, d, {"a": {M1: 2}}, None) == {}  # other members: structural


def test_the_lane_writes_in_place_replaces_only() -> None:
    op = GroupSet(2_000_001, "a", ((1_000_001, 2),), None, create=False)
    assert lane_in_place(Plan((op,), realizable={"a": 2_000_001}), {"a": 2_000_001}, ["a"])
    assert not lane_in_place(Plan((op,), realizable={}), {"a": 2_000_001}, ["a"])
    new = GroupSet(2_000_001, "a", ((1_000_001, 2),), None, create=True)
    assert not lane_in_place(Plan((new,), realizable={"a": 2_000_001}), {"a": 2_000_001}, ["a"])
