"""Pure FIB planner tests: plain data in, ops out, no kernel."""

from __future__ import annotations

import ipaddress

import pytest
from fakekernel import P, kernel_apply, links

from glbd.fib.fibmodel import (
    Desired,
    GroupSpec,
    KGroup,
    KNexthop,
    KRoute,
    Member,
    Observed,
    Resilient,
)
from glbd.fib.fibplan import (
    GroupDel,
    GroupSet,
    IdMap,
    NhDel,
    NhSet,
    Op,
    PlanParams,
    RouteDel,
    RouteSet,
    assign_group_ids,
    assign_ids,
    plan,
    route_metric,
    scale_weights,
    share_fell,
)

N = ipaddress.ip_network
A = ipaddress.ip_address
M1 = Member(A("198.18.10.2"), "eth1")
M2 = Member(A("198.18.10.6"), "eth2")
M3 = Member(A("198.18.10.10"), "eth3")
V6 = Member(A("fe80::1"), "eth1")
PFX = N("203.0.113.0/24")
PFX2 = N("198.51.100.0/24")


def run(
    d: Desired, obs: Observed, ids: IdMap | None = None, **kw: object
) -> tuple[list[Op], Observed, IdMap]:
    ids = assign_ids(d, obs, ids or IdMap())
    pl = plan(d, obs, ids, PlanParams(protocol=P, **kw))  # type: ignore[arg-type]
    return list(pl.ops), kernel_apply(obs, pl.ops), ids


def desired(weights: dict[Member, int], res: Resilient | None = None) -> Desired:
    return Desired(groups={"prof": GroupSpec(weights, res)}, routes={PFX: "prof", PFX2: "prof"})


def test_install_from_scratch_in_safe_order_then_idempotent() -> None:
    d = desired({M1: 3, M2: 1})
    ops, obs, ids = run(d, Observed(links=links()))
    kinds = [type(o).__name__ for o in ops]
    assert kinds == ["NhSet", "NhSet", "GroupSet", "RouteSet", "RouteSet"]
    gid = ids.groups["prof"]
    assert obs.groups[gid].entries == tuple(sorted([(ids.members[M1], 3), (ids.members[M2], 1)]))
    assert {r.nhid for r in obs.routes.values()} == {gid}
    again, _o, _i = run(d, obs, ids)
    assert again == []


def test_reweight_is_one_group_replace_and_no_route_op() -> None:
    ops, obs, ids = run(desired({M1: 3, M2: 1}), Observed(links=links()))
    ops, _obs2, _ = run(desired({M1: 1, M2: 7}), obs, ids)
    assert len(ops) == 1
    (op,) = ops
    assert isinstance(op, GroupSet) and not op.create
    assert dict(op.entries) == {ids.members[M1]: 1, ids.members[M2]: 7}


def test_link_without_carrier_is_left_out_and_comes_back() -> None:
    d = desired({M1: 1, M2: 1, M3: 2})
    _ops, obs, ids = run(d, Observed(links=links()))
    # the kernel flushed M2 (carrier loss): member gone, group shrunk, link not usable
    flushed = obs.copy()
    flushed.links = links(down=("eth2",))
    mid2 = ids.members[M2]
    del flushed.nexthops[mid2]
    for gid, g in flushed.groups.items():
        flushed.groups[gid] = KGroup(gid, P, tuple(e for e in g.entries if e[0] != mid2))
    ops, obs2, ids = run(d, flushed, ids)
    assert ops == []  # nothing to do while eth2 is down; the kernel already dropped M2
    # link up again -> member re-created, group replaced with it
    obs2.links = links()
    ops, obs3, ids = run(d, obs2, ids)
    assert [type(o) for o in ops] == [NhSet, GroupSet]
    assert isinstance(ops[1], GroupSet) and not ops[1].create
    assert len(obs3.groups[ids.groups["prof"]].entries) == 3


def test_group_with_no_usable_member_is_recreated_with_routes() -> None:
    d = desired({M1: 1, M2: 1})
    _ops, _obs, ids = run(d, Observed(links=links()))
    # both links lost carrier: the kernel deleted members, the group and its routes
    gone = Observed(links=links(down=("eth1", "eth2")))
    ids2 = assign_ids(d, gone, ids)
    pl = plan(d, gone, ids2, PlanParams(protocol=P))
    assert pl.ops == ()
    assert pl.notes["prof"] == "no_usable_member"
    assert pl.notes[str(PFX)] == "group_down"
    gone.links = links(down=("eth2",))
    ops, _obs2, ids3 = run(d, gone, ids2)
    assert [type(o) for o in ops] == [NhSet, GroupSet, RouteSet, RouteSet]
    assert ids3.groups == ids.groups and ids3.members == ids.members  # same kernel ids


