"""The pure FIB planner: ``plan(desired, observed, ids, params) -> Plan(ops, notes)``.

Rules it enforces:

* Only objects with glbd's protocol number are ever changed or deleted (``Observed`` holds only
  those); ids of foreign nexthops are never reused and foreign routes are never replaced. A
  write to an object glbd does not have in the kernel is a create-only write (``replace`` False:
  NLM_F_EXCL), so one that appeared unseen makes the kernel refuse instead of overwrite.
* After an adopting restart (the stale timer) only the adopted objects that glbd has not
  re-learned since are kept (``keep_*``); anything re-learned and then withdrawn goes at once.
* Weights change in place (``GroupSet`` = RTM_NEWNEXTHOP with NLM_F_REPLACE): never
  delete-then-add. A resilient group moves only idle buckets, except when a member's share
  falls to ``Resilient.migrate_share`` of what it was or lower (its path got worse): then a
  replace with an idle timer of 0 moves that member's excess buckets at once, and a second
  one restores the timer. A change the kernel cannot do in place (hash-threshold <->
  resilient, other bucket count) gets a new group id: the routes move over with a route
  replace and the old group is deleted afterwards (make-before-break).
* A member is programmed only while its link is admin-up with carrier (the kernel refuses
  others and silently flushes them on carrier loss) and it is not failed over
  (``excluded``). A group with no usable member cannot exist: it is deleted and its routes go
  with it (the kernel does the same on its own), and it comes back when a member does.
* A prefix in ``Desired.standby`` gets a second route at the standby metric
  (:func:`standby_metric`: the metric + ``STANDBY_METRIC_OFFSET``) through its standby group,
  planned like the primary one (created, re-pointed, deleted; a foreign route at that metric
  left alone); any other glbd route of a desired prefix is deleted.
* Ops come out in a safe order: member nexthops, groups, route sets, route deletes, group
  deletes, member deletes.

Kernel ids (deterministic, nothing stored on disk): member nexthops live in
``[member_base, member_base + size)``, groups in ``[group_base, group_base + size)``; the
preferred id is ``base + crc32(label) % size`` with linear probing. On adopt the mapping is
recovered from the kernel: members by (gateway, ifindex, onlink), group keys by the nhid their
desired prefixes point at (majority vote), so a restart reuses every existing object.
"""

from __future__ import annotations

import ipaddress
import zlib
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import TypeAlias

from glbd.fib.fibmodel import (
    Desired,
    GroupSpec,
    IPNetwork,
    KGroup,
    Member,
    Observed,
    Resilient,
    RouteKey,
)

__all__ = [
    "STANDBY_METRIC_OFFSET",
    "GroupDel",
    "GroupSet",
    "IdMap",
    "IdRanges",
    "NhDel",
    "NhSet",
    "Op",
    "Plan",
    "PlanParams",
    "RouteDel",
    "RouteSet",
    "assign_group_ids",
    "assign_ids",
    "compatible",
    "is_migration",
    "migrating",
    "plan",
    "programmed_weights",
    "route_metric",
    "scale_weights",
    "share_fell",
    "standby_metric",
    "standby_note",
]

WEIGHT_MAX_8BIT = 255
WEIGHT_MAX_16BIT = 65535
#: a standby route's metric is the primary route's + this: the next-preferred route of the
#: prefix, which the kernel uses as soon as the primary one is gone
STANDBY_METRIC_OFFSET = 1


# --- ops -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NhSet:
    id: int
    member: Member
    ifindex: int
    replace: bool = False  # glbd's own nexthop is there (else create-only)


@dataclass(frozen=True, slots=True)
class GroupSet:
    id: int
    key: str
    entries: tuple[tuple[int, int], ...]  # (member id, weight)
    resilient: Resilient | None
    create: bool


