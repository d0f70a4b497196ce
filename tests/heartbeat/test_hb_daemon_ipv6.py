"""Two real glbd processes (a helper and a load balancer) whose only BGP session is IPv6 exchange
IPv6 heartbeats: the load balancer accepts them (hop limit 255, source = the BGP neighbor's
address, node id = its BGP id) and drops nothing. The link is numbered (glbd's ExaBGP sessions
need a global address today), so this also proves the source pin: without it the kernel would
send from the link-local address and every heartbeat would be a ``wrong_source``."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from glbdlab.netns import Lab

from glbd.cli import glbctl as ctl
from glbd.config.config_quality import HEARTBEAT_GROUP_V6
from tests.glbdtoml import one_neighbour

SP_IF, LF_IF = "sp-lf", "lf-sp"
SP_ADDR, LF_ADDR = "2001:db8:ff::1", "2001:db8:ff::2"


_toml = one_neighbour


def _request(sock: Path, cmd: str) -> Any:
    with contextlib.suppress(ctl.DaemonError, OSError):
        return ctl.request(str(sock), cmd, timeout=2.0)
    return None


def _wait(pred: Any, timeout: float, what: str) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.1)  # poll interval
    raise AssertionError(f"not within {timeout:g} s: {what}")


@pytest.mark.netns
@pytest.mark.slow
def test_two_glbd_exchange_ipv6_heartbeats(netns_lab: Lab, tmp_path: Path) -> None:
    sp, lf = netns_lab.netns("sp"), netns_lab.netns("lf")
    netns_lab.veth(sp, SP_IF, lf, LF_IF, a_addr=f"{SP_ADDR}/64", b_addr=f"{LF_ADDR}/64")
    spine = _toml(tmp_path, "spine", "10.0.0.1", 65100, "helper", LF_ADDR, 65001, SP_ADDR, SP_IF)
    lb = "load-balancer"
    leaf = _toml(tmp_path, "leaf", "10.0.0.2", 65001, lb, SP_ADDR, 65100, LF_ADDR, LF_IF)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for ns, cfg in ((lf, leaf), (sp, spine)):
            log = open(cfg.parent / "glbd.daemon.log", "ab")  # noqa: SIM115 - handed to the child
            procs.append(
                ns.popen([sys.executable, "-m", "glbd", "run", "-c", str(cfg)], stdout=log,
                         stderr=subprocess.STDOUT)
            )  # fmt: skip
            log.close()
        lsock, ssock = leaf.parent / "glbd.sock", spine.parent / "glbd.sock"

        def leaf_rx() -> dict[str, Any] | None:
            for p in procs:
                if p.poll() is not None:
                    raise AssertionError(f"glbd exited with {p.returncode}")
            hb = _request(lsock, "heartbeats")
            rx = hb[0]["receiver"] if hb else None
            return rx if rx and rx["accepted"] >= 5 else None

        rx = _wait(leaf_rx, 90.0, "the leaf accepts IPv6 heartbeats from the spine")
        assert rx["drops"] == {}
        (itf,) = rx["interfaces"]
        assert itf == itf | {
            "ifname": LF_IF,
            "neighbor_address": SP_ADDR,
            "neighbor_id": "10.0.0.1",
        }
        assert rx["senders"][0]["node_id"] == "10.0.0.1"
        # the spine's entry for this link names the leaf as its far end
        assert [e["far_end_id"] for e in rx["senders"][0]["entries"]] == ["10.0.0.2"]
        tx = _request(ssock, "heartbeats")[0]
        assert tx["sockets"] == [SP_IF] and tx["sender"]["sent"] > 0
        assert tx["transport_errors"] == {}
        # the IPv6 group, not the IPv4 one, is joined on the leaf's fabric interface
        maddr = lf.ip("-6", "maddr", "show", "dev", LF_IF).stdout
        assert HEARTBEAT_GROUP_V6 in maddr
        assert "224.0.0.149" not in lf.ip("-4", "maddr", "show", "dev", LF_IF).stdout
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(15)
