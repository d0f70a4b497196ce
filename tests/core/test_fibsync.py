"""The FIB sync core (``glbd.fib.fibsync.FibSync``), in virtual time.

Its incremental steps (``set_weights`` / ``update``) must leave the FIB programmer with exactly
the desired state a full sync (``FibSync.desired``) would give it, whatever the sequence of
path-table changes. The FIB here is a model of FibProgrammer's desired-state bookkeeping (no
kernel): this checks the sync's profile keys and change handling, not the planner. The
hold-down after BGP's first session, the coalescing of syncs and the full sync after an error
or a config change run on a clock passed in."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from glbd.fib.fibmodel import Desired, GroupSpec, Member
from glbd.fib.fibsync import FibSync, Step
from glbd.quality.pathchanges import Changes
from glbd.quality.pathmodel import LocalLink, NextHop
from glbd.quality.pathtable import PathTable


class ModelFib:
    """FibProgrammer's desired-state semantics for apply / set_weights / update."""

    def __init__(self) -> None:
        self.desired: Desired | None = None
        self.calls: list[str] = []
        self.fail_next = False

    def run(self, step: Step) -> None:
        """What the node does with a step (``FibService._run_step``)."""
        if self.fail_next:
            self.fail_next = False
            raise OSError("the kernel said no")
        if step.kind == "apply":
            assert step.desired is not None
            self.apply(step.desired)
        elif step.kind == "set_weights":
            for key, spec in step.groups.items():
                self.set_weights(key, spec.weights)
        elif step.kind == "update":
            self.update(step.groups, step.remove_groups, step.add, step.remove)

    def apply(self, desired: Desired) -> None:
        self.calls.append("apply")
        self.desired = desired

    def set_weights(self, key: str, weights: Mapping[Member, int], resilient: Any = True) -> None:
        self.calls.append("set_weights")
        d = self.desired
        if d is None or key not in d.groups:
            raise KeyError(key)
        groups = dict(d.groups)
        groups[key] = GroupSpec(dict(weights), d.groups[key].resilient)
        self.desired = Desired(groups=groups, routes=d.routes, standby=d.standby)

    def update(
        self,
        groups: Mapping[str, GroupSpec] | None = None,
        remove_groups: Iterable[str] = (),
        add: Mapping[Any, str] | None = None,
        remove: Iterable[Any] = (),
    ) -> None:
        self.calls.append("update")
        d = self.desired
        if d is None:
            raise RuntimeError("apply() a desired state first")
        add = dict(add or {})
        new_groups = dict(d.groups)
        new_groups.update(groups or {})
        for key in set(remove_groups):
            new_groups.pop(key, None)
        routes = dict(d.routes)
        routes.update(add)
        for pfx in remove:
            if pfx not in add:
                routes.pop(pfx, None)
        self.desired = Desired(groups=new_groups, routes=routes, standby=d.standby)


class Rig:
    """The node's part of the loop: routes table changes in, runs the planned steps."""

    def __init__(self, incremental: bool = True, hold_s: float = 0.0, lane: bool = False) -> None:
        self.sync = FibSync(hold_s, incremental_profiles=incremental)
        self.lane = lane  # weights-only changes go out at once (``FibService.table_changed``)
        self.fib = ModelFib()
        self.table = PathTable()
        self.now = 0.0
        self.steps: list[Step] = []

    def changed(self, ch: Changes) -> bool:
        specs = self.sync.fast_weights(self.table, ch, None, self.now) if self.lane else None
        if specs:
            for key, spec in specs.items():
                self.fib.set_weights(key, spec.weights)
            ch = Changes(ch.updated - specs.keys(), ch.removed, ch.prefixes)
        self.sync.add(ch)
        return self.sync.request(self.now)

    def run(self) -> None:
        while (step := self.sync.plan(self.table, None)) is not None:
            self.steps.append(step)
            try:
                self.fib.run(step)
            except OSError:
                self.sync.failed()
                continue
            self.sync.done(step)

    def desired(self) -> Desired:
        return self.sync.desired(self.table, None)


# two spines on interfaces, one next hop without an interface (e.g. a multihop peer): a profile
# of such next hops has no member the FIB can program while its interface members are down
NHS = [
    NextHop(1, "198.18.1.0", "spine1"),
    NextHop(2, "198.18.2.0", "spine2"),
    NextHop(3, "198.18.3.0", None),
]
PREFIXES = [f"198.19.{i}.0/24" for i in range(1, 5)]


