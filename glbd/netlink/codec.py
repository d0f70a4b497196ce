"""Netlink message framing and attribute codec (pure: no sockets, no clock).

Wire layout (host byte order, every element padded to 4 bytes)::

    struct nlmsghdr { u32 len; u16 type; u16 flags; u32 seq; u32 pid; }      16 bytes
    family header   ifinfomsg 16 | ifaddrmsg 8 | rtmsg 12 | nhmsg 8 | tcmsg 20 |
                    if_stats_msg 12 | nlmsgerr 20+
    struct nlattr   { u16 len; u16 type; } payload   (type bit 15 = NLA_F_NESTED,
                                                       bit 14 = NLA_F_NET_BYTEORDER)

Two ways to decode:

* :func:`decode` / :func:`decode_stream` build full frozen :class:`Message` objects (events,
  nexthop and route dumps, ``glbctl decode``).
* :func:`iter_frames` + :func:`pick_attrs` are the fast path for periodic dumps: walk the
  buffer and copy out only the attribute payloads the caller asked for (linkmon: ~128 links
  every 10 ms).

Every malformed input raises :class:`DecodeError` (a ``ValueError``) and nothing else.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from glbd.netlink import const as c
from glbd.netlink.headers import (
    DoneMsg,
    ErrorMsg,
    FamilyHeader,
    Header,
    IfAddrMsg,
    IfInfoMsg,
    IfStatsMsg,
    NhMsg,
    NlHdr,
    RawBody,
    RtMsg,
    TcMsg,
    align4,
    header_class,
)

__all__ = [
    "Attr",
    "DecodeError",
    "DoneMsg",
    "ErrorMsg",
    "FamilyHeader",
    "Frame",
    "Header",
    "IfAddrMsg",
    "IfInfoMsg",
    "IfStatsMsg",
    "Message",
    "NhMsg",
    "NlHdr",
    "RawBody",
    "RtMsg",
    "Selected",
    "TcMsg",
    "align4",
    "decode",
    "decode_attrs",
    "decode_frame",
    "decode_stream",
    "encode_attrs",
    "header_class",
    "iter_frames",
    "pick_attrs",
]

_NLHDR = struct.Struct("=IHHII")
_NLA = struct.Struct("=HH")
_U8 = struct.Struct("=B")
_U16 = struct.Struct("=H")
_U32 = struct.Struct("=I")
_S32 = struct.Struct("=i")
_U64 = struct.Struct("=Q")


class DecodeError(ValueError):
    """Malformed netlink bytes. ``reason`` is a stable snake_case name."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


# ------------------------------------------------------------------------------------------
# attributes
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Attr:
    """One netlink attribute. ``type`` excludes the flag bits, which are kept separately so
    that a decode/encode round trip is exact. Nested payloads stay bytes; read them with
    :meth:`children` (the kernel does not set NLA_F_NESTED on every nest)."""

    type: int
    data: bytes = b""
    nested: bool = False
    net_byteorder: bool = False

    # -- constructors --
    @classmethod
    def u8(cls, type_: int, v: int) -> Attr:
        return cls(type_, _U8.pack(v))

    @classmethod
    def u16(cls, type_: int, v: int) -> Attr:
        return cls(type_, _U16.pack(v))

    @classmethod
    def u32(cls, type_: int, v: int) -> Attr:
        return cls(type_, _U32.pack(v))

    @classmethod
    def flag(cls, type_: int) -> Attr:
        return cls(type_, b"")

    @classmethod
    def string(cls, type_: int, s: str) -> Attr:
        return cls(type_, s.encode() + b"\0")

    @classmethod
    def addr(cls, type_: int, a: str | ipaddress.IPv4Address | ipaddress.IPv6Address) -> Attr:
        if isinstance(a, ipaddress.IPv4Address | ipaddress.IPv6Address):
            return cls(type_, a.packed)  # ip_address(obj) would str() and re-parse it
        return cls(type_, ipaddress.ip_address(a).packed)

    @classmethod
    def nest(cls, type_: int, children: Iterable[Attr], *, flag: bool = True) -> Attr:
        return cls(type_, encode_attrs(children), nested=flag)

    # -- accessors (raise DecodeError on a wrong size) --
    def _fixed(self, st: struct.Struct, name: str) -> int:
        if len(self.data) < st.size:
            raise DecodeError("attr_too_short", f"type {self.type} as {name}: {len(self.data)}")
        v: int = st.unpack_from(self.data)[0]
        return v

    def as_u8(self) -> int:
        return self._fixed(_U8, "u8")

    def as_u16(self) -> int:
        return self._fixed(_U16, "u16")

    def as_u32(self) -> int:
        return self._fixed(_U32, "u32")

    def as_s32(self) -> int:
        return self._fixed(_S32, "s32")

    def as_u64(self) -> int:
        return self._fixed(_U64, "u64")

    def as_str(self) -> str:
        return self.data.split(b"\0", 1)[0].decode("utf-8", "replace")

    def as_addr(self) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
        if len(self.data) == 4:
            return ipaddress.IPv4Address(self.data)
        if len(self.data) == 16:
            return ipaddress.IPv6Address(self.data)
        raise DecodeError("attr_bad_address", f"type {self.type}: {len(self.data)} bytes")

    def children(self) -> tuple[Attr, ...]:
        return decode_attrs(self.data)

    def encode(self) -> bytes:
        t = self.type | (c.NLA_F_NESTED if self.nested else 0)
        t |= c.NLA_F_NET_BYTEORDER if self.net_byteorder else 0
        n = 4 + len(self.data)
        return _NLA.pack(n, t) + self.data + b"\0" * (align4(n) - n)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"type": self.type, "hex": self.data.hex()}
        if self.nested:
            d["nested"] = True
        if self.net_byteorder:
            d["net_byteorder"] = True
        return d


