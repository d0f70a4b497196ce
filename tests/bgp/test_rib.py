"""Clos RIB core in virtual time: multipath, Adj-RIB-Out, NNHN origination and validation, BFD
strict mode, stale handling across an ExaBGP restart."""

from __future__ import annotations

from typing import Any

import pytest
from rib_helpers import LEAVES, V4, A, N, spine_rib, update_from

from glbd.base.reasons import ResetReason
from glbd.bgp import exabgp_api as api
from glbd.bgp import nhc
from glbd.bgp.rib import Rib
from glbd.bgp.ribtypes import (
    Advertise,
    NeighborParams,
    NextHopsChanged,
    PeerDown,
    PeerUp,
    ResetPeer,
    Retract,
    RibParams,
    Role,
    StaleTimerExpired,
)
from glbd.bgp.speaker import command_for


def rib(role: Role = Role.HELPER, **kw: object) -> Rib:
    return spine_rib(role, **kw)


def upd(leaf: int, *prefixes: str, **kw: Any) -> api.UpdateEvent:
    return update_from(LEAVES[leaf], *prefixes, **kw)


def cmds(effects: list[object]) -> list[api.Command]:
    """The RIB's decisions as the speaker adapter sends them to ExaBGP."""
    return [command_for(e) for e in effects if isinstance(e, Advertise | Retract | ResetPeer)]


def nnhn_of(cmd: api.Announce) -> tuple[str, list[str], str]:
    assert cmd.nhc is not None
    v = nhc.decode_value(cmd.nhc)
    assert v.nnhn is not None and v.other == () and v.bgpid is None
    return str(v.nnhn.nh_bgp_id), [str(i) for i in v.nnhn.nnh_ids], str(v.next_hop)


def test_helper_originates_nnhn_and_updates_it_when_multipath_changes() -> None:
    r = rib()
    eff = r.on_update(upd(3, "10.200.0.0/24"), 1.0)
    (fwd,) = [e for e in eff if isinstance(e, NextHopsChanged)]
    assert [str(nh.peer) for nh in fwd.next_hops] == ["172.16.13.1"]
    out = {str(c.neighbor): c for c in cmds(eff)}
    assert set(out) == {"172.16.11.1", "172.16.12.1"}  # never back to leaf3
    a = out["172.16.11.1"]
    assert isinstance(a, api.Announce)
    assert a.as_path == (65100, 65003) and a.next_hop == A("172.16.11.2")
    assert nnhn_of(a) == ("10.0.0.11", ["10.0.0.3"], "172.16.11.2")
    assert a.encode().endswith("attribute [ 0x27 0xc0 0x00010104ac100b02000200080a00000b0a000003 ]")

    # leaf2 joins the multipath set (anycast): the NNHN toward leaf1 is refreshed at once
    eff = r.on_update(upd(2, "10.200.0.0/24"), 2.0)
    out = {str(c.neighbor): c for c in cmds(eff)}
    a = out["172.16.11.1"]
    assert isinstance(a, api.Announce)
    assert nnhn_of(a) == ("10.0.0.11", ["10.0.0.2", "10.0.0.3"], "172.16.11.2")
    # leaf2 now contributes a path: the earlier announcement to it is withdrawn
    assert isinstance(out["172.16.12.1"], api.Withdraw)

    # leaf3 leaves: NNHN shrinks, leaf3 now gets leaf2's path
    eff = r.on_update(upd(3, withdraw=("10.200.0.0/24",)), 3.0)
    out = {str(c.neighbor): c for c in cmds(eff)}
    a = out["172.16.11.1"]
    assert isinstance(a, api.Announce)
    assert nnhn_of(a) == ("10.0.0.11", ["10.0.0.2"], "172.16.11.2")
    assert isinstance(out["172.16.13.1"], api.Announce)

    # last path gone: withdrawn everywhere, forwarding emptied
    eff = r.on_update(upd(2, withdraw=("10.200.0.0/24",)), 4.0)
    assert NextHopsChanged(N("10.200.0.0/24"), ()) in eff
    assert {type(c) for c in cmds(eff)} == {api.Withdraw}
    assert all(not st.adj_out for st in r.peers.values())


