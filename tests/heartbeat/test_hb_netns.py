"""A real sender and receiver exchange heartbeats over a veth between two namespaces, and the
receiver rejects forged ones: TTL 254 (from a raw socket), wrong sender, replayed sequence, bad
HMAC. Uses the lab's ``netns_lab`` fixture (namespaces deleted after the test)."""

from __future__ import annotations

import asyncio
import socket
import struct

import pytest
from glbdlab.netns import Lab, Netns
from glbdlab.waits import until as _until

from heartbeat import wire
from heartbeat.reasons import DropReason
from heartbeat.receiver import Neighbor, Receiver, ReceiverParams, RemoteUpdate
from heartbeat.sender import Sender, SenderParams, initial_sequence
from heartbeat.transport import DEFAULT_GROUP, DEFAULT_GROUP6, DEFAULT_PORT, HeartbeatEndpoint
from heartbeat.wire import Entry, Heartbeat, HmacKey

SPINE, LEAF, OTHER = (wire.node_id(a) for a in ("10.0.0.1", "10.0.0.2", "10.0.0.99"))
KEY = HmacKey(5, b"0123456789abcdef-lab")
ENTRIES = [Entry(LEAF, 2, 10_000, 6, 0, 2500, 1500)]


def _ip_udp(src: str, dst: str, ttl: int, payload: bytes) -> bytes:
    udp = struct.pack("!HHHH", 40000, DEFAULT_PORT, 8 + len(payload), 0) + payload  # csum 0
    ip = struct.pack(
        "!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, ttl, socket.IPPROTO_UDP, 0,
        socket.inet_aton(src), socket.inet_aton(dst),
    )  # fmt: skip
    return ip + udp


def _send_raw_ttl(ns: Netns, ifname: str, src: str, ttl: int, payload: bytes) -> None:
    with ns.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, ifname.encode())
        s.sendto(_ip_udp(src, DEFAULT_GROUP, ttl, payload), (DEFAULT_GROUP, 0))


def _send_udp(ns: Netns, ifname: str, payload: bytes) -> None:
    with ns.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, ifname.encode())
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 255)
        s.sendto(payload, (DEFAULT_GROUP, DEFAULT_PORT))


@pytest.mark.netns
async def test_heartbeats_over_veth_with_rejections(netns_lab: Lab) -> None:
    spine, leaf = netns_lab.pair("spine", "leaf", a_addr="198.18.0.1/30", b_addr="198.18.0.2/30")
    s_if, l_if = "spine-leaf", "leaf-spine"
    loop = asyncio.get_running_loop()
    updates: list[RemoteUpdate] = []

    sender = Sender(
        SenderParams(SPINE, interval_s=0.02, key=KEY), initial_sequence(loop.time() + 1e6)
    )
    tx = HeartbeatEndpoint(loop, sender=sender, receiver=None)
    receiver = Receiver(ReceiverParams(keys={KEY.key_id: KEY}))
    rx = HeartbeatEndpoint(loop, sender=None, receiver=receiver, on_remote=updates.extend)
    try:
        with leaf.entered():
            rx.set_neighbors([Neighbor(l_if, SPINE, "198.18.0.1")])
        tx.update_links(ENTRIES)
        with spine.entered():
            tx.set_neighbors([Neighbor(s_if, LEAF, "198.18.0.2")])

        await _until(lambda: any(u.reason == "new" for u in updates))
        new = next(u for u in updates if u.reason == "new")
        assert new.node_id == SPINE and list(new.entries or ()) == ENTRIES
        await _until(lambda: receiver.accepted >= 5)
        assert receiver.drops == {}

        seq = sender.sequence
        good_future = Heartbeat(SPINE, seq + 1000, 20_000, ENTRIES).encode(KEY)
        _send_raw_ttl(spine, s_if, "198.18.0.1", 254, good_future)
        _send_udp(spine, s_if, Heartbeat(OTHER, seq + 1000, 20_000, ENTRIES).encode(KEY))
        _send_udp(spine, s_if, Heartbeat(SPINE, seq - 3, 20_000, ENTRIES).encode(KEY))
        _send_udp(
            spine, s_if, Heartbeat(SPINE, seq + 2000, 20_000, ENTRIES).encode(HmacKey(5, b"x" * 16))
        )
        _send_udp(spine, s_if, b"GH\x01")
        want = {"bad_ttl", "wrong_sender", "stale_sequence", "auth_bad_digest", "malformed"}
        await _until(lambda: want <= set(receiver.drops))
        assert all(receiver.drops[DropReason(k)] == 1 for k in want), dict(receiver.drops)
        # none of the forged datagrams advanced the sequence: the real sender is still accepted
        n = receiver.accepted
        await _until(lambda: receiver.accepted >= n + 3)
        assert set(receiver.drops) == want | {"malformed_too_short"}

        # a band change goes out at once (on-change), and reaches the receiver as "changed"
        tx.update_links([ENTRIES[0]._replace(band=1)])
        await _until(lambda: any(u.reason == "changed" for u in updates), timeout=2.0)
        d = rx.to_dict()["receiver"]
        assert d["senders"][0]["entries"][0]["band"] == 1
        assert d["interfaces"][0]["neighbor_id"] == "10.0.0.1"

        tx.close()  # the spine goes silent: entries expire (3 x 20 ms), i.e. become unknown
        await _until(lambda: updates[-1].reason == "expired", timeout=2.0)
        assert updates[-1].entries is None and receiver.remote(SPINE) is None
    finally:
        tx.close()
        rx.close()


