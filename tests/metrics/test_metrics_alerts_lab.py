"""The shipped alert rules fire on real trouble: a real Prometheus (Debian's package) scrapes a
lab leaf's glbd and evaluates conf/prometheus/glbd-alerts.yml, and its own alerts API shows
``GlbdHeartbeatsStale`` fire while the spine's heartbeats stop (its glbd stopped with SIGSTOP:
BGP stays up, ExaBGP is a process of its own), ``GlbdExabgpRestarted`` when the leaf's ExaBGP
is killed, ``GlbdBfdSessionDown`` while the spine's BFD packets are dropped (nftables egress)
and ``GlbdBgpMaxPrefixesExceeded`` when a neighbour sends more than its max_prefixes; each
clears once its cause is gone (or, for a counter's increase, once the window has passed it).

The rules are a copy with ``for:`` shortened to 2 s and every range window to 20 s (the rules'
expressions are otherwise as shipped), so a test takes seconds, not the shipped minutes.
Prometheus runs in the leaf's namespace with a temporary config and storage and is always
stopped."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from glbdlab.netns import Netns
from glbdlab.nodes import GlbdNode, GlbdOptions, stop_all, wait_until
from glbdlab.topology import Fabric

from tests.metrics.promlab import GLBD_METRICS, RULES, api, start_prometheus, target_up

pytestmark = [pytest.mark.netns, pytest.mark.slow]

PROM = "127.0.0.1:9091"  # on the leaf namespace's loopback, beside glbd's endpoint
TIMEOUT = 60.0


def _firing(ns: Netns, name: str) -> list[dict[str, str]]:
    """The labels of ``name``'s alerts in state firing."""
    alerts = api(ns, PROM, "alerts")["alerts"]
    return [
        a["labels"] for a in alerts if a["labels"]["alertname"] == name and a["state"] == "firing"
    ]


def _fast_rules(tmp: Path) -> Path:
    """The shipped rules with ``for:`` at 2 s and range windows at 20 s (scraped every 1 s)."""
    text = re.sub(r"\bfor: \d+[smh]\b", "for: 2s", RULES.read_text())
    text = re.sub(r"\[\d+[smh]\]", "[20s]", text)
    out = tmp / "glbd-alerts.yml"
    out.write_text(text)
    return out


def _descendants(pid: int) -> Iterator[int]:
    """``pid``'s child processes, their children, ... (from /proc)."""
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            kids = (task / "children").read_text().split()
        except OSError:
            continue
        for k in kids:
            yield int(k)
            yield from _descendants(int(k))


def _exabgp_pid(glbd_pid: int) -> int | None:
    """The ExaBGP process glbd ``glbd_pid`` runs (found among its own descendants only)."""
    for pid in _descendants(glbd_pid):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"server" in argv and any(b"exabgp" in a for a in argv):
            return pid
    return None


@pytest.fixture
def lab(
    lab_fabric: Callable[..., Fabric], tmp_path: Path
) -> Iterator[tuple[Netns, dict[str, GlbdNode], Fabric]]:
    """A leaf and a spine running glbd, and Prometheus scraping the leaf, target up."""
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
        prom = start_prometheus(ns, tmp_path, _fast_rules(tmp_path), PROM)
        wait_until(lambda: target_up(ns, PROM), TIMEOUT, 0.2, what="Prometheus: glbd target up")
        yield ns, nodes, fab
        assert prom.poll() is None, (tmp_path / "prometheus.log").read_text()
    finally:
        if prom is not None:
            prom.terminate()
            try:
                prom.wait(15)
            except subprocess.TimeoutExpired:
                prom.kill()
                prom.wait(5)
        nodes["spine1"].signal(signal.SIGCONT)  # a stopped glbd would not take its SIGTERM
        stop_all(nodes)


def _sender_up(ns: Netns) -> list[dict[str, Any]]:
    try:
        return list(api(ns, PROM, "query", query="glbd_heartbeat_sender_up == 1")["result"])
    except OSError:
        return []


def test_heartbeats_stale_fires_while_a_spines_heartbeats_stop_and_clears(
    lab: tuple[Netns, dict[str, GlbdNode], Fabric],
) -> None:
    ns, nodes, _fab = lab
    up = wait_until(lambda: _sender_up(ns), TIMEOUT, 0.2, what="glbd_heartbeat_sender_up == 1")
    neighbor = up[0]["metric"]["neighbor"]
    assert not _firing(ns, "GlbdHeartbeatsStale")
    nodes["spine1"].signal(signal.SIGSTOP)  # no heartbeats; ExaBGP keeps the session up
    try:
        fired = wait_until(
            lambda: _firing(ns, "GlbdHeartbeatsStale"),
            TIMEOUT,
            0.2,
            what="GlbdHeartbeatsStale firing",
        )
        assert [a["neighbor"] for a in fired] == [neighbor]
        assert fired[0]["interface"]
    finally:
        nodes["spine1"].signal(signal.SIGCONT)
    wait_until(
        lambda: not _firing(ns, "GlbdHeartbeatsStale"),
        TIMEOUT,
        0.2,
        what="GlbdHeartbeatsStale cleared",
    )
    assert _sender_up(ns)


