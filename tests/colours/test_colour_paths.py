"""A leaf's coloured prefixes on their colour's paths (``glbd.colours.colourpaths``), in virtual
time: what the FIB pins for them as the RIB, the path table's weights and BFD speak.

The fabric of docs/colours.md: four spines, spine n's sessions have colour n; leaf1 (node id
10.0.0.1) originates one prefix per colour, each reaching this leaf through every spine."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from glbd.colours.colourpaths import ColourPaths, Hop, HopWeight, group_key, hop_label
from glbd.colours.colours import ColourReason, ColourState

GREEN, BLUE = 1, 2
LEAF1 = (10 << 24) | 1
S = [hop_label(f"10.0.{n}.1", f"swp{n}") for n in (1, 2, 3, 4)]
P_GREEN, P_BLUE, P_PLAIN = "10.1.1.0/24", "10.1.2.0/24", "10.1.9.0/24"
PROFILE = "profile-leaf1"
DEST = "nnh:10.0.0.1"
HOLD = 30.0


def hops(*which: int, nnh: bool = True) -> list[Hop]:
    """The next hops through spines ``which`` (1-based), each with its session's colour."""
    return [Hop(S[n - 1], n, (LEAF1,) if nnh else None) for n in which]


def weights(**over: HopWeight) -> dict[str, HopWeight]:
    """Every spine at weight 100, except those named s1..s4 in ``over``."""
    w = {s: HopWeight(100) for s in S}
    for name, hw in over.items():
        w[S[int(name[1:]) - 1]] = hw
    return w


def leaf(*prefixes: tuple[str, int | None], at: float = 0.0) -> ColourPaths:
    cp = ColourPaths(HOLD)
    for prefix, colour in prefixes:
        cp.on_prefix(prefix, colour, hops(1, 2, 3, 4), PROFILE, weights(), at)
    return cp


def members(cp: ColourPaths, key: str) -> list[str]:
    return [h for h, _ in cp.pins().groups[key]]


def state(cp: ColourPaths, colour: int) -> ColourState:
    return next(r.state for r in cp.rows() if r.colour == colour)


def reasons(cp: ColourPaths, colour: int) -> Iterable[ColourReason]:
    return next(r.reasons for r in cp.rows() if r.colour == colour)


def test_a_coloured_prefix_goes_through_its_preferred_spine_with_the_others_on_standby() -> None:
    cp = leaf((P_GREEN, GREEN), (P_BLUE, BLUE))
    pins = cp.pins()
    assert pins.routes == {P_GREEN: group_key(GREEN, DEST), P_BLUE: group_key(BLUE, DEST)}
    assert pins.standby == {
        P_GREEN: group_key(GREEN, DEST, standby=True),
        P_BLUE: group_key(BLUE, DEST, standby=True),
    }
    assert members(cp, group_key(GREEN, DEST)) == [S[0]]
    assert members(cp, group_key(BLUE, DEST)) == [S[1]]
    assert members(cp, group_key(GREEN, DEST, standby=True)) == [S[1], S[2], S[3]]


def test_an_uncoloured_prefix_is_not_pinned() -> None:
    cp = leaf((P_PLAIN, None))
    assert not cp
    assert cp.pins().routes == {}


def test_prefixes_of_one_colour_and_destination_share_one_group() -> None:
    cp = leaf((P_GREEN, GREEN), ("10.1.3.0/24", GREEN))
    pins = cp.pins()
    assert set(pins.routes.values()) == {group_key(GREEN, DEST)}
    assert len(pins.groups) == 2  # the path's group and its standby


def test_bfd_down_falls_back_to_the_backups_and_up_returns_after_the_hold_down() -> None:
    cp = leaf((P_GREEN, GREEN), (P_BLUE, BLUE))
    assert cp.on_bfd(S[0], True, 1.0)
    assert state(cp, GREEN) is ColourState.FALLBACK
    assert list(reasons(cp, GREEN)) == [ColourReason.BFD_DOWN]
    assert members(cp, group_key(GREEN, DEST)) == [S[1], S[2], S[3]]
    assert state(cp, BLUE) is ColourState.PRIMARY  # another colour's spine: untouched
    assert not cp.on_bfd(S[0], False, 10.0)  # up, but waiting
    assert state(cp, GREEN) is ColourState.FALLBACK
    assert cp.next_deadline() == pytest.approx(10.0 + HOLD)
    assert not cp.on_timer(10.0 + HOLD - 0.5)
    assert cp.on_timer(10.0 + HOLD)
    assert members(cp, group_key(GREEN, DEST)) == [S[0]]
    assert cp.counters["fallbacks"] == 1 and cp.counters["returns"] == 1


