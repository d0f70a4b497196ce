"""ExaBGP 5.0.x API codec (pure): command lines glbd writes, and the JSON/ack lines ExaBGP writes
to its API process (``encoder json``).

Every string and JSON key glbd depends on lives here, pinned by golden tests recorded from real
ExaBGP 5.0.15 output (tests/vectors/exabgp5_api_events.jsonl).

Facts (ExaBGP 5.0's API with ``encoder json``, observed on 5.0.15 peering in namespaces):

* one JSON object per line; ``"type"`` is state / open / update / notification / keepalive / ...;
  ``neighbor.address.peer`` names the session; ``neighbor.router-id`` is *our* router id;
* the peer's BGP identifier only appears in ``type: open`` (``receive { open; }``) as
  ``open.router_id``; opens also arrive for connections that later lose a collision, so the
  consumer keeps the latest one and binds it when ``state: up`` follows;
* ``state`` is ``connected`` / ``up`` / ``down`` (with ``reason``);
* glbd runs ExaBGP with ``receive { packets; }``: a received OPEN, UPDATE or NOTIFICATION
  arrives as ``neighbor.message = {"category": 1|2|3, "header": "0x..", "body": "0x.."}``
  and :mod:`glbd.bgp.bgpmsg` reads the body (the parsed forms below are still read: the
  tests' recordings, and an ExaBGP configured by hand);
* announcements are ``update.announce["ipv4 unicast"][<next hop>] = [{"nlri": ...}]``,
  withdrawals ``update.withdraw["ipv4 unicast"] = [{"nlri": ...}]`` (with
  ``exabgp.api.compact``, as glbd runs it, a bare ``"10.0.0.0/24"`` for each), End-of-RIB is
  ``message.eor = {"afi": ..., "safi": ...}``;
* unknown attributes are ``"attribute-0x27-0xE0": "0x<hex>"``: match on the code, because
  ExaBGP ORs Partial into the flags of every unknown transitive attribute it parses;
* a route's extended communities are ``"extended-community": [{"value": N, "string": S}]``, a
  colour (which ExaBGP has no class for) with ``S`` empty; glbd announces colours as
  ``extended-community [ 0x030b... ]`` (raw hex: there is no ``color`` keyword,
  docs/colours.md);
* AIGP (RFC 7311) is announced as ``aigp N`` (the static route grammar's ``aigp``; ExaBGP packs
  it only on a session with ``capability { aigp enable; }``) and printed in its JSON as
  ``"aigp": "0x"`` + 16 hex digits (``AIGP.__repr__``);
* every command is acknowledged with a bare ``done`` or ``error`` line (``exabgp.api.ack``);
* the graceful restart capability (RFC 4724, code 64) of an OPEN is
  ``capabilities["64"] = {"name": "graceful restart", "time": T, "address-family-flags":
  {"ipv4/unicast": ["restart"]}, "restart-flags": ["forwarding"]}`` with the two labels
  swapped in ExaBGP 5.0.15 (``Graceful.json``): a family's ``"restart"`` is its Forwarding
  State bit (0x80), ``"forwarding"`` in ``restart-flags`` is the Restart State bit (R).
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from glbd.base.prefix import network_of
from glbd.bgp import bgpmsg
from glbd.bgp.bgpmsg import GracefulRestart, RouteAnnounced
from glbd.colours import colour
from glbd.colours.colour import ColourCommunity

__all__ = [
    "Ack",
    "Announce",
    "ApiParser",
    "DecodeError",
    "EndOfRib",
    "Event",
    "FlushAdjRibOut",
    "GracefulRestart",
    "KeepaliveEvent",
    "NotificationEvent",
    "OpenEvent",
    "OtherEvent",
    "PathAttributes",
    "RouteAnnounced",
    "RouteRefresh",
    "ShutdownEvent",
    "StateEvent",
    "Teardown",
    "UpdateEvent",
    "Withdraw",
    "decode",
    "encode_command",
]

Prefix = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

NHC_CODE = 0x27
_GENERIC_ATTR = re.compile(r"^attribute-0x([0-9A-Fa-f]{2})-0x([0-9A-Fa-f]{2})$")


class DecodeError(ValueError):
    """A line from ExaBGP that glbd cannot use; ``reason`` is a stable snake_case name."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