def _send6(ns: Netns, ifname: str, src: str, hops: int, payload: bytes, group: str) -> None:
    """A UDP datagram to ``group`` out of ``ifname`` from ``src`` with hop limit ``hops``."""
    with ns.entered():
        idx = socket.if_nametoindex(ifname)
        s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    with s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, ifname.encode())
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, idx)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, hops)
        s.bind((src, 0, 0, idx))
        s.sendto(payload, (group, DEFAULT_PORT, 0, idx))


def _ll_pair(lab: Lab, a: str, b: str, a_addrs: list[str], b_addrs: list[str]) -> tuple[str, str]:
    """Namespaces ``a`` and ``b`` joined by a veth that has only the given (nodad) addresses:
    no automatic link-local, so the addresses on the link are exactly the ones named."""
    na, nb = lab.netns(a), lab.netns(b)
    a_if, b_if = f"{a}-{b}", f"{b}-{a}"
    lab.veth(na, a_if, nb, b_if, a_addr=a_addrs, b_addr=b_addrs, up=False)
    for ns, ifn in ((na, a_if), (nb, b_if)):
        ns.ip("link", "set", ifn, "addrgenmode", "none")
        ns.link_up(ifn)
    return a_if, b_if


def _joined(ns: Netns, ifname: str) -> set[str]:
    out = ns.ip("-6", "maddr", "show", "dev", ifname).stdout
    return {w.split()[1] for w in out.splitlines() if w.strip().startswith("inet6 ")}