def canon(d: Desired) -> tuple[dict[str, Any], dict[str, str], dict[str, str]]:
    return (
        {k: (dict(g.weights), g.resilient) for k, g in d.groups.items()},
        {str(p): k for p, k in d.routes.items()},
        {str(p): k for p, k in d.standby.items()},
    )


_nh_sets = hs.frozensets(hs.sampled_from(NHS), min_size=1, max_size=3)
_op = hs.one_of(
    hs.tuples(hs.just("prefix"), hs.sampled_from(PREFIXES), _nh_sets),
    hs.tuples(hs.just("withdraw"), hs.sampled_from(PREFIXES), hs.just(frozenset())),
    hs.tuples(
        hs.just("link"),
        hs.sampled_from(["spine1", "spine2"]),
        hs.sampled_from([(7, False), (3, False), (0, True)]),
    ),
    hs.tuples(hs.just("sync"), hs.just(""), hs.just(None)),
    # fabric colours: pin a prefix to a group of one member (or unpin it: None)
    hs.tuples(hs.just("pin"), hs.sampled_from(PREFIXES), hs.sampled_from([None, 0, 1])),
)

MEMBERS = [Member(ipaddress.ip_address(nh.address), nh.ifname or "") for nh in NHS[:2]]


def pin(rig: Rig, pins: dict[str, int]) -> bool:
    """Pin each prefix to the group of member ``pins[prefix]``, the other one on standby."""
    groups = {f"pin{i}": GroupSpec({m: 1}) for i, m in enumerate(MEMBERS)}
    routes = {ipaddress.ip_network(p): f"pin{i}" for p, i in pins.items()}
    standby = {ipaddress.ip_network(p): f"pin{1 - i}" for p, i in pins.items()}
    return rig.sync.pin(groups if pins else {}, routes, standby, rig.now)


def sync(rig: Rig) -> None:
    rig.sync.request(rig.now)
    rig.run()


def play(ops: list[tuple[str, str, Any]], incremental: bool, lane: bool = False) -> None:
    rig = Rig(incremental, lane=lane)
    rig.sync.bgp_up(rig.now)  # no hold-down here
    table, fib = rig.table, rig.fib
    for ifname in ("spine1", "spine2"):
        rig.changed(table.set_local(ifname, LocalLink(7)))
    rig.changed(table.set_prefix(PREFIXES[0], {NHS[0]: None, NHS[1]: None}))
    sync(rig)  # the first sync is the full one
    pins: dict[str, int] = {}
    for kind, what, arg in ops:
        if kind == "pin":
            if arg is None:
                pins.pop(what, None)
            else:
                pins[what] = arg
            pin(rig, pins)
        elif kind == "prefix":
            rig.changed(table.set_prefix(what, dict.fromkeys(arg)))
        elif kind == "withdraw":
            rig.changed(table.remove_prefix(what))
        elif kind == "link":
            rig.changed(table.set_local(what, LocalLink(arg[0], arg[1])))
        else:
            sync(rig)
            assert fib.desired is not None
            assert canon(fib.desired) == canon(rig.desired()), fib.calls
    sync(rig)
    assert fib.desired is not None
    assert canon(fib.desired) == canon(rig.desired()), fib.calls


@pytest.mark.parametrize("lane", [False, True], ids=["steps", "lane"])
@pytest.mark.parametrize("incremental", [True, False], ids=["update", "apply"])
@settings(max_examples=300, deadline=None)
@given(ops=hs.lists(_op, max_size=25))
def test_incremental_sync_equals_a_full_sync(
    incremental: bool, lane: bool, ops: list[tuple[str, str, Any]]
) -> None:
    """``incremental``: new/removed profiles as ``update`` steps (the path switched off by
    default) or as full applies; ``lane``: weights-only changes of groups the FIB has are
    written at once, the rest by the steps."""
    play(ops, incremental, lane)


def test_the_fast_lane_takes_new_weights_of_groups_the_fib_has_only() -> None:
    rig = Rig(hold_s=5.0)
    rig.sync.bgp_up(0.0)
    t = rig.table
    rig.changed(t.set_local("spine1", LocalLink(7)))
    rig.changed(t.set_local("spine2", LocalLink(7)))
    ch = t.set_prefix(PREFIXES[0], {NHS[0]: None, NHS[1]: None})
    assert rig.sync.fast_weights(t, ch, None, 1.0) is None  # a new profile, in the hold-down
    rig.changed(ch)
    rig.now = 5.0
    rig.sync.on_timer(rig.now)
    rig.run()
    (key,) = rig.fib.desired.groups  # type: ignore[union-attr]
    weights = t.set_local("spine2", LocalLink(3))
    specs = rig.sync.fast_weights(t, weights, None, 5.0)
    assert specs is not None and set(specs) == {key}
    assert specs[key].weights == {m: v for m, v in rig.desired().groups[key].weights.items()}
    moved = t.set_prefix(PREFIXES[1], {NHS[0]: None, NHS[1]: None})  # an existing profile
    assert rig.sync.fast_weights(t, moved | weights, None, 5.0) is None  # a route moves
    rig.sync.failed()
    assert rig.sync.fast_weights(t, weights, None, 5.0) is None  # a full sync is due


