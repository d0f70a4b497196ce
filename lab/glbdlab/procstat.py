"""CPU time of processes from /proc, for benchmarks that charge a router for its processes."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def cpu_ticks(pid: int) -> int:
    """utime + stime of ``pid``, every thread, in clock ticks (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0
    return int(fields[11]) + int(fields[12])


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (children of every thread)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{p}/task"):
                with contextlib.suppress(OSError):
                    kids = Path(f"/proc/{p}/task/{task}/children").read_text().split()
                    todo += [int(x) for x in kids]
    return out
