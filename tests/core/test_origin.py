"""Conditional origination (``glbd.bgp.origin.Origins``), in virtual time: the clock is the
``now`` each call passes, so a row's ``state_for_s`` is exact.

A static prefix is always advertised; a ``[[bgp.network]]`` prefix while its interface is
oper-up; a connected subnet while its interface is up and holds the address, if the prefix list
permits it. Every change comes back as announce/withdraw with its reason, and nothing that was
never a candidate is ever withdrawn."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping

from hypothesis import given, settings
from hypothesis import strategies as hs

from glbd.base.reasons import OriginReason as R
from glbd.bgp import prefixlist
from glbd.bgp.origin import OriginChange, OriginParams, OriginRow, Origins, Source

N = ipaddress.ip_network
Prefix = ipaddress.IPv4Network | ipaddress.IPv6Network

STATIC = N("10.99.0.0/24")
SERVICE = N("198.19.9.0/24")
HOST0 = N("198.19.1.0/24")
HOST1 = N("198.19.2.0/24")
HOST0_V6 = N("2001:db8:1::/64")

PARAMS = OriginParams(
    static=(STATIC,),
    networks=((SERVICE, "host0"),),
    connected=("host*",),
    connected_filter=prefixlist.parse(["permit 198.19.0.0/16 le 24", "2001:db8::/32 le 64"]),
)


def nets(*texts: str) -> frozenset[Prefix]:
    return frozenset(N(t) for t in texts)


def row_of(o: Origins, p: Prefix) -> OriginRow:
    r = o.row(p)
    assert r is not None, p
    return r


def reason(o: Origins, p: Prefix) -> R | None:
    row = o.row(p)
    return None if row is None else row.reason


def see(
    o: Origins, links: Mapping[str, bool], conn: Mapping[str, Iterable[Prefix]], now: float
) -> OriginChange:
    return o.observe(links, conn, now)


#: a leaf's interfaces: two host ports, a fabric port, the loopback
CONNECTED = {
    "host0": {HOST0, HOST0_V6, N("fe80::/64")},
    "host1": {HOST1},
    "swp1": {N("172.16.11.0/24")},
    "lo": {N("127.0.0.0/8"), N("10.0.0.1/32")},
}


def test_static_is_always_advertised_and_nothing_else_before_the_interfaces_are_seen() -> None:
    o = Origins(PARAMS, now=0.0)
    assert o.prefixes() == {STATIC}
    assert reason(o, SERVICE) is R.NO_INTERFACE
    assert Origins(OriginParams(static=(STATIC,))).params.conditional is False
    assert PARAMS.conditional


def test_up_interfaces_advertise_their_prefixes_with_reasons() -> None:
    o = Origins(PARAMS, now=0.0)
    ch = see(o, {"host0": True, "host1": True, "swp1": True, "lo": True}, CONNECTED, 1.0)
    assert dict(ch.announce) == {
        HOST0: R.CONNECTED,
        SERVICE: R.INTERFACE_UP,
        HOST1: R.CONNECTED,
        HOST0_V6: R.CONNECTED,
    }
    assert list(ch.announce) == [HOST0, HOST1, SERVICE, HOST0_V6]  # by family, then prefix
    assert ch.withdraw == {}
    # the fabric port and the loopback do not match "host*"; link-local is never taken
    assert o.prefixes() == {STATIC, SERVICE, HOST0, HOST1, HOST0_V6}
    assert o.row(N("172.16.11.0/24")) is None and o.row(N("fe80::/64")) is None


def test_the_host_port_going_down_withdraws_its_prefixes_and_back_up_announces_them() -> None:
    o = Origins(PARAMS, now=0.0)
    up = {"host0": True, "host1": True, "swp1": True, "lo": True}
    see(o, up, CONNECTED, 1.0)
    ch = see(o, {**up, "host0": False}, CONNECTED, 5.0)
    assert dict(ch.withdraw) == {
        HOST0: R.INTERFACE_DOWN,
        SERVICE: R.INTERFACE_DOWN,
        HOST0_V6: R.INTERFACE_DOWN,
    }
    assert ch.announce == {}
    assert o.prefixes() == {STATIC, HOST1}
    row = o.row(HOST0)
    assert row is not None and row.to_dict(7.5) == {
        "source": "connected",
        "interface": "host0",
        "state": "withdrawn",
        "reason": "interface_down",
        "state_for_s": 2.5,
    }
    # host1 did not change: its row keeps its time
    assert row_of(o, HOST1).to_dict(7.5)["state_for_s"] == 6.5
    ch = see(o, up, CONNECTED, 9.0)
    assert set(ch.announce) == {HOST0, SERVICE, HOST0_V6} and ch.withdraw == {}
    assert row_of(o, SERVICE).to_dict(9.0)["state_for_s"] == 0.0


def test_an_unchanged_observation_changes_nothing() -> None:
    o = Origins(PARAMS, now=0.0)
    up = {"host0": True, "host1": True, "swp1": True, "lo": True}
    see(o, up, CONNECTED, 1.0)
    assert not see(o, dict(up), {k: set(v) for k, v in CONNECTED.items()}, 2.0)
    assert row_of(o, HOST0).since == 1.0


def test_address_removed_and_interface_deleted() -> None:
    o = Origins(PARAMS, now=0.0)
    up = {"host0": True, "host1": True}
    see(o, up, {"host0": {HOST0}, "host1": {HOST1}}, 1.0)
    ch = see(o, up, {"host0": set(), "host1": {HOST1}}, 2.0)
    assert dict(ch.withdraw) == {HOST0: R.NO_ADDRESS}
    assert o.row(HOST0) is None  # no longer a candidate at all
    ch = see(o, {"host1": True}, {"host0": {HOST0}, "host1": {HOST1}}, 3.0)
    # a deleted port: the configured network waits for it, its addresses went with it
    assert dict(ch.withdraw) == {SERVICE: R.NO_INTERFACE}
    assert reason(o, SERVICE) is R.NO_INTERFACE
    see(o, up, {"host0": {HOST0}, "host1": {HOST1}}, 4.0)
    ch = see(o, {"host1": True}, {"host1": {HOST1}}, 5.0)
    assert dict(ch.withdraw) == {HOST0: R.NO_INTERFACE, SERVICE: R.NO_INTERFACE}


def test_the_prefix_list_filters_connected_subnets_only() -> None:
    p = OriginParams(
        static=(N("192.0.2.0/24"),),
        connected=("host0",),
        connected_filter=prefixlist.parse(["deny 198.19.1.0/24", "permit 0.0.0.0/0 le 32"]),
    )
    o = Origins(p, now=0.0)
    ch = see(o, {"host0": True}, {"host0": {HOST0, HOST1}}, 1.0)
    assert dict(ch.announce) == {HOST1: R.CONNECTED}
    assert reason(o, HOST0) is R.FILTERED
    # the list says nothing of IPv6: an IPv6 subnet passes (a family without entries)
    ch = see(o, {"host0": True}, {"host0": {HOST0, HOST1, HOST0_V6}}, 2.0)
    assert dict(ch.announce) == {HOST0_V6: R.CONNECTED}
    assert N("192.0.2.0/24") in o.prefixes()  # the filter is not applied to originate


def test_static_wins_over_a_down_interface_and_globs_select_ports() -> None:
    p = OriginParams(static=(HOST0,), connected=("host[01]",))
    o = Origins(p, now=0.0)
    conn = {"host0": {HOST0}, "host1": {HOST1}, "host2": {N("198.19.3.0/24")}}
    see(o, {"host0": False, "host1": True, "host2": True}, conn, 1.0)
    assert o.prefixes() == {HOST0, HOST1}
    row = o.row(HOST0)
    assert row is not None and (row.source, row.reason) == (Source.STATIC, R.STATIC)


def test_one_subnet_on_two_ports_is_advertised_while_either_is_up() -> None:
    o = Origins(OriginParams(connected=("host*",)), now=0.0)
    conn = {"host0": {HOST0}, "host1": {HOST0}}
    see(o, {"host0": True, "host1": True}, conn, 1.0)
    assert not see(o, {"host0": False, "host1": True}, conn, 2.0)
    assert row_of(o, HOST0).interface == "host1"
    ch = see(o, {"host0": False, "host1": False}, conn, 3.0)
    assert dict(ch.withdraw) == {HOST0: R.INTERFACE_DOWN}


def test_a_reload_applies_new_sources_and_withdraws_what_it_removed() -> None:
    o = Origins(PARAMS, now=0.0)
    up = {"host0": True, "host1": True}
    see(o, up, {"host0": {HOST0}, "host1": {HOST1}}, 1.0)
    ch = o.set_params(OriginParams(static=(STATIC,), connected=("host1",)), 2.0)
    assert dict(ch.withdraw) == {HOST0: R.UNCONFIGURED, SERVICE: R.UNCONFIGURED}
    assert ch.announce == {}
    ch = o.set_params(OriginParams(), 3.0)
    assert dict(ch.withdraw) == {STATIC: R.UNCONFIGURED, HOST1: R.UNCONFIGURED}
    assert o.prefixes() == frozenset() and o.rows() == []


def test_the_reasons_say_which_advertise() -> None:
    assert {r for r in R if r.advertised} == {R.STATIC, R.INTERFACE_UP, R.CONNECTED}
    assert all(r == r.value == r.name.lower() for r in R)


IFACES = ["host0", "host1", "swp1"]
Step = tuple[dict[str, bool], dict[str, frozenset[Prefix]]]
SUBNETS = [HOST0, HOST1, HOST0_V6, N("172.16.11.0/24"), N("fe80::/64")]


@settings(max_examples=300, deadline=None)
@given(
    hs.lists(
        hs.tuples(
            hs.dictionaries(hs.sampled_from(IFACES), hs.booleans()),
            hs.dictionaries(hs.sampled_from(IFACES), hs.frozensets(hs.sampled_from(SUBNETS))),
        ),
        max_size=12,
    )
)
def test_the_changes_replay_to_the_answer(steps: list[Step]) -> None:
    """Whatever the interfaces do, the announces and withdrawals, applied in order to the set
    a receiver holds, give exactly ``prefixes()``; each announce is of a prefix the receiver did
    not have and each withdrawal of one it had; the answer is a function of the last input."""
    o = Origins(PARAMS, now=0.0)
    held = set(o.prefixes())
    for t, (links, conn) in enumerate(steps, 1):
        ch = o.observe(links, conn, float(t))
        assert not set(ch.announce) & held and set(ch.withdraw) <= held
        assert all(r.advertised for r in ch.announce.values())
        assert not any(r.advertised for r in ch.withdraw.values())
        held = (held | set(ch.announce)) - set(ch.withdraw)
        assert held == o.prefixes()
        assert held == _fresh(links, conn)
        assert STATIC in held


def _fresh(links: dict[str, bool], conn: dict[str, frozenset[Prefix]]) -> frozenset[Prefix]:
    o = Origins(PARAMS, now=0.0)
    o.observe(links, conn, 0.0)
    return o.prefixes()