def test_profile_back_from_no_usable_member_gets_its_routes() -> None:
    """A profile whose only programmable member is down is left out of the FIB (with its
    routes); when the member comes back, its routes must come back too, though no prefix
    moved."""
    rig = Rig(incremental=True)
    rig.sync.bgp_up(0.0)
    table, fib = rig.table, rig.fib
    rig.changed(table.set_local("spine1", LocalLink(7)))
    rig.changed(table.set_prefix(PREFIXES[0], {NHS[0]: None, NHS[2]: None}))
    sync(rig)
    rig.changed(table.set_local("spine1", LocalLink(0, True)))
    sync(rig)
    assert fib.desired is not None and not fib.desired.routes
    rig.changed(table.set_local("spine1", LocalLink(7)))
    sync(rig)
    assert canon(fib.desired) == canon(rig.desired())
    assert {str(p) for p in fib.desired.routes} == {PREFIXES[0]}


# ---- the hold-down and the sync policy, in virtual time -------------------------------------


def _learn(rig: Rig, n: int = 1) -> Changes:
    rig.changed(rig.table.set_local("spine1", LocalLink(7)))
    ch = Changes()
    for p in PREFIXES[:n]:
        c = rig.table.set_prefix(p, {NHS[0]: None})
        ch = ch | c
        rig.changed(c)
    return ch


def test_nothing_is_synced_before_bgp_is_up_and_the_hold_has_passed() -> None:
    rig = Rig(hold_s=1.0)
    assert rig.sync.next_deadline() is None  # no BGP session yet: no timer either
    _learn(rig)
    assert not rig.sync.dirty and rig.sync.plan(rig.table, None) is None
    # changes learned while held are dropped: the first sync is a full apply anyway
    assert not rig.sync.pending()
    rig.now = 10.0
    rig.sync.bgp_up(rig.now)
    rig.sync.bgp_up(rig.now + 0.5)  # later sessions do not move the hold
    assert rig.sync.next_deadline() == 11.0
    rig.now = 10.5
    assert not rig.changed(rig.table.set_prefix(PREFIXES[1], {NHS[0]: None}))
    assert not rig.sync.pending() and rig.fib.calls == []
    assert not rig.sync.on_timer(10.999)  # early: still held, the timer stays armed
    assert rig.sync.next_deadline() == 11.0
    rig.now = 11.0
    assert rig.sync.on_timer(rig.now)  # the hold's end asks for the first sync ...
    assert rig.sync.next_deadline() is None
    rig.run()
    assert rig.fib.calls == ["apply"]  # ... a full one, with everything the table has
    assert canon(rig.fib.desired) == canon(rig.desired())  # type: ignore[arg-type]
    assert {str(p) for p in rig.fib.desired.routes} == set(PREFIXES[:2])  # type: ignore[union-attr]


def test_a_start_that_adopted_nothing_has_no_hold() -> None:
    """A fresh router advertises what it learns at once, so it programs it at once too: a
    hold with nothing adopted would only drop what its peers already send it."""
    rig = Rig(hold_s=1.0)
    rig.sync.adopted(0)
    rig.sync.bgp_up(rig.now)
    assert rig.sync.next_deadline() is None  # no timer: nothing to wait for
    _learn(rig)
    assert rig.sync.dirty
    rig.run()
    assert rig.fib.calls == ["apply"]  # the first sync, in the session's first instant
    assert {str(p) for p in rig.fib.desired.routes} == {PREFIXES[0]}  # type: ignore[union-attr]
    # with adopted state the hold stands
    held = Rig(hold_s=1.0)
    held.sync.adopted(3)
    held.sync.bgp_up(held.now)
    assert held.sync.next_deadline() == held.now + 1.0
    _learn(held)
    assert not held.sync.dirty and held.fib.calls == []


