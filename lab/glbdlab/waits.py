"""Waiting on conditions in tests (never fixed sleeps)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def until(
    cond: Callable[[], object], timeout: float = 10.0, interval: float = 0.01, what: str = ""
) -> None:
    """Poll ``cond`` on the running loop until it is true; ``timeout`` is a generous upper
    bound on behaviour, not a speed claim."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        if loop.time() > end:
            raise AssertionError(f"{what or 'condition'} not met in {timeout:g} s")
        await asyncio.sleep(interval)  # poll interval
