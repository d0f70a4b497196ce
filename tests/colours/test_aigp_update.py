"""A received UPDATE's AIGP (RFC 7311), the mark of a coloured origination's primary copy
(docs/colours.md): golden vectors derived by hand, the same bytes through the ``receive {
packets; }`` line ExaBGP writes, ExaBGP's JSON form, and the malformed attributes, which are
discarded (the routes kept) and counted by reason in the parser's drops."""

from __future__ import annotations

import ipaddress
import json

import pytest
from colour_helpers import packets_line
from hypothesis import given
from hypothesis import strategies as st

from glbd.bgp import bgpmsg
from glbd.bgp import exabgp_api as api
from glbd.colours.colour import ColourCommunity

A = ipaddress.ip_address
N = ipaddress.ip_network

#: the attributes every vector shares, then the AIGP under test, then the NLRI:
#:
#: * ``40 01 01 00``: ORIGIN IGP;
#: * ``40 02 06 02 01 0000fde9``: AS_PATH, one AS_SEQUENCE of 4-octet AS 65001;
#: * ``40 03 04 ac100b01``: NEXT_HOP 172.16.11.1;
#: * ``c0 10 08 030b000000000001``: EXTENDED_COMMUNITIES, colour 1 (RFC 9012 §4.3);
HEAD = bytes.fromhex("4001010040020602010000fde9400304ac100b01c01008030b000000000001")
#: * ``18 0ac800``: NLRI 10.200.0.0/24.
NLRI = bytes.fromhex("180ac800")

#: AIGP (RFC 7311): flags 0x80 (optional, not transitive), type 26 = 0x1a, length 11; one AIGP
#: TLV: type 1, length 11 = 0x000b (the TLV's own 3 octets included), metric 0 (8 octets). The
#: octets ExaBGP 5.0.15 packs for ``aigp 0`` (tests/bgp/test_exabgp_api_aigp.py).
AIGP_0 = bytes.fromhex("801a0b01000b0000000000000000")


def update(aigp: bytes) -> bytes:
    """An UPDATE body (after the 19-octet header): no withdrawn routes, HEAD + ``aigp`` as its
    path attributes, then NLRI."""
    attrs = HEAD + aigp
    return b"\x00\x00" + len(attrs).to_bytes(2, "big") + attrs + NLRI


def attribute(value: bytes, flags: int = 0x80) -> bytes:
    """An AIGP attribute with ``value`` (the extended length form past 255 octets)."""
    if len(value) > 255:
        return bytes((flags | 0x10, 26)) + len(value).to_bytes(2, "big") + value
    return bytes((flags, 26, len(value))) + value


def tlv(kind: int, value: bytes, length: int | None = None) -> bytes:
    """One AIGP TLV; ``length`` (default: the true one, 3 + the value) counts the whole TLV."""
    n = 3 + len(value) if length is None else length
    return bytes((kind,)) + n.to_bytes(2, "big") + value


def metric(m: int) -> bytes:
    return m.to_bytes(8, "big")


def test_the_hand_derived_bytes_add_up() -> None:
    assert attribute(tlv(1, metric(0))) == AIGP_0
    body = update(AIGP_0)
    assert body[2:4] == (4 + 9 + 7 + 11 + 14).to_bytes(2, "big")
    assert body[-4:] == NLRI


def test_the_primary_copys_aigp_0_decodes_with_the_route_and_its_colour() -> None:
    u = bgpmsg.decode_update(update(AIGP_0))
    assert (u.aigp, u.aigp_error) == (0, "")
    assert u.colours == (ColourCommunity(1),)
    assert u.announced == [
        bgpmsg.RouteAnnounced("ipv4 unicast", A("172.16.11.1"), N("10.200.0.0/24"))
    ]
    assert u.treat_as_withdraw == ""


def test_an_update_without_aigp_has_none() -> None:
    u = bgpmsg.decode_update(update(b""))
    assert (u.aigp, u.aigp_error) == (None, "")


@pytest.mark.parametrize(
    ("value", "want"),
    [
        (tlv(1, metric(0)), 0),
        (tlv(1, metric(2**64 - 1)), 2**64 - 1),
        # an unknown TLV type is skipped, before or after the AIGP TLV
        (tlv(7, b"\xaa\xbb") + tlv(1, metric(5)), 5),
        (tlv(1, metric(5)) + tlv(200, b""), 5),
        # several AIGP TLVs: the first one counts
        (tlv(1, metric(9)) + tlv(1, metric(3)), 9),
        # a long one: the extended length form
        (tlv(9, bytes(300)) + tlv(1, metric(42)), 42),
    ],
    ids=["zero", "max", "unknown-first", "unknown-after", "two-aigp-tlvs", "extended-length"],
)
def test_the_metric_of_well_formed_tlvs(value: bytes, want: int) -> None:
    assert bgpmsg.decode_aigp(value) == (want, "")
    u = bgpmsg.decode_update(update(attribute(value)))
    assert (u.aigp, u.aigp_error) == (want, "") and u.announced


