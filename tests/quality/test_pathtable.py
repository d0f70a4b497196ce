"""Path-quality table: profiles, compound NNH, parallel links, fallback, guard, WCMP."""

from __future__ import annotations

import ipaddress
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from glbd.bgp import ribtypes as rib
from glbd.bgp.ribtypes import Role
from glbd.quality.pathchanges import Changes
from glbd.quality.pathmodel import LocalLink, NextHop, PathTableParams, RemoteLink
from glbd.quality.pathprofile import profile_key
from glbd.quality.pathtable import PathTable
from heartbeat import wire

S = [wire.node_id(f"10.0.0.{i}") for i in range(1, 5)]  # spines (helpers)
L2, L3 = wire.node_id("10.1.0.2"), wire.node_id("10.1.0.3")  # destination leaves
NH = [NextHop(S[i], f"198.18.{i}.0", f"eth{i + 1}") for i in range(4)]
G = 100_000  # 100G


def table(**kw: object) -> PathTable:
    t = PathTable(PathTableParams(**kw))  # type: ignore[arg-type]
    for nh in NH:
        t.set_local(nh.ifname or "", LocalLink(7, False, G))
    return t


def to_leaf(leaf: int, nhs: list[NextHop] = NH) -> dict[NextHop, frozenset[int] | None]:
    return {nh: frozenset({leaf}) for nh in nhs}


def all_remote(t: PathTable, band: int = 7) -> None:
    for s in S:
        t.set_remote(s, [RemoteLink(L2, 1, band, False, G), RemoteLink(L3, 2, band, False, G)])


def w(t: PathTable, prefix: str) -> list[int]:
    key = t.profile_of(prefix)
    assert key is not None
    ws = t.weights(key)
    return [ws[nh].value for nh in NH if nh in ws]


def src(t: PathTable, prefix: str) -> list[str]:
    key = t.profile_of(prefix)
    assert key is not None
    return [t.weights(key)[nh].source for nh in NH]


def test_profiles_group_prefixes_and_keys_are_stable() -> None:
    t = table()
    c1 = t.set_prefix("10.2.0.0/24", to_leaf(L2))
    c2 = t.set_prefix("10.2.1.0/24", to_leaf(L2))
    c3 = t.set_prefix("10.3.0.0/24", to_leaf(L3))
    k2, k3 = t.profile_of("10.2.0.0/24"), t.profile_of("10.3.0.0/24")
    assert k2 == t.profile_of("10.2.1.0/24") != k3
    assert c1.updated == {k2} and c2.updated == frozenset() and c2.prefixes == {"10.2.1.0/24"}
    assert c3.updated == {k3}
    assert k2 == profile_key(dict(reversed(list(to_leaf(L2).items()))))  # order-free, stable
    assert k2 is not None and k2.startswith("pf-") and len(k2) == 19
    # NNH set is part of the profile: same next hops, missing NNHN -> another profile
    t.set_prefix("10.9.0.0/24", dict.fromkeys(NH))
    assert t.profile_of("10.9.0.0/24") not in (k2, k3)
    # last prefix leaving a profile removes it
    ch = t.remove_prefix("10.3.0.0/24")
    assert ch.removed == {k3} and k3 not in t.profiles()


def test_glb_bottleneck_and_incremental_recompute() -> None:
    t = table()
    all_remote(t)
    t.set_prefix("p2", to_leaf(L2))
    t.set_prefix("p3", to_leaf(L3))
    assert w(t, "p2") == [255] * 4 and src(t, "p2") == ["glb"] * 4
    before = t.recomputes
    ch = t.set_remote(S[0], [RemoteLink(L2, 1, 2, False, G), RemoteLink(L3, 2, 7, False, G)])
    assert ch.updated == {t.profile_of("p2")}
    assert t.recomputes == before + 1  # only the profile behind spine 1 -> leaf 2
    assert w(t, "p2") == [round(3 / 27 * 255), 255, 255, 255]
    wi = t.weights(t.profile_of("p2") or "")[NH[0]].inputs
    assert (wi.local_band, wi.remote_quality, wi.quality, wi.remote_status) == (7, 2.0, 2.0, "ok")
    # local quality is the bottleneck the other way round
    ch = t.set_local("eth2", LocalLink(1, False, G))
    assert ch.updated == {t.profile_of("p2"), t.profile_of("p3")}
    assert w(t, "p3")[1] == round(2 / 27 * 255)
    # nothing changed -> nothing recomputed
    before = t.recomputes
    assert not t.set_local("eth2", LocalLink(1, False, G))
    assert t.recomputes == before


