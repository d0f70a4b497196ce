"""BGP message bodies as ExaBGP forwards them raw (pure): OPEN, UPDATE and NOTIFICATION.

ExaBGP run with ``receive { packets; ... }`` (no ``parsed``) hands glbd each received message
as hex (``message.header`` / ``message.body``) instead of its JSON rendering of the parsed
message: no per-prefix JSON on either side, the largest cost of a full table (ExaBGP still
parses each message for its own checks). This module turns those bodies into the fields the
JSON carried, with the same meaning (golden-tested against the JSON of the same messages).

* OPEN (RFC 4271 §4.2, RFC 9072 extended optional parameters): version, My AS (the 4-octet AS
  of capability 65 when present, RFC 6793), hold time, BGP Identifier, and the capabilities
  glbd uses: multiprotocol (1, as ExaBGP's ``"ipv4/unicast"`` spelling), graceful restart (64,
  RFC 4724 §3), 4-octet AS (65).
* UPDATE (RFC 4271 §4.3, RFC 4760): IPv4 withdrawn routes and NLRI, MP_REACH_NLRI (a 32-byte
  IPv6 next hop is global + link-local, RFC 2545 §3; like ExaBGP, each prefix is announced
  once per next hop, global first; RFC 8950 IPv4 over an IPv6 next hop), MP_UNREACH_NLRI,
  ORIGIN, AS_PATH (2- or 4-octet by the peer's OPEN; AS4_PATH merged for a 2-octet peer, RFC
  6793 §4.2.3), NEXT_HOP, MED, COMMUNITIES, the Color Extended Communities of
  EXTENDED_COMMUNITIES (16: the route's fabric colours, :mod:`glbd.colours.colour`; other
  extended communities are skipped), the metric of AIGP (26, RFC 7311: the first AIGP TLV; a
  malformed AIGP is discarded, the route kept: :func:`decode_aigp`) and the NHC (39, raw value
  and flags). End-of-RIB (RFC 4724 §2): an empty IPv4 UPDATE, or one whose only attribute is an
  empty MP_UNREACH_NLRI.
* A malformed well-known attribute (ORIGIN, AS_PATH, NEXT_HOP, MED, LOCAL_PREF, COMMUNITIES)
  or an EXTENDED_COMMUNITIES whose length is not a multiple of 8 (RFC 7606 §7.14)
  makes the UPDATE's routes withdrawals (RFC 7606 "treat-as-withdraw", as ExaBGP does); a
  message that cannot be framed (lengths that do not add up, a bad prefix length, a bad MP
  next hop) raises :class:`WireError`: ExaBGP resets that session itself (NOTIFICATION 3).
* Prefixes are ``glbd.base.prefix.network_of_nlri`` networks, one object per encoding.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass
from typing import Any, NamedTuple

from glbd.base.prefix import Net4, Net6, network_of_nlri
from glbd.colours import colour
from glbd.colours.colour import ColourCommunity

__all__ = [
    "AFI_IPV4",
    "AFI_IPV6",
    "GracefulRestart",
    "Open",
    "RouteAnnounced",
    "Update",
    "WireError",
    "decode_aigp",
    "decode_notification",
    "decode_open",
    "decode_update",
    "family_name",
]

AFI_IPV4 = 1
AFI_IPV6 = 2
SAFI_UNICAST = 1

_ATTR_ORIGIN = 1
_ATTR_AS_PATH = 2
_ATTR_NEXT_HOP = 3
_ATTR_MED = 4
_ATTR_LOCAL_PREF = 5
_ATTR_COMMUNITIES = 8
_ATTR_MP_REACH = 14
_ATTR_MP_UNREACH = 15
_ATTR_EXTENDED_COMMUNITIES = colour.ATTR_EXTENDED_COMMUNITIES
_ATTR_AS4_PATH = 17
_ATTR_AIGP = 26
_ATTR_NHC = 39
_FLAG_EXTENDED = 0x10

_ORIGINS = ("igp", "egp", "incomplete")
_AS_SET, _AS_SEQUENCE, _CONFED_SEQUENCE, _CONFED_SET = 1, 2, 3, 4
_AS_TRANS = 23456

_AFI_NAMES = {AFI_IPV4: "ipv4", AFI_IPV6: "ipv6"}
_SAFI_NAMES = {1: "unicast", 2: "multicast", 4: "nlri-mpls", 128: "mpls-vpn"}

_U16 = struct.Struct("!H")
_U32 = struct.Struct("!I")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Prefix = Net4 | Net6
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class WireError(ValueError):
    """A message that cannot be framed; ``reason`` is a stable snake_case name."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


