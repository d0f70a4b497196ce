"""Which link-local address the router at the other end of each unnumbered port has.

Fed with the router advertisements heard on each port (``heard``) and the time (``tick``), it
says when a port's peer is learned, when it changed (another router, or the same one with a
new address: the session must move) and when it expired (nothing heard for ``hold_s``). Pure:
the caller passes ``now`` (monotonic seconds).

A changed address is only believed once it was heard ``confirm`` times in a row with no word
from the current peer in between, so one forged or stray advertisement on the link does not
move a working session (a compromised neighbor can still move it by repeating itself: it owns
the other end of the link anyway). Expiry does not end a session: the caller keeps a session
that is up and only stops dialling an address no longer heard.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from enum import StrEnum

__all__ = ["NdpEvent", "NdpPeers", "PeerChange"]

#: nothing heard from a port's peer for this long: it expired (FRR advertises every 10 s on
#: an unnumbered BGP port by default; 3 missed advertisements)
HOLD_S = 30.0
#: a different address replaces the learned one after this many advertisements in a row
CONFIRM = 2
#: and not sooner than this after the port's last learn or change: a neighbor alternating
#: between two addresses moves the session (an ExaBGP reload) at most this often
MIN_CHANGE_INTERVAL_S = 5.0


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
class _Port:
    address: ipaddress.IPv6Address | None = None
    last_heard: float = 0.0
    changed_at: float = float("-inf")
    candidate: ipaddress.IPv6Address | None = None
    candidate_seen: int = 0
    adverts: int = 0


@dataclass
class NdpPeers:
    hold_s: float = HOLD_S
    confirm: int = CONFIRM
    min_change_interval_s: float = MIN_CHANGE_INTERVAL_S
    _ports: dict[str, _Port] = field(default_factory=dict)

    def watch(self, interface: str) -> None:
        self._ports.setdefault(interface, _Port())

    def forget(self, interface: str) -> None:
        self._ports.pop(interface, None)

    def peer(self, interface: str) -> ipaddress.IPv6Address | None:
        p = self._ports.get(interface)
        return None if p is None else p.address

    def peers(self) -> dict[str, ipaddress.IPv6Address]:
        return {i: p.address for i, p in self._ports.items() if p.address is not None}

    def heard(self, interface: str, source: ipaddress.IPv6Address, now: float) -> NdpEvent | None:
        """An advertisement from ``source`` on ``interface``; None if it changes nothing (or
        the port is not watched, or ``source`` is not link-local)."""
        p = self._ports.get(interface)
        if p is None or not source.is_link_local:
            return None
        source = ipaddress.IPv6Address(source.packed)  # never a zone: the port says which link
        p.adverts += 1
        if p.address is None:
            p.address, p.last_heard, p.candidate, p.candidate_seen = source, now, None, 0
            p.changed_at = now
            return NdpEvent(interface, PeerChange.LEARNED, source)
        if source == p.address:
            p.last_heard, p.candidate, p.candidate_seen = now, None, 0
            return None
        if source != p.candidate:
            p.candidate, p.candidate_seen = source, 0
        p.candidate_seen += 1
        expired = now - p.last_heard >= self.hold_s
        if p.candidate_seen < self.confirm and not expired:
            return None
        if now - p.changed_at < self.min_change_interval_s:
            return None  # still the candidate: the next advertisement after the interval
        prev, p.address, p.last_heard, p.candidate, p.candidate_seen = (
            p.address,
            source,
            now,
            None,
            0,
        )
        p.changed_at = now
        return NdpEvent(interface, PeerChange.CHANGED, source, prev)

    def tick(self, now: float) -> list[NdpEvent]:
        """The ports whose peer was not heard for ``hold_s``: they have no peer again."""
        out = []
        for name, p in self._ports.items():
            if p.address is not None and now - p.last_heard >= self.hold_s:
                out.append(NdpEvent(name, PeerChange.EXPIRED, p.address))
                p.address, p.candidate, p.candidate_seen = None, None, 0
        return out

    def next_deadline(self) -> float | None:
        """When ``tick`` may next have something to say (None: no learned peer)."""
        times = [p.last_heard + self.hold_s for p in self._ports.values() if p.address]
        return min(times) if times else None

    def snapshot(self) -> dict[str, dict[str, object]]:
        return {
            name: {
                "peer": None if p.address is None else str(p.address),
                "adverts": p.adverts,
                "candidate": None if p.candidate is None else str(p.candidate),
            }
            for name, p in self._ports.items()
        }
