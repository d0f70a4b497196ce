"""Strict NHC/NNHN conformance, one rule at a time, on hand-assembled golden bytes
(tests/vectors/nhc_conformance.json): what the codec decodes, what a load balancer's RIB makes of
a received NHC (and counts), and the exact NHC a helper sends with next-hop-self."""

from __future__ import annotations

import dataclasses
import ipaddress
import json
from pathlib import Path
from typing import Any

import pytest

from glbd.base.reasons import NHC_DISREGARDED, NhcDiscard, NhcStatus, nhc_malformed
from glbd.bgp import exabgp_api as api
from glbd.bgp import nhc
from glbd.bgp.nhc import BgpId, DecodeError, Nhc, Nnhn
from glbd.bgp.rib import Rib
from glbd.bgp.ribtypes import Advertise, NeighborParams, RibParams, Role
from glbd.control import metrics_parts

A = ipaddress.ip_address
N = ipaddress.ip_network
V4 = ipaddress.IPv4Address
V6 = ipaddress.IPv6Address
DOC = json.loads(
    (Path(__file__).resolve().parent.parent / "vectors" / "nhc_conformance.json").read_text()
)
SPINE = NeighborParams(A("fe80::a"), 65100, A("fe80::b"), "swp1")
LEAF1 = NeighborParams(A("fe80::a"), 65001, A("fe80::b"), "swp1")
LEAF2 = NeighborParams(A("fe80::c"), 65002, A("fe80::d"), "swp2")


def h(s: str) -> bytes:
    return nhc.parse_hex(s)


def _up(r: Rib, *peers: tuple[NeighborParams, str]) -> Rib:
    for n, bgp_id in peers:
        r.on_open(n.address, V4(bgp_id))
        r.on_state(n.address, "up", 0.0)
    return r


def lb() -> Rib:
    params = RibParams(V4("10.0.0.1"), 65001, Role.LOAD_BALANCER, (SPINE,), update_coalesce_s=0.0)
    return _up(Rib(params), (SPINE, "10.0.0.11"))


def helper() -> Rib:
    params = RibParams(V4("10.0.0.11"), 65100, Role.HELPER, (LEAF1, LEAF2), update_coalesce_s=0.0)
    return _up(Rib(params), (LEAF1, "10.0.0.1"), (LEAF2, "10.0.0.2"))


def update(
    peer: NeighborParams,
    prefix: str,
    next_hop: str,
    value: bytes | None,
    flags: int | None = 0xE0,
    family: str = "ipv6 unicast",
) -> api.UpdateEvent:
    return api.UpdateEvent(
        peer.address,
        peer.local_address,
        peer.remote_as,
        65001,
        "receive",
        api.PathAttributes(
            "igp", (peer.remote_as,), 1, None, (), value, None if value is None else flags
        ),
        (api.RouteAnnounced(family, A(next_hop), N(prefix)),),
        (),
    )


def _name(case: dict[str, Any]) -> str:
    return f"{case['rule']}: {case['name']}"


# -- codec: golden bytes both ways ------------------------------------------------------------


def test_32_octet_next_hop_golden() -> None:
    raw = h(DOC["receive"][6]["value_hex"])
    want = Nhc(
        2,
        1,
        V6("2001:db8::a"),
        Nnhn(V4("10.0.0.11"), (V4("10.0.0.2"), V4("10.0.0.3"))),
        link_local=V6("fe80::a"),
    )
    got = nhc.decode_value(raw)
    assert got == want and got.link_local == V6("fe80::a") and not got.link_local_only
    assert want.encode_value() == raw
    assert got.next_hop_match("2001:db8::a") is nhc.NextHopMatch.MATCH
    assert got.next_hop_match("fe80::a") is nhc.NextHopMatch.MATCH
    assert got.next_hop_match("2001:db8::b") is nhc.NextHopMatch.MISMATCH
    with pytest.raises(DecodeError) as ei:
        nhc.decode_value(h(DOC["receive"][8]["value_hex"]))
    assert ei.value.reason == "bad_link_local_next_hop"


def test_bgpid_both_lengths_golden() -> None:
    four = nhc.decode_value(h(DOC["receive"][0]["value_hex"]))
    eight = nhc.decode_value(h(DOC["receive"][1]["value_hex"]))
    assert four.bgpid == BgpId(V4("10.0.0.11")) and four.link_local_only
    assert eight.bgpid == BgpId(V4("10.0.0.11"), 65100)
    assert four.bgpid.encode_value() == h("0a00000b")
    assert eight.bgpid.encode_value() == h("0a00000b 0000fe4c")
    assert nhc.decode_value(h(DOC["receive"][4]["value_hex"])).discarded == ("bgpid_bad_length",)


