"""A BFD engine that dies is restarted with its sessions, and a link that dies meanwhile is still
found by BFD, not by BGP's hold time. Real glbd daemons on a 1-spine x 1-leaf fabric of
namespaces; the engine is killed with SIGKILL, the link silenced with nftables (it stays up)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from glbdlab.nodes import GlbdNode, GlbdOptions, stop_all, wait_until
from glbdlab.topology import Fabric

pytestmark = [pytest.mark.netns, pytest.mark.slow]

TIMEOUT = 60.0
#: BGP's hold time in this lab: every wait for a BFD-driven outcome below is shorter, so only
#: BFD (or the restart's confirmation) can satisfy it
HOLD_S = 30


def _bfd(node: GlbdNode, peer: str) -> dict[str, Any]:
    return next(r for r in node.request("bfd") if r["peer"] == peer)


def _bfd_up(node: GlbdNode, peer: str) -> bool:
    return str(_bfd(node, peer)["state"]).lower() == "up"


def _bgp_state(node: GlbdNode, peer: str) -> str:
    return str(next(r for r in node.request("neighbors") if r["peer"] == peer)["state"])


def _engine_pid(node: GlbdNode) -> int | None:
    eng = node.request("status").get("bfd_engine") or {}
    pid = eng.get("pid")
    return int(pid) if pid else None


def _counters(node: GlbdNode) -> dict[str, int]:
    return dict(node.request("counters")["quality"])


@pytest.fixture
def pair(
    lab_fabric: Callable[..., Fabric], tmp_path: Path
) -> Any:  # (fabric, leaf, spine, spine's address)
    fab = lab_fabric(spines=1, leaves=1, hosts=False)
    opts = GlbdOptions(bfd_interval_ms=50, hold_time=HOLD_S)
    nodes = {n: GlbdNode(fab, n, tmp_path, opts) for n in ("leaf1", "spine1")}
    try:
        for n in nodes.values():
            n.start()
        for n in nodes.values():
            n.wait_ready()
        leaf, spine = nodes["leaf1"], nodes["spine1"]
        peer = fab.addr("spine1", "leaf1")
        wait_until(
            lambda: _bgp_state(leaf, peer) == "up" and _bfd_up(leaf, peer),
            TIMEOUT,
            what="BGP + BFD with spine1",
        )
        yield fab, leaf, spine, peer
    finally:
        stop_all(nodes)


def test_a_killed_engine_comes_back_and_then_finds_a_dead_link(pair: Any) -> None:
    fab, leaf, _spine, peer = pair
    old = _engine_pid(leaf)
    assert old is not None and old != leaf.proc.pid  # process mode: an engine of its own
    os.kill(old, signal.SIGKILL)
    wait_until(
        lambda: _engine_pid(leaf) not in (None, old) and _bfd_up(leaf, peer),
        TIMEOUT,
        what="a new engine with the session Up again",
    )
    c = _counters(leaf)
    assert c["bfd_engine_exits"] == 1 and c["bfd_engine_restarts"] == 1
    assert leaf.events("bfd_engine_exited") and leaf.events("bfd_engine_restarted")

    failovers = c["fib_fast_failovers"]
    fab.drop("leaf1", "spine1")  # silent: the link stays up, nothing crosses it
    wait_until(
        lambda: _counters(leaf)["fib_fast_failovers"] > failovers,
        HOLD_S / 2,
        what="the new engine's detection taking spine1 out (well before the hold time)",
    )
    row = _bfd(leaf, peer)
    assert str(row["state"]).lower() == "down", row
    assert row["last_down_reason"] == "detection_timeout", row


def test_a_session_that_does_not_come_back_after_a_restart_is_down(pair: Any) -> None:
    """The link dies while the engine is dead: the restarted session never comes Up, and the
    peer counts as BFD-Down once the confirmation time is over, not at BGP's hold time."""
    fab, leaf, _spine, peer = pair
    old = _engine_pid(leaf)
    assert old is not None
    fab.drop("leaf1", "spine1")
    os.kill(old, signal.SIGKILL)
    wait_until(
        lambda: _counters(leaf)["bfd_engine_unconfirmed"] == 1,
        HOLD_S / 2,
        what="the session taken as Down after the restart",
    )
    c = _counters(leaf)
    assert c["bfd_engine_restarts"] == 1 and c["fib_fast_failovers"] >= 1
    assert _engine_pid(leaf) not in (None, old)
    wait_until(
        lambda: _bgp_state(leaf, peer) != "up",
        HOLD_S / 2,
        what="BGP with spine1 torn down for BFD",
    )
    assert [e for e in leaf.events("bfd_state") if e.get("reason") == "engine_restart_unconfirmed"]
