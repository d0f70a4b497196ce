"""Fabric colours (BGP-DPF) with GLB as the fallback (pure; docs/colours.md).

Two parts, no I/O and no clock (``now`` is passed in):

1. **The send/receive rules** (:func:`may_send`, :func:`hidden`, :func:`originate_to`). A route's
   colours are the values of its Color Extended Communities (:mod:`glbd.colours.colour`); a session
   has one colour or none.

   * sending: an uncoloured route goes to every session; a coloured route goes to the sessions
     of one of its colours and to the uncoloured sessions;
   * receiving: a coloured route on a session of another colour is kept but hidden
     (:class:`HiddenReason`); an uncoloured route is never hidden;
   * originating ``PREFIX colour C backup [B...]``: colour-C sessions get the route with C (the
     primary copy), colour-B sessions get it with B (a backup copy), uncoloured sessions get the
     primary copy, sessions of any other colour nothing.

   A route with several distinct colours belongs to each of those logical fabrics (the sources
   only describe one colour per route; glbd neither hides nor drops such a route).

2. **The leaf's forwarding per colour** (:class:`ColourForwarding`): a *path* is a colour and a
   destination (the remote leaf, or any name the wiring uses to group prefixes; one per colour
   gives one path per colour). Each path has its *preferred* next hops (the sessions of that
   colour: one spine, or parallel links to it) and *backups* (every other next hop carrying the
   destination, with their GLB weights). PRIMARY programs the usable preferred next hops alone;
   FALLBACK programs the backups with their GLB weights. A preferred next hop is bad while any
   :class:`ColourReason` holds for it; it is usable again only once it has stayed good for
   ``hold_down_s`` (a new failure restarts the wait). Every change of what a path programs is one
   :class:`Program` effect: one kernel write for the path's group, whatever its prefix count.

Choices where the sources are silent (docs/colours.md, "What the sources leave open"):

* no history, no hold-down: a preferred next hop that has never been usable (a new path, a
  startup, a config change) is usable as soon as it is good; only a *return* waits;
* the preferred spine back (BFD up) while the remote path is still bad (heartbeat down toward the
  destination) is still bad: the wait starts when every reason has cleared;
* backups are equals: with several backup colours the fallback spreads over every backup by GLB
  weight, not in an order; if every backup weight is 0, each gets 1 (GLB's never-all-zero);
* no backup at all: the preferred next hops stay programmed when only remote signals speak
  against them and the route is still there (``last_resort``: the only route BGP has); when they
  are locally down or withdrawn too, the path programs nothing (NO_PATH);
* a colour with no session of its colour has no preferred next hop: its traffic is spread by GLB
  (FALLBACK, ``no_preferred``).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from glbd.base.reasons import HiddenReason
from glbd.colours.colour import COLOUR_MAX, ColourCommunity

__all__ = [
    "Advert",
    "ColourForwarding",
    "ColourReason",
    "ColourState",
    "Effect",
    "Event",
    "HiddenReason",
    "LocalSignal",
    "Members",
    "Origination",
    "PathGone",
    "PathRow",
    "Program",
    "RemoteSignal",
    "Remove",
    "SetPreferred",
    "hidden",
    "may_send",
    "originate_to",
    "route_colours",
]

#: a next hop (a BGP session toward a spine), as the wiring names it (e.g. the peer address)
NextHop = str
#: what a path's prefixes have in common besides the colour (e.g. the remote leaf's router id)
Dest = str
#: the programmed members: (next hop, weight), sorted by next hop
Weights = tuple[tuple[NextHop, int], ...]


# -- 1. the send/receive rules ------------------------------------------------------------------


def route_colours(communities: Iterable[ColourCommunity]) -> frozenset[int]:
    """A route's colours (empty: uncoloured); the flags do not matter."""
    return frozenset(c.colour for c in communities)


def may_send(route: frozenset[int], session: int | None) -> bool:
    """May a route with these colours be advertised on a session of colour ``session`` (None:
    uncoloured)? A spine applies this to what it received: the colour passes through."""
    return not route or session is None or session in route


