"""How control calls and events travel between the daemon and the engine loop.

Process mode: a socketpair carrying pickles in ``multiprocessing.connection`` frames (4-byte
big-endian length, pickle).

* :class:`EngineEnd`, in the engine process: non-blocking both ways, so a daemon that is slow
  to read events can never stall the BFD loop (events queue up here instead). Events of one
  loop iteration go out as one message.
* :class:`DaemonEnd`, in the daemon: a blocking ``Connection``; calls are matched to replies by
  id, and a reader thread delivers events and replies.

Thread mode: :class:`LocalChannel`, a queue plus an eventfd the loop polls.

Messages: daemon -> engine ``("call", id, op, args)`` and ``("stop",)``; engine -> daemon
``("reply", id, ok, value_or_exception)`` and ``("events", [EventWire, ...])``.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import pickle
import queue
import select
import socket
import struct
import threading
from collections.abc import Callable
from concurrent.futures import Future
from multiprocessing.connection import Connection
from typing import Any

from .model import BfdEvent, EngineError, EventWire

__all__ = ["DaemonEnd", "EngineEnd", "LocalChannel"]

log = logging.getLogger(__name__)

_LEN = struct.Struct("!i")


class EngineEnd:
    """The engine process's end of the control socket (see the module docstring)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        sock.setblocking(False)
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        self.inbuf = bytearray()
        self.outbuf = bytearray()
        #: the loop's epoll, to ask for EPOLLOUT while output is pending
        self.ep: select.epoll | None = None
        self.want_out = False
        self.closed = False
        self.events: list[EventWire] = []

    def send_event(self, wire: EventWire) -> None:
        """Queue one event; :meth:`flush_events` sends the queue as one message."""
        self.events.append(wire)

    def flush_events(self) -> None:
        if self.events:
            batch, self.events = self.events, []
            self.send(("events", batch))

    def send(self, msg: Any) -> None:
        try:
            data = pickle.dumps(msg, pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # e.g. an exception that cannot be pickled
            data = pickle.dumps(("reply", msg[1], False, EngineError(str(exc))))
        self.outbuf += _LEN.pack(len(data)) + data
        self.flush()

    def flush(self) -> None:
        while self.outbuf:
            try:
                n = self.sock.send(self.outbuf)
            except BlockingIOError:
                break
            except OSError:
                self.outbuf.clear()
                self.closed = True
                break
            del self.outbuf[:n]
        want = bool(self.outbuf)
        if want != self.want_out and self.ep is not None and not self.closed:
            self.want_out = want
            self.ep.modify(self.fd, select.EPOLLIN | (select.EPOLLOUT if want else 0))

    def receive(self) -> list[Any]:
        """Complete messages read so far; a final ``None`` means the daemon hung up."""
        hung_up = False
        while True:
            try:
                chunk = self.sock.recv(1 << 16)
            except BlockingIOError:
                break
            except OSError:
                chunk = b""
            if not chunk:
                hung_up = self.closed = True
                break
            self.inbuf += chunk
        out: list[Any] = []
        while len(self.inbuf) >= 4:
            (size,) = _LEN.unpack_from(self.inbuf)
            if len(self.inbuf) < 4 + size:
                break
            out.append(pickle.loads(bytes(self.inbuf[4 : 4 + size])))
            del self.inbuf[: 4 + size]
        if hung_up:
            out.append(None)
        return out

    def serve(self, call: Callable[[str, tuple[Any, ...]], Any]) -> Callable[[int], bool]:
        """The loop's ``on_ctl`` for this socket: runs each call with ``call(op, args)`` and
        answers it; returns False once the daemon said stop or hung up."""

        def on_ctl(mask: int) -> bool:
            if mask & select.EPOLLOUT:
                self.flush()
            if not mask & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR):
                return True
            for msg in self.receive():
                if msg is None or msg[0] == "stop":
                    return False
                _, rid, op, cargs = msg
                try:
                    result = ("reply", rid, True, call(op, cargs))
                except Exception as exc:
                    result = ("reply", rid, False, exc)
                self.flush_events()  # what the call caused goes out before its reply
                self.send(result)
            return not self.closed

        return on_ctl


