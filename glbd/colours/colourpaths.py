"""A leaf's coloured prefixes on their colour's paths (pure; docs/colours.md, "The leaf's
forwarding per colour"): what the FIB pins for them.

The app hands it, with ``now``:

* per prefix (:meth:`ColourPaths.on_prefix`): its primary colour (from the RIB: the visible copy
  marked with AIGP; None: the prefix is not coloured here), its next hops with the colour of the
  session each was learned on, and the weights of its path-table profile;
* per profile whose weights changed (:meth:`ColourPaths.on_weights`);
* BFD state per next hop (:meth:`ColourPaths.on_bfd`);
* the timer (:meth:`ColourPaths.on_timer` when :meth:`ColourPaths.next_deadline` is due).

A *path* is a colour and a destination: the remote leaves most of the prefix's next hops name
in their NNHN (stable while one spine loses the destination), else the AS that originated the
prefix (a fabric without NNHN: each leaf has its own AS), else the prefix's profile. A next
hop learned on a session of colour C is one of colour C's preferred next hops from then on (a
withdraw is then ``bgp_withdrawn``, and its return waits for the hold-down) until it is seen
with another session colour (a reload recoloured the session: the RIB reports its routes again).

The weights give the remote and link reasons: a next hop whose local link is down is
``link_down``, one whose spine reports its link toward the destination down is
``heartbeat_link_down``, and a weight of 0 otherwise ``quality_zero``. A next hop whose NNHN
names none of the destination's nodes is ``nnhn_lost`` (one without NNHN says nothing: a spine
that does not send NNHN has not lost the destination).

Output (:meth:`ColourPaths.pins`): one group per path (its active next hops) and one standby
group (its backups), the prefixes routed through the first and pre-armed through the second.
Every ``on_*`` returns whether the pins changed.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from glbd.colours.colours import (
    ColourForwarding,
    ColourReason,
    ColourState,
    Effect,
    LocalSignal,
    Members,
    PathGone,
    PathRow,
    Program,
    RemoteSignal,
    Remove,
    SetPreferred,
    Weights,
)

__all__ = ["ColourPaths", "Hop", "HopWeight", "Pins", "group_key", "hop_label"]


def hop_label(address: str, ifname: str | None) -> str:
    """How a next hop is named in the colour paths (and ``glbctl colours``)."""
    return f"{address}%{ifname}" if ifname else address


@dataclass(frozen=True, slots=True)
class Hop:
    """One forwarding next hop of a prefix, as the RIB has it."""

    label: str
    #: the colour of the session it was learned on (None: uncoloured)
    session_colour: int | None
    #: the remote nodes its NNHN names (None: no NNHN)
    nnh: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class HopWeight:
    """One next hop's GLB weight in a profile, and what made it."""

    value: int
    local_down: bool = False
    remote_down: bool = False


@dataclass(frozen=True, slots=True)
class Pins:
    """What the FIB programs for coloured prefixes: group key -> weights by hop label, and
    prefix -> group key for the routes and for the standby routes."""

    groups: Mapping[str, Weights]
    routes: Mapping[str, str]
    standby: Mapping[str, str]


def group_key(colour: int, dest: str, standby: bool = False) -> str:
    return f"colour/{colour}/{dest}" + ("/standby" if standby else "")


_UNSEEN = object()
_REMOTE = (ColourReason.HEARTBEAT_LINK_DOWN, ColourReason.QUALITY_ZERO, ColourReason.NNHN_LOST)


