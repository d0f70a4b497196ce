"""A local unprivileged process cannot forge heartbeats (the transport's kernel socket filter).

IPv6 heartbeats are link-scope multicast, and multicast loopback is on by default: a process
running as uid 65534 on the leaf that binds the spine's link-local address (``IPV6_FREEBIND``)
and sends to the group on the fabric port with hop limit 255 reaches the leaf's heartbeat
socket with the spine's source, on the right interface. The socket keeps only what arrived
from the wire, so the forged "link down" is counted (``local_origin``) and dropped, and the
spine's quality as the leaf sees it does not move.
"""

from __future__ import annotations

import asyncio

import pytest
from glbdlab.netns import Lab
from glbdlab.waits import until as _until

from heartbeat import wire
from heartbeat.receiver import Neighbor, Receiver, RemoteUpdate
from heartbeat.sender import Sender, SenderParams, initial_sequence
from heartbeat.transport import DEFAULT_GROUP6, DEFAULT_PORT, HeartbeatEndpoint
from heartbeat.wire import Entry, Heartbeat
from tests.localforger import forge_async

SPINE, LEAF = wire.node_id("10.0.0.1"), wire.node_id("10.0.0.2")
SPINE_LL, LEAF_LL = "fe80::1", "fe80::2"
ENTRIES = [Entry(LEAF, 2, 10_000, 6)]
FORGED = [Entry(LEAF, 2, 10_000, 0, 0x80)]  # "link down": what the attacker wants believed


@pytest.mark.netns
async def test_a_local_process_cannot_forge_a_heartbeat(netns_lab: Lab) -> None:
    spine, leaf = netns_lab.pair("hs", "hl", a_addr=SPINE_LL + "/64", b_addr=LEAF_LL + "/64")
    s_if, l_if = "hs-hl", "hl-hs"
    loop = asyncio.get_running_loop()
    updates: list[RemoteUpdate] = []
    sender = Sender(SenderParams(SPINE, interval_s=0.02), initial_sequence(1_700_000_000.0))
    tx = HeartbeatEndpoint(loop, sender=sender, receiver=None)
    receiver = Receiver()  # the default config: no HMAC, so a forgery that arrives is believed
    rx = HeartbeatEndpoint(loop, sender=None, receiver=receiver, on_remote=updates.extend)
    try:
        with leaf.entered():
            rx.set_neighbors([Neighbor(l_if, SPINE, SPINE_LL)])
        tx.update_links(ENTRIES)
        with spine.entered():
            tx.set_neighbors([Neighbor(s_if, LEAF, LEAF_LL, local=SPINE_LL)])
        await _until(lambda: receiver.accepted >= 3)
        assert receiver.remote(SPINE) == ENTRIES

        def forged() -> bytes:
            # 100 ms ahead of the spine's sequence (one a millisecond): newer than the spine's
            # next ones and within the jump bound, so believed at once if it got in
            seq = (sender.sequence + 100) & 0xFFFFFFFF
            return Heartbeat(SPINE, seq, 20_000, FORGED).encode()

        await forge_async(leaf, l_if, SPINE_LL, 40000, DEFAULT_GROUP6, DEFAULT_PORT, forged)

        def believed() -> bool:
            return any(u.entries == FORGED for u in updates)

        def dropped() -> bool:
            return int(rx.to_dict()["receiver"]["drops"].get("local_origin", 0)) >= 1

        await _until(lambda: believed() or dropped())
        assert not believed(), "the forged heartbeat moved the quality"

        n = receiver.accepted
        await _until(lambda: receiver.accepted >= n + 5)
        assert receiver.remote(SPINE) == ENTRIES
        assert not believed()
        assert dict(receiver.drops) == {"local_origin": 1}
    finally:
        tx.close()
        rx.close()
