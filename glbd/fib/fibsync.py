"""When and how the FIB follows the path table: the decision, without the clock or the kernel.

The app feeds it path-table :class:`~glbd.quality.pathchanges.Changes` (``add``), tells it when BGP
first came up (``bgp_up(now)``) and asks for a sync (``request(now)``); while one runs, further
changes only mark it dirty and one more sync follows. ``plan(table, resilient)`` turns what
accumulated into one :class:`Step` for the FIB programmer; the app runs it and reports back
(``done(step)`` / ``failed()``).

* Hold-down: until BGP has been up for ``hold_s``, adopted kernel state is left alone (a
  restarted glbd must not withdraw routes it has not re-learned yet). ``next_deadline()`` is the
  end of the hold; ``on_timer(now)`` then asks for the first sync. A start that adopted nothing
  (``adopted(0)``) has nothing to protect and no hold: the routes glbd advertises are in its
  FIB as they are learned, not a hold later (peers forward to it from the first UPDATE).
* The first sync, one after an error and one after a FIB config change are a full ``apply``.
* Weight-only changes: one group replace per changed profile (``set_weights``).
* New/removed profiles and prefix moves: one incremental ``update`` (``incremental_profiles``,
  the default), or a full apply with it off; see ``docs/fib.md``.
* Pinned prefixes (``pin``: fabric colours) take their group from the pins, not from their
  profile, and may have a standby route. A pinned group's new weights are one group replace; a
  change of which prefixes are pinned, or of their groups, is a full apply, and so is any prefix
  move while some prefix is pinned (pins change on failures, not per UPDATE).
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from glbd.base.prefix import network_of
from glbd.fib.fibmodel import Desired, GroupSpec, Member, Resilient
from glbd.quality.pathchanges import Changes
from glbd.quality.pathtable import PathTable

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class ChangeSet:
    """Path-table changes accumulated between two FIB syncs, merged in place: a burst of
    10k prefix moves costs 10k set inserts, where merging frozen ``Changes`` copies the
    growing set each time."""

    def __init__(self) -> None:
        self.updated: set[str] = set()
        self.removed: set[str] = set()
        self.prefixes: set[str] = set()

    def add(self, ch: Changes) -> None:
        # the algebra of Changes.__or__: a later removal cancels an update and vice versa
        self.updated |= ch.updated
        self.updated -= ch.removed
        self.removed |= ch.removed
        self.removed -= ch.updated
        self.prefixes |= ch.prefixes

    def clear(self) -> None:
        self.updated, self.removed, self.prefixes = set(), set(), set()

    def peek(self) -> Changes:
        return Changes(frozenset(self.updated), frozenset(self.removed), frozenset(self.prefixes))

    def take(self) -> Changes:
        ch = self.peek()
        self.clear()
        return ch


@dataclass(frozen=True)
class Step:
    """One FIB sync, for the app to run against the FIB programmer.

    ``kind``: ``apply`` (``desired``), ``set_weights`` (``groups``: one replace each),
    ``update`` (``groups``, ``remove_groups``, ``add``, ``remove``) or ``none`` (the
    incremental path found it needs a full sync: nothing to send, a full step follows)."""

    mode: Literal["full", "incremental"]
    kind: Literal["apply", "set_weights", "update", "none"]
    desired: Desired | None = None
    groups: dict[str, GroupSpec] = field(default_factory=dict)
    remove_groups: frozenset[str] = frozenset()
    add: dict[Network, str] = field(default_factory=dict)
    remove: list[Network] = field(default_factory=list)
    keys: frozenset[str] | None = None  # the FIB's profile keys once this step succeeded


class FibSync:
    def __init__(self, hold_s: float, *, incremental_profiles: bool = True) -> None:
        self.hold_s = hold_s
        #: new/removed profiles as one incremental ``update`` (True) or a full apply (False)
        self.incremental_profiles = incremental_profiles
        self.dirty = False
        self.full = True  # the first sync, and after errors or config changes
        self._ready_at: float | None = None  # when BGP first came up
        self._released = False  # the hold-down's end was delivered (on_timer)
        self._protect = True  # adopted kernel state to hold for (until told otherwise)
        self._keys: set[str] = set()  # profile keys the FIB has groups for
        # profile keys the last full sync left out (no member it could program), routes too
        self._left_out: set[str] = set()
        self._changes = ChangeSet()
        #: profile key -> (its next hops, their members): see _group_spec
        self._rows: dict[str, tuple[object, list[Member | None]]] = {}
        self._pin_groups: dict[str, GroupSpec] = {}
        self._pin_routes: dict[Network, str] = {}
        self._pin_standby: dict[Network, str] = {}
        self._pin_weights: dict[str, GroupSpec] = {}  # pinned groups to replace next

    def pin(
        self,
        groups: Mapping[str, GroupSpec],
        routes: Mapping[Network, str],
        standby: Mapping[Network, str],
        now: float,
    ) -> bool:
        """The pinned prefixes, their groups and standby routes, as a whole (True: run
        ``plan``). Only new weights of the same groups make a ``set_weights`` step."""
        if (
            routes == self._pin_routes
            and standby == self._pin_standby
            and groups.keys() == self._pin_groups.keys()
        ):
            changed = {k: g for k, g in groups.items() if self._pin_groups[k] != g}
            if not changed:
                return False
            self._pin_weights.update(changed)
        else:
            self.full = True
        self._pin_groups, self._pin_routes = dict(groups), dict(routes)
        self._pin_standby = dict(standby)
        return self.request(now)

    def pinned(self) -> int:
        """How many prefixes are pinned."""
        return len(self._pin_routes)

    # ---- inputs -----------------------------------------------------------------------------

    def add(self, changes: Changes) -> None:
        """Path-table changes the next sync has to bring over."""
        if changes:
            self._changes.add(changes)
            for key in changes.removed:
                self._rows.pop(key, None)

    def pending(self) -> Changes:
        """What the next sync would bring over (a copy)."""
        return self._changes.peek()

    def bgp_up(self, now: float) -> None:
        """A BGP session came up; the first one starts the hold-down."""
        if self._ready_at is None:
            self._ready_at = now

    def adopted(self, count: int) -> None:
        """The FIB started with ``count`` adopted objects; with none there is no hold-down."""
        self._protect = count > 0

    def held(self, now: float) -> bool:
        if not self._protect:
            return False
        return self._ready_at is None or now - self._ready_at < self.hold_s

    def request(self, now: float) -> bool:
        """A sync is wanted. True: the app runs ``plan`` (now, or after the one running)."""
        if self.held(now):
            # the first sync is a full apply, so pending changes are not needed: drop them
            if self.full:
                self._changes.clear()
            return False
        self.dirty = True
        return True

    def request_full(self, now: float) -> bool:
        """The FIB config changed: the next sync is a full apply."""
        self.full = True
        return self.request(now)

    def next_deadline(self) -> float | None:
        if self._ready_at is None or self._released or not self._protect:
            return None
        return self._ready_at + self.hold_s

    def on_timer(self, now: float) -> bool:
        """The hold-down's end: the first sync (True: run ``plan``)."""
        deadline = self.next_deadline()
        if deadline is None or now < deadline:
            return False
        self._released = True
        return self.request(now)

    # ---- planning -------------------------------------------------------------------------

    def plan(self, table: PathTable, resilient: Resilient | None) -> Step | None:
        """The next step, or None when nothing is dirty."""
        if not self.dirty:
            return None
        self.dirty = False
        if self._pin_weights and not self.full:
            specs = {k: g for k, g in self._pin_weights.items() if k in self._keys}
            self._pin_weights.clear()
            self.dirty = bool(self._changes.peek())
            if specs:
                return Step("incremental", "set_weights", groups=specs)
        self._pin_weights.clear()
        ch = self._changes.take()
        if self._pin_routes and (ch.prefixes or ch.removed):
            self.full = True
        if self.full or (
            not self.incremental_profiles
            and (ch.removed or any(k not in self._keys for k in ch.updated))
        ):
            desired = self.desired(table, resilient)
            self._left_out = set(table.profiles()) - desired.groups.keys()
            return Step("full", "apply", desired=desired, keys=frozenset(desired.groups))
        return self._incremental(table, resilient, ch)

    def _incremental(self, table: PathTable, res: Resilient | None, ch: Changes) -> Step:
        specs: dict[str, GroupSpec] = {}
        self._left_out -= ch.removed
        for key in sorted(ch.updated):
            spec = _group_spec(table, key, res, self._rows)
            # nothing usable left, or usable again after a full sync left the profile out
            # together with its routes (those prefixes did not move, so ch.prefixes does not
            # name them): let the full path decide
            if spec is None or key in self._left_out:
                self.full = True
                self.dirty = True
                return Step("incremental", "none")
            specs[key] = spec
        if not ch.prefixes and not ch.removed and all(k in self._keys for k in specs):
            return Step("incremental", "set_weights", groups=specs)  # no route touched
        existing = {k: spec for k, spec in specs.items() if k in self._keys}
        if existing:
            # the new weights of groups the kernel has go first, in a step of their own: a
            # structural step (new groups, route moves) takes several netlink round trips
            rest = Changes(frozenset(specs.keys() - existing.keys()), ch.removed, ch.prefixes)
            self._changes.add(rest)
            self.dirty = True
            return Step("incremental", "set_weights", groups=existing)
        keys = (self._keys | specs.keys()) - ch.removed
        add: dict[Network, str] = {}
        remove: list[Network] = []
        for p in ch.prefixes:
            pkey = table.profile_of(p)
            if pkey is not None and pkey in keys:
                add[network_of(p)] = pkey
            else:
                remove.append(network_of(p))
        return Step(
            "incremental",
            "update",
            groups=specs,
            remove_groups=frozenset(ch.removed & self._keys),
            add=add,
            remove=remove,
            keys=frozenset(keys),
        )

    def fast_weights(
        self, table: PathTable, changes: Changes, resilient: Resilient | None, now: float
    ) -> dict[str, GroupSpec] | None:
        """The fast lane: the new weights of ``changes`` when they are weights only, of
        groups the FIB has, to write at once instead of queueing behind the step in flight
        (the app hands them to the FIB programmer and ``add``s back what it did not take).
        None when the next step must carry them: the hold-down, a full sync due, a profile
        new, removed, left out or with nothing usable, or a prefix that moved."""
        if (
            self.held(now)
            or self.full
            or changes.removed
            or changes.prefixes
            or not changes.updated
            or any(k not in self._keys or k in self._left_out for k in changes.updated)
        ):
            return None
        specs: dict[str, GroupSpec] = {}
        for key in changes.updated:
            spec = _group_spec(table, key, resilient, self._rows)
            if spec is None:
                return None
            specs[key] = spec
        return specs

    def done(self, step: Step) -> None:
        """The FIB took ``step``."""
        if step.keys is not None:
            self._keys = set(step.keys)
        if step.kind == "apply":
            self.full = False

    def failed(self) -> None:
        """The kernel said no: redo it fully next time."""
        self.full = True

    def desired(self, table: PathTable, resilient: Resilient | None) -> Desired:
        """What a full sync programs: every profile with a member the FIB can program, and the
        routes of those profiles."""
        groups = {}
        for key in table.profiles():
            spec = _group_spec(table, key, resilient, self._rows)
            if spec is not None:
                groups[key] = spec
        prefixes = table.prefixes()
        # each table prefix parsed once (``ip_network`` dominated a full sync of 10k routes)
        routes: dict[Network, str] = {network_of(p): k for p, k in prefixes.items() if k in groups}
        if not self._pin_routes and not self._pin_standby:
            return Desired(groups=groups, routes=routes)
        groups.update(self._pin_groups)
        for net, key in self._pin_routes.items():
            if net in routes:
                routes[net] = key
        standby = {n: k for n, k in self._pin_standby.items() if n in routes}
        return Desired(groups=groups, routes=routes, standby=standby)