def test_one_nhc_per_prefix_not_per_update() -> None:
    """FRR's packing defect must not exist here: each prefix gets its own NNHN."""
    r = rib()
    r.on_update(upd(3, "10.200.0.0/24"), 1.0)
    eff = r.on_update(upd(2, "10.200.0.0/24", "10.202.0.0/24"), 2.0)
    to_leaf1 = {
        str(c.prefix): nnhn_of(c)[1]
        for c in cmds(eff)
        if isinstance(c, api.Announce) and str(c.neighbor) == "172.16.11.1"
    }
    assert to_leaf1 == {"10.200.0.0/24": ["10.0.0.2", "10.0.0.3"], "10.202.0.0/24": ["10.0.0.2"]}


def test_received_nhc_never_relayed_and_unknown_tlvs_dropped() -> None:
    r = rib()
    received = nhc.Nhc(
        1,
        1,
        V4("172.16.13.1"),
        nhc.Nnhn(V4("10.0.0.3"), (V4("10.9.9.9"),)),
        other=(nhc.RawTlv(0x99, b"\x01"),),
    ).encode_value()
    eff = r.on_update(upd(3, "10.203.0.0/24", nhc_value=received), 1.0)
    for c in cmds(eff):
        assert isinstance(c, api.Announce)
        assert nnhn_of(c)[1] == ["10.0.0.3"]


def test_load_balancer_does_not_originate_nnhn() -> None:
    r = rib(Role.LOAD_BALANCER)
    eff = r.on_update(upd(3, "10.203.0.0/24"), 1.0)
    assert all(isinstance(c, api.Announce) and c.nhc is None for c in cmds(eff))


def test_own_as_loop_rejected() -> None:
    r = rib()
    eff = r.on_update(upd(1, "10.9.0.0/24", as_path=(65001, 65100, 65002)), 1.0)
    assert eff == []
    assert r.peers[LEAVES[1].address].counters["rejected_as_loop"] == 1


def test_no_advertisement_to_peer_whose_as_is_in_path() -> None:
    r = rib()
    eff = r.on_update(upd(1, "10.9.0.0/24", as_path=(65001, 65002)), 1.0)
    assert [str(c.neighbor) for c in cmds(eff)] == ["172.16.13.1"]


def test_multipath_relax_and_path_length() -> None:
    r = rib(Role.BOTH, multipath_relax=False)
    r.on_update(upd(2, "10.5.0.0/24", as_path=(65002, 65009)), 1.0)
    eff = r.on_update(upd(3, "10.5.0.0/24", as_path=(65003, 65009)), 1.0)
    # same length, different neighbor AS, no relax: one next hop (lowest BGP ID)
    assert [str(nh.peer) for nh in r.next_hops(N("10.5.0.0/24"))] == ["172.16.12.1"]
    assert not [e for e in eff if isinstance(e, NextHopsChanged)]
    r2 = rib(Role.BOTH)
    r2.on_update(upd(2, "10.5.0.0/24", as_path=(65002, 65009)), 1.0)
    r2.on_update(upd(3, "10.5.0.0/24", as_path=(65003, 65009)), 1.0)
    assert len(r2.next_hops(N("10.5.0.0/24"))) == 2
    # a shorter path wins alone
    r2.on_update(upd(1, "10.5.0.0/24", as_path=(65001,)), 1.0)
    assert [str(nh.peer) for nh in r2.next_hops(N("10.5.0.0/24"))] == ["172.16.11.1"]


def test_originated_prefixes() -> None:
    params = RibParams(
        V4("10.0.0.11"), 65100, Role.HELPER, tuple(LEAVES.values()), (N("10.11.0.0/24"),)
    )
    r = Rib(params)
    eff = r.initial_decisions()
    assert sorted(str(c.neighbor) for c in cmds(eff)) == [str(n.address) for n in LEAVES.values()]
    assert all(
        isinstance(c, api.Announce) and c.as_path == (65100,) and c.nhc is None for c in cmds(eff)
    )
    assert r.next_hops(N("10.11.0.0/24")) == ()
    eff = r.set_originated([])
    assert {type(c) for c in cmds(eff)} == {api.Withdraw}


