"""The graceful restart capability of an OPEN as ExaBGP 5.0.15 reports it (its
``Graceful.json``, labels swapped: a family's "restart" is its Forwarding State bit, "forwarding"
in restart-flags is the Restart State bit), and the End-of-RIB command."""

from __future__ import annotations

import ipaddress

import pytest

from glbd.bgp import exabgp_api as api

A = ipaddress.ip_address

# Graceful().set(0x8, 120, [(ipv4, unicast, 0x80), (ipv6, unicast, 0)]).json() of 5.0.15
GR_R_F4 = (
    '{ "name": "graceful restart", "time": 120, "address-family-flags": { "ipv4/unicast": '
    '[ "restart" ] , "ipv6/unicast": [ ] }, "restart-flags": [ "forwarding" ]  }'
)
# Graceful().set(0, 120, []).json(): FRR's helper-only capability
GR_HELPER_ONLY = (
    '{ "name": "graceful restart", "time": 120, "address-family-flags": { }, '
    '"restart-flags": [ ]  }'
)


def open_line(caps: str) -> str:
    return (
        '{ "exabgp": "5.0.0", "time": 1.0, "host" : "h", "pid" : 1, "ppid" : 1, '
        '"counter": 1, "type": "open", "neighbor": { "address": { "local": "192.0.2.2", '
        '"peer": "192.0.2.1" }, "asn": { "local": 65002, "peer": 65001 }, "router-id": '
        '"10.0.0.2" , "direction": "receive", "open": { "version": 4, "asn": 65001, '
        '"hold_time": 9, "router_id": "10.0.0.1", "capabilities": { "1": { "name": '
        '"multiprotocol", "families": [ "ipv4/unicast", "ipv6/unicast" ] }' + caps + " } } } }"
    )


def test_restart_and_forwarding_bits() -> None:
    ev = api.decode(open_line(', "64": ' + GR_R_F4))
    assert isinstance(ev, api.OpenEvent)
    assert ev.graceful_restart == api.GracefulRestart(
        120, True, ("ipv4/unicast", "ipv6/unicast"), ("ipv4/unicast",)
    )
    assert ev.to_dict()["graceful_restart"]["forwarding"] == ["ipv4/unicast"]


def test_helper_only_capability() -> None:
    ev = api.decode(open_line(', "64": ' + GR_HELPER_ONLY))
    assert isinstance(ev, api.OpenEvent)
    assert ev.graceful_restart == api.GracefulRestart(120, False, (), ())


def test_no_capability() -> None:
    ev = api.decode(open_line(""))
    assert isinstance(ev, api.OpenEvent) and ev.graceful_restart is None


@pytest.mark.parametrize(
    "bad", ['"x"', '{ "time": "120" }', '{ "time": 1, "address-family-flags": { "a": 1 } }']
)
def test_malformed_capability_is_dropped(bad: str) -> None:
    p = api.ApiParser()
    assert p.feed(open_line(', "64": ' + bad)) is None
    assert sum(p.dropped.values()) == 1


def test_end_of_rib_command() -> None:
    cmd = api.EndOfRib(A("192.0.2.1"), "ipv6 unicast")
    assert api.encode_command(cmd) == "neighbor 192.0.2.1 announce eor ipv6 unicast"
