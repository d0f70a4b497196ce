"""Heartbeat receiver core (load-balancer role): pure, no sockets, no clock.

``on_datagram(data, ifname=, src=, ttl=, now=)`` runs the ordered checklist of
docs/heartbeat.md §3 and counts every drop by name; nothing raises out of it:

1. ``bad_ttl``          TTL (as the transport read it) is not 255
2. ``no_neighbor``      no BGP neighbour is known on the arrival interface
3. ``malformed``        the datagram does not decode (also ``malformed_<reason>``)
4. ``wrong_source``     IP source is not the neighbour's address (when one is configured)
5. ``wrong_sender``     sender node id is not the neighbour's BGP identifier
6. ``auth_missing`` / ``auth_unknown_key`` / ``auth_bad_digest`` (only when keys are configured)
7. ``interval_too_long`` advertised interval above ``max_interval_us`` (glbd's config maximum)
8. ``stale_sequence``   sequence not newer (RFC 1982) than the sender's last accepted one
   ``sequence_jump``    newer, but by more than the jump bound, and not (yet) confirmed

Sequence state is kept per sender node, like the remote snapshot and its expiry: parallel links
to one spine deliver the same datagram on several interfaces, and the first copy is the one
accepted (later copies count as ``parallel_copies``, not as drops). The last accepted sequence
outlives expiry and BGP session restarts, so a captured datagram is never accepted again (a
sender seeds its sequence from the clock, so a restarted sender is newer).

A datagram outside the window ``(last, last + bound]`` is *suspect*: it starts or extends a
candidate chain (consecutive suspects, each a small step past the previous one; a few chains per
node, the least recently extended replaced). A chain ahead of the reference is adopted at its
second datagram (a restarted sender); a chain behind it only after ``recover_after`` datagrams
while nothing has been accepted from the node for a hold time (a genuine sender locked out by a
forged or corrupted high sequence). Replays of a live sender therefore never take over: its own
datagrams keep the reference alive.

A node's entries expire together at ``last accepted + hold_multiplier x advertised interval``;
expired means *unknown*.

Output effects are :class:`RemoteUpdate` — emitted only when the weight-relevant part of a
node's snapshot (ids, capacity, band, down) changes, when it appears, and when it expires — so a
steady fabric costs one decode, one HMAC and one bytes comparison per heartbeat.
``on_datagram`` is one function (a little over 80 lines) so that the checklist reads in order
and the per-datagram path makes no extra calls.
"""

from __future__ import annotations

import ipaddress
import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import wire
from .reasons import DropReason, UpdateReason, malformed

__all__ = ["Neighbor", "Receiver", "ReceiverParams", "RemoteUpdate"]

log = logging.getLogger(__name__)

REQUIRED_TTL = 255
#: glbd's largest configurable heartbeat interval (``heartbeat.interval_ms`` <= 10,000)
MAX_INTERVAL_US = 10_000_000
#: the jump bound: a genuine sender's sequence advances at most one per millisecond (it follows
#: the clock) plus one per datagram; the slack covers delay variation and on-change bursts
JUMP_SLACK = 256
JUMP_PER_S = 1250
_SERIAL_MOD = 1 << 32
_SERIAL_HALF = 1 << 31
#: sequence references remembered for nodes that are no longer neighbours (oldest forgotten)
MAX_REMEMBERED = 4096
#: candidate chains per sender; a new one replaces the least recently extended, so a genuine
#: stream (extended every interval) survives anything slower than this many forgeries per interval
MAX_CHAINS = 4


@dataclass(frozen=True, slots=True)
class ReceiverParams:
    """Receiver parameters (from ``[heartbeat]`` in the config)."""

    hold_multiplier: int = 3
    #: accepted keys by key id; empty = authentication not required (signed datagrams accepted)
    keys: Mapping[int, wire.HmacKey] = field(default_factory=dict)
    #: longest advertised interval accepted; a longer one is dropped, not clamped: no glbd
    #: sender advertises it, and it would stretch the hold time of whatever carried it
    max_interval_us: int = MAX_INTERVAL_US
    #: consecutive stale datagrams (with nothing accepted for a hold time) that resynchronise
    #: a sender whose sequence is behind the receiver's reference
    recover_after: int = 3

    def __post_init__(self) -> None:
        if self.hold_multiplier < 1:
            raise ValueError("hold_multiplier must be >= 1")
        if not 0 < self.max_interval_us <= 0xFFFFFFFF:
            raise ValueError("max_interval_us must be 1..2**32-1")
        if self.recover_after < 2:
            raise ValueError("recover_after must be >= 2")
        for kid, k in self.keys.items():
            if kid != k.key_id:
                raise ValueError("keys must be indexed by their key_id")


