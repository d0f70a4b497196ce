"""Standby routes (``Desired.standby``) without a kernel: the planner, the step decisions, the
cache and the snapshot. The kernel's side (carrier loss takes the primary route, the standby
one carries the traffic) is in test_fib_standby_netns.py."""

from __future__ import annotations

import ipaddress
import json

import pytest
from fakekernel import P, carrier_lost, kernel_apply, links

from glbd.fib.fibcache import FibCache, StaleKeep
from glbd.fib.fibmodel import (
    Desired,
    GroupSpec,
    KGroup,
    KRoute,
    Member,
    Observed,
)
from glbd.fib.fibplan import (
    STANDBY_METRIC_OFFSET,
    GroupDel,
    GroupSet,
    IdMap,
    NhSet,
    Op,
    PlanParams,
    RouteDel,
    RouteSet,
    assign_ids,
    plan,
    standby_metric,
    standby_note,
)
from glbd.fib.fibstep import (
    route_maps,
    routes_planned,
    step_desired,
    step_needs_full,
    step_notes,
)
from glbd.fib.programmer import FibProgrammer
from glbd.netlink import const as c
from glbd.netlink.codec import Attr, Message, RtMsg

N = ipaddress.ip_network
A = ipaddress.ip_address
M1 = Member(A("198.18.10.2"), "eth1")
M2 = Member(A("198.18.10.6"), "eth2")
M3 = Member(A("198.18.10.10"), "eth3")
V6_1 = Member(A("2001:db8:10:1::2"), "eth1")
V6_2 = Member(A("2001:db8:10:2::2"), "eth2")
V6_3 = Member(A("2001:db8:10:3::2"), "eth3")
PFX = N("203.0.113.0/24")
PFX6 = N("2001:db8:99::/48")


def run(
    d: Desired, obs: Observed, ids: IdMap | None = None, metric: int = 0
) -> tuple[list[Op], Observed, IdMap]:
    ids = assign_ids(d, obs, ids or IdMap(), metric=metric)
    pl = plan(d, obs, ids, PlanParams(protocol=P, metric=metric))
    return list(pl.ops), kernel_apply(obs, pl.ops), ids


def coloured(standby: bool = True, sb_key: str = "sb") -> Desired:
    """A coloured prefix per family: primary via M1 (link eth1), standby via M2 and M3."""
    return Desired(
        groups={
            "pri": GroupSpec({M1: 1}),
            "sb": GroupSpec({M2: 2, M3: 1}),
            "sb2": GroupSpec({M3: 1}),
            "pri6": GroupSpec({V6_1: 1}),
            "sb6": GroupSpec({V6_2: 2, V6_3: 1}),
        },
        routes={PFX: "pri", PFX6: "pri6"},
        standby={PFX: sb_key, PFX6: "sb6"} if standby else {},
    )


def by_key(obs: Observed) -> dict[tuple[str, int], int | None]:
    return {(str(p), m): r.nhid for (p, m), r in obs.routes.items()}


@pytest.mark.parametrize("metric", [0, 100])
def test_standby_routes_at_the_standby_metric_for_v4_and_v6(metric: int) -> None:
    ops, obs, ids = run(coloured(), Observed(links=links()), metric=metric)
    v4, v6 = metric, 1024 if metric == 0 else metric
    assert by_key(obs) == {
        (str(PFX), v4): ids.groups["pri"],
        (str(PFX), v4 + STANDBY_METRIC_OFFSET): ids.groups["sb"],
        (str(PFX6), v6): ids.groups["pri6"],
        (str(PFX6), v6 + STANDBY_METRIC_OFFSET): ids.groups["sb6"],
    }
    assert standby_metric(PFX6, 0) == 1025 and standby_metric(PFX, 0) == 1
    # the groups (members weighted) come before the routes that point at them
    kinds = [type(o) for o in ops]
    assert kinds.index(RouteSet) > max(i for i, k in enumerate(kinds) if k is GroupSet)
    again, _obs, _ids = run(coloured(), obs, ids, metric=metric)
    assert again == []


