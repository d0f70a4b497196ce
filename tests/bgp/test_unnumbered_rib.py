"""The RIB with an unnumbered neighbor: IPv4 prefixes over IPv6 link-local next hops."""

from __future__ import annotations

import ipaddress

from glbd.bgp import exabgp_api as api
from glbd.bgp.rib import Rib
from glbd.bgp.ribtypes import Advertise, NeighborParams, RibParams, Role

A = ipaddress.ip_address
N = ipaddress.ip_network
V4 = ipaddress.IPv4Address
PEER, OURS = A("fe80::1"), A("fe80::2")
# what FRR 10 sent over an unnumbered link (captured): IPv4 unicast, a 16-octet all-zero next
# hop, NNHN {10.0.0.100 (the spine), 10.0.0.2, 10.0.0.3}
FRR_NHC = bytes.fromhex("00010110" + "00" * 16 + "0002000c0a0000640a0000020a000003")


def lb(originated: tuple[str, ...] = ()) -> Rib:
    n = NeighborParams(PEER, None, OURS, "swp1", unnumbered=True)
    params = RibParams(
        V4("10.0.0.1"),
        65001,
        Role.LOAD_BALANCER,
        (n,),
        tuple(N(p) for p in originated),
        update_coalesce_s=0.0,
    )
    return Rib(params)


def update(*prefixes: str, nhc: bytes | None = FRR_NHC) -> api.UpdateEvent:
    return api.UpdateEvent(
        PEER,
        OURS,
        None,
        65001,
        "receive",
        api.PathAttributes("igp", (65100, 65002), 2, None, (), nhc, 0xC0 if nhc else None),
        tuple(api.RouteAnnounced("ipv4 unicast", PEER, N(p)) for p in prefixes),
        (),
    )


def test_ipv4_route_over_link_local_next_hop_with_nnhn() -> None:
    r = lb()
    r.on_open(PEER, V4("10.0.0.100"))
    r.on_state(PEER, "up", 0.0)
    # ExaBGP lists the prefix twice (a 32-octet next hop): still the first prefix, trusted
    r.on_update(update("10.200.0.0/24", "10.200.0.0/24"), 1.0)
    (nh,) = r.next_hops(N("10.200.0.0/24"))
    assert (nh.next_hop, nh.interface, nh.nnhn_status) == (PEER, "swp1", "valid")
    assert nh.nnh == (V4("10.0.0.2"), V4("10.0.0.3"))
    # a really packed UPDATE still trusts only its first prefix
    r.on_update(update("10.200.0.0/24", "10.202.0.0/24"), 2.0)
    assert r.next_hops(N("10.202.0.0/24"))[0].nnhn_status == "nnhn_packed_untrusted"


def test_ipv4_prefix_advertised_with_our_link_local_next_hop() -> None:
    r = lb(("10.201.0.0/24",))
    effects = r.initial_decisions()
    r.on_open(PEER, V4("10.0.0.100"))
    effects += r.on_state(PEER, "up", 0.0)
    ads = [e for e in effects if isinstance(e, Advertise) and e.prefix == N("10.201.0.0/24")]
    assert ads and {(a.peer, a.next_hop) for a in ads} == {(PEER, OURS)}
