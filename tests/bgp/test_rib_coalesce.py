"""UPDATE coalescing and path interning in the Clos RIB, in virtual time.

A quiet RIB selects an UPDATE at once; UPDATEs that follow within ``update_coalesce_s`` are
stored and selected together when the window ends (``next_deadline``/``on_timer``), in slices
of ``flush_batch`` prefixes. Session, BFD and End-of-RIB events are never delayed. Whatever
the arrival pattern, the state after the last window is the state without coalescing.
"""

from __future__ import annotations

import gc
import ipaddress

from hypothesis import given, settings
from hypothesis import strategies as hs

from glbd.bgp import exabgp_api as api
from glbd.bgp.rib import Rib
from glbd.bgp.ribtypes import NextHopsChanged, Role
from glbd.bgp.speaker import command_for
from tests.bgp.test_rib import LEAVES, V4, N, rib, upd

W = 0.05


def crib(role: Role = Role.BOTH, **kw: object) -> Rib:
    return rib(role, update_coalesce_s=W, **kw)


def changed(effects: list[object]) -> dict[str, list[str]]:
    return {
        str(e.prefix): [str(nh.peer) for nh in e.next_hops]
        for e in effects
        if isinstance(e, NextHopsChanged)
    }


def test_a_quiet_rib_selects_at_once_and_a_burst_waits_for_the_window() -> None:
    r = crib()
    first = r.on_update(upd(1, "10.9.0.0/24", as_path=(65001, 65009)), 10.0)
    assert changed(first) == {"10.9.0.0/24": ["172.16.11.1"]}  # no added latency
    assert r.on_update(upd(2, "10.9.0.0/24", as_path=(65002, 65009)), 10.01) == []
    assert r.on_update(upd(3, "10.9.0.0/24", as_path=(65003, 65009)), 10.02) == []
    assert r.pending == 1 and r.next_deadline() == 10.0 + W
    assert r.on_timer(10.04) == []  # not yet
    eff = r.on_timer(10.0 + W)
    # one event with the whole multipath set, not one per UPDATE
    assert changed(eff) == {"10.9.0.0/24": ["172.16.11.1", "172.16.12.1", "172.16.13.1"]}
    assert r.pending == 0 and r.next_deadline() is None
    # quiet again for a window: the next UPDATE goes at once
    eff = r.on_update(upd(3, withdraw=("10.9.0.0/24",)), 10.0 + 2 * W + 0.01)
    assert changed(eff) == {"10.9.0.0/24": ["172.16.11.1", "172.16.12.1"]}


def test_session_and_bfd_events_are_not_delayed_by_a_pending_window() -> None:
    r = crib()
    r.on_update(upd(1, "10.1.0.0/24", as_path=(65001, 65009)), 1.0)
    r.on_update(upd(2, "10.1.0.0/24", "10.2.0.0/24", as_path=(65002, 65009)), 1.01)
    assert r.pending == 2
    # BFD takes leaf2 down inside the window: its prefixes are selected now, with it gone
    eff = r.peer_bfd_down(LEAVES[2].address, 1.02)
    assert isinstance(command_for(eff[-1]), api.Teardown)
    assert changed(eff) == {}  # leaf2's paths were never selected, so nothing changes
    assert r.pending == 0 and r.next_deadline() is None
    assert [str(nh.peer) for nh in r.next_hops(N("10.1.0.0/24"))] == ["172.16.11.1"]
    assert r.next_hops(N("10.2.0.0/24")) == ()


def test_a_big_window_is_selected_in_slices() -> None:
    r = crib(flush_batch=3)
    r.on_update(upd(1, "10.0.0.0/24"), 1.0)
    prefixes = [f"10.0.{i}.0/24" for i in range(1, 8)]
    assert r.on_update(upd(1, *prefixes), 1.01) == []
    seen: dict[str, list[str]] = {}
    slices = 0
    now = 1.0 + W
    while r.next_deadline() is not None:
        d = r.next_deadline()
        assert d is not None and d <= now  # the rest is due at once
        eff = r.on_timer(now)
        assert 0 < len(changed(eff)) <= 3
        seen |= changed(eff)
        slices += 1
    assert slices == 3 and sorted(seen) == sorted(prefixes)


