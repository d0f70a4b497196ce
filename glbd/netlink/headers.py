"""rtnetlink family headers (pure): the fixed struct after the nlmsghdr of each message type.

Each is a frozen dataclass with ``ST`` (its :class:`struct.Struct`), ``encode()``, a classmethod
``decode(data, off)`` and ``to_dict()``; :func:`header_class` maps a message type to its class.
Re-exported by :mod:`glbd.netlink.codec`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeAlias

from glbd.netlink import const as c

__all__ = [
    "DoneMsg",
    "ErrorMsg",
    "FamilyHeader",
    "Header",
    "IfAddrMsg",
    "IfInfoMsg",
    "IfStatsMsg",
    "NhMsg",
    "NlHdr",
    "RawBody",
    "RtMsg",
    "TcMsg",
    "align4",
    "header_class",
]

_NLHDR = struct.Struct("=IHHII")
_S32 = struct.Struct("=i")


def align4(n: int) -> int:
    return (n + 3) & ~3


@dataclass(frozen=True, slots=True)
class NlHdr:
    """A bare nlmsghdr (used for the echoed request inside NLMSG_ERROR)."""

    len: int = 16
    type: int = 0
    flags: int = 0
    seq: int = 0
    pid: int = 0

    def encode(self) -> bytes:
        return _NLHDR.pack(self.len, self.type, self.flags, self.seq, self.pid)

    def to_dict(self) -> dict[str, Any]:
        return {
            "len": self.len,
            "type": self.type,
            "flags": self.flags,
            "seq": self.seq,
            "pid": self.pid,
        }


@dataclass(frozen=True, slots=True)
class IfInfoMsg:
    family: int = 0
    type: int = 0
    index: int = 0
    flags: int = 0
    change: int = 0
    ST: ClassVar[struct.Struct] = struct.Struct("=BxHiII")

    def encode(self) -> bytes:
        return self.ST.pack(self.family, self.type, self.index, self.flags, self.change)

    @classmethod
    def decode(cls, data: bytes, off: int = 0) -> IfInfoMsg:
        return cls(*cls.ST.unpack_from(data, off))

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "ifinfomsg",
            "family": self.family,
            "type": self.type,
            "index": self.index,
            "flags": self.flags,
            "change": self.change,
        }


@dataclass(frozen=True, slots=True)
class IfAddrMsg:
    family: int = 0
    prefixlen: int = 0
    flags: int = 0
    scope: int = 0
    index: int = 0
    ST: ClassVar[struct.Struct] = struct.Struct("=BBBBI")

    def encode(self) -> bytes:
        return self.ST.pack(self.family, self.prefixlen, self.flags, self.scope, self.index)

    @classmethod
    def decode(cls, data: bytes, off: int = 0) -> IfAddrMsg:
        return cls(*cls.ST.unpack_from(data, off))

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "ifaddrmsg",
            "family": self.family,
            "prefixlen": self.prefixlen,
            "flags": self.flags,
            "scope": self.scope,
            "index": self.index,
        }


@dataclass(frozen=True, slots=True)
class RtMsg:
    family: int = 0
    dst_len: int = 0
    src_len: int = 0
    tos: int = 0
    table: int = 0
    protocol: int = 0
    scope: int = 0
    type: int = 0
    flags: int = 0
    ST: ClassVar[struct.Struct] = struct.Struct("=BBBBBBBBI")

    def encode(self) -> bytes:
        return self.ST.pack(
            self.family,
            self.dst_len,
            self.src_len,
            self.tos,
            self.table,
            self.protocol,
            self.scope,
            self.type,
            self.flags,
        )

    @classmethod
    def decode(cls, data: bytes, off: int = 0) -> RtMsg:
        return cls(*cls.ST.unpack_from(data, off))

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "rtmsg",
            "family": self.family,
            "dst_len": self.dst_len,
            "src_len": self.src_len,
            "tos": self.tos,
            "table": self.table,
            "protocol": self.protocol,
            "scope": self.scope,
            "type": self.type,
            "flags": self.flags,
        }


@dataclass(frozen=True, slots=True)
class NhMsg:
    family: int = 0
    scope: int = 0
    protocol: int = 0
    flags: int = 0
    ST: ClassVar[struct.Struct] = struct.Struct("=BBBxI")

    def encode(self) -> bytes:
        return self.ST.pack(self.family, self.scope, self.protocol, self.flags)

    @classmethod
    def decode(cls, data: bytes, off: int = 0) -> NhMsg:
        return cls(*cls.ST.unpack_from(data, off))

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "nhmsg",
            "family": self.family,
            "scope": self.scope,
            "protocol": self.protocol,
            "flags": self.flags,
        }


@dataclass(frozen=True, slots=True)
class TcMsg:
    family: int = 0
    ifindex: int = 0
    handle: int = 0
    parent: int = 0
    info: int = 0
    ST: ClassVar[struct.Struct] = struct.Struct("=BxxxiIII")

    def encode(self) -> bytes:
        return self.ST.pack(self.family, self.ifindex, self.handle, self.parent, self.info)

    @classmethod
    def decode(cls, data: bytes, off: int = 0) -> TcMsg:
        return cls(*cls.ST.unpack_from(data, off))

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "tcmsg",
            "family": self.family,
            "ifindex": self.ifindex,
            "handle": self.handle,
            "parent": self.parent,
            "info": self.info,
        }


@dataclass(frozen=True, slots=True)
class IfStatsMsg:
    """struct if_stats_msg (RTM_NEWSTATS / RTM_GETSTATS): ``filter_mask`` has bit (attr - 1)
    set for every IFLA_STATS_* attribute asked for (or present in the reply)."""

    family: int = 0
    ifindex: int = 0
    filter_mask: int = 0
    ST: ClassVar[struct.Struct] = struct.Struct("=BxxxII")

    def encode(self) -> bytes:
        return self.ST.pack(self.family, self.ifindex, self.filter_mask)

    @classmethod
    def decode(cls, data: bytes, off: int = 0) -> IfStatsMsg:
        return cls(*cls.ST.unpack_from(data, off))

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "if_stats_msg",
            "family": self.family,
            "ifindex": self.ifindex,
            "filter_mask": self.filter_mask,
        }


@dataclass(frozen=True, slots=True)
class ErrorMsg:
    """NLMSG_ERROR body: ``error`` is 0 (an ACK) or a negative errno; ``request`` is the echoed
    request header; ``payload`` its body unless the ACK was capped (NLM_F_CAPPED). Extended
    ACK attributes (NLMSGERR_ATTR_MSG, ...) land in :attr:`Message.attrs`."""

    error: int = 0
    request: NlHdr = field(default_factory=NlHdr)
    payload: bytes = b""

    def encode(self) -> bytes:
        p = self.payload + b"\0" * (align4(len(self.payload)) - len(self.payload))
        return _S32.pack(self.error) + self.request.encode() + p

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "nlmsgerr",
            "error": self.error,
            "request": self.request.to_dict(),
            "payload_hex": self.payload.hex(),
        }


@dataclass(frozen=True, slots=True)
class DoneMsg:
    error: int = 0

    def encode(self) -> bytes:
        return _S32.pack(self.error)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "done", "error": self.error}


@dataclass(frozen=True, slots=True)
class RawBody:
    """Body of a message type this codec has no header for (kept verbatim, no attrs)."""

    data: bytes = b""

    def encode(self) -> bytes:
        return self.data

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "raw", "hex": self.data.hex()}


Header: TypeAlias = (
    IfInfoMsg | IfAddrMsg | RtMsg | NhMsg | TcMsg | IfStatsMsg | ErrorMsg | DoneMsg | RawBody
)
FamilyHeader: TypeAlias = (
    type[IfInfoMsg] | type[IfAddrMsg] | type[RtMsg] | type[NhMsg] | type[TcMsg] | type[IfStatsMsg]
)


def header_class(msg_type: int) -> FamilyHeader | None:
    """The family header class for an rtnetlink message type, or None."""
    if 16 <= msg_type <= 19:
        return IfInfoMsg
    if 20 <= msg_type <= 23:
        return IfAddrMsg
    if 24 <= msg_type <= 27:
        return RtMsg
    if 36 <= msg_type <= 47:
        return TcMsg
    if 104 <= msg_type <= 106 or 116 <= msg_type <= 118:
        return NhMsg
    if msg_type in (c.RTM_NEWSTATS, c.RTM_GETSTATS, 95):  # 95: RTM_SETSTATS
        return IfStatsMsg
    return None