# -- commands (glbd -> ExaBGP) --------------------------------------------------------------


def _hex(data: bytes) -> str:
    return "0x" + data.hex()


@dataclass(frozen=True)
class Announce:
    """``neighbor <peer> announce route <prefix> next-hop <nh> origin .. as-path [..] ...``"""

    neighbor: IPAddress
    prefix: Prefix
    next_hop: IPAddress | None  # None = "self"
    as_path: tuple[int, ...] = ()
    origin: str = "igp"
    communities: tuple[tuple[int, int], ...] = ()
    med: int | None = None
    nhc: bytes | None = None  # NHC attribute *value* (glbd.bgp.nhc.Nhc.encode_value())
    nhc_flags: int = 0xC0
    #: Color Extended Communities, sent in this order (ExaBGP 5.0.15 takes them as raw hex
    #: only: it has no ``color`` keyword, docs/colours.md)
    colours: tuple[ColourCommunity, ...] = ()
    #: the AIGP metric (RFC 7311), None: no AIGP attribute
    aigp: int | None = None

    def encode(self) -> str:
        nh = "self" if self.next_hop is None else str(self.next_hop)
        parts = [f"neighbor {self.neighbor} announce route {self.prefix} next-hop {nh}"]
        parts.append(f"origin {self.origin}")
        if self.as_path:
            parts.append("as-path [ " + " ".join(str(a) for a in self.as_path) + " ]")
        if self.med is not None:
            parts.append(f"med {self.med}")
        if self.communities:
            parts.append("community [ " + " ".join(f"{a}:{b}" for a, b in self.communities) + " ]")
        if self.colours:
            parts.append(
                "extended-community [ " + " ".join(c.exabgp() for c in self.colours) + " ]"
            )
        if self.aigp is not None:
            parts.append(f"aigp {self.aigp}")
        if self.nhc is not None:
            parts.append(f"attribute [ 0x{NHC_CODE:02x} 0x{self.nhc_flags:02x} {_hex(self.nhc)} ]")
        return " ".join(parts)


@dataclass(frozen=True)
class Withdraw:
    neighbor: IPAddress
    prefix: Prefix
    next_hop: IPAddress | None = None

    def encode(self) -> str:
        nh = "self" if self.next_hop is None else str(self.next_hop)
        return f"neighbor {self.neighbor} withdraw route {self.prefix} next-hop {nh}"


@dataclass(frozen=True)
class Teardown:
    """Close the session with a Cease NOTIFICATION (subcode 2 administrative shutdown by
    default; 10 is "BFD down", RFC 9384)."""

    neighbor: IPAddress
    subcode: int = 2

    def encode(self) -> str:
        return f"neighbor {self.neighbor} teardown {self.subcode}"


@dataclass(frozen=True)
class EndOfRib:
    """``neighbor <peer> announce eor ipv4 unicast``: the End-of-RIB marker (RFC 4724 §2),
    sent by glbd when ExaBGP runs with ``manual-eor``. ExaBGP sends it after every route
    queued before it and answers ``error`` if the session is not established."""

    neighbor: IPAddress
    family: str = "ipv4 unicast"

    def encode(self) -> str:
        return f"neighbor {self.neighbor} announce eor {self.family}"


@dataclass(frozen=True)
class RouteRefresh:
    """``neighbor <peer> announce route-refresh ipv4 unicast``: ask the peer to send its routes
    again (RFC 2918), which glbd then takes through the import policy in force (soft reset in)."""

    neighbor: IPAddress
    family: str = "ipv4 unicast"

    def encode(self) -> str:
        return f"neighbor {self.neighbor} announce route-refresh {self.family}"


