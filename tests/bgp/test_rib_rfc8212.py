"""RFC 8212 in the Clos RIB (``RibParams.ebgp_requires_policy``): an eBGP neighbor without an
import list has every route rejected (``no_import_policy``), one without an export list is sent
nothing; iBGP neighbors are not covered; off, nothing changes. In virtual time."""

from __future__ import annotations

from dataclasses import replace

from rib_helpers import LEAVES, A, N, spine_rib, update_from
from structlog.testing import capture_logs

from glbd.base.reasons import RouteRejected
from glbd.bgp import prefixlist
from glbd.bgp.rib import Rib
from glbd.bgp.ribtypes import NeighborParams, NextHopsChanged, Role

ALL = prefixlist.parse(["0.0.0.0/0 le 32", "::/0 le 128"])
L1, L2 = LEAVES[1], LEAVES[2]
#: L2 with a permit-all policy both ways
L2P = replace(L2, import_filter=ALL, export_filter=ALL)
#: an iBGP neighbor (our own AS, 65100) without any policy
IBGP = NeighborParams(A("172.16.19.1"), 65100, A("172.16.19.2"), "s1-r9")
ORIG = (N("10.11.0.0/24"),)
NO_IMPORT = RouteRejected.NO_IMPORT_POLICY.counter


def rib(*neighbors: NeighborParams, on: bool = True) -> Rib:
    leaves = dict(enumerate(neighbors, 1))
    return spine_rib(
        Role.HELPER, leaves, initial_decisions=True, originated=ORIG, ebgp_requires_policy=on
    )


def fwd(eff: list[object]) -> set[str]:
    return {str(e.prefix) for e in eff if isinstance(e, NextHopsChanged) and e.next_hops}


def sent(r: Rib) -> set[tuple[str, str]]:
    return {(str(a.peer), str(a.prefix)) for a in r.adj_rib_out()}


def test_ebgp_without_import_policy_imports_nothing_and_counts_it() -> None:
    r = rib(L1, L2P)
    assert fwd(r.on_update(update_from(L1, "10.1.0.0/24", "2001:db8:1::/48"), 1.0)) == set()
    assert r.peers[L1.address].counters[NO_IMPORT] == 2 and r.counters[NO_IMPORT] == 2
    assert NO_IMPORT == "rejected_no_import_policy"
    assert r.peers[L1.address].n_paths == 0
    # the neighbor with a policy is unaffected
    assert fwd(r.on_update(update_from(L2P, "10.2.0.0/24"), 1.0)) == {"10.2.0.0/24"}
    assert r.peers[L2.address].counters[NO_IMPORT] == 0


def test_ebgp_without_export_policy_is_sent_nothing() -> None:
    r = rib(replace(L1, import_filter=ALL), L2P)
    r.on_update(update_from(L2P, "10.2.0.0/24"), 1.0)
    # neither originated nor learned prefixes go to leaf1; leaf2 gets the originated one
    assert sent(r) == {("172.16.12.1", "10.11.0.0/24")}
    # leaf1's own routes are taken (it has an import list) and go to leaf2 (it has an export)
    assert fwd(r.on_update(update_from(L1, "10.1.0.0/24"), 2.0)) == {"10.1.0.0/24"}
    assert ("172.16.12.1", "10.1.0.0/24") in sent(r)
    snap = {row["peer"]: row["policy_missing"] for row in r.neighbors_snapshot(2.0)}
    assert snap == {"172.16.11.1": ["export"], "172.16.12.1": []}


def test_ibgp_neighbor_needs_no_policy() -> None:
    r = rib(IBGP, L2P)
    eff = r.on_update(update_from(IBGP, "10.9.0.0/24", as_path=(65009,)), 1.0)
    assert fwd(eff) == {"10.9.0.0/24"}
    assert ("172.16.19.1", "10.11.0.0/24") in sent(r)
    assert r.counters[NO_IMPORT] == 0
    assert r.policy_missing(IBGP) == ()


def test_off_restores_the_old_behaviour() -> None:
    r = rib(L1, L2, on=False)
    assert fwd(r.on_update(update_from(L1, "10.1.0.0/24"), 1.0)) == {"10.1.0.0/24"}
    assert sent(r) == {
        ("172.16.11.1", "10.11.0.0/24"),
        ("172.16.12.1", "10.11.0.0/24"),
        ("172.16.12.1", "10.1.0.0/24"),
    }
    assert r.counters[NO_IMPORT] == 0 and r.policy_missing(L1) == ()


def test_logged_once_per_neighbor_with_the_missing_side() -> None:
    with capture_logs() as logs:
        r = rib(L1, replace(L2, import_filter=ALL), IBGP)
        r.on_update(update_from(L1, "10.1.0.0/24"), 1.0)
        r.on_update(update_from(L1, "10.2.0.0/24"), 2.0)
    got = [
        (e["peer"], e["missing"], e["log_level"]) for e in logs if e["event"] == "ebgp_no_policy"
    ]
    assert got == [
        ("172.16.11.1", ["import", "export"], "warning"),
        ("172.16.12.1", ["export"], "warning"),
    ]


def test_turning_it_on_or_removing_a_list_applies_at_once() -> None:
    r = rib(L1, L2P, on=False)
    r.on_update(update_from(L1, "10.1.0.0/24"), 1.0)
    assert ("172.16.12.1", "10.1.0.0/24") in sent(r)
    eff, touched = r.reconfigure(replace(r.params, ebgp_requires_policy=True))
    assert not touched  # no session reset
    gone = {str(e.prefix) for e in eff if isinstance(e, NextHopsChanged) and not e.next_hops}
    assert gone == {"10.1.0.0/24"}
    assert r.peers[L1.address].counters[NO_IMPORT] == 1
    assert sent(r) == {("172.16.12.1", "10.11.0.0/24")}
    # leaf2 loses its import list: its paths go too, its export list still sends
    r.on_update(update_from(L2P, "10.2.0.0/24"), 2.0)
    eff, _ = r.reconfigure(replace(r.params, neighbors=(L1, replace(L2P, import_filter=None))))
    assert {str(e.prefix) for e in eff if isinstance(e, NextHopsChanged)} == {"10.2.0.0/24"}
    assert r.next_hops(N("10.2.0.0/24")) == ()
    assert sent(r) == {("172.16.12.1", "10.11.0.0/24")}