@functools.lru_cache(maxsize=1 << 14)
def _member(address: str, ifname: str) -> Member:
    """The member of a next hop, kept: a full sync builds every group's members, and parsing
    each member's address was most of it."""
    return Member(ipaddress.ip_address(address), ifname)


ROWS_CACHE_SIZE = 1 << 16


def _group_spec(
    table: PathTable,
    key: str,
    res: Resilient | None,
    rows: dict[str, tuple[object, list[Member | None]]],
) -> GroupSpec | None:
    """The group of profile ``key``: its next hops with a weight above 0, as members. A
    profile's next hops never change, so their members are looked up once per profile and
    kept in ``rows`` (a weight change then maps values onto them; bounded by the profiles)."""
    got = table.weight_values(key)
    if got is None:
        return None
    items, vals = got
    hit = rows.get(key)
    if hit is not None and hit[0] is items:
        members = hit[1]
    else:
        if len(rows) >= ROWS_CACHE_SIZE:
            rows.clear()  # a bound; removed profiles leave at ``add``
        members = [_member(nh.address, nh.ifname) if nh.ifname else None for nh, _ in items]
        rows[key] = (items, members)
    weights: dict[Member, int] = {
        m: v for m, v in zip(members, vals, strict=True) if v > 0 and m is not None
    }
    return GroupSpec(weights=weights, resilient=res) if weights else None