def test_a_standby_route_is_re_pointed_in_place_and_the_primary_left_alone() -> None:
    _ops, obs, ids = run(coloured(), Observed(links=links()))
    ops, obs2, ids = run(coloured(sb_key="sb2"), obs, ids)
    assert ops == [RouteSet(PFX, 1, ids.groups["sb2"], replace=True)]
    assert obs2.routes[(PFX, 0)] == obs.routes[(PFX, 0)]


def test_standby_routes_no_longer_desired_are_deleted() -> None:
    _ops, obs, ids = run(coloured(), Observed(links=links()))
    d = coloured(standby=False)
    ops, obs2, ids = run(d, obs, ids)
    # both standby groups are still desired (unused): the routes go one by one
    assert sorted(ops, key=str) == sorted([RouteDel(PFX, 1), RouteDel(PFX6, 1025)], key=str)
    assert set(obs2.routes) == {(PFX, 0), (PFX6, 1024)}
    # a standby group no longer desired at all takes its route with it (make-before-break:
    # no route points at it any more when it goes)
    _ops, obs, ids = run(coloured(), Observed(links=links()))
    d2 = Desired(groups={k: v for k, v in d.groups.items() if k != "sb"}, routes=d.routes)
    ops, obs3, _ = run(d2, obs, ids)
    assert GroupDel(ids.groups["sb"]) in ops and RouteDel(PFX, 1) not in ops
    assert (PFX, 1) not in obs3.routes and (PFX, 0) in obs3.routes


def test_a_foreign_route_at_the_standby_metric_is_left_alone() -> None:
    obs0 = Observed(links=links())
    obs0.foreign_routes.add((PFX, 1))
    ids = assign_ids(coloured(), obs0, IdMap())
    pl = plan(coloured(), obs0, ids, PlanParams(protocol=P))
    assert all(not (isinstance(o, RouteSet | RouteDel) and o.metric == 1) for o in pl.ops)
    assert pl.notes[standby_note(PFX)] == "foreign_route"
    assert str(PFX) not in pl.notes  # the primary route is planned as usual
    obs = kernel_apply(obs0, pl.ops)
    assert (PFX, 0) in obs.routes and (PFX6, 1025) in obs.routes
    # and a foreign route there is never deleted either, standby wanted or not
    again = plan(coloured(standby=False), obs, ids, PlanParams(protocol=P))
    assert RouteDel(PFX, 1) not in again.ops


def test_carrier_loss_on_the_primary_link_leaves_the_standby_route_and_nothing_to_fight() -> None:
    d = coloured()
    _ops, obs, ids = run(d, Observed(links=links()))
    flushed = carrier_lost(obs, "eth1")  # the primary group emptied: its routes are gone
    assert set(flushed.routes) == {(PFX, 1), (PFX6, 1025)}
    ids2 = assign_ids(d, flushed, ids)
    pl = plan(d, flushed, ids2, PlanParams(protocol=P))
    assert pl.ops == ()  # no write while eth1 is down: the kernel's choice stands
    assert pl.notes["pri"] == "no_usable_member" and pl.notes[str(PFX)] == "group_down"
    assert standby_note(PFX) not in pl.notes
    # the cache missed the flush (no link event yet): the plan deletes what is gone, once
    stale = flushed.copy()
    stale.routes = dict(obs.routes)
    ops, _o, _i = run(d, stale, ids2)
    assert RouteDel(PFX, 1) not in ops and RouteDel(PFX6, 1025) not in ops
    # carrier back: member, group and primary route re-created; the standby untouched
    back = flushed.copy()
    back.links = links()
    ops, obs3, _ = run(d, back, ids2)
    assert [type(o) for o in ops] == [NhSet, NhSet, GroupSet, GroupSet, RouteSet, RouteSet]
    assert by_key(obs3) == by_key(obs)


