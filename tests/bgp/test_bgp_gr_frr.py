"""Graceful restart (RFC 4724) between a glbd speaker (ExaBGP 5.0.15) and FRR 10.x in
namespaces, both roles, each with GR on and off (off: the old behaviour, so the GR cases
fail without the feature):

* glbd restarts (its ExaBGP is killed with SIGKILL and restarted by the supervisor): with
  GR, FRR keeps glbd's prefix in its kernel at every poll through the outage and refreshes
  it at glbd's End-of-RIB; without, FRR deletes it.
* FRR restarts (bgpd killed with SIGKILL and started again): with GR, glbd keeps FRR's
  prefix in forwarding (no NextHopsChanged) while FRR is away and sweeps nothing at FRR's
  End-of-RIB; without, the prefix leaves glbd's forwarding at once.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import pytest
from bgp_helpers import (
    N,
    Node,
    bgp_only_tail,
    frr_bgp_conf,
    frr_paths,
    glbd_daemon,
    glbd_leaf,
    glbd_neighbors,
    kernel_has,
    link,
    wait_for,
)
from glbdlab.frr import FrrInstance
from glbdlab.netns import Lab, Netns

from glbd.bgp.speaker import NextHopsChanged, SpeakerReady

pytestmark = [pytest.mark.netns, pytest.mark.frr, pytest.mark.slow]


GLBD_PREFIX = "10.201.0.0/24"
FRR_PREFIX = "10.99.0.0/24"


def frr_conf(peer: str, *, gr: bool) -> str:
    """FRR spine: GR mode "restart" (it preserves forwarding across a bgpd restart) when
    ``gr``, else GR disabled; FRR's default would be helper only."""
    mode = [" bgp graceful-restart", " bgp graceful-restart preserve-fw-state"]
    return frr_bgp_conf(
        65100,
        "10.0.0.11",
        [(peer, 65001)],
        networks=[FRR_PREFIX],
        extra=mode if gr else [" bgp graceful-restart-disable"],
        multipath=False,
    )


@contextmanager
def poll_kernel(ns: Netns, prefix: str) -> Iterator[dict[str, int]]:
    """Poll ``ns``'s kernel for ``prefix`` in a thread until the block ends: how often it
    was there and missing."""
    seen = {"present": 0, "missing": 0}
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            seen["present" if kernel_has(ns, prefix) else "missing"] += 1
            stop.wait(0.02)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        yield seen
    finally:
        stop.set()
        t.join(10)


def frr_path(frr: FrrInstance, prefix: str) -> dict[str, object]:
    paths = frr_paths(frr, prefix)
    return paths[0] if paths else {}


def frr_gr_info(frr: FrrInstance, peer: str) -> dict[str, object]:
    data = frr.vtysh_json(f"show bgp neighbors {peer} graceful-restart json")
    info = data.get(peer, {}) if isinstance(data, dict) else {}
    return info if isinstance(info, dict) else {}


def spine_and_leaf(lab: Lab, net: str, *, gr: bool) -> tuple[FrrInstance, Netns, Netns]:
    """FRR spine1 (``net``.1 of a /24) started with GR on or off, linked to leaf1 (``net``.2):
    the FRR and both namespaces."""
    spine_ns, leaf_ns = lab.netns("spine1"), lab.netns("leaf1")
    link(lab, spine_ns, "s1-l1", leaf_ns, "l1-s1", net)
    spine = FrrInstance(spine_ns, hostname="spine1").start(frr_conf(f"{net}.2", gr=gr))
    return spine, spine_ns, leaf_ns


def leaf(ns: Netns, net: str, *, gr: bool) -> Node:
    """glbd leaf1 (``net``.2) toward spine1 (``net``.1), GR on or off."""
    return glbd_leaf(
        ns,
        1,
        [(f"{net}.1", f"{net}.2", "l1-s1")],
        (GLBD_PREFIX,),
        graceful_restart=gr,
        restart_capability=gr,
        restart_time_s=30,
        stale_path_time_s=30.0,
    )


