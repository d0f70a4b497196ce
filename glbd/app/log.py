"""Logging set-up: structlog, human console output on a TTY, JSON lines otherwise.

JSON lines (one object per line, ``timestamp``/``level``/``event`` plus bound keys) are what
journald and log shippers want; the console renderer is for a person at a terminal. The stdlib
``logging`` records of ``bfd`` and ``heartbeat`` (which must not import structlog) are routed
through the same renderer.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal, TextIO

import structlog

Format = Literal["auto", "console", "json"]

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def setup(level: str = "info", fmt: Format = "auto", stream: TextIO | None = None) -> None:
    """Configure structlog and stdlib logging once for the process."""
    out = stream if stream is not None else sys.stderr
    lvl = _LEVELS.get(level.lower(), logging.INFO)
    use_json = fmt == "json" or (fmt == "auto" and not out.isatty())
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.stdlib.ExtraAdder(),
    ]
    renderer: structlog.typing.Processor
    if use_json:
        renderer = structlog.processors.JSONRenderer(sort_keys=False)
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