class DaemonEnd:
    """The daemon's end of the control socket: thread-safe calls and a reader thread that
    hands events to ``on_event`` and, when the engine's end closes, fails the calls still
    waiting and then calls ``on_closed``."""

    def __init__(
        self,
        conn: Connection,
        on_event: Callable[[BfdEvent], None],
        on_closed: Callable[[], None],
    ) -> None:
        self.conn = conn
        self._on_event = on_event
        self._on_closed = on_closed
        self._lock = threading.Lock()
        self._pending: dict[int, Future[Any]] = {}
        self._ids = itertools.count(1)
        self._reader = threading.Thread(target=self._read, name="bfd-events", daemon=True)

    def start(self) -> None:
        self._reader.start()

    def call(self, op: str, args: tuple[Any, ...]) -> Future[Any]:
        """Send one call; the future gets its reply (or the engine's exception)."""
        fut: Future[Any] = Future()
        with self._lock:
            rid = next(self._ids)
            self._pending[rid] = fut
            try:
                self.conn.send(("call", rid, op, args))
            except (OSError, ValueError) as exc:
                self._pending.pop(rid, None)
                raise EngineError(f"the BFD engine is gone: {exc}") from exc
        return fut

    def request_stop(self) -> None:
        """Ask the engine to stop (it may be gone already); see :meth:`join`."""
        with contextlib.suppress(OSError, ValueError):
            self.conn.send(("stop",))

    def join(self, timeout: float) -> None:
        """Wake the reader thread (shut the socket down: EOF), wait for it, then close.

        Closing first would race the reader: a read already past its closed check fails on
        the vanished handle, and one blocked in recv is not woken by a close at all (it waits
        for the peer, whose end another process may still hold)."""
        with contextlib.suppress(OSError, ValueError):
            sock = socket.socket(fileno=self.conn.fileno())
            try:
                sock.shutdown(socket.SHUT_RDWR)
            finally:
                sock.detach()  # the Connection owns the descriptor
        self._reader.join(timeout)
        with contextlib.suppress(OSError):
            self.conn.close()

    def _read(self) -> None:
        conn = self.conn
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                break
            except Exception:
                if conn.closed:
                    break
                log.exception("bfd: bad message from the engine")
                continue
            kind = msg[0]
            if kind == "events":
                try:
                    for w in msg[1]:
                        self._on_event(BfdEvent.from_wire(w))
                except Exception:
                    log.exception("bfd: the event callback raised")
            elif kind == "reply":
                _, rid, ok, value = msg
                with self._lock:
                    fut = self._pending.pop(rid, None)
                if fut is not None:
                    if ok:
                        fut.set_result(value)
                    else:
                        fut.set_exception(value)
        with self._lock:
            pending, self._pending = self._pending, {}
        for fut in pending.values():
            fut.set_exception(EngineError("the BFD engine exited"))
        self._on_closed()


#: a queued control call (None: stop the loop)
_Item = tuple[str, tuple[Any, ...], "Future[Any]"] | None


class LocalChannel:
    """Thread mode: calls queued for the loop's thread, which an eventfd wakes."""

    def __init__(self) -> None:
        self.efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._q: queue.SimpleQueue[_Item] = queue.SimpleQueue()

    def call(self, op: str, args: tuple[Any, ...]) -> Future[Any]:
        fut: Future[Any] = Future()
        self._put((op, args, fut))
        return fut

    def stop(self) -> None:
        self._put(None)

    def close(self) -> None:
        os.close(self.efd)

    def _put(self, item: _Item) -> None:
        self._q.put(item)
        os.eventfd_write(self.efd, 1)

    def serve(self, call: Callable[[str, tuple[Any, ...]], Any]) -> Callable[[int], bool]:
        """The loop's ``on_ctl`` for the eventfd: runs the queued calls; False on stop."""
        efd, q = self.efd, self._q

        def on_ctl(mask: int) -> bool:
            with contextlib.suppress(BlockingIOError):
                os.eventfd_read(efd)
            while True:
                try:
                    item = q.get_nowait()
                except queue.Empty:
                    return True
                if item is None:
                    return False
                op, args, fut = item
                try:
                    fut.set_result(call(op, args))
                except Exception as exc:
                    fut.set_exception(exc)

        return on_ctl
