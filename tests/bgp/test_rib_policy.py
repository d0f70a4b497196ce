"""Policy basics in the Clos RIB, in virtual time: prefix lists (syntax and matching), import
and export filters, address-family activation, max-prefixes warn and teardown with its
restart time. Every rejected route is counted by reason."""

from __future__ import annotations

from dataclasses import replace

import pytest
from rib_helpers import LEAVES, A, N, spine_rib, update_from

from glbd.base.reasons import ResetReason, RouteRejected
from glbd.bgp import exabgp_api as api
from glbd.bgp import prefixlist
from glbd.bgp.rib import Rib
from glbd.bgp.ribtypes import (
    Advertise,
    NeighborParams,
    NextHopsChanged,
    ResetPeer,
    Retract,
    Role,
)
from glbd.bgp.speaker import command_for

L1, L2 = LEAVES[1], LEAVES[2]


def rib(l1: NeighborParams = L1, l2: NeighborParams = L2, **kw: object) -> Rib:
    return spine_rib(Role.HELPER, {1: l1, 2: l2}, initial_decisions=True, **kw)


def upd(n: NeighborParams, *prefixes: str) -> api.UpdateEvent:
    return update_from(n, *prefixes)


def pl(*lines: str) -> prefixlist.PrefixList:
    return prefixlist.parse(lines)


def test_prefix_list_syntax_and_matching() -> None:
    p = pl("10.0.0.0/8 le 24", "deny 0.0.0.0/0", "permit 192.0.2.0/24 ge 28", "2001:db8::/32 le 48")
    assert str(p) == (
        "permit 10.0.0.0/8 le 24, deny 0.0.0.0/0, permit 192.0.2.0/24 ge 28, "
        "permit 2001:db8::/32 le 48"
    )
    ok = ["10.0.0.0/8", "10.1.2.0/24", "192.0.2.16/28", "192.0.2.1/32", "2001:db8:1::/48"]
    no = ["10.1.2.0/25", "0.0.0.0/0", "11.0.0.0/8", "192.0.2.0/24", "2001:db8::/64"]
    assert [p.permits(N(x)) for x in ok] == [True] * len(ok)
    assert [p.permits(N(x)) for x in no] == [False] * len(no)
    # a family without entries is not filtered
    assert pl("10.0.0.0/8 le 32").permits(N("2001:db8::/32"))
    assert pl("deny 10.0.0.0/8 le 32", "0.0.0.0/0 le 32").permits(N("11.0.0.0/8"))
    for bad in (
        "",
        "deny",
        "10.0.0.0/33",
        "10.0.0.1/8",
        "10.0.0.0/8 le 7",
        "10.0.0.0/8 ge 24 le 16",
        "10.0.0.0/8 le",
        "10.0.0.0/8 foo 9",
        "10.0.0.0/8 le 24 le 24",
        "allow 10.0.0.0/8",
    ):
        with pytest.raises(ValueError):
            prefixlist.parse_entry(bad)


def test_import_filter_rejects_and_counts_and_replaces_an_earlier_path() -> None:
    r = rib(replace(L1, import_filter=pl("10.0.0.0/8 le 24")))
    eff = r.on_update(upd(L1, "10.1.0.0/24", "10.2.0.0/25", "192.0.2.0/24"), 1.0)
    fwd = {str(e.prefix) for e in eff if isinstance(e, NextHopsChanged)}
    assert fwd == {"10.1.0.0/24"}
    c = RouteRejected.IMPORT_DENIED.counter
    assert r.peers[L1.address].counters[c] == 2 and r.counters[c] == 2
    assert c == "rejected_import_denied"
    # the other neighbor has no filter
    r.on_update(upd(L2, "192.0.2.0/24"), 1.0)
    assert r.next_hops(N("192.0.2.0/24"))


def test_reconfigured_import_filter_drops_paths_it_now_denies() -> None:
    r = rib()
    r.on_update(upd(L1, "10.1.0.0/24", "192.0.2.0/24"), 1.0)
    eff, touched = r.reconfigure(
        replace(
            r.params,
            neighbors=(replace(L1, import_filter=pl("deny 192.0.2.0/24", "0.0.0.0/0 le 32")), L2),
        )
    )
    assert not touched  # no session reset for a filter
    gone = [e for e in eff if isinstance(e, NextHopsChanged) and not e.next_hops]
    assert [str(e.prefix) for e in gone] == ["192.0.2.0/24"]
    assert r.next_hops(N("10.1.0.0/24"))