def test_remote_link_down_zeroes_only_profiles_behind_it() -> None:
    t = table()
    all_remote(t)
    t.set_prefix("p2", to_leaf(L2))
    t.set_prefix("p3", to_leaf(L3))
    t.set_remote(S[2], [RemoteLink(L2, 1, 0, True, G), RemoteLink(L3, 2, 7, False, G)])
    assert w(t, "p2") == [255, 255, 0, 255]
    assert w(t, "p3") == [255] * 4
    assert t.weights(t.profile_of("p2") or "")[NH[2]].inputs.remote_status == "down"


def test_never_all_zero() -> None:
    t = table()
    all_remote(t)
    t.set_prefix("p2", to_leaf(L2))
    for s in S:
        t.set_remote(s, [RemoteLink(L2, 1, 0, True, G)])
    ws = t.weights(t.profile_of("p2") or "")
    assert [x.value for x in ws.values()] == [1, 1, 1, 1]
    assert all(x.inputs.guard for x in ws.values())


def test_dlb_fallback_when_remote_unknown() -> None:
    t = table()
    all_remote(t, band=0)
    t.set_local("eth1", LocalLink(3, False, G))
    t.set_prefix("nnhn-missing", {nh: None for nh in NH})
    assert src(t, "nnhn-missing") == ["dlb"] * 4
    assert w(t, "nnhn-missing") == [round(5 / 27 * 255), 255, 255, 255]
    t.set_prefix("p2", to_leaf(L2))
    assert src(t, "p2") == ["glb"] * 4
    ch = t.set_remote(S[1], None)  # heartbeats of spine 2 expired: unknown, not good
    assert ch.updated == {t.profile_of("p2")}
    assert src(t, "p2") == ["glb", "dlb", "glb", "glb"]
    wi = t.weights(t.profile_of("p2") or "")[NH[1]].inputs
    assert wi.remote_status == "no_heartbeat" and wi.remote_quality is None
    # spine 3 knows nothing about leaf 2: NNH not reported -> fallback too
    t.set_remote(S[2], [RemoteLink(L3, 2, 7, False, G)])
    assert src(t, "p2")[2] == "dlb"
    assert t.weights(t.profile_of("p2") or "")[NH[2]].inputs.remote_status == "nnh_not_reported"


def test_static_when_nothing_is_known() -> None:
    t = PathTable()
    t.set_prefix("p", to_leaf(L2))
    assert src(t, "p") == ["static"] * 4 and w(t, "p") == [255] * 4


def test_compound_quality_for_several_nnh() -> None:
    t = table()
    anycast = {nh: frozenset({L2, L3}) for nh in NH}
    for s in S:
        t.set_remote(s, [RemoteLink(L2, 1, 7, False, G), RemoteLink(L3, 2, 7, False, G)])
    t.set_remote(S[0], [RemoteLink(L2, 1, 7, False, G), RemoteLink(L3, 2, 1, False, G)])
    t.set_remote(S[1], [RemoteLink(L2, 1, 7, False, G), RemoteLink(L3, 2, 0, True, G)])
    t.set_prefix("any", anycast)
    ws = t.weights(t.profile_of("any") or "")
    assert ws[NH[0]].inputs.remote_quality == 4.0  # mean of 7 and 1 over equal capacity
    assert ws[NH[1]].inputs.remote_quality == 7.0 and ws[NH[1]].inputs.remote_capacity_mbps == G
    assert ws[NH[1]].value > 0  # one of two NNHs down is not "down"
    assert ws[NH[2]].inputs.remote_capacity_mbps == 2 * G


