"""Unnumbered BGP against FRR 10.x: a glbd leaf and an FRR spine joined by a veth with no
address. FRR runs ``neighbor PORT interface remote-as external``; glbd advertises itself with
router advertisements (FRR learns a peer's link-local address from them), learns FRR's from
FRR's, and ExaBGP connects between the two link-local addresses. IPv4 prefixes travel with
IPv6 link-local next hops both ways (RFC 8950)."""

from __future__ import annotations

import functools
import ipaddress
import json
from pathlib import Path

import pytest
from bgp_helpers import (
    NHC,
    N,
    Node,
    frr_bgp_conf,
    frr_nnhns,
    frr_paths,
    glbd_daemon,
    glbd_neighbors,
    kernel_weights,
    speaker_node,
    wait_for,
)
from glbdlab.frr import FrrInstance
from glbdlab.netns import Lab, Netns

from glbd.bgp.ribtypes import NeighborParams, RibParams, Role
from glbd.config.params import IPAddress, local_address_for
from glbd.daemon.netns import in_netns
from glbd.unnumbered.ndpeers import NdpEvent, PeerChange
from glbd.unnumbered.ndpsock import NdpSpeaker

pytestmark = [pytest.mark.netns, pytest.mark.frr, pytest.mark.slow]


def spine_conf(port: str, rid: str = "10.0.0.100") -> str:
    """FRR spine announcing 10.100/24 to an unnumbered peer on ``port``."""
    return frr_bgp_conf(
        65100,
        rid,
        [(port, "external")],
        networks=["10.100.0.0/24"],
        multipath=False,
        interface=True,
    )


def link_local(ns: Netns, ifname: str) -> ipaddress.IPv6Address:
    out = json.loads(ns.ip("-6", "-j", "addr", "show", "dev", ifname).stdout)
    for a in out[0].get("addr_info", []):
        addr = ipaddress.IPv6Address(a["local"])
        if addr.is_link_local:
            return addr
    raise AssertionError(f"no link-local address on {ifname}")


async def test_unnumbered_leaf_to_frr_spine(netns_lab: Lab) -> None:
    lab = netns_lab
    leaf, spine = lab.netns("leaf"), lab.netns("spine")
    lab.veth(leaf, "l-s", spine, "s-l")
    await wait_for(lambda: link_local(leaf, "l-s") and link_local(spine, "s-l"), 10)
    frr = FrrInstance(spine, hostname="spine").start(spine_conf("s-l"))

    events: list[NdpEvent] = []
    ndp = NdpSpeaker(["l-s"], events.append, netns=leaf.name, interval_s=1.0)
    await ndp.start()
    node: Node | None = None
    try:
        # FRR learns us from our advertisements, we learn FRR from its own
        await wait_for(lambda: "l-s" in ndp.peers(), 30, "FRR's advertisement")
        assert events[0].change is PeerChange.LEARNED
        assert ndp.peers()["l-s"] == link_local(spine, "s-l")

        ours = link_local(leaf, "l-s")
        params = RibParams(
            ipaddress.IPv4Address("10.0.0.1"),
            65001,
            Role.LOAD_BALANCER,
            (
                NeighborParams(
                    ndp.peers()["l-s"],
                    65100,
                    ours,
                    interface="l-s",
                    hold_time=9,
                    unnumbered=True,
                ),
            ),
            (N("10.201.0.0/24"),),
        )
        node = speaker_node(params, leaf.name)
        sp = node.speaker
        await sp.start()
        await frr.await_bgp_established(["s-l"], timeout=60)

        # FRR -> glbd: an IPv4 prefix with FRR's link-local address as its next hop
        await wait_for(lambda: sp.rib.next_hops(N("10.100.0.0/24")), 30, "10.100/24 at glbd")
        (nh,) = sp.rib.next_hops(N("10.100.0.0/24"))
        assert nh.next_hop == ndp.peers()["l-s"]
        assert nh.interface == "l-s"

        # glbd -> FRR: our IPv4 prefix with our link-local next hop
        await wait_for(lambda: frr_paths(frr, "10.201.0.0/24"), 30, "10.201/24 at FRR")
        hops = [h for p in frr_paths(frr, "10.201.0.0/24") for h in p.get("nexthops", [])]
        assert any(h.get("ip") == str(ours) or h.get("linkLocal") == str(ours) for h in hops), hops
        frr.wait_route("10.201.0.0/24")
        assert ndp.dropped == {}, ndp.dropped
    finally:
        if node is not None:
            await node.speaker.stop()
        await ndp.stop()


