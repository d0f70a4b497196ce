"""Convergence work in the RIB, in virtual time: the initial-exchange deferral
(``update_delay_s``, FRR's update-delay) selects every prefix once when the neighbors' tables
are in (their End-of-RIB, the establish-wait, or the deferral timer) instead of once per
arriving path, and a selection whose outcome did not change walks no Adj-RIB-Out. The work is
read from ``Rib.stats``; the deferral's state from the ``glbctl neighbors`` rows."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as hs

from glbd.base.reasons import UpdateDelayEnd
from glbd.bgp import exabgp_api as api
from glbd.bgp import nhc
from glbd.bgp.rib import Rib
from glbd.bgp.ribtypes import (
    Advertise,
    Effect,
    NextHopsChanged,
    PeerDown,
    ResetPeer,
    Retract,
    RibParams,
    Role,
)
from tests.bgp.test_rib import LEAVES, V4, N, upd
from tests.bgp.test_rib_coalesce import drive, eor
from tests.bgp.test_rib_gr import cap

DELAY = 120.0
WAIT = 10.0
PREFIXES = [f"10.{200 + i // 256}.{i % 256}.0/24" for i in range(20)]


def drib(
    up: tuple[int, ...] = (1, 2, 3),
    role: Role = Role.HELPER,
    gr: api.GracefulRestart | None = None,
    **kw: object,
) -> Rib:
    """leaf1..3 configured, ``up`` established at t=0 (the deferral's clock starts there)."""
    kw.setdefault("update_coalesce_s", 0.0)
    kw.setdefault("update_delay_s", DELAY)
    kw.setdefault("update_delay_establish_wait_s", WAIT)
    params = RibParams(V4("10.0.0.11"), 65100, role, tuple(LEAVES.values()), **kw)  # type: ignore[arg-type]
    r = Rib(params)
    for i in up:
        r.on_open(LEAVES[i].address, V4(f"10.0.0.{i}"), gr)
        r.on_state(LEAVES[i].address, "up", 0.0)
    return r


def fwd(effects: Sequence[object]) -> dict[str, list[str]]:
    return {
        str(e.prefix): sorted(str(nh.peer) for nh in e.next_hops)
        for e in effects
        if isinstance(e, NextHopsChanged)
    }


def drain(r: Rib, now: float) -> list[Effect]:
    """Run every due timer (the deferral's release is selected in slices by on_timer)."""
    out: list[Effect] = []
    while (d := r.next_deadline()) is not None and d <= now:
        out += r.on_timer(now)
    return out


def tables(r: Rib, leaves: tuple[int, ...], t: float) -> list[Effect]:
    out: list[Effect] = []
    for leaf in leaves:
        out += r.on_update(upd(leaf, *PREFIXES), t)
    return out


def waiting(r: Rib, now: float) -> list[str]:
    rows = r.neighbors_snapshot(now)
    return sorted(row["peer"] for row in rows if row["update_delay"] == "waiting")


def test_arrivals_wait_for_every_end_of_rib_then_each_prefix_is_selected_once() -> None:
    r = drib()
    assert r.update_delay_active
    assert tables(r, (1, 2, 3), 1.0) == []  # stored, not selected
    assert r.stats.selections == 0 and r.pending == len(PREFIXES)
    assert r.on_update(eor(1), 2.0) == [] and r.on_update(eor(2), 2.0) == []
    assert waiting(r, 2.0) == ["172.16.13.1"]
    assert not r.converged()  # our End-of-RIB must follow our routes
    r.on_update(eor(3), 3.0)
    assert not r.update_delay_active
    assert r.counters[UpdateDelayEnd.END_OF_RIB.counter] == 1
    assert r.neighbors_snapshot(3.0)[0]["update_delay"] is None
    eff = drain(r, 3.0)
    three = ["172.16.11.1", "172.16.12.1", "172.16.13.1"]
    assert fwd(eff) == {p: three for p in PREFIXES}
    # one selection per prefix for three paths each, not one per arriving path; and the
    # prefixes share their paths (one per leaf and UPDATE), so one of them is computed
    assert r.stats.selections == len(PREFIXES)
    assert r.stats.computed == 1
    assert r.converged()


def test_the_deferral_timer_ends_it_when_an_established_peer_sends_no_end_of_rib() -> None:
    r = drib()
    tables(r, (1, 2), 1.0)
    r.on_update(eor(1), 1.0)
    r.on_update(eor(2), 1.0)
    assert r.next_deadline() == WAIT  # the establish-wait: leaf3 is up, so it still waits
    drain(r, WAIT)
    assert r.update_delay_active and r.next_deadline() == DELAY
    assert drain(r, DELAY - 0.1) == []
    eff = drain(r, DELAY)
    assert not r.update_delay_active
    assert r.counters[UpdateDelayEnd.TIMER.counter] == 1
    assert fwd(eff) == {p: ["172.16.11.1", "172.16.12.1"] for p in PREFIXES}


def test_a_neighbor_that_does_not_establish_is_waited_for_only_the_establish_wait() -> None:
    r = drib(up=(1, 2))  # leaf3 configured, never established
    tables(r, (1, 2), 1.0)
    r.on_update(eor(1), 2.0)
    r.on_update(eor(2), 2.0)
    assert r.update_delay_active and waiting(r, 2.0) == ["172.16.13.1"]
    assert r.next_deadline() == WAIT
    eff = drain(r, WAIT)
    assert not r.update_delay_active
    assert r.counters[UpdateDelayEnd.END_OF_RIB.counter] == 1
    assert r.counters[UpdateDelayEnd.TIMER.counter] == 0
    assert fwd(eff) == {p: ["172.16.11.1", "172.16.12.1"] for p in PREFIXES}


def test_deferred_and_eager_selection_end_in_the_same_state() -> None:
    eager = drib(update_delay_s=0.0)
    deferred = drib()
    for r in (eager, deferred):
        tables(r, (1, 2), 1.0)
        r.on_update(upd(3, *PREFIXES[:5], as_path=(65003, 65009)), 1.0)
        r.on_update(upd(2, withdraw=tuple(PREFIXES[:3])), 1.5)
        for leaf in (1, 2, 3):
            r.on_update(eor(leaf), 2.0)
        drain(r, 2.0)
    assert deferred.forwarding() == eager.forwarding()
    assert deferred.adj_rib_out() == eager.adj_rib_out()
    assert deferred.stats.selections < eager.stats.selections


def test_a_late_peer_whose_paths_change_nothing_costs_no_adj_rib_out_walk() -> None:
    r = drib(up=(1, 2))
    tables(r, (1, 2), 1.0)
    r.on_update(eor(1), 1.0)
    r.on_update(eor(2), 1.0)
    drain(r, WAIT)
    assert not r.update_delay_active
    walks, skips = r.stats.adj_out_walks, r.stats.adj_out_skips
    # leaf3 comes up late with longer paths: neither best nor multipath anywhere
    r.on_open(LEAVES[3].address, V4("10.0.0.3"))
    r.on_state(LEAVES[3].address, "up", 20.0)
    eff = r.on_update(upd(3, *PREFIXES, as_path=(65003, 65009, 65010)), 20.0)
    assert eff == []  # selected at once (converged), nothing to say
    assert r.stats.adj_out_walks == walks
    assert r.stats.adj_out_skips == skips + len(PREFIXES)
    # a path that joins the multipath set still reaches every peer
    eff = r.on_update(upd(3, PREFIXES[0]), 21.0)
    assert fwd(eff) == {PREFIXES[0]: ["172.16.11.1", "172.16.12.1", "172.16.13.1"]}
    assert any(isinstance(e, Retract) for e in eff)  # leaf3 contributes: no longer sent to it
    assert r.stats.adj_out_walks == walks + 1


def test_graceful_restart_of_a_peer_during_the_deferral_keeps_its_paths_stale() -> None:
    gr = cap(30)
    r = drib(role=Role.BOTH, graceful_restart=True, gr=gr)
    tables(r, (1, 2, 3), 1.0)
    r.on_update(eor(1), 1.5)
    eff = r.on_state(LEAVES[1].address, "down", 2.0)  # TCP reset: leaf1 restarts
    assert [type(e) for e in eff] == [PeerDown]  # nothing was selected, nothing changes
    assert r.neighbors_snapshot(2.0)[0]["gr_helping"]
    r.on_update(eor(2), 3.0)
    r.on_update(eor(3), 3.0)
    assert not r.update_delay_active  # leaf1 sent its End-of-RIB before it restarted
    eff = drain(r, 3.0)
    three = ["172.16.11.1", "172.16.12.1", "172.16.13.1"]
    assert fwd(eff) == {p: three for p in PREFIXES}  # leaf1's stale paths still forward
    # leaf1 is back and refreshes half its table: End-of-RIB sweeps the other half
    r.on_open(LEAVES[1].address, V4("10.0.0.1"), gr)
    r.on_state(LEAVES[1].address, "up", 4.0)
    r.on_update(upd(1, *PREFIXES[:10]), 4.5)
    eff = r.on_update(eor(1), 5.0)
    two = ["172.16.12.1", "172.16.13.1"]
    assert fwd(eff) == {p: two for p in PREFIXES[10:]}


def test_a_speaker_restart_defers_again_and_keeps_forwarding_until_the_tables_are_in() -> None:
    r = drib()
    tables(r, (1, 2, 3), 1.0)
    for leaf in (1, 2, 3):
        r.on_update(eor(leaf), 1.0)
    drain(r, 1.0)
    before = r.forwarding()
    assert len(before) == len(PREFIXES)
    r.speaker_lost(10.0)  # ExaBGP died: every path stale, forwarding kept
    assert r.update_delay_active
    for leaf in (1, 2, 3):
        r.on_open(LEAVES[leaf].address, V4(f"10.0.0.{leaf}"))
        r.on_state(LEAVES[leaf].address, "up", 11.0)
    # leaf3 no longer has the first five prefixes; the rest come back
    eff = r.on_update(upd(1, *PREFIXES), 11.5) + r.on_update(upd(2, *PREFIXES), 11.5)
    eff += r.on_update(upd(3, *PREFIXES[5:]), 11.5)
    eff += r.on_update(eor(1), 12.0) + r.on_update(eor(2), 12.0)
    assert fwd(eff) == {} and r.forwarding() == before
    # BFD is never deferred: leaf2's forwarding goes at once
    eff = r.peer_bfd_down(LEAVES[2].address, 12.5)
    assert fwd(eff) == {p: ["172.16.11.1", "172.16.13.1"] for p in PREFIXES}
    eff = r.on_update(eor(3), 13.0) + drain(r, 13.0)
    assert not r.update_delay_active
    assert fwd(eff) == {p: ["172.16.11.1"] for p in PREFIXES[:5]}
    assert r.counters[UpdateDelayEnd.END_OF_RIB.counter] == 2


def test_originated_prefixes_are_advertised_during_the_deferral() -> None:
    r = drib(originated=(N("10.99.0.0/24"),))
    eff = r.initial_decisions()
    assert {str(e.peer) for e in eff if isinstance(e, Advertise)} == {
        str(n.address) for n in LEAVES.values()
    }
    assert r.update_delay_active


def test_no_deferral_when_off() -> None:
    r = drib(update_delay_s=0.0)
    assert not r.update_delay_active
    assert fwd(r.on_update(upd(1, PREFIXES[0]), 1.0)) == {PREFIXES[0]: ["172.16.11.1"]}
    assert r.neighbors_snapshot(1.0)[0]["update_delay"] is None
    assert ipaddress.ip_network(PREFIXES[0]) in r.forwarding()


def test_the_nhc_of_an_update_is_checked_once_but_counted_per_prefix() -> None:
    """An all-zero NHC next hop (FRR on eBGP IPv4) is accepted and counted per route."""
    value = nhc.Nhc.for_next_hop(
        ipaddress.IPv4Address("0.0.0.0"),
        nnhn=nhc.Nnhn(V4("10.0.0.1"), (V4("10.0.0.7"),)),
    ).encode_value()
    r = drib(role=Role.LOAD_BALANCER, update_delay_s=0.0)
    r.on_update(upd(1, *PREFIXES[:3], nhc_value=value), 1.0)
    assert r.counters["nhc_nh_unspecified"] == 3
    assert r.peers[LEAVES[1].address].counters["nhc_nh_unspecified"] == 3
    (nh,) = r.next_hops(N(PREFIXES[0]))
    assert nh.nnhn_status == "valid" and nh.nnh == (V4("10.0.0.7"),)


def test_a_neighbor_held_down_by_max_prefixes_is_not_waited_for() -> None:
    leaves = dict(LEAVES)
    leaves[3] = replace(LEAVES[3], max_prefixes=5, max_prefixes_restart_s=60.0)
    params = RibParams(
        V4("10.0.0.11"),
        65100,
        Role.HELPER,
        tuple(leaves.values()),
        update_coalesce_s=0.0,
        update_delay_s=DELAY,
        update_delay_establish_wait_s=WAIT,
    )
    r = Rib(params)
    for i, n in leaves.items():
        r.on_open(n.address, V4(f"10.0.0.{i}"))
        r.on_state(n.address, "up", 0.0)
    tables(r, (1, 2), 1.0)
    eff = r.on_update(upd(3, *PREFIXES), 1.0)
    assert [type(e) for e in eff] == [ResetPeer]  # over the limit: closed, its paths gone
    r.on_state(LEAVES[3].address, "down", 1.1)
    r.on_update(eor(1), 2.0)
    assert r.update_delay_active
    r.on_update(eor(2), 2.0)
    assert not r.update_delay_active  # leaf3 is held down: nothing to wait for
    assert fwd(drain(r, 2.0)) == {p: ["172.16.11.1", "172.16.12.1"] for p in PREFIXES}


# ---- the same state whatever the arrival pattern ------------------------------------------

_op = hs.tuples(
    hs.integers(1, 3),  # leaf
    hs.sampled_from(["announce", "withdraw", "bfd_down", "bfd_up", "down_up", "eor"]),
    hs.lists(hs.sampled_from(PREFIXES[:6]), min_size=1, max_size=4, unique=True),
    hs.integers(1, 3),  # AS-path length
    hs.floats(0.0, 0.08),  # gap to the previous event
)


@settings(max_examples=150, deadline=None)
@given(hs.lists(_op, max_size=25), hs.sampled_from([Role.HELPER, Role.BOTH]))
def test_the_deferral_ends_in_the_state_eager_selection_reaches(
    ops: list[tuple[int, str, list[str], int, float]], role: Role
) -> None:
    eager = drib(role=role, update_delay_s=0.0)
    deferred = drib(role=role, update_coalesce_s=0.05, flush_batch=2)
    drive(eager, ops)
    drive(deferred, ops)
    assert not deferred.update_delay_active and deferred.pending == 0
    assert deferred.forwarding() == eager.forwarding()
    assert sorted(map(repr, deferred.adj_rib_out())) == sorted(map(repr, eager.adj_rib_out()))
