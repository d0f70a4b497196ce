"""Interop with real FRR: FRR 10.x from the lab chroot, and bookworm's FRR 8.4
(``build="host"``). glbd speakers run ExaBGP 5.0.15 in the same lab namespaces."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
from bgp_helpers import (
    NHC,
    V4,
    A,
    N,
    frr_bgp_conf,
    frr_nnhns,
    frr_paths,
    glbd_leaf,
    glbd_spine,
    kernel_weights,
    link,
    stop_all,
    wait_for,
)
from glbdlab.frr import FrrInstance
from glbdlab.netns import Lab

from glbd.bgp import exabgp_api as api
from glbd.bgp import nhc
from glbd.bgp.exabgp import ExabgpNeighbor, ExabgpParams, ExabgpSupervisor
from glbd.bgp.ribtypes import PeerDown
from glbd.bgp.speaker import NextHopsChanged, SpeakerLost, SpeakerReady, StaleTimerExpired

pytestmark = [pytest.mark.netns, pytest.mark.frr, pytest.mark.slow]


def frr_prefixes(frr: FrrInstance) -> dict[str, dict[str, object]]:
    data = frr.vtysh_json("show bgp ipv4 unicast json")
    return data.get("routes", {}) if isinstance(data, dict) else {}


# -----------------------------------------------------------------------------------------------


async def test_frr10_spine_nnhn_packing_and_burst(netns_lab: Lab) -> None:
    """FRR 10.x spine with send-nexthop-characteristics toward three glbd leaves. leaf2 and leaf3
    originate the anycast 10.200/24; leaf1 must get it with a validated NNHN {leaf2, leaf3}
    (FRR sends next hop 0.0.0.0: accepted, counted). FRR's per-UPDATE NNHN must not leak onto
    leaf2's single-homed 10.202/24. Then a 1000-prefix burst from leaf2 and its withdrawal:
    leaf1's RIB equals FRR's table afterwards, no session drops."""
    lab = netns_lab
    s1, l1, l2, l3 = (lab.netns(n) for n in ("spine1", "leaf1", "leaf2", "leaf3"))
    l1a, s1a = link(lab, l1, "l1-s1", s1, "s1-l1", "172.16.11")
    l2a, s2a = link(lab, l2, "l2-s1", s1, "s1-l2", "172.16.12")
    l3a, s3a = link(lab, l3, "l3-s1", s1, "s1-l3", "172.16.13")
    spine = FrrInstance(s1, hostname="spine1").start(
        frr_bgp_conf(
            65100,
            "10.0.0.11",
            [(l1a, 65001), (l2a, 65002), (l3a, 65003)],
            neighbor_extra=dict.fromkeys([l1a, l2a, l3a], NHC),
        )
    )
    leaf2 = glbd_leaf(l2, 2, [(s2a, l2a, "l2-s1")], ("10.200.0.0/24", "10.202.0.0/24"))
    leaf3 = glbd_leaf(l3, 3, [(s3a, l3a, "l3-s1")], ("10.200.0.0/24", "10.203.0.0/24"))
    leaf1 = glbd_leaf(l1, 1, [(s1a, l1a, "l1-s1")], ("10.201.0.0/24",))
    nodes = (leaf1, leaf2, leaf3)
    try:
        # downstream leaves first, so FRR has both paths before leaf1 connects (FRR does not
        # refresh NNHN when only its multipath set changes)
        await asyncio.gather(leaf2.speaker.start(), leaf3.speaker.start())

        await wait_for(
            lambda: len(frr_paths(spine, "10.200.0.0/24")) == 2,
            60,
            "FRR spine multipath for 10.200/24",
        )
        await leaf1.speaker.start()
        await wait_for(lambda: leaf1.nh("10.200.0.0/24") and leaf1.nh("10.202.0.0/24"), 60)
        await wait_for(lambda: leaf1.nh("10.203.0.0/24"), 30)
        assert leaf1.nh("10.200.0.0/24") == [(s1a, ("10.0.0.2", "10.0.0.3"), "valid")]
        rib = leaf1.speaker.rib
        assert rib.counters["nhc_nh_unspecified"] >= 1
        (nb,) = leaf1.speaker.neighbors_snapshot()
        assert nb["bgp_id"] == "10.0.0.11"
        # single-homed prefixes: FRR either sends no NHC, or leaks 10.200's NNHN onto them by
        # packing; either way glbd must not use {leaf2, leaf3} for them
        for p in ("10.202.0.0/24", "10.203.0.0/24"):
            ((_peer, nnh, status),) = leaf1.nh(p)
            assert nnh is None, (p, status)
            assert status in ("absent", "nnhn_packed_untrusted"), status
            print(f"\n{p} at leaf1 via FRR 10: {status}")

        # 1000-prefix burst from leaf2 through FRR, then withdrawal
        burst = [N(f"10.{100 + i // 256}.{i % 256}.0/24") for i in range(1000)]
        base = set(rib.forwarding())
        t0 = time.monotonic()
        leaf2.speaker.set_originated([N("10.200.0.0/24"), *burst])
        want = (base - {N("10.202.0.0/24")}) | set(burst)
        await wait_for(lambda: set(rib.forwarding()) == want, 120, "burst at leaf1")
        t_announce = time.monotonic() - t0
        frr_table = set(frr_prefixes(spine))
        glbd_table = {str(p) for p in rib.forwarding()} | {"10.201.0.0/24"}
        assert glbd_table - {"10.202.0.0/24"} <= frr_table
        assert {p for p in frr_table if p.startswith(("10.1", "10.10", "10.2"))} >= {
            str(p) for p in burst
        }
        t0 = time.monotonic()
        leaf2.speaker.set_originated([N("10.200.0.0/24")])
        await wait_for(lambda: not set(rib.forwarding()) & set(burst), 120, "withdrawal at leaf1")
        t_withdraw = time.monotonic() - t0
        await wait_for(lambda: not set(frr_prefixes(spine)) & {str(p) for p in burst}, 30)
        assert {str(p) for p in rib.forwarding()} | {"10.201.0.0/24"} == set(frr_prefixes(spine))
        assert not [e for n in nodes for e in n.events if isinstance(e, PeerDown)]
        print(f"\nburst via FRR 10: announce 1000 in {t_announce:.2f}s, withdraw {t_withdraw:.2f}s")
    finally:
        await stop_all(nodes)


async def test_glbd_spine_drives_frr10_weighted_ecmp(netns_lab: Lab) -> None:
    """Two glbd helper spines between FRR 10.x leaves with `bgp bestpath bandwidth ignore`.
    spine1 learns 10.200/24 from leaf2 and leaf3 (NNHN count 2), spine2 only from leaf2
    (count 1): FRR leaf1 must install weights 2:1 (scaled by zebra) in its kernel."""
    lab = netns_lab
    s1, s2, l1, l2, l3 = (lab.netns(n) for n in ("spine1", "spine2", "leaf1", "leaf2", "leaf3"))
    a11, s11 = link(lab, l1, "l1-s1", s1, "s1-l1", "172.16.11")
    a21, s21 = link(lab, l2, "l2-s1", s1, "s1-l2", "172.16.12")
    a31, s31 = link(lab, l3, "l3-s1", s1, "s1-l3", "172.16.13")
    a12, s12 = link(lab, l1, "l1-s2", s2, "s2-l1", "172.16.21")
    a22, s22 = link(lab, l2, "l2-s2", s2, "s2-l2", "172.16.22")
    spine1 = glbd_spine(
        s1, 1, [(a11, 65001, s11, "s1-l1"), (a21, 65002, s21, "s1-l2"), (a31, 65003, s31, "s1-l3")]
    )
    spine2 = glbd_spine(s2, 2, [(a12, 65001, s12, "s2-l1"), (a22, 65002, s22, "s2-l2")])
    nodes = (spine1, spine2)
    try:
        FrrInstance(l2, hostname="leaf2").start(
            frr_bgp_conf(
                65002, "10.0.0.2", [(s21, 65100), (s22, 65100)], networks=["10.200.0.0/24"]
            )
        )
        FrrInstance(l3, hostname="leaf3").start(
            frr_bgp_conf(65003, "10.0.0.3", [(s31, 65100)], networks=["10.200.0.0/24"])
        )
        leaf1 = FrrInstance(l1, hostname="leaf1").start(
            frr_bgp_conf(
                65001,
                "10.0.0.1",
                [(s11, 65100), (s12, 65100)],
                extra=[" bgp bestpath bandwidth ignore"],
            )
        )
        await asyncio.gather(spine1.speaker.start(), spine2.speaker.start())
        await wait_for(lambda: len(spine1.nh("10.200.0.0/24")) == 2, 60, "spine1 multipath")
        await wait_for(lambda: len(spine2.nh("10.200.0.0/24")) == 1, 60, "spine2 path")

        def weights() -> dict[str, int]:
            return kernel_weights(l1, "10.200.0.0/24")

        await wait_for(
            lambda: len(weights()) == 2 and len(set(weights().values())) == 2,
            60,
            "weighted ECMP in leaf1's kernel",
        )
        w = weights()
        assert w[s11] > w[s12], w
        assert round(w[s11] / w[s12]) == 2, w
        print(f"\nFRR 10 leaf1 kernel weights from glbd NNHN: {w}")
        # FRR shows our NNHN (entry 0, our router id, is not listed)
        nnhs = frr_nnhns(leaf1, "10.200.0.0/24")
        assert nnhs == [("10.0.0.2",), ("10.0.0.2", "10.0.0.3")], nnhs
        # the multipath set shrinks at spine1: glbd refreshes its NNHN (FRR would not)
        await asyncio.to_thread(l3.run, ["ip", "link", "set", "l3-s1", "down"])
        await wait_for(lambda: len(set(weights().values())) == 1, 60, "equal weights again")
    finally:
        await stop_all(nodes)


async def test_frr84_legacy_spine_stale_nhc_ignored(netns_lab: Lab) -> None:
    """Bookworm's FRR 8.4 does not know attribute 39: it forwards it unchanged with Partial set
    after rewriting the next hop. glbd leaf1 must see the header/next-hop mismatch (or the wrong
    Next-hop BGP ID) and ignore the NNHN while keeping the route."""
    lab = netns_lab
    s1, l1, l2 = (lab.netns(n) for n in ("spine1", "leaf1", "leaf2"))
    l1a, s1a = link(lab, l1, "l1-s1", s1, "s1-l1", "172.16.11")
    l2a, s2a = link(lab, l2, "l2-s1", s1, "s1-l2", "172.16.12")
    FrrInstance(s1, build="host", hostname="spine1").start(
        frr_bgp_conf(65100, "10.0.0.11", [(l1a, 65001), (l2a, 65002)])
    )
    leaf1 = glbd_leaf(l1, 1, [(s1a, l1a, "l1-s1")])
    # leaf2: a bare ExaBGP that announces NHCs as a glbd helper below it would
    injector = ExabgpSupervisor(
        ExabgpParams("10.0.0.2", 65002, (ExabgpNeighbor(s2a, l2a, 65100, 9),)),
        netns=l2.name,
        on_line=lambda s: None,
        on_lost=lambda: None,
        on_ready=lambda: None,
    )
    real_nh = nhc.Nhc.for_next_hop(
        l2a, nnhn=nhc.Nnhn(V4("10.0.0.2"), (V4("10.0.0.7"), V4("10.0.0.8")))
    )
    zero_nh = nhc.Nhc.for_next_hop("0.0.0.0", nnhn=nhc.Nnhn(V4("10.0.0.2"), (V4("10.0.0.7"),)))
    try:
        await injector.start()
        await leaf1.speaker.start()
        for prefix, value in (("10.210.0.0/24", real_nh), ("10.211.0.0/24", zero_nh)):
            injector.send(api.Announce(A(s2a), N(prefix), A(l2a), nhc=value.encode_value()))
        await wait_for(lambda: leaf1.nh("10.210.0.0/24") and leaf1.nh("10.211.0.0/24"), 60)
        assert leaf1.nh("10.210.0.0/24") == [(s1a, None, "nhc_nh_mismatch")]
        assert leaf1.nh("10.211.0.0/24") == [(s1a, None, "nnhn_nh_bgp_id_mismatch")]
        # the routes are kept (attribute ignored, not treat-as-withdraw) and the session is up
        (nb,) = leaf1.speaker.neighbors_snapshot()
        assert nb["state"] == "up" and nb["bgp_id"] == "10.0.0.11"
        assert nb["counters"]["nhc_nh_mismatch"] >= 1
    finally:
        await leaf1.speaker.stop()
        await injector.stop()


async def test_exabgp_crash_with_frr_peer_keeps_forwarding(netns_lab: Lab) -> None:
    """SIGKILL of glbd leaf1's ExaBGP while peered with an FRR 10.x spine: no forwarding
    change (no NextHopsChanged) through the restart and up to and past the stale timer."""
    lab = netns_lab
    s1, l1, l2 = (lab.netns(n) for n in ("spine1", "leaf1", "leaf2"))
    l1a, s1a = link(lab, l1, "l1-s1", s1, "s1-l1", "172.16.11")
    l2a, s2a = link(lab, l2, "l2-s1", s1, "s1-l2", "172.16.12")
    FrrInstance(s1, hostname="spine1").start(
        frr_bgp_conf(65100, "10.0.0.11", [(l1a, 65001), (l2a, 65002)], neighbor_extra={l1a: NHC})
    )
    leaf2 = glbd_leaf(l2, 2, [(s2a, l2a, "l2-s1")], ("10.202.0.0/24", "10.204.0.0/24"))
    leaf1 = glbd_leaf(l1, 1, [(s1a, l1a, "l1-s1")], ("10.201.0.0/24",), stale_timer_s=12.0)
    nodes = (leaf1, leaf2)
    try:
        await asyncio.gather(*(n.speaker.start() for n in nodes))
        await wait_for(lambda: leaf1.nh("10.202.0.0/24") and leaf1.nh("10.204.0.0/24"), 60)
        before = leaf1.speaker.rib.forwarding()
        mark = len(leaf1.events)
        pid = leaf1.speaker.supervisor.pid
        assert pid is not None
        t_kill = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        await wait_for(lambda: any(isinstance(e, SpeakerLost) for e in leaf1.events[mark:]), 10)
        peer = leaf1.speaker.rib.peers[A(s1a)]
        assert peer.stale
        await wait_for(
            lambda: (
                any(isinstance(e, StaleTimerExpired) for e in leaf1.events[mark:])
                or (not peer.stale and peer.state == "up")
            ),
            60,
        )
        t_back = time.monotonic() - t_kill
        eor = not any(isinstance(e, StaleTimerExpired) for e in leaf1.events[mark:])
        # until nothing is left to settle: no stale path, no stale timer, no pending selection
        await wait_for(
            lambda: not peer.stale and leaf1.speaker.rib.next_deadline() is None, 60, "settled"
        )
        after = leaf1.events[mark:]
        kinds = [type(e).__name__ for e in after]
        assert any(isinstance(e, SpeakerLost) for e in after), kinds
        assert any(isinstance(e, SpeakerReady) for e in after), kinds
        assert not [e for e in after if isinstance(e, NextHopsChanged)], kinds
        assert leaf1.speaker.rib.forwarding() == before
        assert leaf1.speaker.neighbors_snapshot()[0]["state"] == "up"
        print(
            f"\nExaBGP restart with FRR peer: stale paths settled {t_back:.2f}s after SIGKILL"
            f" ({'End-of-RIB' if eor else 'stale timer'}); events: {kinds}"
        )
    finally:
        await stop_all(nodes)


async def test_frr10_spine_between_two_glbd_leaves(netns_lab: Lab) -> None:
    """Issue 5's first scenario literally: an FRR 10.x spine with send-nexthop-characteristics
    between two glbd leaves. FRR only sends NNHN for a prefix with >= 2 multipaths, so each leaf
    has two links (two sessions) to the spine; each leaf then gets the other's prefix over both
    links with a valid NNHN listing exactly the other leaf (FRR lists it twice; glbd dedups)."""
    lab = netns_lab
    s1, l1, l2 = (lab.netns(n) for n in ("spine1", "leaf1", "leaf2"))
    l1a, s1a = link(lab, l1, "l1-s1a", s1, "s1-l1a", "172.16.11")
    l1b, s1b = link(lab, l1, "l1-s1b", s1, "s1-l1b", "172.16.21")
    l2a, s2a = link(lab, l2, "l2-s1a", s1, "s1-l2a", "172.16.12")
    l2b, s2b = link(lab, l2, "l2-s1b", s1, "s1-l2b", "172.16.22")
    leaves = [l1a, l1b, l2a, l2b]
    spine = FrrInstance(s1, hostname="spine1").start(
        frr_bgp_conf(
            65100,
            "10.0.0.11",
            [(l1a, 65001), (l1b, 65001), (l2a, 65002), (l2b, 65002)],
            neighbor_extra=dict.fromkeys(leaves, NHC),
        )
    )
    leaf1 = glbd_leaf(l1, 1, [(s1a, l1a, "l1-s1a"), (s1b, l1b, "l1-s1b")], ("10.201.0.0/24",))
    leaf2 = glbd_leaf(l2, 2, [(s2a, l2a, "l2-s1a"), (s2b, l2b, "l2-s1b")], ("10.202.0.0/24",))
    nodes = (leaf1, leaf2)
    try:
        await asyncio.gather(*(n.speaker.start() for n in nodes))

        def two_paths(prefix: str) -> bool:
            return len(frr_paths(spine, prefix)) == 2

        await wait_for(lambda: two_paths("10.201.0.0/24") and two_paths("10.202.0.0/24"), 60)
        # FRR does not re-advertise when only its multipath set changes
        await asyncio.to_thread(spine.vtysh, "clear bgp ipv4 unicast * soft out")
        want1 = [(s1a, ("10.0.0.2",), "valid"), (s1b, ("10.0.0.2",), "valid")]
        want2 = [(s2a, ("10.0.0.1",), "valid"), (s2b, ("10.0.0.1",), "valid")]
        await wait_for(lambda: leaf1.nh("10.202.0.0/24") == want1, 60, f"leaf1 {want1}")
        await wait_for(lambda: leaf2.nh("10.201.0.0/24") == want2, 60, f"leaf2 {want2}")
        for n in nodes:
            assert {nb["bgp_id"] for nb in n.speaker.neighbors_snapshot()} == {"10.0.0.11"}
    finally:
        await stop_all(nodes)
