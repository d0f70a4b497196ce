"""The RIB's received next-hop check: a path whose next hop is this router's own address, off the
session interface's subnets, or no gateway at all is rejected and counted by reason; it is an
implicit withdraw of that peer's path only, and the prefix's other paths stay selected."""

from __future__ import annotations

from dataclasses import replace

import pytest
from rib_helpers import LEAVES, A, N, spine_rib, update_from

from glbd.base.reasons import RouteRejected
from glbd.bgp.rib import Rib
from glbd.bgp.ribtypes import Connected, NextHopsChanged

L1, L2 = LEAVES[1], LEAVES[2]
P = "10.99.0.0/24"

#: spine1's own addresses: one per leaf link (/24), a loopback, an IPv6 subnet on s1-l2
CONNECTED = (
    Connected("s1-l1", A("172.16.11.2"), N("172.16.11.0/24")),
    Connected("s1-l2", A("172.16.12.2"), N("172.16.12.0/24")),
    Connected("s1-l2", A("2001:db8:12::2"), N("2001:db8:12::/64")),
    Connected("s1-l2", A("fe80::2"), N("fe80::/64")),
    Connected("s1-l3", A("172.16.13.2"), N("172.16.13.0/24")),
    Connected("lo", A("10.0.0.11"), N("10.0.0.11/32")),
)


def rib() -> Rib:
    r = spine_rib()
    r.set_connected(CONNECTED)
    return r


def via(r: Rib, prefix: str = P) -> set[str]:
    return {str(nh.peer) for nh in r.next_hops(N(prefix))}


def rejected(r: Rib, why: RouteRejected) -> tuple[int, int]:
    """(L2's count, the total) of ``why``."""
    return r.peers[L2.address].counters[why.counter], r.counters[why.counter]


@pytest.mark.parametrize(
    ("next_hop", "why"),
    [
        ("172.16.12.2", RouteRejected.NEXTHOP_SELF),  # our address on the session's own link
        ("172.16.11.2", RouteRejected.NEXTHOP_SELF),  # our address on another link
        ("10.0.0.11", RouteRejected.NEXTHOP_SELF),  # our loopback
        ("192.0.2.7", RouteRejected.NEXTHOP_OFFLINK),  # in no subnet of s1-l2
        ("172.16.11.1", RouteRejected.NEXTHOP_OFFLINK),  # another link's neighbor
        ("0.0.0.0", RouteRejected.NEXTHOP_INVALID),
        ("127.0.0.1", RouteRejected.NEXTHOP_INVALID),
        ("224.0.0.5", RouteRejected.NEXTHOP_INVALID),
    ],
)
def test_unusable_next_hop_drops_that_path_only(next_hop: str, why: RouteRejected) -> None:
    r = rib()
    r.on_update(update_from(L1, P), 1.0)
    eff = r.on_update(update_from(L2, P, next_hop=next_hop), 1.0)
    assert via(r) == {str(L1.address)}
    assert not [e for e in eff if isinstance(e, NextHopsChanged)]  # L1's path untouched
    assert rejected(r, why) == (1, 1)
    assert why.counter == f"rejected_{why.value}"


def test_rejected_next_hop_withdraws_the_peers_earlier_path() -> None:
    r = rib()
    r.on_update(update_from(L1, P), 1.0)
    r.on_update(update_from(L2, P), 1.0)
    assert via(r) == {str(L1.address), str(L2.address)}
    eff = r.on_update(update_from(L2, P, next_hop="172.16.12.2"), 2.0)
    assert via(r) == {str(L1.address)}
    (ch,) = [e for e in eff if isinstance(e, NextHopsChanged)]
    assert [str(nh.peer) for nh in ch.next_hops] == [str(L1.address)]
    # a good next hop again brings the path back
    r.on_update(update_from(L2, P, next_hop="172.16.12.9"), 3.0)
    assert via(r) == {str(L1.address), str(L2.address)}


def test_sole_path_with_own_next_hop_leaves_prefix_unreachable_not_stuck() -> None:
    r = rib()
    r.on_update(update_from(L2, P, "10.98.0.0/24", next_hop="172.16.12.2"), 1.0)
    assert r.next_hops(N(P)) == () and r.next_hops(N("10.98.0.0/24")) == ()
    assert rejected(r, RouteRejected.NEXTHOP_SELF) == (2, 2)  # per route
    assert r.peers[L2.address].n_paths == 0


