"""The RIB unit tests' spine: spine1 (AS 65100, 10.0.0.11) with leaf1..leaf3 (AS 65001..65003,
ids 10.0.0.1..3) up, and the UPDATEs a leaf sends it."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

from glbd.bgp import exabgp_api as api
from glbd.bgp.rib import Rib
from glbd.bgp.ribtypes import NeighborParams, RibParams, Role

A = ipaddress.ip_address
N = ipaddress.ip_network
V4 = ipaddress.IPv4Address

LEAVES = {
    1: NeighborParams(A("172.16.11.1"), 65001, A("172.16.11.2"), "s1-l1"),
    2: NeighborParams(A("172.16.12.1"), 65002, A("172.16.12.2"), "s1-l2"),
    3: NeighborParams(A("172.16.13.1"), 65003, A("172.16.13.2"), "s1-l3"),
}


def spine_rib(
    role: Role = Role.HELPER,
    leaves: Mapping[int, NeighborParams] = LEAVES,
    *,
    gr: api.GracefulRestart | None = None,
    initial_decisions: bool = False,
    **kw: object,
) -> Rib:
    """spine1's RIB with ``leaves`` (leaf i has BGP id 10.0.0.i) opened (with ``gr``) and up;
    every UPDATE selects at once unless ``update_coalesce_s`` says otherwise."""
    kw.setdefault("update_coalesce_s", 0.0)
    r = Rib(RibParams(V4("10.0.0.11"), 65100, role, tuple(leaves.values()), **kw))  # type: ignore[arg-type]
    if initial_decisions:
        r.initial_decisions()
    for i, n in leaves.items():
        r.on_open(n.address, V4(f"10.0.0.{i}"), gr)
        r.on_state(n.address, "up", 0.0)
    return r


def update_from(
    n: NeighborParams,
    *prefixes: str,
    as_path: tuple[int, ...] | None = None,
    communities: tuple[tuple[int, int], ...] = (),
    nhc_value: bytes | None = None,
    withdraw: tuple[str, ...] = (),
    next_hop: str | None = None,
) -> api.UpdateEvent:
    """An UPDATE from ``n`` announcing ``prefixes`` (each in its own family) with next hop
    ``next_hop`` (default: ``n``'s address) and AS path ``as_path`` (default: its AS)."""
    path = as_path if as_path is not None else (n.remote_as,)
    hop = A(next_hop) if next_hop else n.address
    return api.UpdateEvent(
        n.address,
        n.local_address,
        n.remote_as,
        65100,
        "receive",
        api.PathAttributes(
            "igp", path, len(path), None, communities, nhc_value, 0xE0 if nhc_value else None
        ),
        tuple(
            api.RouteAnnounced("ipv6 unicast" if N(p).version == 6 else "ipv4 unicast", hop, N(p))
            for p in prefixes
        ),
        tuple(("ipv6 unicast" if N(p).version == 6 else "ipv4 unicast", N(p)) for p in withdraw),
    )
