"""The profile cap (``PathTableParams.max_profiles``): a unique NNHN list per UPDATE must not
make one profile, and one kernel group, per prefix. The excess is routed over plain ECMP of
its next hops (the profile of its next-hop set without NNHN), counted by reason, and moves
back to a profile of its own as soon as a slot frees up. Pure: the path table, the FIB sync and
a model of the FIB programmer (``tests/core/test_fibsync.py``)."""

from __future__ import annotations

from glbd.base.reasons import ProfileFallback
from glbd.quality.pathmodel import LocalLink, NextHop, PathTableParams
from glbd.quality.pathprofile import profile_key
from glbd.quality.pathtable import FALLBACK_WARN_INTERVAL_S, PathTable
from tests.core.test_fibsync import Rig, canon, sync

CAP = 4
NHS = [NextHop(1, "198.18.1.0", "spine1"), NextHop(2, "198.18.2.0", "spine2")]
PLAIN = profile_key(dict.fromkeys(NHS))


def pfx(i: int) -> str:
    return f"10.{i}.0.0/16"


def unique(i: int) -> dict[NextHop, frozenset[int] | None]:
    """A next-hop set whose NNHN list no other prefix has (what a hostile UPDATE sends)."""
    return {NHS[0]: frozenset({1000 + i}), NHS[1]: frozenset({2000 + i})}


def rig_with_cap(cap: int = CAP) -> Rig:
    rig = Rig()
    rig.table = PathTable(PathTableParams(max_profiles=cap))
    rig.sync.bgp_up(rig.now)
    for ifname in ("spine1", "spine2"):
        rig.changed(rig.table.set_local(ifname, LocalLink(7)))
    return rig


def routes(rig: Rig) -> dict[str, str]:
    assert rig.fib.desired is not None
    return {str(p): k for p, k in rig.fib.desired.routes.items()}


def test_excess_nnhn_sets_fall_back_to_plain_ecmp_and_the_groups_stay_bounded() -> None:
    rig = rig_with_cap()
    t = rig.table
    n = 3 * CAP
    for i in range(n):
        rig.changed(t.set_prefix(pfx(i), unique(i)))
        sync(rig)
    assert rig.fib.desired is not None
    # every prefix is routed; the kernel holds the cap's groups plus the one plain group
    assert set(routes(rig)) == {pfx(i) for i in range(n)}
    assert len(rig.fib.desired.groups) == CAP + 1
    assert len(t.profiles()) == CAP + 1
    own = {pfx(i): profile_key(unique(i)) for i in range(CAP)}
    assert {p: routes(rig)[p] for p in own} == own
    assert {routes(rig)[pfx(i)] for i in range(CAP, n)} == {PLAIN}
    # plain ECMP: both next hops, equal weights, no NNHN in the weight
    plain = rig.fib.desired.groups[PLAIN].weights
    assert len(plain) == 2 and len(set(plain.values())) == 1
    assert {w.inputs.remote_status for w in t.weights(PLAIN).values()} == {"nnhn_missing"}
    assert t.fallbacks[ProfileFallback.PROFILE_CAP] == n - CAP
    assert t.fallback_prefixes() == n - CAP
    assert canon(rig.fib.desired) == canon(rig.desired())

    # the same UPDATE again is not another refusal; a shared NNHN set joins its profile
    rig.changed(t.set_prefix(pfx(CAP), unique(CAP)))
    rig.changed(t.set_prefix("10.200.0.0/16", unique(0)))
    sync(rig)
    assert t.fallbacks[ProfileFallback.PROFILE_CAP] == n - CAP
    assert routes(rig)["10.200.0.0/16"] == own[pfx(0)]


def test_a_freed_slot_goes_to_the_oldest_waiting_profile_at_once() -> None:
    rig = rig_with_cap()
    t = rig.table
    for i in range(CAP + 3):
        rig.changed(t.set_prefix(pfx(i), unique(i)))
    sync(rig)
    rig.changed(t.remove_prefix(pfx(0)))
    rig.changed(t.remove_prefix(pfx(1)))
    sync(rig)
    assert rig.fib.desired is not None
    r = routes(rig)
    assert r[pfx(CAP)] == profile_key(unique(CAP))
    assert r[pfx(CAP + 1)] == profile_key(unique(CAP + 1))
    assert r[pfx(CAP + 2)] == PLAIN
    assert len(rig.fib.desired.groups) == CAP + 1 and t.fallback_prefixes() == 1
    # the last one waiting takes the next slot; the plain group then goes with its last route
    rig.changed(t.remove_prefix(pfx(2)))
    sync(rig)
    assert routes(rig)[pfx(CAP + 2)] == profile_key(unique(CAP + 2))
    assert PLAIN not in rig.fib.desired.groups and t.fallback_prefixes() == 0
    assert canon(rig.fib.desired) == canon(rig.desired())


def test_a_prefix_keeps_its_slot_when_its_nnhn_changes_and_a_waiting_one_can_leave() -> None:
    rig = rig_with_cap(1)
    t = rig.table
    rig.changed(t.set_prefix(pfx(0), unique(0)))
    rig.changed(t.set_prefix(pfx(1), unique(1)))  # waits
    rig.changed(t.set_prefix(pfx(0), unique(5)))  # its own profile is replaced, not capped
    sync(rig)
    assert routes(rig) == {pfx(0): profile_key(unique(5)), pfx(1): PLAIN}
    # a waiting prefix that loses its NNHN is simply in its plain profile; withdrawn, it is gone
    rig.changed(t.set_prefix(pfx(1), dict.fromkeys(NHS)))
    assert t.fallback_prefixes() == 0
    rig.changed(t.set_prefix(pfx(2), unique(2)))
    rig.changed(t.remove_prefix(pfx(2)))
    sync(rig)
    assert t.fallback_prefixes() == 0 and routes(rig) == {
        pfx(0): profile_key(unique(5)),
        pfx(1): PLAIN,
    }
    # a raised cap (a reload) lets the waiting ones in at once
    rig.changed(t.set_prefix(pfx(3), unique(3)))
    assert t.fallback_prefixes() == 1
    rig.changed(t.set_params(PathTableParams(max_profiles=2)))
    sync(rig)
    assert routes(rig)[pfx(3)] == profile_key(unique(3)) and t.fallback_prefixes() == 0
    assert rig.fib.desired is not None
    assert canon(rig.fib.desired) == canon(rig.desired())


def test_the_fallback_warning_is_rate_limited_and_counts_what_it_skipped() -> None:
    t = PathTable(PathTableParams(max_profiles=1))
    assert t.fallback_warning(0.0) is None
    t.set_prefix(pfx(0), unique(0))
    t.set_prefix(pfx(1), unique(1))
    warn = t.fallback_warning(0.0)
    assert warn == {
        "reason": "profile_cap",
        "fell_back": 1,
        "fallback_prefixes": 1,
        "max_profiles": 1,
    }
    t.set_prefix(pfx(2), unique(2))
    t.set_prefix(pfx(3), unique(3))
    assert t.fallback_warning(FALLBACK_WARN_INTERVAL_S - 1) is None
    warn = t.fallback_warning(FALLBACK_WARN_INTERVAL_S)
    assert warn is not None and warn["fell_back"] == 2 and warn["fallback_prefixes"] == 3
    assert t.fallback_warning(10 * FALLBACK_WARN_INTERVAL_S) is None  # nothing new
    assert t.fallback_total == 3