def test_parallel_links_are_distinct_and_capacity_aware() -> None:
    t = table()
    for nh in NH:  # big local links: the spine->leaf links are the bottleneck
        t.set_local(nh.ifname or "", LocalLink(7, False, 4 * G))
    for s in S:
        t.set_remote(s, [RemoteLink(L2, 1, 7, False, G), RemoteLink(L2, 2, 7, False, G)])
    t.set_prefix("p2", to_leaf(L2))
    assert w(t, "p2") == [255] * 4
    t.set_remote(S[0], [RemoteLink(L2, 1, 7, False, G), RemoteLink(L2, 2, 0, True, G)])
    assert w(t, "p2") == [128, 255, 255, 255]  # half the parallel set failed: half the share


def test_capacity_aware_local_and_parallel_local_links_share_the_spine() -> None:
    t = table()
    t.set_local("eth2", LocalLink(7, False, 4 * G))
    t.set_prefix("dlb", {nh: None for nh in NH})
    assert w(t, "dlb") == [64, 255, 64, 64]
    t0 = table(capacity_aware=False)
    t0.set_local("eth2", LocalLink(7, False, 4 * G))
    t0.set_prefix("dlb", {nh: None for nh in NH})
    assert w(t0, "dlb") == [255] * 4
    # two local links to the same spine split that spine's downstream capacity
    t2 = table()
    par = NextHop(S[0], "198.18.9.0", "eth9")
    t2.set_local("eth9", LocalLink(7, False, G))
    for s in S:
        t2.set_remote(s, [RemoteLink(L2, 1, 7, False, G)])
    t2.set_prefix("p", to_leaf(L2, [*NH, par]))
    ws = t2.weights(t2.profile_of("p") or "")
    assert ws[NH[0]].value == ws[par].value == 128 and ws[NH[1]].value == 255


def test_helper_role_ignores_remote() -> None:
    t = table(role=Role.HELPER)
    assert not t.set_remote(S[0], [RemoteLink(L2, 1, 0, True, G)])
    t.set_prefix("p2", to_leaf(L2))
    assert src(t, "p2") == ["dlb"] * 4
    assert t.weights(t.profile_of("p2") or "")[NH[0]].inputs.remote_status == "not_load_balancer"


def test_each_call_returns_its_own_changes() -> None:
    t = table()
    all_remote(t)
    first = t.set_prefix("p2", to_leaf(L2)) | t.set_prefix("p3", to_leaf(L3))
    assert first.updated == {t.profile_of("p2"), t.profile_of("p3")}
    ch = t.set_remote(S[0], [RemoteLink(L2, 1, 3, False, G), RemoteLink(L3, 2, 7, False, G)])
    ch = ch | t.remove_prefix("p3")
    assert ch.updated == {t.profile_of("p2")} and len(ch.removed) == 1 and ch.prefixes == {"p3"}
    assert t.remove_prefix("p3") == Changes()


def test_rib_event_and_json() -> None:
    t = table()
    all_remote(t)
    nhs = tuple(
        rib.NextHop(
            ipaddress.ip_address(nh.address),
            ipaddress.IPv4Address(nh.bgp_id),
            ipaddress.ip_address(nh.address),
            nh.ifname,
            (ipaddress.IPv4Address(L2),),
            "valid",
        )
        for nh in NH
    )
    ch = t.on_next_hops_changed(rib.NextHopsChanged(ipaddress.ip_network("10.2.0.0/24"), nhs))
    key = t.profile_of("10.2.0.0/24")
    assert ch.updated == {key} and key == profile_key(to_leaf(L2))
    json.dumps(t.to_dict())
    json.dumps(t.profiles_dict())
    d = t.profile_dict(key or "")
    assert d is not None and d["next_hops"][0]["weight"]["source"] == "glb"
    t.on_next_hops_changed(rib.NextHopsChanged(ipaddress.ip_network("10.2.0.0/24"), ()))
    assert t.profile_of("10.2.0.0/24") is None


@given(st.lists(st.floats(0, 7), min_size=2, max_size=2))
@settings(max_examples=100, deadline=None)
def test_weight_is_monotone_in_quality(qs: list[float]) -> None:
    from glbd.quality.pathmodel import DEFAULT_WEIGHT_TABLE
    from glbd.quality.pathweight import _interp

    a, b = sorted(qs)
    assert _interp(DEFAULT_WEIGHT_TABLE, a) <= _interp(DEFAULT_WEIGHT_TABLE, b)


