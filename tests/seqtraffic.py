"""Numbered UDP streams between lab namespaces, to count what a restart loses.

Each :class:`Stream` sends datagrams carrying a sequence number at a fixed rate from a socket
in one namespace to a socket in another (threads in the test process), and counts the distinct
numbers received::

    with Stream(fab.ns("host1"), fab.ns("host2"), "198.19.2.2", pps=1000) as s:
        ...                        # the restart under test
    print(s.result())              # {"sent": .., "received": .., "lost": .., ...}

Leaving the block stops the sender, then gives the last datagrams up to ``settle_s`` to arrive
(ending at once when every one has).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from types import TracebackType
from typing import Any

from glbdlab.netns import Netns

_HDR = struct.Struct("!Q")


class Stream:
    """``pps`` datagrams a second from ``src`` to ``dst_addr`` (in ``dst``), numbered."""

    def __init__(
        self,
        src: Netns,
        dst: Netns,
        dst_addr: str,
        *,
        pps: int = 1000,
        port: int = 47_000,
        settle_s: float = 2.0,
    ) -> None:
        self.pps, self.settle_s = pps, settle_s
        self.rx_sock = dst.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.rx_sock.bind(("0.0.0.0", port))
        self.rx_sock.settimeout(0.1)
        self.tx_sock = src.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.tx_sock.connect((dst_addr, port))
        self.sent = 0
        self.send_errors = 0
        self.seen: set[int] = set()
        self._stop_tx = threading.Event()
        self._stop_rx = threading.Event()
        self._tx = threading.Thread(target=self._send, daemon=True)
        self._rx = threading.Thread(target=self._recv, daemon=True)

    def __enter__(self) -> Stream:
        self._rx.start()
        self._tx.start()
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def received(self) -> int:
        return len(self.seen)

    def stop_sending(self) -> None:
        """Stop the sender (several streams stop together before :meth:`stop` waits)."""
        self._stop_tx.set()
        self._tx.join(5)

    def stop(self) -> None:
        """Stop sending; wait for the stragglers (at most ``settle_s``), then stop receiving."""
        if not self._tx.is_alive() and not self._rx.is_alive():
            return
        self.stop_sending()
        deadline = time.monotonic() + self.settle_s
        while len(self.seen) < self.sent and time.monotonic() < deadline:
            time.sleep(0.01)  # poll interval of the condition above, not a wait for an outcome
        self._stop_rx.set()
        self._rx.join(5)
        self.rx_sock.close()
        self.tx_sock.close()

    def _send(self) -> None:
        t0 = time.monotonic()
        payload = bytes(64)
        while not self._stop_tx.is_set():
            due = t0 + self.sent / self.pps
            now = time.monotonic()
            if due > now:
                time.sleep(due - now)
                continue
            try:
                self.tx_sock.send(_HDR.pack(self.sent) + payload)
            except OSError:  # no route for a moment: that datagram is lost, and counted so
                self.send_errors += 1
            self.sent += 1

    def _recv(self) -> None:
        while not self._stop_rx.is_set():
            try:
                data = self.rx_sock.recv(2048)
            except TimeoutError:
                continue
            except OSError:
                return
            with contextlib.suppress(struct.error):
                self.seen.add(_HDR.unpack_from(data)[0])

    def result(self) -> dict[str, Any]:
        """Sent, received, lost, and the longest run of lost datagrams (ms at ``pps``)."""
        sent = self.sent
        seen = {s for s in self.seen if s < sent}
        longest = run = 0
        for i in range(sent):
            run = 0 if i in seen else run + 1
            longest = max(longest, run)
        return {
            "sent": sent,
            "received": len(seen),
            "lost": sent - len(seen),
            "send_errors": self.send_errors,
            "longest_gap_ms": round(longest * 1000 / self.pps, 1),
        }
