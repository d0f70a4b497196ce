"""NetlinkSocket against the real kernel, inside a lab namespace."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest
from glbdlab.netns import Lab
from glbdlab.waits import until

from glbd.daemon.netns import in_netns, read_sysctl
from glbd.netlink import const as c
from glbd.netlink.codec import Attr, IfInfoMsg, Message, NhMsg, RtMsg, TcMsg
from glbd.netlink.rtnl import (
    LINK_WANT,
    QDISC_WANT,
    link_dump,
    link_state,
    nexthop_dump,
    nexthop_event_filter,
    qdisc_dump,
    qdisc_queue,
    route_event_filter,
)
from glbd.netlink.rtsocket import NetlinkError, NetlinkSocket

pytestmark = pytest.mark.netns


def _nh(nid: int, oif: int, gw: str) -> Message:
    return Message(
        c.RTM_NEWNEXTHOP, c.NLM_F_CREATE | c.NLM_F_EXCL,
        header=NhMsg(socket.AF_INET, 0, 200, 0),
        attrs=(Attr.u32(c.NHA_ID, nid), Attr.u32(c.NHA_OIF, oif), Attr.addr(c.NHA_GATEWAY, gw)),
    )  # fmt: skip


async def test_dumps_requests_batch_and_events(netns_lab: Lab) -> None:
    a, b = netns_lab.pair()
    a.run(["tc", "qdisc", "add", "dev", "a-b", "root", "pfifo", "limit", "100"])
    events: list[Message] = []
    ev = await NetlinkSocket.open(
        netns=a.name, groups=(c.RTNLGRP_LINK, c.RTNLGRP_NEXTHOP), on_event=events.append
    )
    s = await NetlinkSocket.open(netns=a.name)
    try:
        # fast-path link dump
        links = {st.name: st for st in map(link_state, await s.dump_select(
            link_dump(), IfInfoMsg, LINK_WANT))}  # fmt: skip
        assert set(links) == {"lo", "a-b"}
        ab = links["a-b"]
        assert ab.up and ab.operstate == c.IF_OPER_UP
        # qdisc backlog (TCA_STATS2/TCA_STATS_QUEUE)
        qs = [qdisc_queue(r) for r in await s.dump_select(qdisc_dump(), TcMsg, QDISC_WANT)]
        fq = [q for q in qs if q.ifindex == ab.ifindex and q.kind == "pfifo"]
        assert fq and fq[0].backlog == 0
        # request + ACK, then an error with the kernel's extended ACK text
        assert await s.request(_nh(1, ab.ifindex, "198.18.0.2")) == []
        with pytest.raises(NetlinkError) as ei:
            await s.request(_nh(1, ab.ifindex, "198.18.0.2"))
        assert ei.value.errno == 17
        with pytest.raises(NetlinkError) as ei:
            await s.request(_nh(2, 999, "198.18.0.2"))
        assert ei.value.ext_msg  # e.g. "Invalid device index"
        # batch: 50 nexthops, one bad in the middle; the others still apply, in order
        msgs = [_nh(100 + i, ab.ifindex, "198.18.0.2") for i in range(50)]
        msgs[20] = _nh(1, ab.ifindex, "198.18.0.2")  # exists -> EEXIST
        errs = await s.batch(msgs, max_bytes=512)
        assert [(i, e.errno) for i, e in errs] == [(20, 17)]
        dumped = await s.dump(nexthop_dump())
        assert len(dumped) == 50
        # events: nexthop notifications (RTNLGRP_NEXTHOP = 32) and link changes
        b.link_down("b-a")
        await until(lambda: any(m.type == c.RTM_NEWLINK for m in events), 2.0, what="RTM_NEWLINK")
        assert any(m.type == c.RTM_NEWNEXTHOP for m in events)
        assert any(m.type == c.RTM_NEWLINK for m in events)
    finally:
        s.close()
        ev.close()


async def test_route_event_filter_drops_own_protocol_and_other_tables(netns_lab: Lab) -> None:
    """The BPF program runs in the kernel: glbd's own routes (protocol 200) and routes of other
    tables never reach the socket; another protocol's routes in the table do, adds and
    deletes, IPv4 and IPv6."""
    a, _b = netns_lab.pair(a_addr="198.18.0.1/30", b_addr="198.18.0.2/30")
    a.ip("-6", "addr", "add", "2001:db8:f::1/64", "dev", "a-b", "nodad")
    events: list[Message] = []
    ev = await NetlinkSocket.open(
        netns=a.name, groups=(c.RTNLGRP_IPV4_ROUTE, c.RTNLGRP_IPV6_ROUTE), on_event=events.append
    )
    ev.attach_filter(route_event_filter(200, 254))
    try:
        a.ip_batch([
            "route add 203.0.113.0/24 via 198.18.0.2 proto 200",
            "route add 203.0.113.0/25 via 198.18.0.2 proto 200 table 100",
            "route add 198.51.100.0/24 via 198.18.0.2 proto static table 100",
            "route add 198.51.100.0/24 via 198.18.0.2 proto static",
            "route add 2001:db8:99::/48 via 2001:db8:f::2 proto static",
            "route add 2001:db8:98::/48 via 2001:db8:f::2 proto 200",
        ])  # fmt: skip
        a.ip("route", "del", "198.51.100.0/24", "proto", "static")
        a.ip("route", "add", "192.0.2.0/24", "via", "198.18.0.2", "proto", "boot")  # a marker

        def seen() -> list[tuple[int, int, int]]:
            return [
                (m.type, m.header.protocol, m.header.table)
                for m in events
                if isinstance(m.header, RtMsg)
            ]

        # notifications come in order: all are in once the marker is
        await until(lambda: (c.RTM_NEWROUTE, c.RTPROT_BOOT, 254) in seen(), 5.0, what="the marker")
        assert seen() == [
            (c.RTM_NEWROUTE, c.RTPROT_STATIC, 254),
            (c.RTM_NEWROUTE, c.RTPROT_STATIC, 254),
            (c.RTM_DELROUTE, c.RTPROT_STATIC, 254),
            (c.RTM_NEWROUTE, c.RTPROT_BOOT, 254),
        ]
    finally:
        ev.close()


async def test_nexthop_event_filter_drops_own_new_nexthops_only(netns_lab: Lab) -> None:
    """The echoes of glbd's own nexthop writes (protocol 200) never reach the socket; their
    deletions, other protocols' nexthops and link events do."""
    a, b = netns_lab.pair(a_addr="198.18.0.1/30", b_addr="198.18.0.2/30")
    events: list[Message] = []
    ev = await NetlinkSocket.open(
        netns=a.name, groups=(c.RTNLGRP_LINK, c.RTNLGRP_NEXTHOP), on_event=events.append
    )
    ev.attach_filter(nexthop_event_filter(200))
    try:
        a.ip_batch([
            "nexthop add id 11 via 198.18.0.2 dev a-b proto 200",
            "nexthop add id 12 group 11 proto 200",
            "nexthop add id 21 via 198.18.0.2 dev a-b proto static",
            "nexthop replace id 12 group 11 proto 200",
            "nexthop del id 12",
            "nexthop add id 22 via 198.18.0.2 dev a-b proto boot",  # a marker
        ])  # fmt: skip

        def seen() -> list[tuple[int, int]]:
            return [(m.type, m.header.protocol) for m in events if isinstance(m.header, NhMsg)]

        # notifications come in order: all are in once the marker is
        await until(lambda: (c.RTM_NEWNEXTHOP, c.RTPROT_BOOT) in seen(), what="the marker")
        assert seen() == [
            (c.RTM_NEWNEXTHOP, c.RTPROT_STATIC),
            (c.RTM_DELNEXTHOP, 200),
            (c.RTM_NEWNEXTHOP, c.RTPROT_BOOT),
        ]
        b.link_down("b-a")
        await until(lambda: any(m.type == c.RTM_NEWLINK for m in events), what="a link event")
    finally:
        ev.close()


