"""Logging: JSON lines when not on a TTY (journald), stdlib loggers of bfd/heartbeat included."""

from __future__ import annotations

import io
import json
import logging

import pytest
import structlog

from glbd.app import log as logmod


@pytest.fixture(autouse=True)
def _restore_logging() -> object:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield None
    for h in list(root.handlers):
        root.removeHandler(h)
    for h in handlers:
        root.addHandler(h)
    root.setLevel(level)
    structlog.reset_defaults()


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_json_lines_off_a_tty_with_stdlib_records_and_level() -> None:
    out = io.StringIO()
    logmod.setup("info", "auto", stream=out)
    structlog.get_logger("glbd.test").info("bgp_peer_up", peer="198.18.1.0")
    structlog.get_logger("glbd.test").debug("hidden")
    logging.getLogger("bfd.engine").warning("session %s down", "198.18.1.0")
    recs = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [r["event"] for r in recs] == ["bgp_peer_up", "session 198.18.1.0 down"]
    assert recs[0]["peer"] == "198.18.1.0" and recs[0]["level"] == "info"
    assert recs[1]["level"] == "warning" and "timestamp" in recs[1]


def test_console_on_a_tty_and_forced_json() -> None:
    tty = Tty()
    logmod.setup("debug", "auto", stream=tty)
    structlog.get_logger("glbd.test").debug("hello", x=1)
    line = tty.getvalue().strip()
    assert "hello" in line and not line.startswith("{")
    forced = Tty()
    logmod.setup("info", "json", stream=forced)
    structlog.get_logger("glbd.test").info("hello")
    assert json.loads(forced.getvalue())["event"] == "hello"