# -- load-balancer validation -----------------------------------------------------------------


def lb_rib(**kw: object) -> Rib:
    return rib(Role.LOAD_BALANCER, **kw)


def nhc_from(nh: str, first: str, *ids: str) -> bytes:
    return nhc.Nhc.for_next_hop(
        nh, nnhn=nhc.Nnhn(V4(first), tuple(V4(i) for i in ids))
    ).encode_value()


@pytest.mark.parametrize(
    ("value", "strict", "nnh", "status"),
    [
        (
            nhc_from("172.16.11.1", "10.0.0.1", "10.0.0.7", "10.0.0.8"),
            False,
            ["10.0.0.7", "10.0.0.8"],
            "valid",
        ),
        # FRR 10.x: NH 0.0.0.0 accepted by default, rejected in strict mode
        (nhc_from("0.0.0.0", "10.0.0.1", "10.0.0.7"), False, ["10.0.0.7"], "valid"),
        (nhc_from("0.0.0.0", "10.0.0.1", "10.0.0.7"), True, None, "nhc_nh_unspecified_rejected"),
        # FRR 8.4 spine forwarding a leaf's NHC unchanged: the header names the old next hop
        (nhc_from("172.16.99.1", "10.0.0.1", "10.0.0.7"), False, None, "nhc_nh_mismatch"),
        # relayed NNHN: its Next-hop BGP ID is someone else's
        (nhc_from("172.16.11.1", "10.0.0.99", "10.0.0.7"), False, None, "nnhn_nh_bgp_id_mismatch"),
        (bytes.fromhex("00010104ac100b01000200"), False, None, "nhc_malformed_trailing_bytes"),
        (
            bytes.fromhex("00010104ac100b010002000a0a0000010a0000070a00"),
            False,
            None,
            "nnhn_discarded",
        ),
        (bytes.fromhex("00010104ac100b01000300040a000001"), False, None, "nnhn_absent"),
    ],
)
def test_nnhn_validation(value: bytes, strict: bool, nnh: list[str] | None, status: str) -> None:
    r = lb_rib(nnhn_strict_next_hop=strict)
    r.on_update(upd(1, "10.7.0.0/24", nhc_value=value), 1.0)
    (nh,) = r.next_hops(N("10.7.0.0/24"))
    assert nh.nnhn_status == status
    assert (None if nh.nnh is None else [str(i) for i in nh.nnh]) == nnh
    assert nh.peer_bgp_id == V4("10.0.0.1") and nh.interface == "s1-l1"
    if status not in ("valid",):
        assert r.counters[status] == 1


def test_unspecified_next_hop_is_counted() -> None:
    r = lb_rib()
    r.on_update(upd(1, "10.7.0.0/24", nhc_value=nhc_from("0.0.0.0", "10.0.0.1", "10.0.0.7")), 1.0)
    assert r.counters["nhc_nh_unspecified"] == 1


def test_packed_update_nnhn_only_trusted_for_first_prefix() -> None:
    value = nhc_from("0.0.0.0", "10.0.0.1", "10.0.0.2", "10.0.0.3")
    r = lb_rib()
    r.on_update(upd(1, "10.200.0.0/24", "10.202.0.0/24", nhc_value=value), 1.0)
    assert r.next_hops(N("10.200.0.0/24"))[0].nnhn_status == "valid"
    assert r.next_hops(N("10.202.0.0/24"))[0].nnh is None
    assert r.next_hops(N("10.202.0.0/24"))[0].nnhn_status == "nnhn_packed_untrusted"
    r2 = lb_rib(trust_packed_nnhn=True)
    r2.on_update(upd(1, "10.200.0.0/24", "10.202.0.0/24", nhc_value=value), 1.0)
    assert r2.next_hops(N("10.202.0.0/24"))[0].nnhn_status == "valid"


