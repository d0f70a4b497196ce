"""A real Prometheus (Debian's package) for lab tests: started in a lab namespace with a
temporary config and storage, scraping one glbd every second, and its HTTP API."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from glbdlab.netns import Netns

RULES = Path(__file__).resolve().parents[2] / "conf" / "prometheus" / "glbd-alerts.yml"
#: glbd's metrics endpoint on the namespace's loopback
GLBD_METRICS = "127.0.0.1:9477"


def api(ns: Netns, listen: str, path: str, **query: str) -> Any:
    """``/api/v1/PATH`` of the Prometheus listening on ``listen`` in ``ns``: its data."""
    url = f"http://{listen}/api/v1/{path}"
    if query:
        url += "?" + urllib.parse.urlencode(query)
    with ns.entered():
        body = urllib.request.urlopen(url, timeout=5).read()
    doc = json.loads(body)
    assert doc["status"] == "success", doc
    return doc["data"]


def target_up(ns: Netns, listen: str) -> bool:
    """Whether Prometheus has scraped the glbd target successfully."""
    try:
        targets = api(ns, listen, "targets")["activeTargets"]
    except OSError:  # Prometheus not listening yet
        return False
    return any(t["labels"]["job"] == "glbd" and t["health"] == "up" for t in targets)


def start_prometheus(ns: Netns, tmp: Path, rules: Path, listen: str) -> subprocess.Popen[bytes]:
    """Prometheus in ``ns`` on ``listen``, scraping and evaluating ``rules`` every second; its
    log in ``tmp/prometheus.log``. The caller stops it."""
    exe = shutil.which("prometheus")
    if exe is None:
        pytest.skip("prometheus not installed (Debian's prometheus package; bootstrap.sh)")
    cfg = tmp / "prometheus.yml"
    cfg.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files: ['{rules}']\n"
        f"scrape_configs:\n  - job_name: glbd\n    static_configs:\n"
        f"      - targets: ['{GLBD_METRICS}']\n"
    )
    log = open(tmp / "prometheus.log", "wb")  # noqa: SIM115 - handed to the child
    proc = ns.popen(
        [
            exe,
            f"--config.file={cfg}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address={listen}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    return proc