def encode_attrs(attrs: Iterable[Attr]) -> bytes:
    return b"".join(a.encode() for a in attrs)


def decode_attrs(data: bytes, start: int = 0, end: int | None = None) -> tuple[Attr, ...]:
    """All attributes in ``data[start:end]``, in order."""
    end = len(data) if end is None else end
    out: list[Attr] = []
    off = start
    while off < end:
        if end - off < 4:
            raise DecodeError("attr_truncated", f"{end - off} trailing bytes at {off}")
        n, t = _NLA.unpack_from(data, off)
        if n < 4:
            raise DecodeError("attr_bad_length", f"nla_len {n} at {off}")
        if off + n > end:
            raise DecodeError("attr_truncated", f"nla_len {n} at {off} exceeds {end}")
        out.append(
            Attr(
                t & c.NLA_TYPE_MASK,
                bytes(data[off + 4 : off + n]),
                bool(t & c.NLA_F_NESTED),
                bool(t & c.NLA_F_NET_BYTEORDER),
            )
        )
        off += align4(n)
    return tuple(out)


def pick_attrs(data: bytes, start: int, end: int, want: frozenset[int]) -> dict[int, bytes]:
    """Fast path: payloads of the attributes whose (flag-stripped) type is in ``want``.
    The first instance wins. Malformed framing raises DecodeError."""
    out: dict[int, bytes] = {}
    off = start
    unpack = _NLA.unpack_from
    while off < end:
        if end - off < 4:
            raise DecodeError("attr_truncated", f"{end - off} trailing bytes at {off}")
        n, t = unpack(data, off)
        if n < 4 or off + n > end:
            raise DecodeError("attr_bad_length", f"nla_len {n} at {off}")
        t &= c.NLA_TYPE_MASK
        if t in want and t not in out:
            out[t] = data[off + 4 : off + n]
        off += (n + 3) & ~3
    return out


# ------------------------------------------------------------------------------------------
# messages
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Message:
    type: int
    flags: int = c.NLM_F_REQUEST
    seq: int = 0
    pid: int = 0
    header: Header = field(default_factory=RawBody)
    attrs: tuple[Attr, ...] = ()

    def encode(self) -> bytes:
        body = self.header.encode() + encode_attrs(self.attrs)
        return _NLHDR.pack(16 + len(body), self.type, self.flags, self.seq, self.pid) + body

    def attr(self, type_: int) -> Attr | None:
        for a in self.attrs:
            if a.type == type_:
                return a
        return None

    def attr_map(self) -> dict[int, Attr]:
        """type -> first attribute of that type."""
        d: dict[int, Attr] = {}
        for a in self.attrs:
            d.setdefault(a.type, a)
        return d

    @property
    def is_error(self) -> bool:
        return isinstance(self.header, ErrorMsg) and self.header.error != 0

    def ext_ack_msg(self) -> str:
        """The kernel's extended-ACK text (NLMSGERR_ATTR_MSG), or ""."""
        if isinstance(self.header, ErrorMsg | DoneMsg):
            a = self.attr(c.NLMSGERR_ATTR_MSG)
            if a is not None:
                return a.as_str()
        return ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "flags": self.flags,
            "seq": self.seq,
            "pid": self.pid,
            "header": self.header.to_dict(),
            "attrs": [a.to_dict() for a in self.attrs],
        }