def test_nnhn_change_alone_emits_next_hops_changed() -> None:
    r = lb_rib()
    r.on_update(
        upd(1, "10.7.0.0/24", nhc_value=nhc_from("172.16.11.1", "10.0.0.1", "10.0.0.7")), 1.0
    )
    eff = r.on_update(
        upd(
            1, "10.7.0.0/24", nhc_value=nhc_from("172.16.11.1", "10.0.0.1", "10.0.0.7", "10.0.0.8")
        ),
        2.0,
    )
    (ch,) = [e for e in eff if isinstance(e, NextHopsChanged)]
    assert ch.next_hops[0].nnh == (V4("10.0.0.7"), V4("10.0.0.8"))


# -- sessions, BFD, stale ---------------------------------------------------------------------


def test_peer_down_withdraws() -> None:
    r = rib()
    r.on_update(upd(3, "10.203.0.0/24"), 1.0)
    eff = r.on_state(LEAVES[3].address, "down", 2.0, "hold timer")
    assert eff[0] == PeerDown(LEAVES[3].address, "hold timer")
    assert NextHopsChanged(N("10.203.0.0/24"), ()) in eff
    assert r.neighbors_snapshot(2.0)[2]["last_down_reason"] == "hold timer"


def test_bfd_down_strict_mode() -> None:
    r = rib(Role.BOTH)
    r.on_update(upd(2, "10.200.0.0/24"), 1.0)
    r.on_update(upd(3, "10.200.0.0/24"), 1.0)
    eff = r.peer_bfd_down(LEAVES[3].address, 2.0)
    # forwarding change first, then BGP commands, teardown last-ish with subcode 10
    kinds = [type(e).__name__ for e in eff]
    assert kinds[0] == "NextHopsChanged"
    assert ResetPeer(LEAVES[3].address, ResetReason.BFD_DOWN) in eff
    assert api.Teardown(LEAVES[3].address, 10) in cmds(eff)
    assert kinds.index("NextHopsChanged") < kinds.index("ResetPeer")
    assert [str(nh.peer) for nh in r.next_hops(N("10.200.0.0/24"))] == ["172.16.12.1"]
    # the session flaps and comes back while BFD is still down: its paths stay unused
    r.on_state(LEAVES[3].address, "down", 2.1)
    r.on_state(LEAVES[3].address, "up", 3.0)
    r.on_update(upd(3, "10.200.0.0/24"), 3.1)
    assert len(r.next_hops(N("10.200.0.0/24"))) == 1
    eff = r.peer_bfd_up(LEAVES[3].address, 4.0)
    assert len(r.next_hops(N("10.200.0.0/24"))) == 2
    assert r.peer_bfd_admin_down(LEAVES[2].address, 5.0) == []
    assert len(r.next_hops(N("10.200.0.0/24"))) == 2


def test_speaker_restart_keeps_forwarding_until_eor() -> None:
    r = rib(Role.BOTH, stale_timer_s=30.0)
    r.on_update(upd(2, "10.202.0.0/24", "10.200.0.0/24"), 1.0)
    r.on_update(upd(3, "10.203.0.0/24", "10.200.0.0/24"), 1.0)
    before = r.forwarding()
    assert r.speaker_lost(10.0) == []
    assert r.next_deadline() == 40.0
    # new ExaBGP: churn, then sessions back, routes refreshed (leaf3 lost 10.200 meanwhile)
    seen: list[object] = []
    for leaf in (2, 3):
        seen += r.on_state(LEAVES[leaf].address, "connected", 11.0)
        seen += r.on_state(LEAVES[leaf].address, "down", 11.0, "closing connection")
        seen += r.on_open(LEAVES[leaf].address, V4(f"10.0.0.{leaf}"))
        seen += r.on_state(LEAVES[leaf].address, "up", 11.5)
    seen += r.on_update(upd(2, "10.202.0.0/24", "10.200.0.0/24"), 12.0)
    seen += r.on_update(upd(3, "10.203.0.0/24"), 12.0)
    assert not [e for e in seen if isinstance(e, NextHopsChanged)]
    assert r.forwarding() == before
    eor = api.UpdateEvent(
        LEAVES[3].address, LEAVES[3].local_address, 65003, 65100, "receive", eor="ipv4 unicast"
    )
    eff = r.on_update(eor, 12.5)
    (ch,) = [e for e in eff if isinstance(e, NextHopsChanged)]
    assert ch.prefix == N("10.200.0.0/24") and len(ch.next_hops) == 1
    # leaf2 never sends End-of-RIB: its unrefreshed paths go at the stale timer (none here)
    assert r.on_timer(39.0) == []
    eff = r.on_timer(40.0)
    assert isinstance(eff[0], StaleTimerExpired) and eff[0].prefixes_removed == 0
    assert r.next_deadline() is None