def test_on_link_third_party_and_ipv6_next_hops_are_kept() -> None:
    r = rib()
    r.on_update(update_from(L2, P, next_hop="172.16.12.77"), 1.0)  # third party, on-link
    r.on_update(update_from(L2, "2001:db8:99::/48", next_hop="2001:db8:12::1"), 1.0)
    r.on_update(update_from(L2, "2001:db8:98::/48", next_hop="fe80::1"), 1.0)  # link-local
    assert via(r) == {str(L2.address)}
    assert r.next_hops(N("2001:db8:99::/48")) and r.next_hops(N("2001:db8:98::/48"))
    for why in (RouteRejected.NEXTHOP_SELF, RouteRejected.NEXTHOP_OFFLINK):
        assert rejected(r, why) == (0, 0)
    r.on_update(update_from(L2, "2001:db8:97::/48", next_hop="2001:db8:77::1"), 1.0)
    r.on_update(update_from(L2, "2001:db8:96::/48", next_hop="fe80::2"), 1.0)  # ours on s1-l2
    assert not r.next_hops(N("2001:db8:97::/48")) and not r.next_hops(N("2001:db8:96::/48"))
    assert rejected(r, RouteRejected.NEXTHOP_OFFLINK) == (1, 1)
    assert rejected(r, RouteRejected.NEXTHOP_SELF) == (1, 1)


def test_same_link_local_on_another_port_is_not_ours() -> None:
    """fe80::2 is ours on s1-l2 only: on s1-l1 it is the neighbor's."""
    r = rib()
    r.on_update(update_from(L1, "2001:db8:95::/48", next_hop="fe80::2"), 1.0)
    assert r.next_hops(N("2001:db8:95::/48"))


def test_without_connected_only_session_addresses_count_as_own() -> None:
    r = spine_rib()  # set_connected never called: no subnet known
    r.on_update(update_from(L2, P, next_hop="192.0.2.7"), 1.0)  # off-link unknown: kept
    assert via(r) == {str(L2.address)}
    r.on_update(update_from(L1, P, next_hop=str(L2.local_address)), 1.0)
    assert via(r) == {str(L2.address)}
    assert r.counters[RouteRejected.NEXTHOP_SELF.counter] == 1


def test_multihop_session_is_not_checked_for_off_link() -> None:
    """A session whose peer is not on its interface's subnets (a loopback peering) may carry
    any reachable next hop: only own and invalid next hops are rejected."""
    lo = replace(L2, address=A("10.0.0.2"), local_address=A("10.0.0.11"))
    r = spine_rib(leaves={1: L1, 2: lo})
    r.set_connected(CONNECTED)
    r.on_update(update_from(lo, P, next_hop="172.16.12.1"), 1.0)
    r.on_update(update_from(lo, "10.98.0.0/24", next_hop="192.0.2.7"), 1.0)
    assert r.next_hops(N(P)) and r.next_hops(N("10.98.0.0/24"))
    r.on_update(update_from(lo, "10.97.0.0/24", next_hop="10.0.0.11"), 1.0)
    assert not r.next_hops(N("10.97.0.0/24"))


def test_mixed_next_hops_in_one_update_checked_each() -> None:
    r = rib()
    ev = update_from(L2, P, "10.98.0.0/24")
    bad = ev.announced[1]._replace(next_hop=A("172.16.12.2"))
    r.on_update(replace(ev, announced=(ev.announced[0], bad)), 1.0)
    assert via(r) == {str(L2.address)} and not r.next_hops(N("10.98.0.0/24"))
    assert rejected(r, RouteRejected.NEXTHOP_SELF) == (1, 1)


def test_rejects_exported_by_reason() -> None:
    """``glbctl counters``/``neighbors`` carry ``rejected_nexthop_*``; the metric has a label
    per reason."""
    from glbd.control.metrics_parts import bgp_samples

    r = rib()
    r.on_update(update_from(L2, P, next_hop="172.16.12.2"), 1.0)
    r.on_update(update_from(L2, "10.98.0.0/24", next_hop="192.0.2.7"), 1.0)
    got = {
        s.labels["reason"]: s.value
        for s in bgp_samples({"neighbors": [], "counters": dict(r.counters)})  # type: ignore[typeddict-item]
        if s.name == "glbd_bgp_routes_rejected_total"
    }
    assert got["nexthop_self"] == 1 and got["nexthop_offlink"] == 1
    assert got["nexthop_invalid"] == 0
