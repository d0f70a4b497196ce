"""A real sender and receiver exchange heartbeats over a veth between two namespaces, and the
receiver rejects forged ones: TTL 254 (from a raw socket), wrong sender, replayed sequence, bad
HMAC. Uses the lab's ``netns_lab`` fixture (namespaces deleted after the test)."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Callable

import pytest

from glbd.lab.netns import Lab, Netns
from heartbeat import wire
from heartbeat.receiver import Neighbor, Receiver, ReceiverParams, RemoteUpdate
from heartbeat.sender import Sender, SenderParams, initial_sequence
from heartbeat.transport import DEFAULT_GROUP, DEFAULT_PORT, HeartbeatEndpoint
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


async def _until(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        if loop.time() > end:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)


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
        assert all(receiver.drops[k] == 1 for k in want), dict(receiver.drops)
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


@pytest.mark.netns
async def test_heartbeats_over_ipv6_link_local_group(netns_lab: Lab) -> None:
    spine, leaf = netns_lab.pair("s6", "l6")
    loop = asyncio.get_running_loop()
    updates: list[RemoteUpdate] = []
    group = "ff02::149"
    tx = HeartbeatEndpoint(loop, sender=Sender(SenderParams(SPINE), 1), receiver=None, group=group)
    receiver = Receiver()
    rx = HeartbeatEndpoint(
        loop, sender=None, receiver=receiver, on_remote=updates.extend, group=group
    )
    try:
        tx.update_links(ENTRIES)
        with leaf.entered():
            rx.set_neighbors([Neighbor("l6-s6", SPINE, None)])
        with spine.entered():
            tx.set_neighbors([Neighbor("s6-l6", LEAF, None)])
        await _until(lambda: receiver.accepted >= 3)
        assert updates[0].reason == "new" and list(updates[0].entries or ()) == ENTRIES
        assert receiver.drops == {}  # hop limit 255 read from IPV6_HOPLIMIT
        src = rx.to_dict()["receiver"]["interfaces"][0]
        assert src["accepted"] >= 3
    finally:
        tx.close()
        rx.close()