# not frozen (never mutated): one is made per route written, and a frozen dataclass's
# __init__ costs four times as much (a tenth of a 100k-route install)
@dataclass(slots=True, unsafe_hash=True)
class RouteSet:
    prefix: IPNetwork
    metric: int
    nhid: int
    replace: bool = False  # glbd's own route is there (else create-only)


@dataclass(frozen=True, slots=True)
class RouteDel:
    prefix: IPNetwork
    metric: int


@dataclass(frozen=True, slots=True)
class GroupDel:
    id: int


@dataclass(frozen=True, slots=True)
class NhDel:
    id: int


Op: TypeAlias = NhSet | GroupSet | RouteSet | RouteDel | GroupDel | NhDel
_V4_ANY = ipaddress.IPv4Network("0.0.0.0/0")
_V6_ANY = ipaddress.IPv6Network("::/0")
_ORDER = {NhSet: 0, GroupSet: 1, RouteSet: 2, RouteDel: 3, GroupDel: 4, NhDel: 5}


@dataclass(frozen=True, slots=True)
class Plan:
    ops: tuple[Op, ...]
    notes: Mapping[str, str] = field(default_factory=dict)  # group key / prefix -> why not
    realizable: Mapping[str, int] = field(default_factory=dict)  # key -> gid of groups that exist


@dataclass(frozen=True, slots=True)
class PlanParams:
    protocol: int
    metric: int = 0
    max_weight: int = WEIGHT_MAX_8BIT
    excluded: frozenset[Member] = frozenset()
    allow_delete: bool = True  # False: delete nothing that is not re-pointed
    #: adopted objects not re-learned since an adopting restart, kept while the stale timer
    #: runs (everything else not wanted is deleted)
    keep_routes: AbstractSet[RouteKey] = frozenset()
    keep_groups: AbstractSet[int] = frozenset()
    keep_nexthops: AbstractSet[int] = frozenset()


@dataclass(frozen=True, slots=True)
class IdRanges:
    member_base: int = 1_000_000
    group_base: int = 2_000_000
    size: int = 1_000_000


@dataclass(slots=True)
class IdMap:
    members: dict[Member, int] = field(default_factory=dict)
    groups: dict[str, int] = field(default_factory=dict)


# --- helpers -------------------------------------------------------------------------------


def route_metric(prefix: IPNetwork, metric: int) -> int:
    """The metric the kernel stores: IPv6 turns 0 into 1024 (IP6_RT_PRIO_USER)."""
    return 1024 if prefix.version == 6 and metric == 0 else metric


def standby_metric(prefix: IPNetwork, metric: int) -> int:
    """The metric the kernel stores for ``prefix``'s standby route (IPv6, metric 0: 1025)."""
    return route_metric(prefix, metric) + STANDBY_METRIC_OFFSET


def standby_note(prefix: IPNetwork) -> str:
    """The ``notes`` key of ``prefix``'s standby route (the primary route's is the prefix)."""
    return f"{prefix} standby"


def scale_weights(weights: Mapping[Member, int], max_weight: int) -> dict[Member, int]:
    """Drop weights <= 0; if the largest exceeds ``max_weight`` scale all proportionally into
    1..max_weight (as FRR does for 8-bit kernels)."""
    w = {m: int(v) for m, v in weights.items() if v > 0}
    top = max(w.values(), default=0)
    if top <= max_weight:
        return w
    return {m: max(1, round(v * max_weight / top)) for m, v in w.items()}


def compatible(kg: KGroup, spec_res: Resilient | None) -> bool:
    """Can ``kg`` be replaced in place into a group with these resilient parameters?"""
    if (kg.resilient is None) != (spec_res is None):
        return False
    return kg.resilient is None or spec_res is None or kg.resilient.buckets == spec_res.buckets