def test_export_filter_and_families() -> None:
    r = rib(
        replace(L1, export_filter=pl("10.0.0.0/8 le 32"), local_address6=A("2001:db8::2")),
        replace(L2, families=(4,), local_address6=A("2001:db8:1::2")),
        originated=(N("10.11.0.0/24"), N("198.51.100.0/24"), N("2001:db8:11::/48")),
    )
    out = {(str(a.peer), str(a.prefix)) for a in r.adj_rib_out()}
    assert out == {
        ("172.16.11.1", "10.11.0.0/24"),
        ("172.16.11.1", "2001:db8:11::/48"),  # the IPv4-only list leaves IPv6 alone
        ("172.16.12.1", "10.11.0.0/24"),
        ("172.16.12.1", "198.51.100.0/24"),
    }
    # an IPv6 route from the IPv4-only neighbor is rejected
    eff = r.on_update(upd(L2, "2001:db8:2::/48", "10.2.0.0/24"), 1.0)
    assert {str(e.prefix) for e in eff if isinstance(e, NextHopsChanged)} == {"10.2.0.0/24"}
    assert r.peers[L2.address].counters["rejected_family_not_active"] == 1


def test_families_change_redefines_the_session() -> None:
    r = rib()
    _eff, touched = r.reconfigure(replace(r.params, neighbors=(replace(L1, families=(4,)), L2)))
    assert touched == {L1.address}


def test_max_prefixes_warn_keeps_routes_and_logs_once_per_crossing() -> None:
    r = rib(replace(L1, max_prefixes=2, max_prefixes_action="warn"))
    eff = r.on_update(upd(L1, "10.1.0.0/24", "10.2.0.0/24", "10.3.0.0/24"), 1.0)
    assert not [e for e in eff if isinstance(e, ResetPeer)]
    assert len([e for e in eff if isinstance(e, NextHopsChanged)]) == 3
    r.on_update(upd(L1, "10.4.0.0/24"), 2.0)
    assert r.peers[L1.address].counters["max_prefixes_exceeded"] == 1


def test_max_prefixes_teardown_cease_1_and_held_for_the_restart_time() -> None:
    r = rib(replace(L1, max_prefixes=2, max_prefixes_restart_s=30.0))
    r.on_update(upd(L1, "10.1.0.0/24", "10.2.0.0/24"), 1.0)
    eff = r.on_update(upd(L1, "10.3.0.0/24"), 2.0)
    # forwarding first, then the withdrawals toward leaf2, then the Cease
    kinds = [type(e).__name__ for e in eff]
    assert kinds[-1] == "ResetPeer" and kinds.index("NextHopsChanged") < kinds.index("Retract")
    reset = eff[-1]
    assert isinstance(reset, ResetPeer) and reset.reason is ResetReason.MAX_PREFIXES
    assert command_for(reset) == api.Teardown(L1.address, 1)  # Cease/1
    assert not r.forwarding()
    assert r.peers[L1.address].counters["rejected_max_prefixes"] == 1
    r.on_state(L1.address, "down", 2.1, "notification sent (6,1)")
    # ExaBGP reconnects within the restart time: closed again at once, its routes ignored
    assert r.on_state(L1.address, "up", 10.0) == [ResetPeer(L1.address, ResetReason.MAX_PREFIXES)]
    row = next(x for x in r.neighbors_snapshot(10.0) if x["peer"] == str(L1.address))
    assert row["held_for_s"] == 22.0 and row["state"] != "up"
    assert r.on_update(upd(L1, "10.1.0.0/24"), 10.1) == []
    r.on_state(L1.address, "down", 10.2, "notification sent (6,1)")
    # after the restart time the session is taken again
    eff = r.on_state(L1.address, "up", 32.0)
    assert not [e for e in eff if isinstance(e, ResetPeer)]
    eff = r.on_update(upd(L1, "10.1.0.0/24"), 33.0)
    assert [str(e.prefix) for e in eff if isinstance(e, NextHopsChanged)] == ["10.1.0.0/24"]
    assert any(isinstance(e, Advertise) for e in eff) and not any(
        isinstance(e, Retract) for e in eff
    )
