"""BGP Next Hop Dependent Characteristics attribute (NHC, path attribute type 39) and its
characteristics NNHN (code 2, draft-ietf-idr-next-next-hop-nodes) and BGPID (code 3,
draft-ietf-idr-nhc §3).

Wire format of the attribute value (draft-ietf-idr-nhc §2.1; the header is laid out like
MP_REACH_NLRI's AFI, SAFI and next hop, RFC 4760 §3)::

     0                   1                   2                   3
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |              AFI              |     SAFI      |  Next Hop Len |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    ~        Network Address of Next Hop (4, 16 or 32 bytes)        ~
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |      Characteristic Code      |     Characteristic Length     |   zero or more
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    ~                     Characteristic Value                      ~
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

A 32-byte next hop is an IPv6 global address followed by a link-local one (RFC 2545 §3); a
16-byte ``fe80::/10`` next hop is *link-local only*. The AFI/SAFI are the route's (an IPv4
route over an IPv6 next hop, RFC 8950, has AFI 1 and a 16- or 32-byte next hop).

NNHN value: Next-hop BGP ID (4), then one BGP ID per ECMP path (4 each, N >= 1); none of them
may be 0.0.0.0 (not a valid BGP Identifier, RFC 6286 §2.1).
BGPID value: BGP Identifier (4) [+ AS number (4)].

Decoding policy:

* A malformed *attribute* (framing, header, a TLV that does not fit, trailing bytes) raises
  :class:`DecodeError`; its RFC 7606 action is always "attribute discard": the caller drops the
  attribute and keeps the route, and never resets the session.
* A malformed *characteristic* (NNHN length < 8 or not a multiple of 4, an NNHN with a 0.0.0.0
  identifier, BGPID of a wrong length or zero) is discarded on its own and named in
  :attr:`Nhc.discarded`; the other characteristics stay usable (draft-ietf-idr-nhc §2.4).
* Only the first NNHN and the first BGPID instance count; later ones are ignored (and named).
* NNHN IDs are accepted in any order; duplicates are ignored. They are stored ascending and
  unique, which is also the order they are encoded in.
* Unknown characteristic codes are kept as :class:`RawTlv` so that the session layer can drop
  them when it rewrites the next hop, as the draft requires.
* Attribute flags must say optional transitive (:func:`flags_problem`); Partial is allowed.

BGPID length: FRR 10.x encodes 4 octets (the BGP Identifier) and discards any other length; a
draft co-author's BMP collector (gobmp) reads 8 (BGP Identifier + 4-octet AS). Both are
accepted; an object encodes the form it holds, and glbd sends the 4-octet form (what FRR
interoperates with). glbd attaches a BGPID when the next hop it advertises is link-local only
(draft-ietf-idr-nhc §2.2.1, §3.2): such an address does not identify the router by itself.
"""

from __future__ import annotations

import enum
import ipaddress
import re
import struct
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "AFI_IPV4",
    "AFI_IPV6",
    "ATTR_TYPE",
    "CODE_BGPID",
    "CODE_NNHN",
    "FLAG_EXTENDED",
    "FLAG_OPTIONAL",
    "FLAG_PARTIAL",
    "FLAG_TRANSITIVE",
    "RFC7606_ACTION",
    "BgpId",
    "DecodeError",
    "NextHopMatch",
    "Nhc",
    "NhcAttribute",
    "Nnhn",
    "RawTlv",
    "decode",
    "decode_attribute",
    "decode_value",
    "flags_problem",
    "is_link_local",
    "parse_hex",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

ATTR_TYPE = 39
CODE_NNHN = 2
CODE_BGPID = 3
AFI_IPV4 = 1
AFI_IPV6 = 2

FLAG_OPTIONAL = 0x80
FLAG_TRANSITIVE = 0x40
FLAG_PARTIAL = 0x20
FLAG_EXTENDED = 0x10

RFC7606_ACTION = "attribute_discard"

_ZERO4 = ipaddress.IPv4Address(0)
_ZERO6 = ipaddress.IPv6Address(0)
_LINK_LOCAL6 = ipaddress.IPv6Network("fe80::/10")


def is_link_local(address: IPAddress) -> bool:
    """An IPv6 link-local unicast address (fe80::/10): unique only on its link."""
    return address.version == 6 and address in _LINK_LOCAL6


def flags_problem(flags: int | None) -> str | None:
    """Why these path attribute flags are wrong for an NHC (None: they are right). The NHC is
    optional transitive (draft-ietf-idr-nhc §2); Partial and Extended Length may be set."""
    if flags is None:
        return None
    if flags & (FLAG_OPTIONAL | FLAG_TRANSITIVE) != FLAG_OPTIONAL | FLAG_TRANSITIVE:
        return "bad_flags"
    return None