async def test_in_netns_switches_back(netns_lab: Lab) -> None:
    ns = netns_lab.netns("x")
    home = os.readlink("/proc/thread-self/ns/net")
    with in_netns(ns.name):
        inside = os.readlink("/proc/thread-self/ns/net")
    assert inside != home
    assert os.readlink("/proc/thread-self/ns/net") == home
    assert read_sysctl("net.ipv4.nexthop_compat_mode", ns.name) in ("0", "1")
    with pytest.raises(FileNotFoundError), in_netns("glb-does-not-exist-zz"):
        pass


async def test_a_large_dump_is_read_over_several_loop_turns(netns_lab: Lab) -> None:
    """20000 nexthops (over a MB of replies): other callbacks run while the dump is
    read, instead of waiting behind all of it."""
    a, _b = netns_lab.pair(a_addr="198.18.0.1/30", b_addr="198.18.0.2/30")
    s = await NetlinkSocket.open(netns=a.name)
    loop = asyncio.get_running_loop()
    try:
        links = {st.name: st for st in map(link_state, await s.dump_select(
            link_dump(), IfInfoMsg, LINK_WANT))}  # fmt: skip
        ifindex = links["a-b"].ifindex
        errs = await s.batch([_nh(1000 + i, ifindex, "198.18.0.2") for i in range(20000)])
        assert not errs
        turns = 0
        reading = True

        def tick() -> None:
            nonlocal turns
            if reading:
                turns += 1
                loop.call_soon(tick)

        loop.call_soon(tick)
        got = await s.dump(nexthop_dump())
        reading = False
        assert len(got) == 20000
        assert turns >= 6, turns  # one per loop turn: the dump took that many
    finally:
        s.close()
