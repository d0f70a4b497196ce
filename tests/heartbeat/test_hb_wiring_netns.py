"""glbd's wiring of heartbeats over an unnumbered IPv6 fabric link: two ``Node`` s (a helper and a
load balancer) built from configs whose BGP neighbors are link-local addresses, given the BGP
events the speaker would emit, exchange IPv6 heartbeats (ff12::149, hop limit 255, source = the
session's link-local address, node id = the peer's BGP id); a reload with a new ``group6``
moves both to the new group. No BGP, FIB or link monitor runs: only the heartbeat parts."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import pytest
from glbdlab.netns import Lab, Netns
from glbdlab.waits import until as _until

from glbd.bgp.ribtypes import PeerDown, PeerUp
from glbd.config import config
from glbd.config.config_quality import HEARTBEAT_GROUP_V6
from glbd.daemon.daemon import Daemon
from glbd.daemon.node import Node
from heartbeat import wire
from heartbeat.wire import Entry

SPINE_ID, LEAF_ID = "10.0.0.1", "10.0.0.2"
S_IF, L_IF = "sw-lf", "lf-sw"
G6 = "ff12::150"


def _cfg(tmp: Path, rid: str, role: str, peer: str, ifname: str, **hb: Any) -> config.Config:
    return config.parse(
        {
            "router_id": rid,
            "local_as": 65001 if role == "load-balancer" else 65100,
            "role": role,
            "neighbors": [{"address": peer, "remote_as": 65000, "interface": ifname}],
            "heartbeat": hb,
            "control": {"socket": str(tmp / f"{rid}.sock")},
        },
        f"{rid}.toml",
    )


def _joined(ns: Netns, ifname: str) -> set[str]:
    out = ns.ip("-6", "maddr", "show", "dev", ifname).stdout
    return {w.split()[1] for w in out.splitlines() if w.strip().startswith("inet6 ")}


@pytest.mark.netns
async def test_nodes_exchange_ipv6_heartbeats_over_link_local_sessions(
    netns_lab: Lab, tmp_path: Path
) -> None:
    sw, lf = netns_lab.netns("sw"), netns_lab.netns("lf")
    # an unnumbered link: only the two link-local addresses the sessions use
    netns_lab.veth(sw, S_IF, lf, L_IF, a_addr="fe80::1/64", b_addr="fe80::2/64", up=False)
    for ns, ifn in ((sw, S_IF), (lf, L_IF)):
        ns.ip("link", "set", ifn, "addrgenmode", "none")
        ns.link_up(ifn)

    # the leaf names its neighbor with a zone, the spine without: both must work
    spine_cfg = _cfg(tmp_path, SPINE_ID, "helper", "fe80::2", S_IF)
    leaf_cfg = _cfg(tmp_path, LEAF_ID, "load-balancer", f"fe80::1%{L_IF}", L_IF)
    spine = Node(Daemon("spine.toml", spine_cfg))
    leaf = Node(Daemon("leaf.toml", leaf_cfg))
    for n in (spine, leaf):
        n.fib_service.hold_s = 3600.0  # no FIB here: no sync may come during the test
        n.endpoint = n.build_endpoint()
    assert spine.endpoint is not None and spine.endpoint.sender is not None
    assert leaf.endpoint is not None and leaf.endpoint.receiver is not None
    receiver = leaf.endpoint.receiver
    remote: list[Any] = []
    leaf.endpoint.on_remote = remote.extend  # no path table: collect what it would get
    entry = Entry(wire.node_id(LEAF_ID), 2, 10_000, 5, 0, 0, 0)
    try:
        spine.endpoint.update_links([entry])
        # what the BGP speaker reports (ExaBGP names a peer without a zone)
        with lf.entered():
            leaf.on_bgp(PeerUp(ipaddress.ip_address("fe80::1"), ipaddress.IPv4Address(SPINE_ID)))
        with sw.entered():
            spine.on_bgp(PeerUp(ipaddress.ip_address("fe80::2"), ipaddress.IPv4Address(LEAF_ID)))

        assert spine.endpoint.transport.families() == {S_IF: 6}
        assert leaf.endpoint.transport.families() == {L_IF: 6}
        nb = spine.endpoint.neighbors[S_IF]
        assert nb.local == "fe80::1" and nb.node_id == wire.node_id(LEAF_ID)
        assert HEARTBEAT_GROUP_V6 in _joined(lf, L_IF)

        await _until(lambda: receiver.accepted >= 5)
        assert receiver.drops == {}
        d = leaf.endpoint.to_dict()["receiver"]["interfaces"][0]
        assert d["neighbor_address"] == "fe80::1" and d["neighbor_id"] == SPINE_ID
        assert remote and remote[0].node_id == wire.node_id(SPINE_ID)
        assert list(remote[0].entries) == [entry]

        # SIGHUP with a new group6: applied like the other heartbeat keys, no restart
        leaf_new = _cfg(tmp_path, LEAF_ID, "load-balancer", f"fe80::1%{L_IF}", L_IF, group6=G6)
        spine_new = _cfg(tmp_path, SPINE_ID, "helper", "fe80::2", S_IF, group6=G6)
        for node, ns, cfg in ((leaf, lf, leaf_new), (spine, sw, spine_new)):
            ch = config.diff(node.cfg, cfg)
            assert ch["sections"] == ["heartbeat"] and not ch["restart_required"]
            with ns.entered():  # no awaits inside: the sockets are opened in the namespace
                await node.reconfigure_fib(cfg, ch)
                await node.reconfigure_quality(cfg, ch)
        assert leaf.endpoint.transport.group6 == G6
        joined = _joined(lf, L_IF)
        assert G6 in joined and HEARTBEAT_GROUP_V6 not in joined
        n = receiver.accepted
        await _until(lambda: receiver.accepted >= n + 3)
        assert receiver.drops == {} and leaf.endpoint.transport.errors == {}

        # the session goes down: the interface's heartbeats stop, the spine becomes unknown
        with lf.entered():
            leaf.on_bgp(PeerDown(ipaddress.ip_address("fe80::1"), "test"))
        assert leaf.endpoint.transport.families() == {}
        assert remote[-1].reason == "neighbor_removed" and remote[-1].entries is None
    finally:
        spine.endpoint.close()
        leaf.endpoint.close()