def leaf_conf(run_dir: Path, ports: str) -> str:
    return "\n".join(
        [
            'router_id = "10.0.0.1"',
            "local_as = 65001",
            'role = "load-balancer"',
            'originate = ["10.201.0.0/24"]',
            "",
            "[[neighbors]]",
            f"interfaces = {ports}",
            'remote_as = "external"',
            'import = ["0.0.0.0/0 le 32", "::/0 le 128"]',
            'export = ["0.0.0.0/0 le 32", "::/0 le 128"]',
            "",
            "[bfd]",
            "enabled = false",
            "[heartbeat]",
            "enabled = false",
            "[control]",
            f'socket = "{run_dir / "glbd.sock"}"',
            "[logging]",
            'format = "json"',
            "",
        ]
    )


def kernel_route(ns: Netns, prefix: str) -> dict[str, object] | None:
    """The kernel's route to ``prefix`` (via its nexthop group) as {gateway: dev} or None."""
    routes = json.loads(ns.ip("-j", "route", "show", prefix, check=False).stdout or "[]")
    if not routes or "nhid" not in routes[0]:
        return None
    nhs = {nh["id"]: nh for nh in json.loads(ns.ip("-j", "nexthop", "show").stdout or "[]")}
    grp = nhs.get(routes[0]["nhid"], {})
    members = [nhs[m["id"]] for m in grp.get("group", []) if m["id"] in nhs] or [grp]
    return {str(m.get("gateway")): m.get("dev") for m in members}


async def test_unnumbered_glbd_daemon_two_frr_spines(netns_lab: Lab, tmp_path: Path) -> None:
    """The whole loop with a real glbd: one ``[[neighbors]]`` template for two unnumbered ports
    (``remote_as = "external"``), two FRR spines that both originate 10.100/24. glbd learns
    both peers from their advertisements, establishes both sessions, installs 10.100/24 as an
    IPv4 route through a nexthop group of two IPv6 link-local gateways, and both spines learn
    10.201/24 from it. A third port of the template has no router behind it yet: it waits
    (``waiting_for_peer``) until one starts there."""
    lab = netns_lab
    leaf = lab.netns("leaf")
    spines = [lab.netns(f"s{i}") for i in (1, 2, 3)]
    for i, sp in enumerate(spines, 1):
        lab.veth(leaf, f"swp{i}", sp, "down1")
        await wait_for(functools.partial(link_local, sp, "down1"), 10)
    late = spines.pop()
    frrs = [
        FrrInstance(sp, hostname=sp.node).start(spine_conf("down1", f"10.0.0.10{i}"))
        for i, sp in enumerate(spines, 1)
    ]
    with glbd_daemon(leaf, tmp_path, leaf_conf(tmp_path, '"swp1-3"')) as sock:

        def rows() -> dict[str, dict[str, object]]:
            return {r["interface"]: r for r in glbd_neighbors(sock)}

        for frr in frrs:
            await frr.await_bgp_established(["down1"], timeout=60)

        def up(*ports: str) -> bool:
            got = rows()
            return all(p in got and got[p]["state"] == "up" for p in ports)

        await wait_for(lambda: up("swp1", "swp2"), 30, "swp1 and swp2 up")
        got = rows()
        assert set(got) == {"swp1", "swp2", "swp3"}
        for i, sp in enumerate(spines, 1):
            assert got[f"swp{i}"]["peer"] == str(link_local(sp, "down1"))
        assert (got["swp3"]["peer"], got["swp3"]["state"]) == (
            "swp3 (unnumbered)",
            "waiting_for_peer",
        )

        want = {str(link_local(sp, "down1")): f"swp{i}" for i, sp in enumerate(spines, 1)}
        await wait_for(lambda: kernel_route(leaf, "10.100.0.0/24") == want, 30, "kernel route")
        for frr in frrs:
            frr.wait_route("10.201.0.0/24")

        # a router starts behind the waiting port: it is learned and set up like a reload
        frrs.append(FrrInstance(late, hostname=late.node).start(spine_conf("down1", "10.0.0.103")))
        await wait_for(lambda: up("swp1", "swp2", "swp3"), 60, "swp3 up")
        assert rows()["swp3"]["peer"] == str(link_local(late, "down1"))
        spines.append(late)
        want = {str(link_local(sp, "down1")): f"swp{i}" for i, sp in enumerate(spines, 1)}
        await wait_for(lambda: kernel_route(leaf, "10.100.0.0/24") == want, 30, "3-way group")


