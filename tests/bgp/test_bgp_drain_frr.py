"""Drain (RFC 8326 graceful shutdown) against FRR 10.x in namespaces.

A FRR leaf has two glbd spines that both originate 10.99.0.0/24: two equal paths, both in its
kernel. ``set_drain(True)`` on spine1: FRR sees spine1's path with GRACEFUL_SHUTDOWN (local
preference 0 on receipt) and three extra prepends, picks spine2 and installs only spine2, with
the session to spine1 still up. Undrain: both paths again. The other way, glbd as the
receiver: an FRR leaf with ``bgp graceful-shutdown`` marks its paths 65535:0 and a glbd spine
takes it out of its multipath set while another leaf has the prefix."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
import time
from typing import Any

import pytest
from bgp_helpers import (
    frr_bgp_conf,
    frr_paths,
    glbd_spine,
    kernel_gateways,
    link,
    stop_all,
    wait_for,
)
from glbdlab.frr import FrrInstance
from glbdlab.netns import Lab

pytestmark = [pytest.mark.netns, pytest.mark.frr, pytest.mark.slow]

PREFIX = "10.99.0.0/24"


def paths(frr: FrrInstance, prefix: str) -> dict[str, dict[str, Any]]:
    """FRR's paths for ``prefix`` by the peer they came from."""
    return {p.get("peer", {}).get("peerId", "?"): p for p in frr_paths(frr, prefix)}


def is_best(p: dict[str, Any]) -> bool:
    return bool((p.get("bestpath") or {}).get("overall"))


def gshut(p: dict[str, Any]) -> bool:
    return "gracefulShutdown" in (p.get("community") or {}).get("list", [])


async def test_drain_moves_frr_leaf_to_the_other_spine_and_undrain_restores(
    netns_lab: Lab,
) -> None:
    lab = netns_lab
    s1, s2, l1 = (lab.netns(n) for n in ("spine1", "spine2", "leaf1"))
    a11, s11 = link(lab, l1, "l1-s1", s1, "s1-l1", "172.16.11")
    a12, s12 = link(lab, l1, "l1-s2", s2, "s2-l1", "172.16.21")
    spine1 = glbd_spine(s1, 1, [(a11, 65001, s11, "s1-l1")], (PREFIX,))
    spine2 = glbd_spine(s2, 2, [(a12, 65001, s12, "s2-l1")], (PREFIX,))
    nodes = (spine1, spine2)
    try:
        leaf1 = FrrInstance(l1, hostname="leaf1").start(
            frr_bgp_conf(65001, "10.0.0.1", [(s11, 65100), (s12, 65100)])
        )
        await asyncio.gather(spine1.speaker.start(), spine2.speaker.start())
        await wait_for(lambda: kernel_gateways(l1, PREFIX) == {s11, s12}, 60, "ECMP via both")
        before = paths(leaf1, PREFIX)
        assert not any(gshut(p) for p in before.values()), before

        spine1.speaker.set_drain(True)
        await wait_for(lambda: gshut(paths(leaf1, PREFIX).get(s11, {})), 30, "65535:0 at FRR")
        # FRR shows the received path before its best-path run has ranked it
        await wait_for(lambda: is_best(paths(leaf1, PREFIX).get(s12, {})), 30, "spine2 best")
        p = paths(leaf1, PREFIX)
        print(f"\nFRR 10 leaf1 while spine1 is drained: {json.dumps(p[s11])}")
        assert p[s11]["aspath"]["string"] == "65100 65100 65100 65100"
        assert p[s11]["locPrf"] == 0  # FRR honours graceful shutdown on receipt
        assert is_best(p[s12]) and not is_best(p[s11]) and not p[s11].get("multipath")
        await wait_for(lambda: kernel_gateways(l1, PREFIX) == {s12}, 30, "only spine2")
        assert leaf1.bgp_peers().get(s11) == "Established"  # drain is not shutdown
        assert spine1.speaker.drained

        spine1.speaker.set_drain(False)
        await wait_for(lambda: kernel_gateways(l1, PREFIX) == {s11, s12}, 30, "both again")
        p = paths(leaf1, PREFIX)
        assert not gshut(p[s11]) and p[s11]["aspath"]["string"] == "65100"
        assert not any(ev for ev in spine1.events if type(ev).__name__ == "PeerDown")
    finally:
        await stop_all(nodes)