def hidden(route: frozenset[int], session: int | None) -> HiddenReason | None:
    """Is a route with these colours, received on a session of colour ``session``, hidden?"""
    if route and session is not None and session not in route:
        return HiddenReason.COLOUR_MISMATCH
    return None


def _check_colour(c: object, what: str) -> None:
    if type(c) is not int or not 1 <= c <= COLOUR_MAX:
        raise ValueError(f"{what} {c!r} is not a colour (an integer 1..{COLOUR_MAX})")


@dataclass(frozen=True, slots=True)
class Origination:
    """How a prefix this router originates is coloured: ``colour`` None is uncoloured (sent to
    every session, without a colour); ``backups`` are its backup colours, in no order."""

    colour: int | None = None
    backups: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.colour is None:
            if self.backups:
                raise ValueError("backup colours need a colour")
            return
        _check_colour(self.colour, "colour")
        for b in self.backups:
            _check_colour(b, "backup colour")
        if self.colour in self.backups:
            raise ValueError(f"colour {self.colour} is also one of its backup colours")
        if len(set(self.backups)) != len(self.backups):
            raise ValueError(f"backup colours {list(self.backups)} repeat a colour")


@dataclass(frozen=True, slots=True)
class Advert:
    """How an originated route goes to one session: with ``colour`` (None: uncoloured), and
    whether it is a backup copy (the wiring may make it less preferred, e.g. by AIGP)."""

    colour: int | None
    backup: bool = False


def originate_to(origin: Origination, session: int | None) -> Advert | None:
    """The copy of an originated route a session of colour ``session`` gets, or None (not sent)."""
    if origin.colour is None:
        return Advert(None)
    if session is None or session == origin.colour:
        return Advert(origin.colour)
    if session in origin.backups:
        return Advert(session, backup=True)
    return None


# -- 2. the leaf's forwarding per colour --------------------------------------------------------


class ColourReason(enum.StrEnum):
    """Why a preferred next hop is bad (the names for the glbctl view, logs and metric
    labels). Local ones are seen on this router (a link down can even be left to the kernel, by
    a pre-armed backup route); remote ones come from the spine (heartbeats, NNHN, BGP)."""

    #: local: BFD declared the session's peer down
    BFD_DOWN = "bfd_down"
    #: local: the fabric interface toward the spine is down
    LINK_DOWN = "link_down"
    #: remote: the spine's heartbeats report its link toward the destination down
    HEARTBEAT_LINK_DOWN = "heartbeat_link_down"
    #: remote: the path quality toward the destination through the spine is 0
    QUALITY_ZERO = "quality_zero"
    #: remote: the spine's NNHN for the destination no longer names it (the spine lost it)
    NNHN_LOST = "nnhn_lost"
    #: remote: the spine withdrew the destination's route (it is missing from the members)
    BGP_WITHDRAWN = "bgp_withdrawn"
    #: no session has the colour: there is no preferred next hop
    NO_PREFERRED = "no_preferred"

    @property
    def local(self) -> bool:
        return self in (ColourReason.BFD_DOWN, ColourReason.LINK_DOWN)


#: what only the machine itself infers (never signalled)
_DERIVED = frozenset({ColourReason.BGP_WITHDRAWN, ColourReason.NO_PREFERRED})


class ColourState(enum.StrEnum):
    """What a path programs."""

    #: its usable preferred next hops alone
    PRIMARY = "primary"
    #: the backups with their GLB weights (or, with ``last_resort``, the preferred ones)
    FALLBACK = "fallback"
    #: nothing usable at all: no member to program
    NO_PATH = "no_path"


@dataclass(frozen=True, slots=True)
class SetPreferred:
    """Config: the next hops whose session has ``colour`` (empty: none). A change applies at
    once, without a hold-down (an operator's decision, not a flap)."""

    colour: int
    next_hops: frozenset[NextHop]


@dataclass(frozen=True, slots=True)
class LocalSignal:
    """A local reason (``reason.local``) holding (``active``) or cleared for a next hop."""

    next_hop: NextHop
    reason: ColourReason
    active: bool

    def __post_init__(self) -> None:
        if not self.reason.local:
            raise ValueError(f"{self.reason} is not a local reason")


