"""The BFD engine process's stderr lines: plain, or with the ``<N>`` syslog priority journald
stores when the daemon asks for it (its own lines carry the same prefixes then)."""

from __future__ import annotations

import io
import logging
import re

import pytest

from bfd import log as bfdlog
from bfd.engine import BfdEngine

#: an invalid SCHED_FIFO priority: the engine process logs a warning and runs without it
BAD_RT_PRIORITY = 1000


@pytest.fixture(autouse=True)
def _restore_logging(restore_logging: None) -> None:
    """Every test here reconfigures logging: conftest's restore_logging puts it back."""


def test_each_line_of_a_record_starts_with_its_syslog_priority() -> None:
    out = io.StringIO()
    bfdlog.setup(logging.DEBUG, priorities=True, stream=out)
    log = logging.getLogger("bfd.engine.test")
    log.critical("c")
    log.error("e")
    log.warning("w")
    log.info("i")
    log.debug("d")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("failed")
    lines = out.getvalue().splitlines()
    assert lines[:5] == [
        "<2>bfd-engine: CRITICAL c",
        "<3>bfd-engine: ERROR e",
        "<4>bfd-engine: WARNING w",
        "<6>bfd-engine: INFO i",
        "<7>bfd-engine: DEBUG d",
    ]
    # a traceback is several lines, each a journal record: every one keeps the priority
    assert len(lines) > 6 and all(line.startswith("<3>") for line in lines[5:])
    assert lines[-1] == "<3>RuntimeError: boom"


def test_without_priorities_the_lines_are_plain() -> None:
    out = io.StringIO()
    bfdlog.setup(logging.WARNING, stream=out)
    logging.getLogger("bfd.engine.test").warning("w")
    assert out.getvalue() == "bfd-engine: WARNING w\n"


def _engine_warning(capfd: pytest.CaptureFixture[str], log_priority: bool) -> str:
    """The warning line of an engine process asked for an impossible real-time priority."""
    eng = BfdEngine(
        lambda ev: None, mode="process", rt_priority=BAD_RT_PRIORITY, log_priority=log_priority
    )
    eng.start()
    try:
        eng.snapshot()  # a round trip: the process is past its set-up, the warning written
    finally:
        eng.stop()
    err = capfd.readouterr().err
    lines = [ln for ln in err.splitlines() if "SCHED_FIFO" in ln]
    assert len(lines) == 1, err
    return lines[0]


def test_engine_process_prefixes_its_lines_when_the_daemon_asks(
    capfd: pytest.CaptureFixture[str],
) -> None:
    line = _engine_warning(capfd, log_priority=True)
    assert re.fullmatch(rf"<4>bfd-engine: WARNING bfd: SCHED_FIFO {BAD_RT_PRIORITY} .*", line)


def test_engine_process_lines_are_plain_by_default(capfd: pytest.CaptureFixture[str]) -> None:
    line = _engine_warning(capfd, log_priority=False)
    assert line.startswith(f"bfd-engine: WARNING bfd: SCHED_FIFO {BAD_RT_PRIORITY} ")