@pytest.mark.netns
async def test_ipv6_heartbeats_over_link_local_veth_with_rejections(netns_lab: Lab) -> None:
    """An unnumbered fabric link: the BGP session runs between link-local addresses, so the
    heartbeats do too (ff12::149, hop limit 255, source = the session's link-local address)."""
    s_if, l_if = _ll_pair(netns_lab, "s6", "l6", ["fe80::1/64", "fe80::99/64"], ["fe80::2/64"])
    spine, leaf = netns_lab.namespaces["s6"], netns_lab.namespaces["l6"]
    loop = asyncio.get_running_loop()
    updates: list[RemoteUpdate] = []
    sender = Sender(
        SenderParams(SPINE, interval_s=0.02, key=KEY), initial_sequence(loop.time() + 1e6)
    )
    tx = HeartbeatEndpoint(loop, sender=sender, receiver=None)
    receiver = Receiver(ReceiverParams(keys={KEY.key_id: KEY}))
    rx = HeartbeatEndpoint(loop, sender=None, receiver=receiver, on_remote=updates.extend)
    try:
        with leaf.entered():
            rx.set_neighbors([Neighbor(l_if, SPINE, "fe80::1")])
        tx.update_links(ENTRIES)
        with spine.entered():  # two link-local addresses: the pin picks the session's one
            tx.set_neighbors([Neighbor(s_if, LEAF, "fe80::2", local="fe80::1")])
        assert tx.transport.families() == {s_if: 6} and rx.transport.families() == {l_if: 6}
        assert DEFAULT_GROUP6 in _joined(leaf, l_if)

        await _until(lambda: any(u.reason == "new" for u in updates))
        new = next(u for u in updates if u.reason == "new")
        assert new.node_id == SPINE and list(new.entries or ()) == ENTRIES
        await _until(lambda: receiver.accepted >= 5)
        assert receiver.drops == {}  # hop limit 255 read back from IPV6_HOPLIMIT

        seq = sender.sequence

        def forge(src: str, hops: int, sender_id: int, seq: int, key: HmacKey = KEY) -> None:
            dg = Heartbeat(sender_id, seq, 20_000, ENTRIES).encode(key)
            _send6(spine, s_if, src, hops, dg, DEFAULT_GROUP6)

        forge("fe80::1", 254, SPINE, seq + 1000)  # hop limit 254: not one hop away
        forge("fe80::99", 255, SPINE, seq + 1000)  # another address of the spine's interface
        forge("fe80::1", 255, OTHER, seq + 1000)
        forge("fe80::1", 255, SPINE, seq - 3)  # replayed sequence
        forge("fe80::1", 255, SPINE, seq + 2000, HmacKey(5, b"x" * 16))
        _send6(spine, s_if, "fe80::1", 255, b"GH\x01", DEFAULT_GROUP6)
        want = {
            "bad_ttl",
            "wrong_source",
            "wrong_sender",
            "stale_sequence",
            "auth_bad_digest",
            "malformed",
        }
        await _until(lambda: want <= set(receiver.drops))
        assert all(receiver.drops[DropReason(k)] == 1 for k in want), dict(receiver.drops)
        # none of the forged datagrams advanced the sequence: the real sender is still accepted
        n = receiver.accepted
        await _until(lambda: receiver.accepted >= n + 3)
        assert set(receiver.drops) == want | {"malformed_too_short"}
        d = rx.to_dict()["receiver"]["interfaces"][0]
        assert d["neighbor_address"] == "fe80::1" and d["neighbor_id"] == "10.0.0.1"

        # reload: a new group6 reopens the sockets, joins the new group, leaves the old one
        with leaf.entered():
            assert rx.set_groups(DEFAULT_GROUP, "ff12::150", DEFAULT_PORT)
            assert not rx.set_groups(DEFAULT_GROUP, "ff12::150", DEFAULT_PORT)
        with spine.entered():
            assert tx.set_groups(DEFAULT_GROUP, "ff12::150", DEFAULT_PORT)
        joined = _joined(leaf, l_if)
        assert "ff12::150" in joined and DEFAULT_GROUP6 not in joined
        n = receiver.accepted
        await _until(lambda: receiver.accepted >= n + 3)
        assert rx.transport.families() == {l_if: 6} and rx.transport.errors == {}
        assert rx.to_dict()["group6"] == "ff12::150"

        tx.close()  # the spine goes silent: entries expire (3 x 20 ms), i.e. become unknown
        await _until(lambda: updates[-1].reason == "expired", timeout=2.0)
        assert updates[-1].entries is None and receiver.remote(SPINE) is None
    finally:
        tx.close()
        rx.close()


@pytest.mark.netns
async def test_ipv6_heartbeats_from_the_session_address_on_a_numbered_link(
    netns_lab: Lab,
) -> None:
    """A numbered IPv6 link (global addresses plus link-local ones): the kernel would source a
    link-scope multicast from the link-local address, which is not the BGP neighbour's address;
    the sender pins the session address, so the receiver's source check holds."""
    s_addrs, l_addrs = ["fe80::1/64", "2001:db8:ff::1/64"], ["fe80::2/64", "2001:db8:ff::2/64"]
    s_if, l_if = _ll_pair(netns_lab, "sn", "ln", s_addrs, l_addrs)
    spine, leaf = netns_lab.namespaces["sn"], netns_lab.namespaces["ln"]
    loop = asyncio.get_running_loop()
    receiver = Receiver()
    tx = HeartbeatEndpoint(loop, sender=Sender(SenderParams(SPINE), 1), receiver=None)
    rx = HeartbeatEndpoint(loop, sender=None, receiver=receiver)
    try:
        tx.update_links(ENTRIES)
        with leaf.entered():
            rx.set_neighbors([Neighbor(l_if, SPINE, "2001:db8:ff::1")])
        with spine.entered():  # no pin: the kernel's choice of source
            tx.set_neighbors([Neighbor(s_if, LEAF, "2001:db8:ff::2")])
        await _until(lambda: receiver.drops[DropReason.WRONG_SOURCE] >= 2)
        assert receiver.accepted == 0
        with spine.entered():  # the pin (what glbd's wiring passes: the BGP local address)
            tx.set_neighbors([Neighbor(s_if, LEAF, "2001:db8:ff::2", local="2001:db8:ff::1")])
        await _until(lambda: receiver.accepted >= 3)
        assert tx.transport.families() == {s_if: 6} and tx.transport.errors == {}
    finally:
        tx.close()
        rx.close()


