"""Address family per interface (docs/heartbeat.md §1), without sockets: group checks, which
neighbour (and so which family) an interface uses, the IPv6 source pin, and the receiver's
source check with IPv6 zones and spellings."""

from __future__ import annotations

import pytest

from glbd.config.config_quality import HEARTBEAT_GROUP_V4, HEARTBEAT_GROUP_V6
from heartbeat import wire
from heartbeat.receiver import Neighbor, Receiver
from heartbeat.transport import (
    DEFAULT_GROUP,
    DEFAULT_GROUP6,
    IfSpec,
    check_groups,
    family_of,
    if_spec,
    pick_neighbors,
)
from heartbeat.wire import Entry, Heartbeat

S1, S2 = wire.node_id("10.0.0.1"), wire.node_id("10.0.0.2")
ENTRIES = [Entry(S2, 1, 10_000, 7, 0, 0, 0)]


def test_defaults_match_the_config_defaults() -> None:
    assert DEFAULT_GROUP == HEARTBEAT_GROUP_V4
    assert DEFAULT_GROUP6 == HEARTBEAT_GROUP_V6 == "ff12::149"
    check_groups(DEFAULT_GROUP, DEFAULT_GROUP6)


@pytest.mark.parametrize(
    ("group", "group6", "what"),
    [
        ("ff12::149", "ff12::149", "IPv4 multicast"),
        ("10.0.0.1", "ff12::149", "IPv4 multicast"),
        ("224.0.0.149", "224.0.0.149", "IPv6 multicast"),
        ("224.0.0.149", "fe80::1", "IPv6 multicast"),
        ("224.0.0.149", "ff05::149", "link-local scope"),
        ("224.0.0.149", "ff0e::149", "link-local scope"),
    ],
)
def test_check_groups_rejects(group: str, group6: str, what: str) -> None:
    with pytest.raises(ValueError, match=what):
        check_groups(group, group6)


def test_family_of() -> None:
    assert family_of("198.18.0.1") == 4
    assert family_of("fe80::1%eth0") == 6 and family_of("2001:db8::1") == 6
    assert family_of(None) is None


def test_ifspec_pins_only_ipv6_sources() -> None:
    assert IfSpec() == IfSpec(4, None)
    assert IfSpec(6, "fe80::1").source == "fe80::1"
    with pytest.raises(ValueError):
        IfSpec(4, "198.18.0.1")  # IPv4 keeps the kernel's choice (unchanged behaviour)
    with pytest.raises(ValueError):
        IfSpec(6, "198.18.0.1")
    with pytest.raises(ValueError):
        IfSpec(5)


def test_family_follows_the_bgp_neighbor() -> None:
    v4 = Neighbor("eth1", S1, "198.18.0.1", local="198.18.0.0")
    ll = Neighbor("eth2", S1, "fe80::1", local="fe80::2")
    glob = Neighbor("eth3", S2, "2001:db8::1", local="2001:db8::")
    unchecked = Neighbor("eth4", S2, None)
    assert if_spec(v4) == IfSpec(4)  # an IPv4 source is never pinned
    assert if_spec(ll) == IfSpec(6, "fe80::2")
    assert if_spec(glob) == IfSpec(6, "2001:db8::")
    assert if_spec(Neighbor("eth2", S1, "fe80::1")) == IfSpec(6, None)
    assert if_spec(unchecked) == IfSpec(4)  # no address known: the IPv4 default
    assert if_spec(Neighbor("eth5", S1, None, local="fe80::2")) == IfSpec(6, "fe80::2")
    picked = pick_neighbors([v4, ll, glob, unchecked])
    assert {i: if_spec(n).family for i, n in picked.items()} == {
        "eth1": 4,
        "eth2": 6,
        "eth3": 6,
        "eth4": 4,
    }


def test_dual_stack_interface_uses_ipv4_whatever_the_order() -> None:
    v4 = Neighbor("eth1", S1, "198.18.0.1")
    v6 = Neighbor("eth1", S1, "fe80::1")
    assert pick_neighbors([v4, v6]) == {"eth1": v4}
    assert pick_neighbors([v6, v4]) == {"eth1": v4}
    assert pick_neighbors([v6]) == {"eth1": v6}  # the IPv4 session went down: IPv6 takes over


@pytest.mark.parametrize(
    ("configured", "reported", "ok"),
    [
        ("fe80::1", "fe80::1", True),
        ("fe80::1%eth1", "fe80::1", True),  # a zone in the config does not matter
        ("FE80:0:0::1", "fe80::1", True),  # nor the spelling
        ("2001:db8::1", "2001:db8:0::1", True),
        ("fe80::1", "fe80::99", False),
        ("fe80::1", "198.18.0.1", False),
        ("198.18.0.1", "198.18.0.1", True),
        ("198.18.0.1", "198.18.0.2", False),
    ],
)
def test_receiver_source_check_with_ipv6_zones(configured: str, reported: str, ok: bool) -> None:
    r = Receiver()
    r.set_neighbor(Neighbor("eth1", S1, configured))
    dg = Heartbeat(S1, 1, 20_000, ENTRIES).encode()
    ups = r.on_datagram(dg, ifname="eth1", src=reported, ttl=255, now=0.0)
    assert (r.accepted == 1) is ok
    assert bool(ups) is ok
    assert r.drops == ({} if ok else {"wrong_source": 1})
