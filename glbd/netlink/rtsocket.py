"""Async rtnetlink socket: one non-blocking AF_NETLINK socket driven by ``loop.add_reader``.

* :meth:`NetlinkSocket.request` sends one message with NLM_F_ACK and returns the reply
  messages (for NLM_F_ECHO) or raises :class:`NetlinkError`.
* :meth:`NetlinkSocket.dump` returns every message of a dump (restarts on NLM_F_DUMP_INTR).
* :meth:`NetlinkSocket.dump_select` is the fast path: per message only the family header and
  the payloads of the requested attribute types (no
  :class:`~glbd.netlink.codec.Attr` objects).
* :meth:`NetlinkSocket.batch` packs many requests per ``send()``; only the last message of each
  chunk asks for an ACK (the kernel handles a datagram's messages in order and always reports
  errors), so a 100k-route install costs one ACK per chunk.
* Multicast: ``groups=(RTNLGRP_LINK, RTNLGRP_NEXTHOP, ...)`` subscribes with
  NETLINK_ADD_MEMBERSHIP (group numbers, not bit masks, so groups > 31 work); notifications go
  to ``on_event(msg)``; a receive-queue overrun (ENOBUFS) calls ``on_overrun()``: state was lost
  and the owner must resynchronise with a dump.

Use one socket for requests and a separate one for events, so a burst of notifications never
delays a request's ACK.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import functools
import os
import random
import socket
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import structlog

from glbd.daemon.netns import in_netns
from glbd.netlink import const as c
from glbd.netlink.codec import (
    DecodeError,
    DoneMsg,
    ErrorMsg,
    FamilyHeader,
    Frame,
    Message,
    Selected,
    decode_frame,
    iter_frames,
    pick_attrs,
)

__all__ = ["NetlinkError", "NetlinkSocket", "open_route_socket"]

log = structlog.get_logger(__name__)

_RCVBUF = 8 << 20
_BATCH_BYTES = 48 << 10
_SO_ATTACH_FILTER = 26
_SOCK_FILTER = struct.Struct("=HBBI")  # struct sock_filter: code, jt, jf, k
_SOCK_FPROG = struct.Struct("@HP")  # struct sock_fprog: len, pointer to the program


class NetlinkError(OSError):
    """The kernel refused a request. ``errno`` is positive; ``ext_msg`` is the kernel's
    extended-ACK text (often the only useful part, e.g. "Nexthop id does not exist")."""

    def __init__(self, err: int, ext_msg: str = "", seq: int = 0) -> None:
        text = os.strerror(err) + (f" ({ext_msg})" if ext_msg else "")
        super().__init__(err, text)
        self.ext_msg = ext_msg
        self.seq = seq


@dataclass(slots=True)
class _Pending:
    fut: asyncio.Future[list[Message]] | None = None
    dump: bool = False
    select: tuple[FamilyHeader, frozenset[int]] | None = None
    rows: list[Message] = field(default_factory=list)
    selected: list[Selected] = field(default_factory=list)
    interrupted: bool = False
    sel_fut: asyncio.Future[tuple[list[Selected], bool]] | None = None


@dataclass(slots=True)
class _Batch:
    fut: asyncio.Future[None]
    last_seq: int
    errors: dict[int, NetlinkError] = field(default_factory=dict)


_FLAGS_SEQ = struct.Struct("=HI")  # nlmsg_flags, nlmsg_seq at offset 6
_FLAGS = struct.Struct("=H")


def open_route_socket(
    *,
    netns: str | None = None,
    rcvbuf: int = _RCVBUF,
    strict_check: bool = True,
    ext_ack: bool = False,
    groups: Iterable[int] = (),
    force_rcvbuf: bool = True,
) -> socket.socket:
    """A bound, non-blocking NETLINK_ROUTE socket created inside ``netns`` (the one opener of
    glbd's netlink sockets). ``ext_ack`` also asks for extended and capped ACKs and a larger
    send buffer (request sockets); ``groups`` are joined by number. ``force_rcvbuf`` sets the
    receive buffer past ``net.core.rmem_max`` when allowed (SO_RCVBUFFORCE)."""
    with in_netns(netns):
        sock = socket.socket(
            socket.AF_NETLINK,
            socket.SOCK_RAW | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC,
            c.NETLINK_ROUTE,
        )
    try:
        forced = False
        if force_rcvbuf:
            with contextlib.suppress(PermissionError):
                sock.setsockopt(socket.SOL_SOCKET, c.SO_RCVBUFFORCE, rcvbuf)
                forced = True
        if not forced:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        if ext_ack:
            with contextlib.suppress(PermissionError):
                sock.setsockopt(socket.SOL_SOCKET, c.SO_SNDBUFFORCE, 1 << 20)
            sock.setsockopt(c.SOL_NETLINK, c.NETLINK_EXT_ACK, 1)
            sock.setsockopt(c.SOL_NETLINK, c.NETLINK_CAP_ACK, 1)
        if strict_check:
            sock.setsockopt(c.SOL_NETLINK, c.NETLINK_GET_STRICT_CHK, 1)
        sock.bind((0, 0))
        for g in groups:
            sock.setsockopt(c.SOL_NETLINK, c.NETLINK_ADD_MEMBERSHIP, g)
    except BaseException:
        sock.close()
        raise
    return sock


#: bytes read per wake-up of a socket: decoding more holds the loop too long
#: (docs/benchmarks-e2e.md)
READ_BUDGET = 16 * 1024


class NetlinkSocket:
    def __init__(
        self,
        sock: socket.socket,
        *,
        on_event: Callable[[Message], None] | None = None,
        on_overrun: Callable[[], None] | None = None,
    ) -> None:
        self._sock = sock
        self._loop = asyncio.get_running_loop()
        self._seq = random.randrange(1, 1 << 30)
        self._pending: dict[int, _Pending | _Batch] = {}
        self._buf = bytearray(1 << 20)
        self._on_event = on_event
        self._on_overrun = on_overrun
        self.pid: int = sock.getsockname()[0]
        self.decode_errors = 0
        self.callback_errors = 0
        self.overruns = 0
        self._closed = False
        self._loop.add_reader(sock.fileno(), self._on_readable)

    # -- life cycle ---------------------------------------------------------------------------
    @classmethod
    async def open(
        cls,
        *,
        netns: str | None = None,
        groups: Iterable[int] = (),
        on_event: Callable[[Message], None] | None = None,
        on_overrun: Callable[[], None] | None = None,
        strict_check: bool = True,
        rcvbuf: int = _RCVBUF,
    ) -> NetlinkSocket:
        """Open a NETLINK_ROUTE socket, inside ``netns`` (``/run/netns/NAME``) if given."""
        sock = open_route_socket(
            netns=netns, rcvbuf=rcvbuf, strict_check=strict_check, ext_ack=True, groups=groups
        )
        return cls(sock, on_event=on_event, on_overrun=on_overrun)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._loop.remove_reader(self._sock.fileno())
        self._sock.close()
        self._fail_pending(ConnectionError("netlink socket closed"))

    def _fail_pending(self, exc: Exception) -> None:
        """Fail every outstanding request (their replies can no longer be trusted to come)."""
        for p in list(self._pending.values()):
            if isinstance(p, _Batch):
                if not p.fut.done():
                    p.fut.set_exception(exc)
                continue
            for f in (p.fut, p.sel_fut):
                if f is not None and not f.done():
                    f.set_exception(exc)
        self._pending.clear()

    async def __aenter__(self) -> NetlinkSocket:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def attach_filter(self, program: Sequence[tuple[int, int, int, int]]) -> None:
        """Attach a classic BPF program (``(code, jt, jf, k)`` instructions) to the socket:
        the kernel runs it on every notification before queueing it, so messages it drops
        cost neither receive-buffer space (no overrun) nor Python time."""
        code = b"".join(_SOCK_FILTER.pack(*ins) for ins in program)
        buf = ctypes.create_string_buffer(code, len(code))
        # the kernel copies the program during the call; ``buf`` lives until it returns
        fprog = _SOCK_FPROG.pack(len(program), ctypes.addressof(buf))
        self._sock.setsockopt(socket.SOL_SOCKET, _SO_ATTACH_FILTER, fprog)

    # -- requests -----------------------------------------------------------------------------
    def _next_seq(self) -> int:
        self._seq = self._seq + 1 if self._seq < 0xFFFFFFFF else 1
        return self._seq

    def _send(self, data: bytes) -> None:
        # Netlink sends to the kernel never block for long: the kernel processes the datagram
        # synchronously in sendmsg(). EAGAIN cannot happen for unicast to the kernel.
        self._sock.send(data)

    async def request(self, msg: Message) -> list[Message]:
        """Send ``msg`` with NLM_F_REQUEST|NLM_F_ACK; wait for the ACK. Returns echoed messages
        (if NLM_F_ECHO was set) or []. Raises NetlinkError on a kernel error."""
        seq = self._next_seq()
        fut: asyncio.Future[list[Message]] = self._loop.create_future()
        self._pending[seq] = _Pending(fut=fut)
        flags = msg.flags | c.NLM_F_REQUEST | c.NLM_F_ACK
        try:
            self._send(Message(msg.type, flags, seq, 0, msg.header, msg.attrs).encode())
            return await fut
        finally:
            self._pending.pop(seq, None)

    async def dump(self, msg: Message, *, retries: int = 3) -> list[Message]:
        """Send ``msg`` as a dump request (NLM_F_DUMP) and collect every reply message."""
        for attempt in range(retries + 1):
            seq = self._next_seq()
            fut: asyncio.Future[list[Message]] = self._loop.create_future()
            p = _Pending(fut=fut, dump=True)
            self._pending[seq] = p
            try:
                flags = msg.flags | c.NLM_F_REQUEST | c.NLM_F_DUMP
                self._send(Message(msg.type, flags, seq, 0, msg.header, msg.attrs).encode())
                rows = await fut
            finally:
                self._pending.pop(seq, None)
            if not p.interrupted or attempt == retries:
                return rows
        raise AssertionError("unreachable")

    async def dump_select(
        self, msg: Message, header_cls: FamilyHeader, want: Iterable[int], *, retries: int = 3
    ) -> list[Selected]:
        """Fast dump: only ``header_cls`` and the raw payloads of the ``want`` attributes."""
        wanted = frozenset(want)
        for attempt in range(retries + 1):
            seq = self._next_seq()
            fut: asyncio.Future[tuple[list[Selected], bool]] = self._loop.create_future()
            self._pending[seq] = _Pending(dump=True, select=(header_cls, wanted), sel_fut=fut)
            try:
                flags = msg.flags | c.NLM_F_REQUEST | c.NLM_F_DUMP
                self._send(Message(msg.type, flags, seq, 0, msg.header, msg.attrs).encode())
                rows, interrupted = await fut
            finally:
                self._pending.pop(seq, None)
            if not interrupted or attempt == retries:
                return rows
        raise AssertionError("unreachable")

    async def batch(
        self,
        msgs: Sequence[Message | bytes],
        *,
        max_bytes: int = _BATCH_BYTES,
        window: int = 4,
    ) -> list[tuple[int, NetlinkError]]:
        """Send many requests, several per datagram, with up to ``window`` datagrams in flight.
        Returns ``[(index_in_msgs, error), ...]`` for the messages the kernel refused (empty
        when all succeeded). Messages are processed by the kernel strictly in order.
        A message may be given already encoded (bytes; its seq and NLM_F_REQUEST/NLM_F_ACK
        are patched in), which is the fast path for bulk route writes."""
        errors: list[tuple[int, NetlinkError]] = []
        inflight: list[_Batch] = []
        seq_to_index: dict[int, int] = {}
        i = 0
        n = len(msgs)
        while i < n or inflight:
            while i < n and len(inflight) < window:
                bt, i = self._send_chunk(msgs, i, max_bytes, seq_to_index)
                inflight.append(bt)
            bt = inflight.pop(0)
            await bt.fut
            for s, e in bt.errors.items():
                errors.append((seq_to_index[s], e))
        errors.sort(key=lambda t: t[0])
        return errors

    def send_now(
        self, msgs: Sequence[Message | bytes], *, max_bytes: int = _BATCH_BYTES
    ) -> asyncio.Future[list[tuple[int, NetlinkError]]]:
        """:meth:`batch` for a few requests that must reach the kernel within the caller's
        callback, not at the next loop turn: every datagram is sent before this returns (no
        window). The future resolves to what :meth:`batch` would return (or its error)."""
        seq_to_index: dict[int, int] = {}
        bts: list[_Batch] = []
        i = 0
        while i < len(msgs):
            bt, i = self._send_chunk(msgs, i, max_bytes, seq_to_index)
            bts.append(bt)
        out: asyncio.Future[list[tuple[int, NetlinkError]]] = self._loop.create_future()

        def answered(g: asyncio.Future[list[None]]) -> None:
            if out.done():
                return
            if g.cancelled():
                out.cancel()
            elif (err := g.exception()) is not None:
                out.set_exception(err)
            else:
                errs = [(seq_to_index[s], e) for b in bts for s, e in b.errors.items()]
                out.set_result(sorted(errs, key=lambda t: t[0]))

        asyncio.gather(*(b.fut for b in bts)).add_done_callback(answered)
        return out

    def _send_chunk(
        self,
        msgs: Sequence[Message | bytes],
        i: int,
        max_bytes: int,
        seq_to_index: dict[int, int],
    ) -> tuple[_Batch, int]:
        """Send one datagram of requests from ``msgs[i]`` on; the batch and the next index."""
        n = len(msgs)
        chunk: list[bytes] = []
        seqs: list[int] = []
        size = 0
        while i < n and size < max_bytes:
            seq = self._next_seq()
            seqs.append(seq)
            seq_to_index[seq] = i
            m = msgs[i]
            b = m if isinstance(m, bytes) else m.encode()
            chunk.append(b)
            size += len(b)
            i += 1
        # seq and NLM_F_REQUEST patched in place in the datagram; only its last message asks
        # for an ACK
        buf = bytearray(b"".join(chunk))
        off = 0
        for b, seq in zip(chunk, seqs, strict=True):
            flags = _FLAGS.unpack_from(buf, off + 6)[0] | c.NLM_F_REQUEST
            _FLAGS_SEQ.pack_into(buf, off + 6, flags, seq)
            off += len(b)
        last = off - len(chunk[-1]) + 6
        _FLAGS.pack_into(buf, last, _FLAGS.unpack_from(buf, last)[0] | c.NLM_F_ACK)
        bt = _Batch(self._loop.create_future(), seqs[-1])
        for s in seqs:
            self._pending[s] = bt
        try:
            self._send(bytes(buf))
        except OSError:
            for s in seqs:
                self._pending.pop(s, None)
            raise
        bt.fut.add_done_callback(functools.partial(self._drop_seqs, seqs))
        return bt, i

    def _drop_seqs(self, seqs: list[int], _fut: object) -> None:
        for s in seqs:
            self._pending.pop(s, None)

    # -- receive ------------------------------------------------------------------------------
    def _on_readable(self) -> None:
        # at least one datagram, at most READ_BUDGET bytes per wake-up: a dump of thousands of
        # routes is read over several loop turns, so heartbeats and timers are not held behind
        # all of it (the reader is level-triggered: it is called again while data is queued)
        buf = self._buf
        budget = READ_BUDGET
        while budget > 0:
            try:
                n = self._sock.recv_into(buf)
            except BlockingIOError:
                return
            except OSError as e:
                if e.errno == errno.ENOBUFS:
                    self.overruns += 1
                    if self._on_overrun is not None:
                        self._on_overrun()
                    self._fail_pending(NetlinkError(errno.ENOBUFS, "replies lost: overrun"))
                    continue
                raise
            if n == 0:
                return
            budget -= n
            self._dispatch(bytes(buf[:n]))

    def _dispatch(self, data: bytes) -> None:
        try:
            frames = list(iter_frames(data))
        except DecodeError:
            self.decode_errors += 1
            return
        for fr in frames:
            p = self._pending.get(fr.seq) if fr.seq else None
            try:
                if p is None:
                    if self._on_event is not None and fr.type not in (c.NLMSG_DONE, c.NLMSG_ERROR):
                        ev = decode_frame(data, fr)
                        try:
                            self._on_event(ev)
                        except Exception:  # a subscriber's bug must not stop the socket
                            self.callback_errors += 1
                            log.exception("netlink_event_callback_failed", type=ev.type)
                    continue
                if isinstance(p, _Batch):
                    self._on_batch_frame(p, data, fr)
                elif p.select is not None:
                    self._on_select_frame(p, data, fr)
                else:
                    self._on_frame(p, data, fr)
            except DecodeError:
                self.decode_errors += 1

    def _on_batch_frame(self, bt: _Batch, data: bytes, fr: Frame) -> None:
        msg = decode_frame(data, fr)
        if isinstance(msg.header, ErrorMsg):
            if msg.header.error:
                bt.errors[msg.seq] = NetlinkError(-msg.header.error, msg.ext_ack_msg(), msg.seq)
            if msg.seq == bt.last_seq and not bt.fut.done():
                bt.fut.set_result(None)

    def _on_frame(self, p: _Pending, data: bytes, fr: Frame) -> None:
        msg = decode_frame(data, fr)
        fut = p.fut
        assert fut is not None
        if fut.done():
            return
        h = msg.header
        if isinstance(h, ErrorMsg):
            if h.error:
                fut.set_exception(NetlinkError(-h.error, msg.ext_ack_msg(), msg.seq))
            else:
                fut.set_result(p.rows)
            return
        if isinstance(h, DoneMsg):
            if msg.flags & c.NLM_F_DUMP_INTR:
                p.interrupted = True
            if h.error:
                fut.set_exception(NetlinkError(-h.error, msg.ext_ack_msg(), msg.seq))
            else:
                fut.set_result(p.rows)
            return
        if msg.flags & c.NLM_F_DUMP_INTR:
            p.interrupted = True
        p.rows.append(msg)

    def _on_select_frame(self, p: _Pending, data: bytes, fr: Frame) -> None:
        fut = p.sel_fut
        assert fut is not None and p.select is not None
        if fut.done():
            return
        if fr.type == c.NLMSG_DONE or fr.type == c.NLMSG_ERROR:
            msg = decode_frame(data, fr)
            h = msg.header
            if msg.flags & c.NLM_F_DUMP_INTR:
                p.interrupted = True
            err = h.error if isinstance(h, ErrorMsg | DoneMsg) else 0
            if err:
                fut.set_exception(NetlinkError(-err, msg.ext_ack_msg(), msg.seq))
            else:
                fut.set_result((p.selected, p.interrupted))
            return
        if fr.flags & c.NLM_F_DUMP_INTR:
            p.interrupted = True
        cls, want = p.select
        hs = cls.ST.size
        if fr.end - fr.start < hs:
            raise DecodeError("short_family_header", f"type {fr.type}")
        attrs = pick_attrs(data, fr.start + hs, fr.end, want)
        p.selected.append(Selected(fr.type, cls.decode(data, fr.start), attrs))
