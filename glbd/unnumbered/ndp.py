"""ICMPv6 router solicitations and advertisements (RFC 4861 §4.1, §4.2), as much of them as
unnumbered BGP needs: who is the router at the other end of a point-to-point port.

An advertisement glbd sends says nothing but "a router is here" (router lifetime 0: never a
default router; no prefixes) plus its link-layer address; FRR learns an unnumbered peer's
link-local address from exactly that. The kernel fills in the ICMPv6 checksum of a raw
ICMPv6 socket, so encoders leave it 0.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

__all__ = [
    "RA",
    "RS",
    "NdpDrop",
    "RouterAdvert",
    "decode_advert",
    "encode_advert",
    "encode_solicit",
]

RS = 133
RA = 134
#: RFC 4861 §6.1.2: an RA (or RS) not sent with hop limit 255 came from off the link
HOP_LIMIT = 255
_OPT_SOURCE_LLADDR = 1
_RA_HEAD = struct.Struct("!BBHBBHII")


class NdpDrop(enum.StrEnum):
    """Why a received ICMPv6 message did not teach glbd a peer (counted by reason)."""

    #: shorter than its fixed part, or an option with length 0 / running past the end
    MALFORMED = "malformed"
    #: not hop limit 255: it was routed here, so it is not from the link (RFC 4861 §6.1.2)
    HOP_LIMIT = "hop_limit"
    #: ICMP code not 0
    BAD_CODE = "bad_code"
    #: an RA's source must be a link-local address (RFC 4861 §6.1.2)
    SOURCE_NOT_LINK_LOCAL = "source_not_link_local"
    #: our own advertisement looped back
    OWN = "own"
    #: over the per-port budget of messages per second (a flood from the link)
    RATE_LIMITED = "rate_limited"
    #: arrived on another port than the socket's, or came with no arrival port (the kernel
    #: queued it in the instant between opening the socket and binding it to its port)
    OTHER_PORT = "other_port"
    #: neither a router solicitation nor an advertisement (queued before the type filter)
    OTHER_TYPE = "other_type"


@dataclass(frozen=True)
class RouterAdvert:
    router_lifetime_s: int
    #: the sender's link-layer address (option 1), if it gave one
    lladdr: bytes | None


def encode_advert(lladdr: bytes | None, *, cur_hop_limit: int = 64) -> bytes:
    """A router advertisement with router lifetime 0 and the source link-layer address."""
    head = _RA_HEAD.pack(RA, 0, 0, cur_hop_limit, 0, 0, 0, 0)
    return head + _lladdr_option(lladdr)


def encode_solicit(lladdr: bytes | None) -> bytes:
    """A router solicitation (asks the routers on the link to advertise now)."""
    return struct.pack("!BBHI", RS, 0, 0, 0) + _lladdr_option(lladdr)


def _lladdr_option(lladdr: bytes | None) -> bytes:
    if not lladdr:
        return b""
    body = bytes([_OPT_SOURCE_LLADDR, 0]) + lladdr
    units = (len(body) + 7) // 8
    body = body.ljust(units * 8, b"\0")
    return bytes([_OPT_SOURCE_LLADDR, units]) + body[2:]


def decode_advert(data: bytes) -> RouterAdvert | NdpDrop:
    """The advertisement in ``data`` (an ICMPv6 message, type already known to be RA)."""
    if len(data) < _RA_HEAD.size:
        return NdpDrop.MALFORMED
    _, code, _, _, _, lifetime, _, _ = _RA_HEAD.unpack_from(data)
    if code != 0:
        return NdpDrop.BAD_CODE
    lladdr: bytes | None = None
    off = _RA_HEAD.size
    while off < len(data):
        if off + 2 > len(data):
            return NdpDrop.MALFORMED
        kind, units = data[off], data[off + 1]
        end = off + units * 8
        if units == 0 or end > len(data):
            return NdpDrop.MALFORMED
        if kind == _OPT_SOURCE_LLADDR and lladdr is None:
            # Ethernet: one 8-octet unit holding a 6-octet address
            lladdr = data[off + 2 : off + 8] if units == 1 else data[off + 2 : end]
        off = end
    return RouterAdvert(lifetime, lladdr)