@pytest.mark.parametrize(
    ("value", "flags", "reason"),
    [
        # an AIGP TLV of 12 octets (and one of 10): the metric is 8 octets (RFC 7311)
        (tlv(1, metric(1) + b"\x00"), 0x80, "metric_length"),
        (tlv(1, metric(1)[:7]), 0x80, "metric_length"),
        # a TLV that claims more than the attribute holds
        (tlv(1, metric(1), length=12), 0x80, "tlv_overrun"),
        (tlv(1, metric(1)) + tlv(5, b"\x01", length=9), 0x80, "tlv_overrun"),
        # a TLV length that does not even cover its own header
        (tlv(1, metric(1)) + tlv(5, b"", length=2), 0x80, "tlv_too_short"),
        # octets left after the last TLV, fewer than a TLV header
        (tlv(1, metric(1)) + b"\x01\x00", 0x80, "tlv_truncated"),
        # no AIGP TLV at all, or nothing
        (tlv(4, b"\x00\x00"), 0x80, "no_metric"),
        (b"", 0x80, "no_metric"),
        # transitive (0xc0) or well-known (0x40): not AIGP's flags
        (tlv(1, metric(1)), 0xC0, "bad_flags"),
        (tlv(1, metric(1)), 0x40, "bad_flags"),
    ],
)
def test_a_malformed_aigp_is_discarded_and_the_route_kept(
    value: bytes, flags: int, reason: str
) -> None:
    assert bgpmsg.decode_aigp(value, flags) == (None, reason)
    u = bgpmsg.decode_update(update(attribute(value, flags)))
    assert (u.aigp, u.aigp_error) == (None, reason)
    assert u.treat_as_withdraw == "" and u.withdrawn == []
    assert u.announced and u.colours == (ColourCommunity(1),)


#: an AIGP attribute value: well-formed AIGP TLVs, TLVs of other types, and now and then a TLV
#: whose length is off, or stray octets
PIECES = st.one_of(
    st.integers(0, 2**64 - 1).map(lambda m: tlv(1, metric(m))),
    st.tuples(st.sampled_from([2, 200]), st.binary(max_size=6)).map(lambda kv: tlv(*kv)),
    st.tuples(st.sampled_from([1, 2]), st.binary(max_size=12), st.integers(-4, 2)).map(
        lambda kvd: tlv(kvd[0], kvd[1], max(0, 3 + len(kvd[1]) + kvd[2]))
    ),
    st.binary(min_size=1, max_size=3),
)


@given(st.lists(PIECES, max_size=4))
def test_glbd_and_exabgp_agree_on_every_tlv_sequence(pieces: list[bytes]) -> None:
    """ExaBGP 5.0.15's own AIGP parser (on a session with AIGP enabled) refuses exactly what
    glbd finds malformed, and reads the same metric from the rest."""
    from types import SimpleNamespace

    from exabgp.bgp.message.notification import Notify
    from exabgp.bgp.message.update.attribute.aigp import AIGP

    value = b"".join(pieces)
    got = bgpmsg.decode_aigp(value)
    try:
        theirs = AIGP.unpack(value, None, SimpleNamespace(aigp=True))
    except Notify:
        assert got[0] is None and got[1] != "", (value.hex(), got)
        return
    assert got == (int.from_bytes(theirs.aigp[3:11], "big"), ""), value.hex()


def test_the_partial_and_extended_length_bits_are_not_aigps_concern() -> None:
    value = tlv(1, metric(6))
    long_form = bytes((0x90, 26)) + len(value).to_bytes(2, "big") + value
    assert bgpmsg.decode_update(update(long_form)).aigp == 6
    assert bgpmsg.decode_update(update(attribute(value, flags=0xA0))).aigp == 6


def test_a_second_aigp_attribute_is_ignored() -> None:
    """RFC 7606 §3(g): of a repeated attribute, all but the first are discarded."""
    twice = attribute(tlv(1, metric(1))) + attribute(tlv(1, metric(2)))
    assert bgpmsg.decode_update(update(twice)).aigp == 1


def test_the_raw_line_carries_the_aigp_and_a_malformed_one_is_a_counted_drop() -> None:
    parser = api.ApiParser()
    ev = parser.feed(packets_line(update(AIGP_0)))
    assert isinstance(ev, api.UpdateEvent)
    assert ev.attributes.aigp == 0 and ev.attributes.to_dict()["aigp"] == 0
    assert ev.aigp_error == "" and not parser.dropped

    for value, reason in (
        (tlv(1, metric(1), length=12), "tlv_overrun"),
        (tlv(1, metric(1) + b"\x00"), "metric_length"),
        (tlv(1, metric(1), length=12), "tlv_overrun"),
    ):
        ev = parser.feed(packets_line(update(attribute(value))))
        assert isinstance(ev, api.UpdateEvent)
        assert ev.attributes.aigp is None and ev.aigp_error == reason
        assert len(ev.announced) == 1  # the route stays, without its AIGP
    assert parser.dropped == {"aigp_malformed_tlv_overrun": 2, "aigp_malformed_metric_length": 1}


def test_exabgps_json_form_gives_the_same_metric() -> None:
    """ExaBGP 5.0.15 prints AIGP in its JSON as ``"aigp": "0x"`` + 16 hex digits."""
    doc = json.loads(packets_line(update(AIGP_0)))
    doc["neighbor"]["message"] = {
        "update": {
            "attribute": {"origin": "igp", "aigp": "0x0000000000000007"},
            "announce": {"ipv4 unicast": {"172.16.11.1": ["10.200.0.0/24"]}},
        }
    }
    ev = api.decode(json.dumps(doc))
    assert isinstance(ev, api.UpdateEvent) and ev.attributes.aigp == 7
    doc["neighbor"]["message"]["update"]["attribute"]["aigp"] = "0xnothex"
    parser = api.ApiParser()
    assert parser.feed(json.dumps(doc)) is None
    assert parser.dropped == {"bad_aigp": 1}