def test_mean_combine() -> None:
    t = table(combine="mean")
    all_remote(t)
    t.set_local("eth1", LocalLink(3, False, G))
    t.set_prefix("p2", to_leaf(L2))
    assert t.weights(t.profile_of("p2") or "")[NH[0]].inputs.quality == 5.0


def test_heartbeat_entries_fast_path_matches_generic() -> None:
    ents = [wire.Entry(L2, 1, G, 3), wire.Entry(L2, 2, G, 0, wire.ENTRY_FLAG_DOWN)]
    t1, t2 = table(), table()
    for t in (t1, t2):
        t.set_prefix("p2", to_leaf(L2))
    t1.set_remote(S[0], wire.Entries(ents))
    t2.set_remote(S[0], list(ents))
    assert t1.to_dict() == t2.to_dict()
    assert not t1.set_remote(S[0], wire.Entries(ents))  # same snapshot: nothing to do


# --- weights with memory (function 6) ---------------------------------------------------------


def set_l2(t: PathTable, spine: int, band: int) -> Changes:
    """Spine ``spine``'s link to leaf 2 at ``band`` (its link to leaf 3 idle)."""
    return t.set_remote(
        S[spine], [RemoteLink(L2, 1, band, False, G), RemoteLink(L3, 2, 7, False, G)]
    )


def test_memory_holds_a_downstream_penalty_while_the_link_stays_busy() -> None:
    t = table()
    all_remote(t)
    t.set_prefix("p2", to_leaf(L2))
    # a hotspot on spine 1 -> leaf 2 before any traffic of ours: band 7 -> 5 -> 4
    set_l2(t, 0, 5)
    set_l2(t, 0, 4)
    assert w(t, "p2") == [round(8 / 27 * 255), 255, 255, 255]  # as the stateless table
    # our traffic arrives: every downlink into leaf 2 gets busy, the bands flatten (all 3);
    # the links load one band at a time, so no link is ever two bands behind another
    for band in (6, 5, 4, 3):
        for s in (1, 2, 3):
            set_l2(t, s, band)
    set_l2(t, 0, 3)
    # stateless weights would be equal again (255 x 4); the memory keeps spine 1 down
    assert w(t, "p2") == [round(8 / 27 * 255), 255, 255, 255]
    wi = t.weights(t.profile_of("p2") or "")[NH[0]].inputs
    assert wi.raw == wi.raw and round(wi.memory, 3) == round(8 / 27, 3)
    # the other prefix (leaf 3) never saw a penalty
    t.set_prefix("p3", to_leaf(L3))
    assert w(t, "p3") == [255] * 4
    # one band of wobble is inside the dead zone: nothing more is learned from it
    set_l2(t, 0, 2)
    set_l2(t, 0, 3)
    assert w(t, "p2")[0] == round(8 / 27 * 255)
    # a spine 1 clearly worse than what is held (band 0 against 3: 1/5) goes further down
    set_l2(t, 0, 0)
    set_l2(t, 0, 0)
    set_l2(t, 0, 3)
    assert w(t, "p2")[0] == round(1 / 5 * 255)


def test_memory_is_released_by_headroom_and_fully_when_idle() -> None:
    t = table()
    all_remote(t)
    t.set_prefix("p2", to_leaf(L2))
    set_l2(t, 0, 4)
    set_l2(t, 0, 3)  # two steps below the others: the memory reaches the ratio 5/27
    held = w(t, "p2")[0]
    assert held == round(5 / 27 * 255)
    for band in (6, 5, 4, 3):
        for s in (1, 2, 3):
            set_l2(t, s, band)
    assert w(t, "p2")[0] == held
    # headroom (band >= 6) on the remote link: additive increase, not a jump (the others,
    # now three bands behind spine 1, take a penalty of their own: only ratios count)
    set_l2(t, 0, 6)
    ws = t.weights(t.profile_of("p2") or "")
    m = ws[NH[0]].inputs.memory / ws[NH[1]].inputs.memory
    assert abs(m - (5 / 27 + 0.25) / 0.5) < 1e-9
    assert w(t, "p2")[0] == 255  # spine 1 is now the best next hop
    # the hotspot has gone and spine 1's downlink is idle: released at once
    set_l2(t, 0, 7)
    assert w(t, "p2") == [255, 47, 47, 47]  # stateless: the others are busy (5/27)
    assert t.weights(t.profile_of("p2") or "")[NH[0]].inputs.memory == 1.0
    for s in (1, 2, 3):
        set_l2(t, s, 7)
    assert w(t, "p2") == [255] * 4
    assert t.weights(t.profile_of("p2") or "")[NH[0]].inputs.memory == 1.0