class DecodeError(ValueError):
    """A malformed NHC attribute. ``reason`` is a stable snake_case name; the RFC 7606 action
    for every NHC error is ``attribute_discard`` (drop the attribute, keep the route)."""

    action = RFC7606_ACTION

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class NextHopMatch(enum.Enum):
    """How the NHC header next hop relates to the route's next hop."""

    MATCH = "match"
    UNSPECIFIED = "unspecified"  # all-zero header next hop (FRR 10.x on eBGP IPv4)
    MISMATCH = "mismatch"


def _ipv4(value: ipaddress.IPv4Address | str | int) -> ipaddress.IPv4Address:
    return value if isinstance(value, ipaddress.IPv4Address) else ipaddress.IPv4Address(value)


@dataclass(frozen=True)
class Nnhn:
    """NNHN characteristic: the advertiser's BGP ID, then the BGP IDs of its ECMP next-next hops
    (normalised to ascending, unique)."""

    nh_bgp_id: ipaddress.IPv4Address
    nnh_ids: tuple[ipaddress.IPv4Address, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "nh_bgp_id", _ipv4(self.nh_bgp_id))
        ids = tuple(sorted({_ipv4(i) for i in self.nnh_ids}))
        if not ids:
            raise ValueError("NNHN needs at least one next-next-hop ID")
        if self.nh_bgp_id == _ZERO4 or ids[0] == _ZERO4:
            raise ValueError("0.0.0.0 is not a BGP Identifier")
        object.__setattr__(self, "nnh_ids", ids)

    def encode_value(self) -> bytes:
        return self.nh_bgp_id.packed + b"".join(i.packed for i in self.nnh_ids)

    def to_dict(self) -> dict[str, Any]:
        return {"nh_bgp_id": str(self.nh_bgp_id), "nnh_ids": [str(i) for i in self.nnh_ids]}


@dataclass(frozen=True)
class BgpId:
    """BGPID characteristic: 4-byte form (``asn is None``, FRR) or 8-byte form (ID + AS, draft)."""

    bgp_id: ipaddress.IPv4Address
    asn: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "bgp_id", _ipv4(self.bgp_id))
        if self.bgp_id == _ZERO4:
            raise ValueError("0.0.0.0 is not a BGP Identifier")
        if self.asn is not None and not 0 <= self.asn <= 0xFFFFFFFF:
            raise ValueError(f"AS number out of range: {self.asn}")

    def encode_value(self) -> bytes:
        if self.asn is None:
            return self.bgp_id.packed
        return self.bgp_id.packed + struct.pack("!I", self.asn)

    def to_dict(self) -> dict[str, Any]:
        return {"bgp_id": str(self.bgp_id), "asn": self.asn}


@dataclass(frozen=True)
class RawTlv:
    """A characteristic glbd does not interpret (kept opaque)."""

    code: int
    value: bytes

    def __post_init__(self) -> None:
        if not 0 <= self.code <= 0xFFFF:
            raise ValueError(f"characteristic code out of range: {self.code}")

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "value": self.value.hex()}


def _tlv(code: int, value: bytes) -> bytes:
    if len(value) > 0xFFFF:
        raise ValueError(f"characteristic {code} too long: {len(value)}")
    return struct.pack("!HH", code, len(value)) + value