def test_adopt_after_restart_keys_standby_and_primary_groups_by_metric() -> None:
    # the kernel holds the routes a previous run made under other keys: each group has the
    # same members, so only the routes' metric tells the primary group from the standby one
    shared = GroupSpec({M2: 1, M3: 1})
    old = Desired(groups={"x": shared, "y": shared}, routes={PFX: "x"}, standby={PFX: "y"})
    _ops, k, old_ids = run(old, Observed(links=links()))
    new = Desired(groups={"a": shared, "b": shared}, routes={PFX: "b"}, standby={PFX: "a"})
    ids = assign_ids(new, k, IdMap())  # a fresh process: nothing remembered
    assert ids.groups == {"b": old_ids.groups["x"], "a": old_ids.groups["y"]}
    assert plan(new, k, ids, PlanParams(protocol=P)).ops == ()


def test_a_standby_route_alone_is_a_route_at_the_standby_metric() -> None:
    d = Desired(groups={"sb": GroupSpec({M2: 1})}, standby={PFX: "sb"})
    _ops, obs, ids = run(d, Observed(links=links()))
    assert by_key(obs) == {(str(PFX), 1): ids.groups["sb"]}
    # a primary route at the old metric of a prefix that only wants a standby now goes
    obs.routes[(PFX, 0)] = KRoute(PFX, 254, P, 0, ids.groups["sb"])
    ops, _o, _i = run(d, obs, ids)
    assert ops == [RouteDel(PFX, 0)]


def test_a_step_naming_a_prefix_plans_both_of_its_routes() -> None:
    _ops, obs, ids = run(coloured(), Observed(links=links()))
    d = coloured(standby=False)
    known = dict(ids.groups)  # every group exists: the step plans the named prefix only
    pl = plan(d, obs, ids, PlanParams(protocol=P), groups=(), known=known, only=[PFX])
    assert pl.ops == (RouteDel(PFX, 1),)
    d2 = coloured(sb_key="sb2")
    pl = plan(d2, obs, ids, PlanParams(protocol=P), groups=(), known=known, only=[PFX])
    assert pl.ops == (RouteSet(PFX, 1, ids.groups["sb2"], replace=True),)


def test_steps_keep_standby_and_fall_back_to_a_full_plan_for_its_groups() -> None:
    d = coloured()
    new, only = step_desired(d, {"pri": GroupSpec({M1: 2})}, set(), {N("192.0.2.0/24"): "pri"}, ())
    assert new.standby is d.standby and only == [N("192.0.2.0/24")]
    # the standby group of an unnamed prefix changed id: only a full plan re-points it
    was = {"pri": 1, "sb": 2}
    assert step_needs_full({"pri": 1, "sb": 3}, was, d.groups, d.routes, [], d.standby)
    assert not step_needs_full({"pri": 1, "sb": 3}, was, d.groups, d.routes, [])
    assert not step_needs_full({"pri": 1, "sb": 3}, was, d.groups, d.routes, [PFX], {PFX: "sb"})
    notes = {str(PFX): "group_down", standby_note(PFX): "foreign_route", "sb": "x"}
    assert step_notes(notes, {}, (), (), [PFX]) == {"sb": "x"}


def test_routes_are_planned_again_when_a_mapping_is_another_object() -> None:
    d = coloured()
    planned = route_maps(d)
    same = Desired(groups={}, routes=d.routes, standby=d.standby)  # a weight change's apply
    assert routes_planned(same, planned)
    assert not routes_planned(Desired(groups={}, routes=d.routes, standby={}), planned)
    assert not routes_planned(Desired(groups={}, routes=dict(d.routes), standby=d.standby), planned)
    # without standby routes each Desired has a new empty mapping: no O(routes) plan for it
    bare = Desired(routes=d.routes)
    assert routes_planned(Desired(routes=d.routes), route_maps(bare))