def test_stale_timer_removes_unrefreshed() -> None:
    r = rib(Role.BOTH, stale_timer_s=5.0)
    r.on_update(upd(2, "10.202.0.0/24"), 1.0)
    r.speaker_lost(2.0)
    eff = r.on_timer(7.0)
    assert eff[0] == StaleTimerExpired(tuple(LEAVES[i].address for i in (2,)), 1)
    assert NextHopsChanged(N("10.202.0.0/24"), ()) in eff


def test_snapshots() -> None:
    r = rib(Role.BOTH)
    r.on_update(upd(2, "10.200.0.0/24"), 1.0)
    n = r.neighbors_snapshot(3.0)
    assert n[1]["bgp_id"] == "10.0.0.2" and n[1]["state"] == "up" and n[1]["prefixes_in"] == 1
    assert n[1]["uptime_s"] == 3.0
    (row,) = r.routes_snapshot()
    assert row["prefix"] == "10.200.0.0/24"
    assert row["next_hops"][0]["peer_bgp_id"] == "10.0.0.2"
    assert sorted(row["advertised_to"]) == ["172.16.11.1", "172.16.13.1"]


def test_routes_are_read_as_the_listing_is_taken() -> None:
    """A streamed ``glbctl routes`` builds each row when it is taken: a prefix withdrawn
    after the listing started is skipped, a changed one shows its state when reached."""
    r = rib(Role.BOTH)
    r.on_update(upd(2, "10.200.0.0/24", "10.200.1.0/24", "10.200.2.0/24"), 1.0)
    rows = r.iter_routes()
    assert next(rows)["prefix"] == "10.200.0.0/24"
    r.on_update(upd(2, withdraw=("10.200.1.0/24",)), 2.0)
    r.on_update(upd(3, "10.200.2.0/24"), 2.0)
    rest = list(rows)
    assert [x["prefix"] for x in rest] == ["10.200.2.0/24"]
    assert rest[0]["multipath"] == 2
    wanted = r.iter_routes(lambda p: p.prefixlen == 24 and p.network_address.packed[2] == 2)
    assert [x["prefix"] for x in wanted] == ["10.200.2.0/24"]


def test_unknown_peer_counted() -> None:
    r = rib()
    ev = api.UpdateEvent(A("9.9.9.9"), A("9.9.9.8"), 1, 65100, "receive")
    assert r.on_update(ev, 1.0) == []
    assert r.counters["unknown_peer"] == 1
    assert PeerUp(LEAVES[1].address, V4("10.0.0.1")) in rib().on_state(LEAVES[1].address, "up", 0.0)


def test_reconfigure_neighbors_and_originated() -> None:
    r = rib(Role.BOTH)
    r.on_update(upd(3, "10.203.0.0/24"), 1.0)
    p = r.params
    new_leaf = NeighborParams(A("172.16.14.1"), 65004, A("172.16.14.2"), "s1-l4")
    params = RibParams(
        p.router_id,
        p.local_as,
        p.role,
        (LEAVES[1], LEAVES[2], new_leaf),  # leaf3 removed, leaf4 added
        (N("10.11.0.0/24"),),
    )
    eff, touched = r.reconfigure(params)
    assert touched == {A("172.16.14.1")}
    assert NextHopsChanged(N("10.203.0.0/24"), ()) in eff
    out = [(str(c.neighbor), str(c.prefix), type(c).__name__) for c in cmds(eff)]
    assert ("172.16.14.1", "10.11.0.0/24", "Announce") in out
    assert ("172.16.11.1", "10.203.0.0/24", "Withdraw") in out
    assert not [o for o in out if o[0] == "172.16.13.1"]  # removed: ExaBGP drops it itself
    with pytest.raises(ValueError):
        r.reconfigure(RibParams(p.router_id, 65999, p.role, p.neighbors))