def family_name(afi: int, safi: int) -> str:
    """ExaBGP's spelling: ``"ipv4 unicast"``."""
    return f"{_AFI_NAMES.get(afi, f'afi-{afi}')} {_SAFI_NAMES.get(safi, f'safi-{safi}')}"


# -- prefixes ----------------------------------------------------------------------------------


def _nlris(afi: int, data: bytes, start: int, end: int) -> list[Prefix]:
    """The prefixes packed in ``data[start:end]`` (RFC 4271 §4.3 / RFC 4760 §5)."""
    out: list[Prefix] = []
    version = 4 if afi == AFI_IPV4 else 6
    maxlen = 32 if afi == AFI_IPV4 else 128
    i = start
    while i < end:
        plen = data[i]
        j = i + 1 + ((plen + 7) >> 3)
        if plen > maxlen or j > end:
            raise WireError("bad_prefix", f"length {plen} at {i}")
        out.append(network_of_nlri(version, data[i:j]))
        i = j
    return out


# -- OPEN --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GracefulRestart:
    """A peer's graceful restart capability (RFC 4724 §3) as its OPEN carried it."""

    restart_time: int
    #: the Restart State bit: the peer has restarted (do not wait for its End-of-RIB)
    restarting: bool = False
    #: the families the capability lists (ExaBGP's "ipv4/unicast" spelling)
    families: tuple[str, ...] = ()
    #: the families whose Forwarding State bit is set: their forwarding was preserved
    forwarding: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "restart_time": self.restart_time,
            "restarting": self.restarting,
            "families": list(self.families),
            "forwarding": list(self.forwarding),
        }


@dataclass(frozen=True, slots=True)
class Open:
    version: int
    asn: int  # the 4-octet AS of capability 65 when present, else My AS
    hold_time: int
    router_id: ipaddress.IPv4Address
    families: tuple[str, ...]  # "ipv4/unicast", capability 1
    asn4: bool
    graceful_restart: GracefulRestart | None


def _slash(afi: int, safi: int) -> str:
    return family_name(afi, safi).replace(" ", "/")


def decode_open(body: bytes) -> Open:
    """An OPEN body (after the 19-byte header)."""
    if len(body) < 10:
        raise WireError("short_open", f"{len(body)} bytes")
    version, my_as, hold = body[0], _U16.unpack_from(body, 1)[0], _U16.unpack_from(body, 3)[0]
    rid = ipaddress.IPv4Address(body[5:9])
    plen = body[9]
    i, wide = 10, False
    if plen == 255 and len(body) >= 13 and body[10] == 255:  # RFC 9072 extended length
        plen = _U16.unpack_from(body, 11)[0]
        i, wide = 13, True
    end = i + plen
    if end != len(body):
        raise WireError("bad_open_length", f"parameters {plen}, body {len(body)}")
    families: list[str] = []
    asn4: int | None = None
    gr: GracefulRestart | None = None
    while i < end:
        if i + (3 if wide else 2) > end:
            raise WireError("bad_open_parameter", f"at {i}")
        ptype = body[i]
        if wide:
            pl, i = _U16.unpack_from(body, i + 1)[0], i + 3
        else:
            pl, i = body[i + 1], i + 2
        if i + pl > end:
            raise WireError("bad_open_parameter", f"length {pl} at {i}")
        if ptype == 2:  # capabilities
            j, pend = i, i + pl
            while j < pend:
                if j + 2 > pend or j + 2 + body[j + 1] > pend:
                    raise WireError("bad_capability", f"at {j}")
                code, cl = body[j], body[j + 1]
                val = body[j + 2 : j + 2 + cl]
                if code == 1 and cl == 4:
                    fam = _slash(_U16.unpack_from(val)[0], val[3])
                    if fam not in families:
                        families.append(fam)
                elif code == 65 and cl == 4:
                    asn4 = _U32.unpack_from(val)[0]
                elif code == 64 and cl >= 2:
                    gr = _graceful_restart(val)
                j += 2 + cl
        i += pl
    return Open(
        version,
        my_as if asn4 is None else asn4,
        hold,
        rid,
        tuple(families),
        asn4 is not None,
        gr,
    )


