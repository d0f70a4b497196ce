"""Heartbeat sender core (helper role): pure, no sockets, no clock.

Sends the current link snapshot out of every fabric interface that has a BGP neighbour:

- periodically, every ``interval_s`` (default 20 ms) after the previous send, or every
  ``idle_interval_s`` (glbd's default 100 ms) while the fabric is quiet: every link at the best band
  and up, and no change sent for ``idle_after_s``. Each datagram carries the interval it
  promises, so receivers expire the sender on that; a change goes out at once either way, and
  the datagram that carries it returns the sender to ``interval_s``. An idle fabric is
  refreshed five times less often; a loaded one exactly as before;
- at once when a band, down flag, link id, far end or capacity changes (``on_change``), but never
  closer than ``min_spacing_s`` (default 5 ms) to the previous such send; a change inside the
  spacing window is sent when the window ends, coalesced with any later change. The spacing
  bounds a storm of changes; a periodic send just before holds a first change back by 1 ms at
  most (``MIN_GAP_S``: no two datagrams within a millisecond, which the sequence relies on);
- on a newly added interface at the next send opportunity (also subject to the spacing).

Every datagram gets a newer sequence number (RFC 1982), so a sequence never repeats within a run.
The sequence follows the clock: one per millisecond since the first send (seeded from the wall
clock by :func:`initial_sequence`), or one more than the previous datagram if that is larger. So
a restarted sender is newer than its previous run however long that run was (a sequence that
only counted datagrams would lag the wall clock by ~24 days after 25 days at 50 datagrams/s and
look older after a restart). One datagram is encoded per send and the same bytes go out of
every interface.

Drain (``set_drain``): every link is sent at band 0, the worst band but not down, so load
balancers move traffic off this node at once, before its BGP advertisements change; undrain
sends the measured bands again. Both are changes: they leave at once (within the spacing).

Usage (the asyncio layer): feed ``update(entries, now)`` whenever the link monitor has new
qualities, call ``on_timer(now)`` at ``next_deadline()``, and transmit every returned
:class:`Transmit`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from . import wire

__all__ = ["Sender", "SenderParams", "Transmit", "initial_sequence"]

log = logging.getLogger(__name__)


#: no two datagrams closer than this, or than ``min_spacing_s`` if that is less (the sequence
#: counts milliseconds; glbd's config keeps the spacing >= 1 ms)
MIN_GAP_S = 0.001


@dataclass(frozen=True, slots=True)
class SenderParams:
    """Sender parameters (from ``[heartbeat]`` in the config)."""

    #: this node's BGP identifier as a 32-bit int (``wire.node_id("192.0.2.1")``)
    node_id: int
    interval_s: float = 0.020
    min_spacing_s: float = 0.005
    on_change: bool = True
    #: sign every datagram with this key (None = unauthenticated)
    key: wire.HmacKey | None = None
    #: the refresh interval while quiet (every link at the best band and up, no change sent
    #: for ``idle_after_s``); None: always ``interval_s`` (glbd's config sets 100 ms)
    idle_interval_s: float | None = None
    idle_after_s: float = 1.0

    def __post_init__(self) -> None:
        if not 0 < self.min_spacing_s <= self.interval_s:
            raise ValueError("need 0 < min_spacing_s <= interval_s")
        if self.idle_interval_s is not None and self.idle_interval_s < self.interval_s:
            raise ValueError("need idle_interval_s >= interval_s")
        if round(max(self.interval_s, self.idle_interval_s or 0.0) * 1e6) > 0xFFFFFFFF:
            raise ValueError("interval_s too large for the wire (2**32 µs)")


@dataclass(frozen=True, slots=True)
class Transmit:
    """Effect: send ``data`` out of interface ``ifname``."""

    ifname: str
    data: bytes
    sequence: int


def initial_sequence(wall_clock_s: float, last_sent: int | None = None) -> int:
    """The first sequence number of a run: the wall clock in ms modulo 2**32, or one past
    ``last_sent`` when that is newer (docs/heartbeat.md §2)."""
    seq = int(wall_clock_s * 1000) & 0xFFFFFFFF
    if last_sent is not None and not wire.serial_gt(seq, last_sent):
        seq = wire.serial_add(last_sent, 1)
    return seq


class Sender:
    """Periodic + on-change heartbeat sender for one node."""

    def __init__(self, params: SenderParams, first_sequence: int) -> None:
        self._params = params
        self._seq = (first_sequence - 1) & 0xFFFFFFFF  # the first datagram carries first_sequence
        # the sequence as an unbounded count, and the clock it follows (set at the first send)
        self._count = first_sequence - 1
        self._base: tuple[float, int] | None = None
        self._entries = wire.Entries()
        #: the measured snapshot (``_entries`` is what is sent: band 0 everywhere when drained)
        self._measured = self._entries
        self._drain = False
        self._key = self._entries.key()
        self._ifnames: tuple[str, ...] = ()
        self._last_send: float | None = None
        self._next_at: float | None = None
        self.sent = 0
        self.sent_on_change = 0
        self._pending_change = False
        #: the last send that carried a change (or a new interface): the spacing's reference
        self._last_change_send: float | None = None
        self._change_due = False
        #: every link of the snapshot at the best band and up
        self._calm = True

    # --- inputs ---------------------------------------------------------------------------

    @property
    def params(self) -> SenderParams:
        return self._params

    def set_params(self, params: SenderParams, now: float) -> list[Transmit]:
        """Apply new parameters (reload); the next send is rescheduled under the new interval."""
        self._params = params
        if self._last_send is not None and self._next_at is not None:
            self._next_at = min(self._next_at, self._last_send + params.interval_s)
        return self._maybe_send(now)

    def set_interfaces(self, ifnames: Iterable[str], now: float) -> list[Transmit]:
        """The fabric interfaces that have a BGP neighbour (sorted and deduplicated here)."""
        new = tuple(sorted(set(ifnames)))
        added = set(new) - set(self._ifnames)
        self._ifnames = new
        if not new:
            self._next_at = None
            return []
        if added or self._next_at is None:
            self._schedule_change(now)
        return self._maybe_send(now)

    def update(self, entries: Iterable[wire.Entry], now: float) -> list[Transmit]:
        """New link snapshot (every monitored link). Returns what must be sent now."""
        ents = entries if isinstance(entries, wire.Entries) else wire.Entries(entries)
        self._measured = ents
        if self._drain:
            ents = wire.Entries(e._replace(band=0) for e in ents)
        key = ents.key()
        self._entries = ents
        self._calm = all(e.band == wire.MAX_BAND and not e.down for e in ents)
        if key != self._key:
            self._key = key
            if self._params.on_change and self._ifnames:
                self._pending_change = True
                self._schedule_change(now)
        return self._maybe_send(now)

    def set_drain(self, drain: bool, now: float) -> list[Transmit]:
        """Drained: every link is advertised at band 0 from now on (undrain: as measured)."""
        if drain == self._drain:
            return []
        self._drain = drain
        return self.update(self._measured, now)

    @property
    def drained(self) -> bool:
        return self._drain

    def on_timer(self, now: float) -> list[Transmit]:
        return self._maybe_send(now)

    def next_deadline(self) -> float | None:
        return self._next_at

    # --- internals -----------------------------------------------------------------------

    def _schedule_change(self, now: float) -> None:
        last = self._last_change_send
        due = now if last is None else max(now, last + self._params.min_spacing_s)
        if self._last_send is not None:  # at most one datagram a millisecond (the sequence)
            due = max(due, self._last_send + min(MIN_GAP_S, self._params.min_spacing_s))
        self._next_at = due if self._next_at is None else min(self._next_at, due)
        self._change_due = True

    def _maybe_send(self, now: float) -> list[Transmit]:
        if self._next_at is None or now < self._next_at or not self._ifnames:
            return []
        if self._base is None:
            self._base = (now, self._count + 1)
        t0, n0 = self._base
        self._count = max(self._count + 1, n0 + int((now - t0) * 1000))
        self._seq = self._count & 0xFFFFFFFF
        p = self._params
        if self._change_due:
            self._last_change_send = now
            self._change_due = False
        last = self._last_change_send
        quiet = self._calm and (last is None or now - last >= p.idle_after_s)
        interval = p.idle_interval_s if quiet and p.idle_interval_s is not None else p.interval_s
        msg = wire.Heartbeat(p.node_id, self._seq, round(interval * 1e6), self._entries)
        data = msg.encode(p.key)
        self._last_send = now
        self._next_at = now + interval
        self.sent += 1
        if self._pending_change:
            self.sent_on_change += 1
            self._pending_change = False
        return [Transmit(ifname, data, self._seq) for ifname in self._ifnames]

    # --- introspection -------------------------------------------------------------------

    @property
    def sequence(self) -> int:
        """The last sequence number sent."""
        return self._seq

    def to_dict(self, now: float | None = None) -> dict[str, Any]:
        return {
            "node_id": wire.node_str(self._params.node_id),
            "interfaces": list(self._ifnames),
            "interval_ms": self._params.interval_s * 1000,
            "min_spacing_ms": self._params.min_spacing_s * 1000,
            "on_change": self._params.on_change,
            "authenticated": self._params.key is not None,
            "key_id": None if self._params.key is None else self._params.key.key_id,
            "last_sequence": self._seq,
            "sent": self.sent,
            "sent_on_change": self.sent_on_change,
            "drained": self._drain,
            "last_sent_ago_ms": None
            if now is None or self._last_send is None
            else round((now - self._last_send) * 1000, 3),
            "entries": [e.to_dict() for e in self._entries],
        }
