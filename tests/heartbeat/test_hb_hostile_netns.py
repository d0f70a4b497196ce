"""A hostile neighbour on a live link: scapy-built datagrams from the spine's own address (TTL
255) into a running receiver endpoint. The forged sequence + 2**31 - 1 / interval 0xFFFFFFFF
datagram, and a forged jump with a valid interval, must not lock the real sender out."""

from __future__ import annotations

import asyncio
import socket

import pytest
from glbdlab.netns import Lab, Netns
from glbdlab.waits import until as _until

from heartbeat import wire
from heartbeat.receiver import Neighbor, Receiver, RemoteUpdate
from heartbeat.sender import Sender, SenderParams, initial_sequence
from heartbeat.transport import DEFAULT_GROUP, DEFAULT_PORT, HeartbeatEndpoint
from heartbeat.wire import Entry, Heartbeat

SPINE, LEAF = wire.node_id("10.0.0.1"), wire.node_id("10.0.0.2")
ENTRIES = [Entry(LEAF, 2, 10_000, 6)]
FORGED = [Entry(LEAF, 2, 10_000, 0, 0x80)]  # "link down": what the attacker wants believed


def _inject(ns: Netns, ifname: str, src: str, payload: bytes) -> None:
    """One IPv4/UDP datagram built by scapy (TTL 255, the spine's address as source) sent
    from a raw socket in ``ns`` out of ``ifname``."""
    from scapy.layers.inet import IP, UDP

    pkt = bytes(
        IP(src=src, dst=DEFAULT_GROUP, ttl=255) / UDP(sport=40000, dport=DEFAULT_PORT) / payload
    )
    with ns.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, ifname.encode())
        s.sendto(pkt, (DEFAULT_GROUP, 0))


@pytest.mark.netns
async def test_forged_sequence_and_interval_do_not_lock_out_a_live_sender(netns_lab: Lab) -> None:
    spine, leaf = netns_lab.pair("hs", "hl", a_addr="198.18.0.1/30", b_addr="198.18.0.2/30")
    s_if, l_if = "hs-hl", "hl-hs"
    loop = asyncio.get_running_loop()
    updates: list[RemoteUpdate] = []
    sender = Sender(SenderParams(SPINE, interval_s=0.02), initial_sequence(1_700_000_000.0))
    tx = HeartbeatEndpoint(loop, sender=sender, receiver=None)
    receiver = Receiver()  # the default config: no HMAC
    rx = HeartbeatEndpoint(loop, sender=None, receiver=receiver, on_remote=updates.extend)
    try:
        with leaf.entered():
            rx.set_neighbors([Neighbor(l_if, SPINE, "198.18.0.1")])
        tx.update_links(ENTRIES)
        with spine.entered():
            tx.set_neighbors([Neighbor(s_if, LEAF, "198.18.0.2")])
        await _until(lambda: receiver.accepted >= 3)

        top = (sender.sequence + (1 << 31) - 1) & 0xFFFFFFFF
        _inject(spine, s_if, "198.18.0.1", Heartbeat(SPINE, top, 0xFFFFFFFF, FORGED).encode())
        await _until(lambda: receiver.drops["interval_too_long"] == 1)
        jump = (sender.sequence + (1 << 30)) & 0xFFFFFFFF
        _inject(spine, s_if, "198.18.0.1", Heartbeat(SPINE, jump, 10_000_000, FORGED).encode())
        await _until(lambda: receiver.drops["sequence_jump"] == 1)

        n = receiver.accepted
        await _until(lambda: receiver.accepted >= n + 10)
        assert receiver.remote(SPINE) == ENTRIES
        assert not any(u.entries == FORGED for u in updates)
        assert set(receiver.drops) == {"interval_too_long", "sequence_jump"}, receiver.drops
        senders = rx.to_dict()["receiver"]["senders"]
        assert senders[0]["interval_ms"] == 20 and senders[0]["expires_in_ms"] <= 60
    finally:
        tx.close()
        rx.close()
