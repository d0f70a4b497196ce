"""The router advertisement speaker on a real veth: it advertises, learns the peer, and drops
(counted) what does not come from the link or floods it."""

from __future__ import annotations

import ipaddress
import json
import socket
import threading

import pytest
from bgp_helpers import wait_for
from glbdlab.netns import Lab, Netns

from glbd.unnumbered import ndp as codec
from glbd.unnumbered.ndpeers import NdpEvent
from glbd.unnumbered.ndpsock import NdpSpeaker

pytestmark = [pytest.mark.netns]


def raw(ns: Netns, ifname: str, hops: int) -> tuple[socket.socket, int]:
    s = ns.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, ifname.encode())
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, hops)
    with ns.entered():
        return s, socket.if_nametoindex(ifname)


async def test_learns_advertises_and_drops(netns_lab: Lab) -> None:
    a, b = netns_lab.netns("a"), netns_lab.netns("b")
    netns_lab.veth(a, "pa", b, "pb")
    seen: list[object] = []
    sa = NdpSpeaker(["pa"], seen.append, netns=a.name, interval_s=0.5)
    sb = NdpSpeaker(["pb"], lambda ev: None, netns=b.name, interval_s=0.5)
    await sa.start()
    await sb.start()
    try:
        await wait_for(lambda: "pa" in sa.peers() and "pb" in sb.peers(), 20, "both learned")
        learned = sa.peers()["pa"]
        assert learned.is_link_local
        # an advertisement that was routed here (hop limit < 255) teaches nothing
        s, idx = raw(b, "pb", 64)
        s.sendto(codec.encode_advert(None), ("ff02::1", 0, 0, idx))
        await wait_for(lambda: sa.dropped.get(codec.NdpDrop.HOP_LIMIT, 0) >= 1, 10)
        s.close()
        # a flood on the link: most of it is dropped unread, the peer stays
        s, idx = raw(b, "pb", 255)
        for _ in range(500):
            s.sendto(codec.encode_advert(None), ("ff02::1", 0, 0, idx))
        s.close()
        await wait_for(lambda: sa.dropped.get(codec.NdpDrop.RATE_LIMITED, 0) >= 100, 10)
        assert sa.peers()["pa"] == learned
        assert isinstance(learned, ipaddress.IPv6Address) and len(seen) == 1
    finally:
        await sa.stop()
        await sb.stop()


def settled_link_local(ns: Netns, ifname: str) -> ipaddress.IPv6Address | None:
    """The port's link-local address once duplicate address detection has passed."""
    out = json.loads(ns.ip("-6", "-j", "addr", "show", "dev", ifname).stdout)
    for a in out[0].get("addr_info", []):
        addr = ipaddress.IPv6Address(a["local"])
        if addr.is_link_local and not a.get("tentative"):
            return addr
    return None


async def test_a_router_on_another_port_is_never_learned(netns_lab: Lab) -> None:
    """A raw socket hears every port until it is bound to its own: what a busy neighbour
    sent on another port in that instant must not become this port's peer."""
    a, busy, quiet = netns_lab.netns("a"), netns_lab.netns("busy"), netns_lab.netns("quiet")
    netns_lab.veth(a, "pa", busy, "pb")
    netns_lab.veth(a, "pc", quiet, "pd")
    await wait_for(lambda: settled_link_local(busy, "pb") and settled_link_local(quiet, "pd"), 10)
    genuine = settled_link_local(quiet, "pd")
    stop = threading.Event()

    def flood() -> None:
        s, idx = raw(busy, "pb", 255)
        with s:
            while not stop.is_set():
                s.sendto(codec.encode_advert(None), ("ff02::1", 0, 0, idx))

    flooder = threading.Thread(target=flood, daemon=True)
    flooder.start()
    s, idx = raw(quiet, "pd", 255)
    other_port = 0
    try:
        for _ in range(100):
            seen: list[NdpEvent] = []
            sp = NdpSpeaker(["pc"], seen.append, netns=a.name, interval_s=60)
            await sp.start()
            try:

                def learned(sp: NdpSpeaker = sp) -> bool:
                    # the genuine router advertises until it is heard, as a router does
                    # periodically: under the flood one advertisement can find the socket's
                    # queue full
                    if "pc" in sp.peers():
                        return True
                    s.sendto(codec.encode_advert(None), ("ff02::1", 0, 0, idx))
                    return False

                await wait_for(learned, 10, "the genuine router")
                assert [ev.address for ev in seen] == [genuine]
                other_port += sp.dropped.get(codec.NdpDrop.OTHER_PORT, 0)
            finally:
                await sp.stop()
    finally:
        stop.set()
        flooder.join()
        s.close()
    # the race was really run: some opens caught the other port's flood (and dropped it)
    assert other_port > 0
