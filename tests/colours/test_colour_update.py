"""A received UPDATE's colours (glbd.bgp.bgpmsg, glbd.bgp.exabgp_api): a golden vector
derived by hand from RFC 4271 §4.3, RFC 4360 §2 and RFC 9012 §4.3, the same bytes through the
``receive { packets; }`` line ExaBGP writes, its JSON form, and the malformed attribute."""

from __future__ import annotations

import ipaddress
import json

from colour_helpers import packets_line

from glbd.bgp import bgpmsg
from glbd.bgp import exabgp_api as api
from glbd.colours.colour import ColourCommunity

A = ipaddress.ip_address
N = ipaddress.ip_network

#: An UPDATE body (after the 19-octet header) announcing 10.200.0.0/24 from AS 65001 with colour
#: 1, a route target, and colour 100 with flags 5. Octet by octet:
#:
#: * ``0000``: Withdrawn Routes Length 0 (RFC 4271 §4.3);
#: * ``002f``: Total Path Attribute Length 47 = 4 + 9 + 7 + 27 (the four attributes below);
#: * ``40 01 01 00``: ORIGIN (flags 0x40 well-known transitive, type 1, length 1) IGP;
#: * ``40 02 06 02 01 0000fde9``: AS_PATH (type 2, length 6): one AS_SEQUENCE (2) of one
#:   4-octet AS, 65001 = 0xfde9;
#: * ``40 03 04 ac100b01``: NEXT_HOP (type 3, length 4) 172.16.11.1;
#: * ``c0 10 18``: EXTENDED_COMMUNITIES (flags 0xc0 optional transitive, type 16, RFC 4360 §2),
#:   length 24: three 8-octet communities:
#:
#:   * ``03 0b 0000 00000001``: type 0x03 transitive opaque, sub-type 0x0b Color (RFC 9012
#:     §4.3), flags 0, colour 1 (the form ExaBGP itself sends, docs/colours.md);
#:   * ``00 02 fde9 00000064``: type 0x00 sub-type 0x02, a route target 65001:100: not a
#:     colour, skipped;
#:   * ``03 0b 0005 00000064``: Color, flags 5 (kept, never read), colour 100;
#:
#: * ``18 0ac800``: NLRI 10.200.0.0/24 (length 24 bits, 3 octets).
GOLDEN = bytes.fromhex(
    "0000"
    "002f"
    "40010100"
    "40020602010000fde9"
    "400304ac100b01"
    "c01018"
    "030b000000000001"
    "0002fde900000064"
    "030b000500000064"
    "180ac800"
)
COLOURS = (ColourCommunity(1), ColourCommunity(100, flags=5))


def test_the_hand_derived_bytes_add_up() -> None:
    assert len(GOLDEN) == 2 + 2 + 47 + 4
    # the two lengths, ORIGIN (4), then AS_PATH at octet 8; NEXT_HOP (7) ends at octet 24
    assert GOLDEN[8:17] == bytes.fromhex("40020602010000fde9")
    assert GOLDEN[24:27] == bytes.fromhex("c01018")
    assert GOLDEN[51:] == bytes.fromhex("180ac800")


def test_the_update_carries_its_colours_in_wire_order() -> None:
    u = bgpmsg.decode_update(GOLDEN)
    assert u.colours == COLOURS
    assert u.treat_as_withdraw == ""
    assert u.origin == "igp" and u.as_path == (65001,) and u.as_path_length == 1
    assert u.announced == [
        bgpmsg.RouteAnnounced("ipv4 unicast", A("172.16.11.1"), N("10.200.0.0/24"))
    ]


def test_an_update_without_the_attribute_is_uncoloured() -> None:
    body = bytearray(GOLDEN[:24]) + GOLDEN[51:]  # the attributes before it, then the NLRI
    body[2:4] = (47 - 27).to_bytes(2, "big")
    u = bgpmsg.decode_update(bytes(body))
    assert u.colours == () and u.announced and u.treat_as_withdraw == ""
    # extended communities without a colour: uncoloured too
    rt_only = GOLDEN.replace(
        bytes.fromhex("c01018030b000000000001"), bytes.fromhex("c01008")
    ).replace(bytes.fromhex("030b000500000064"), b"")
    rt_only = rt_only[:2] + (47 - 16).to_bytes(2, "big") + rt_only[4:]
    u = bgpmsg.decode_update(rt_only)
    assert u.colours == () and u.announced