def test_failover_exclusion_and_empty_group_is_deleted_with_routes() -> None:
    d = desired({M1: 1, M2: 1})
    _ops, obs, ids = run(d, Observed(links=links()))
    ops, obs2, _ = run(d, obs, ids, excluded=frozenset({M1}))
    assert [type(o) for o in ops] == [GroupSet, NhDel]
    ops, obs3, _ = run(d, obs2, ids, excluded=frozenset({M1, M2}))
    assert [type(o) for o in ops] == [GroupDel, NhDel]  # no per-route deletes
    assert obs3.routes == {} and obs3.groups == {}


def test_foreign_objects_are_never_touched() -> None:
    d = desired({M1: 1})
    obs = Observed(links=links())
    obs.foreign_routes.add((PFX, 0))
    ids0 = assign_ids(d, obs, IdMap())
    obs.foreign_ids.update({ids0.groups["prof"], ids0.members[M1]})  # someone took those ids
    ops, obs2, ids = run(d, obs, IdMap())
    assert ids.groups["prof"] not in obs.foreign_ids
    assert ids.members[M1] not in obs.foreign_ids
    assert all(not isinstance(o, RouteSet) or o.prefix != PFX for o in ops)
    pl = plan(d, obs2, ids, PlanParams(protocol=P))
    assert pl.notes[str(PFX)] == "foreign_route"


def test_adopt_after_restart_recovers_ids_and_changes_nothing() -> None:
    d = desired({M1: 5, M2: 1}, Resilient(64, 1.0, 5.0))
    _ops, obs, _ids = run(d, Observed(links=links()))
    # a previous run used other ids: renumber everything in the "kernel"
    remap = {old: 7_000_000 + n for n, old in enumerate(sorted(obs.nexthops | obs.groups))}
    k = Observed(links=links())
    for nh in obs.nexthops.values():
        k.nexthops[remap[nh.id]] = KNexthop(remap[nh.id], P, nh.gateway, nh.ifindex)
    for g in obs.groups.values():
        ent = tuple(sorted((remap[i], w) for i, w in g.entries))
        k.groups[remap[g.id]] = KGroup(remap[g.id], P, ent, g.resilient)
    for key, r in obs.routes.items():
        assert r.nhid is not None
        k.routes[key] = KRoute(r.prefix, 254, P, r.metric, remap[r.nhid])
    ids = assign_ids(d, k, IdMap())  # a fresh process: nothing remembered
    assert set(ids.groups.values()) <= set(k.groups)
    assert set(ids.members.values()) <= set(k.nexthops)
    assert plan(d, k, ids, PlanParams(protocol=P)).ops == ()


def test_type_change_is_make_before_break() -> None:
    d1 = desired({M1: 1, M2: 1})
    _ops, obs, ids = run(d1, Observed(links=links()))
    old = ids.groups["prof"]
    ops, obs2, ids2 = run(desired({M1: 1, M2: 1}, Resilient(32)), obs, ids)
    new = ids2.groups["prof"]
    assert new != old
    assert [type(o) for o in ops] == [GroupSet, RouteSet, RouteSet, GroupDel]
    assert isinstance(ops[-1], GroupDel) and ops[-1].id == old
    assert {r.nhid for r in obs2.routes.values()} == {new}


def test_resilient_timer_change_is_in_place() -> None:
    _ops, obs, ids = run(desired({M1: 1, M2: 1}, Resilient(32, 1.0)), Observed(links=links()))
    ops, _o, ids2 = run(desired({M1: 1, M2: 1}, Resilient(32, 5.0, 10.0)), obs, ids)
    assert ids2.groups == ids.groups
    assert len(ops) == 1 and isinstance(ops[0], GroupSet) and not ops[0].create


