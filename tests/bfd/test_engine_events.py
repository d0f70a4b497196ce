"""An engine event as it crosses the pipe: its reason arrives as the shared enum, not a string."""

from __future__ import annotations

import pytest

from bfd.engine import BfdEvent
from bfd.packet import Diag, State
from bfd.reasons import StateChangeReason


def _wire(reason: str) -> tuple:  # type: ignore[type-arg]
    return ("eth0", "192.0.2.1", int(State.UP), int(State.DOWN),
            int(Diag.CONTROL_DETECTION_TIME_EXPIRED), reason, True, False, 0, 7, 1.0, 0.9,
            True)  # fmt: skip


def test_the_reason_is_the_enum_member() -> None:
    ev = BfdEvent.from_wire(_wire("detection_timeout"))
    assert ev.reason is StateChangeReason.DETECTION_TIMEOUT
    assert ev.new is State.DOWN and ev.failure and ev.failover_sent


def test_a_reason_the_daemon_does_not_know_is_refused() -> None:
    with pytest.raises(ValueError):
        BfdEvent.from_wire(_wire("no_such_reason"))
