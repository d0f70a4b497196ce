"""Raw BGP message bodies (glbd.bgp.bgpmsg): held to ExaBGP's own JSON of the same bytes,
recorded from ExaBGP 5.0.15 with ``receive { consolidate; }`` peering with FRR 10.7
(tests/bgp/record_raw_vectors.py), plus the cases FRR did not send, and fuzzing."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from glbd.bgp import bgpmsg
from glbd.bgp import exabgp_api as api

VECTORS = Path(__file__).resolve().parent.parent / "vectors" / "exabgp5_frr10_consolidated.jsonl"
LINES = VECTORS.read_text().splitlines()
CATEGORY = {"open": 1, "update": 2, "notification": 3}
A = ipaddress.ip_address
N = ipaddress.ip_network


def packets_line(line: str) -> str:
    """The line ExaBGP writes for the same message with ``receive { packets; }``."""
    doc = json.loads(line)
    n = doc["neighbor"]
    for key in ("message", "open", "notification"):
        n.pop(key, None)
    n["message"] = {
        "category": CATEGORY[doc["type"]],
        "header": doc.pop("header"),
        "body": doc.pop("body"),
    }
    return json.dumps(doc)


def test_the_recording_covers_what_glbd_reads() -> None:
    kinds = [json.loads(line)["type"] for line in LINES]
    assert kinds.count("open") == 2 and kinds.count("notification") == 2
    evs = [api.decode(line) for line in LINES]
    ups = [e for e in evs if isinstance(e, api.UpdateEvent)]
    assert {e.eor for e in ups} >= {"ipv4 unicast", "ipv6 unicast"}
    assert any(e.withdrawn for e in ups) and any(e.attributes.communities for e in ups)
    # IPv4 over an IPv6 next hop, and a 32-byte next hop (global + link-local)
    assert any(
        a.family == "ipv4 unicast" and a.next_hop and a.next_hop.version == 6
        for e in ups
        for a in e.announced
    )
    assert any(a.next_hop and a.next_hop.is_link_local for e in ups for a in e.announced)


@pytest.mark.parametrize("i", range(len(LINES)))
def test_raw_decodes_as_exabgp_parsed_it(i: int) -> None:
    line = LINES[i]
    assert api.decode(packets_line(line)) == api.decode(line)


def test_the_parser_reads_a_peers_as_paths_by_its_open() -> None:
    """A peer without the 4-octet AS capability: its AS_PATH is read 2 octets wide."""
    p = api.ApiParser()
    opn = json.loads(packets_line(LINES[0]))
    body = bytes.fromhex(opn["neighbor"]["message"]["body"][2:])
    no_as4 = _strip_capability(body, 65)
    opn["neighbor"]["message"]["body"] = "0x" + no_as4.hex()
    ev = p.feed(json.dumps(opn))
    assert isinstance(ev, api.OpenEvent) and not ev.asn4 and ev.asn == 65100
    upd = json.loads(packets_line(LINES[0]))
    upd["type"] = "update"
    upd["neighbor"]["message"] = {
        "category": 2,
        "header": "",
        "body": "0x"
        + update(
            attrs=[
                origin(0),
                attr(0x40, 2, bytes([2, 2]) + struct.pack("!HH", 65100, 23456)),
                attr(0xC0, 17, bytes([2, 2]) + struct.pack("!II", 65100, 4_200_000_001)),
                attr(0x40, 3, bytes([172, 16, 11, 2])),
            ],
            nlri=b"\x18\x0a\xc8\x00",
        ).hex(),
    }
    ev = p.feed(json.dumps(upd))
    assert isinstance(ev, api.UpdateEvent)
    assert ev.attributes.as_path == (65100, 4_200_000_001) and ev.attributes.as_path_length == 2


# -- hand-built messages --------------------------------------------------------------------


def attr(flags: int, code: int, value: bytes) -> bytes:
    if len(value) > 255:
        return bytes([flags | 0x10, code]) + struct.pack("!H", len(value)) + value
    return bytes([flags, code, len(value)]) + value


def origin(v: int) -> bytes:
    return attr(0x40, 1, bytes([v]))


def as_path(*segments: tuple[int, list[int]]) -> bytes:
    out = b""
    for stype, asns in segments:
        out += bytes([stype, len(asns)]) + struct.pack(f"!{len(asns)}I", *asns)
    return attr(0x40, 2, out)


def nlri(prefix: str) -> bytes:
    net = N(prefix)
    n = (net.prefixlen + 7) // 8
    return bytes([net.prefixlen]) + net.network_address.packed[:n]


def update(withdrawn: bytes = b"", attrs: list[bytes] | None = None, nlri: bytes = b"") -> bytes:
    a = b"".join(attrs or [])
    return struct.pack("!H", len(withdrawn)) + withdrawn + struct.pack("!H", len(a)) + a + nlri


NH = attr(0x40, 3, bytes([192, 0, 2, 1]))


def test_as_sets_confederations_and_path_length() -> None:
    u = bgpmsg.decode_update(
        update(
            attrs=[origin(2), as_path((2, [1, 2]), (1, [3, 4, 5]), (3, [9])), NH],
            nlri=nlri("10.0.0.0/8"),
        )
    )
    assert u.origin == "incomplete" and u.as_path == (1, 2, 3, 4, 5, 9)
    assert u.as_path_length == 3  # two in sequence, a set counts 1, a confederation 0


def test_a_malformed_well_known_attribute_withdraws_the_routes() -> None:
    body = update(
        attrs=[origin(7), as_path((2, [1])), NH], nlri=nlri("10.0.0.0/8") + nlri("10.1.0.0/16")
    )
    u = bgpmsg.decode_update(body)
    assert u.treat_as_withdraw == "origin" and not u.announced
    assert [str(p) for _f, p in u.withdrawn] == ["10.0.0.0/8", "10.1.0.0/16"]
    for bad in (
        attr(0x40, 3, b"\x01\x02"),
        attr(0x80, 4, b"\x00"),
        attr(0xC0, 8, b"\x00" * 5),
        attr(0x40, 2, b"\x02\x05\x00\x00"),
    ):
        u = bgpmsg.decode_update(update(attrs=[origin(0), bad], nlri=nlri("10.0.0.0/8")))
        assert u.treat_as_withdraw and not u.announced and len(u.withdrawn) == 1


def test_end_of_rib_markers() -> None:
    assert bgpmsg.decode_update(b"\0\0\0\0").eor == "ipv4 unicast"
    mp = attr(0x80, 15, struct.pack("!HB", 2, 1))
    assert bgpmsg.decode_update(update(attrs=[mp])).eor == "ipv6 unicast"
    # an empty MP_UNREACH_NLRI next to other attributes is not one
    assert bgpmsg.decode_update(update(attrs=[origin(0), mp])).eor is None


def test_bits_past_the_prefix_length_are_ignored_and_objects_shared() -> None:
    a = bgpmsg.decode_update(update(attrs=[origin(0), NH], nlri=b"\x17\x0a\x00\x01"))
    b = bgpmsg.decode_update(update(attrs=[origin(0), NH], nlri=b"\x17\x0a\x00\x00"))
    assert str(a.announced[0].prefix) == "10.0.0.0/23"
    assert (
        b.announced[0].prefix
        is bgpmsg.decode_update(update(attrs=[origin(0), NH], nlri=b"\x17\x0a\x00\x00"))
        .announced[0]
        .prefix
    )


def test_nhc_is_kept_raw_with_its_own_flags() -> None:
    u = bgpmsg.decode_update(
        update(attrs=[origin(0), NH, attr(0xD0 & ~0x10, 39, b"\x00\x01")], nlri=nlri("10.0.0.0/8"))
    )
    assert u.nhc == b"\x00\x01" and u.nhc_flags == 0xC0


@pytest.mark.parametrize(
    "body",
    [
        b"\x00",
        b"\x00\x05\x00\x00",  # withdrawn length past the end
        b"\x00\x00\x00\x09\x40\x01",  # attributes length past the end
        update(nlri=b"\x21\x0a\x00\x00\x00\x00"),  # /33
        update(nlri=b"\x18\x0a"),  # prefix shorter than its length
        update(
            attrs=[attr(0x80, 14, struct.pack("!HBB", 1, 1, 3) + b"\0\0\0\0" + nlri("1.0.0.0/8"))]
        ),
        update(attrs=[attr(0x80, 14, struct.pack("!HBB", 1, 1, 4) + b"\0\0\0\0\0")]),  # none
        update(attrs=[attr(0x80, 15, b"\0\x02"), attr(0x80, 15, b"\0\x02\x01")]),
    ],
)
def test_messages_that_cannot_be_framed_raise(body: bytes) -> None:
    with pytest.raises(bgpmsg.WireError):
        bgpmsg.decode_update(body)


def test_open_with_extended_parameters_and_graceful_restart() -> None:
    caps = (
        bytes([1, 4, 0, 2, 0, 1])
        + bytes([65, 4])
        + struct.pack("!I", 4_200_000_001)
        + bytes([64, 6])
        + struct.pack("!H", 0x8000 | 120)
        + struct.pack("!HBB", 1, 1, 0x80)
    )
    param = bytes([2]) + struct.pack("!H", len(caps)) + caps  # RFC 9072: 2-octet length
    body = (
        bytes([4])
        + struct.pack("!HH", 23456, 9)
        + bytes([10, 0, 0, 9])
        + bytes([255, 255])
        + struct.pack("!H", len(param))
        + param
    )
    o = bgpmsg.decode_open(body)
    assert (o.asn, o.hold_time, str(o.router_id), o.families, o.asn4) == (
        4_200_000_001,
        9,
        "10.0.0.9",
        ("ipv6/unicast",),
        True,
    )
    assert o.graceful_restart == bgpmsg.GracefulRestart(
        120, True, ("ipv4/unicast",), ("ipv4/unicast",)
    )
    with pytest.raises(bgpmsg.WireError):
        bgpmsg.decode_open(body[:-1])


def test_a_treat_as_withdraw_is_counted_by_attribute() -> None:
    p = api.ApiParser()
    doc = json.loads(packets_line(LINES[1]))
    doc["neighbor"]["message"]["body"] = (
        "0x" + update(attrs=[origin(9), NH], nlri=nlri("10.0.0.0/8")).hex()
    )
    ev = p.feed(json.dumps(doc))
    assert isinstance(ev, api.UpdateEvent) and not ev.announced and len(ev.withdrawn) == 1
    assert p.dropped == {"treat_as_withdraw_origin": 1}


def test_a_bad_raw_body_is_a_counted_drop() -> None:
    p = api.ApiParser()
    doc = json.loads(packets_line(LINES[1]))
    doc["neighbor"]["message"]["body"] = "0x00050000"
    assert p.feed(json.dumps(doc)) is None and p.dropped["bad_withdrawn_length"] == 1
    doc["neighbor"]["message"]["body"] = "0xZZ"
    assert p.feed(json.dumps(doc)) is None and p.dropped["bad_value"] == 1


def _strip_capability(body: bytes, code: int) -> bytes:
    """An OPEN body without capability ``code`` (classic one-octet parameter lengths)."""
    head, params = body[:9], body[10:]
    out = b""
    i = 0
    while i < len(params):
        ptype, plen = params[i], params[i + 1]
        val = params[i + 2 : i + 2 + plen]
        if ptype == 2:
            caps, j = b"", 0
            while j < len(val):
                if val[j] != code:
                    caps += val[j : j + 2 + val[j + 1]]
                j += 2 + val[j + 1]
            val = caps
        if val or ptype != 2:
            out += bytes([ptype, len(val)]) + val
        i += 2 + plen
    return head + bytes([len(out)]) + out


# -- fuzzing --------------------------------------------------------------------------------


@given(st.binary(max_size=300), st.booleans())
def test_fuzz_update_bodies(data: bytes, asn4: bool) -> None:
    with contextlib.suppress(bgpmsg.WireError):
        bgpmsg.decode_update(data, asn4)


@given(st.binary(max_size=120))
def test_fuzz_open_bodies(data: bytes) -> None:
    with contextlib.suppress(bgpmsg.WireError):
        bgpmsg.decode_open(data)


@given(st.data())
def test_fuzz_mutated_recorded_bodies(data: st.DataObject) -> None:
    line = json.loads(packets_line(data.draw(st.sampled_from(LINES))))
    body = bytearray(bytes.fromhex(line["neighbor"]["message"]["body"][2:]))
    for _ in range(data.draw(st.integers(1, 4))):
        if body:
            body[data.draw(st.integers(0, len(body) - 1))] = data.draw(st.integers(0, 255))
    line["neighbor"]["message"]["body"] = "0x" + body.hex()
    api.ApiParser().feed(json.dumps(line))  # decodes or counts a drop, never raises
