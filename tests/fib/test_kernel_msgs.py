"""Ops -> rtnetlink messages and kernel messages -> model (pure)."""

from __future__ import annotations

import ipaddress
import json
import socket
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as hs

from glbd.fib.fibmodel import KGroup, KNexthop, Member, Resilient
from glbd.fib.fibmsg import encode_group, parse_group_entries
from glbd.fib.fibplan import GroupDel, GroupSet, NhSet, RouteDel, RouteSet
from glbd.fib.fibwire import observe, op_message, op_wire, parse_nexthop
from glbd.netlink import const as c
from glbd.netlink.codec import (
    Attr,
    Message,
    NhMsg,
    RtMsg,
    Selected,
    decode,
    iter_frames,
    pick_attrs,
)

VECTORS = Path(__file__).parents[1] / "vectors" / "netlink_rtnl_kernel618.jsonl"
N = ipaddress.ip_network


def test_group_weights_wire_is_weight_minus_one_with_weight_high() -> None:
    raw = encode_group([(1, 1), (2, 256), (3, 257), (4, 65535)], weight_16bit=True)
    assert raw.hex() == ("010000000000000002000000ff000000030000000001000004000000feff0000")
    assert parse_group_entries(raw) == ((1, 1), (2, 256), (3, 257), (4, 65535))
    with pytest.raises(ValueError):
        encode_group([(1, 257)], weight_16bit=False)
    with pytest.raises(ValueError):
        encode_group([(1, 0)], weight_16bit=True)


def test_group_message_round_trips_through_parser() -> None:
    op = GroupSet(7, "k", ((1, 3), (2, 300)), Resilient(64, 1.5, 5.0), create=True)
    m = decode(op_message(op, protocol=200, table=254, weight_16bit=True).encode())
    assert m.flags & c.NLM_F_EXCL and not m.flags & c.NLM_F_REPLACE
    obj, _flag = parse_nexthop(m)
    assert obj == KGroup(7, 200, ((1, 3), (2, 300)), Resilient(64, 1.5, 5.0))
    rep = op_message(
        GroupSet(7, "k", ((1, 1),), None, create=False), protocol=200, table=254, weight_16bit=False
    )
    assert rep.flags & c.NLM_F_REPLACE


def test_member_and_route_messages() -> None:
    mem = Member(ipaddress.ip_address("fe80::1"), "eth1", onlink=True)
    m = decode(op_message(NhSet(5, mem, 3), protocol=200, table=254, weight_16bit=True).encode())
    assert isinstance(m.header, NhMsg) and m.header.family == socket.AF_INET6
    obj, _ = parse_nexthop(m)
    assert obj == KNexthop(5, 200, mem.gateway, 3, onlink=True)
    r = op_message(
        RouteSet(N("2001:db8::/32"), 1024, 9), protocol=200, table=1000, weight_16bit=True
    )
    h = r.header
    assert isinstance(h, RtMsg) and (h.family, h.dst_len, h.table, h.protocol) == (10, 32, 0, 200)
    a = r.attr_map()
    assert a[c.RTA_TABLE].as_u32() == 1000 and a[c.RTA_NH_ID].as_u32() == 9
    assert a[c.RTA_PRIORITY].as_u32() == 1024
    d = op_message(RouteDel(N("0.0.0.0/0"), 0), protocol=200, table=254, weight_16bit=True)
    assert d.type == c.RTM_DELROUTE and d.attr(c.RTA_DST) is None
    assert isinstance(d.header, RtMsg) and d.header.protocol == 200  # never deletes foreign
    g = op_message(GroupDel(4), protocol=200, table=254, weight_16bit=True)
    assert g.type == c.RTM_DELNEXTHOP