def test_a_falling_share_migrates_then_restores_the_idle_timer() -> None:
    res = Resilient(64, 1.0, 5.0, migrate_share=0.8)
    plain = Resilient(64, 1.0, 5.0)

    def reweight(r: Resilient, w1: dict[Member, int], w2: dict[Member, int]) -> list[Op]:
        _ops, obs, ids = run(desired(w1, r), Observed(links=links()))
        ops, obs2, _ = run(desired(w2, r), obs, ids)
        assert obs2.groups[ids.groups["prof"]].resilient == r  # the timer as configured
        return ops

    equal, m1_fell = {M1: 3, M2: 3, M3: 3}, {M1: 1, M2: 2, M3: 2}
    # M1 from a third to a fifth: a replace with an idle timer of 0, then one with the timer
    ops = reweight(res, equal, m1_fell)
    assert [o.resilient for o in ops if isinstance(o, GroupSet)] == [
        Resilient(64, 0.0, 5.0, 0.8),
        res,
    ]
    assert len(ops) == 2
    # M1 back up, or the same fall without migrate_share: one replace
    assert [o.resilient for o in reweight(res, m1_fell, equal)] == [res]
    assert [o.resilient for o in reweight(plain, equal, m1_fell)] == [plain]
    # an idle timer of 0 already moves every bucket: nothing more to do
    zero = Resilient(64, 0.0, 5.0, 0.8)
    assert [o.resilient for o in reweight(zero, equal, m1_fell)] == [zero]


def test_share_fell() -> None:
    assert share_fell([(1, 3), (2, 3)], [(1, 1), (2, 3)], 0.8)  # a half to a quarter
    # member 1's share falls only because member 2 got better: its path is no worse
    assert not share_fell([(1, 1), (2, 1)], [(1, 1), (2, 3)], 0.8)
    assert not share_fell([(1, 255), (2, 255)], [(1, 240), (2, 255)], 0.8)  # a wobble
    # a member added: the others' shares fall, their weights do not
    assert not share_fell([(1, 1), (2, 1)], [(1, 1), (2, 1), (3, 1)], 0.8)
    # a member removed: the kernel moves its buckets anyway
    assert not share_fell([(1, 1), (2, 1), (3, 1)], [(1, 1), (2, 1)], 0.8)
    # one band (x1.5) down in a group of four equal members: 0.73 of its share
    assert share_fell([(i, 27) for i in range(4)], [(0, 18), (1, 27), (2, 27), (3, 27)], 0.8)
    # one band down of two: 0.8 of its share
    assert share_fell([(1, 27), (2, 27)], [(1, 18), (2, 27)], 0.8)
    assert not share_fell([(1, 0)], [(1, 0)], 0.8)


def test_stale_objects_kept_until_allowed() -> None:
    d = desired({M1: 1, M2: 1})
    _ops, obs, _ids = run(d, Observed(links=links()))
    smaller = Desired(groups={"other": GroupSpec({M3: 1})}, routes={})
    ops, _o, _i = run(smaller, obs, IdMap(), allow_delete=False)
    assert not any(isinstance(o, RouteDel | GroupDel | NhDel) for o in ops)
    ops, o2, _i = run(smaller, obs, IdMap(), allow_delete=True)
    dels = [type(o) for o in ops if isinstance(o, RouteDel | GroupDel | NhDel)]
    assert dels == [GroupDel, NhDel, NhDel]  # routes go with their group
    assert o2.routes == {}


def test_stale_hold_keeps_only_what_was_not_relearned() -> None:
    """After an adopting restart only adopted objects glbd has not re-learned are held; a
    group, its member and its route that were re-learned and then withdrawn go at once,
    and a held group keeps its members."""
    two = Desired(
        groups={"a": GroupSpec({M1: 1}), "b": GroupSpec({M2: 1}), "c": GroupSpec({M3: 1})},
        routes={PFX: "a", PFX2: "b", N("192.0.2.0/24"): "c"},
    )
    _ops, obs, ids = run(two, Observed(links=links()))
    gid_c, nh_c = ids.groups["c"], ids.members[M3]
    # c (prefix, group, member) was never re-learned; b was, then withdrawn
    keep = {
        "keep_routes": {(N("192.0.2.0/24"), 0)},
        "keep_groups": {gid_c},
        "keep_nexthops": {nh_c},
    }
    now = Desired(groups={"a": GroupSpec({M1: 1})}, routes={PFX: "a"})
    ops, o2, _i = run(now, obs, ids, **keep)
    assert {type(o) for o in ops} == {GroupDel, NhDel}  # b's route goes with its group
    assert set(o2.groups) == {ids.groups["a"], gid_c}
    assert set(o2.nexthops) == {ids.members[M1], nh_c}
    assert {k[0] for k in o2.routes} == {PFX, N("192.0.2.0/24")}
    # a held group keeps a member that nothing else holds any more
    ops, o3, _i = run(now, obs, ids, keep_groups={gid_c})
    assert nh_c in o3.nexthops and gid_c in o3.groups