def share_fell(
    old: Sequence[tuple[int, int]], new: Sequence[tuple[int, int]], ratio: float
) -> bool:
    """A member in both entry lists (member id, weight) whose weight fell and whose share of
    the total is now ``ratio`` of its old share or less. A member added or removed alone
    does not count: the kernel gives a removed one's buckets away at once, and moving busy
    buckets to one just added would only disturb running flows."""
    total_old = sum(w for _, w in old)
    total_new = sum(w for _, w in new)
    if total_old <= 0 or total_new <= 0:
        return False
    before = dict(old)
    for i, w in new:
        w0 = before.get(i)
        if w0 is not None and w < w0 and w * total_old <= ratio * w0 * total_new:
            return True
    return False


def migrating(res: Resilient) -> Resilient:
    """``res`` with an idle timer of 0: every bucket counts as idle for one replace."""
    return replace(res, idle_timer_s=0.0)


def is_migration(op: GroupSet) -> bool:
    """``op`` is the replace that moves busy buckets at once (:func:`migrating`)."""
    r = op.resilient
    return r is not None and r.idle_timer_ct == 0 and r.migrate_share > 0 and not op.create


def usable(m: Member, observed: Observed, excluded: frozenset[Member]) -> bool:
    if m in excluded:
        return False
    link = observed.links.get(m.ifname)
    return link is not None and link.usable


def programmed_weights(spec: GroupSpec, observed: Observed, p: PlanParams) -> dict[Member, int]:
    """The weights glbd wants in the kernel right now: usable members only, scaled."""
    # the per-member hot loop of every group write: ``usable`` inlined, one pass
    links = observed.links
    excluded = p.excluded
    live: dict[Member, int] = {}
    top = 0
    for m, w in spec.weights.items():
        if w > 0 and not (excluded and m in excluded):
            lk = links.get(m.ifname)
            if lk is not None and lk.usable:
                live[m] = v = int(w)
                if v > top:
                    top = v
    if top <= p.max_weight:
        return live
    return scale_weights(live, p.max_weight)


def _probe(
    base: int, size: int, label: str, taken: set[int], reusable: Callable[[int], bool] | None = None
) -> int:
    """First id of ``label``'s probe sequence that is free, or taken but ``reusable``."""
    start = zlib.crc32(label.encode())
    for i in range(size):
        cand = base + (start + i) % size
        if cand not in taken or (reusable is not None and reusable(cand)):
            return cand
    raise RuntimeError("nexthop id range exhausted")


def assign_ids(
    desired: Desired,
    observed: Observed,
    prev: IdMap,
    ranges: IdRanges = IdRanges(),
    *,
    metric: int = 0,
) -> IdMap:
    """Stable key/member -> kernel id mapping (pure). Keeps ``prev`` where still valid, then
    recovers from kernel state, then allocates deterministically. ``metric``: the
    programmer's (standby routes vote from the standby metric only)."""
    taken: set[int] = set(observed.foreign_ids)
    out = IdMap()
    # members
    wanted_members: set[Member] = set()
    for spec in desired.groups.values():
        wanted_members.update(spec.weights)
    by_identity: dict[tuple[object, int, bool], int] = {}
    for nh in observed.nexthops.values():
        by_identity.setdefault((nh.gateway, nh.ifindex, nh.onlink), nh.id)
    taken.update(observed.nexthops)
    taken.update(observed.groups)
    given: set[int] = set()
    for m in sorted(wanted_members):
        i = prev.members.get(m)
        if i is not None and i not in observed.foreign_ids and i not in given:
            out.members[m] = i
            given.add(i)
            continue
        link = observed.links.get(m.ifname)
        if link is not None:
            j = by_identity.get((m.gateway, link.index, m.onlink))
            if j is not None and j not in given:
                out.members[m] = j
                given.add(j)
                continue
    taken.update(given)
    for m in sorted(wanted_members - set(out.members)):
        out.members[m] = _probe(ranges.member_base, ranges.size, m.label, taken)
        taken.add(out.members[m])
    _assign_groups(
        desired, observed, prev.groups, desired.groups, out.groups, taken, ranges, metric
    )
    return out


