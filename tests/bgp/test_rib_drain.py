"""Drain (RFC 8326 graceful shutdown) in the Clos RIB, in virtual time: a drained router
re-advertises everything with GRACEFUL_SHUTDOWN and extra prepends, undrain restores it, and
paths a draining peer marks are least preferred and out of multipath while another exists."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rib_helpers import LEAVES, A, N, spine_rib, update_from

from glbd.bgp import exabgp_api as api
from glbd.bgp.rib import Rib
from glbd.bgp.ribtypes import (
    GRACEFUL_SHUTDOWN,
    Advertise,
    NextHopsChanged,
    Retract,
    Role,
)


def rib(**kw: object) -> Rib:
    return spine_rib(Role.BOTH, initial_decisions=True, **kw)


def upd(leaf: int, *prefixes: str, **kw: Any) -> api.UpdateEvent:
    return update_from(LEAVES[leaf], *prefixes, **kw)


def adverts(effects: list[object]) -> dict[tuple[str, str], Advertise]:
    return {(str(e.peer), str(e.prefix)): e for e in effects if isinstance(e, Advertise)}


def test_drain_readvertises_everything_with_gshut_and_prepends_then_undrain_restores() -> None:
    r = rib(originated=(N("10.11.0.0/24"),))
    r.on_update(upd(3, "10.200.0.0/24", communities=((65003, 7),)), 1.0)
    before = {(str(a.peer), str(a.prefix)): a for a in r.adj_rib_out()}
    assert len(before) == 5  # own prefix to 3 leaves, leaf3's prefix to leaves 1 and 2
    assert not r.drained

    eff = r.set_drain(True)
    assert r.drained
    assert not [e for e in eff if isinstance(e, Retract | NextHopsChanged)]  # nothing moves
    out = adverts(eff)
    assert set(out) == set(before)  # every advertisement re-sent, to the same peers
    own = out[("172.16.11.1", "10.11.0.0/24")]
    assert own.as_path == (65100, 65100, 65100, 65100)
    assert own.communities == (GRACEFUL_SHUTDOWN,)
    relayed = out[("172.16.11.1", "10.200.0.0/24")]
    assert relayed.as_path == (65100, 65100, 65100, 65100, 65003)
    assert relayed.communities == ((65003, 7), GRACEFUL_SHUTDOWN)
    assert relayed.nhc == before[("172.16.11.1", "10.200.0.0/24")].nhc
    assert r.set_drain(True) == []  # idempotent

    # a change while drained is advertised drained too
    eff = r.on_update(upd(3, "10.201.0.0/24"), 2.0)
    assert all(GRACEFUL_SHUTDOWN in a.communities for a in adverts(eff).values())

    eff = r.set_drain(False)
    back = adverts(eff)
    assert set(back) == set(before) | {
        ("172.16.11.1", "10.201.0.0/24"),
        ("172.16.12.1", "10.201.0.0/24"),
    }
    for key, a in before.items():
        assert back[key] == a
    assert r.counters["drain"] == 1 and r.counters["undrain"] == 1


def test_drain_prepend_is_configurable_and_reconfigure_applies_drain() -> None:
    r = rib(originated=(N("10.11.0.0/24"),), drain_prepend=0)
    eff, touched = r.reconfigure(replace(r.params, drain=True))
    assert not touched
    out = adverts(eff)
    assert out[("172.16.11.1", "10.11.0.0/24")].as_path == (65100,)
    assert out[("172.16.11.1", "10.11.0.0/24")].communities == (GRACEFUL_SHUTDOWN,)


def test_gshut_path_is_least_preferred_and_leaves_multipath() -> None:
    r = rib()
    r.on_update(upd(1, "10.200.0.0/24"), 1.0)
    eff = r.on_update(upd(2, "10.200.0.0/24"), 1.0)
    assert [str(nh.peer) for nh in r.next_hops(N("10.200.0.0/24"))] == [
        "172.16.11.1",
        "172.16.12.1",
    ]
    # leaf1 drains: its path carries 65535:0 (and a longer AS path would do the same, but
    # here it has not prepended: the community alone must move the traffic)
    eff = r.on_update(upd(1, "10.200.0.0/24", communities=(GRACEFUL_SHUTDOWN,)), 2.0)
    (fwd,) = [e for e in eff if isinstance(e, NextHopsChanged)]
    assert [str(nh.peer) for nh in fwd.next_hops] == ["172.16.12.1"]
    assert r.peers[A("172.16.11.1")].counters["graceful_shutdown_in"] == 1
    # it loses even to a longer AS path without the community
    r.on_update(upd(2, "10.200.0.0/24", as_path=(65002, 65002, 65002)), 3.0)
    assert [str(nh.peer) for nh in r.next_hops(N("10.200.0.0/24"))] == ["172.16.12.1"]
    # the other path goes: the draining peer's path is still used (drain is not shutdown)
    eff = r.on_update(
        api.UpdateEvent(
            A("172.16.12.1"),
            A("172.16.12.2"),
            65002,
            65100,
            "receive",
            api.PathAttributes("igp", (), 0, None, (), None, None),
            (),
            (("ipv4 unicast", N("10.200.0.0/24")),),
        ),
        4.0,
    )
    assert [str(nh.peer) for nh in r.next_hops(N("10.200.0.0/24"))] == ["172.16.11.1"]
    # two draining paths form a multipath set between themselves
    r.on_update(upd(3, "10.200.0.0/24", communities=(GRACEFUL_SHUTDOWN,)), 5.0)
    assert len(r.next_hops(N("10.200.0.0/24"))) == 2