@dataclass(frozen=True, slots=True)
class RemoteSignal:
    """A remote reason holding or cleared for a next hop toward one destination."""

    next_hop: NextHop
    dest: Dest
    reason: ColourReason
    active: bool

    def __post_init__(self) -> None:
        if self.reason.local or self.reason in _DERIVED:
            raise ValueError(f"{self.reason} is not a remote signal")


@dataclass(frozen=True, slots=True)
class Members:
    """The next hops currently carrying a path's prefixes (visible routes only) with their GLB
    weights (>= 0). A preferred next hop missing here is ``bgp_withdrawn``; empty removes the
    path."""

    colour: int
    dest: Dest
    weights: Mapping[NextHop, int]


@dataclass(frozen=True, slots=True)
class PathGone:
    """The path's last prefix left."""

    colour: int
    dest: Dest


Event = SetPreferred | LocalSignal | RemoteSignal | Members | PathGone


@dataclass(frozen=True, slots=True)
class Program:
    """Program one path: its group holds ``active``; ``standby`` is what a pre-armed backup
    route (a higher metric, docs/colours.md) holds, the backups whatever the state."""

    colour: int
    dest: Dest
    state: ColourState
    active: Weights
    standby: Weights
    #: why the preferred next hops are not used (empty in PRIMARY)
    reasons: tuple[ColourReason, ...] = ()
    #: FALLBACK without any backup: the preferred next hops stay, the only route there is
    last_resort: bool = False


@dataclass(frozen=True, slots=True)
class Remove:
    """The path is gone: its group can go."""

    colour: int
    dest: Dest


Effect = Program | Remove


@dataclass(frozen=True, slots=True)
class PathRow:
    """One path, as a glbctl view of the colours would show it (not built yet)."""

    colour: int
    dest: Dest
    state: ColourState
    preferred: tuple[NextHop, ...]
    active: Weights
    standby: Weights
    reasons: tuple[ColourReason, ...]
    last_resort: bool
    state_since: float
    #: when a preferred next hop in its hold-down becomes usable (None: none waits)
    hold_until: float | None
    fallbacks: int
    hold_restarts: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "colour": self.colour,
            "dest": self.dest,
            "state": str(self.state),
            "preferred": list(self.preferred),
            "active": [[n, w] for n, w in self.active],
            "standby": [[n, w] for n, w in self.standby],
            "reasons": [str(r) for r in self.reasons],
            "last_resort": self.last_resort,
            "state_since": self.state_since,
            "hold_until": self.hold_until,
            "fallbacks": self.fallbacks,
            "hold_restarts": self.hold_restarts,
        }


@dataclass(slots=True)
class _Hop:
    """A preferred next hop of one path: from when it is usable (None: bad now), whether that
    time has been reached (``pending`` until then) and whether it ever was usable (only a return
    waits for the hold-down)."""

    usable_at: float | None = None
    pending: bool = False
    was_usable: bool = False


@dataclass(slots=True)
class _Path:
    colour: int
    dest: Dest
    weights: dict[NextHop, int]
    hops: dict[NextHop, _Hop] = field(default_factory=dict)
    state: ColourState = ColourState.NO_PATH
    state_since: float = 0.0
    last: Program | None = None
    fallbacks: int = 0
    hold_restarts: int = 0


def _spread(weights: Mapping[NextHop, int], hops: Iterable[NextHop]) -> Weights:
    """``hops`` with their weights, sorted; all 0 becomes all 1 (never program all zero)."""
    rows = sorted((h, max(0, weights.get(h, 0))) for h in hops)
    if rows and not any(w for _, w in rows):
        return tuple((h, 1) for h, _ in rows)
    return tuple((h, w) for h, w in rows if w)


