"""The Color Extended Community (RFC 9012 §4.3): a route's fabric colour (docs/colours.md).

Wire form, one 8-octet extended community (RFC 4360 §2) inside the EXTENDED_COMMUNITIES path
attribute (type 16, optional transitive)::

     0                   1                   2                   3
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    | Type 0x03     | Sub-Type 0x0b |             Flags             |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                          Color Value                          |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

Type 0x03 is "transitive opaque"; 0x43 (the same with the non-transitive bit) is another
community and is not a colour. RFC 9012 defines no flags: glbd originates 0, and keeps a received
value as it is (a spine passes it on unchanged) without reading it.

The text forms of ExaBGP 5.0.15 (checked in its source, docs/colours.md):

* a command takes the community as raw hex only, ``extended-community [ 0x030b000000000001 ]``
  (``configuration/static/parser.py`` ``_extended_community``: no ``color:`` keyword);
* its JSON prints an extended community it has no class for, as it does a colour, as
  ``{"value": <the 8 octets as one unsigned integer>, "string": ""}`` under
  ``"extended-community"`` (``.../community/extended/community.py`` ``json``), and its text
  form as upper-case hex ``0x030B000000000001`` (``__repr__``).

glbd itself prints ``color:FLAGS:COLOUR`` (``color:0:1`` for colour 1, as Junos writes it).

Errors: :class:`DecodeError` (a ``ValueError``) with a stable ``reason`` and a one-line message;
nothing else escapes from the functions here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ATTR_EXTENDED_COMMUNITIES",
    "COLOUR_MAX",
    "FLAGS_MAX",
    "SIZE",
    "SUBTYPE",
    "TYPE",
    "ColourCommunity",
    "DecodeError",
    "colours_of",
    "decode",
    "from_exabgp_json",
    "iter_communities",
    "parse_text",
]

#: transitive opaque extended community type (RFC 4360 §3.3, RFC 7153)
TYPE = 0x03
#: its Color sub-type (RFC 9012 §4.3)
SUBTYPE = 0x0B
#: octets in one extended community
SIZE = 8
#: the path attribute that holds extended communities (RFC 4360 §2)
ATTR_EXTENDED_COMMUNITIES = 16
COLOUR_MAX = 0xFFFF_FFFF
FLAGS_MAX = 0xFFFF

_PREFIX = bytes((TYPE, SUBTYPE))
_HEX = re.compile(r"0[xX]([0-9a-fA-F]{16})")
_TEXT = re.compile(r"color:([0-9]{1,5}):([0-9]{1,10})")
#: longest text worth looking at: keeps a hostile line out of the regexes and the error message
_MAX_TEXT = 64


class DecodeError(ValueError):
    """Input that is not a Color Extended Community. ``reason`` is a stable snake_case name."""

    def __init__(self, reason: str, detail: str = "") -> None:
        detail = " ".join(detail.split())[:120]  # one line, bounded
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, order=True)
class ColourCommunity:
    """One Color Extended Community: ``colour`` 0..2^32-1 and the 16-bit ``flags``.

    Colour 0 is a valid wire value (glbd's config never assigns it, docs/colours.md)."""

    colour: int
    flags: int = 0

    def __post_init__(self) -> None:
        for name, value, top in (
            ("colour", self.colour, COLOUR_MAX),
            ("flags", self.flags, FLAGS_MAX),
        ):
            if type(value) is not int or not 0 <= value <= top:
                raise DecodeError(f"bad_{name}", f"{value!r} is not an integer 0..{top}")

    def encode(self) -> bytes:
        """The 8 octets."""
        return _PREFIX + self.flags.to_bytes(2, "big") + self.colour.to_bytes(4, "big")

    def exabgp(self) -> str:
        """The form ExaBGP's ``extended-community`` takes: ``0x030b000000000001``."""
        return "0x" + self.encode().hex()

    def text(self) -> str:
        """glbd's own form: ``color:FLAGS:COLOUR`` (views, logs)."""
        return f"color:{self.flags}:{self.colour}"

    def to_dict(self) -> dict[str, Any]:
        return {"colour": self.colour, "flags": self.flags, "text": self.text()}


def decode(data: bytes) -> ColourCommunity:
    """Exactly one 8-octet community, which must be a Color Extended Community."""
    data = bytes(data)
    if len(data) != SIZE:
        raise DecodeError("bad_length", f"{len(data)} octets, an extended community has {SIZE}")
    if data[:2] != _PREFIX:
        raise DecodeError("not_colour", f"type 0x{data[0]:02x} sub-type 0x{data[1]:02x}")
    return ColourCommunity(int.from_bytes(data[4:8], "big"), int.from_bytes(data[2:4], "big"))


def iter_communities(value: bytes) -> Iterator[bytes]:
    """The 8-octet communities of an EXTENDED_COMMUNITIES attribute value. A length that is not
    a multiple of 8 raises before anything is yielded (RFC 7606 §7.14: treat-as-withdraw)."""
    value = bytes(value)
    if len(value) % SIZE:
        raise DecodeError("bad_attribute_length", f"{len(value)} octets, not a multiple of {SIZE}")
    for i in range(0, len(value), SIZE):
        yield value[i : i + SIZE]


def colours_of(value: bytes) -> tuple[ColourCommunity, ...]:
    """The Color Extended Communities of an EXTENDED_COMMUNITIES attribute value, in wire order,
    other communities skipped; ``()`` when there is none (the route is uncoloured)."""
    return tuple(decode(c) for c in iter_communities(value) if c[:2] == _PREFIX)


def parse_text(text: str) -> ColourCommunity:
    """``0x030b000000000001`` (ExaBGP, either case) or ``color:FLAGS:COLOUR`` (glbd, Junos)."""
    if not isinstance(text, str):
        raise DecodeError("bad_text", f"expected a string, got {type(text).__name__}")
    s = text.strip()
    if len(s) > _MAX_TEXT:
        raise DecodeError("bad_text", f"{len(s)} characters, too long for a colour")
    m = _HEX.fullmatch(s)
    if m:
        return decode(bytes.fromhex(m.group(1)))
    m = _TEXT.fullmatch(s.lower())
    if m:
        flags, colour = int(m.group(1)), int(m.group(2))
        return ColourCommunity(colour, flags)
    raise DecodeError("bad_text", f"{s!r} is neither 0x030b + 12 hex digits nor color:F:C")


def from_exabgp_json(item: Any) -> ColourCommunity | None:
    """One entry of ExaBGP's ``"extended-community"`` JSON list (``{"value": N, "string": S}``,
    or the bare integer): the colour, or None when it is another community."""
    value = item.get("value") if isinstance(item, Mapping) else item
    if type(value) is not int or not 0 <= value < 1 << 64:
        raise DecodeError("bad_json", f"{value!r} is not a 64-bit unsigned integer")
    raw = value.to_bytes(SIZE, "big")
    return decode(raw) if raw[:2] == _PREFIX else None