def _graceful_restart(val: bytes) -> GracefulRestart:
    """Capability 64 (RFC 4724 §3): flags + restart time, then (AFI, SAFI, flags) tuples."""
    word = _U16.unpack_from(val)[0]
    fams: list[str] = []
    fwd: list[str] = []
    for k in range(2, len(val) - 3, 4):
        fam = _slash(_U16.unpack_from(val, k)[0], val[k + 2])
        fams.append(fam)
        if val[k + 3] & 0x80:
            fwd.append(fam)
    return GracefulRestart(word & 0x0FFF, bool(word & 0x8000), tuple(fams), tuple(fwd))


# -- NOTIFICATION ------------------------------------------------------------------------------


def decode_notification(body: bytes) -> tuple[int, int, bytes]:
    """(code, subcode, data) of a NOTIFICATION body."""
    if len(body) < 2:
        raise WireError("short_notification", f"{len(body)} bytes")
    return body[0], body[1], bytes(body[2:])


# -- UPDATE ------------------------------------------------------------------------------------


class RouteAnnounced(NamedTuple):
    """One announced prefix (a tuple: there is one per received path, and a frozen
    dataclass costs three ``object.__setattr__`` calls to build)."""

    family: str  # "ipv4 unicast"
    next_hop: IPAddress | None  # None: an IPv4 prefix without a NEXT_HOP
    prefix: ipaddress.IPv4Network | ipaddress.IPv6Network


class Update(NamedTuple):
    """One UPDATE's content. ``announced`` in the order ExaBGP's JSON listed them (by family,
    then next hop); ``withdrawn`` as (family, prefix)."""

    origin: str
    as_path: tuple[int, ...]
    as_path_length: int
    med: int | None
    communities: tuple[tuple[int, int], ...]
    nhc: bytes | None
    nhc_flags: int | None
    announced: list[RouteAnnounced]
    withdrawn: list[tuple[str, Network]]
    eor: str | None
    #: the well-known attribute that made the routes withdrawals (RFC 7606), or ""
    treat_as_withdraw: str
    #: the Color Extended Communities, in wire order (empty: an uncoloured route)
    colours: tuple[ColourCommunity, ...] = ()
    #: the AIGP metric (RFC 7311), None: no AIGP attribute, or a malformed one
    aigp: int | None = None
    #: why the AIGP attribute was discarded (:func:`decode_aigp`), or ""
    aigp_error: str = ""


#: the AIGP TLV (RFC 7311): type 1, 11 octets (type, 2-octet length, 8-octet metric)
AIGP_TLV_TYPE = 1
AIGP_TLV_LENGTH = 11
#: AIGP's flags, Optional and not Transitive (the other bits say nothing about the attribute)
_AIGP_FLAGS, _FLAG_KIND = 0x80, 0xC0
_U64 = struct.Struct("!Q")


def decode_aigp(value: bytes, flags: int = _AIGP_FLAGS) -> tuple[int | None, str]:
    """The metric of an AIGP attribute value (RFC 7311: TLVs of type, 2-octet length
    counting the whole TLV, value) and "", or None and why it is malformed: the first AIGP TLV
    (type 1) gives the metric, a later one and TLVs of other types are skipped. Malformed (RFC
    7311: the attribute is discarded, the route kept): ``bad_flags`` (not optional
    non-transitive, which ExaBGP ignores too), ``tlv_truncated`` (less than a TLV header left),
    ``tlv_too_short`` (a TLV length under 3), ``tlv_overrun`` (a TLV past the attribute's
    end), ``metric_length`` (an AIGP TLV not 11 octets), ``no_metric`` (no AIGP TLV)."""
    if flags & _FLAG_KIND != _AIGP_FLAGS:
        return None, "bad_flags"
    metric: int | None = None
    i, n = 0, len(value)
    while i < n:
        if n - i < 3:
            return None, "tlv_truncated"
        kind, length = value[i], _U16.unpack_from(value, i + 1)[0]
        if length < 3:
            return None, "tlv_too_short"
        if i + length > n:
            return None, "tlv_overrun"
        if kind == AIGP_TLV_TYPE:
            if length != AIGP_TLV_LENGTH:
                return None, "metric_length"
            if metric is None:
                metric = _U64.unpack_from(value, i + 3)[0]
        i += length
    return (None, "no_metric") if metric is None else (metric, "")