@dataclass(frozen=True, slots=True)
class Neighbor:
    """The BGP neighbour on a fabric interface (from the BGP session: OPEN's BGP identifier)."""

    ifname: str
    node_id: int
    #: the neighbour's interface address (its BGP session address); None = not checked. An
    #: IPv6 zone (``fe80::1%eth0``) is ignored: the interface is what scopes it
    address: str | None = None
    #: our own address on that link (the BGP session's local address): an IPv6 heartbeat
    #: socket sends from it (sender side only; None = the kernel's choice)
    local: str | None = None


@dataclass(frozen=True, slots=True)
class RemoteUpdate:
    """Effect: the link snapshot of helper ``node_id`` changed. ``entries`` None = unknown."""

    node_id: int
    entries: wire.Entries | None
    reason: UpdateReason


@dataclass(slots=True)
class _IfState:
    neighbor: Neighbor
    last_seq: int | None = None
    last_rx: float | None = None
    accepted: int = 0


@dataclass(slots=True)
class _Chain:
    """Consecutive suspect datagrams: the last one's sequence, arrival and the chain's length
    and shortest advertised interval."""

    seq: int
    rx: float
    interval_us: int
    length: int = 1


@dataclass(slots=True)
class _SeqState:
    """A sender's sequence reference (kept across expiry and session restarts) and the
    candidate chains of suspect datagrams."""

    last: int
    last_rx: float
    interval_us: int
    chains: list[_Chain] = field(default_factory=list)


def _ahead(a: int, b: int) -> int:
    """How far ``a`` is past ``b`` in serial space (0..2**32-1)."""
    return (a - b) % _SERIAL_MOD


def _bound(elapsed_s: float) -> int:
    return JUMP_SLACK + int(max(elapsed_s, 0.0) * JUMP_PER_S)


@dataclass(slots=True)
class _NodeState:
    node_id: int
    key: bytes
    last: wire.Heartbeat
    last_rx: float
    expires: float
    accepted: int = 0
    changes: int = 0


def _same_address(a: str | None, b: str) -> bool:
    """Slow path of the source check: equal addresses written differently (IPv6 zone, upper
    case, uncompressed zeros). The fast path is one string comparison."""
    if a is None:
        return False
    try:
        return ipaddress.ip_address(a.split("%", 1)[0]) == ipaddress.ip_address(b.split("%", 1)[0])
    except ValueError:
        return False


def _auth_refused(
    data: bytes, msg: wire.Heartbeat, keys: Mapping[int, wire.HmacKey]
) -> DropReason | None:
    """Why a receiver that requires authentication drops the datagram, or None: it is signed
    with one of ``keys`` and its digest verifies."""
    if msg.auth is None:
        return DropReason.AUTH_MISSING
    key = keys.get(msg.auth.key_id)
    if key is None:
        return DropReason.AUTH_UNKNOWN_KEY
    if not wire.verify(data, key):
        return DropReason.AUTH_BAD_DIGEST
    return None


