"""Heartbeat receiver core (load-balancer role): pure, no sockets, no clock.

``on_datagram(data, ifname=, src=, ttl=, now=)`` runs the ordered checklist of
docs/heartbeat.md §3 and counts every drop by name; nothing raises out of it:

1. ``bad_ttl``          TTL (as the transport read it) is not 255
2. ``no_neighbor``      no BGP neighbour is known on the arrival interface
3. ``malformed``        the datagram does not decode (also ``malformed_<reason>``)
4. ``wrong_source``     IP source is not the neighbour's address (when one is configured)
5. ``wrong_sender``     sender node id is not the neighbour's BGP identifier
6. ``auth_missing`` / ``auth_unknown_key`` / ``auth_bad_digest`` (only when keys are configured)
7. ``stale_sequence``   sequence not newer (RFC 1982) than the last accepted on that interface

Remote state is kept per sender node (parallel links to one spine deliver the same snapshot on
several interfaces; the sequence is tracked per interface). A node's entries expire together at
``last accepted + hold_multiplier x advertised interval``; expired means *unknown*.

Output effects are :class:`RemoteUpdate` — emitted only when the weight-relevant part of a
node's snapshot (ids, capacity, band, down) changes, when it appears, and when it expires — so a
steady fabric costs one decode, one HMAC and one bytes comparison per heartbeat.
"""

from __future__ import annotations

import ipaddress
import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import wire

__all__ = ["Neighbor", "Receiver", "ReceiverParams", "RemoteUpdate"]

log = logging.getLogger(__name__)

REQUIRED_TTL = 255


@dataclass(frozen=True, slots=True)
class ReceiverParams:
    """Receiver parameters (from ``[heartbeat]`` in the config)."""

    hold_multiplier: int = 3
    #: accepted keys by key id; empty = authentication not required (signed datagrams accepted)
    keys: Mapping[int, wire.HmacKey] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.hold_multiplier < 1:
            raise ValueError("hold_multiplier must be >= 1")
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
    reason: str  # "new" | "changed" | "expired" | "neighbor_removed"


@dataclass(slots=True)
class _IfState:
    neighbor: Neighbor
    last_seq: int | None = None
    last_rx: float | None = None
    accepted: int = 0


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


class Receiver:
    def __init__(self, params: ReceiverParams | None = None) -> None:
        self._params = params or ReceiverParams()
        self._ifs: dict[str, _IfState] = {}
        self._nodes: dict[int, _NodeState] = {}
        self._deadline_lb: float | None = None
        self.drops: Counter[str] = Counter()
        self.accepted = 0
        self.sequence_resets = 0

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
        return [RemoteUpdate(n, None, "neighbor_removed") for n in gone]

    # --- datagrams -----------------------------------------------------------------------

    def on_datagram(
        self, data: bytes, *, ifname: str, src: str | None, ttl: int | None, now: float
    ) -> list[RemoteUpdate]:
        drops = self.drops
        if ttl != REQUIRED_TTL:
            drops["bad_ttl"] += 1
            return []
        st = self._ifs.get(ifname)
        if st is None:
            drops["no_neighbor"] += 1
            return []
        try:
            msg = wire.decode(data)
        except wire.DecodeError as e:
            drops["malformed"] += 1
            drops["malformed_" + e.reason] += 1
            return []
        nb = st.neighbor
        if nb.address is not None and src != nb.address and not _same_address(src, nb.address):
            drops["wrong_source"] += 1
            return []
        if msg.sender_id != nb.node_id:
            drops["wrong_sender"] += 1
            return []
        keys = self._params.keys
        if keys:
            if msg.auth is None:
                drops["auth_missing"] += 1
                return []
            key = keys.get(msg.auth.key_id)
            if key is None:
                drops["auth_unknown_key"] += 1
                return []
            if not wire.verify(data, key):
                drops["auth_bad_digest"] += 1
                return []
        node = self._nodes.get(nb.node_id)
        if st.last_seq is not None and not wire.serial_gt(msg.sequence, st.last_seq):
            if node is not None and now < node.expires:
                drops["stale_sequence"] += 1
                return []
            self.sequence_resets += 1  # the sender was silent for a hold time: accept afresh
        st.last_seq = msg.sequence
        st.last_rx = now
        st.accepted += 1
        self.accepted += 1
        expires = now + self._params.hold_multiplier * msg.interval_us / 1e6
        entries = msg.entries
        assert isinstance(entries, wire.Entries)
        key_ = entries.key()
        if node is None:
            node = _NodeState(nb.node_id, key_, msg, now, expires, 1)
            self._nodes[nb.node_id] = node
            if self._deadline_lb is None or expires < self._deadline_lb:
                self._deadline_lb = expires
            return [RemoteUpdate(nb.node_id, entries, "new")]
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
        return [RemoteUpdate(nb.node_id, entries, "changed")]

    # --- timers --------------------------------------------------------------------------

    def on_timer(self, now: float) -> list[RemoteUpdate]:
        """Expire nodes whose hold time has passed."""
        out: list[RemoteUpdate] = []
        lb: float | None = None
        for nid, node in list(self._nodes.items()):
            if node.expires <= now:
                del self._nodes[nid]
                out.append(RemoteUpdate(nid, None, "expired"))
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
            "accepted": self.accepted,
            "sequence_resets": self.sequence_resets,
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