@dataclass(frozen=True)
class Nhc:
    """The decoded attribute value. ``next_hop`` is the header's (global) next hop,
    ``link_local`` the second half of a 32-byte IPv6 header. ``discarded`` names
    characteristics that were ignored while decoding (malformed or repeated); it does not take
    part in equality."""

    afi: int
    safi: int
    next_hop: IPAddress
    nnhn: Nnhn | None = None
    bgpid: BgpId | None = None
    other: tuple[RawTlv, ...] = ()
    discarded: tuple[str, ...] = field(default=(), compare=False)
    link_local: ipaddress.IPv6Address | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.afi <= 0xFFFF or not 0 <= self.safi <= 0xFF:
            raise ValueError("AFI/SAFI out of range")
        if self.link_local is not None and (
            self.next_hop.version != 6 or not is_link_local(self.link_local)
        ):
            raise ValueError("a second next hop is an IPv6 link-local address after an IPv6 one")
        object.__setattr__(self, "other", tuple(sorted(self.other, key=lambda t: t.code)))
        if any(t.code in (CODE_NNHN, CODE_BGPID) for t in self.other):
            raise ValueError("NNHN/BGPID must use their typed fields, not RawTlv")

    @classmethod
    def for_next_hop(
        cls,
        next_hop: IPAddress | str,
        *,
        nnhn: Nnhn | None = None,
        bgpid: BgpId | None = None,
        safi: int = 1,
        afi: int | None = None,
        link_local: ipaddress.IPv6Address | str | None = None,
    ) -> Nhc:
        """An NHC for routes sent with ``next_hop``. ``afi`` is the routes' family (default:
        the next hop's); an IPv4 route over an IPv6 next hop (RFC 8950) says AFI 1."""
        nh = ipaddress.ip_address(next_hop)
        ll = None if link_local is None else ipaddress.IPv6Address(link_local)
        if afi is None:
            afi = AFI_IPV4 if nh.version == 4 else AFI_IPV6
        return cls(afi, safi, nh, nnhn, bgpid, link_local=ll)

    @property
    def next_hop_unspecified(self) -> bool:
        return self.next_hop in (_ZERO4, _ZERO6)

    @property
    def link_local_only(self) -> bool:
        """The header next hop is an IPv6 link-local address with no global part: the draft
        requires a BGPID with it (draft-ietf-idr-nhc §2.2.1, §3.3)."""
        return self.link_local is None and is_link_local(self.next_hop)

    def next_hop_match(self, route_next_hop: IPAddress | str) -> NextHopMatch:
        """Compare the header next hop with the route's next hop (the draft's semantic match).
        An all-zero header is reported as UNSPECIFIED; the policy belongs to the caller. With a
        32-byte header the route's next hop may be either half (ExaBGP reports the global one;
        a route whose global half is link-local too is reported by its link-local one)."""
        if self.next_hop_unspecified:
            return NextHopMatch.UNSPECIFIED
        nh = ipaddress.ip_address(route_next_hop)
        if self.next_hop == nh or (self.link_local is not None and self.link_local == nh):
            return NextHopMatch.MATCH
        return NextHopMatch.MISMATCH

    def tlvs(self) -> list[tuple[int, bytes]]:
        """Characteristics as (code, value), ascending by code (draft-ietf-idr-nhc §2.1)."""
        out: list[tuple[int, bytes]] = [(t.code, t.value) for t in self.other]
        if self.nnhn is not None:
            out.append((CODE_NNHN, self.nnhn.encode_value()))
        if self.bgpid is not None:
            out.append((CODE_BGPID, self.bgpid.encode_value()))
        out.sort(key=lambda cv: cv[0])  # stable: opaque TLVs with one code keep their order
        return out

    def encode_value(self) -> bytes:
        nh = self.next_hop.packed + (b"" if self.link_local is None else self.link_local.packed)
        head = struct.pack("!HBB", self.afi, self.safi, len(nh)) + nh
        return head + b"".join(_tlv(c, v) for c, v in self.tlvs())

    def encode(self, *, extended: bool | None = None) -> bytes:
        """Whole path attribute: flags 0xC0, or 0xD0 (2-byte length) when the value exceeds
        255 bytes or ``extended`` is true."""
        return NhcAttribute.for_value(self, extended=extended).encode()

    def to_dict(self) -> dict[str, Any]:
        return {
            "afi": self.afi,
            "safi": self.safi,
            "next_hop": str(self.next_hop),
            "link_local": None if self.link_local is None else str(self.link_local),
            "nnhn": None if self.nnhn is None else self.nnhn.to_dict(),
            "bgpid": None if self.bgpid is None else self.bgpid.to_dict(),
            "other": [t.to_dict() for t in self.other],
            "discarded": list(self.discarded),
        }


@dataclass(frozen=True)
class NhcAttribute:
    """The whole path attribute as it appears in an UPDATE: flags, type 39, length, value."""

    flags: int
    nhc: Nhc

    @classmethod
    def for_value(cls, nhc: Nhc, *, extended: bool | None = None) -> NhcAttribute:
        size = len(nhc.encode_value())
        ext = size > 255 if extended is None else extended or size > 255
        return cls(FLAG_OPTIONAL | FLAG_TRANSITIVE | (FLAG_EXTENDED if ext else 0), nhc)

    @property
    def partial(self) -> bool:
        return bool(self.flags & FLAG_PARTIAL)

    def encode(self) -> bytes:
        value = self.nhc.encode_value()
        if self.flags & FLAG_EXTENDED:
            if len(value) > 0xFFFF:
                raise ValueError("NHC value exceeds 65535 bytes")
            return struct.pack("!BBH", self.flags, ATTR_TYPE, len(value)) + value
        if len(value) > 0xFF:
            raise ValueError("NHC value exceeds 255 bytes without the extended-length flag")
        return struct.pack("!BBB", self.flags, ATTR_TYPE, len(value)) + value

    def to_dict(self) -> dict[str, Any]:
        return {
            "flags": self.flags,
            "optional": bool(self.flags & FLAG_OPTIONAL),
            "transitive": bool(self.flags & FLAG_TRANSITIVE),
            "partial": self.partial,
            "extended_length": bool(self.flags & FLAG_EXTENDED),
            "type": ATTR_TYPE,
            "value": self.nhc.to_dict(),
        }


