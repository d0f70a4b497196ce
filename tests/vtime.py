"""Running a coroutine in virtual time: an asyncio loop whose clock jumps to the next timer
whenever nothing is ready (looptime), so a test of a timer-driven runner sees the same order of
events however busy the machine is. Real sockets still work; only waiting is skipped."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import looptime

T = TypeVar("T")


def run(main: Callable[[], Coroutine[Any, Any, T]], *, limit_s: float = 600.0) -> T:
    """``main()`` to its end on a fresh loop starting at virtual time 0; fails (LoopTimeoutError)
    if it has not ended by ``limit_s`` of virtual time."""
    loop = looptime.new_event_loop(start=0.0, end=limit_s)
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()
