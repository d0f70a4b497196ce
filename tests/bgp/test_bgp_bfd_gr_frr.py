"""What FRR 10.x does with a graceful-restart-capable glbd peer when BFD, not TCP, says
something: the facts docs/bgp.md "Graceful restart" builds on, pinned against the lab's FRR.

glbd leaf1 (in-process speaker with ``"full"`` graceful restart, in-process BFD engine) and
FRR spine1 (``frr defaults datacenter``: GR helper; ``neighbor X bfd``, 100 ms x 3):

* a dead router: everything on leaf1's link dropped (nftables both ways, the link up, TCP
  never closes). FRR's BFD goes Down while BGP is still Established: does FRR flush leaf1's
  prefix at BFD time or keep it stale for the restart time?
* leaf1's BFD sends AdminDown (RFC 5880 §6.8.16) while BGP stays up: does FRR's BGP ignore it
  (RFC 5882 §3.2) or close the session as for a failure?
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from bgp_helpers import V4, A, N, frr_paths, kernel_has, speaker_node, wait_for
from glbdlab.frr import FrrInstance, start_fabric_frr
from glbdlab.netns import Lab
from glbdlab.topology import Fabric, leaf_spine

from bfd.engine import BfdEngine, BfdEvent, SessionConfig
from bfd.packet import State
from bfd.session import SessionParams
from glbd.bgp.ribtypes import NeighborParams, RibParams, Role

pytestmark = [pytest.mark.netns, pytest.mark.frr, pytest.mark.slow]

TOPO = leaf_spine(1, 1, hosts=False)
PREFIX = str(TOPO.node("leaf1").prefix4)


@dataclass
class Pair:
    fab: Fabric
    frr: FrrInstance
    engine: BfdEngine
    leaf_addr: str
    spine_addr: str
    bfd_events: list[BfdEvent]

    def frr_neighbor(self) -> dict[str, Any]:
        data = self.frr.vtysh_json(f"show bgp neighbors {self.leaf_addr} json")
        row = data.get(self.leaf_addr, {}) if isinstance(data, dict) else {}
        return row if isinstance(row, dict) else {}

    def frr_bfd(self) -> dict[str, Any]:
        for p in self.frr.vtysh_json("show bfd peers json") or []:
            if p.get("peer") == self.leaf_addr:
                return dict(p)
        return {}

    def frr_path(self) -> dict[str, Any]:
        paths = frr_paths(self.frr, PREFIX)
        return paths[0] if paths else {}

    def in_frr_kernel(self) -> bool:
        return kernel_has(self.fab.ns("spine1"), PREFIX)


@asynccontextmanager
async def pair(lab: Lab) -> AsyncIterator[Pair]:
    """FRR spine1 and glbd leaf1 (GR "full", BFD 100 ms x 3), BGP and BFD up, leaf1's prefix
    in FRR's kernel."""
    fab = Fabric(TOPO, lab=lab).build()
    frr = start_fabric_frr(fab, ["spine1"], bfd=True, bfd_interval_ms=100)["spine1"]
    leaf, spine = TOPO.node("leaf1"), TOPO.node("spine1")
    leaf_addr, spine_addr = fab.addr("leaf1", "spine1"), fab.addr("spine1", "leaf1")
    ifname = fab.ifname("leaf1", "spine1")
    assert spine.asn is not None and leaf.asn is not None
    params = RibParams(
        V4(str(leaf.router_id)),
        leaf.asn,
        Role.LOAD_BALANCER,
        (NeighborParams(A(spine_addr), spine.asn, A(leaf_addr), interface=ifname, hold_time=9),),
        (N(PREFIX),),
        graceful_restart=True,
        restart_capability=True,
        restart_time_s=120,
    )
    node = speaker_node(params, fab.ns("leaf1").name)
    events: list[BfdEvent] = []
    engine = BfdEngine(events.append, mode="thread", netns=fab.ns("leaf1").name, kernel_rx=False)
    us = 100_000
    sess = SessionConfig(spine_addr, ifname, leaf_addr, SessionParams(us, us, 3))
    try:
        await node.speaker.start()
        await asyncio.to_thread(engine.start)
        await asyncio.to_thread(engine.add_session, sess)
        p = Pair(fab, frr, engine, leaf_addr, spine_addr, events)
        await frr.await_bgp_established([leaf_addr], timeout=60)
        await frr.await_bfd_up([leaf_addr], timeout=60)
        await wait_for(p.in_frr_kernel, 30, "leaf1's prefix in FRR's kernel")
        gr = p.frr_neighbor().get("gracefulRestartInfo", {})
        print(f"\nFRR's GR view of leaf1: {str(gr)[:400]}")
        yield p
    finally:
        await asyncio.to_thread(engine.stop)
        await node.speaker.stop()
        frr.stop()


