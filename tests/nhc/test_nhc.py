"""NHC/NNHN/BGPID codec: golden vectors (FRR 10.7 wire captures, and tests/vectors/frr10_nnhn.json
when present), error matrix, round trip and fuzz."""

from __future__ import annotations

import contextlib
import ipaddress
import json
from pathlib import Path

import pytest
from fuzzing import fuzz_codec
from hypothesis import given, settings
from hypothesis import strategies as st

from glbd.bgp import nhc
from glbd.bgp.nhc import BgpId, DecodeError, NextHopMatch, Nhc, NhcAttribute, Nnhn, RawTlv

V4 = ipaddress.IPv4Address
V6 = ipaddress.IPv6Address
VECTORS = Path(__file__).resolve().parent.parent / "vectors"


def h(s: str) -> bytes:
    return nhc.parse_hex(s)


# FRR 10.7.1 spine1 -> leaf1 (a capture): flags 0xD0, NH 0.0.0.0, NNHN [own, leaf2, leaf3].
FRR10_SPINE = "d0 27 0018 0001 01 04 00000000 0002 000c 0a00000b 0a000002 0a000003"
FRR10_SPINE_OBJ = NhcAttribute(
    0xD0, Nhc(1, 1, V4("0.0.0.0"), Nnhn(V4("10.0.0.11"), (V4("10.0.0.2"), V4("10.0.0.3"))))
)

GOLDEN: list[tuple[str, NhcAttribute]] = [
    (FRR10_SPINE, FRR10_SPINE_OBJ),
    # a worked example: 0xC0, real next hop.
    (
        "c0 27 18 0001 01 04 ac100001 0002 000c 0a00000b 0a000102 0a000103",
        NhcAttribute(
            0xC0,
            Nhc(1, 1, V4("172.16.0.1"), Nnhn(V4("10.0.0.11"), (V4("10.0.1.2"), V4("10.0.1.3")))),
        ),
    ),
    # FRR leaf2 originated route: BGPID TLV, 4-byte form.
    (
        "d0 27 0010 0001 01 04 00000000 0003 0004 0a000002",
        NhcAttribute(0xD0, Nhc(1, 1, V4("0.0.0.0"), bgpid=BgpId(V4("10.0.0.2")))),
    ),
    # IPv6 global next hop, NNHN + 8-byte BGPID (draft form) + opaque TLVs around them.
    (
        "c0 27 3a 0002 01 10 20010db8000000000000000000000001"
        " 0001 0000 0002 000c 0a000001 0a000002 0a000003 0003 0008 0a000001 0000fde8"
        " 0099 0002 abcd",
        NhcAttribute(
            0xC0,
            Nhc(
                2,
                1,
                V6("2001:db8::1"),
                Nnhn(V4("10.0.0.1"), (V4("10.0.0.2"), V4("10.0.0.3"))),
                BgpId(V4("10.0.0.1"), 65000),
                (RawTlv(1, b""), RawTlv(0x99, b"\xab\xcd")),
            ),
        ),
    ),
]


@pytest.mark.parametrize(("hexstr", "obj"), GOLDEN)
def test_golden_decode(hexstr: str, obj: NhcAttribute) -> None:
    assert nhc.decode_attribute(h(hexstr)) == obj
    assert nhc.decode(h(hexstr)) == obj


@pytest.mark.parametrize(("hexstr", "obj"), GOLDEN)
def test_golden_encode(hexstr: str, obj: NhcAttribute) -> None:
    assert obj.encode() == h(hexstr)


def test_frr_capture_semantics() -> None:
    attr = nhc.decode_attribute(h(FRR10_SPINE))
    assert attr.nhc.next_hop_unspecified
    assert attr.nhc.next_hop_match("172.16.11.2") is NextHopMatch.UNSPECIFIED
    assert attr.nhc.nnhn is not None
    assert str(attr.nhc.nnhn.nh_bgp_id) == "10.0.0.11"
    assert attr.to_dict()["value"]["nnhn"] == {
        "nh_bgp_id": "10.0.0.11",
        "nnh_ids": ["10.0.0.2", "10.0.0.3"],
    }
    json.dumps(attr.to_dict())