def test_a_new_failure_during_the_hold_down_restarts_it() -> None:
    cp = leaf((P_GREEN, GREEN))
    cp.on_bfd(S[0], True, 1.0)
    cp.on_bfd(S[0], False, 2.0)
    cp.on_bfd(S[0], True, 20.0)
    cp.on_bfd(S[0], False, 25.0)
    assert not cp.on_timer(2.0 + HOLD)
    assert state(cp, GREEN) is ColourState.FALLBACK
    assert cp.on_timer(25.0 + HOLD)
    assert state(cp, GREEN) is ColourState.PRIMARY
    assert cp.rows()[0].hold_restarts == 1


@pytest.mark.parametrize(
    ("hw", "reason"),
    [
        (HopWeight(0, remote_down=True), ColourReason.HEARTBEAT_LINK_DOWN),
        (HopWeight(0), ColourReason.QUALITY_ZERO),
        (HopWeight(0, local_down=True), ColourReason.LINK_DOWN),
    ],
)
def test_the_weights_say_why_the_preferred_spine_is_bad(
    hw: HopWeight, reason: ColourReason
) -> None:
    cp = leaf((P_GREEN, GREEN), (P_BLUE, BLUE))
    assert cp.on_weights(PROFILE, weights(s1=hw), 5.0)
    assert state(cp, GREEN) is not ColourState.PRIMARY
    assert reason in reasons(cp, GREEN)
    assert state(cp, BLUE) is ColourState.PRIMARY
    # the backups carry their GLB weights
    assert cp.pins().groups[group_key(GREEN, DEST)] == ((S[1], 100), (S[2], 100), (S[3], 100))
    cp.on_weights(PROFILE, weights(), 6.0)
    assert state(cp, GREEN) is ColourState.FALLBACK  # healthy again: the hold-down first
    cp.on_timer(6.0 + HOLD)
    assert state(cp, GREEN) is ColourState.PRIMARY


def test_new_backup_weights_are_one_group_write_without_a_route_change() -> None:
    cp = leaf((P_GREEN, GREEN))
    before = cp.pins()
    assert cp.on_weights(PROFILE, weights(s3=HopWeight(25)), 1.0)
    after = cp.pins()
    assert after.routes == before.routes and after.standby == before.standby
    assert after.groups[group_key(GREEN, DEST, standby=True)] == (
        (S[1], 100),
        (S[2], 25),
        (S[3], 100),
    )
    assert after.groups[group_key(GREEN, DEST)] == ((S[0], 100),)


def test_a_withdraw_by_the_preferred_spine_falls_back_and_its_return_waits() -> None:
    cp = leaf((P_GREEN, GREEN))
    w = weights()
    del w[S[0]]
    cp.on_prefix(P_GREEN, GREEN, hops(2, 3, 4), PROFILE, w, 1.0)
    assert state(cp, GREEN) is ColourState.FALLBACK
    assert list(reasons(cp, GREEN)) == [ColourReason.BGP_WITHDRAWN]
    cp.on_prefix(P_GREEN, GREEN, hops(1, 2, 3, 4), PROFILE, weights(), 2.0)
    assert state(cp, GREEN) is ColourState.FALLBACK  # it comes back: the hold-down first
    cp.on_timer(2.0 + HOLD)
    assert state(cp, GREEN) is ColourState.PRIMARY


def test_a_spine_whose_nnhn_no_longer_names_the_destination_is_bad() -> None:
    """The destination stays (the other spines name it); the preferred spine's NNHN naming
    another node is ``nnhn_lost``; one without NNHN says nothing."""
    cp = leaf((P_GREEN, GREEN))
    other = [Hop(S[0], 1, (LEAF1 + 7,)), *hops(2, 3, 4)]
    cp.on_prefix(P_GREEN, GREEN, other, "other-profile", weights(), 1.0)
    assert cp.path_of(P_GREEN) == (GREEN, DEST)
    assert list(reasons(cp, GREEN)) == [ColourReason.NNHN_LOST]
    silent = [Hop(S[0], 1, None), *hops(2, 3, 4)]
    cp.on_prefix(P_GREEN, GREEN, silent, "third-profile", weights(), 2.0)
    assert cp.path_of(P_GREEN) == (GREEN, DEST)
    assert list(reasons(cp, GREEN)) == []  # healthy: waiting for the hold-down
    cp.on_timer(2.0 + HOLD)
    assert state(cp, GREEN) is ColourState.PRIMARY


