"""A real Prometheus (Debian's package) scrapes a lab glbd: the target comes up, glbd's metrics
are queryable through Prometheus's HTTP API, and the alert rules load. Prometheus runs in the
leaf's namespace with a temporary config and storage and is always stopped."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from glbdlab.netns import Netns
from glbdlab.nodes import GlbdNode, GlbdOptions, stop_all, wait_until
from glbdlab.topology import Fabric

from glbd import __version__
from tests.metrics.promlab import GLBD_METRICS, RULES, api, start_prometheus, target_up

pytestmark = [pytest.mark.netns, pytest.mark.slow]

PROM = "127.0.0.1:9090"  # on the leaf namespace's loopback, beside glbd's endpoint
TIMEOUT = 60.0


def _query(ns: Netns, expr: str) -> list[dict[str, Any]]:
    try:
        return list(api(ns, PROM, "query", query=expr)["result"])
    except OSError:  # Prometheus not listening yet
        return []


def test_prometheus_scrapes_a_lab_glbd(lab_fabric: Callable[..., Fabric], tmp_path: Path) -> None:
    fab = lab_fabric(spines=1, leaves=1, hosts=False)
    opts = GlbdOptions(bfd_interval_ms=100, extra={"leaf": f'[metrics]\nlisten = "{GLBD_METRICS}"'})
    nodes = {n: GlbdNode(fab, n, tmp_path, opts) for n in ("leaf1", "spine1")}
    prom: subprocess.Popen[bytes] | None = None
    try:
        for n in nodes.values():
            n.start()
        for n in nodes.values():
            n.wait_ready()
        ns = fab.ns("leaf1")
        prom = start_prometheus(ns, tmp_path, RULES, PROM)
        wait_until(lambda: target_up(ns, PROM), TIMEOUT, 0.2, what="Prometheus: glbd target up")
        spine = fab.addr("spine1", "leaf1")
        bfd = wait_until(
            lambda: [r for r in _query(ns, "glbd_bfd_up == 1") if r["metric"]["peer"] == spine],
            TIMEOUT,
            0.2,
            what="glbd_bfd_up == 1 for spine1 in Prometheus",
        )
        assert bfd[0]["metric"]["job"] == "glbd"
        build = _query(ns, "glbd_build_info")
        assert [r["metric"]["version"] for r in build] == [__version__]
        for expr in (
            "glbd_heartbeat_to_fib_seconds_count",
            "glbd_fib_sync_duration_seconds_bucket",
            "glbd_config_last_reload_successful == 1",
            "process_resident_memory_bytes",
        ):
            assert _query(ns, expr), expr
        groups = api(ns, PROM, "rules")["groups"]
        rules = [r for g in groups for r in g["rules"]]
        assert len(rules) >= 10 and all(r["health"] != "err" for r in rules), rules
        assert prom.poll() is None, (tmp_path / "prometheus.log").read_text()
    finally:
        if prom is not None:
            prom.terminate()
            try:
                prom.wait(15)
            except subprocess.TimeoutExpired:
                prom.kill()
                prom.wait(5)
        stop_all(nodes)