@dataclass(frozen=True, slots=True)
class Frame:
    """Position of one message in a buffer (fast path)."""

    type: int
    flags: int
    seq: int
    pid: int
    start: int  # first byte after the nlmsghdr
    end: int  # end of the message (exclusive)


@dataclass(frozen=True, slots=True)
class Selected:
    """Fast-path dump row: the family header and the raw payloads that were asked for."""

    type: int
    header: Header
    attrs: dict[int, bytes]


def iter_frames(data: Any, start: int = 0, end: int | None = None) -> Iterator[Frame]:
    """Walk the nlmsghdrs of one datagram, ``data[start:end]`` (``end``: the bytes received,
    when ``data`` is a larger receive buffer). Raises DecodeError on bad framing. The one
    netlink framer of glbd (``bfd.failover`` keeps its own: it imports only the stdlib)."""
    off = start
    total = len(data) if end is None else end
    unpack = _NLHDR.unpack_from
    while off < total:
        if total - off < 16:
            raise DecodeError("short_header", f"{total - off} bytes at {off}")
        n, t, fl, seq, pid = unpack(data, off)
        if n < 16:
            raise DecodeError("bad_length", f"nlmsg_len {n} at {off}")
        if off + n > total:
            raise DecodeError("truncated", f"nlmsg_len {n} at {off}, {total - off} available")
        yield Frame(t, fl, seq, pid, off + 16, off + n)
        off += align4(n)


def decode_frame(data: bytes, fr: Frame) -> Message:
    start, end = fr.start, fr.end
    t = fr.type
    header: Header
    attrs: tuple[Attr, ...] = ()
    if t == c.NLMSG_ERROR:
        if end - start < 20:
            raise DecodeError("short_error", f"{end - start} bytes")
        err = _S32.unpack_from(data, start)[0]
        req = NlHdr(*_NLHDR.unpack_from(data, start + 4))
        off = start + 20
        payload = b""
        if not fr.flags & c.NLM_F_CAPPED and req.len > 16:
            plen = req.len - 16
            if off + plen > end:
                raise DecodeError("short_error", f"echoed request of {req.len} bytes")
            payload = bytes(data[off : off + plen])
            off += align4(plen)
        header = ErrorMsg(err, req, payload)
        if fr.flags & c.NLM_F_ACK_TLVS:
            attrs = decode_attrs(data, min(off, end), end)
        elif off < end:
            raise DecodeError("trailing_bytes", f"{end - off} after nlmsgerr")
    elif t == c.NLMSG_DONE:
        n = end - start
        if n == 0:
            header = DoneMsg(0)
        elif n < 4:
            raise DecodeError("short_done", f"{n} bytes")
        else:
            header = DoneMsg(_S32.unpack_from(data, start)[0])
            if n > 4:
                if not fr.flags & c.NLM_F_ACK_TLVS:
                    raise DecodeError("trailing_bytes", f"{n - 4} after done")
                attrs = decode_attrs(data, start + 4, end)
    else:
        cls = header_class(t)
        if cls is None:
            header = RawBody(bytes(data[start:end]))
        else:
            hs = cls.ST.size
            if end - start < hs:
                raise DecodeError("short_family_header", f"type {t}: {end - start} < {hs}")
            header = cls.decode(data, start)
            attrs = decode_attrs(data, start + hs, end)
    return Message(t, fr.flags, fr.seq, fr.pid, header, attrs)


def decode_stream(data: bytes) -> list[Message]:
    """All messages of one datagram."""
    return [decode_frame(data, fr) for fr in iter_frames(data)]


def decode(data: bytes) -> Message:
    """Exactly one message (trailing padding allowed, nothing else)."""
    msgs = decode_stream(data)
    if len(msgs) != 1:
        raise DecodeError("not_one_message", f"{len(msgs)} messages")
    return msgs[0]


# ------------------------------------------------------------------------------------------
# small helpers for building requests
# ------------------------------------------------------------------------------------------


def family_of(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> int:
    return socket.AF_INET if addr.version == 4 else socket.AF_INET6
