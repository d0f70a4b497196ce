"""Logging: JSON lines when not on a TTY (journald), stdlib loggers of bfd/heartbeat included."""

from __future__ import annotations

import io
import json
import logging
import os
from pathlib import Path

import pytest
import structlog

from glbd.daemon import log as logmod


@pytest.fixture(autouse=True)
def _restore_logging(restore_logging: None) -> None:
    """Every test here reconfigures logging: conftest's restore_logging puts it back."""


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


def test_journal_format_prefixes_each_line_with_its_syslog_priority() -> None:
    out = io.StringIO()
    logmod.setup("debug", "journal", stream=out)
    structlog.get_logger("glbd.test").error("exabgp_lost", rc=1)
    structlog.get_logger("glbd.test").info("bgp_peer_up")
    structlog.get_logger("glbd.test").debug("tick")
    logging.getLogger("bfd.engine").warning("session down")
    try:
        raise RuntimeError("boom\nsecond line")
    except RuntimeError:
        structlog.get_logger("glbd.test").exception("handler_failed")
    lines = out.getvalue().splitlines()
    assert [line[:3] for line in lines] == ["<3>", "<6>", "<7>", "<4>", "<3>"]
    recs = [json.loads(line[3:]) for line in lines]
    assert recs[0]["event"] == "exabgp_lost" and recs[0]["rc"] == 1
    assert "second line" in recs[4]["exception"]  # the traceback stays in its record


def test_auto_is_journal_when_stderr_is_journald_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open(tmp_path / "stream", "w+") as f:
        st = os.fstat(f.fileno())
        monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino}")
        logmod.setup("info", "auto", stream=f)
        structlog.get_logger("glbd.test").error("reload_rejected")
        # another file (stderr redirected elsewhere by the operator) is not the journal
        with open(tmp_path / "other", "w+") as g:
            logmod.setup("info", "auto", stream=g)
            structlog.get_logger("glbd.test").error("reload_rejected")
            g.flush()
            other = (tmp_path / "other").read_text()
        f.flush()
        first = (tmp_path / "stream").read_text()
    assert first.startswith("<3>{") and json.loads(first[3:])["event"] == "reload_rejected"
    assert other.startswith("{")


def test_child_processes_are_told_to_prefix_when_glbd_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The BFD engine process writes to glbd's stderr: it prefixes its lines exactly when glbd's
    own lines carry priorities."""
    logmod.setup("info", "journal", stream=io.StringIO())
    assert logmod.priority_prefixes()
    logmod.setup("info", "json", stream=io.StringIO())
    assert not logmod.priority_prefixes()
    with open(tmp_path / "stream", "w+") as f:
        st = os.fstat(f.fileno())
        monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino}")
        logmod.setup("info", "auto", stream=f)
        assert logmod.priority_prefixes()