def test_writes_replace_only_what_glbd_has() -> None:
    d = desired({M1: 1})
    ops, obs, ids = run(d, Observed(links=links()))
    assert all(not o.replace for o in ops if isinstance(o, NhSet | RouteSet))
    d2 = Desired(
        groups={"prof": GroupSpec({M1: 1}), "x": GroupSpec({M2: 1})},
        routes={PFX: "x", PFX2: "prof"},
    )
    ops, _o, _i = run(d2, obs, ids)
    sets = {o.prefix: o.replace for o in ops if isinstance(o, RouteSet)}
    assert sets == {PFX: True}  # re-pointing glbd's own route


def test_weights_scaled_for_8bit_and_zero_dropped() -> None:
    assert scale_weights({M1: 1000, M2: 10, M3: 0}, 255) == {M1: 255, M2: 3}
    assert scale_weights({M1: 1000, M2: 1}, 65535) == {M1: 1000, M2: 1}
    _ops, obs, ids = run(desired({M1: 1000, M2: 1}), Observed(links=links()), max_weight=255)
    g = obs.groups[ids.groups["prof"]]
    assert dict(g.entries) == {ids.members[M1]: 255, ids.members[M2]: 1}


def test_ipv6_route_needs_ipv6_members_and_metric() -> None:
    d = Desired(
        groups={"v4": GroupSpec({M1: 1}), "v6": GroupSpec({V6: 1})},
        routes={N("2001:db8::/48"): "v4", N("2001:db8:1::/48"): "v6"},
    )
    ids = assign_ids(d, Observed(links=links()), IdMap())
    pl = plan(d, Observed(links=links()), ids, PlanParams(protocol=P))
    rs = [o for o in pl.ops if isinstance(o, RouteSet)]
    assert [(str(o.prefix), o.metric) for o in rs] == [("2001:db8:1::/48", 1024)]
    assert pl.notes["2001:db8::/48"] == "ipv6_route_needs_ipv6_members"
    assert route_metric(N("10.0.0.0/8"), 0) == 0


@pytest.mark.parametrize("n", [1, 50])
def test_ids_are_deterministic(n: int) -> None:
    groups = {f"p{i}": GroupSpec({M1: 1, M2: i + 1}) for i in range(n)}
    d = Desired(groups=groups, routes={})
    a = assign_ids(d, Observed(links=links()), IdMap())
    b = assign_ids(d, Observed(links=links()), IdMap())
    assert a.groups == b.groups and a.members == b.members
    assert len(set(a.groups.values())) == n


def test_group_without_routes_keeps_its_id_across_restart() -> None:
    d = Desired(
        groups={"idle": GroupSpec({M1: 1}), "busy": GroupSpec({M2: 1})}, routes={PFX: "busy"}
    )
    _ops, obs, ids = run(d, Observed(links=links()))
    fresh = assign_ids(d, obs, IdMap())
    assert fresh.groups == ids.groups
    assert plan(d, obs, fresh, PlanParams(protocol=P)).ops == ()


def test_route_delta_plans_only_the_given_prefixes() -> None:
    d = desired({M1: 1, M2: 1})
    _ops, obs, ids = run(d, Observed(links=links()))
    new = N("192.0.2.0/24")
    d2 = Desired(groups=d.groups, routes={PFX: "prof", new: "prof"})  # PFX2 withdrawn
    pl = plan(d2, obs, ids, PlanParams(protocol=P), only=[new, PFX2])
    assert sorted(map(repr, pl.ops)) == sorted(
        [repr(RouteSet(new, 0, ids.groups["prof"])), repr(RouteDel(PFX2, 0))]
    )
    obs2 = kernel_apply(obs, pl.ops)
    assert plan(d2, obs2, ids, PlanParams(protocol=P)).ops == ()