@dataclass(frozen=True)
class FlushAdjRibOut:
    """``neighbor <peer> flush adj-rib out``: ExaBGP sends the peer every route it holds for it
    again (soft reset out)."""

    neighbor: IPAddress

    def encode(self) -> str:
        return f"neighbor {self.neighbor} flush adj-rib out"


Command = Announce | Withdraw | Teardown | EndOfRib | RouteRefresh | FlushAdjRibOut


def encode_command(cmd: Command) -> str:
    line = cmd.encode()
    if "\n" in line:
        raise ValueError("command contains a newline")
    return line


# -- events (ExaBGP -> glbd) ------------------------------------------------------------------


@dataclass(frozen=True)
class Ack:
    ok: bool  # "done" -> True, "error" -> False

    def to_dict(self) -> dict[str, Any]:
        return {"type": "ack", "ok": self.ok}


@dataclass(frozen=True)
class _Peer:
    peer: IPAddress
    local: IPAddress
    #: None for a neighbor configured with ``peer-as auto`` (any AS)
    peer_as: int | None
    local_as: int


@dataclass(frozen=True)
class StateEvent(_Peer):
    state: str  # connected | up | down
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"type": "state", "peer": str(self.peer), "state": self.state, "reason": self.reason}


@dataclass(frozen=True)
class OpenEvent(_Peer):
    direction: str
    asn: int
    hold_time: int
    router_id: ipaddress.IPv4Address
    families: tuple[str, ...] = ()
    #: None: the OPEN has no graceful restart capability
    graceful_restart: GracefulRestart | None = None
    #: the 4-octet AS capability (RFC 6793): the peer's AS_PATHs carry 4-octet AS numbers
    asn4: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "open",
            "peer": str(self.peer),
            "direction": self.direction,
            "asn": self.asn,
            "hold_time": self.hold_time,
            "router_id": str(self.router_id),
            "families": list(self.families),
            "graceful_restart": None
            if self.graceful_restart is None
            else self.graceful_restart.to_dict(),
        }


@dataclass(frozen=True)
class PathAttributes:
    origin: str = "igp"
    as_path: tuple[int, ...] = ()  # flattened, in order
    as_path_length: int = 0  # RFC 4271 9.1.2.2(a): an AS_SET counts as 1
    med: int | None = None
    communities: tuple[tuple[int, int], ...] = ()
    nhc: bytes | None = None  # raw value of attribute 39 (first instance)
    nhc_flags: int | None = None  # flags as ExaBGP reports them (Partial always ORed in)
    #: the route's Color Extended Communities in wire order (empty: uncoloured)
    colours: tuple[ColourCommunity, ...] = ()
    #: the AIGP metric (RFC 7311), None: no AIGP attribute (or a malformed one, discarded)
    aigp: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "origin": self.origin,
            "as_path": list(self.as_path),
            "as_path_length": self.as_path_length,
            "med": self.med,
            "communities": [f"{a}:{b}" for a, b in self.communities],
            "nhc": None if self.nhc is None else self.nhc.hex(),
            "nhc_flags": self.nhc_flags,
            "colours": [c.text() for c in self.colours],
            "aigp": self.aigp,
        }


@dataclass(frozen=True)
class UpdateEvent(_Peer):
    direction: str
    attributes: PathAttributes = field(default_factory=PathAttributes)
    announced: tuple[RouteAnnounced, ...] = ()
    withdrawn: tuple[tuple[str, Prefix], ...] = ()  # (family, prefix)
    eor: str | None = None  # family of an End-of-RIB marker
    #: the malformed well-known attribute that made the routes withdrawals (RFC 7606), or ""
    treat_as_withdraw: str = ""
    #: why a malformed AIGP attribute was discarded (``bgpmsg.decode_aigp``), or ""
    aigp_error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "update",
            "peer": str(self.peer),
            "direction": self.direction,
            "attributes": self.attributes.to_dict(),
            "announced": [
                {"family": a.family, "next_hop": str(a.next_hop), "prefix": str(a.prefix)}
                for a in self.announced
            ],
            "withdrawn": [{"family": f, "prefix": str(p)} for f, p in self.withdrawn],
            "eor": self.eor,
        }