@asynccontextmanager
async def session(
    lab: Lab, net: str, *, gr: bool
) -> AsyncIterator[tuple[FrrInstance, Netns, Node]]:
    """FRR spine1 and glbd leaf1 on ``net``, GR on or off, their session up: the FRR, the
    spine's namespace and the leaf; both stopped after."""
    spine, spine_ns, leaf_ns = spine_and_leaf(lab, net, gr=gr)
    node = leaf(leaf_ns, net, gr=gr)
    try:
        await node.speaker.start()
        await spine.await_bgp_established([f"{net}.2"], timeout=60)
        yield spine, spine_ns, node
    finally:
        await node.speaker.stop()
        spine.stop()


@pytest.mark.parametrize("gr", [True, False], ids=["gr", "no-gr"])
async def test_glbd_restart_frr_keeps_routes(netns_lab: Lab, gr: bool) -> None:
    async with session(netns_lab, "172.16.41", gr=gr) as (spine, spine_ns, node):
        await wait_for(lambda: kernel_has(spine_ns, GLBD_PREFIX), 30, "glbd's prefix in FRR")
        info = frr_gr_info(spine, "172.16.41.2")
        print(f"\nFRR's view of glbd's GR: {json.dumps(info)[:600]}")
        mark = len(node.events)
        pid = node.speaker.supervisor.pid
        assert pid is not None
        with poll_kernel(spine_ns, GLBD_PREFIX) as seen:
            t0 = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            await wait_for(
                lambda: any(isinstance(e, SpeakerReady) for e in node.events[mark:]), 30, "ready"
            )
            await spine.await_bgp_established(["172.16.41.2"], timeout=60)
            # back, refreshed, and the stale mark gone (glbd's End-of-RIB)
            await wait_for(
                lambda: (
                    kernel_has(spine_ns, GLBD_PREFIX)
                    and frr_path(spine, GLBD_PREFIX)
                    and not frr_path(spine, GLBD_PREFIX).get("stale")
                ),
                60,
                "glbd's prefix refreshed in FRR",
            )
            took = time.monotonic() - t0
        print(f"GR {'on' if gr else 'off'}: {seen} polls of FRR's kernel over {took:.2f}s")
        # FRR takes the replayed UPDATE through the new ExaBGP before glbd has read the new
        # session's "up": wait for glbd's own count of it, then check its End-of-RIBs
        await wait_for(
            lambda: node.speaker.neighbors_snapshot()[0]["counters"].get("established", 0) >= 2,
            30,
            "glbd counts the second session",
        )
        (r,) = node.speaker.neighbors_snapshot()
        if gr:
            await wait_for(
                lambda: node.speaker.neighbors_snapshot()[0]["counters"].get("eor_out", 0) >= 2,
                30,
                "glbd's End-of-RIB to the second session",
            )
            (r,) = node.speaker.neighbors_snapshot()
        assert r["counters"].get("eor_out", 0) == (2 if gr else 0), r  # glbd's, once a session
        if gr:
            caps = info["neighborCapabilities"]
            assert caps["gracefulRestart"] == "advertisedAndReceived", caps  # type: ignore[index]
            assert caps["addressFamiliesByPeer"]["ipv4Unicast"]["preserved"], caps  # type: ignore[index]
            assert seen["missing"] == 0, seen
        else:
            assert seen["missing"] > 0, seen