def _leaf_under_four_helpers(
    lab: Lab,
) -> tuple[list[Netns], list[int], HeartbeatEndpoint, list[list[RemoteUpdate]]]:
    """A leaf with one link to each of four helpers and a receiving endpoint on it that
    records each ``on_remote`` call: (the helpers' namespaces, their ids, endpoint, calls)."""
    leaf = lab.netns("leaf")
    helpers = [wire.node_id(f"10.0.0.{i}") for i in range(1, 5)]
    spines, neighbors = [], []
    for i, hid in enumerate(helpers):
        sp = lab.netns(f"s{i}")
        lab.veth(
            leaf, f"l-s{i}", sp, f"s{i}-l", a_addr=f"198.18.{i}.2/30", b_addr=f"198.18.{i}.1/30"
        )
        spines.append(sp)
        neighbors.append(Neighbor(f"l-s{i}", hid, f"198.18.{i}.1"))
    calls: list[list[RemoteUpdate]] = []
    receiver = Receiver(ReceiverParams(keys={KEY.key_id: KEY}))
    rx = HeartbeatEndpoint(
        asyncio.get_running_loop(), sender=None, receiver=receiver, on_remote=calls.append
    )
    with leaf.entered():
        rx.set_neighbors(neighbors)
    return spines, helpers, rx, calls


@pytest.mark.netns
async def test_a_burst_from_many_helpers_is_delivered_in_one_call(netns_lab: Lab) -> None:
    """Heartbeats that wait on several ports when the loop gets to them (one per helper) reach
    ``on_remote`` together, once every port was read: the path table recomputes once for the
    burst, not once per helper (what kept a leaf under 64 spines behind its own expiry)."""
    spines, helpers, rx, calls = _leaf_under_four_helpers(netns_lab)
    try:
        # all four are sent before the loop runs again: they wait on four sockets
        for i, (sp, hid) in enumerate(zip(spines, helpers, strict=True)):
            _send_udp(sp, f"s{i}-l", Heartbeat(hid, 1, 20_000, ENTRIES).encode(KEY))
        await _until(lambda: sum(map(len, calls)) >= len(helpers))
        assert [sorted(u.node_id for u in c) for c in calls] == [sorted(helpers)]
        assert {u.reason for u in calls[0]} == {"new"}
    finally:
        rx.close()


@pytest.mark.netns
async def test_the_first_change_of_a_turn_goes_at_once_the_rest_together(
    netns_lab: Lab,
) -> None:
    """A band change is handed over from the socket's reader, not after the turn's other
    callbacks; further changes read in the same turn wait for its end and come together (a
    burst, or a helper flooding changes, costs two recomputes a turn)."""
    spines, helpers, rx, calls = _leaf_under_four_helpers(netns_lab)
    changed = [ENTRIES[0]._replace(band=3)]
    try:
        for i, (sp, hid) in enumerate(zip(spines, helpers, strict=True)):
            _send_udp(sp, f"s{i}-l", Heartbeat(hid, 1, 20_000, ENTRIES).encode(KEY))
        await _until(lambda: sum(map(len, calls)) >= len(helpers))
        assert len(calls) == 1  # new helpers: together
        # the stimulus: a change from every helper (and a second one from the first), all
        # waiting on their sockets before the loop runs again
        for i, (sp, hid) in enumerate(zip(spines, helpers, strict=True)):
            _send_udp(sp, f"s{i}-l", Heartbeat(hid, 2, 20_000, changed).encode(KEY))
        _send_udp(spines[0], "s0-l", Heartbeat(helpers[0], 3, 20_000, ENTRIES).encode(KEY))
        await _until(lambda: sum(map(len, calls)) >= 2 * len(helpers) + 1)
        assert [len(c) for c in calls[1:]] == [1, len(helpers)]
        assert {u.reason for c in calls[1:] for u in c} == {"changed"}
        assert sorted(u.node_id for c in calls[1:] for u in c) == sorted([*helpers, helpers[0]])
    finally:
        rx.close()
