"""The pure decisions of the FIB programmer's incremental steps and fast-lane weight writes.

:class:`glbd.fib.programmer.FibProgrammer` holds the lock, plans and sends; what it decides from the
cache and the desired state alone is here, apart from the sockets: the desired state after an
``update`` step and the ids it needs, whether the step must fall back to a full plan, the
notes it keeps, which groups the fast lane may take and whether its plan is only in-place
group replaces, and whether a reconcile's dumps leave nothing to plan.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping
from types import MappingProxyType

from glbd.fib.fibcache import FibCache
from glbd.fib.fibmodel import Desired, GroupSpec, IPNetwork, KLink, Member, Observed
from glbd.fib.fibplan import (
    GroupSet,
    IdMap,
    IdRanges,
    Plan,
    assign_group_ids,
    assign_ids,
    standby_note,
)

__all__ = [
    "RouteMaps",
    "as_expected",
    "lane_groups",
    "lane_in_place",
    "route_maps",
    "routes_planned",
    "step_desired",
    "step_ids",
    "step_needs_full",
    "step_notes",
]


_NONE: Mapping[IPNetwork, str] = MappingProxyType({})


#: the route mappings (``routes``, ``standby``) a full route plan last covered
RouteMaps = tuple[object, object]


def route_maps(d: Desired) -> RouteMaps:
    """What :func:`routes_planned` compares: ``d``'s route mappings (an empty ``standby`` as
    None: each ``Desired()`` without standby routes has a new empty one)."""
    return (d.routes, d.standby or None)


def routes_planned(d: Desired, planned: RouteMaps | None) -> bool:
    """``d``'s route mappings are the objects the last full route plan covered (identity,
    not equality: the same objects need no O(routes) plan). The incremental ``update``
    never changes ``standby``; a new standby mapping comes with an ``apply``, and its
    routes, primary and standby, are then planned in full."""
    return planned is not None and planned[0] is d.routes and planned[1] is (d.standby or None)


def step_desired(
    d: Desired,
    groups: Mapping[str, GroupSpec],
    dropped: Collection[str],
    add: Mapping[IPNetwork, str],
    remove: Iterable[IPNetwork],
) -> tuple[Desired, list[IPNetwork]]:
    """The desired state after one step, and the prefixes the step names (added, then
    withdrawn). Without routes added or withdrawn the routes mapping stays the same object:
    a weight change plans no route. ``standby`` is carried over as it is."""
    gone = [pfx for pfx in remove if pfx not in add]
    new_groups = dict(d.groups)
    new_groups.update(groups)
    for key in dropped:
        new_groups.pop(key, None)
    routes: Mapping[IPNetwork, str] = d.routes
    if add or gone:
        routes = {**d.routes, **add}
        for pfx in gone:
            routes.pop(pfx, None)
    return dataclasses.replace(d, groups=new_groups, routes=routes), [*add, *gone]


def step_ids(
    d: Desired,
    obs: Observed,
    before: IdMap,
    changed: Mapping[str, GroupSpec],
    dropped: Collection[str],
    ranges: IdRanges,
    metric: int = 0,
) -> IdMap:
    """The ids for a step: a full assignment when a group has a member without an id; for
    BGP churn (new groups of known members, old ones dropped) ids for the step's own groups
    alone, the member mapping as it is; otherwise ``before``."""
    if not all(m in before.members for spec in changed.values() for m in spec.weights):
        return assign_ids(d, obs, before, ranges, metric=metric)
    if dropped or not all(k in before.groups for k in changed):
        return assign_group_ids(d, obs, before, changed, ranges, metric=metric)
    return before


def step_needs_full(
    realizable: Mapping[str, int],
    was: Mapping[str, int],
    old_groups: Mapping[str, GroupSpec],
    routes: Mapping[IPNetwork, str],
    named: Iterable[IPNetwork],
    standby: Mapping[IPNetwork, str] = _NONE,
) -> bool:
    """A group went, became (un)realizable or changed id (``was`` -> ``realizable``) while a
    route the step did not name uses it (a primary route of ``routes`` or a standby route of
    ``standby``): only a full plan repoints that route. A group new in this step (not in
    ``old_groups`` nor ``was``) has only named routes."""
    if realizable == was:
        return False
    moved = {
        k
        for k in realizable.keys() | was.keys()
        if realizable.get(k) != was.get(k) and (k in old_groups or k in was)
    }
    if not moved:
        return False
    named_set = set(named)
    return any(k in moved for pfx, k in routes.items() if pfx not in named_set) or any(
        k in moved for pfx, k in standby.items() if pfx not in named_set
    )


def step_notes(
    notes: Mapping[str, str],
    planned: Mapping[str, str],
    changed: Collection[str],
    dropped: Collection[str],
    named: Iterable[IPNetwork],
) -> dict[str, str]:
    """The notes after a step: the step's own (``planned``) replace those of the groups and
    prefixes it planned (both routes of a prefix: primary and standby); the others are kept."""
    named_s: set[str] = set()
    for pfx in named:
        named_s.add(str(pfx))
        named_s.add(standby_note(pfx))
    kept = {
        k: v for k, v in notes.items() if k not in changed and k not in dropped and k not in named_s
    }
    return {**kept, **planned}


def lane_groups(
    fc: FibCache,
    d: Desired,
    weights: Mapping[str, Mapping[Member, int]],
    busy: frozenset[str] | None,
) -> dict[str, GroupSpec]:
    """The groups of ``weights`` the fast lane may write at once: in the desired state, with
    an id the kernel has, the same members, and not named by the write holding the lock
    (``busy``), with their new specs (each keeps its type)."""
    take: dict[str, GroupSpec] = {}
    for key, w in weights.items():
        spec = d.groups.get(key)
        gid = fc.ids.groups.get(key)
        if (
            spec is None
            or gid is None
            or gid not in fc.obs.groups
            or (busy is not None and key in busy)
            or spec.weights.keys() != w.keys()
        ):
            continue
        take[key] = GroupSpec(dict(w), spec.resilient)
    return take


def lane_in_place(pl: Plan, known: Mapping[str, int], take: Iterable[str]) -> bool:
    """The fast lane's plan is in-place group replaces only. Anything else (a member to
    create, a group that can no longer exist) is a structural change for the normal path."""
    return not (
        any(type(op) is not GroupSet or op.create for op in pl.ops)
        or any(pl.realizable.get(k) != known.get(k) for k in take)
    )


def as_expected(
    fc: FibCache,
    before: Observed,
    clean_for: Desired | None,
    clean_links: Mapping[str, KLink],
) -> bool:
    """The dumps just taken show the kernel as the cache had it (``before``), the desired
    state is the one last brought about without an error (``clean_for``, with the links
    that sync saw), and nothing waits on a timer (held or excluded members, the stale
    timer): planning would find nothing to do (O(groups) saved)."""
    o = fc.obs
    return (
        clean_for is not None
        and clean_for is fc.desired
        and not (fc.routes_dirty or fc.need_full or fc.excluded or fc.held_until)
        and fc.stale_keep is None
        and o.nexthops == before.nexthops
        and o.groups == before.groups
        and o.links == clean_links
        and o.foreign_ids == before.foreign_ids
    )