def test_end_of_rib_sweeps_only_its_family() -> None:
    r = rib(Role.BOTH, stale_timer_s=30.0)
    n = LEAVES[2]
    v6 = api.UpdateEvent(
        n.address, n.local_address, 65002, 65100, "receive",
        api.PathAttributes("igp", (65002,), 1),
        (api.RouteAnnounced("ipv6 unicast", A("2001:db8::2"), N("2001:db8:2::/48")),),
    )  # fmt: skip
    r.on_update(v6, 1.0)
    r.on_update(upd(2, "10.202.0.0/24"), 1.0)
    r.speaker_lost(2.0)
    r.on_open(n.address, V4("10.0.0.2"))
    r.on_state(n.address, "up", 3.0)
    r.on_update(upd(2, "10.202.0.0/24"), 3.1)
    eor4 = api.UpdateEvent(n.address, n.local_address, 65002, 65100, "receive", eor="ipv4 unicast")
    assert r.on_update(eor4, 3.2) == []
    assert r.peers[n.address].stale  # the IPv6 path waits for its own End-of-RIB
    eor6 = api.UpdateEvent(n.address, n.local_address, 65002, 65100, "receive", eor="ipv6 unicast")
    eff = r.on_update(eor6, 3.3)
    assert NextHopsChanged(N("2001:db8:2::/48"), ()) in eff
    assert not r.peers[n.address].stale and r.next_deadline() is None


def test_session_failing_after_restart_drops_stale_paths_too() -> None:
    r = rib(Role.BOTH, stale_timer_s=30.0)
    r.on_update(upd(2, "10.202.0.0/24", "10.212.0.0/24"), 1.0)
    r.speaker_lost(2.0)
    n = LEAVES[2].address
    assert r.on_state(n, "down", 2.5, "closing connection") == []  # churn before up
    r.on_state(n, "up", 3.0)
    r.on_update(upd(2, "10.202.0.0/24"), 3.1)
    eff = r.on_state(n, "down", 4.0, "hold timer expired")
    gone = {e.prefix for e in eff if isinstance(e, NextHopsChanged) and not e.next_hops}
    assert gone == {N("10.202.0.0/24"), N("10.212.0.0/24")}
    assert not r.peers[n].stale


def test_rib_decides_the_speaker_adapter_writes_exabgp_commands() -> None:
    """The table returns its own decisions; only glbd.bgp.speaker knows ExaBGP's commands."""
    r = rib(Role.BOTH)
    eff = r.on_update(upd(3, "10.200.0.0/24"), 1.0)
    eff += r.on_update(upd(3, withdraw=("10.200.0.0/24",)), 2.0)
    eff += r.peer_bfd_down(LEAVES[2].address, 3.0)
    decisions = [e for e in eff if isinstance(e, Advertise | Retract | ResetPeer)]
    assert {type(d) for d in decisions} == {Advertise, Retract, ResetPeer}
    assert not [e for e in eff if isinstance(e, api.Announce | api.Withdraw | api.Teardown)]
    adv = next(d for d in decisions if isinstance(d, Advertise))
    cmd = command_for(adv)
    assert isinstance(cmd, api.Announce)
    assert (cmd.neighbor, cmd.prefix, cmd.next_hop, cmd.as_path, cmd.nhc) == (
        adv.peer,
        adv.prefix,
        adv.next_hop,
        adv.as_path,
        adv.nhc,
    )
    ret = next(d for d in decisions if isinstance(d, Retract))
    assert command_for(ret) == api.Withdraw(ret.peer, ret.prefix, ret.next_hop)