async def test_dead_router_bfd_down_flushes(netns_lab: Lab) -> None:
    """Everything on leaf1's link dropped: FRR's BFD goes Down with the session still
    Established; FRR sends a NOTIFICATION (Cease, BFD Down: lost on the wire) and deletes
    leaf1's prefix at once, not kept stale for the 120 s restart time."""
    async with pair(netns_lab) as p:
        p.fab.drop("leaf1", "spine1", end="leaf1")
        t0 = time.monotonic()
        await wait_for(lambda: p.frr_bfd().get("status") == "down", 10, "FRR's BFD down")
        t_bfd = time.monotonic() - t0
        await wait_for(lambda: not p.in_frr_kernel(), 10, "leaf1's prefix out of FRR's kernel")
        t_gone = time.monotonic() - t0
        row = p.frr_neighbor()
        print(
            f"\nFRR: BFD down after {t_bfd:.2f}s, prefix out of its kernel after {t_gone:.2f}s; "
            f"BGP {row.get('bgpState')}, last reset: {row.get('lastResetDueTo')}, "
            f"last error: {row.get('lastErrorCodeSubcode')}"
        )
        assert not p.frr_path(), p.frr_path()  # gone from BGP too, not a stale path
        assert "BFD" in str(row.get("lastResetDueTo", "")), row.get("lastResetDueTo")
        assert t_gone < t_bfd + 2.0  # at BFD time, not at the restart time


async def test_peer_admin_down_keeps_session(netns_lab: Lab) -> None:
    """leaf1's BFD goes AdminDown: FRR's BFD shows the session down, its BGP session stays
    Established (keepalives keep coming) and leaf1's prefix stays, not stale."""
    async with pair(netns_lab) as p:
        await asyncio.to_thread(p.engine.admin_down, p.fab.ifname("leaf1", "spine1"), p.spine_addr)
        await wait_for(lambda: p.frr_bfd().get("status") == "down", 10, "FRR's BFD down")
        bfd = p.frr_bfd()
        ka0 = int(p.frr_neighbor()["messageStats"]["keepalivesRecv"])
        # three of leaf1's keepalives later (FRR's timers 1/3 make ExaBGP send one a second)
        await wait_for(
            lambda: int(p.frr_neighbor()["messageStats"]["keepalivesRecv"]) >= ka0 + 3,
            15,
            "three more keepalives from leaf1 at FRR",
        )
        row = p.frr_neighbor()
        print(
            f"\nFRR after leaf1's AdminDown: BFD {bfd.get('status')} (remote diag "
            f"{bfd.get('remote-diagnostic')}, diag {bfd.get('diagnostic')}), BGP "
            f"{row.get('bgpState')}, established transitions "
            f"{row.get('connectionsEstablished')}"
        )
        assert row["bgpState"] == "Established", row
        assert int(row.get("connectionsEstablished", 1)) == 1, row
        assert p.in_frr_kernel()
        assert not p.frr_path().get("stale"), p.frr_path()
        assert [e.new for e in p.bfd_events][-1] is State.ADMIN_DOWN