def source_toward(ns: Netns, port: str, peer: ipaddress.IPv6Address) -> IPAddress:
    """Our link-local address toward ``peer`` on ``port`` (a socket in the namespace: no
    ``ip`` process, which a loaded machine's rtnl contention can hold up for many seconds)."""
    with in_netns(ns.name):
        return local_address_for(peer, port)


async def unnumbered_speaker(
    ns: Netns, port: str | list[str], rid: str, asn: int, role: Role, originated: tuple[str, ...]
) -> tuple[NdpSpeaker, Node]:
    """A glbd speaker with an unnumbered neighbor on each of ``port``, started once every
    peer is learned."""
    ports = [port] if isinstance(port, str) else port
    ndp = NdpSpeaker(ports, lambda ev: None, netns=ns.name, interval_s=1.0)
    await ndp.start()
    await wait_for(lambda: set(ports) <= set(ndp.peers()), 30, f"peers on {ports}")
    params = RibParams(
        ipaddress.IPv4Address(rid),
        asn,
        role,
        tuple(
            NeighborParams(
                ndp.peers()[p],
                None,
                source_toward(ns, p, ndp.peers()[p]),
                interface=p,
                hold_time=9,
                passive=False,
                unnumbered=True,
            )
            for p in ports
        ),
        tuple(N(p) for p in originated),
    )
    node = speaker_node(params, ns.name)
    await node.speaker.start()
    return ndp, node


def frr_unnumbered_conf(asn: int, rid: str, ports: list[str], networks: tuple[str, ...]) -> str:
    """FRR leaf with unnumbered peers on ``ports`` and ``bgp bestpath bandwidth ignore``."""
    return frr_bgp_conf(
        asn,
        rid,
        [(p, "external") for p in ports],
        networks=networks,
        extra=[" bgp bestpath bandwidth ignore"],
        interface=True,
    )


