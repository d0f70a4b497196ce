"""A heartbeat socket that fails to open (out of descriptors, interface not there yet) is retried
with backoff until it opens, and the sender then sends on it; an interface no longer wanted is
not retried. Virtual time (``tests/vtime.py``); ``open_socket`` is replaced by one that fails a
given number of times, then hands out a socket that records what is sent (nothing leaves)."""

from __future__ import annotations

import asyncio
import errno
import socket
from typing import Any

import pytest

from heartbeat import transport, wire
from heartbeat.receiver import Neighbor
from heartbeat.sender import Sender, SenderParams
from heartbeat.transport import OPEN_RETRY_MAX_S, HeartbeatEndpoint, McastTransport
from heartbeat.wire import Entry
from tests import vtime

SPINE, LEAF = wire.node_id("10.0.0.1"), wire.node_id("10.0.0.2")
ENTRIES = [Entry(LEAF, 2, 10_000, 6, 0, 2500, 1500)]


class _Recording:
    """Stands for a heartbeat socket: a real descriptor to watch, sends recorded."""

    def __init__(self) -> None:
        self._sock, self._peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sent: list[tuple[bytes, Any]] = []

    def fileno(self) -> int:
        return self._sock.fileno()

    def sendto(self, data: bytes, dest: Any) -> int:
        self.sent.append((data, dest))
        return len(data)

    def close(self) -> None:
        self._sock.close()
        self._peer.close()


class _FailingOpen:
    """``open_socket`` failing with EMFILE ``fails`` times, recording when it was tried."""

    def __init__(self, fails: int) -> None:
        self.fails = fails
        self.tries: list[float] = []
        self.socks: list[_Recording] = []

    def __call__(self, ifname: str, group: str, port: int) -> _Recording:
        self.tries.append(asyncio.get_running_loop().time())
        if len(self.tries) <= self.fails:
            raise OSError(errno.EMFILE, "Too many open files")
        s = _Recording()
        self.socks.append(s)
        return s


def test_failed_open_is_retried_with_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FailingOpen(fails=3)
    monkeypatch.setattr(transport, "open_socket", fake)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        opened = asyncio.Event()
        t = McastTransport(loop, lambda *_a: None, on_opened=lambda _ifn: opened.set())
        try:
            t.set_interfaces(["eth9"])
            assert t.interfaces == [] and fake.tries == [0.0]
            t.set_interfaces(["eth9"])  # asked again: tried again, the retry keeps its time
            await asyncio.wait_for(opened.wait(), 60.0)
            assert t.interfaces == ["eth9"]
            assert fake.tries == pytest.approx([0.0, 0.0, 1.0, 3.0])  # 1 s, then 2 s
            assert t.errors == {"open_failed": 3}
        finally:
            t.close()

    vtime.run(main)


def test_backoff_is_capped_and_unwanted_interface_not_retried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = _FailingOpen(fails=1000)
    monkeypatch.setattr(transport, "open_socket", fake)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        t = McastTransport(loop, lambda *_a: None)
        try:
            t.set_interfaces(["eth9"])
            while loop.time() < 200.0:  # the stimulus: 200 s of virtual time without a socket
                await asyncio.sleep(1.0)  # the stimulus: virtual time passing
            gaps = [b - a for a, b in zip(fake.tries, fake.tries[1:], strict=False)]
            assert gaps[:5] == pytest.approx([1.0, 2.0, 4.0, 8.0, 16.0])
            assert max(gaps) == pytest.approx(OPEN_RETRY_MAX_S)
            t.set_interfaces([])  # the session went down: no more tries
            n = len(fake.tries)
            await asyncio.sleep(2 * OPEN_RETRY_MAX_S)  # the stimulus: a retry would be due
            assert len(fake.tries) == n
        finally:
            t.close()

    vtime.run(main)


def test_sender_sends_once_its_socket_opens_on_retry(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FailingOpen(fails=2)
    monkeypatch.setattr(transport, "open_socket", fake)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        sender = Sender(SenderParams(SPINE, interval_s=0.5), 1)
        ep = HeartbeatEndpoint(loop, sender=sender, receiver=None)
        try:
            ep.update_links(ENTRIES)
            ep.set_neighbors([Neighbor("eth9", LEAF, "198.18.0.2")])
            assert ep.transport.interfaces == [] and sender.sent == 0
            while not (fake.socks and len(fake.socks[0].sent) >= 3):
                await asyncio.sleep(0.1)  # poll (virtual time)
            assert ep.transport.errors == {"open_failed": 2}
            assert ep.to_dict()["sockets"] == ["eth9"]
            data, dest = fake.socks[0].sent[0]
            assert wire.decode(data).sender_id == SPINE and dest[1] == ep.transport.port
        finally:
            ep.close()

    vtime.run(main)