def test_after_the_hold_changes_are_synced_at_once_and_coalesced() -> None:
    rig = Rig(hold_s=1.0)
    rig.sync.bgp_up(0.0)
    rig.now = 1.0  # the hold has passed: a change asks for a sync without the timer
    assert rig.changed(rig.table.set_local("spine1", LocalLink(7)))
    rig.changed(rig.table.set_prefix(PREFIXES[0], {NHS[0]: None, NHS[1]: None}))
    rig.changed(rig.table.set_local("spine2", LocalLink(7)))
    rig.run()
    assert rig.fib.calls == ["apply"]  # three changes, one sync
    rig.changed(rig.table.set_local("spine1", LocalLink(3)))
    rig.changed(rig.table.set_local("spine2", LocalLink(5)))
    assert len(rig.sync.pending().updated) == 1  # one profile, two of its links
    rig.run()
    assert rig.fib.calls == ["apply", "set_weights"]  # weights only: one replace per profile
    assert rig.steps[-1].mode == "incremental"
    assert canon(rig.fib.desired) == canon(rig.desired())  # type: ignore[arg-type]
    assert rig.sync.plan(rig.table, None) is None  # nothing dirty


def test_an_error_or_a_config_change_makes_the_next_sync_full() -> None:
    rig = Rig()
    rig.sync.bgp_up(0.0)
    _learn(rig, 2)
    rig.run()
    rig.fib.fail_next = True
    rig.changed(rig.table.set_local("spine1", LocalLink(3)))
    rig.run()
    assert rig.steps[-1].kind == "set_weights" and rig.sync.full
    rig.changed(rig.table.set_local("spine1", LocalLink(5)))
    rig.run()
    assert rig.steps[-1].mode == "full" and not rig.sync.full
    assert rig.sync.request_full(rig.now)  # a FIB config change
    rig.run()
    assert rig.steps[-1].mode == "full" and rig.fib.calls[-1] == "apply"
    assert canon(rig.fib.desired) == canon(rig.desired())  # type: ignore[arg-type]


def test_new_profiles_are_one_incremental_update_unless_the_switch_is_off() -> None:
    assert FibSync(1.0).incremental_profiles  # the default: churn does not replan the table
    for incremental, want in ((False, "apply"), (True, "update")):
        rig = Rig(incremental)
        rig.sync.bgp_up(0.0)
        _learn(rig)
        rig.run()
        rig.changed(rig.table.set_prefix(PREFIXES[1], {NHS[0]: None, NHS[1]: None}))
        rig.run()
        assert rig.fib.calls == ["apply", want]
        assert canon(rig.fib.desired) == canon(rig.desired())  # type: ignore[arg-type]


def test_weights_of_existing_groups_go_before_a_structural_step() -> None:
    """A band change and a BGP move pending together: the group the kernel has gets its new
    weights in a step of its own, before the new group and the route move (a structural step
    takes several netlink round trips, and the band change would wait for all of them)."""
    rig = Rig()
    rig.sync.bgp_up(0.0)
    rig.changed(rig.table.set_local("spine1", LocalLink(7)))
    rig.changed(rig.table.set_local("spine2", LocalLink(7)))
    rig.changed(rig.table.set_prefix(PREFIXES[0], {NHS[0]: None, NHS[1]: None}))
    rig.run()
    (both,) = rig.fib.desired.groups  # type: ignore[union-attr]
    rig.changed(rig.table.set_local("spine2", LocalLink(3)))
    rig.changed(rig.table.set_prefix(PREFIXES[1], {NHS[0]: None}))
    rig.run()
    assert rig.fib.calls == ["apply", "set_weights", "update"]
    assert set(rig.steps[-2].groups) == {both} and both not in rig.steps[-1].groups
    assert canon(rig.fib.desired) == canon(rig.desired())  # type: ignore[arg-type]
    assert rig.sync.plan(rig.table, None) is None


def test_members_are_built_once_and_hash_like_equal_ones() -> None:
    """Every full sync builds each group's members: the same next hop is the same member
    object from one sync to the next (its address parsed once), equal to and hashing like one
    built afresh."""
    rig = Rig()
    rig.table.set_local("spine1", LocalLink(7))
    rig.table.set_prefix(PREFIXES[0], {NHS[0]: None, NHS[2]: None})
    first, again = rig.desired(), rig.desired()
    (spec,) = first.groups.values()
    (spec2,) = again.groups.values()
    assert spec.weights and all(
        a is b for a, b in zip(sorted(spec.weights), sorted(spec2.weights), strict=True)
    )
    for m in spec.weights:
        fresh = Member(m.gateway, m.ifname, m.onlink)
        assert fresh == m and hash(fresh) == hash(m) and fresh is not m