@pytest.mark.parametrize(
    "op",
    [NhSet(5, Member(ipaddress.ip_address("198.18.10.2"), "eth1"), 3),
     RouteSet(N("203.0.113.0/24"), 0, 10)],
)  # fmt: skip
def test_create_is_exclusive_replace_only_when_asked(op: NhSet | RouteSet) -> None:
    """Only an object glbd knows is its own is replaced; anything else is create-only, so the
    kernel refuses (EEXIST) instead of overwriting another daemon's or an operator's."""
    from dataclasses import replace

    kw = {"protocol": 200, "table": 254, "weight_16bit": True}
    for o, want, never in ((op, c.NLM_F_EXCL, c.NLM_F_REPLACE),
                           (replace(op, replace=True), c.NLM_F_REPLACE, c.NLM_F_EXCL)):  # fmt: skip
        for m in (op_message(o, **kw), decode(op_wire(o, **kw))):
            assert m.flags & want and m.flags & c.NLM_F_CREATE and not m.flags & never


def test_observe_kernel_capture() -> None:
    msgs = [decode(bytes.fromhex(json.loads(x)["hex"])) for x in VECTORS.read_text().splitlines()]
    nhs = [m for m in msgs if m.type == c.RTM_NEWNEXTHOP]
    routes = [m for m in msgs if m.type == c.RTM_NEWROUTE]
    links = [m for m in msgs if m.type == c.RTM_NEWLINK]
    obs = observe(links, nhs, routes, protocol=200, table=254)
    assert obs.weight_16bit is True
    assert set(obs.nexthops) == {1, 2} and set(obs.groups) == {10, 11}
    assert obs.groups[10].entries == ((1, 200),)
    assert obs.groups[11].resilient == Resilient(8, 1.0, 5.0)
    assert {(str(p), m): r.nhid for (p, m), r in obs.routes.items()} == {
        ("203.0.113.0/24", 0): 10,
        ("198.51.100.0/24", 20): 11,
    }
    assert (N("198.18.10.0/30"), 0) in obs.foreign_routes  # proto kernel
    other = observe(links, nhs, routes, protocol=186, table=254)
    assert not other.groups and other.foreign_ids == {1, 2, 10, 11}
    # partial refresh: routes kept from the cache unless their group vanished
    part = observe(links, nhs[:3], None, protocol=200, table=254, previous_routes=obs)
    assert {r.nhid for r in part.routes.values()} == {10}


@pytest.mark.parametrize(
    "op",
    [
        RouteSet(N("203.0.113.0/24"), 0, 10),
        RouteSet(N("2001:db8::/32"), 1024, 9),
        RouteSet(N("0.0.0.0/0"), 20, 9),
        RouteDel(N("198.51.100.7/32"), 0),
        RouteDel(N("::/0"), 1024),
        GroupDel(3),
    ],
)
@pytest.mark.parametrize("table", [254, 1000])
def test_fast_wire_equals_message_encoding(op: RouteSet | RouteDel | GroupDel, table: int) -> None:
    kw = {"protocol": 200, "table": table, "weight_16bit": True}
    assert op_wire(op, **kw) == op_message(op, **kw).encode()


def test_routes_from_select_rows_match_full_parse() -> None:
    from glbd.fib.fibwire import ROUTE_WANT, routes_from_rows
    from glbd.netlink.codec import Selected, iter_frames, pick_attrs

    rows = []
    for line in VECTORS.read_text().splitlines():
        raw = bytes.fromhex(json.loads(line)["hex"])
        (fr,) = iter_frames(raw)
        if fr.type == c.RTM_NEWROUTE:
            hs = RtMsg.ST.size
            rows.append(
                Selected(
                    fr.type,
                    RtMsg.decode(raw, fr.start),
                    pick_attrs(raw, fr.start + hs, fr.end, ROUTE_WANT),
                )
            )
    ours, foreign = routes_from_rows(rows, protocol=200, table=254)
    msgs = [decode(bytes.fromhex(json.loads(x)["hex"])) for x in VECTORS.read_text().splitlines()]
    full = observe([], [], [m for m in msgs if m.type == c.RTM_NEWROUTE], protocol=200, table=254)
    assert ours == full.routes and foreign == full.foreign_routes


