"""Log lines of the BFD engine process, optionally with journald priorities.

The engine process writes to the stderr it inherits from the daemon. Under systemd that is the
journal, which stores every line at priority info unless the line starts with ``<N>``, the
syslog priority (sd-daemon(3)): then it strips the prefix and stores N. The daemon asks for the
prefixes (``--log-priority``) when its own lines carry them.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

__all__ = ["FORMAT", "PriorityFormatter", "priority", "setup"]

#: the engine's lines, told apart from the daemon's by their first word
FORMAT = "bfd-engine: %(levelname)s %(message)s"


def priority(levelno: int) -> int:
    """The syslog priority of a :mod:`logging` level (err 3, warning 4, info 6, debug 7)."""
    if levelno >= logging.CRITICAL:
        return 2
    if levelno >= logging.ERROR:
        return 3
    if levelno >= logging.WARNING:
        return 4
    if levelno >= logging.INFO:
        return 6
    return 7


class PriorityFormatter(logging.Formatter):
    """Each line of a record (a traceback's too: journald reads one record per line) starts with
    the record's ``<N>`` syslog priority."""

    def format(self, record: logging.LogRecord) -> str:
        prefix = f"<{priority(record.levelno)}>"
        return "\n".join(prefix + line for line in super().format(record).splitlines())


def setup(
    level: int = logging.WARNING, *, priorities: bool = False, stream: TextIO | None = None
) -> None:
    """The engine process's logging: one handler on the root logger, ``FORMAT`` lines on
    ``stream`` (stderr), with priority prefixes when ``priorities``."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(PriorityFormatter(FORMAT) if priorities else logging.Formatter(FORMAT))
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level)