def test_paths_are_interned_and_freed() -> None:
    r = crib()
    r.on_update(upd(1, "10.1.0.0/24", "10.2.0.0/24", "10.3.0.0/24"), 1.0)
    r.on_update(upd(1, "10.4.0.0/24"), 1.01)  # another UPDATE, same attributes
    st = r.peers[LEAVES[1].address]
    paths = {id(p) for _prefix, p in st.paths()}
    assert len(paths) == 1 and st.n_paths == 4
    r.on_timer(2.0)
    views = {id(nh) for nhs in r.forwarding().values() for nh in nhs}
    assert len(views) == 1  # one forwarding view shared by the four prefixes
    r.on_update(upd(1, "10.1.0.0/24", "10.2.0.0/24", "10.3.0.0/24", "10.4.0.0/24",
                    as_path=(65001, 65001)), 3.0)  # fmt: skip
    gc.collect()
    assert r.interned_paths() == 1  # the old path went with its last prefix


def test_peer_removal_frees_its_slot_for_the_next_neighbor() -> None:
    r = crib()
    r.on_update(upd(3, "10.3.0.0/24"), 1.0)
    p = r.params
    new = type(LEAVES[3])(ipaddress.ip_address("172.16.14.1"), 65004,
                          ipaddress.ip_address("172.16.14.2"), "s1-l4")  # fmt: skip
    r.reconfigure(type(p)(p.router_id, p.local_as, p.role, (LEAVES[1], LEAVES[2], new),
                          update_coalesce_s=W))  # fmt: skip
    st4 = r.peers[new.address]
    assert st4.slot == 2 and st4.n_paths == 0 and not any(st4.paths())  # leaf3's old slot, empty
    assert r.next_hops(N("10.3.0.0/24")) == ()


# ---- the same state whatever the arrival pattern ------------------------------------------

_PREFIXES = [f"10.{i}.0.0/24" for i in range(6)]
_op = hs.tuples(
    hs.integers(1, 3),  # leaf
    hs.sampled_from(["announce", "withdraw", "bfd_down", "bfd_up", "down_up"]),
    hs.lists(hs.sampled_from(_PREFIXES), min_size=1, max_size=4, unique=True),
    hs.integers(1, 3),  # AS-path length
    hs.floats(0.0, 0.08),  # gap to the previous event
)


def eor(leaf: int) -> api.UpdateEvent:
    n = LEAVES[leaf]
    return api.UpdateEvent(
        n.address, n.local_address, n.remote_as, 65100, "receive", eor="ipv4 unicast"
    )


def drive(r: Rib, ops: list[tuple[int, str, list[str], int, float]]) -> None:
    """Replay (leaf, kind, prefixes, AS-path length, gap) events in virtual time, timers
    included, then run the timers out."""
    now = 100.0
    for leaf, kind, prefixes, plen, gap in ops:
        now += gap
        while (d := r.next_deadline()) is not None and d <= now:
            r.on_timer(d)
        n = LEAVES[leaf]
        if kind == "announce":
            r.on_update(upd(leaf, *prefixes, as_path=(n.remote_as,) * plen), now)
        elif kind == "withdraw":
            r.on_update(upd(leaf, withdraw=tuple(prefixes)), now)
        elif kind == "eor":
            r.on_update(eor(leaf), now)
        elif kind == "bfd_down":
            r.peer_bfd_down(n.address, now)
        elif kind == "bfd_up":
            r.peer_bfd_up(n.address, now)
        else:
            r.on_state(n.address, "down", now, "test")
            r.on_open(n.address, V4(f"10.0.0.{leaf}"))
            r.on_state(n.address, "up", now)
    while (d := r.next_deadline()) is not None:
        r.on_timer(d)


@settings(max_examples=150, deadline=None)
@given(hs.lists(_op, max_size=25), hs.sampled_from([Role.HELPER, Role.BOTH]))
def test_coalescing_ends_in_the_same_state_as_selecting_every_update(
    ops: list[tuple[int, str, list[str], int, float]], role: Role
) -> None:
    eager, lazy = rib(role), rib(role, update_coalesce_s=W, flush_batch=2)
    drive(eager, ops)
    drive(lazy, ops)
    assert lazy.pending == 0
    assert lazy.forwarding() == eager.forwarding()
    assert sorted(map(repr, lazy.adj_rib_out())) == sorted(map(repr, eager.adj_rib_out()))
    assert {a: s.n_paths for a, s in lazy.peers.items()} == {
        a: s.n_paths for a, s in eager.peers.items()
    }