def test_without_nnhn_the_origin_as_is_the_destination() -> None:
    """A fabric without NNHN: the destination is the leaf's AS, so a spine's withdraw (a new
    profile) does not make a new path that would skip the hold-down."""
    cp = ColourPaths(HOLD)
    cp.on_prefix(P_GREEN, GREEN, hops(1, 2, nnh=False), PROFILE, weights(), 0.0, 65002)
    assert cp.path_of(P_GREEN) == (GREEN, "as:65002")
    w = weights()
    del w[S[0]]
    cp.on_prefix(P_GREEN, None, hops(2, nnh=False), "profile-2", w, 1.0, None)
    assert cp.path_of(P_GREEN) == (GREEN, "as:65002")
    cp.on_prefix(P_GREEN, GREEN, hops(1, 2, nnh=False), PROFILE, weights(), 2.0, 65002)
    assert state(cp, GREEN) is ColourState.FALLBACK  # a return: the hold-down first
    cp.on_prefix("10.1.4.0/24", GREEN, hops(1, 2, nnh=False), PROFILE, weights(), 3.0)
    assert cp.path_of("10.1.4.0/24") == (GREEN, f"profile:{PROFILE}")  # no origin AS


def test_the_last_prefix_leaving_removes_the_path() -> None:
    cp = leaf((P_GREEN, GREEN), (P_BLUE, BLUE))
    assert cp.on_prefix(P_GREEN, None, hops(1, 2, 3, 4), PROFILE, weights(), 1.0)
    assert P_GREEN not in cp.pins().routes
    assert [r.colour for r in cp.rows()] == [BLUE]
    assert cp.on_prefix(P_BLUE, BLUE, [], None, {}, 2.0)
    assert not cp and cp.pins().groups == {}


def test_a_colour_without_a_session_spreads_over_every_spine() -> None:
    cp = ColourPaths(HOLD)
    cp.on_prefix(P_GREEN, 7, hops(1, 2, 3, 4), PROFILE, weights(), 0.0)
    assert state(cp, 7) is ColourState.FALLBACK
    assert list(reasons(cp, 7)) == [ColourReason.NO_PREFERRED]
    assert members(cp, group_key(7, DEST)) == S


def test_a_recoloured_session_moves_its_next_hop_to_its_new_colour() -> None:
    """A reload recolours spine1's session blue and spine2's green: the RIB reports the routes
    again with the new session colours, and the green path follows at once (a config change,
    not a flap: no hold-down)."""
    cp = leaf((P_GREEN, GREEN))
    recoloured = [Hop(S[0], BLUE, (LEAF1,)), Hop(S[1], GREEN, (LEAF1,)), *hops(3, 4)]
    assert cp.on_prefix(P_GREEN, GREEN, recoloured, PROFILE, weights(), 2.0)
    assert members(cp, group_key(GREEN, DEST)) == [S[1]]
    assert state(cp, GREEN) is ColourState.PRIMARY
    assert cp.rows()[0].preferred == (S[1],)


def test_a_repeated_input_changes_nothing() -> None:
    cp = leaf((P_GREEN, GREEN))
    assert not cp.on_prefix(P_GREEN, GREEN, hops(1, 2, 3, 4), PROFILE, weights(), 1.0)
    assert not cp.on_weights(PROFILE, weights(), 2.0)
    assert not cp.on_weights("unknown-profile", weights(), 2.0)
    assert not cp.on_bfd(S[0], False, 3.0)


def test_the_colour_stays_while_its_marked_copy_is_gone_with_its_spine() -> None:
    """A session down takes the only copy with the mark: the backups' copies carry none, yet
    the prefix is still green (its spine withdrew), and the return waits."""
    cp = leaf((P_GREEN, GREEN))
    w = weights()
    del w[S[0]]
    assert cp.on_prefix(P_GREEN, None, hops(2, 3, 4), PROFILE, w, 1.0)
    assert cp.path_of(P_GREEN) == (GREEN, DEST)
    assert list(reasons(cp, GREEN)) == [ColourReason.BGP_WITHDRAWN]
    cp.on_prefix(P_GREEN, GREEN, hops(1, 2, 3, 4), PROFILE, weights(), 2.0)
    assert state(cp, GREEN) is ColourState.FALLBACK
    cp.on_timer(2.0 + HOLD)
    assert state(cp, GREEN) is ColourState.PRIMARY
    # with the colour's spine still there, no mark means the prefix is uncoloured now
    cp.on_prefix(P_GREEN, None, hops(1, 2, 3, 4), PROFILE, weights(), 3.0)
    assert cp.path_of(P_GREEN) is None
