"""Kernel failover from the BFD engine: requests sent to rtnetlink the instant a session fails.

Why the engine does it
----------------------
A BFD failure must reach the FIB within the detection time plus a few milliseconds. The
engine decides on time (its own process, its own heap, optionally SCHED_FIFO), but its event
then crosses a socketpair, a reader thread and the daemon's event loop before the daemon
writes the FIB; the loop may be busy with a BGP burst or a garbage collection for several
milliseconds. So the daemon hands the engine, per session, the rtnetlink requests that take the
peer out of forwarding (for glbd: ``RTM_DELNEXTHOP`` of the peer's nexthop objects; the kernel
drops a deleted nexthop from every group at once, and an emptied group with its routes), and the
engine sends them *before* it reports the state change. The daemon then only mirrors what the
kernel did.

The requests are opaque to the engine (``bfd`` knows nothing about nexthops or glbd): this
module only checks their framing when they are armed, and reads the kernel's answers to count
refusals.

Wire format (``struct nlmsghdr``, host byte order, RFC 3549 §2.3.2)::

    u32 length (header included)  u16 type  u16 flags  u32 sequence  u32 port id
    payload, then padding to a multiple of 4

An answer to a request with ``NLM_F_ACK`` is an ``NLMSG_ERROR`` message whose payload starts
with an ``int32`` error (0: done, else ``-errno``) followed by the request's header.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from dataclasses import dataclass

__all__ = [
    "MAX_REQUEST_BYTES",
    "NLMSG_ERROR",
    "NLM_F_ACK",
    "NLM_F_REQUEST",
    "Ack",
    "DecodeError",
    "FailoverSocket",
    "decode_acks",
    "split_requests",
]

NLMSG_ERROR = 2
NLMSG_DONE = 3
NLM_F_REQUEST = 0x01
NLM_F_ACK = 0x04
#: rtnetlink message types start here (RTM_BASE); below are netlink's own control messages
_RTM_BASE = 16
_NETLINK_ROUTE = 0
#: one session's requests must fit one datagram that the kernel reads in one go
MAX_REQUEST_BYTES = 32 * 1024
_HDR = struct.Struct("=IHHII")
_ERR = struct.Struct("=i")


class DecodeError(ValueError):
    """Malformed netlink framing (the armed requests, or an answer from the kernel)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Ack:
    """The kernel's answer to one request: ``error`` 0 = done, else a positive errno."""

    seq: int
    error: int
    #: the type of the request answered (from the echoed header; 0 if not echoed)
    request_type: int = 0

    @property
    def ok(self) -> bool:
        return self.error == 0

    def describe(self) -> str:
        if self.ok:
            return f"seq {self.seq}: ok"
        name = errno.errorcode.get(self.error, str(self.error))
        return f"seq {self.seq} (type {self.request_type}): {name} ({os.strerror(self.error)})"


def _frames(data: bytes) -> list[tuple[int, int, int, int, int, int]]:
    """(offset, length, type, flags, seq, pid) of every message; checks the framing."""
    out = []
    off = 0
    n = len(data)
    while off < n:
        if n - off < _HDR.size:
            raise DecodeError("truncated_header", f"{n - off} bytes at offset {off}")
        length, mtype, flags, seq, pid = _HDR.unpack_from(data, off)
        if length < _HDR.size:
            raise DecodeError("bad_length", f"{length} at offset {off}")
        if length > n - off:
            raise DecodeError("truncated_message", f"{length} > {n - off} at offset {off}")
        out.append((off, length, mtype, flags, seq, pid))
        off += (length + 3) & ~3
    return out


def split_requests(data: bytes) -> list[bytes]:
    """Check ``data`` as a batch of rtnetlink requests to arm and return them one by one.

    Empty bytes (disarm) give ``[]``. Every message must be a request (``NLM_F_REQUEST``) of an
    rtnetlink type, the batch must fit :data:`MAX_REQUEST_BYTES`, and messages must be padded
    to 4 octets (the last one may end unpadded)."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise DecodeError("not_bytes", type(data).__name__)
    data = bytes(data)
    if len(data) > MAX_REQUEST_BYTES:
        raise DecodeError("too_long", f"{len(data)} > {MAX_REQUEST_BYTES} bytes")
    out = []
    for off, length, mtype, flags, _seq, _pid in _frames(data):
        if mtype < _RTM_BASE:
            raise DecodeError("not_rtnetlink", f"type {mtype} at offset {off}")
        if not flags & NLM_F_REQUEST:
            raise DecodeError("not_request", f"flags {flags:#x} at offset {off}")
        out.append(data[off : off + length])
    return out


def decode_acks(data: bytes) -> list[Ack]:
    """The ``NLMSG_ERROR`` answers in one datagram from the kernel (other types are skipped)."""
    out = []
    for off, length, mtype, _flags, seq, _pid in _frames(bytes(data)):
        if mtype != NLMSG_ERROR:
            continue
        body = length - _HDR.size
        if body < _ERR.size:
            raise DecodeError("short_error", f"{body} bytes at offset {off}")
        (err,) = _ERR.unpack_from(data, off + _HDR.size)
        if err > 0 or err < -4095:
            raise DecodeError("bad_error", f"{err} at offset {off}")
        rtype = 0
        if body >= _ERR.size + _HDR.size:
            rtype = _HDR.unpack_from(data, off + _HDR.size + _ERR.size)[1]
        out.append(Ack(seq, -err, rtype))
    return out


class FailoverSocket:
    """A non-blocking ``NETLINK_ROUTE`` socket in the caller's network namespace (the engine
    opens it on its own thread, after entering the namespace). :meth:`send` never blocks;
    :meth:`drain` reads the answers when the socket is readable."""

    def __init__(self) -> None:
        self.sock = socket.socket(
            socket.AF_NETLINK,
            socket.SOCK_RAW | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC,
            _NETLINK_ROUTE,
        )
        try:
            self.sock.bind((0, 0))
            # answers from a burst of failovers (one per request) must not overflow
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        except OSError:
            self.sock.close()
            raise

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, data: bytes) -> None:
        """One datagram: the kernel processes its messages in order. Raises OSError."""
        self.sock.sendto(data, (0, 0))

    def drain(self) -> tuple[list[Ack], int]:
        """Answers read until the socket is empty, and the number of unreadable datagrams."""
        acks: list[Ack] = []
        bad = 0
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:  # ENOBUFS: answers were lost; nothing else to read now
                if exc.errno == errno.ENOBUFS:
                    bad += 1
                    continue
                break
            if not data:
                break
            try:
                acks.extend(decode_acks(data))
            except DecodeError:
                bad += 1
        return acks, bad

    def close(self) -> None:
        self.sock.close()