async def test_glbd_takes_a_draining_frr_peer_out_of_multipath(netns_lab: Lab) -> None:
    lab = netns_lab
    s1, l2, l3 = (lab.netns(n) for n in ("spine1", "leaf2", "leaf3"))
    a21, s21 = link(lab, l2, "l2-s1", s1, "s1-l2", "172.16.12")
    a31, s31 = link(lab, l3, "l3-s1", s1, "s1-l3", "172.16.13")
    spine1 = glbd_spine(s1, 1, [(a21, 65002, s21, "s1-l2"), (a31, 65003, s31, "s1-l3")])
    try:
        FrrInstance(l2, hostname="leaf2").start(
            frr_bgp_conf(65002, "10.0.0.2", [(s21, 65100)], networks=[PREFIX])
        )
        leaf3 = FrrInstance(l3, hostname="leaf3").start(
            frr_bgp_conf(65003, "10.0.0.3", [(s31, 65100)], networks=[PREFIX])
        )
        await spine1.speaker.start()

        def peers() -> list[str]:
            return sorted(p for p, _nnh, _st in spine1.nh(PREFIX))

        await wait_for(lambda: peers() == [a21, a31], 60, "multipath of both leaves")
        leaf3.vtysh("configure terminal", "router bgp 65003", "bgp graceful-shutdown")
        await wait_for(lambda: peers() == [a21], 30, "the draining leaf3 out of multipath")
        st = spine1.speaker.neighbors_snapshot()
        row = next(r for r in st if r["peer"] == a31)
        assert row["state"] == "up" and row["counters"]["graceful_shutdown_in"] >= 1
        leaf3.vtysh("configure terminal", "router bgp 65003", "no bgp graceful-shutdown")
        await wait_for(lambda: peers() == [a21, a31], 30, "leaf3 back in multipath")
    finally:
        await stop_all((spine1,))


async def test_no_loss_across_drain_and_undrain(netns_lab: Lab) -> None:
    """A UDP stream from the FRR leaf to an address both spines hold (10.99.0.1, anycast) at
    1000 packets a second across a drain and undrain of each spine in turn: every packet
    arrives at one spine or the other. The kernel swaps the route's nexthops in one replace,
    and the drained spine keeps forwarding whatever is still on its way."""
    lab = netns_lab
    s1, s2, l1 = (lab.netns(n) for n in ("spine1", "spine2", "leaf1"))
    a11, s11 = link(lab, l1, "l1-s1", s1, "s1-l1", "172.16.11")
    a12, s12 = link(lab, l1, "l1-s2", s2, "s2-l1", "172.16.21")
    for ns in (s1, s2):
        ns.addr_add("lo", "10.99.0.1/32")
    spine1 = glbd_spine(s1, 1, [(a11, 65001, s11, "s1-l1")], (PREFIX,))
    spine2 = glbd_spine(s2, 2, [(a12, 65001, s12, "s2-l1")], (PREFIX,))
    nodes = (spine1, spine2)
    got: set[int] = set()
    sent = 0
    stop, stop_tx = threading.Event(), threading.Event()
    rxs = []
    for ns in (s1, s2):
        rx = ns.socket()
        rx.bind(("0.0.0.0", 5099))
        rx.settimeout(0.2)
        rxs.append(rx)
    tx = l1.socket()

    def recv(rx: socket.socket) -> None:
        while not stop.is_set():
            try:
                got.add(struct.unpack("!Q", rx.recv(64)[:8])[0])
            except TimeoutError:
                continue
            except OSError:
                return

    def send() -> None:
        nonlocal sent
        t = time.monotonic()
        while not stop_tx.is_set():
            tx.sendto(struct.pack("!Q", sent), ("10.99.0.1", 5099))
            sent += 1
            t += 0.001
            if (delay := t - time.monotonic()) > 0:
                time.sleep(delay)  # the stimulus: pacing the sender (1 kpps)

    threads = [threading.Thread(target=recv, args=(rx,), daemon=True) for rx in rxs]
    try:
        FrrInstance(l1, hostname="leaf1").start(
            frr_bgp_conf(65001, "10.0.0.1", [(s11, 65100), (s12, 65100)])
        )
        await asyncio.gather(spine1.speaker.start(), spine2.speaker.start())
        await wait_for(lambda: kernel_gateways(l1, PREFIX) == {s11, s12}, 60, "ECMP via both")
        for th in threads:
            th.start()
        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        await wait_for(lambda: len(got) > 100, 10, "traffic flowing")
        for drained, other in ((spine1, s12), (spine2, s11)):
            drained.speaker.set_drain(True)
            await wait_for(lambda o=other: kernel_gateways(l1, PREFIX) == {o}, 30, "moved off")  # type: ignore[misc]
            drained.speaker.set_drain(False)
            await wait_for(lambda: kernel_gateways(l1, PREFIX) == {s11, s12}, 30, "both again")
        stop_tx.set()  # the receivers keep reading what is still in flight
        sender.join(5)
        await wait_for(lambda: len(got) >= sent, 5, f"every packet ({sent - len(got)} missing)")
        print(
            f"\nUDP at 1000 pps across drain/undrain of both spines: {sent} sent, "
            f"{len(got)} received, {sent - len(got)} lost"
        )
        assert got == set(range(sent))
    finally:
        stop.set()
        for th in threads:
            if th.is_alive():
                th.join(5)
        for sock in (*rxs, tx):
            sock.close()
        await stop_all(nodes)