class ColourPaths:
    """The coloured prefixes, their paths and the :class:`ColourForwarding` that decides them."""

    def __init__(self, hold_down_s: float) -> None:
        self.fwd = ColourForwarding(hold_down_s)
        self._preferred: dict[int, set[str]] = {}
        self._hop_colour: dict[str, int | None] = {}  # hop label -> its session's colour
        self._prefix: dict[str, tuple[int, str]] = {}  # prefix -> path
        self._members: dict[tuple[int, str], set[str]] = {}  # path -> its prefixes
        self._profile: dict[tuple[int, str], str] = {}  # path -> the profile its weights follow
        #: path -> its next hops' NNHN nodes (None: no NNHN), from its latest prefix
        self._nnh: dict[tuple[int, str], dict[str, frozenset[int] | None]] = {}
        self._weights: dict[str, Mapping[str, HopWeight]] = {}  # profile -> weights
        self._remote: dict[tuple[str, str], frozenset[ColourReason]] = {}  # (hop, dest) ->
        self._bfd_down: set[str] = set()
        self._link_down: set[str] = set()
        self._programs: dict[tuple[int, str], Program] = {}
        #: path -> its last change of state: when, from, to, and why (the reasons of the
        #: state it left for a return, of the state it entered otherwise)
        self.last_switch: dict[tuple[int, str], dict[str, Any]] = {}
        self.counters = {"fallbacks": 0, "returns": 0, "program_writes": 0}

    # -- inputs -------------------------------------------------------------------------------

    def on_prefix(
        self,
        prefix: str,
        colour: int | None,
        hops: Iterable[Hop],
        profile: str | None,
        weights: Mapping[str, HopWeight],
        now: float,
        origin_as: int | None = None,
    ) -> bool:
        """A prefix's primary colour or next hops changed (``colour`` None or no hops: it is
        not coloured here any more). Only the primary copy carries the colour's mark, so when
        it left with its spine's routes (a session down: none of the colour's next hops is
        left) the prefix keeps its colour, ``bgp_withdrawn``, and its return waits for the
        hold-down."""
        hops = list(hops)
        out: list[Effect] = []
        for h in hops:
            out += self._learn(h, now)
        old = self._prefix.pop(prefix, None)
        new: tuple[int, str] | None = None
        if colour is not None and hops and profile is not None:
            new = (colour, _dest(hops, origin_as, profile))
        elif colour is None and old is not None and hops and profile is not None:
            pref = self._preferred.get(old[0], set())
            if not any(h.label in pref for h in hops):
                new = old  # the marked copy left with its spine's routes: the path stays
        if new is not None and profile is not None:
            self._weights[profile] = dict(weights)
        if old is not None and old != new:
            left = self._members[old]
            left.discard(prefix)
            if not left:
                del self._members[old]
                self._profile.pop(old, None)
                self._nnh.pop(old, None)
                out += self.fwd.on_event(PathGone(*old), now)
        if new is not None:
            self._prefix[prefix] = new
            self._members.setdefault(new, set()).add(prefix)
            self._profile[new] = profile or ""
            self._nnh[new] = {h.label: None if h.nnh is None else frozenset(h.nnh) for h in hops}
            out += self._feed(new, now)
        self._forget_profiles()
        return self._take(out, now) or (old != new)

    def on_weights(self, profile: str, weights: Mapping[str, HopWeight], now: float) -> bool:
        """A profile's weights changed."""
        if profile not in self._weights:
            return False
        self._weights[profile] = dict(weights)
        out: list[Effect] = []
        for path, prof in sorted(self._profile.items()):
            if prof == profile:
                out += self._feed(path, now)
        return self._take(out, now)

    def on_bfd(self, label: str, down: bool, now: float) -> bool:
        """BFD declared the next hop's peer down (or up again)."""
        if down == (label in self._bfd_down):
            return self._take(self.fwd.on_timer(now), now)
        (self._bfd_down.add if down else self._bfd_down.discard)(label)
        signal = LocalSignal(label, ColourReason.BFD_DOWN, down)
        return self._take(self.fwd.on_event(signal, now), now)

    def on_timer(self, now: float) -> bool:
        return self._take(self.fwd.on_timer(now), now)

    def next_deadline(self) -> float | None:
        return self.fwd.next_deadline()

    # -- views --------------------------------------------------------------------------------

    def pins(self) -> Pins:
        groups: dict[str, Weights] = {}
        routes: dict[str, str] = {}
        standby: dict[str, str] = {}
        for path, prog in self._programs.items():
            prefixes = self._members.get(path, ())
            if prog.active:
                groups[group_key(*path)] = prog.active
                for p in prefixes:
                    routes[p] = group_key(*path)
            if prog.standby:
                groups[group_key(*path, standby=True)] = prog.standby
                for p in prefixes:
                    standby[p] = group_key(*path, standby=True)
        return Pins(groups, routes, standby)

    def rows(self) -> list[PathRow]:
        return self.fwd.rows()

    def prefixes(self, colour: int, dest: str) -> list[str]:
        return sorted(self._members.get((colour, dest), ()))

    def __bool__(self) -> bool:
        """Whether any prefix is coloured here."""
        return bool(self._prefix)

    def path_of(self, prefix: str) -> tuple[int, str] | None:
        return self._prefix.get(prefix)

    # -- internals ----------------------------------------------------------------------------

    def _learn(self, h: Hop, now: float) -> list[Effect]:
        """The next hop's session colour: it joins that colour's preferred next hops (and
        leaves the one it had, when its session was recoloured by a reload)."""
        was = self._hop_colour.get(h.label, _UNSEEN)
        if was == h.session_colour:
            return []
        self._hop_colour[h.label] = h.session_colour
        touched = []
        if isinstance(was, int):
            self._preferred[was].discard(h.label)
            touched.append(was)
        if h.session_colour is not None:
            self._preferred.setdefault(h.session_colour, set()).add(h.label)
            touched.append(h.session_colour)
        out: list[Effect] = []
        for c in sorted(touched):
            out += self.fwd.on_event(SetPreferred(c, frozenset(self._preferred[c])), now)
        return out

    def _feed(self, path: tuple[int, str], now: float) -> list[Effect]:
        """The path's members and the remote and link reasons of its hops, from its profile's
        weights."""
        colour, dest = path
        weights = self._weights.get(self._profile[path], {})
        nnh = self._nnh.get(path, {})
        nodes = _dest_nodes(dest)
        out: list[Effect] = []
        for label, w in weights.items():
            out += self._link(label, w.local_down, now)
            hop_nnh = nnh.get(label)
            lost = bool(nodes) and hop_nnh is not None and not hop_nnh & nodes
            held = frozenset(_remote_reasons(w, lost))
            was = self._remote.get((label, dest), frozenset())
            for r in _REMOTE:
                if (r in held) != (r in was):
                    out += self.fwd.on_event(RemoteSignal(label, dest, r, r in held), now)
            if held:
                self._remote[(label, dest)] = held
            else:
                self._remote.pop((label, dest), None)
        out += self.fwd.on_event(
            Members(colour, dest, {label: w.value for label, w in weights.items()}), now
        )
        return out

    def _link(self, label: str, down: bool, now: float) -> list[Effect]:
        if down == (label in self._link_down):
            return []
        (self._link_down.add if down else self._link_down.discard)(label)
        return self.fwd.on_event(LocalSignal(label, ColourReason.LINK_DOWN, down), now)

    def _forget_profiles(self) -> None:
        used = set(self._profile.values())
        for prof in [p for p in self._weights if p not in used]:
            del self._weights[prof]

    def _take(self, effects: list[Effect], now: float) -> bool:
        changed = False
        for e in effects:
            path = (e.colour, e.dest)
            if isinstance(e, Remove):
                changed |= self._programs.pop(path, None) is not None
                self.last_switch.pop(path, None)
                continue
            last = self._programs.get(path)
            if last is not None and last.state != e.state:
                if e.state is ColourState.PRIMARY:
                    self.counters["returns"] += 1
                elif last.state is ColourState.PRIMARY:
                    self.counters["fallbacks"] += 1
                why = last.reasons if e.state is ColourState.PRIMARY else e.reasons
                self.last_switch[path] = {
                    "at": now,
                    "from": str(last.state),
                    "to": str(e.state),
                    "reasons": [str(r) for r in why],
                }
            self._programs[path] = e
            self.counters["program_writes"] += 1
            changed = True
        return changed