def test_zero_nnhn_identifier_golden() -> None:
    for case in (DOC["receive"][12], DOC["receive"][13]):
        v = nhc.decode_value(h(case["value_hex"]))
        assert v.nnhn is None and v.discarded == ("nnhn_zero_id",)
        assert v.bgpid == BgpId(V4("10.0.0.11"))  # the other characteristic stays usable
    with pytest.raises(ValueError):
        Nnhn(V4("10.0.0.11"), (V4("0.0.0.0"),))  # and glbd never builds one
    with pytest.raises(ValueError):
        Nnhn(V4("0.0.0.0"), (V4("10.0.0.2"),))


@pytest.mark.parametrize(
    ("flags", "problem"),
    [(0xC0, None), (0xD0, None), (0xE0, None), (0xF0, None), (None, None)]
    + [(f, "bad_flags") for f in (0x00, 0x10, 0x40, 0x50, 0x80, 0x90, 0xA0)],
)
def test_flags_problem(flags: int | None, problem: str | None) -> None:
    assert nhc.flags_problem(flags) == problem


# -- a load balancer receiving -----------------------------------------------------------------


@pytest.mark.parametrize("case", DOC["receive"], ids=_name)
def test_receive_rule(case: dict[str, Any]) -> None:
    r = lb()
    prefix = case.get("prefix", "2001:db8:2::/48")
    ev = update(
        SPINE,
        prefix,
        case["next_hop"],
        h(case["value_hex"]),
        int(case["flags"], 16),
        case.get("family", "ipv6 unicast"),
    )
    r.on_update(ev, 1.0)
    (nh,) = r.next_hops(N(prefix))  # the route is always kept: at most the NHC goes
    assert nh.nnhn_status == case["status"]
    assert type(nh.nnhn_status) is NhcStatus
    assert (None if nh.nnh is None else [str(i) for i in nh.nnh]) == case["nnh"]
    status = NhcStatus(case["status"])
    if status in NHC_DISREGARDED:
        assert r.counters[status] == 1
        (row,) = r.neighbors_snapshot(1.0)
        assert row["counters"][status] == 1
    else:
        assert not any(r.counters[s] for s in NHC_DISREGARDED)


def test_disregard_reasons_reach_counters_and_metrics() -> None:
    r = lb()
    bad = [c for c in DOC["receive"] if c["status"] != "valid"]
    for i, case in enumerate(bad):
        prefix = f"2001:db8:{i + 10:x}::/48"
        ev = update(SPINE, prefix, case["next_hop"], h(case["value_hex"]), int(case["flags"], 16))
        r.on_update(ev, 1.0)
    counters = dict(r.counters)  # what `glbctl counters` shows for the BGP part
    samples = {
        s.labels["reason"]: s.value
        for s in metrics_parts.bgp_samples({"counters": counters})
        if s.name == "glbd_nhc_disregarded_total"
    }
    assert set(samples) == {str(s) for s in NHC_DISREGARDED}
    for case in bad:
        assert samples[case["status"]] == counters[case["status"]] >= 1


def test_every_decode_error_has_a_status() -> None:
    seen = set()
    for case in DOC["receive"]:
        raw = h(case["value_hex"])
        for cut in range(len(raw) + 1):
            data = bytearray(raw[:cut])
            for i in (1, 2, 3):
                if i < len(data):
                    data[i] ^= 0xFF
                    try:
                        nhc.decode_value(bytes(data))
                    except DecodeError as e:
                        seen.add(nhc_malformed(e.reason))
                    data[i] ^= 0xFF
            try:
                nhc.decode_value(bytes(data))
            except DecodeError as e:
                seen.add(nhc_malformed(e.reason))
    assert {"nhc_malformed_too_short", "nhc_malformed_unknown_afi"} <= seen
    assert seen <= NHC_DISREGARDED


# -- a helper sending with next-hop-self ---------------------------------------------------------


@pytest.mark.parametrize("case", DOC["originate"], ids=_name)
def test_originate_rule(case: dict[str, Any]) -> None:
    r = helper()
    received = None if case["received_value_hex"] is None else h(case["received_value_hex"])
    eff = r.on_update(update(LEAF1, case["prefix"], "fe80::a", received), 1.0)
    (adv,) = [e for e in eff if isinstance(e, Advertise) and e.peer == LEAF2.address]
    assert adv.next_hop == A(case["next_hop"])
    assert adv.nhc == h(case["value_hex"])
    sent = nhc.decode_value(adv.nhc)
    assert sent.bgpid == BgpId(V4("10.0.0.11"))  # ours, 4 octets, never leaf1's
    assert sent.nnhn is not None and sent.nnhn.nh_bgp_id == V4("10.0.0.11")
    assert sent.other == ()


