"""Which link-local address the router at the other end of each unnumbered port has.

Fed with the router advertisements heard on each port (``heard``), which learned peers have a
BGP session Established (``set_established``) and the time (``tick``), it says when a port's
peer is learned, when it changed (another router, or the same one with a new address: the
session must move) and when it expired (nothing heard for ``hold_s``). Pure: the caller passes
``now`` (monotonic seconds).

Anyone on the link can send an advertisement from any link-local address, so a learned peer is
hard to move (docs/security.md, "Unnumbered peer discovery"):

* while the learned address's session is Established, no other address moves it, and it does
  not expire (the session is the proof of life);
* otherwise another address is a candidate, taken only once it was heard ``confirm`` times
  over at least ``confirm_span_s`` with no word from the learned peer in between (the real
  router advertises more often than that span, so a forger cannot slip in between), or once
  the learned peer was silent for ``hold_s``;
* a learned address vetoes candidates (its advertisements reset them) while its session is
  up, for ``grace_s`` after it was learned and for ``grace_s`` after its session went down;
  an address that never gets a session (a forger heard first) loses the veto, so the real
  router's consistent advertisements replace it, and its session then keeps it;
* the peer moves at most once per ``min_change_interval_s``;
* after a restart, the address remembered from the last run (``prefer``) is taken at once when
  heard; any other must pass the candidate rule first.

Every advertisement not taken is counted by :class:`glbd.base.reasons.NdpIgnored`.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from glbd.base.reasons import NdpIgnored

__all__ = ["NdpEvent", "NdpPeers", "PeerChange"]

#: nothing heard from a port's peer for this long: it expired (FRR advertises every 10 s on
#: an unnumbered BGP port by default; 3 missed advertisements)
HOLD_S = 30.0
#: a different address replaces the learned one after this many advertisements...
CONFIRM = 3
#: ...spread over at least this long (longer than the real router's advertisement interval)
CONFIRM_SPAN_S = 15.0
#: and not sooner than this after the port's last learn or change: a neighbor alternating
#: between two addresses moves the session (an ExaBGP reload) at most this often
MIN_CHANGE_INTERVAL_S = 30.0
#: how long a learned address without an Established session keeps vetoing candidates (after
#: it was learned, or after its session went down): time for the session to come (back) up
GRACE_S = 60.0
#: candidates remembered per port: more than the receive budget lets in between two of the
#: real router's advertisements (20/s x 10 s), so a forger spraying addresses cannot evict it
MAX_CANDIDATES = 256


class PeerChange(StrEnum):
    LEARNED = "learned"
    CHANGED = "changed"
    EXPIRED = "expired"


@dataclass(frozen=True)
class NdpEvent:
    interface: str
    change: PeerChange
    #: the new address (LEARNED, CHANGED) or the one that expired
    address: ipaddress.IPv6Address
    previous: ipaddress.IPv6Address | None = None


@dataclass
class _Candidate:
    first: float
    last: float
    seen: int = 1


@dataclass
class _Port:
    address: ipaddress.IPv6Address | None = None
    last_heard: float = 0.0
    changed_at: float = float("-inf")
    #: the learned address's BGP session is Established
    established: bool = False
    #: the learned address vetoes candidates until then (and while established)
    veto_until: float = float("-inf")
    #: remembered from the last run: taken at once when heard while nothing is learned
    preferred: ipaddress.IPv6Address | None = None
    candidates: dict[ipaddress.IPv6Address, _Candidate] = field(default_factory=dict)
    adverts: int = 0


@dataclass
class NdpPeers:
    hold_s: float = HOLD_S
    confirm: int = CONFIRM
    min_change_interval_s: float = MIN_CHANGE_INTERVAL_S
    confirm_span_s: float = CONFIRM_SPAN_S
    grace_s: float = GRACE_S
    #: advertisements not taken, by reason
    counters: Counter[NdpIgnored] = field(default_factory=Counter)
    _ports: dict[str, _Port] = field(default_factory=dict)

    def watch(self, interface: str) -> None:
        self._ports.setdefault(interface, _Port())

    def forget(self, interface: str) -> None:
        self._ports.pop(interface, None)

    def prefer(self, interface: str, address: ipaddress.IPv6Address) -> None:
        """``address`` was the port's peer in the last run: take it at once when heard (only
        while nothing is learned; ignored unless the port is watched and it is link-local)."""
        p = self._ports.get(interface)
        if p is not None and p.address is None and address.is_link_local:
            p.preferred = ipaddress.IPv6Address(address.packed)

    def set_established(self, sessions: Mapping[str, ipaddress.IPv6Address], now: float) -> None:
        """The ports whose BGP session is Established, with the peer address it runs to (all
        of them: a port not named has none). Only a session to the learned address counts."""
        for name, p in self._ports.items():
            addr = sessions.get(name)
            up = p.address is not None and addr is not None and addr.packed == p.address.packed
            if p.established and not up:
                p.veto_until = now + self.grace_s  # time for the session to come back
            p.established = up
            if up:
                p.candidates.clear()

    def peer(self, interface: str) -> ipaddress.IPv6Address | None:
        p = self._ports.get(interface)
        return None if p is None else p.address

    def peers(self) -> dict[str, ipaddress.IPv6Address]:
        return {i: p.address for i, p in self._ports.items() if p.address is not None}

    def heard(self, interface: str, source: ipaddress.IPv6Address, now: float) -> NdpEvent | None:
        """An advertisement from ``source`` on ``interface``; None if it changes nothing (or
        the port is not watched, or ``source`` is not link-local)."""
        p = self._ports.get(interface)
        if p is None:
            self.counters[NdpIgnored.PORT_NOT_WATCHED] += 1
            return None
        if not source.is_link_local:
            return None  # the speaker drops (and counts) these before they get here
        source = ipaddress.IPv6Address(source.packed)  # never a zone: the port says which link
        p.adverts += 1
        if p.address is None and (p.preferred is None or source == p.preferred):
            return self._take(p, interface, source, now)
        if source == p.address:
            p.last_heard = now
            if p.established or now < p.veto_until:
                p.candidates.clear()  # the learned peer spoke in between: start over
            return None
        if p.established:
            self.counters[NdpIgnored.PEER_ESTABLISHED] += 1
            return None
        c = self._candidate(p, source, now)
        silent = p.address is not None and now - p.last_heard >= self.hold_s
        if not silent and (c.seen < self.confirm or now - c.first < self.confirm_span_s):
            self.counters[NdpIgnored.CANDIDATE_UNCONFIRMED] += 1
            return None
        if now - p.changed_at < self.min_change_interval_s:
            self.counters[NdpIgnored.CHANGE_RATE_LIMITED] += 1
            return None  # still the candidate: the next advertisement after the interval
        return self._take(p, interface, source, now)

    def _candidate(self, p: _Port, source: ipaddress.IPv6Address, now: float) -> _Candidate:
        for a in [a for a, c in p.candidates.items() if now - c.last >= self.hold_s]:
            del p.candidates[a]  # not heard for the hold time: starts over
        c = p.candidates.get(source)
        if c is None:
            if len(p.candidates) >= MAX_CANDIDATES:  # the least heard, then the stalest, goes
                worst = min(
                    p.candidates, key=lambda a: (p.candidates[a].seen, p.candidates[a].last)
                )
                del p.candidates[worst]
            c = p.candidates[source] = _Candidate(now, now, 0)
        c.seen += 1
        c.last = now
        return c

    def _take(
        self, p: _Port, interface: str, source: ipaddress.IPv6Address, now: float
    ) -> NdpEvent:
        prev = p.address
        p.address, p.last_heard, p.changed_at = source, now, now
        p.established, p.veto_until, p.preferred = False, now + self.grace_s, None
        p.candidates.clear()
        if prev is None:
            return NdpEvent(interface, PeerChange.LEARNED, source)
        return NdpEvent(interface, PeerChange.CHANGED, source, prev)

    def tick(self, now: float) -> list[NdpEvent]:
        """The ports whose peer was not heard for ``hold_s`` (and has no Established
        session): they have no peer again."""
        out = []
        for name, p in self._ports.items():
            if p.address is not None and not p.established and now - p.last_heard >= self.hold_s:
                out.append(NdpEvent(name, PeerChange.EXPIRED, p.address))
                p.address, p.veto_until = None, float("-inf")
        return out

    def next_deadline(self) -> float | None:
        """When ``tick`` may next have something to say (None: no learned peer)."""
        times = [
            p.last_heard + self.hold_s
            for p in self._ports.values()
            if p.address is not None and not p.established
        ]
        return min(times) if times else None

    def snapshot(self) -> dict[str, dict[str, object]]:
        return {
            name: {
                "peer": None if p.address is None else str(p.address),
                "adverts": p.adverts,
                "established": p.established,
                "preferred": None if p.preferred is None else str(p.preferred),
                "candidate": _best(p),
                "candidates": len(p.candidates),
            }
            for name, p in self._ports.items()
        }


def _best(p: _Port) -> str | None:
    """The candidate closest to being taken (most heard), if any."""
    if not p.candidates:
        return None
    return str(max(p.candidates, key=lambda a: (p.candidates[a].seen, -p.candidates[a].first)))