def test_the_cache_notes_a_refused_standby_create_under_the_standby_key() -> None:
    fc = FibCache(P, 254)
    fc.desired = coloured()
    err = OSError(17, "File exists")
    errors, _ = fc.written([RouteSet(PFX, 1, 5)], {0: err}, set(), True)
    assert errors == [] and fc.notes == {standby_note(PFX): "foreign_route"}
    assert (PFX, 1) in fc.obs.foreign_routes


def test_a_foreign_route_event_at_the_standby_metric_is_noted_for_the_standby_route() -> None:
    fc = FibCache(P, 254)
    fc.desired = Desired(groups={"s": GroupSpec({M2: 1})}, standby={PFX: "s"})
    fc.obs.routes[(PFX, 1)] = KRoute(PFX, 254, P, 1, 22)
    fc.routes_dirty = False
    hdr = RtMsg(family=2, dst_len=24, table=254, protocol=186, type=c.RTN_UNICAST)
    attrs = (Attr.addr(c.RTA_DST, PFX.network_address), Attr.u32(c.RTA_PRIORITY, 1))
    fc.on_route_event(Message(c.RTM_NEWROUTE, header=hdr, attrs=attrs))
    assert (PFX, 1) in fc.obs.foreign_routes and (PFX, 1) not in fc.obs.routes
    assert fc.notes == {standby_note(PFX): "foreign_route"} and fc.routes_dirty and fc.wake
    assert fc.stats.conflicts == {"glbd_route_replaced": 1}


def test_relearned_prefixes_release_both_of_their_routes_from_the_stale_hold() -> None:
    fc = FibCache(P, 254)
    fc.desired = coloured()
    fc.stale_until = 10.0
    held = {(PFX, 0), (PFX, 1), (PFX6, 1025), (N("192.0.2.0/24"), 1)}
    fc.stale_keep = StaleKeep(set(held), set(), set())
    fc.relearn([PFX], 0.0)
    assert fc.stale_keep.routes == {(PFX6, 1025), (N("192.0.2.0/24"), 1)}
    fc.relearn(None, 0.0)  # the whole desired state: standby prefixes included
    assert fc.stale_keep.routes == {(N("192.0.2.0/24"), 1)}


def test_snapshot_shows_the_standby_route_with_its_metric() -> None:
    f = FibProgrammer(netns=None, protocol=P)
    f.cache.desired = Desired(
        groups={"p": GroupSpec({M1: 1}), "s": GroupSpec({M2: 1})},
        routes={PFX: "p"},
        standby={PFX: "s", N("192.0.2.0/24"): "s"},
    )
    f.cache.ids = IdMap(members={M1: 11, M2: 12}, groups={"p": 21, "s": 22})
    f.cache.obs = Observed(
        links=links(down=("eth1",)),
        groups={22: KGroup(22, P, ((12, 1),))},
        routes={(PFX, 1): KRoute(PFX, 254, P, 1, 22)},  # the primary is gone (carrier)
        foreign_routes={(N("192.0.2.0/24"), 1)},
    )
    snap = f.snapshot()
    json.dumps(snap)
    row = snap["routes"][str(PFX)]
    assert row["installed_nhid"] is None and row["diff"] is True  # the primary is missing
    assert row["standby"] == {
        "group": "s",
        "nhid": 22,
        "installed_nhid": 22,
        "metric": 1,
        "desired": {"198.18.10.6@eth2": 1},
        "installed": {"198.18.10.6@eth2": 1},
        "diff": False,
        "note": "",
    }
    alone = snap["routes"]["192.0.2.0/24"]
    assert alone["group"] is None and alone["standby"]["installed_nhid"] is None
    assert snap["foreign_routes"] == [{"prefix": "192.0.2.0/24", "group": "s", "metric": 1}]
    assert snap["groups"]["s"]["routes"] == 2 and snap["kernel"]["routes"] == 1
    assert f.route_lookup().get("192.0.2.0/24") == alone
