"""Logging set-up: structlog, human console output on a TTY, JSON lines otherwise.

JSON lines (one object per line, ``timestamp``/``level``/``event`` plus bound keys) are what
log shippers want; the console renderer is for a person at a terminal. When stderr is the
journal (systemd sets ``JOURNAL_STREAM`` to its device:inode) or the format is ``journal``,
each JSON line starts with its syslog priority (``<3>`` for an error), which journald strips
and stores as the record's priority, so ``journalctl -p err`` finds glbd's errors. The stdlib
``logging`` records of ``bfd`` and ``heartbeat`` (which must not import structlog) are routed
through the same renderer; the BFD engine's own process is told to prefix its lines too
(:func:`priority_prefixes`).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, Literal, TextIO

import structlog

Format = Literal["auto", "console", "json", "journal"]

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


#: syslog priorities (sd-daemon(3) prefixes) of structlog's level names
PRIORITY = {"debug": 7, "info": 6, "warning": 4, "error": 3, "critical": 2, "exception": 3}

_prefixes = False  # what the last setup() chose
_level = "info"  # what the last setup() or set_level() chose


def priority_prefixes() -> bool:
    """Whether glbd's lines start with their ``<N>`` syslog priority (stderr is the journal or
    the format is ``journal``): child processes writing to the same stderr do the same."""
    return _prefixes


def stream_is_journal(out: TextIO) -> bool:
    """True when ``out`` is the stream systemd connected to journald (``JOURNAL_STREAM``)."""
    dev, _, ino = os.environ.get("JOURNAL_STREAM", "").partition(":")
    try:
        st = os.fstat(out.fileno())
    except (OSError, ValueError, AttributeError):  # no file behind it (a StringIO)
        return False
    return f"{st.st_dev}:{st.st_ino}" == f"{dev}:{ino}"


class JournalRenderer:
    """A JSON line with its ``<N>`` syslog-priority prefix (one line: JSON escapes newlines,
    so a traceback stays in its record and keeps its priority)."""

    def __init__(self) -> None:
        self._json = structlog.processors.JSONRenderer(sort_keys=False)

    def __call__(self, logger: Any, name: str, event_dict: structlog.typing.EventDict) -> str:
        prio = PRIORITY.get(str(event_dict.get("level", "info")), 6)
        line = self._json(logger, name, event_dict)
        return f"<{prio}>{line.decode() if isinstance(line, bytes) else line}"


def set_level(level: str) -> None:
    """A new level (a reload), the renderer and stream kept; a ``--log-level`` given at start
    holds until then."""
    global _level
    lvl = _LEVELS.get(level.lower(), logging.INFO)
    _level = logging.getLevelName(lvl).lower()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(lvl))
    logging.getLogger().setLevel(lvl)


def current_level() -> str:
    """The level in force (``glbctl log-level`` reports it before and after a change)."""
    return _level


def setup(level: str = "info", fmt: Format = "auto", stream: TextIO | None = None) -> None:
    """Configure structlog and stdlib logging once for the process."""
    out = stream if stream is not None else sys.stderr
    lvl = _LEVELS.get(level.lower(), logging.INFO)
    global _prefixes, _level
    _level = logging.getLevelName(lvl).lower()
    journal = fmt == "journal" or (fmt == "auto" and stream_is_journal(out))
    _prefixes = journal
    use_json = journal or fmt == "json" or (fmt == "auto" and not out.isatty())
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.stdlib.ExtraAdder(),
    ]
    renderer: structlog.typing.Processor
    if use_json:
        renderer = JournalRenderer() if journal else structlog.processors.JSONRenderer()
        shared.append(structlog.processors.format_exc_info)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=out.isatty())
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        cache_logger_on_first_use=False,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(lvl)
