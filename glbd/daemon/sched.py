"""The calling thread's scheduling policy: SCHED_RR at a priority, or SCHED_OTHER.

Round-robin, not FIFO, so two real-time glbds on one CPU take turns; with
SCHED_RESET_ON_FORK, so the processes glbd starts (ExaBGP, its bridge, the BFD engine, which
sets its own) begin with normal scheduling.
"""

from __future__ import annotations

import os

from glbd.daemon.loopprio import Policy

__all__ = ["apply"]


def apply(policy: Policy, priority: int) -> None:
    """Set the calling thread's policy (OSError if the kernel refuses)."""
    if policy is Policy.REALTIME:
        os.sched_setscheduler(0, os.SCHED_RR | os.SCHED_RESET_ON_FORK, os.sched_param(priority))
    else:
        os.sched_setscheduler(0, os.SCHED_OTHER | os.SCHED_RESET_ON_FORK, os.sched_param(0))