class ColourForwarding:
    """The leaf's per-colour paths (module docstring, part 2), in virtual time:
    :meth:`on_event` and :meth:`on_timer` return the effects, :meth:`next_deadline` says when
    :meth:`on_timer` is due."""

    def __init__(
        self, hold_down_s: float, preferred: Mapping[int, Iterable[NextHop]] | None = None
    ) -> None:
        if not (math.isfinite(hold_down_s) and hold_down_s >= 0):
            raise ValueError(f"hold_down_s {hold_down_s!r} must be a finite number >= 0")
        self._hold = float(hold_down_s)
        self._preferred: dict[int, frozenset[NextHop]] = {}
        for colour, hops in (preferred or {}).items():
            _check_colour(colour, "colour")
            self._preferred[colour] = frozenset(hops)
        self._local: dict[NextHop, set[ColourReason]] = {}
        self._remote: dict[tuple[NextHop, Dest], set[ColourReason]] = {}
        self._paths: dict[tuple[int, Dest], _Path] = {}

    @property
    def hold_down_s(self) -> float:
        return self._hold

    def set_hold_down(self, hold_down_s: float) -> None:
        """A new hold-down for the waits that start from now on (running ones keep their end)."""
        if not (math.isfinite(hold_down_s) and hold_down_s >= 0):
            raise ValueError(f"hold_down_s {hold_down_s!r} must be a finite number >= 0")
        self._hold = float(hold_down_s)

    # -- inputs ---------------------------------------------------------------------------------

    def on_event(self, ev: Event, now: float) -> list[Effect]:
        """Apply one input; hold-downs due by ``now`` end first."""
        out = self.on_timer(now)
        touched: list[_Path]
        if isinstance(ev, SetPreferred):
            _check_colour(ev.colour, "colour")
            old = self._preferred.get(ev.colour, frozenset())
            if ev.next_hops:
                self._preferred[ev.colour] = frozenset(ev.next_hops)
            else:
                self._preferred.pop(ev.colour, None)
            touched = [p for p in self._paths.values() if p.colour == ev.colour]
            if old != ev.next_hops:
                for p in touched:
                    p.hops = {}  # a new preferred set has no history: no hold-down
        elif isinstance(ev, LocalSignal):
            self._flag(self._local, ev.next_hop, ev.reason, ev.active)
            touched = [p for p in self._paths.values() if ev.next_hop in self._pref(p)]
        elif isinstance(ev, RemoteSignal):
            self._flag(self._remote, (ev.next_hop, ev.dest), ev.reason, ev.active)
            touched = [
                p
                for p in self._paths.values()
                if p.dest == ev.dest and ev.next_hop in self._pref(p)
            ]
        elif isinstance(ev, Members):
            _check_colour(ev.colour, "colour")
            key = (ev.colour, ev.dest)
            if not ev.weights:
                return out + self._drop(key)
            path = self._paths.get(key)
            if path is None:
                path = self._paths[key] = _Path(ev.colour, ev.dest, {}, state_since=now)
            path.weights = {h: int(w) for h, w in ev.weights.items()}
            touched = [path]
        else:
            return out + self._drop((ev.colour, ev.dest))
        for p in sorted(touched, key=lambda p: (p.colour, p.dest)):
            out.extend(self._evaluate(p, now))
        return out

    def on_timer(self, now: float) -> list[Effect]:
        """End the hold-downs due by ``now``."""
        out: list[Effect] = []
        for key in sorted(self._paths):
            p = self._paths[key]
            if any(
                h.pending and h.usable_at is not None and h.usable_at <= now
                for h in p.hops.values()
            ):
                out.extend(self._evaluate(p, now))
        return out

    def next_deadline(self) -> float | None:
        """The earliest end of a hold-down still running (None: none)."""
        due = [
            h.usable_at
            for p in self._paths.values()
            for h in p.hops.values()
            if h.pending and h.usable_at is not None
        ]
        return min(due, default=None)

    # -- views ----------------------------------------------------------------------------------

    def rows(self) -> list[PathRow]:
        """Every path, sorted by colour and destination."""
        out = []
        for key in sorted(self._paths):
            p = self._paths[key]
            prog = p.last
            assert prog is not None  # every path is evaluated when it is made
            waits = [h.usable_at for h in p.hops.values() if h.pending and h.usable_at is not None]
            out.append(
                PathRow(
                    p.colour,
                    p.dest,
                    p.state,
                    tuple(sorted(self._pref(p))),
                    prog.active,
                    prog.standby,
                    self._reasons(p),
                    prog.last_resort,
                    p.state_since,
                    min(waits, default=None),
                    p.fallbacks,
                    p.hold_restarts,
                )
            )
        return out

    def reasons(self, colour: int, dest: Dest) -> tuple[ColourReason, ...]:
        """Why the path's preferred next hops are bad now (every reason of every one)."""
        p = self._paths.get((colour, dest))
        return () if p is None else self._reasons(p)

    # -- internals ------------------------------------------------------------------------------

    @staticmethod
    def _flag(
        table: dict[Any, set[ColourReason]], key: Any, reason: ColourReason, on: bool
    ) -> None:
        held = table.setdefault(key, set())
        if on:
            held.add(reason)
        else:
            held.discard(reason)
            if not held:
                del table[key]

    def _pref(self, p: _Path) -> frozenset[NextHop]:
        return self._preferred.get(p.colour, frozenset())

    def _hop_reasons(self, p: _Path, hop: NextHop) -> set[ColourReason]:
        r = set(self._local.get(hop, ())) | self._remote.get((hop, p.dest), set())
        if hop not in p.weights:
            r.add(ColourReason.BGP_WITHDRAWN)
        return r

    def _reasons(self, p: _Path) -> tuple[ColourReason, ...]:
        pref = self._pref(p)
        if not pref:
            return (ColourReason.NO_PREFERRED,)
        found: set[ColourReason] = set()
        for hop in pref:
            found |= self._hop_reasons(p, hop)
        return tuple(r for r in ColourReason if r in found)

    def _update_hops(self, p: _Path, now: float) -> list[NextHop]:
        """Each preferred hop's usable_at: None while bad; at once when it has never been
        usable; else ``now + hold_down_s`` from the moment it is good again. Returns the usable
        hops."""
        pref = self._pref(p)
        for hop in list(p.hops):
            if hop not in pref:
                del p.hops[hop]
        usable = []
        for hop in pref:
            h = p.hops.setdefault(hop, _Hop())
            if self._hop_reasons(p, hop):
                if h.pending:
                    p.hold_restarts += 1  # it failed again inside its hold-down
                h.usable_at, h.pending = None, False
            elif h.usable_at is None:
                h.usable_at = now + self._hold if h.was_usable else now
                h.pending = True
            if h.pending and h.usable_at is not None and h.usable_at <= now:
                h.pending, h.was_usable = False, True
            if h.usable_at is not None and not h.pending:
                usable.append(hop)
        return usable

    def _evaluate(self, p: _Path, now: float) -> list[Effect]:
        usable = self._update_hops(p, now)
        pref = self._pref(p)
        backups = [hop for hop in p.weights if hop not in pref]
        standby = _spread(p.weights, backups)
        last_resort = False
        if usable:
            state, active = ColourState.PRIMARY, _spread(p.weights, usable)
        elif standby:
            state, active = ColourState.FALLBACK, standby
        else:
            # no backup: keep the preferred hops that only remote signals speak against
            alive = [
                hop
                for hop in pref
                if hop in p.weights and not any(r.local for r in self._hop_reasons(p, hop))
            ]
            if alive:
                state, active, last_resort = ColourState.FALLBACK, _spread(p.weights, alive), True
            else:
                state, active = ColourState.NO_PATH, ()
        reasons = () if state is ColourState.PRIMARY else self._reasons(p)
        prog = Program(p.colour, p.dest, state, active, standby, reasons, last_resort)
        if state is not p.state:
            if p.state is ColourState.PRIMARY:
                p.fallbacks += 1
            p.state, p.state_since = state, now
        last, p.last = p.last, prog
        if last is not None and (last.state, last.active, last.standby, last.last_resort) == (
            prog.state,
            prog.active,
            prog.standby,
            prog.last_resort,
        ):
            return []
        return [prog]

    def _drop(self, key: tuple[int, Dest]) -> list[Effect]:
        if self._paths.pop(key, None) is None:
            return []
        return [Remove(*key)]
