"""A local unprivileged process cannot forge BFD (``bfd/engine/wirefilter.py``).

On IPv6 a process running as uid 65534 can bind the neighbour's link-local address
(``IPV6_FREEBIND``) and send glbd's engine a control packet with that source, the session's
source port and hop limit 255: every user-space check (GTSM, source, scope) passes. The
engine's receive socket keeps only what arrived from the wire on its port, so the forged Down is
counted (``local_origin``) and dropped, the session stays Up, and the neighbour's own Down over
the veth (the wire) still takes it down.
"""

from __future__ import annotations

import queue
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from bfdwait import next_event, until
from glbdlab.netns import Lab

from bfd.engine import BfdEngine, BfdEvent, SessionConfig
from bfd.packet import ControlPacket, State
from bfd.session import SessionParams
from tests.localforger import forge

pytestmark = pytest.mark.netns

PEER, LOCAL = "fe80::a", "fe80::b"
PEER_DISCR = 0x5EED
PEER_PORT = 49200
SLOW = SessionParams(desired_min_tx=1_000_000, required_min_rx=1_000_000, detect_mult=5)


class Rig:
    """glbd's engine in ``b`` with a link-local session to a scripted peer in ``a``."""

    def __init__(self, lab: Lab, kernel_rx: bool) -> None:
        self.a, self.b = lab.pair(a_addr=PEER + "/64", b_addr=LOCAL + "/64")
        with self.a.entered():
            self.scope = socket.if_nametoindex("a-b")
        self.sink = self.a.socket(socket.AF_INET6, socket.SOCK_DGRAM)  # the engine's sends
        self.sink.bind((PEER, 3784, 0, self.scope))
        lab.on_close(self.sink.close)
        self.events: queue.Queue[BfdEvent] = queue.Queue()
        self.engine = BfdEngine(self.events.put, netns=self.b.name, kernel_rx=kernel_rx)
        self.engine.start()
        lab.on_close(self.engine.stop)
        self.engine.add_session(SessionConfig(PEER, "b-a", LOCAL, SLOW))
        self.tx = self.a.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        self.tx.bind((PEER, PEER_PORT, 0, self.scope))
        self.tx.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, 255)
        lab.on_close(self.tx.close)

    def packet(self, state: State, your: int) -> bytes:
        return ControlPacket(
            state,
            my_discriminator=PEER_DISCR,
            your_discriminator=your,
            desired_min_tx=SLOW.desired_min_tx,
            required_min_rx=SLOW.required_min_rx,
            detect_mult=SLOW.detect_mult,
        ).encode()

    def send(self, data: bytes) -> None:
        self.tx.sendto(data, (LOCAL, 3784, 0, self.scope))

    def snap(self) -> dict[str, Any]:
        return self.engine.snapshot()

    def session(self) -> dict[str, Any]:
        return dict(self.snap()["sessions"][0])

    def wait_state(self, new: State) -> BfdEvent:
        return next_event(self.events, lambda ev: ev.new == new, 5.0, self.session)

    def up(self) -> int:
        """The three-way handshake over the veth; returns glbd's discriminator."""
        mine = until(self.session, lambda s: s["local_discriminator"] > 0, "a discriminator")
        discr = int(mine["local_discriminator"])
        self.send(self.packet(State.DOWN, 0))
        self.wait_state(State.INIT)
        self.send(self.packet(State.UP, discr))
        self.wait_state(State.UP)
        return discr


@pytest.fixture(params=[True, False], ids=["kernel_rx", "socket_only"])
def rig(request: pytest.FixtureRequest, netns_lab: Lab) -> Iterator[Rig]:
    yield Rig(netns_lab, request.param)


def test_a_local_process_cannot_forge_a_down(rig: Rig) -> None:
    discr = rig.up()
    before = rig.session()
    assert before["state"] == "up"
    down = rig.packet(State.DOWN, discr)
    forge(rig.b, "b-a", PEER, PEER_PORT, LOCAL, 3784, down)
    snap = until(
        rig.snap,
        lambda s: s["counters"]["unmatched_drops"].get("local_origin", 0) >= 1,
        "the forged Down counted as local_origin",
    )
    assert snap["counters"]["unmatched_drops"] == {"local_origin": 1}
    assert snap["sockets"][0]["drops"] == {"local_origin": 1}
    s = snap["sessions"][0]
    assert s["state"] == "up" and s["drops"] == {}
    assert s["packets_in"] == before["packets_in"]  # the engine never saw it
    assert rig.events.empty() or all(ev.new == State.UP for ev in list(rig.events.queue))
    # the same bytes from the wire are the neighbour's: the session goes down at once
    rig.send(down)
    ev = rig.wait_state(State.DOWN)
    assert ev.reason == "neighbor_down"
    assert rig.snap()["counters"]["unmatched_drops"] == {"local_origin": 1}