def _as_path(value: bytes, width: int) -> tuple[list[int], int] | None:
    """Flattened AS path and its length for selection (an AS_SET counts 1, confederation
    segments 0), or None when malformed."""
    flat: list[int] = []
    length = 0
    i, n = 0, len(value)
    fmt = "!%dH" if width == 2 else "!%dI"
    while i < n:
        if i + 2 > n:
            return None
        stype, count = value[i], value[i + 1]
        j = i + 2 + count * width
        if j > n or stype not in (_AS_SET, _AS_SEQUENCE, _CONFED_SEQUENCE, _CONFED_SET):
            return None
        asns = struct.unpack_from(fmt % count, value, i + 2)
        flat.extend(asns)
        if stype == _AS_SEQUENCE:
            length += count
        elif stype == _AS_SET and count:
            length += 1
        i = j
    return flat, length


def _merge_as4(path: list[int], length: int, as4: list[int], as4_len: int) -> tuple[list[int], int]:
    """RFC 6793 §4.2.3: a 2-octet speaker's AS_PATH with its AS4_PATH (flattened)."""
    if as4_len > length:
        return path, length
    keep = len(path) - len(as4)
    if keep < 0:
        return path, length
    return path[:keep] + as4, length


def decode_update(body: bytes, asn4: bool = True) -> Update:
    """An UPDATE body (after the 19-byte header); ``asn4``: the peer sent the 4-octet AS
    capability, so AS_PATH carries 4-octet AS numbers.

    Kept whole: one pass per UPDATE into a dozen locals, which a split would pass as a tuple."""
    n = len(body)
    if n < 4:
        raise WireError("short_update", f"{n} bytes")
    wlen = _U16.unpack_from(body)[0]
    a0 = 2 + wlen
    if a0 + 2 > n:
        raise WireError("bad_withdrawn_length", str(wlen))
    alen = _U16.unpack_from(body, a0)[0]
    a_start, a_end = a0 + 2, a0 + 2 + alen
    if a_end > n:
        raise WireError("bad_attributes_length", str(alen))
    v4 = "ipv4 unicast"
    withdrawn: list[tuple[str, Network]] = [(v4, p) for p in _nlris(AFI_IPV4, body, 2, a0)]
    if wlen == 0 and alen == 0 and a_end == n:
        return _eor(v4)
    origin = "igp"
    as_path: list[int] = []
    length = 0
    as4: tuple[list[int], int] | None = None
    next_hop: IPAddress | None = None
    med: int | None = None
    communities: tuple[tuple[int, int], ...] = ()
    colours: tuple[ColourCommunity, ...] = ()
    aigp: int | None = None
    aigp_error = ""
    nhc: bytes | None = None
    nhc_flags: int | None = None
    mp_reach: tuple[str, list[IPAddress], list[Prefix]] | None = None
    mp_unreach: tuple[str, list[Prefix]] | None = None
    bad = ""
    seen: set[int] = set()
    i = a_start
    while i < a_end:
        if i + 3 > a_end:
            raise WireError("bad_attribute", f"at {i}")
        flags, code = body[i], body[i + 1]
        if flags & _FLAG_EXTENDED:
            if i + 4 > a_end:
                raise WireError("bad_attribute", f"at {i}")
            vlen, v = _U16.unpack_from(body, i + 2)[0], i + 4
        else:
            vlen, v = body[i + 2], i + 3
        i = v + vlen
        if i > a_end:
            raise WireError("bad_attribute_length", f"code {code} length {vlen}")
        if code in seen:
            if code in (_ATTR_MP_REACH, _ATTR_MP_UNREACH):
                raise WireError("duplicate_mp_attribute", str(code))
            continue  # RFC 7606 §3(g): all but the first are discarded
        seen.add(code)
        value = body[v:i]
        if code == _ATTR_ORIGIN:
            if vlen != 1 or value[0] > 2:
                bad = bad or "origin"
            else:
                origin = _ORIGINS[value[0]]
        elif code == _ATTR_AS_PATH:
            parsed = _as_path(value, 4 if asn4 else 2)
            if parsed is None:
                bad = bad or "as_path"
            else:
                as_path, length = parsed
        elif code == _ATTR_AS4_PATH:
            if not asn4:  # a 4-octet speaker's AS4_PATH is ignored (RFC 6793 §4.2.2)
                as4 = _as_path(value, 4)  # malformed: discarded (RFC 6793 §6)
        elif code == _ATTR_NEXT_HOP:
            if vlen != 4:
                bad = bad or "next_hop"
            else:
                next_hop = ipaddress.IPv4Address(value)
        elif code == _ATTR_MED:
            if vlen != 4:
                bad = bad or "med"
            else:
                med = _U32.unpack(value)[0]
        elif code == _ATTR_LOCAL_PREF:
            if vlen != 4:
                bad = bad or "local_pref"
        elif code == _ATTR_COMMUNITIES:
            if vlen % 4:
                bad = bad or "communities"
            else:
                words = struct.unpack(f"!{vlen // 2}H", value)
                communities = tuple(zip(words[::2], words[1::2], strict=True))
        elif code == _ATTR_EXTENDED_COMMUNITIES:
            try:
                colours = colour.colours_of(value)
            except colour.DecodeError:  # not a multiple of 8 octets
                bad = bad or "extended_communities"
        elif code == _ATTR_AIGP:
            aigp, aigp_error = decode_aigp(value, flags)
        elif code == _ATTR_NHC:
            nhc, nhc_flags = bytes(value), flags
        elif code == _ATTR_MP_REACH:
            mp_reach = _mp_reach(body, v, i)
        elif code == _ATTR_MP_UNREACH:
            if vlen < 3:
                raise WireError("bad_mp_unreach", f"length {vlen}")
            afi, safi = _U16.unpack_from(body, v)[0], body[v + 2]
            if afi not in (AFI_IPV4, AFI_IPV6):
                raise WireError("bad_mp_unreach", f"afi {afi}")
            mp_unreach = (family_name(afi, safi), _nlris(afi, body, v + 3, i))
    if as4 is not None and not asn4:
        as_path, length = _merge_as4(as_path, length, *as4)
    if mp_unreach is not None:
        if not mp_unreach[1] and len(seen) == 1 and wlen == 0 and a_end == n:
            return _eor(mp_unreach[0])
        withdrawn.extend((mp_unreach[0], p) for p in mp_unreach[1])
    announced: list[RouteAnnounced] = []
    ra = RouteAnnounced
    if mp_reach is not None:
        fam, hops, nets = mp_reach
        for hop in hops:
            announced.extend([ra(fam, hop, p) for p in nets])
    v4nets = _nlris(AFI_IPV4, body, a_end, n)
    if v4nets:
        announced.extend([ra(v4, next_hop, p) for p in v4nets])
    if bad:
        # treat-as-withdraw: the routes are withdrawn, each once, in the order announced
        done: set[tuple[str, Network]] = set()
        for fam, _hop, p in announced:
            if (fam, p) not in done:
                done.add((fam, p))
                withdrawn.append((fam, p))
        announced = []
    return Update(
        origin,
        tuple(as_path),
        length,
        med,
        communities,
        nhc,
        nhc_flags,
        announced,
        withdrawn,
        None,
        bad,
        colours,
        aigp,
        aigp_error,
    )