def _remote_reasons(w: HopWeight, nnhn_lost: bool) -> list[ColourReason]:
    out = []
    if w.remote_down:
        out.append(ColourReason.HEARTBEAT_LINK_DOWN)
    if nnhn_lost:
        out.append(ColourReason.NNHN_LOST)
    if w.value == 0 and not (w.local_down or w.remote_down or nnhn_lost):
        out.append(ColourReason.QUALITY_ZERO)
    return out


def _dest_nodes(dest: str) -> frozenset[int]:
    """The nodes an ``nnh:`` destination names (none for a profile's)."""
    if not dest.startswith("nnh:"):
        return frozenset()
    return frozenset(int(ipaddress.IPv4Address(n)) for n in dest[4:].split(","))


def _dest(hops: list[Hop], origin_as: int | None, profile: str) -> str:
    """The destination of a prefix: the remote nodes most of its next hops' NNHN name (so one
    spine that loses or changes its NNHN does not move the path), else the AS that originated
    it (a leaf's own AS in an RFC 7938 fabric), else its profile (a local prefix)."""
    sets = Counter(tuple(sorted(set(h.nnh))) for h in hops if h.nnh)
    if sets:
        nodes = min(sets, key=lambda k: (-sets[k], k))
        return "nnh:" + ",".join(_node(n) for n in nodes)
    if origin_as is not None:
        return f"as:{origin_as}"
    return f"profile:{profile}"


def _node(n: int) -> str:
    return str(ipaddress.IPv4Address(n))