@pytest.mark.parametrize(
    "flags, name, carrier",
    [
        (c.IFF_UP | c.IFF_LOWER_UP, b"l-s12\0", b"\x01"),
        (c.IFF_UP, b"l-s12\0", b"\x00"),
        (c.IFF_UP | c.IFF_LOWER_UP, b"eth0\0", None),  # no IFLA_CARRIER: the flag says
        (0, None, None),
    ],
)
def test_a_link_from_the_fast_dump_is_the_link_of_the_full_message(
    flags: int, name: bytes | None, carrier: bytes | None
) -> None:
    """The audit reads links with the fast dump (``LINK_KEEP`` only): the same link as the
    full message's, among the attributes a kernel sends that the FIB does not read."""
    from glbd.fib.fibwire import LINK_KEEP, parse_link
    from glbd.netlink.codec import Attr, IfInfoMsg, Message, Selected, iter_frames, pick_attrs

    af_spec = Attr(26, b"\x08\x00\x02\x00" + b"\0" * 4)  # IFLA_AF_SPEC: one the FIB skips
    attrs = [Attr.u32(c.IFLA_MTU, 9000), af_spec]
    if name is not None:
        attrs.insert(0, Attr(c.IFLA_IFNAME, name))
    if carrier is not None:
        attrs.append(Attr(c.IFLA_CARRIER, carrier))
    raw = Message(c.RTM_NEWLINK, 0, 1, 0, IfInfoMsg(0, 1, 12, flags, 0), tuple(attrs)).encode()
    (fr,) = iter_frames(raw)
    hs = IfInfoMsg.ST.size
    row = Selected(
        fr.type, IfInfoMsg.decode(raw, fr.start), pick_attrs(raw, fr.start + hs, fr.end, LINK_KEEP)
    )
    fast, full = parse_link(row), parse_link(decode(raw))
    assert fast == full and fast is not None
    assert fast.name == ("if12" if name is None else name[:-1].decode())


def _bucket_rows(raw: bytes) -> tuple[Selected, Message]:
    from glbd.fib.fibwire import BUCKET_WANT

    (fr,) = iter_frames(raw)
    hs = NhMsg.ST.size
    row = Selected(
        fr.type, NhMsg.decode(raw, fr.start), pick_attrs(raw, fr.start + hs, fr.end, BUCKET_WANT)
    )
    return row, decode(raw)


def _bucket(nest: bytes, gid: int = 10) -> bytes:
    attrs = (Attr.u32(c.NHA_ID, gid), Attr(c.NHA_RES_BUCKET | c.NLA_F_NESTED, nest))
    return Message(c.RTM_NEWNEXTHOPBUCKET, 0, 1, 0, NhMsg(2), attrs).encode()


def test_a_bucket_from_the_fast_dump_is_the_bucket_of_the_full_message() -> None:
    """Placement reads bucket tables with the fast dump (``BUCKET_WANT``): the same (group,
    index, member) as the full message's, the idle time between them skipped."""
    from glbd.fib.fibwire import parse_bucket

    nest = b"".join(
        a.encode()
        for a in (
            Attr.u16(c.NHA_RES_BUCKET_INDEX, 77),
            Attr(c.NHA_RES_BUCKET_IDLE_TIME, (1234).to_bytes(8, "little")),
            Attr.u32(c.NHA_RES_BUCKET_NH_ID, 3),
        )
    )
    fast, full = _bucket_rows(_bucket(nest))
    assert parse_bucket(fast) == parse_bucket(full) == (10, 77, 3)
    # no member, a cut nested attribute: no bucket, never an exception
    short, _ = _bucket_rows(_bucket(nest[:-8]))
    cut, _ = _bucket_rows(_bucket(nest[:-2]))
    assert parse_bucket(short) is None and parse_bucket(cut) is None


@given(hs.binary(max_size=64))
def test_any_nested_bucket_bytes_parse_or_are_none(nest: bytes) -> None:
    from glbd.fib.fibwire import parse_bucket

    fast, _ = _bucket_rows(_bucket(nest))
    got = parse_bucket(fast)
    assert got is None or got[0] == 10