def test_a_group_alone_plans_only_that_group_and_deletes_nothing() -> None:
    """The weight fast path: ``groups=`` plans those groups (O(their members)); another group
    that differs from the kernel is left for a full plan, and so is a member the change left
    unused; ``realizable`` is the last plan's with the planned groups' outcome."""
    d = Desired(
        groups={"a": GroupSpec({M1: 1, M2: 1}), "b": GroupSpec({M2: 1, M3: 1})},
        routes={PFX: "a", PFX2: "b"},
    )
    _ops, obs, ids = run(d, Observed(links=links()))
    known = plan(d, obs, ids, PlanParams(protocol=P)).realizable
    # "a" drops M1 (now unused by any group), "b" also changed but is not named
    d2 = Desired(groups={"a": GroupSpec({M2: 3}), "b": GroupSpec({M2: 1, M3: 5})}, routes=d.routes)
    pl = plan(d2, obs, ids, PlanParams(protocol=P), groups=["a"], known=known)
    assert [repr(o) for o in pl.ops] == [
        repr(GroupSet(ids.groups["a"], "a", ((ids.members[M2], 3),), None, create=False))
    ]
    assert dict(pl.realizable) == dict(known)
    # the full plan afterwards brings "b" over and deletes the unused member
    full = plan(d2, kernel_apply(obs, pl.ops), ids, PlanParams(protocol=P))
    assert sorted(type(o).__name__ for o in full.ops) == ["GroupSet", "NhDel"]


def test_an_incremental_step_plans_its_groups_routes_and_deletions_only() -> None:
    """A BGP step: new group "b", both of "a"'s prefixes move to it, "a" goes (by its id);
    another group that differs from the kernel is not looked at."""
    d = Desired(
        groups={"a": GroupSpec({M1: 1}), "c": GroupSpec({M3: 1})}, routes={PFX: "a", PFX2: "c"}
    )
    _ops, obs, ids = run(d, Observed(links=links()))
    known = plan(d, obs, ids, PlanParams(protocol=P)).realizable
    d2 = Desired(
        groups={"b": GroupSpec({M1: 1, M2: 1}), "c": GroupSpec({M3: 9})},
        routes={PFX: "b", PFX2: "c"},
    )
    ids2 = assign_ids(d2, obs, ids)
    pl = plan(
        d2, obs, ids2, PlanParams(protocol=P), only=[PFX], groups=["b"], known=known,
        dying=[ids.groups["a"]],
    )  # fmt: skip
    assert not any(isinstance(o, (NhDel, RouteDel)) for o in pl.ops)
    assert set(pl.realizable) == {"b", "c"}
    obs2 = kernel_apply(obs, pl.ops)
    b = ids2.groups["b"]
    assert obs2.routes[(PFX, 0)].nhid == b
    assert dict(obs2.groups[b].entries) == {ids2.members[M1]: 1, ids2.members[M2]: 1}
    # "a" is gone: deleted, or its id taken over by "b" (its route voted for it)
    assert ids.groups["a"] == b or ids.groups["a"] not in obs2.groups
    assert obs2.groups[ids2.groups["c"]].entries == ((ids.members[M3], 1),)  # not planned


def test_churn_assigns_the_new_groups_as_a_full_assignment_would_and_keeps_member_ids() -> None:
    """BGP churn at a leaf: a prefix loses one next hop, so a new group of known members
    replaces its old one. The step's assignment gives the new key the id a full one gives
    (the old group's, which the prefix's route votes for), keeps the other groups' ids and
    hands back the very member mapping, so nothing that follows member ids is redone."""
    d = Desired(
        groups={"a": GroupSpec({M1: 1, M2: 1}), "c": GroupSpec({M2: 1, M3: 1})},
        routes={PFX: "a", PFX2: "c"},
    )
    _ops, obs, ids = run(d, Observed(links=links()))
    d2 = Desired(
        groups={"a2": GroupSpec({M1: 1}), "c": GroupSpec({M2: 1, M3: 1})},
        routes={PFX: "a2", PFX2: "c"},
    )
    step = assign_group_ids(d2, obs, ids, ["a2"])
    full = assign_ids(d2, obs, ids)
    assert step.groups == full.groups == {"a2": ids.groups["a"], "c": ids.groups["c"]}
    assert step.members is ids.members
    # a new key without a route to vote: its own probe id, clear of every id in use
    d3 = Desired(groups={**d2.groups, "n": GroupSpec({M3: 1})}, routes=d2.routes)
    step3 = assign_group_ids(d3, obs, step, ["n"])
    assert step3.groups["n"] == assign_ids(d3, obs, step).groups["n"]
    assert step3.groups["n"] not in set(obs.groups) | set(obs.nexthops)