def decode_value(data: bytes) -> Nhc:
    """Decode the attribute value (what ExaBGP shows as ``attribute-0x27-0x..``)."""
    data = bytes(data)
    if len(data) < 4:
        raise DecodeError("too_short", f"{len(data)} bytes, need at least 4")
    afi, safi, nhl = struct.unpack_from("!HBB", data)
    if afi not in (AFI_IPV4, AFI_IPV6):
        raise DecodeError("unknown_afi", str(afi))
    if nhl not in (4, 16, 32):
        raise DecodeError("bad_next_hop_length", str(nhl))
    if len(data) < 4 + nhl:
        raise DecodeError("truncated_next_hop", f"{len(data) - 4} of {nhl} bytes")
    next_hop: IPAddress = ipaddress.ip_address(data[4 : 4 + min(nhl, 16)])
    link_local: ipaddress.IPv6Address | None = None
    if nhl == 32:  # global + link-local (RFC 2545 §3)
        link_local = ipaddress.IPv6Address(data[20:36])
        if not is_link_local(link_local):
            raise DecodeError("bad_link_local_next_hop", str(link_local))
    nnhn: Nnhn | None = None
    bgpid: BgpId | None = None
    seen_nnhn = seen_bgpid = False
    other: list[RawTlv] = []
    discarded: list[str] = []
    off = 4 + nhl
    while off < len(data):
        if len(data) - off < 4:
            raise DecodeError("trailing_bytes", f"{len(data) - off} byte(s) after the last TLV")
        code, length = struct.unpack_from("!HH", data, off)
        off += 4
        if length > len(data) - off:
            raise DecodeError(
                "tlv_overflow", f"code {code} length {length} exceeds remaining {len(data) - off}"
            )
        value = data[off : off + length]
        off += length
        if code == CODE_NNHN:
            if seen_nnhn:
                discarded.append("nnhn_extra_instance")
                continue
            seen_nnhn = True
            if length < 8 or length % 4:
                discarded.append("nnhn_bad_length")
                continue
            ids = [ipaddress.IPv4Address(value[i : i + 4]) for i in range(0, length, 4)]
            if _ZERO4 in ids:  # not a BGP Identifier: the characteristic is malformed
                discarded.append("nnhn_zero_id")
                continue
            nnhn = Nnhn(ids[0], tuple(ids[1:]))
        elif code == CODE_BGPID:
            if seen_bgpid:
                discarded.append("bgpid_extra_instance")
                continue
            seen_bgpid = True
            if length not in (4, 8):
                discarded.append("bgpid_bad_length")
                continue
            ident = ipaddress.IPv4Address(value[:4])
            if ident == _ZERO4:
                discarded.append("bgpid_zero")
                continue
            asn = struct.unpack_from("!I", value, 4)[0] if length == 8 else None
            bgpid = BgpId(ident, asn)
        else:
            other.append(RawTlv(code, value))
    return Nhc(afi, safi, next_hop, nnhn, bgpid, tuple(other), tuple(discarded), link_local)


def decode_attribute(data: bytes) -> NhcAttribute:
    """Decode a whole path attribute (flags, type, length, value), as a capture shows it."""
    data = bytes(data)
    if len(data) < 3:
        raise DecodeError("too_short", f"{len(data)} bytes of attribute header")
    flags, atype = data[0], data[1]
    if atype != ATTR_TYPE:
        raise DecodeError("wrong_type", str(atype))
    if flags_problem(flags) is not None:
        raise DecodeError("bad_flags", f"0x{flags:02x} is not optional transitive")
    if flags & FLAG_EXTENDED:
        if len(data) < 4:
            raise DecodeError("too_short", "extended length header truncated")
        (length,) = struct.unpack_from("!H", data, 2)
        hdr = 4
    else:
        length, hdr = data[2], 3
    if len(data) - hdr != length:
        raise DecodeError("length_mismatch", f"header says {length}, have {len(data) - hdr}")
    return NhcAttribute(flags, decode_value(data[hdr:]))


def decode(data: bytes) -> Nhc | NhcAttribute:
    """Decode either form. A bare value starts with the AFI's high byte (0x00); a whole
    attribute starts with flags, which always have the Optional bit set."""
    if not data:
        raise DecodeError("too_short", "empty")
    return decode_value(data) if data[0] == 0 else decode_attribute(data)


_HEX_JUNK = re.compile(r"[\s:._-]+")


def parse_hex(text: str) -> bytes:
    """Hex as pasted from tcpdump or ExaBGP: spaces, colons, line breaks and ``0x`` allowed."""
    s = text.strip()
    if s.lower().startswith("0x"):
        s = s[2:]
    s = _HEX_JUNK.sub("", s)
    s = re.sub(r"0x", "", s, flags=re.IGNORECASE)
    try:
        return bytes.fromhex(s)
    except ValueError as exc:
        raise DecodeError("bad_hex", str(exc)) from None