def assign_group_ids(
    desired: Desired,
    observed: Observed,
    prev: IdMap,
    keys: Collection[str],
    ranges: IdRanges = IdRanges(),
    *,
    metric: int = 0,
) -> IdMap:
    """:func:`assign_ids` for an incremental step whose groups ``keys`` have members that all
    have ids in ``prev``: the member ids are kept as they are (the same mapping; a member the
    step left unused keeps its id until the next full assignment, as it keeps its nexthop
    until the next full plan), the other desired groups keep theirs, ``keys`` are assigned
    as :func:`assign_ids` would. O(the step), not O(every member of the table)."""
    taken: set[int] = set(observed.foreign_ids)
    taken.update(observed.nexthops)
    taken.update(observed.groups)
    taken.update(prev.members.values())
    todo = set(keys)
    out = IdMap(members=prev.members)
    out.groups = {k: i for k, i in prev.groups.items() if k in desired.groups and k not in todo}
    _assign_groups(desired, observed, prev.groups, todo, out.groups, taken, ranges, metric)
    return out


def _assign_groups(
    desired: Desired,
    observed: Observed,
    prev: Mapping[str, int],
    keys: Collection[str],
    out: dict[str, int],
    taken: set[int],
    ranges: IdRanges,
    metric: int,
) -> None:
    """Ids for the desired groups ``keys`` into ``out`` (which holds the ids already given):
    keep valid previous ids; only keys without one need the (O(routes)) votes."""
    used: set[int] = set(out.values())
    missing: list[str] = []
    for key in sorted(keys):
        spec = desired.groups[key]
        i = prev.get(key)
        if i is not None and i not in observed.foreign_ids and i not in used:
            kg = observed.groups.get(i)
            if kg is None or compatible(kg, spec.resilient):
                out[key] = i
                used.add(i)
                continue
        missing.append(key)
    pending: list[str] = []
    if missing:
        votes = _route_votes(desired, observed, set(missing), metric)
        for key in missing:
            spec = desired.groups[key]
            for j, _n in votes.get(key, Counter()).most_common():
                if j not in used and compatible(observed.groups[j], spec.resilient):
                    out[key] = j
                    used.add(j)
                    break
            else:
                pending.append(key)
    taken.update(used)
    # a key without routes keeps its deterministic id across restarts: an unclaimed glbd
    # group found on the key's probe sequence is adopted rather than skipped
    for key in pending:
        spec = desired.groups[key]

        def reusable(i: int, spec: GroupSpec = spec) -> bool:
            kg = observed.groups.get(i)
            return kg is not None and i not in used and compatible(kg, spec.resilient)

        gid = _probe(ranges.group_base, ranges.size, key, taken, reusable)
        out[key] = gid
        used.add(gid)
        taken.add(gid)


def _route_votes(
    desired: Desired, observed: Observed, keys: set[str], metric: int
) -> dict[str, Counter[int]]:
    """key -> Counter(group id its desired prefixes point at in the kernel). A standby key
    counts the routes at the standby metric; a primary key the prefix's others (any metric:
    a changed metric still finds its groups)."""
    by_prefix: dict[IPNetwork, list[tuple[int, int]]] = {}  # prefix -> [(metric, nhid)]
    for (pfx, m), kr in observed.routes.items():
        if kr.nhid is not None and kr.nhid in observed.groups:
            by_prefix.setdefault(pfx, []).append((m, kr.nhid))
    votes: dict[str, Counter[int]] = {}
    standby = desired.standby
    for prefix, key in desired.routes.items():
        if key in keys:
            skip = standby_metric(prefix, metric) if prefix in standby else None
            for m, nhid in by_prefix.get(prefix, ()):
                if m != skip:
                    votes.setdefault(key, Counter())[nhid] += 1
    for prefix, key in standby.items():
        if key in keys:
            sm = standby_metric(prefix, metric)
            for m, nhid in by_prefix.get(prefix, ()):
                if m == sm:
                    votes.setdefault(key, Counter())[nhid] += 1
    return votes


