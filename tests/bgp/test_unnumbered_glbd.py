"""Two glbd daemons over one unnumbered link (no address on either end): each learns the
other's link-local address from its router advertisements; the lower address waits for the
other to connect ("auto"), which ExaBGP accepts on its [::]:179 listener; BFD runs between the
link-local addresses; each installs the other's IPv4 prefix through the other's link-local
address, and the load balancer hears the helper's heartbeats. Then the link is re-created
with new addresses and everything moves to them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from bgp_helpers import glbctl_request as request
from bgp_helpers import link_local, unnumbered_conf, wait_for
from glbdlab.netns import Lab, Netns

pytestmark = [pytest.mark.netns, pytest.mark.slow]

BFD_100MS = ("[bfd]", "min_tx_ms = 100", "min_rx_ms = 100")


def kernel_gateways(ns: Netns, prefix: str) -> dict[str, str]:
    routes = json.loads(ns.ip("-j", "route", "show", prefix, check=False).stdout or "[]")
    if not routes or "nhid" not in routes[0]:
        return {}
    nhs = {nh["id"]: nh for nh in json.loads(ns.ip("-j", "nexthop", "show").stdout or "[]")}
    grp = nhs.get(routes[0]["nhid"], {})
    members = [nhs[m["id"]] for m in grp.get("group", []) if m["id"] in nhs] or [grp]
    return {str(m.get("gateway")): str(m.get("dev")) for m in members}


async def test_glbd_to_glbd_unnumbered(netns_lab: Lab, tmp_path: Path) -> None:
    lab = netns_lab
    leaf, spine = lab.netns("leaf"), lab.netns("spine")
    lab.veth(leaf, "swp1", spine, "down1")
    await wait_for(lambda: link_local(leaf, "swp1") and link_local(spine, "down1"), 10)
    procs = []
    socks = {}
    for ns, rid, asn, role, prefix, port in (
        (leaf, "10.0.0.1", 65001, "load-balancer", "10.201.0.0/24", "swp1"),
        (spine, "10.0.0.100", 65100, "helper", "10.100.0.0/24", "down1"),
    ):
        d = tmp_path / ns.node
        d.mkdir()
        (d / "glbd.toml").write_text(unnumbered_conf(d, rid, asn, role, prefix, port, BFD_100MS))
        log = open(d / "glbd.log", "wb")  # noqa: SIM115 - handed to the child
        procs.append(
            ns.popen(
                [sys.executable, "-m", "glbd", "run", "-c", str(d / "glbd.toml")],
                stdout=log,
                stderr=log,
            )
        )
        log.close()
        socks[ns.node] = d / "glbd.sock"

    def up(node: str, peer_ns: Netns, port: str) -> bool:
        rows = request(socks[node], "neighbors") or []
        bfd = request(socks[node], "bfd") or []
        want = link_local(peer_ns, port)
        return any(r["peer"] == want and r["state"] == "up" for r in rows) and any(
            b["peer"] == want and str(b["state"]).lower() == "up" for b in bfd
        )

    try:
        await wait_for(lambda: up("leaf", spine, "down1") and up("spine", leaf, "swp1"), 60)
        want_leaf = {link_local(spine, "down1"): "swp1"}
        want_spine = {link_local(leaf, "swp1"): "down1"}
        await wait_for(lambda: kernel_gateways(leaf, "10.100.0.0/24") == want_leaf, 30)
        await wait_for(lambda: kernel_gateways(spine, "10.201.0.0/24") == want_spine, 30)

        def heard(node: str, port: str, node_id: str) -> bool:
            (hb,) = request(socks[node], "heartbeats") or [{}]
            rx = (hb.get("receiver") or {}).get("interfaces", [])
            return any(i["ifname"] == port and i["neighbor_id"] == node_id for i in rx)

        await wait_for(lambda: heard("leaf", "swp1", "10.0.0.100"), 30, "heartbeats at the leaf")
        for node in ("leaf", "spine"):
            c = request(socks[node], "counters")["unnumbered"]
            assert c["sent_ra"] >= 1 and c["received"] >= 1, c
            assert not [k for k in c if k.startswith("dropped_")], c

        # the link is deleted and made again: new link-local addresses on both ends (new
        # MACs); both glbds learn them afresh and move the session
        old = link_local(spine, "down1")
        leaf.ip("link", "del", "swp1")
        lab.veth(leaf, "swp1", spine, "down1")
        await wait_for(lambda: link_local(spine, "down1") not in ("", old), 10)
        try:
            await wait_for(
                lambda: up("leaf", spine, "down1") and up("spine", leaf, "swp1"), 60, "moved"
            )
        except AssertionError as e:  # say where each side stands
            state = {n: (request(socks[n], "neighbors"), request(socks[n], "bfd")) for n in socks}
            lls = (link_local(spine, "down1"), link_local(leaf, "swp1"))
            raise AssertionError(f"{e}; link-locals {lls}; neighbors and BFD {state}") from None
        want_leaf = {link_local(spine, "down1"): "swp1"}
        await wait_for(lambda: kernel_gateways(leaf, "10.100.0.0/24") == want_leaf, 30)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(20)
            except Exception:
                p.kill()
        for n in ("leaf", "spine"):
            print(n, (tmp_path / n / "glbd.log").read_text(errors="replace")[-2500:])