def _path_attributes(update: bytes) -> dict[int, bytes]:
    """Whole path attributes of a BGP UPDATE (marker included), by type code."""
    body = update[19:]
    wlen = int.from_bytes(body[0:2], "big")
    plen = int.from_bytes(body[2 + wlen : 4 + wlen], "big")
    attrs = body[4 + wlen : 4 + wlen + plen]
    out: dict[int, bytes] = {}
    off = 0
    while off < len(attrs):
        flags, code = attrs[off], attrs[off + 1]
        if flags & 0x10:
            length, hdr = int.from_bytes(attrs[off + 2 : off + 4], "big"), 4
        else:
            length, hdr = attrs[off + 2], 3
        out[code] = attrs[off : off + hdr + length]
        off += hdr + length
    return out


def test_frr10_capture_vector() -> None:
    """The lab's real FRR 10.7.1 capture (glbdlab.capture -> tests/vectors/frr10_nnhn.json)."""
    doc = json.loads((VECTORS / "frr10_nnhn.json").read_text())
    attr = nhc.decode_attribute(bytes.fromhex(doc["attribute_hex"]))
    assert attr.flags == int(doc["attribute_flags"], 16) == 0xD0
    value = attr.nhc
    assert value == nhc.decode_value(bytes.fromhex(doc["value_hex"]))
    assert (value.afi, value.safi) == (doc["nhc_afi"], doc["nhc_safi"])
    assert str(value.next_hop) == doc["nhc_next_hop"] == "0.0.0.0"
    assert value.nnhn is not None
    assert str(value.nnhn.nh_bgp_id) == doc["next_hop_bgp_id"]
    assert [str(i) for i in value.nnhn.nnh_ids] == sorted(doc["nnh_ids"], key=V4)
    assert [str(i) for i in value.nnhn.nnh_ids] == doc["leaf1_json_next_next_hop_nodes"]
    # the same attribute, found by walking the captured UPDATE
    assert _path_attributes(bytes.fromhex(doc["update_hex"]))[39] == attr.encode()
    # byte-exact re-encode of FRR's layout
    assert nhc.NhcAttribute(0xD0, value).encode().hex() == doc["attribute_hex"]
    for other in doc["other_nhc"]:
        o = nhc.decode_attribute(bytes.fromhex(other["attribute_hex"])).nhc
        codes = [t["code"] for t in other["tlvs"]]
        if 3 in codes:  # FRR's 4-byte BGPID on its own network routes
            assert o.bgpid is not None and o.bgpid.asn is None
            tlv = next(t for t in other["tlvs"] if t["code"] == 3)
            assert o.bgpid.encode_value().hex() == tlv["value_hex"]


def test_bare_value_as_exabgp_shows_it() -> None:
    # ExaBGP -> FRR weighted ECMP case: real NH, 4 NNHN.
    v = nhc.decode(h("0x00010104ac101502000200140a0000630a0000040a0000050a0000060a000007"))
    assert isinstance(v, Nhc)
    assert v.next_hop_match("172.16.21.2") is NextHopMatch.MATCH
    assert v.next_hop_match("172.16.21.9") is NextHopMatch.MISMATCH
    assert v.nnhn is not None and len(v.nnhn.nnh_ids) == 4


def test_first_nnhn_only() -> None:
    # FRR 10.7 leaf relaying: its own NNHN then the stale downstream one.
    v = nhc.decode(
        h(
            "d0 27 0028 0001 01 04 00000000 0002 000c 0a000001 0a00000b 0a000063"
            " 0002 000c 0a00000b 0a000002 0a000003"
        )
    )
    assert isinstance(v, NhcAttribute)
    assert v.nhc.nnhn == Nnhn(V4("10.0.0.1"), (V4("10.0.0.11"), V4("10.0.0.99")))
    assert v.nhc.discarded == ("nnhn_extra_instance",)