def test_memory_off_is_stateless_and_dlb_holds_nothing() -> None:
    t0 = table(memory=False)
    all_remote(t0)
    t0.set_prefix("p2", to_leaf(L2))
    set_l2(t0, 0, 3)
    for s in range(4):
        set_l2(t0, s, 2)
    assert w(t0, "p2") == [255] * 4
    t = table()
    all_remote(t)
    t.set_prefix("p2", to_leaf(L2))
    set_l2(t, 0, 3)
    set_l2(t, 0, 2)
    for s in (1, 2, 3):
        set_l2(t, s, 6)
    assert w(t, "p2")[0] == round(3 / 27 * 255)  # held: stateless would be 3/18
    # spine 1's heartbeats expire: DLB fallback, the penalty is dropped with the GLB source
    t.set_remote(S[0], None)
    assert src(t, "p2")[0] == "dlb" and w(t, "p2") == [255, 170, 170, 170]  # local 7 vs 6
    assert t.weights(t.profile_of("p2") or "")[NH[0]].inputs.memory == 1.0
    set_l2(t, 0, 6)
    assert w(t, "p2") == [255] * 4
    # turning the memory off releases every held penalty (a config change is not a step)
    set_l2(t, 0, 2)
    set_l2(t, 0, 1)
    for s in (1, 2, 3):
        set_l2(t, s, 4)
    assert w(t, "p2")[0] == round(2 / 18 * 255)  # held from band 1 vs 6; stateless 2/8
    t.set_params(PathTableParams(memory=False))
    assert w(t, "p2") == [round(2 / 8 * 255), 255, 255, 255]  # the stateless weights


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 7), st.booleans()), max_size=40))
@settings(max_examples=150, deadline=None)
def test_memory_is_deterministic_bounded_and_forgets_when_idle(
    steps: list[tuple[int, int, bool]],
) -> None:
    runs = []
    for _ in range(2):
        t = table()
        all_remote(t)
        t.set_prefix("p2", to_leaf(L2))
        seen = []
        for s, band, down in steps:
            t.set_remote(
                S[s], [RemoteLink(L2, 1, 0 if down else band, down, G), RemoteLink(L3, 2, 7)]
            )
            ws = t.weights(t.profile_of("p2") or "")
            vals = [ws[nh].value for nh in NH]
            assert any(vals)  # never all zero
            for nh in NH:
                x = ws[nh]
                assert (x.value == 0) == (x.inputs.raw <= 0 and not x.inputs.guard)
                assert 0 <= x.value <= 255 and 0 < x.inputs.memory <= 1.0
            if not all(x.inputs.guard for x in ws.values()):
                assert max(vals) == 255
            seen.append(vals)
        runs.append(seen)
        for s in range(4):  # the whole downstream goes idle: nothing is held any more
            set_l2(t, s, 7)
        assert w(t, "p2") == [255] * 4
    assert runs[0] == runs[1]


def test_profile_keys_stay_the_same_across_versions() -> None:
    """The key names the kernel group (its id is probed from it and re-found after a
    restart): a golden vector, so that a faster way of computing it cannot change it."""
    nhs = {
        NextHop(0x0A000001, "10.0.0.10", "eth2"): frozenset({0x0A010002, 0x0A010001}),
        NextHop(0x0A000001, "10.0.0.1", "eth1"): frozenset({0x0A010001}),
        NextHop(0x0A000002, "fe80::1", "eth3"): None,
        NextHop(0, "192.0.2.1", None): None,
    }
    assert profile_key(nhs) == "pf-1c92efa5cbd90587"
    assert profile_key(nhs) == profile_key(dict(reversed(list(nhs.items()))))