# --- planner -------------------------------------------------------------------------------


def plan(
    desired: Desired,
    observed: Observed,
    ids: IdMap,
    p: PlanParams,
    *,
    routes: bool = True,
    only: Iterable[IPNetwork] | None = None,
    groups: Collection[str] | None = None,
    known: Mapping[str, int] | None = None,
    dying: Collection[int] = (),
) -> Plan:
    """``routes=False`` plans members and groups only (O(members)): for a weight change when
    the route set and the set of groups that can exist are unchanged. ``only`` limits the
    route part to these prefixes (O(delta): a BGP update adding/removing a few prefixes).

    ``groups`` plans those groups alone (O(their members), not O(every member of the table)):
    an incremental step. ``realizable`` is then ``known`` (the last plan's) with those groups'
    outcome in it, only the routes in ``only`` are planned (none without it), and only the
    groups in ``dying`` (ids of groups no longer desired) are deleted; a member the step left
    unused goes at the next full plan. Routes are planned at both metrics: the primary one
    (``desired.routes``) and the standby one (``desired.standby``)."""
    ops: list[Op] = []
    notes: dict[str, str] = {}
    if groups is not None:
        part, _needed = _plan_groups(desired, observed, ids, p, ops, notes, keys=groups)
        have = desired.groups
        merged = {k: v for k, v in (known or {}).items() if k not in groups and k in have}
        merged.update(part)
        wanted = set(merged.values())
        gone = {g for g in dying if g in observed.groups and g not in wanted}
        if routes and only is not None:
            _plan_routes(desired, observed, p, merged, gone, ops, notes, only=only)
        ops.extend(GroupDel(g) for g in sorted(gone))
        ops.sort(key=lambda o: _ORDER[type(o)])
        return Plan(tuple(ops), notes, merged)
    realizable, needed_members = _plan_groups(desired, observed, ids, p, ops, notes)
    wanted_gids = set(realizable.values())
    mapped = set(ids.groups.values())
    dying_groups = {
        gid
        for gid in observed.groups
        if gid not in wanted_gids
        and (gid in mapped or (p.allow_delete and gid not in p.keep_groups))
    }
    if routes:
        _plan_routes(desired, observed, p, realizable, dying_groups, ops, notes, only=only)
    _plan_deletions(observed, p, dying_groups, wanted_gids, needed_members, ops)
    ops.sort(key=lambda o: _ORDER[type(o)])
    return Plan(tuple(ops), notes, realizable)


def _plan_groups(
    desired: Desired,
    observed: Observed,
    ids: IdMap,
    p: PlanParams,
    ops: list[Op],
    notes: dict[str, str],
    *,
    keys: Collection[str] | None = None,
) -> tuple[dict[str, int], dict[int, Member]]:
    """Groups whose programmed weights differ from the kernel's, and the members they need
    (every group, or those of ``keys`` that are desired). Returns the groups that can exist
    (key -> id) and the needed members (id -> member)."""
    realizable: dict[str, int] = {}
    needed_members: dict[int, Member] = {}
    for key in sorted(desired.groups if keys is None else keys):
        spec = desired.groups.get(key)
        if spec is None:
            continue
        gid = ids.groups[key]
        weights = programmed_weights(spec, observed, p)
        if not weights:
            notes[key] = "no_usable_member"
            continue
        mids = ids.members
        ent: list[tuple[int, int]] = []
        for m, w in weights.items():  # one lookup of each member (hashing one is a call)
            i = mids[m]
            ent.append((i, w))
            needed_members[i] = m
        ent.sort()
        entries = tuple(ent)
        realizable[key] = gid
        kg = observed.groups.get(gid)
        if kg is None:
            ops.append(GroupSet(gid, key, entries, spec.resilient, create=True))
        elif kg.entries != entries or (
            spec.resilient is not None
            and kg.resilient is not None
            and (kg.resilient.idle_timer_ct, kg.resilient.unbalanced_timer_ct)
            != (spec.resilient.idle_timer_ct, spec.resilient.unbalanced_timer_ct)
        ):
            res = spec.resilient
            if (
                res is not None
                and res.migrate_share > 0
                and res.idle_timer_ct > 0
                and kg.resilient is not None
                and share_fell(kg.entries, entries, res.migrate_share)
            ):
                # an idle timer of 0 makes every bucket idle for this replace: the kernel
                # moves the excess ones now (only those), and the replace after it restores
                # the timer, so later changes wait for idle buckets again
                ops.append(GroupSet(gid, key, entries, migrating(res), create=False))
            ops.append(GroupSet(gid, key, entries, res, create=False))
    for mid, m in sorted(needed_members.items()):
        link = observed.links[m.ifname]
        nh = observed.nexthops.get(mid)
        if nh is None or (nh.gateway, nh.ifindex, nh.onlink) != (m.gateway, link.index, m.onlink):
            ops.append(NhSet(mid, m, link.index, replace=nh is not None))
    return realizable, needed_members