def _mp_reach(body: bytes, v: int, end: int) -> tuple[str, list[IPAddress], list[Prefix]]:
    """MP_REACH_NLRI in ``body[v:end]``: family, next hops (a 32-byte IPv6 next hop is two),
    prefixes."""
    if end - v < 5:
        raise WireError("bad_mp_reach", f"length {end - v}")
    afi, safi, nhl = _U16.unpack_from(body, v)[0], body[v + 2], body[v + 3]
    if afi not in (AFI_IPV4, AFI_IPV6):
        raise WireError("bad_mp_reach", f"afi {afi}")
    h = v + 4
    if h + nhl + 1 > end:
        raise WireError("bad_mp_reach", f"next hop length {nhl}")
    if nhl == 4:
        hops: list[IPAddress] = [ipaddress.IPv4Address(body[h : h + 4])]
    elif nhl in (16, 32):
        hops = [ipaddress.IPv6Address(body[k : k + 16]) for k in range(h, h + nhl, 16)]
    else:
        raise WireError("bad_mp_reach", f"next hop length {nhl}")
    nets = _nlris(afi, body, h + nhl + 1, end)  # past the reserved octet
    if not nets:
        raise WireError("bad_mp_reach", "no prefixes")
    return family_name(afi, safi), hops, nets


def _eor(family: str) -> Update:
    return Update("igp", (), 0, None, (), None, None, [], [], family, "")
