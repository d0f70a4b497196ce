"""When a periodic reconcile of kernel attachments (the flowlet program, the foreign-load
counter) runs its full check, which starts processes (``ip``, ``tc`` per interface).

Pure: the caller calls :meth:`Recheck.tick` once per reconcile period and reports the full
check's outcome with :meth:`Recheck.done`. While the checks succeed, a tick asks for one only
when something looks moved (an interface appeared or went: the caller's cheap test) or every
``every`` ticks (a filter someone removed is noticed too). After a failure the check is
retried after 1, 1, 2, 4 ... up to ``max_wait`` ticks: a machine that cannot run it (no
bpftool, no capability) does not start tools every few seconds.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["FULL_CHECK_EVERY", "MAX_WAIT", "Recheck", "retry_ticks"]

#: reconcile ticks between full checks while nothing looks moved (a minute at 5 s)
FULL_CHECK_EVERY = 12
#: the longest wait between retries of a failing check, in ticks (~5 minutes at 5 s)
MAX_WAIT = 64


def retry_ticks(misses: int, max_wait: int = MAX_WAIT) -> int:
    """Ticks to the next check after ``misses`` failed checks in a row: 1 while they
    succeed, then 1, 2, 4 ... up to ``max_wait``."""
    return min(max_wait, 1 << (misses - 1)) if misses > 0 else 1


class Recheck:
    """The full-check schedule of one reconcile loop."""

    def __init__(self, every: int = FULL_CHECK_EVERY, max_wait: int = MAX_WAIT) -> None:
        if every < 1 or max_wait < 1:
            raise ValueError("need every >= 1 and max_wait >= 1")
        self.every = every
        self.max_wait = max_wait
        self.ticks = 0
        #: failed checks in a row
        self.misses = 0
        self._retry_at = 0

    @property
    def failing(self) -> bool:
        return self.misses > 0

    def tick(self, suspect: Callable[[], bool]) -> bool:
        """One reconcile period: whether the full check is due. ``suspect`` (an interface
        moved, an error seen meanwhile) is asked only when nothing else decides."""
        self.ticks += 1
        if self.misses:
            return self.ticks >= self._retry_at
        return self.ticks % self.every == 0 or suspect()

    def done(self, ok: bool) -> None:
        """The outcome of the full check :meth:`tick` asked for."""
        self.misses = 0 if ok else self.misses + 1
        self._retry_at = self.ticks + retry_ticks(self.misses, self.max_wait)
