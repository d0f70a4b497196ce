"""What the engine's caller sees: session configs, events, the control error, arrival times.

Shared by the loop (which emits events as plain tuples, cheap to pickle), the channel and the
control API (which turn them back into :class:`BfdEvent`).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from ..packet import Diag, State
from ..reasons import StateChangeReason
from ..session import SessionParams

__all__ = [
    "RX_STAMP_MAX_AGE",
    "BfdEvent",
    "EngineError",
    "EventWire",
    "SessionConfig",
    "arrival_time",
    "norm_ip",
]

#: a kernel receive stamp older than this (seconds) is not trusted (a wall clock step, or an
#: engine stalled that long, which then counts from the read as before)
RX_STAMP_MAX_AGE = 0.05


def arrival_time(now: float, wall: float, stamp: float) -> float:
    """When a packet read at ``now`` (monotonic) arrived, for RFC 5880 6.8.4 detection.

    ``wall`` is the wall clock at the read and ``stamp`` the kernel's arrival stamp (wall clock,
    0.0 if absent). Only an age in (0, RX_STAMP_MAX_AGE) is used, so a wall clock step never
    pushes a deadline later or far earlier. Until the kernel's receive stamps are live (the
    first timestamping socket on the machine enables them from a deferred work item) the stamp
    is the read time: detection then counts from the read, never from before the arrival.
    """
    age = wall - stamp
    return now - age if 0.0 < age < RX_STAMP_MAX_AGE else now


def norm_ip(addr: str) -> str:
    """The compressed form of an address, without a ``%scope`` suffix (session keys use it)."""
    return ipaddress.ip_address(addr.split("%", 1)[0]).compressed


class EngineError(RuntimeError):
    """A control call failed (bad arguments, unknown session, engine not running)."""


@dataclass(frozen=True, slots=True)
class SessionConfig:
    """One single-hop session: one per (interface, peer address) (RFC 5881 §3)."""

    peer: str
    interface: str
    #: source address for our packets (None: the kernel chooses)
    local: str | None = None
    params: SessionParams = field(default_factory=SessionParams)

    @property
    def key(self) -> tuple[str, str]:
        return (self.interface, norm_ip(self.peer))


#: a BfdEvent as the engine loop emits it: (interface, peer, old, new, diag, reason, failure,
#: remote_cpi, remote_diag, local_discriminator, at, last_rx, failover_sent), enums as ints
EventWire = tuple[str, str, int, int, int, str, bool, bool, int, int, float, float | None, bool]


@dataclass(frozen=True, slots=True)
class BfdEvent:
    """A session changed state (see :class:`bfd.session.StateChange`)."""

    interface: str
    peer: str
    old: State
    new: State
    #: our diag (why *we* changed state)
    diag: Diag
    reason: StateChangeReason
    #: an Up session lost (detection timeout or the peer signalling Down); False for a peer's
    #: AdminDown and for our own admin actions (RFC 5882 §3.2)
    failure: bool
    #: the peer's C bit (RFC 5882 §4.3: with C = 0 a Down during the peer's graceful restart
    #: may be ignored)
    remote_cpi: bool
    remote_diag: int
    local_discriminator: int
    #: time.monotonic() in the engine (CLOCK_MONOTONIC is system-wide)
    at: float
    #: when the last packet from the peer was accepted (same clock; None: never heard).
    #: For a detection timeout, ``at - last_rx`` is the detection latency.
    last_rx: float | None = None
    #: the engine sent the session's armed failover requests (:meth:`BfdEngine.set_failover`)
    #: to the kernel before it emitted this event; their answers are counted in the snapshot
    failover_sent: bool = False

    @classmethod
    def from_wire(cls, w: EventWire) -> BfdEvent:
        return cls(
            w[0],
            w[1],
            State(w[2]),
            State(w[3]),
            Diag(w[4]),
            StateChangeReason(w[5]),
            w[6],
            w[7],
            w[8],
            w[9],
            w[10],
            w[11],
            w[12],
        )