def test_a_length_not_a_multiple_of_8_withdraws_the_routes() -> None:
    """RFC 7606 §7.14: an EXTENDED_COMMUNITIES whose length is not a multiple of 8 is
    treat-as-withdraw."""
    body = bytearray(GOLDEN)
    i = body.index(bytes.fromhex("c01018"))
    body[i + 2] = 23  # the attribute claims 23 octets: its value ends one early
    body[i + 3 + 23 :] = body[i + 3 + 24 :]  # and the NLRI follows at once
    body[2:4] = (47 - 1).to_bytes(2, "big")
    u = bgpmsg.decode_update(bytes(body))
    assert u.treat_as_withdraw == "extended_communities"
    assert u.announced == [] and u.withdrawn == [("ipv4 unicast", N("10.200.0.0/24"))]
    parser = api.ApiParser()
    ev = parser.feed(packets_line(bytes(body)))
    assert isinstance(ev, api.UpdateEvent) and ev.announced == ()
    assert parser.dropped["treat_as_withdraw_extended_communities"] == 1


def test_the_raw_line_and_the_json_form_give_the_same_attributes() -> None:
    raw = api.decode(packets_line(GOLDEN))
    assert isinstance(raw, api.UpdateEvent)
    assert raw.attributes.colours == COLOURS
    assert raw.attributes.to_dict()["colours"] == ["color:0:1", "color:5:100"]
    # ExaBGP's parsed JSON of the same UPDATE: every extended community under
    # "extended-community", sorted by octets, a colour without text (docs/colours.md)
    parsed = {
        "exabgp": "5.0.0",
        "type": "update",
        "neighbor": {
            "address": {"local": "172.16.11.2", "peer": "172.16.11.1"},
            "asn": {"local": 65100, "peer": 65001},
            "direction": "receive",
            "message": {
                "update": {
                    "attribute": {
                        "origin": "igp",
                        "as-path": {"0": {"element": "as-sequence", "value": [65001]}},
                        "extended-community": [
                            {"value": int("0002fde900000064", 16), "string": "target:65001:100"},
                            {"value": int("030b000000000001", 16), "string": ""},
                            {"value": int("030b000500000064", 16), "string": ""},
                        ],
                    },
                    "announce": {"ipv4 unicast": {"172.16.11.1": ["10.200.0.0/24"]}},
                }
            },
        },
    }
    ev = api.decode(json.dumps(parsed))
    assert isinstance(ev, api.UpdateEvent)
    assert ev.attributes.colours == COLOURS
    assert ev.announced == raw.announced


def test_exabgp_packs_the_same_attribute() -> None:
    """ExaBGP 5.0.15's own encoder, given the command form glbd writes, packs the octets of
    the golden vector's attribute (colours only: glbd sends no other extended community)."""
    from exabgp.bgp.message.update.attribute.community.extended.communities import (
        ExtendedCommunities,
    )
    from exabgp.configuration.static.parser import _extended_community

    attr = ExtendedCommunities()
    for c in COLOURS:
        attr.add(_extended_community(c.exabgp()))
    packed = bytes(attr.pack())
    assert packed == bytes.fromhex("c01010030b000000000001030b000500000064")
    assert (
        bgpmsg.decode_update(
            bytes.fromhex("0000")
            + (4 + len(packed)).to_bytes(2, "big")
            + bytes.fromhex("40010100")
            + packed
        ).colours
        == COLOURS
    )


def test_a_json_extended_community_that_is_not_64_bits_is_a_counted_drop() -> None:
    doc = json.loads(packets_line(GOLDEN))
    n = doc["neighbor"]
    n["message"] = {
        "update": {
            "attribute": {
                "origin": "igp",
                "extended-community": [{"value": "0x030b", "string": ""}],
            },
            "announce": {"ipv4 unicast": {"172.16.11.1": ["10.200.0.0/24"]}},
        }
    }
    parser = api.ApiParser()
    assert parser.feed(json.dumps(doc)) is None
    assert parser.dropped["bad_extended_community"] == 1