@dataclass(frozen=True)
class NotificationEvent(_Peer):
    direction: str
    code: int
    subcode: int
    data: bytes = b""
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "notification",
            "peer": str(self.peer),
            "direction": self.direction,
            "code": self.code,
            "subcode": self.subcode,
            "data": self.data.hex(),
            "message": self.message,
        }


@dataclass(frozen=True)
class KeepaliveEvent(_Peer):
    direction: str = "receive"

    def to_dict(self) -> dict[str, Any]:
        return {"type": "keepalive", "peer": str(self.peer)}


@dataclass(frozen=True)
class ShutdownEvent:
    """ExaBGP itself is shutting down (``"notification": "shutdown"`` without a neighbor)."""

    def to_dict(self) -> dict[str, Any]:
        return {"type": "shutdown"}


@dataclass(frozen=True)
class OtherEvent:
    """A well-formed message of a type glbd does not use (negotiated, fsm, signal, refresh...)."""

    kind: str

    def to_dict(self) -> dict[str, Any]:
        return {"type": "other", "kind": self.kind}


Event = (
    Ack
    | StateEvent
    | OpenEvent
    | UpdateEvent
    | NotificationEvent
    | KeepaliveEvent
    | ShutdownEvent
    | OtherEvent
)


def _get(d: Any, *path: str) -> Any:
    cur = d
    for key in path:
        if not isinstance(cur, dict) or key not in cur:
            raise DecodeError("missing_key", ".".join(path))
        cur = cur[key]
    return cur


#: how ExaBGP 5.0 writes the AS of a ``peer-as auto`` neighbor (not JSON)
_AUTO_AS = '"peer": None }'


