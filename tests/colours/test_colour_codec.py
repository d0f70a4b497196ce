"""Color Extended Community codec (RFC 9012 §4.3): golden vectors, ExaBGP 5.0.15's text and JSON
forms (checked against ExaBGP's own parser and encoder), errors, round trip and fuzz."""

from __future__ import annotations

import contextlib
import json

import pytest
from fuzzing import fuzz_codec
from hypothesis import given, settings
from hypothesis import strategies as st

from glbd.colours import colour
from glbd.colours.colour import ColourCommunity, DecodeError

# Golden vectors, written from the RFC 9012 §4.3 layout by hand: octet 0 type 0x03 (transitive
# opaque), octet 1 sub-type 0x0b (Color), octets 2-3 flags (big-endian), octets 4-7 the colour
# (big-endian). "030b000000000001" (colour 1) is also the spec's ExaBGP example.
GOLDEN: list[tuple[str, ColourCommunity]] = [
    ("030b000000000001", ColourCommunity(1)),  # 1 = 0x00000001
    ("030b000000000064", ColourCommunity(100)),  # 100 = 0x64
    ("030b0000ffffffff", ColourCommunity(0xFFFF_FFFF)),  # the largest colour
    ("030b000000000000", ColourCommunity(0)),  # 0: valid on the wire, never configured
    ("030b400000000002", ColourCommunity(2, 0x4000)),  # top flag bit set: kept, not read
    ("030b050601020304", ColourCommunity(0x01020304, 0x0506)),  # byte order of both fields
    ("030bffff00000003", ColourCommunity(3, 0xFFFF)),  # every flag bit
]

#: ExaBGP's JSON ``value`` for colour 1: the 8 octets read as one big-endian unsigned integer,
#: 0x030b000000000001 = 3 * 2**56 + 11 * 2**48 + 1 (what ExaBGP 5.0.15 printed for it)
EXABGP_VALUE_COLOUR_1 = 219269006857601025


@pytest.mark.parametrize(("hexstr", "obj"), GOLDEN)
def test_golden_decode(hexstr: str, obj: ColourCommunity) -> None:
    assert colour.decode(bytes.fromhex(hexstr)) == obj


@pytest.mark.parametrize(("hexstr", "obj"), GOLDEN)
def test_golden_encode(hexstr: str, obj: ColourCommunity) -> None:
    assert obj.encode() == bytes.fromhex(hexstr)
    assert obj.exabgp() == "0x" + hexstr


def test_value_arithmetic_of_the_exabgp_json_form() -> None:
    assert EXABGP_VALUE_COLOUR_1 == 3 * 2**56 + 11 * 2**48 + 1
    got = colour.from_exabgp_json({"value": EXABGP_VALUE_COLOUR_1, "string": ""})
    assert got == ColourCommunity(1)
    assert colour.from_exabgp_json(EXABGP_VALUE_COLOUR_1) == ColourCommunity(1)


def test_text_forms() -> None:
    c = ColourCommunity(1)
    assert c.text() == "color:0:1"
    assert c.exabgp() == "0x030b000000000001"
    assert colour.parse_text("color:0:1") == c
    assert colour.parse_text("  COLOR:0:1 ") == c
    assert colour.parse_text("0x030B000000000001") == c  # ExaBGP's own text form
    assert colour.parse_text("0X030b000000000001") == c
    assert colour.parse_text("color:16384:7") == ColourCommunity(7, 0x4000)
    assert c.to_dict() == {"colour": 1, "flags": 0, "text": "color:0:1"}
    json.dumps(c.to_dict())


def test_attribute_value_with_other_communities() -> None:
    # a route target (00 02 ...), colour 5, an encapsulation community (03 0c: same type,
    # another sub-type: not a colour), colour 1
    value = bytes.fromhex("0002fde800000001030b000000000005030c00000000000d030b000000000001")
    assert colour.colours_of(value) == (ColourCommunity(5), ColourCommunity(1))
    assert colour.colours_of(b"") == ()
    assert colour.colours_of(bytes.fromhex("0002fde800000001")) == ()
    with pytest.raises(DecodeError) as e:
        colour.colours_of(value[:-1])
    assert e.value.reason == "bad_attribute_length"


def test_exabgp_json_other_community_is_not_a_colour() -> None:
    assert colour.from_exabgp_json({"value": int("0002fde800000001", 16), "string": ""}) is None
    # 0x43 0x0b: the non-transitive opaque type with the same sub-type is not a colour
    assert colour.from_exabgp_json({"value": int("430b000000000001", 16)}) is None


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "bad_length"),
        (bytes.fromhex("030b0000000001"), "bad_length"),  # 7 octets
        (bytes.fromhex("030b00000000000100"), "bad_length"),  # 9 octets
        (bytes.fromhex("430b000000000001"), "not_colour"),  # non-transitive bit set
        (bytes.fromhex("030c000000000001"), "not_colour"),  # encapsulation sub-type
        (bytes.fromhex("000b000000000001"), "not_colour"),
    ],
)
def test_decode_errors(data: bytes, reason: str) -> None:
    with pytest.raises(DecodeError) as e:
        colour.decode(data)
    assert e.value.reason == reason
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "0x030b",
        "0x030b00000000000",  # 15 hex digits
        "0x030b0000000000011",  # 17
        "0x030c000000000001",  # not a colour
        "color:1",
        "color:0:4294967296",  # colour too large
        "color:65536:1",  # flags too large
        "color:-1:1",
        "colour:0:1",
        "color:0:\u0663",  # a digit, but not an ASCII one
        "green",
        "0x" + "0" * 10_000,
        "color:0:1\nneighbor 10.0.0.1 teardown",
    ],
)
def test_parse_text_errors(text: str) -> None:
    with pytest.raises(DecodeError) as e:
        colour.parse_text(text)
    assert "\n" not in str(e.value)
    assert len(str(e.value)) < 200