def test_nnhn_any_order_and_duplicates() -> None:
    v = nhc.decode_value(
        h("0001 01 04 00000000 0002 0014 0a000001 0a000003 0a000002 0a000003 0a000002")
    )
    assert v.nnhn is not None
    assert v.nnhn.nnh_ids == (V4("10.0.0.2"), V4("10.0.0.3"))


def test_encode_sorted_unique_and_flags() -> None:
    n = Nhc.for_next_hop(
        "172.16.0.1", nnhn=Nnhn(V4("1.1.1.1"), (V4("9.0.0.1"), V4("2.0.0.1"), V4("9.0.0.1")))
    )
    assert (
        n.encode_value().hex()
        == "0001010" + "4ac100001" + "0002000c" + "01010101" + "02000001" + "09000001"
    )
    assert n.encode()[0] == 0xC0
    assert n.encode(extended=True)[:4].hex() == "d0270018"
    big = Nhc.for_next_hop(
        "10.0.0.1", nnhn=Nnhn(V4("1.1.1.1"), tuple(V4(i + 1) for i in range(70)))
    )
    enc = big.encode()
    assert enc[0] == 0xD0 and nhc.decode_attribute(enc).nhc == big
    with pytest.raises(ValueError):
        NhcAttribute(0xC0, big).encode()
    with pytest.raises(ValueError):
        Nnhn(V4("1.1.1.1"), ())


@pytest.mark.parametrize(
    ("value_hex", "discarded", "has_nnhn"),
    [
        ("0001 01 04 00000000 0002 000a 0a0000630a0000020a00", ("nnhn_bad_length",), False),
        ("0001 01 04 00000000 0002 0004 0a000063", ("nnhn_bad_length",), False),
        ("0001 01 04 00000000 0002 0000", ("nnhn_bad_length",), False),
        ("0001 01 04 00000000 0003 0004 00000000", ("bgpid_zero",), False),
        ("0001 01 04 00000000 0003 0005 0a00000100", ("bgpid_bad_length",), False),
        # a bad first NNHN is not replaced by a later one
        (
            "0001 01 04 00000000 0002 0004 0a000063 0002 0008 0a000063 0a000001",
            ("nnhn_bad_length", "nnhn_extra_instance"),
            False,
        ),
        # a bad BGPID does not take the NNHN with it
        (
            "0001 01 04 00000000 0002 0008 0a000063 0a000001 0003 0002 0a00",
            ("bgpid_bad_length",),
            True,
        ),
    ],
)
def test_bad_characteristic_discards_only_itself(
    value_hex: str, discarded: tuple[str, ...], has_nnhn: bool
) -> None:
    v = nhc.decode_value(h(value_hex))
    assert v.discarded == discarded
    assert (v.nnhn is not None) is has_nnhn


# Attribute-level errors (FRR's discard matrix): attribute discard, named.
@pytest.mark.parametrize(
    ("hexstr", "reason"),
    [
        ("c0 27 0e 0001 01 04 00000000 0002 000c 0a00", "tlv_overflow"),
        ("c0 27 0a 0001 01 04 00000000 0002", "trailing_bytes"),
        ("c0 27 0c 0001 01 03 000000 0002 0000 00", "bad_next_hop_length"),
        ("c0 27 0c 0003 01 04 00000000 0002 0000", "unknown_afi"),
        ("c0 27 03 0001 01", "too_short"),
        ("c0 27 06 0001 01 04 0000", "truncated_next_hop"),
        ("80 27 08 0001 01 04 00000000", "bad_flags"),
        ("40 27 08 0001 01 04 00000000", "bad_flags"),
        ("c0 28 08 0001 01 04 00000000", "wrong_type"),
        ("c0 27 09 0001 01 04 00000000", "length_mismatch"),
        ("d0 27 00", "too_short"),
        ("d0 27 0009 0001 01 04 00000000", "length_mismatch"),
        # FRR 8.4 forwarding ExaBGP's opaque example with Partial set
        ("e0 27 0c 0002000c0a0000010a000002", "bad_next_hop_length"),
        ("", "too_short"),
    ],
)
def test_attribute_errors(hexstr: str, reason: str) -> None:
    with pytest.raises(DecodeError) as ei:
        nhc.decode(h(hexstr))
    assert ei.value.reason == reason
    assert ei.value.action == "attribute_discard"


