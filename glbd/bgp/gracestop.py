"""The graceful restart of glbd itself: ``glbctl graceful-restart`` arms the next stop for a
bounded time, and the stop then keeps what graceful restart lets it keep (pure: the caller
passes the time and the sessions).

A stop is *planned* (withdraw everything, then close) unless it is armed, glbd advertises the
capability (``bgp.graceful_restart = "full"``) and at least one session that is up negotiated
it. Then it is a *graceful restart*: the sessions whose peer negotiated it are closed without
a NOTIFICATION and nothing is withdrawn toward them (RFC 4724: the peer keeps forwarding on
glbd's routes, stale, until the next glbd's End-of-RIB or its restart time); the other
sessions that are up are withdrawn first, as in a planned stop. Arming expires, so a stop
long after an aborted upgrade is a planned one again.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from glbd.base.reasons import GracefulStopFallback, StopKind

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: how long ``glbctl graceful-restart`` arms the next stop (s): a package upgrade restarts the
#: unit right after arming it; an operator has a minute to restart
ARM_WINDOW_S = 60.0


@dataclass(frozen=True)
class StopPlan:
    """What the stop does toward each session that is up."""

    kind: StopKind
    #: sessions closed without a NOTIFICATION, nothing withdrawn toward them
    keep: tuple[IPAddress, ...] = ()
    #: sessions whose routes are withdrawn first, and why not kept
    withdraw: Mapping[IPAddress, GracefulStopFallback] = field(default_factory=dict)
    #: why the whole stop is planned (None for a graceful restart)
    fallback: GracefulStopFallback | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": str(self.kind),
            "fallback": None if self.fallback is None else str(self.fallback),
            "keep": [str(p) for p in self.keep],
            "withdraw": {str(p): str(r) for p, r in self.withdraw.items()},
        }


@dataclass
class GracefulRestartArm:
    """Armed or not, until when; the times are the caller's clock (monotonic seconds)."""

    window_s: float = ARM_WINDOW_S
    armed_at: float | None = None
    until: float | None = None
    #: arms since start (a counter)
    arms: int = 0

    def arm(self, now: float) -> None:
        """Arm (again: the window starts over)."""
        self.armed_at, self.until = now, now + self.window_s
        self.arms += 1

    def disarm(self) -> None:
        self.armed_at = self.until = None

    def armed(self, now: float) -> bool:
        return self.until is not None and now < self.until

    def expires_in(self, now: float) -> float | None:
        """Seconds left in the window (None: not armed, or expired)."""
        return round(self.until - now, 1) if self.until is not None and now < self.until else None

    def plan(
        self, now: float, restart_capability: bool, sessions: Mapping[IPAddress, bool]
    ) -> StopPlan:
        """The stop at ``now``. ``sessions``: every session that is up -> whether its peer's
        OPEN offered graceful restart; ``restart_capability``: glbd advertises it."""
        if not self.armed(now):
            why = (
                GracefulStopFallback.NOT_ARMED
                if self.until is None
                else GracefulStopFallback.EXPIRED
            )
            return _planned(sessions, why)
        if not restart_capability:
            return _planned(sessions, GracefulStopFallback.NOT_FULL)
        keep = tuple(p for p, capable in sessions.items() if capable)
        if not keep:
            return _planned(sessions, GracefulStopFallback.NO_CAPABLE_PEER)
        withdraw = {
            p: GracefulStopFallback.PEER_NOT_CAPABLE
            for p, capable in sessions.items()
            if not capable
        }
        return StopPlan(StopKind.GRACEFUL_RESTART, keep, withdraw)

    def snapshot(
        self, now: float, restart_capability: bool, sessions: Mapping[IPAddress, bool]
    ) -> dict[str, Any]:
        """``glbctl status`` ``graceful_restart``: armed, for how long, and what a stop now
        would do (how many sessions it keeps and withdraws)."""
        p = self.plan(now, restart_capability, sessions)
        return {
            "armed": self.armed(now),
            "expires_in_s": self.expires_in(now),
            "next_stop": str(p.kind),
            "fallback": None if p.fallback is None else str(p.fallback),
            "sessions_kept": len(p.keep),
            "sessions_withdrawn": len(p.withdraw),
        }


def _planned(sessions: Mapping[IPAddress, bool], why: GracefulStopFallback) -> StopPlan:
    return StopPlan(StopKind.PLANNED, (), dict.fromkeys(sessions, why), why)