def test_global_next_hop_carries_no_bgpid() -> None:
    leaf1 = NeighborParams(A("2001:db8::a"), 65001, A("2001:db8::b"), "swp1")
    leaf2 = NeighborParams(A("2001:db8::c"), 65002, A("2001:db8::d"), "swp2")
    params = RibParams(V4("10.0.0.11"), 65100, Role.HELPER, (leaf1, leaf2), update_coalesce_s=0.0)
    r = _up(Rib(params), (leaf1, "10.0.0.1"), (leaf2, "10.0.0.2"))
    eff = r.on_update(update(leaf1, "2001:db8:1::/48", "2001:db8::a", None), 1.0)
    (adv,) = [e for e in eff if isinstance(e, Advertise) and e.peer == leaf2.address]
    assert adv.nhc == h("0002 01 10 20010db800000000000000000000000d 0002 0008 0a00000b 0a000001")


def test_a_peer_with_bgp_id_zero_is_left_out_of_our_nnhn() -> None:
    """0.0.0.0 is no BGP Identifier: such a peer's path is used but never named in an NNHN."""
    leaf3 = NeighborParams(A("fe80::e"), 65003, A("fe80::f"), "swp3")
    params = RibParams(
        V4("10.0.0.11"), 65100, Role.HELPER, (LEAF1, LEAF2, leaf3), update_coalesce_s=0.0
    )
    r = _up(Rib(params), (LEAF1, "10.0.0.1"), (LEAF2, "10.0.0.2"), (leaf3, "0.0.0.0"))
    r.on_update(update(leaf3, "2001:db8:1::/48", "fe80::e", None), 1.0)
    eff = r.on_update(update(LEAF1, "2001:db8:1::/48", "fe80::a", None), 1.0)
    (adv,) = [e for e in eff if isinstance(e, Advertise) and e.peer == LEAF2.address]
    assert adv.nhc == h(DOC["originate"][0]["value_hex"])


def test_dropped_characteristics_are_counted_once_per_update() -> None:
    """A characteristic dropped on its own (the route and the rest of the NHC stay) is counted
    by reason, once per UPDATE, and exported."""
    r = lb()
    value = h(
        "0002 01 10 fe80000000000000000000000000000a 0002 000c 0a00000b 0a000002 0a000003"
        " 0002 0008 0a00000b 0a000009 0003 0004 0a00000b 0003 0002 0a00"
    )
    ev = update(SPINE, "2001:db8:2::/48", "fe80::a", value)
    second = api.RouteAnnounced("ipv6 unicast", A("fe80::a"), N("2001:db8:3::/48"))
    r.on_update(dataclasses.replace(ev, announced=(*ev.announced, second)), 1.0)
    assert r.next_hops(N("2001:db8:2::/48"))[0].nnhn_status == "valid"
    assert sorted(nhc.decode_value(value).discarded) == [
        "bgpid_extra_instance",
        "nnhn_extra_instance",
    ]
    assert r.counters["nhc_characteristic_nnhn_extra_instance"] == 1
    assert r.counters["nhc_characteristic_bgpid_extra_instance"] == 1
    samples = {
        s.labels["reason"]: s.value
        for s in metrics_parts.bgp_samples({"counters": dict(r.counters)})
        if s.name == "glbd_nhc_characteristics_discarded_total"
    }
    assert samples == {
        "nnhn_bad_length": 0.0,
        "nnhn_zero_id": 0.0,
        "nnhn_extra_instance": 1.0,
        "bgpid_bad_length": 0.0,
        "bgpid_zero": 0.0,
        "bgpid_extra_instance": 1.0,
    }


def test_every_codec_discard_is_a_member() -> None:
    cases = [
        "0001 01 04 00000000 0002 0004 0a000063",
        "0001 01 04 00000000 0002 0008 0a000063 00000000",
        "0001 01 04 00000000 0002 0008 0a000063 0a000001 0002 0008 0a000063 0a000001",
        "0001 01 04 00000000 0003 0005 0a00000100",
        "0001 01 04 00000000 0003 0004 00000000",
        "0001 01 04 00000000 0003 0004 0a000001 0003 0004 0a000001",
    ]
    seen = {d for c in cases for d in nhc.decode_value(h(c)).discarded}
    assert seen == {str(m) for m in NhcDiscard}
