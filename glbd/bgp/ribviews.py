"""Read-only views of the RIB's state (pure): the rows ``glbctl neighbors`` and ``glbctl
neighbor PEER received|advertised`` show.

Plain functions over a peer's state and the forwarding table: separate from the RIB because
they only read, and the RIB's methods of the same names are what callers use.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from glbd.bgp.ribtypes import NextHop, Path, PeerState, Prefix, Refused, hidden_on

__all__ = [
    "advertised_rows",
    "family_order",
    "neighbor_row",
    "pre_policy_rows",
    "received_rows",
]


def received_rows(st: PeerState, fwd: dict[Prefix, tuple[NextHop, ...]]) -> list[dict[str, Any]]:
    """The peer's Adj-RIB-In after its import policy; ``used``: the path is in its prefix's
    forwarding set (``fwd``) now."""
    peer = st.params.address
    rows = []
    for prefix, path in sorted(st.paths(), key=lambda pp: family_order(pp[0])):
        why = hidden_on(st.params.colour, path)
        rows.append(
            {
                **_attrs_row(prefix, path),
                "nnh": None if path.nnh is None else [str(i) for i in path.nnh],
                "nnhn_status": path.nnhn_status,
                "stale": path.stale,
                "used": any(nh.peer == peer for nh in fwd.get(prefix, ())),
                # kept but never selected (docs/colours.md): why, else None
                "hidden": None if why is None else str(why),
            }
        )
    return rows


def pre_policy_rows(st: PeerState, received: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``received`` rows and the peer's refused routes, each with ``refused``: why (None:
    taken)."""
    rows = [{**r, "refused": None} for r in received]
    for prefix, ref in st.refused.items():
        rows.append({**_attrs_row(prefix, ref), "refused": str(ref.reason)})
    return sorted(rows, key=_row_order)


def advertised_rows(st: PeerState) -> list[dict[str, Any]]:
    """The peer's Adj-RIB-Out, as sent."""
    return [
        {
            "prefix": str(prefix),
            "next_hop": str(adv.next_hop),
            "as_path": list(adv.as_path),
            "origin": adv.origin,
            "communities": [f"{a}:{b}" for a, b in adv.communities],
            "colours": [c.text() for c in adv.colours],
            "aigp": adv.aigp,
            "nhc": None if adv.nhc is None else adv.nhc.hex(),
        }
        for prefix, adv in sorted(st.adj_out.items(), key=lambda pa: family_order(pa[0]))
    ]


def neighbor_row(
    st: PeerState, now: float, update_delay: str | None, policy_missing: tuple[str, ...]
) -> dict[str, Any]:
    """One ``glbctl neighbors`` row; ``update_delay`` and ``policy_missing`` as the RIB
    judges them."""
    return {
        "peer": str(st.params.address),
        "remote_as": st.params.remote_as,
        "interface": st.params.interface,
        "local_address": str(st.params.local_address),
        "tcp_md5": st.params.tcp_md5 is not None,
        "bgp_id": None if st.bgp_id is None else str(st.bgp_id),
        "state": "stale" if st.stale else st.state,
        "graceful_restart": None if st.gr is None else st.gr.to_dict(),
        "gr_helping": st.gr_helping,
        "stale_for_s": None
        if st.stale_deadline is None
        else round(max(0.0, st.stale_deadline - now), 3),
        "bfd_down": st.bfd_down,
        "held_for_s": None
        if st.held_until is None or st.held_until <= now
        else round(st.held_until - now, 3),
        "uptime_s": None
        if st.state != "up" or st.established_at is None
        else round(now - st.established_at, 3),
        "prefixes_in": st.n_paths,
        "prefixes_out": len(st.adj_out),
        # initial-exchange deferral: "waiting" for this neighbor's End-of-RIB (or
        # establishment), "done", or None when the RIB is not deferring
        "update_delay": update_delay,
        "last_down_reason": st.last_down_reason,
        # RFC 8212: the sides refused for want of a policy ([] when none)
        "policy_missing": list(policy_missing),
        "counters": dict(st.counters),
    }


def family_order(p: Prefix) -> tuple[int, Prefix]:
    """IPv4 before IPv6, each in address order."""
    return (p.version, p)


def _attrs_row(prefix: Prefix, p: Path | Refused) -> dict[str, Any]:
    """A received route's prefix and attributes, as the neighbor views show them."""
    return {
        "prefix": str(prefix),
        "next_hop": str(p.next_hop),
        "as_path": list(p.as_path),
        "origin": p.origin,
        "communities": [f"{a}:{b}" for a, b in p.communities],
        "colours": [c.text() for c in p.colours],
        # AIGP (RFC 7311): None when absent or ignored (an uncoloured session, docs/colours.md)
        "aigp": p.aigp,
    }


def _row_order(row: dict[str, Any]) -> tuple[int, Prefix]:
    return family_order(ipaddress.ip_network(row["prefix"]))