#: ``wanted(prefix, key, standby=False)``: see :func:`_route_targets`
Wanted: TypeAlias = Callable[..., int | None]


def _route_targets(desired: Desired, realizable: dict[str, int], notes: dict[str, str]) -> Wanted:
    """``wanted(prefix, key, standby=False)`` for :func:`_plan_routes`: the nhid a desired
    route of group ``key`` should point at, or None (its note written, under
    :func:`standby_note` for a standby route). Remembers which groups have an IPv4 member,
    a question each IPv6 route asks."""
    v4_keys: dict[str, bool] = {}  # group key -> has an IPv4 member (asked for IPv6 routes)

    def has_v4(key: str) -> bool:
        have = v4_keys.get(key)
        if have is None:
            ws = desired.groups[key].weights
            have = v4_keys[key] = any(m.gateway.version == 4 for m in ws)
        return have

    def wanted(prefix: IPNetwork, key: str | None, standby: bool = False) -> int | None:
        """The nhid a desired route should point at, or None (note written)."""
        if key is None:
            return None
        if key not in desired.groups:
            notes[standby_note(prefix) if standby else str(prefix)] = "unknown_group"
            return None
        target = realizable.get(key)
        if target is None:
            notes.setdefault(standby_note(prefix) if standby else str(prefix), "group_down")
            return None
        if prefix.version == 6 and has_v4(key):
            note = standby_note(prefix) if standby else str(prefix)
            notes[note] = "ipv6_route_needs_ipv6_members"
            return None
        return target

    return wanted


def _plan_routes(
    desired: Desired,
    observed: Observed,
    p: PlanParams,
    realizable: dict[str, int],
    dying_groups: set[int],
    ops: list[Op],
    notes: dict[str, str],
    *,
    only: Iterable[IPNetwork] | None,
) -> None:
    """Routes to set and delete, at the primary and the standby metric: all of them, or only
    the prefixes in ``only``."""
    wanted = _route_targets(desired, realizable, notes)
    m4, m6 = route_metric(_V4_ANY, p.metric), route_metric(_V6_ANY, p.metric)
    s4, s6 = m4 + STANDBY_METRIC_OFFSET, m6 + STANDBY_METRIC_OFFSET
    if only is not None:
        kroutes = observed.routes
        # each named prefix's two routes: the primary and the standby one
        kinds = ((desired.routes, m4, m6, False), (desired.standby, s4, s6, True))
        for prefix in only:
            for routes, v4_metric, v6_metric, sb in kinds:
                metric = v4_metric if prefix.version == 4 else v6_metric
                target = wanted(prefix, routes.get(prefix), sb)
                rk = (prefix, metric)
                kr = kroutes.get(rk)
                if target is not None:
                    if rk in observed.foreign_routes:
                        notes[standby_note(prefix) if sb else str(prefix)] = "foreign_route"
                    elif kr is None or kr.nhid != target:
                        ops.append(RouteSet(prefix, metric, target, replace=kr is not None))
                elif kr is not None and kr.nhid not in dying_groups:
                    ops.append(RouteDel(prefix, metric))
        return
    _plan_sets(desired.routes, observed, wanted, ops, notes, (m4, m6), standby=False)
    if desired.standby:
        _plan_sets(desired.standby, observed, wanted, ops, notes, (s4, s6), standby=True)
    _plan_route_deletes(desired, observed, p, wanted, dying_groups, ops, (m4, m6, s4, s6))


