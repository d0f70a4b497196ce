"""Waits the BFD engine tests share: for a value to satisfy a condition, and for an engine
event. Timeouts are upper bounds on behaviour, never speed assertions."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from typing import TypeVar

from bfd.engine import BfdEvent

T = TypeVar("T")


def until(get: Callable[[], T], cond: Callable[[T], bool], what: str, timeout: float = 5.0) -> T:
    """Poll ``get()`` until ``cond`` holds for its value; returns that value."""
    deadline = time.monotonic() + timeout
    while not cond(value := get()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout}s: {value}"
        time.sleep(0.02)  # polling interval of the condition, not a wait for an outcome
    return value


def next_event(
    events: queue.Queue[BfdEvent],
    want: Callable[[BfdEvent], bool],
    timeout: float,
    context: Callable[[], object],
) -> BfdEvent:
    """The next event from ``events`` that ``want`` accepts (the others are dropped);
    ``context()`` goes into the failure message."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        try:
            ev = events.get(timeout=left)
        except queue.Empty:
            break
        if want(ev):
            return ev
    raise AssertionError(f"no such event in {timeout}s: {context()}")
