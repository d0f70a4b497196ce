"""ExaBGP's log outlives glbd's runtime directory (systemd's LogsDirectory=), and the
``exabgp_lost`` record quotes its last lines."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from glbd.bgp.exabgp import ExabgpNeighbor, ExabgpParams, ExabgpSupervisor, tail_lines

# writes to the log file glbd names in its environment and to stderr, then dies like a crash
CRASHING_EXABGP = """
import os, sys
with open(os.environ["exabgp.log.destination"], "a") as f:
    f.write("".join(f"log line {i}\\n" for i in range(30)) + "peer 192.0.2.1 closed\\n")
print("Traceback (most recent call last):\\nRuntimeError: reactor died", file=sys.stderr)
sys.exit(3)
"""


async def test_log_kept_in_logs_directory_and_quoted_when_exabgp_is_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "crash.py"
    fake.write_text(CRASHING_EXABGP)
    logs = tmp_path / "logs"
    logs.mkdir(mode=0o750)
    monkeypatch.setenv("LOGS_DIRECTORY", str(logs))
    lost = asyncio.Event()
    params = ExabgpParams(
        "10.0.0.2",
        65002,
        (ExabgpNeighbor("192.0.2.1", "192.0.2.2", 65001),),
        exabgp=(sys.executable, str(fake)),
        connect_timeout_s=0.1,  # the fake never connects its bridge
        backoff_initial_s=30.0,  # one death is enough
    )
    sup = ExabgpSupervisor(
        params, netns=None, on_line=lambda s: None, on_lost=lost.set, on_ready=lambda: None
    )
    with capture_logs() as records:
        await sup.start()
        await asyncio.wait_for(lost.wait(), 30)
        await sup.stop()
    assert sup.log_path == logs / "exabgp.log"
    rec = next(r for r in records if r["event"] == "exabgp_lost")
    assert rec["rc"] == 3 and rec["log"] == str(logs / "exabgp.log")
    assert rec["log_tail"][-1] == "peer 192.0.2.1 closed" and len(rec["log_tail"]) == 10
    assert rec["stdout_tail"][-1] == "RuntimeError: reactor died"
    assert not sup.dir.exists()  # the runtime directory went with the process ...
    assert "reactor died" in (logs / "exabgp.stdout").read_text()  # ... the logs did not
    assert (logs / "exabgp.log").exists()


def test_tail_lines_reads_only_the_end(tmp_path: Path) -> None:
    f = tmp_path / "big.log"
    f.write_text("".join(f"line {i}\n" for i in range(10_000)))
    assert tail_lines(f, 3) == ["line 9997", "line 9998", "line 9999"]
    assert tail_lines(f, 5000, max_bytes=100)[0].startswith("line 99")  # no partial line
    assert tail_lines(tmp_path / "missing") == []