@pytest.mark.parametrize("gr", [True, False], ids=["gr", "no-gr"])
async def test_frr_restart_glbd_keeps_routes(netns_lab: Lab, gr: bool) -> None:
    async with session(netns_lab, "172.16.42", gr=gr) as (spine, _spine_ns, node):
        await wait_for(lambda: node.speaker.rib.next_hops(N(FRR_PREFIX)), 30, "FRR's prefix")
        mark = len(node.events)

        def lost() -> bool:
            return any(
                isinstance(e, NextHopsChanged) and e.prefix == N(FRR_PREFIX) and not e.next_hops
                for e in node.events[mark:]
            )

        def row() -> dict[str, object]:
            (r,) = node.speaker.neighbors_snapshot()
            return r

        spine.kill_daemon("bgpd")
        await wait_for(lambda: row()["state"] != "up", 30, "glbd sees the session go")
        if not gr:
            await wait_for(lost, 10, "FRR's prefix withdrawn from glbd's forwarding")
            return
        r = row()
        assert r["gr_helping"] and r["state"] == "stale", r
        assert node.speaker.rib.next_hops(N(FRR_PREFIX)), "stale path not in forwarding"
        spine.restart_daemon("bgpd")
        await spine.await_bgp_established(["172.16.42.2"], timeout=60)
        # FRR's End-of-RIB ends the restart: nothing stale left, the prefix never left
        await wait_for(lambda: not row()["gr_helping"] and row()["state"] == "up", 60, "EoR")
        r = row()
        print(f"\nglbd's row after FRR's restart: {r}")
        assert r["graceful_restart"] and r["graceful_restart"]["restarting"], r  # type: ignore[index]
        assert r["counters"]["gr_restarts"] == 1, r  # type: ignore[index]
        assert node.speaker.rib.next_hops(N(FRR_PREFIX))
        assert not lost()
        assert not [e for e in node.events[mark:] if isinstance(e, NextHopsChanged)]


def glbd_conf(run_dir: Path, gr: bool) -> str:
    return "\n".join(
        [
            'router_id = "10.0.0.1"',
            "local_as = 65001",
            'role = "load-balancer"',
            f'originate = ["{GLBD_PREFIX}"]',
            "",
            "[[neighbors]]",
            'address = "172.16.43.1"',
            "remote_as = 65100",
            'interface = "l1-s1"',
            'local_address = "172.16.43.2"',
            "passive = false",
            'import = ["0.0.0.0/0 le 32", "::/0 le 128"]',
            'export = ["0.0.0.0/0 le 32", "::/0 le 128"]',
            "",
            "[bgp]",
            # helper only: FRR's restart needs no capability from glbd
            f'graceful_restart = "{"helper" if gr else "off"}"',
            "restart_time_s = 30",
            "stale_path_time_s = 30",
            "",
            *bgp_only_tail(run_dir),
        ]
    )


@pytest.mark.parametrize("gr", [True, False], ids=["gr", "no-gr"])
async def test_frr_restart_glbd_daemon_keeps_kernel_route(
    netns_lab: Lab, tmp_path: Path, gr: bool
) -> None:
    """The whole daemon: FRR's prefix stays in the glbd leaf's kernel at every poll while
    FRR's bgpd is killed and restarted (GR), or leaves it (no GR)."""
    spine, _spine_ns, leaf_ns = spine_and_leaf(netns_lab, "172.16.43", gr=gr)
    run_dir = tmp_path / "leaf1"
    run_dir.mkdir(mode=0o700)
    try:
        with glbd_daemon(leaf_ns, run_dir, glbd_conf(run_dir, gr)) as sock:

            def row() -> dict[str, object]:
                rows = glbd_neighbors(sock)
                return rows[0] if rows else {}

            await wait_for(lambda: row().get("state") == "up", 60, "glbd's session")
            await wait_for(
                lambda: kernel_has(leaf_ns, FRR_PREFIX), 30, "FRR's prefix in glbd's FIB"
            )
            with poll_kernel(leaf_ns, FRR_PREFIX) as seen:
                spine.kill_daemon("bgpd")
                await wait_for(lambda: row().get("state") not in ("up", None), 30, "session gone")
                if gr:
                    assert row()["gr_helping"] is True
                    spine.restart_daemon("bgpd")
                    await wait_for(
                        lambda: row().get("state") == "up" and row().get("gr_helping") is False,
                        60,
                        "FRR back and its End-of-RIB",
                    )
                else:
                    await wait_for(lambda: seen["missing"] > 0, 10, "the prefix leaving the kernel")
            print(f"\nGR {'on' if gr else 'off'}: {seen} polls of glbd's kernel")
            if gr:
                assert seen["missing"] == 0, seen
                assert kernel_has(leaf_ns, FRR_PREFIX)
    finally:
        spine.stop()