class Receiver:
    def __init__(self, params: ReceiverParams | None = None) -> None:
        self._params = params or ReceiverParams()
        self._ifs: dict[str, _IfState] = {}
        self._nodes: dict[int, _NodeState] = {}
        self._seqs: dict[int, _SeqState] = {}
        self._deadline_lb: float | None = None
        self.drops: Counter[DropReason] = Counter()
        self.accepted = 0
        #: suspect chains adopted: ahead of the reference (restart), behind it (recovery)
        self.sequence_jumps = 0
        self.sequence_recoveries = 0
        self.parallel_copies = 0
        #: nodes whose heartbeats stopped for their hold time (their entries became unknown)
        self.expirations = 0

    # --- configuration -------------------------------------------------------------------

    @property
    def params(self) -> ReceiverParams:
        return self._params

    def set_params(self, params: ReceiverParams) -> None:
        self._params = params

    def set_neighbor(self, nb: Neighbor) -> list[RemoteUpdate]:
        """A BGP neighbour came up (or changed) on ``nb.ifname``."""
        old = self._ifs.get(nb.ifname)
        if old is not None and old.neighbor == nb:
            return []
        self._ifs[nb.ifname] = _IfState(nb)
        return self._forget_orphans() if old is not None else []

    def remove_neighbor(self, ifname: str) -> list[RemoteUpdate]:
        """The neighbour on ``ifname`` went away: its node becomes unknown unless another
        interface still has a session with it."""
        if self._ifs.pop(ifname, None) is None:
            return []
        return self._forget_orphans()

    def _forget_orphans(self) -> list[RemoteUpdate]:
        live = {s.neighbor.node_id for s in self._ifs.values()}
        gone = [n for n in self._nodes if n not in live]
        for n in gone:
            del self._nodes[n]
        if len(self._seqs) > MAX_REMEMBERED:  # ids a BGP neighbour no longer presents
            old = sorted((s.last_rx, n) for n, s in self._seqs.items() if n not in live)
            for _t, n in old[: len(self._seqs) - MAX_REMEMBERED]:
                del self._seqs[n]
        return [RemoteUpdate(n, None, UpdateReason.NEIGHBOR_REMOVED) for n in gone]

    # --- datagrams -----------------------------------------------------------------------

    def on_datagram(
        self, data: bytes, *, ifname: str, src: str | None, ttl: int | None, now: float
    ) -> list[RemoteUpdate]:
        drops = self.drops
        if ttl != REQUIRED_TTL:
            drops[DropReason.BAD_TTL] += 1
            return []
        st = self._ifs.get(ifname)
        if st is None:
            drops[DropReason.NO_NEIGHBOR] += 1
            return []
        try:
            msg = wire.decode(data)
        except wire.DecodeError as e:
            drops[DropReason.MALFORMED] += 1
            drops[malformed(e.reason)] += 1
            return []
        nb = st.neighbor
        if nb.address is not None and src != nb.address and not _same_address(src, nb.address):
            drops[DropReason.WRONG_SOURCE] += 1
            return []
        if msg.sender_id != nb.node_id:
            drops[DropReason.WRONG_SENDER] += 1
            return []
        keys = self._params.keys
        if keys:
            refused = _auth_refused(data, msg, keys)
            if refused is not None:
                drops[refused] += 1
                return []
        if msg.interval_us > self._params.max_interval_us:
            drops[DropReason.INTERVAL_TOO_LONG] += 1
            return []
        seq = msg.sequence
        sq = self._seqs.get(nb.node_id)
        if sq is None:
            sq = self._seqs[nb.node_id] = _SeqState(seq, now, msg.interval_us)
        else:
            d = _ahead(seq, sq.last)
            if d == 0:
                if st.last_seq != seq and nb.node_id in self._nodes:
                    st.last_seq = seq  # the copy sent on a parallel link: that link is alive
                    st.last_rx = now
                    st.accepted += 1
                    self.parallel_copies += 1
                else:
                    drops[DropReason.STALE_SEQUENCE] += 1
                return []
            if not (d < _SERIAL_HALF and d <= _bound(now - sq.last_rx)) and not self._adopt(
                nb.node_id, sq, seq, msg.interval_us, d < _SERIAL_HALF, now
            ):
                return []
            sq.last, sq.last_rx, sq.interval_us = seq, now, msg.interval_us
        st.last_seq = seq
        st.last_rx = now
        st.accepted += 1
        self.accepted += 1
        node = self._nodes.get(nb.node_id)
        expires = now + self._params.hold_multiplier * msg.interval_us / 1e6
        entries = msg.entries
        assert isinstance(entries, wire.Entries)
        key_ = entries.key()
        if node is None:
            return self._new_node(nb.node_id, entries, key_, msg, now, expires)
        node.last = msg
        node.last_rx = now
        node.accepted += 1
        if expires < node.expires and (self._deadline_lb is None or expires < self._deadline_lb):
            self._deadline_lb = expires  # the sender shortened its interval
        node.expires = expires
        if key_ == node.key:
            return []
        node.key = key_
        node.changes += 1
        return [RemoteUpdate(nb.node_id, entries, UpdateReason.CHANGED)]

    def _new_node(
        self,
        node_id: int,
        entries: wire.Entries,
        key: bytes,
        msg: wire.Heartbeat,
        now: float,
        expires: float,
    ) -> list[RemoteUpdate]:
        """The first datagram accepted from ``node_id`` (or the first since it expired)."""
        self._nodes[node_id] = _NodeState(node_id, key, msg, now, expires, 1)
        if self._deadline_lb is None or expires < self._deadline_lb:
            self._deadline_lb = expires
        return [RemoteUpdate(node_id, entries, UpdateReason.NEW)]

    def _adopt(
        self, node_id: int, sq: _SeqState, seq: int, interval_us: int, ahead: bool, now: float
    ) -> bool:
        """A suspect datagram: extend (or start) a candidate chain of the node and say whether
        that chain is now adopted as the new reference. Counts the drop when it is not."""
        hold = self._params.hold_multiplier
        drop = DropReason.SEQUENCE_JUMP if ahead else DropReason.STALE_SEQUENCE
        chains = [c for c in sq.chains if now - c.rx <= hold * c.interval_us / 1e6]
        chain = None
        for c in chains:
            step = _ahead(seq, c.seq)
            if step == 0:  # a chain's datagram again (a parallel link's copy, or a replay)
                sq.chains = chains
                self.drops[drop] += 1
                return False
            if step < _SERIAL_HALF and step <= _bound(now - c.rx):
                chain = c
                c.seq, c.rx, c.length = seq, now, c.length + 1
                c.interval_us = min(c.interval_us, interval_us)
                break
        if chain is None:
            if len(chains) >= MAX_CHAINS:
                chains.remove(min(chains, key=lambda c: c.rx))
            chain = _Chain(seq, now, interval_us)
            chains.append(chain)
        sq.chains = chains
        if ahead:
            if chain.length >= 2:
                self.sequence_jumps += 1
                sq.chains = []
                return True
        else:
            quiet = hold * min(sq.interval_us, chain.interval_us) / 1e6
            if chain.length >= self._params.recover_after and now - sq.last_rx >= quiet:
                self.sequence_recoveries += 1
                sq.chains = []
                log.warning(
                    "heartbeat sequence of %s resynchronised to %d (was %d)",
                    wire.node_str(node_id),
                    seq,
                    sq.last,
                )
                return True
        self.drops[drop] += 1
        return False

    # --- timers --------------------------------------------------------------------------

    def on_timer(self, now: float) -> list[RemoteUpdate]:
        """Expire nodes whose hold time has passed."""
        out: list[RemoteUpdate] = []
        lb: float | None = None
        for nid, node in list(self._nodes.items()):
            if node.expires <= now:
                del self._nodes[nid]
                self.expirations += 1
                out.append(RemoteUpdate(nid, None, UpdateReason.EXPIRED))
                log.info("heartbeats from %s expired", wire.node_str(nid))
            elif lb is None or node.expires < lb:
                lb = node.expires
        self._deadline_lb = lb
        return out

    def next_deadline(self) -> float | None:
        """A lower bound of the next expiry (the timer may fire early and find nothing)."""
        return self._deadline_lb

    # --- introspection -------------------------------------------------------------------

    def remote(self, node_id: int) -> wire.Entries | None:
        node = self._nodes.get(node_id)
        if node is None:
            return None
        e = node.last.entries
        assert isinstance(e, wire.Entries)
        return e

    def to_dict(self, now: float | None = None) -> dict[str, Any]:
        def ago(t: float | None) -> float | None:
            return None if now is None or t is None else round((now - t) * 1000, 3)

        return {
            "authenticated": bool(self._params.keys),
            "key_ids": sorted(self._params.keys),
            "hold_multiplier": self._params.hold_multiplier,
            "max_interval_ms": self._params.max_interval_us / 1000,
            "accepted": self.accepted,
            "parallel_copies": self.parallel_copies,
            "expirations": self.expirations,
            "sequence_jumps": self.sequence_jumps,
            "sequence_recoveries": self.sequence_recoveries,
            "drops": dict(sorted(self.drops.items())),
            "interfaces": [
                {
                    "ifname": ifn,
                    "neighbor_id": wire.node_str(s.neighbor.node_id),
                    "neighbor_address": s.neighbor.address,
                    "last_sequence": s.last_seq,
                    "last_rx_ago_ms": ago(s.last_rx),
                    "accepted": s.accepted,
                }
                for ifn, s in sorted(self._ifs.items())
            ],
            "senders": [
                {
                    "node_id": wire.node_str(n.node_id),
                    "sequence": n.last.sequence,
                    "interval_ms": n.last.interval_us / 1000,
                    "age_ms": ago(n.last_rx),
                    "expires_in_ms": None if now is None else round((n.expires - now) * 1000, 3),
                    "accepted": n.accepted,
                    "changes": n.changes,
                    "entries": [e.to_dict() for e in n.last.entries],
                }
                for n in sorted(self._nodes.values(), key=lambda n: n.node_id)
            ],
        }