def _plan_sets(
    routes: Mapping[IPNetwork, str],
    observed: Observed,
    wanted: Wanted,
    ops: list[Op],
    notes: dict[str, str],
    metrics: tuple[int, int],
    *,
    standby: bool,
) -> None:
    """Route creates and re-points of ``routes`` at ``metrics`` (IPv4, IPv6)."""
    # (hot loop: 100k routes; few hashes of IPNetwork keys per route)
    foreign = observed.foreign_routes
    kroutes = observed.routes
    m4, m6 = metrics
    for prefix, key in routes.items():
        target = wanted(prefix, key, standby)
        if target is None:
            continue
        rk = (prefix, m4 if prefix.version == 4 else m6)
        if foreign and rk in foreign:
            notes[standby_note(prefix) if standby else str(prefix)] = "foreign_route"
            continue
        kr = kroutes.get(rk)
        if kr is None or kr.nhid != target:
            ops.append(RouteSet(prefix, rk[1], target, replace=kr is not None))


def _plan_route_deletes(
    desired: Desired,
    observed: Observed,
    p: PlanParams,
    wanted: Wanted,
    dying_groups: set[int],
    ops: list[Op],
    metrics: tuple[int, int, int, int],
) -> None:
    """Deletes of glbd's routes that no desired route (primary or standby, at its metric)
    keeps. A route of a group being deleted goes with it; with deleting not allowed (the
    stale hold) only routes of desired prefixes at another metric or group go."""
    m4, m6, s4, s6 = metrics
    standby = desired.standby
    for rk, kr in observed.routes.items():
        prefix, metric = rk
        desired_key = desired.routes.get(prefix)
        if metric == (m4 if prefix.version == 4 else m6):
            if desired_key is not None and wanted(prefix, desired_key) is not None:
                continue
        elif standby and metric == (s4 if prefix.version == 4 else s6):
            sb_key = standby.get(prefix)
            if sb_key is not None and wanted(prefix, sb_key, True) is not None:
                continue
        if kr.nhid in dying_groups:
            continue  # deleting the group takes the route with it
        if desired_key is None and standby:
            desired_key = standby.get(prefix)
        if (p.allow_delete and rk not in p.keep_routes) or (
            desired_key is not None and desired_key in desired.groups
        ):
            ops.append(RouteDel(prefix, metric))


def _plan_deletions(
    observed: Observed,
    p: PlanParams,
    dying_groups: set[int],
    wanted_gids: set[int],
    needed_members: dict[int, Member],
    ops: list[Op],
) -> None:
    """Groups nothing wants any more and, when deleting is allowed, unneeded members."""
    for gid in sorted(dying_groups):
        ops.append(GroupDel(gid))
    if p.allow_delete:
        # members of groups that stay (held stale groups) stay with them
        kept = {
            mid
            for gid, kg in observed.groups.items()
            if gid not in dying_groups and gid not in wanted_gids
            for mid, _w in kg.entries
        }
        for nid in sorted(observed.nexthops):
            if nid not in needed_members and nid not in p.keep_nexthops and nid not in kept:
                ops.append(NhDel(nid))