async def test_glbd_spines_drive_frr_leaf_weights_over_unnumbered_links(netns_lab: Lab) -> None:
    """Two glbd helper spines and FRR 10 leaves, every link unnumbered. spine1 learns
    10.200/24 from leaf2 and leaf3 (NNHN of 2), spine2 from leaf2 only (NNHN of 1): FRR leaf1
    shows both NNHNs and installs weights 2:1 through the spines' link-local addresses."""
    lab = netns_lab
    s1, s2 = lab.netns("spine1"), lab.netns("spine2")
    l1, l2, l3 = (lab.netns(f"leaf{i}") for i in (1, 2, 3))
    for leaf, spines in ((l1, (s1, s2)), (l2, (s1, s2)), (l3, (s1,))):
        for sp in spines:
            lab.veth(leaf, f"to-{sp.node}", sp, f"to-{leaf.node}")
    started: list[tuple[NdpSpeaker, Node]] = []
    try:
        leaf1 = FrrInstance(l1, hostname="leaf1").start(
            frr_unnumbered_conf(65001, "10.0.0.1", ["to-spine1", "to-spine2"], ())
        )
        FrrInstance(l2, hostname="leaf2").start(
            frr_unnumbered_conf(65002, "10.0.0.2", ["to-spine1", "to-spine2"], ("10.200.0.0/24",))
        )
        FrrInstance(l3, hostname="leaf3").start(
            frr_unnumbered_conf(65003, "10.0.0.3", ["to-spine1"], ("10.200.0.0/24",))
        )
        for sp, rid, ports in (
            (s1, "10.0.0.11", ["to-leaf1", "to-leaf2", "to-leaf3"]),
            (s2, "10.0.0.12", ["to-leaf1", "to-leaf2"]),
        ):
            started.append(await unnumbered_speaker(sp, ports, rid, 65100, Role.HELPER, ()))
        spine1, spine2 = started[0][1], started[1][1]
        await wait_for(lambda: len(spine1.nh("10.200.0.0/24")) == 2, 60, "spine1 multipath")
        await wait_for(lambda: len(spine2.nh("10.200.0.0/24")) == 1, 60, "spine2 path")
        gw1, gw2 = str(link_local(s1, "to-leaf1")), str(link_local(s2, "to-leaf1"))

        def weights() -> dict[str, int]:
            return kernel_weights(l1, "10.200.0.0/24")

        await wait_for(
            lambda: set(weights()) == {gw1, gw2} and len(set(weights().values())) == 2,
            60,
            "weighted ECMP in leaf1's kernel",
        )
        w = weights()
        assert round(w[gw1] / w[gw2]) == 2, w
        nnhs = frr_nnhns(leaf1, "10.200.0.0/24")
        assert nnhs == [("10.0.0.2",), ("10.0.0.2", "10.0.0.3")], nnhs
    finally:
        for ndp, node in started:
            await node.speaker.stop()
            await ndp.stop()


async def test_frr_spine_nnhn_over_unnumbered_links(netns_lab: Lab) -> None:
    """FRR 10 spine with send-nexthop-characteristics toward three unnumbered glbd leaves;
    leaf2 and leaf3 originate 10.200/24, so leaf1 gets it from FRR with FRR's link-local
    next hop and an NNHN {leaf2, leaf3}."""
    lab = netns_lab
    spine = lab.netns("spine")
    leaves = [lab.netns(f"leaf{i}") for i in (1, 2, 3)]
    for i, lf in enumerate(leaves, 1):
        lab.veth(lf, "up1", spine, f"down{i}")
    await wait_for(lambda: all(link_local(lf, "up1") for lf in leaves), 10)
    ports = ["down1", "down2", "down3"]
    frr = FrrInstance(spine, hostname="spine").start(
        frr_bgp_conf(
            65100,
            "10.0.0.100",
            [(p, "external") for p in ports],
            neighbor_extra=dict.fromkeys(ports, NHC),
            interface=True,
        )
    )
    started: list[tuple[NdpSpeaker, Node]] = []
    try:
        for i in (2, 3):
            started.append(
                await unnumbered_speaker(
                    leaves[i - 1], "up1", f"10.0.0.{i}", 65000 + i, Role.LOAD_BALANCER,
                    ("10.200.0.0/24",),
                )
            )  # fmt: skip

        await wait_for(
            lambda: len(frr_paths(frr, "10.200.0.0/24")) == 2, 60, "FRR multipath for 10.200/24"
        )
        ndp1, leaf1 = await unnumbered_speaker(
            leaves[0], "up1", "10.0.0.1", 65001, Role.LOAD_BALANCER, ()
        )  # originates nothing: FRR would pack 10.200/24 with it under one NHC
        started.append((ndp1, leaf1))
        await wait_for(lambda: leaf1.nh("10.200.0.0/24"), 60, "10.200/24 at leaf1")
        spine_ll = str(link_local(spine, "down1"))
        await wait_for(
            lambda: leaf1.nh("10.200.0.0/24") == [(spine_ll, ("10.0.0.2", "10.0.0.3"), "valid")],
            30,
            "NNHN at leaf1",
        )

    finally:
        for ndp, node in started:
            await node.speaker.stop()
            await ndp.stop()