def test_partial_flag_accepted() -> None:
    a = nhc.decode_attribute(h("e0" + FRR10_SPINE.replace(" ", "")[2:].replace("0018", "18", 1)))
    assert a.partial and a.nhc == FRR10_SPINE_OBJ.nhc


def test_parse_hex_forms() -> None:
    assert nhc.parse_hex("0x0a:0B 0c\n0d") == b"\x0a\x0b\x0c\x0d"
    assert nhc.parse_hex("0x27 0xd0") == b"\x27\xd0"
    with pytest.raises(DecodeError) as ei:
        nhc.parse_hex("0a0")
    assert ei.value.reason == "bad_hex"


# -- properties ---------------------------------------------------------------------------

ipv4s = st.integers(0, 2**32 - 1).map(V4)
nonzero_ipv4s = st.integers(1, 2**32 - 1).map(V4)
next_hops = st.one_of(ipv4s, st.integers(0, 2**128 - 1).map(V6))
nnhns = st.builds(Nnhn, nonzero_ipv4s, st.lists(nonzero_ipv4s, min_size=1, max_size=20).map(tuple))
link_locals = st.integers(0, 2**64 - 1).map(lambda i: V6(int(V6("fe80::")) + i))
bgpids = st.builds(BgpId, nonzero_ipv4s, st.one_of(st.none(), st.integers(0, 2**32 - 1)))
raws = st.builds(
    RawTlv,
    st.integers(0, 0xFFFF).filter(lambda c: c not in (2, 3)),
    st.binary(max_size=20),
)
nhcs = st.builds(
    lambda nh, safi, nn, bid, other, ll: Nhc(
        1 if nh.version == 4 else 2,
        safi,
        nh,
        nn,
        bid,
        tuple(other),
        link_local=ll if nh.version == 6 else None,
    ),
    next_hops,
    st.integers(0, 255),
    st.one_of(st.none(), nnhns),
    st.one_of(st.none(), bgpids),
    st.lists(raws, max_size=4),
    st.one_of(st.none(), link_locals),
)


@given(nhcs, st.booleans())
def test_round_trip(value: Nhc, extended: bool) -> None:
    assert nhc.decode_value(value.encode_value()) == value
    attr = nhc.decode_attribute(value.encode(extended=extended))
    assert attr.nhc == value and attr.nhc.discarded == ()
    json.dumps(attr.to_dict())


SEEDS = [h(x) for x, _ in GOLDEN] + [FRR10_SPINE_OBJ.nhc.encode_value()]


def _fuzz(n: int, seed: int) -> int:
    return fuzz_codec(
        nhc.decode, DecodeError, SEEDS, n, seed, random_len=40, check=lambda _d, got: got.to_dict()
    )[0]


@given(st.binary(max_size=64))
@settings(max_examples=300)
def test_fuzz_arbitrary_bytes(data: bytes) -> None:
    for fn in (nhc.decode, nhc.decode_value, nhc.decode_attribute):
        with contextlib.suppress(DecodeError):
            fn(data)


def test_fuzz_mutations_short() -> None:
    assert _fuzz(3000, 1) > 0


@pytest.mark.fuzz
def test_fuzz_mutations_100k() -> None:
    assert _fuzz(120_000, 2026) > 0