def test_exabgp_restarted_fires_when_exabgp_is_killed_and_clears(
    lab: tuple[Netns, dict[str, GlbdNode], Fabric],
) -> None:
    ns, nodes, _fab = lab
    leaf = nodes["leaf1"]
    assert leaf.proc is not None
    glbd_pid = leaf.proc.pid
    pid = wait_until(lambda: _exabgp_pid(glbd_pid), TIMEOUT, 0.2, what="the leaf's ExaBGP")
    assert not _firing(ns, "GlbdExabgpRestarted")
    os.kill(pid, signal.SIGKILL)
    fired = wait_until(
        lambda: _firing(ns, "GlbdExabgpRestarted"),
        TIMEOUT,
        0.2,
        what="GlbdExabgpRestarted firing",
    )
    assert fired[0]["instance"] == GLBD_METRICS
    # ExaBGP is back (another process) and, once the window passes the restart, it clears
    wait_until(
        lambda: _exabgp_pid(glbd_pid) not in (None, pid), TIMEOUT, 0.2, what="ExaBGP restarted"
    )
    wait_until(
        lambda: not _firing(ns, "GlbdExabgpRestarted"),
        TIMEOUT,
        0.2,
        what="GlbdExabgpRestarted cleared",
    )


def test_bfd_session_down_fires_while_bfd_is_silenced_and_clears(
    lab: tuple[Netns, dict[str, GlbdNode], Fabric],
) -> None:
    ns, _nodes, fab = lab
    spine = fab.addr("spine1", "leaf1")

    def bfd_up() -> bool:
        res = api(ns, PROM, "query", query="glbd_bfd_up == 1")["result"]
        return any(r["metric"]["peer"] == spine for r in res)

    wait_until(bfd_up, TIMEOUT, 0.2, what="glbd_bfd_up == 1 for spine1")
    assert not _firing(ns, "GlbdBfdSessionDown")
    port = fab.ifname("spine1", "leaf1")
    fab.ns("spine1").drop_egress(port, "udp dport 3784")  # the link stays up, BFD goes silent
    try:
        fired = wait_until(
            lambda: _firing(ns, "GlbdBfdSessionDown"),
            TIMEOUT,
            0.2,
            what="GlbdBfdSessionDown firing",
        )
        assert [a["peer"] for a in fired] == [spine]
    finally:
        fab.ns("spine1").undrop_egress(port)
    wait_until(
        lambda: not _firing(ns, "GlbdBfdSessionDown"),
        TIMEOUT,
        0.2,
        what="GlbdBfdSessionDown cleared",
    )


def test_max_prefixes_exceeded_fires_when_a_neighbour_sends_too_many_and_clears(
    lab_fabric: Callable[..., Fabric], tmp_path: Path
) -> None:
    """leaf1 takes at most one prefix from spine1 ("warn": counted, routes kept); leaf2 then
    originates a second one, which spine1 passes on."""
    fab = lab_fabric(spines=1, leaves=2, hosts=False)
    opts = GlbdOptions(bfd_interval_ms=100, extra={"leaf": f'[metrics]\nlisten = "{GLBD_METRICS}"'})
    nodes = {n: GlbdNode(fab, n, tmp_path, opts) for n in ("leaf1", "leaf2", "spine1")}
    cfg = nodes["leaf1"].config
    cfg.write_text(
        cfg.read_text().replace(
            'description = "spine1"\n',
            'description = "spine1"\nmax_prefixes = 1\nmax_prefixes_action = "warn"\n',
        )
    )
    ns = fab.ns("leaf1")
    prom: subprocess.Popen[bytes] | None = None
    try:
        for n in nodes.values():
            n.start()
        for n in nodes.values():
            n.wait_ready()
        prom = start_prometheus(ns, tmp_path, _fast_rules(tmp_path), PROM)
        wait_until(lambda: target_up(ns, PROM), TIMEOUT, 0.2, what="Prometheus: glbd target up")

        def prefixes_in() -> float:
            res = api(ns, PROM, "query", query="sum(glbd_bgp_prefixes_in)")["result"]
            return float(res[0]["value"][1]) if res else 0.0

        wait_until(lambda: prefixes_in() == 1, TIMEOUT, 0.2, what="leaf2's prefix at leaf1")
        assert not _firing(ns, "GlbdBgpMaxPrefixesExceeded")
        leaf2 = nodes["leaf2"]
        text = leaf2.config.read_text()
        leaf2.config.write_text(
            re.sub(r'originate = \["', 'originate = ["198.51.100.0/24", "', text)
        )
        reload = leaf2.request("reload")
        assert reload["ok"], reload
        fired = wait_until(
            lambda: _firing(ns, "GlbdBgpMaxPrefixesExceeded"),
            TIMEOUT,
            0.2,
            what="GlbdBgpMaxPrefixesExceeded firing",
        )
        assert [a["peer"] for a in fired] == [fab.addr("spine1", "leaf1")]
        assert fired[0]["interface"] == fab.ifname("leaf1", "spine1")
        assert prefixes_in() == 2  # "warn": the routes are kept
        wait_until(
            lambda: not _firing(ns, "GlbdBgpMaxPrefixesExceeded"),
            TIMEOUT,
            0.2,
            what="GlbdBgpMaxPrefixesExceeded cleared",
        )
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
