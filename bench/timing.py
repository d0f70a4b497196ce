"""Shared by the benchmark scripts (run as ``python bench/NAME.py``, so this is importable)."""

from __future__ import annotations

import time
from collections.abc import Callable


def rate(
    fn: Callable[[], object], min_time: float = 0.5, clock: Callable[[], float] = time.process_time
) -> float:
    """Calls of ``fn`` per second of ``clock`` (CPU time by default), over >= ``min_time``."""
    n = 0
    t0 = clock()
    while True:
        for _ in range(1000):
            fn()
        n += 1000
        dt = clock() - t0
        if dt >= min_time:
            return n / dt