@pytest.mark.parametrize("bad", [-1, 1 << 64, "1", None, 1.0, True, {"value": "0x030b"}])
def test_exabgp_json_errors(bad: object) -> None:
    with pytest.raises(DecodeError) as e:
        colour.from_exabgp_json(bad)
    assert e.value.reason == "bad_json"


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"colour": -1}, "bad_colour"),
        ({"colour": 1 << 32}, "bad_colour"),
        ({"colour": True}, "bad_colour"),
        ({"colour": 1, "flags": 1 << 16}, "bad_flags"),
        ({"colour": 1, "flags": -1}, "bad_flags"),
    ],
)
def test_construction_errors(kwargs: dict[str, object], reason: str) -> None:
    with pytest.raises(DecodeError) as e:
        ColourCommunity(**kwargs)  # type: ignore[arg-type]
    assert e.value.reason == reason


def test_parse_text_rejects_non_strings() -> None:
    with pytest.raises(DecodeError):
        colour.parse_text(b"0x030b000000000001")  # type: ignore[arg-type]


# -- ExaBGP 5.0.15 itself: the command form it parses, the JSON it prints ----------------------


def test_exabgp_parses_the_command_form() -> None:
    from exabgp.configuration.static.parser import _extended_community

    for obj in (ColourCommunity(1), ColourCommunity(0xFFFF_FFFF, 0x4000)):
        parsed = _extended_community(obj.exabgp())
        assert bytes(parsed.pack()) == obj.encode()
        assert colour.parse_text(repr(parsed)) == obj  # its text form: 0x030B... upper case
    with pytest.raises(ValueError):  # ExaBGP 5.0.15 knows no color: keyword
        _extended_community("color:0:1")


def test_exabgp_json_of_a_received_colour() -> None:
    from exabgp.bgp.message.update.attribute.community.extended.communities import (
        ExtendedCommunities,
    )

    wire = ColourCommunity(7).encode() + ColourCommunity(1, 0x0001).encode()
    doc = json.loads(ExtendedCommunities.unpack(wire, None, None).json())
    assert [colour.from_exabgp_json(d) for d in doc] == [
        ColourCommunity(7),  # ExaBGP sorts by the octets: flags 0 before flags 1
        ColourCommunity(1, 0x0001),
    ]
    assert all(d["string"] == "" for d in doc)  # no class for it: no text in the JSON


# -- properties -------------------------------------------------------------------------------

communities = st.builds(
    ColourCommunity, st.integers(0, colour.COLOUR_MAX), st.integers(0, colour.FLAGS_MAX)
)


@given(communities)
def test_round_trip(c: ColourCommunity) -> None:
    assert colour.decode(c.encode()) == c
    assert colour.parse_text(c.exabgp()) == c
    assert colour.parse_text(c.exabgp().upper().replace("0X", "0x")) == c
    assert colour.parse_text(c.text()) == c
    assert colour.from_exabgp_json({"value": int.from_bytes(c.encode(), "big")}) == c
    assert len(c.encode()) == colour.SIZE


@given(
    st.lists(st.one_of(communities.map(ColourCommunity.encode), st.binary(min_size=8, max_size=8)))
)
def test_attribute_round_trip(parts: list[bytes]) -> None:
    got = colour.colours_of(b"".join(parts))
    assert got == tuple(colour.decode(p) for p in parts if p[:2] == b"\x03\x0b")


@given(st.binary(max_size=40))
@settings(max_examples=400)
def test_fuzz_arbitrary_bytes(data: bytes) -> None:
    for fn in (colour.decode, colour.colours_of):
        with contextlib.suppress(DecodeError):
            fn(data)


@given(st.text(max_size=80))
@settings(max_examples=400)
def test_fuzz_arbitrary_text(text: str) -> None:
    with contextlib.suppress(DecodeError):
        c = colour.parse_text(text)
        assert colour.parse_text(c.text()) == c


SEEDS = [bytes.fromhex(h) for h, _ in GOLDEN] + [b"".join(bytes.fromhex(h) for h, _ in GOLDEN)]


def _fuzz(n: int, seed: int) -> int:
    def check(_data: bytes, got: object) -> None:
        for c in got if isinstance(got, tuple) else (got,):
            assert isinstance(c, ColourCommunity)
            assert colour.decode(c.encode()) == c

    ok = 0
    for fn in (colour.decode, colour.colours_of):
        ok += fuzz_codec(fn, DecodeError, SEEDS, n, seed, random_len=24, check=check)[0]
    return ok


def test_fuzz_mutations_short() -> None:
    assert _fuzz(3000, 1) > 0


@pytest.mark.fuzz
def test_fuzz_mutations_100k() -> None:
    assert _fuzz(120_000, 2026) > 0
