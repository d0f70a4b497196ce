"""Forged router advertisements on a real veth (scapy builds them, with a spoofed link-local
source): the unnumbered port's peer stays the real spine, every forged advertisement is
counted by reason, and after a restart the remembered spine wins over a forger heard first.
Then end to end: two glbd daemons with a BGP session over the link, and the session stays."""

from __future__ import annotations

import ipaddress
import json
import socket
import sys
import time
from pathlib import Path

import pytest
from bgp_helpers import glbctl_request as request
from bgp_helpers import link_local, wait_for
from bgp_helpers import unnumbered_conf as conf
from glbdlab.netns import Lab, Netns

from glbd.base.reasons import NdpIgnored
from glbd.unnumbered.ndpeers import NdpEvent, PeerChange
from glbd.unnumbered.ndpsock import STATE_FILE, NdpSpeaker

scapy_all = pytest.importorskip("scapy.all")

pytestmark = [pytest.mark.netns]

FORGED = "fe80::bad"
FORGED_MAC = "02:00:00:00:0b:ad"


def forge(ns: Netns, ifname: str, count: int, gap_s: float = 0.0) -> None:
    """``count`` router advertisements from ``FORGED`` onto ``ifname``'s link, well-formed
    (hop limit 255, code 0, a source link-layer option): only the core's rules stop them.
    ``gap_s`` apart (the stimulus: under the receiver's rate limit, so none is dropped unread;
    it blocks the calling loop, so only with the receivers in other processes)."""
    pkt = (
        scapy_all.Ether(src=FORGED_MAC, dst="33:33:00:00:00:01")
        / scapy_all.IPv6(src=FORGED, dst="ff02::1", hlim=255)
        / scapy_all.ICMPv6ND_RA(routerlifetime=0)
        / scapy_all.ICMPv6NDOptSrcLLAddr(lladdr=FORGED_MAC)
    )
    s = ns.socket(socket.AF_PACKET, socket.SOCK_RAW)
    with s:
        s.bind((ifname, 0))
        for _ in range(count):
            s.send(bytes(pkt))
            time.sleep(gap_s)  # the stimulus: pacing the forged RAs


def ignored(sp: NdpSpeaker, why: NdpIgnored) -> int:
    return int(sp.snapshot()["dropped"].get(why, 0))


async def test_forged_adverts_do_not_move_the_spine(netns_lab: Lab, tmp_path: Path) -> None:
    glbd, spine = netns_lab.netns("glbd"), netns_lab.netns("spine")
    netns_lab.veth(glbd, "pa", spine, "pb")
    state = tmp_path / STATE_FILE
    seen: list[NdpEvent] = []
    sa = NdpSpeaker(["pa"], seen.append, netns=glbd.name, interval_s=0.5, state_path=state)
    sb = NdpSpeaker(["pb"], lambda ev: None, netns=spine.name, interval_s=0.5)
    await sa.start()
    await sb.start()
    try:
        await wait_for(lambda: "pa" in sa.peers(), 20, "the spine learned")
        real = sa.peers()["pa"]
        assert json.loads(state.read_text())["peers"] == {"pa": str(real)}
        # attack (a): a burst of forged advertisements while the session is coming up
        forge(spine, "pb", 4)
        await wait_for(lambda: ignored(sa, NdpIgnored.CANDIDATE_UNCONFIRMED) >= 4, 10)
        assert sa.peers()["pa"] == real
        # the BGP session to the spine is Established (what the node tells the speaker)
        sa.set_established({"pa": real})
        forge(spine, "pb", 10)
        await wait_for(lambda: ignored(sa, NdpIgnored.PEER_ESTABLISHED) >= 10, 10)
        assert sa.peers()["pa"] == real
        assert seen == [NdpEvent("pa", PeerChange.LEARNED, real)]
    finally:
        await sa.stop()
        await sb.stop()

    # attack (c): glbd restarts while the spine is quiet; the forger is heard first
    seen.clear()
    sa = NdpSpeaker(["pa"], seen.append, netns=glbd.name, interval_s=0.5, state_path=state)
    assert sa.snapshot()["ports"]["pa"]["preferred"] == str(real)
    await sa.start()
    sb = NdpSpeaker(["pb"], lambda ev: None, netns=spine.name, interval_s=0.5)
    try:
        forge(spine, "pb", 3)
        await wait_for(lambda: ignored(sa, NdpIgnored.CANDIDATE_UNCONFIRMED) >= 3, 10)
        assert "pa" not in sa.peers()
        await sb.start()
        await wait_for(lambda: "pa" in sa.peers(), 20, "the spine learned again")
        assert seen == [NdpEvent("pa", PeerChange.LEARNED, real)]
        assert ipaddress.IPv6Address(FORGED) not in sa.peers().values()
    finally:
        await sa.stop()
        await sb.stop()


@pytest.mark.slow
async def test_bgp_session_stays_on_the_spine_under_forged_adverts(
    netns_lab: Lab, tmp_path: Path
) -> None:
    leaf, spine = netns_lab.netns("leaf"), netns_lab.netns("spine")
    netns_lab.veth(leaf, "swp1", spine, "down1")
    await wait_for(lambda: link_local(leaf, "swp1") and link_local(spine, "down1"), 10)
    real = link_local(spine, "down1")
    procs, socks = [], {}
    for ns, rid, asn, role, prefix, port in (
        (leaf, "10.0.0.1", 65001, "load-balancer", "10.201.0.0/24", "swp1"),
        (spine, "10.0.0.100", 65100, "helper", "10.100.0.0/24", "down1"),
    ):
        d = tmp_path / ns.node
        d.mkdir()
        (d / "glbd.toml").write_text(conf(d, rid, asn, role, prefix, port))
        log = open(d / "glbd.log", "wb")  # noqa: SIM115 - handed to the child
        cmd = [sys.executable, "-m", "glbd", "run", "-c", str(d / "glbd.toml")]
        procs.append(ns.popen(cmd, stdout=log, stderr=log))
        log.close()
        socks[ns.node] = d / "glbd.sock"

    def session() -> list[tuple[str, str]]:
        rows = request(socks["leaf"], "neighbors") or []
        return [(r["peer"], r["state"]) for r in rows]

    def dropped(why: NdpIgnored) -> int:
        c = (request(socks["leaf"], "counters") or {}).get("unnumbered") or {}
        return int(c.get(f"dropped_{why}", 0))

    try:
        await wait_for(lambda: session() == [(real, "up")], 60, "the session to the spine")
        # the forger on the spine's link: many well-formed advertisements from another address
        forge(spine, "down1", 40, gap_s=0.1)
        try:
            await wait_for(lambda: dropped(NdpIgnored.PEER_ESTABLISHED) >= 40, 20)
        except AssertionError as e:
            c = request(socks["leaf"], "counters")["unnumbered"]
            raise AssertionError(f"{e}: {c}; {session()}") from None
        assert session() == [(real, "up")]
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(20)
            except Exception:
                p.kill()