def _int(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise DecodeError("bad_value", f"{what}={v!r}")
    return v


def _addr(v: Any, what: str) -> IPAddress:
    try:
        return ipaddress.ip_address(str(v))
    except ValueError:
        raise DecodeError("bad_address", f"{what}={v!r}") from None


def _nlri(item: Any) -> Any:
    """A prefix as ``exabgp.api.compact`` writes it (a string), or as an object."""
    return item if isinstance(item, str) else _get(item, "nlri")


def _prefix(v: Any) -> Prefix:
    try:
        return network_of(str(v))  # each text parsed once: every spine sends the same ones
    except ValueError:
        raise DecodeError("bad_prefix", repr(v)) from None


def _peer_fields(n: Any) -> dict[str, Any]:
    return {
        "peer": _addr(_get(n, "address", "peer"), "peer"),
        "local": _addr(_get(n, "address", "local"), "local"),
        "peer_as": None
        if _get(n, "asn", "peer") is None
        else _int(_get(n, "asn", "peer"), "asn.peer"),
        "local_as": _int(_get(n, "asn", "local"), "asn.local"),
    }


def _as_path(raw: Any) -> tuple[tuple[int, ...], int]:
    if raw is None:
        return (), 0
    if isinstance(raw, list):  # older flat form
        path = tuple(_int(a, "as-path") for a in raw)
        return path, len(path)
    if not isinstance(raw, dict):
        raise DecodeError("bad_as_path", repr(raw))
    flat: list[int] = []
    length = 0
    for key in sorted(raw, key=lambda k: int(k) if str(k).isdigit() else 0):
        seg = raw[key]
        element = _get(seg, "element")
        values = [_int(a, "as-path") for a in _get(seg, "value")]
        flat.extend(values)
        if element == "as-sequence":
            length += len(values)
        elif element == "as-set":
            length += 1 if values else 0
        elif element not in ("confed-sequence", "confed-set"):  # confederation: length 0
            raise DecodeError("bad_as_path", f"segment {element!r}")
    return tuple(flat), length


def _attributes(raw: Any) -> PathAttributes:
    if raw is None:
        return PathAttributes()
    if not isinstance(raw, dict):
        raise DecodeError("bad_attributes", repr(raw))
    as_path, length = _as_path(raw.get("as-path"))
    communities: list[tuple[int, int]] = []
    for c in raw.get("community", []) or []:
        if not (isinstance(c, list) and len(c) == 2):
            raise DecodeError("bad_community", repr(c))
        communities.append((_int(c[0], "community"), _int(c[1], "community")))
    nhc: bytes | None = None
    nhc_flags: int | None = None
    for key, value in raw.items():
        m = _GENERIC_ATTR.match(key)
        if not m or int(m.group(1), 16) != NHC_CODE or nhc is not None:
            continue
        if not (isinstance(value, str) and value[:2].lower() == "0x"):
            raise DecodeError("bad_generic_attribute", f"{key}={value!r}")
        try:
            nhc = bytes.fromhex(value[2:])
        except ValueError:
            raise DecodeError("bad_generic_attribute", f"{key}={value!r}") from None
        nhc_flags = int(m.group(2), 16)
    colours: list[ColourCommunity] = []
    for item in raw.get("extended-community", []) or []:
        try:
            c = colour.from_exabgp_json(item)
        except colour.DecodeError as exc:
            raise DecodeError("bad_extended_community", str(exc)) from None
        if c is not None:
            colours.append(c)
    med = raw.get("med")
    aigp = raw.get("aigp")
    return PathAttributes(
        origin=str(raw.get("origin", "igp")),
        as_path=as_path,
        as_path_length=length,
        med=None if med is None else _int(med, "med"),
        communities=tuple(communities),
        nhc=nhc,
        nhc_flags=nhc_flags,
        colours=tuple(colours),
        aigp=None if aigp is None else _aigp_json(aigp),
    )


def _aigp_json(value: Any) -> int:
    """ExaBGP's JSON of the AIGP metric: ``"0x"`` and 16 hex digits (an integer accepted)."""
    if isinstance(value, str) and value[:2].lower() == "0x":
        try:
            return int(value[2:], 16)
        except ValueError:
            pass
    elif type(value) is int and value >= 0:
        return value
    raise DecodeError("bad_aigp", repr(value)[:40])


def _update(n: Any, peer: dict[str, Any]) -> UpdateEvent:
    direction = str(n.get("direction", "receive"))
    msg = _get(n, "message")
    if "eor" in msg:
        eor = _get(msg, "eor")
        return UpdateEvent(
            **peer, direction=direction, eor=f"{_get(eor, 'afi')} {_get(eor, 'safi')}"
        )
    upd = _get(msg, "update")
    attrs = _attributes(upd.get("attribute"))
    announced: list[RouteAnnounced] = []
    for family, by_nh in (upd.get("announce") or {}).items():
        if not isinstance(by_nh, dict):
            raise DecodeError("bad_announce", family)
        for nh, nlris in by_nh.items():
            next_hop = None if nh == "null" else _addr(nh, "next-hop")
            for item in nlris:
                announced.append(RouteAnnounced(family, next_hop, _prefix(_nlri(item))))
    withdrawn: list[tuple[str, Prefix]] = []
    for family, nlris in (upd.get("withdraw") or {}).items():
        if not isinstance(nlris, list):
            raise DecodeError("bad_withdraw", family)
        withdrawn.extend((family, _prefix(_nlri(item))) for item in nlris)
    return UpdateEvent(
        **peer,
        direction=direction,
        attributes=attrs,
        announced=tuple(announced),
        withdrawn=tuple(withdrawn),
    )


def _graceful_restart(raw: Any) -> GracefulRestart:
    """ExaBGP 5.0.15's JSON of capability 64 (labels swapped: see the module docstring)."""
    if not isinstance(raw, dict):
        raise DecodeError("bad_graceful_restart", repr(raw)[:80])
    time = _int(raw.get("time", 0), "graceful-restart.time")
    flags = raw.get("restart-flags") or []
    fams = raw.get("address-family-flags") or {}
    if not (isinstance(flags, list) and isinstance(fams, dict)):
        raise DecodeError("bad_graceful_restart", repr(raw)[:80])
    families: list[str] = []
    forwarding: list[str] = []
    for family, fflags in fams.items():
        if not isinstance(fflags, list):
            raise DecodeError("bad_graceful_restart", f"{family}={fflags!r}")
        families.append(str(family))
        if "restart" in fflags:  # ExaBGP's label for the Forwarding State bit
            forwarding.append(str(family))
    return GracefulRestart(
        restart_time=time,
        restarting="forwarding" in flags,  # ExaBGP's label for the Restart State bit
        families=tuple(families),
        forwarding=tuple(forwarding),
    )


def decode(line: str, asn4: Mapping[IPAddress, bool] | None = None) -> Event:
    """Decode one line from ExaBGP. Raises :class:`DecodeError` only. ``asn4``: per peer,
    whether its OPEN had the 4-octet AS capability (a raw UPDATE's AS_PATH width; default
    4-octet)."""
    text = line.strip()
    if text == "done":
        return Ack(True)
    if text == "error":
        return Ack(False)
    if not text:
        raise DecodeError("empty_line")
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        # ExaBGP 5.0 writes a ``peer-as auto`` neighbor's AS as Python's None
        if _AUTO_AS not in text:
            raise DecodeError("not_json", text[:80]) from None
        try:
            doc = json.loads(text.replace(_AUTO_AS, '"peer": null }', 1))
        except (ValueError, RecursionError):
            raise DecodeError("not_json", text[:80]) from None
    try:
        return _decode_doc(doc, asn4)
    except DecodeError:
        raise
    except bgpmsg.WireError as exc:
        raise DecodeError(exc.reason, str(exc)[:120]) from None
    except (TypeError, AttributeError, KeyError, ValueError) as exc:
        raise DecodeError("bad_structure", repr(exc)[:120]) from None


def _raw_body(n: Any) -> bytes | None:
    """The body of a message ExaBGP forwarded raw (``receive { packets; }``), or None."""
    msg = n.get("message")
    if not isinstance(msg, dict) or "category" not in msg:
        return None
    text = msg.get("body", "")
    if not isinstance(text, str):
        raise DecodeError("bad_value", "message.body")
    try:
        return bytes.fromhex(text[2:] if text[:2].lower() == "0x" else text)
    except ValueError:
        raise DecodeError("bad_value", "message.body") from None


def _raw_event(
    kind: str, n: Any, peer: dict[str, Any], body: bytes, asn4: Mapping[IPAddress, bool] | None
) -> Event:
    direction = str(n.get("direction", "receive"))
    if kind == "update":
        u = bgpmsg.decode_update(body, True if asn4 is None else asn4.get(peer["peer"], True))
        if u.eor is not None:
            return UpdateEvent(**peer, direction=direction, eor=u.eor)
        return UpdateEvent(
            **peer,
            direction=direction,
            attributes=PathAttributes(
                u.origin,
                u.as_path,
                u.as_path_length,
                u.med,
                u.communities,
                u.nhc,
                u.nhc_flags,
                u.colours,
                u.aigp,
            ),
            announced=tuple(u.announced),
            withdrawn=tuple(u.withdrawn),
            treat_as_withdraw=u.treat_as_withdraw,
            aigp_error=u.aigp_error,
        )
    if kind == "open":
        o = bgpmsg.decode_open(body)
        gr = o.graceful_restart
        return OpenEvent(
            **peer,
            direction=direction,
            asn=o.asn,
            hold_time=o.hold_time,
            router_id=o.router_id,
            families=o.families,
            graceful_restart=gr,
            asn4=o.asn4,
        )
    if kind == "notification":
        code, subcode, data = bgpmsg.decode_notification(body)
        return NotificationEvent(**peer, direction=direction, code=code, subcode=subcode, data=data)
    return OtherEvent(kind)


def _decode_doc(doc: Any, asn4: Mapping[IPAddress, bool] | None = None) -> Event:
    if not isinstance(doc, dict):
        raise DecodeError("not_an_object")
    kind = doc.get("type")
    if kind is None:
        raise DecodeError("missing_key", "type")
    if "neighbor" not in doc:
        if kind == "notification" and doc.get("notification") == "shutdown":
            return ShutdownEvent()
        return OtherEvent(str(kind))
    n = doc["neighbor"]
    peer = _peer_fields(n)
    if kind in ("update", "open", "notification"):
        body = _raw_body(n)
        if body is not None:
            return _raw_event(kind, n, peer, body, asn4)
    if kind == "state":
        return StateEvent(**peer, state=str(_get(n, "state")), reason=str(n.get("reason", "")))
    if kind == "open":
        o = _get(n, "open")
        families: list[str] = []
        caps = o.get("capabilities") or {}
        mp = caps.get("1") if isinstance(caps, dict) else None
        if isinstance(mp, dict):
            families = [str(f) for f in mp.get("families", [])]
        rid = _addr(_get(o, "router_id"), "router_id")
        if not isinstance(rid, ipaddress.IPv4Address):
            raise DecodeError("bad_address", "router_id")
        gr = caps.get("64") if isinstance(caps, dict) else None
        return OpenEvent(
            **peer,
            direction=str(n.get("direction", "receive")),
            asn=_int(_get(o, "asn"), "open.asn"),
            hold_time=_int(_get(o, "hold_time"), "open.hold_time"),
            router_id=rid,
            families=tuple(families),
            graceful_restart=None if gr is None else _graceful_restart(gr),
        )
    if kind == "update":
        return _update(n, peer)
    if kind == "notification":
        note = _get(n, "notification")
        data = str(note.get("data", "0x"))
        try:
            raw = bytes.fromhex(data[2:] if data[:2].lower() == "0x" else data)
        except ValueError:
            raw = b""
        return NotificationEvent(
            **peer,
            direction=str(n.get("direction", "receive")),
            code=_int(_get(note, "code"), "code"),
            subcode=_int(_get(note, "subcode"), "subcode"),
            data=raw,
            message=str(note.get("message", "")),
        )
    if kind == "keepalive":
        return KeepaliveEvent(**peer, direction=str(n.get("direction", "receive")))
    return OtherEvent(str(kind))


@dataclass
class ApiParser:
    """Line-oriented decoder that never raises: malformed lines are counted by reason."""

    dropped: Counter[str] = field(default_factory=Counter)
    decoded: int = 0
    last_error: str = ""
    #: per peer, its last OPEN's 4-octet AS capability (how its raw UPDATEs are read)
    asn4: dict[IPAddress, bool] = field(default_factory=dict)

    def feed(self, line: str) -> Event | None:
        try:
            ev = decode(line, self.asn4)
        except DecodeError as exc:
            self.dropped[exc.reason] += 1
            self.last_error = str(exc)
            return None
        self.decoded += 1
        if isinstance(ev, OpenEvent) and ev.direction == "receive":
            self.asn4[ev.peer] = ev.asn4
        elif isinstance(ev, UpdateEvent):
            if ev.treat_as_withdraw:
                # the line is used (its routes withdrawn) but what they carried is lost: counted
                self.dropped[f"treat_as_withdraw_{ev.treat_as_withdraw}"] += 1
            if ev.aigp_error:  # the routes stay, without their AIGP (RFC 7311: attribute discard)
                self.dropped[f"aigp_malformed_{ev.aigp_error}"] += 1
        return ev