def _expected(table: PathTable, key: str) -> dict[Member, int]:
    """A profile's group from the table's own view, next hop by next hop."""
    return {
        Member(ipaddress.ip_address(nh.address), nh.ifname): w.value
        for nh, w in table.weights(key).items()
        if w.value > 0 and nh.ifname
    }


def test_a_profile_made_again_maps_its_weights_onto_its_own_next_hops() -> None:
    """The sync keeps each profile's members in the profile's row order. A profile removed and
    made again under the same key may list its next hops in another order: each weight must
    still go to its own next hop."""
    rig = Rig()
    t = rig.table
    rig.changed(t.set_local("spine1", LocalLink(7)))
    rig.changed(t.set_local("spine2", LocalLink(2)))
    t.set_prefix(PREFIXES[0], {NHS[0]: None, NHS[1]: None})
    (key,) = t.profiles()
    first = rig.desired().groups[key].weights
    assert first == _expected(t, key) and len(set(first.values())) == 2
    t.remove_prefix(PREFIXES[0])  # (not told to the sync: the rows alone must tell)
    t.set_prefix(PREFIXES[0], {NHS[1]: None, NHS[0]: None})  # same key, rows the other way
    assert t.profiles() == [key]
    assert rig.desired().groups[key].weights == _expected(t, key) == first


# ---- pinned prefixes (fabric colours) -----------------------------------------------------


def _pinned_rig() -> Rig:
    rig = Rig()
    rig.sync.bgp_up(0.0)
    for ifname in ("spine1", "spine2"):
        rig.changed(rig.table.set_local(ifname, LocalLink(7)))
    for p in PREFIXES[:2]:
        rig.changed(rig.table.set_prefix(p, {NHS[0]: None, NHS[1]: None}))
    sync(rig)
    return rig


def test_a_pinned_prefix_takes_its_group_and_a_standby_route() -> None:
    rig = _pinned_rig()
    assert pin(rig, {PREFIXES[0]: 0})
    rig.run()
    d = rig.fib.desired
    assert d is not None and rig.steps[-1].kind == "apply"
    net = ipaddress.ip_network(PREFIXES[0])
    assert d.routes[net] == "pin0" and d.standby == {net: "pin1"}
    assert dict(d.groups["pin0"].weights) == {MEMBERS[0]: 1}
    other = ipaddress.ip_network(PREFIXES[1])
    assert d.routes[other] == rig.table.profile_of(PREFIXES[1])  # unpinned: its profile
    assert other not in d.standby


def test_new_weights_of_a_pinned_group_are_one_group_write() -> None:
    rig = _pinned_rig()
    pin(rig, {PREFIXES[0]: 0})
    rig.run()
    n = len(rig.steps)
    groups = {"pin0": GroupSpec({MEMBERS[1]: 3}), "pin1": GroupSpec({MEMBERS[1]: 1})}
    net = ipaddress.ip_network(PREFIXES[0])
    assert rig.sync.pin(groups, {net: "pin0"}, {net: "pin1"}, rig.now)
    rig.run()
    (step,) = rig.steps[n:]
    assert step.kind == "set_weights" and set(step.groups) == {"pin0"}
    assert rig.fib.desired is not None
    assert dict(rig.fib.desired.groups["pin0"].weights) == {MEMBERS[1]: 3}
    assert not rig.sync.pin(groups, {net: "pin0"}, {net: "pin1"}, rig.now)  # nothing new


def test_a_prefix_move_while_pinned_is_a_full_apply_that_keeps_the_pins() -> None:
    rig = _pinned_rig()
    pin(rig, {PREFIXES[0]: 0})
    rig.run()
    n = len(rig.steps)
    rig.changed(rig.table.set_prefix(PREFIXES[0], {NHS[0]: None}))  # its profile changes
    rig.run()
    assert [s.kind for s in rig.steps[n:]] == ["apply"]
    d = rig.fib.desired
    assert d is not None and d.routes[ipaddress.ip_network(PREFIXES[0])] == "pin0"


def test_unpinning_gives_the_prefix_its_profile_back() -> None:
    rig = _pinned_rig()
    pin(rig, {PREFIXES[0]: 0})
    rig.run()
    assert pin(rig, {})
    rig.run()
    assert rig.fib.desired is not None
    assert canon(rig.fib.desired) == canon(rig.desired())
    assert not rig.fib.desired.standby and "pin0" not in rig.fib.desired.groups
