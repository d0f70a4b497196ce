"""The leaf's per-colour forwarding (glbd.colours.colours.ColourForwarding) in virtual time: the
clock is the ``now`` each call passes; nothing sleeps.

The fabric of docs/colours.md: 4 spines, one colour each (green 1 prefers spine s1, blue 2 s2,
red 3 s3, yellow 4 s4); the destination is the remote leaf "leaf3"."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from glbd.colours.colours import (
    ColourForwarding,
    ColourReason,
    ColourState,
    Effect,
    Event,
    LocalSignal,
    Members,
    PathGone,
    Program,
    RemoteSignal,
    Remove,
    SetPreferred,
)

GREEN, BLUE = 1, 2
HOLD = 30.0
PREFERRED = {GREEN: {"s1"}, BLUE: {"s2"}, 3: {"s3"}, 4: {"s4"}}
WEIGHTS = {"s1": 10, "s2": 10, "s3": 5, "s4": 20}
BACKUPS = (("s2", 10), ("s3", 5), ("s4", 20))
R = ColourReason
S = ColourState


def machine(hold: float = HOLD, weights: Mapping[str, int] = WEIGHTS) -> ColourForwarding:
    m = ColourForwarding(hold, PREFERRED)
    (eff,) = m.on_event(Members(GREEN, "leaf3", weights), 0.0)
    assert isinstance(eff, Program) and eff.state is S.PRIMARY
    return m


def only(effects: list[Effect]) -> Program:
    assert len(effects) == 1, effects
    (e,) = effects
    assert isinstance(e, Program)
    return e


def bfd(up: bool, hop: str = "s1") -> LocalSignal:
    return LocalSignal(hop, R.BFD_DOWN, not up)


def test_start_primary_the_preferred_spine_alone() -> None:
    m = ColourForwarding(HOLD, PREFERRED)
    p = only(m.on_event(Members(GREEN, "leaf3", WEIGHTS), 0.0))
    assert p == Program(GREEN, "leaf3", S.PRIMARY, (("s1", 10),), BACKUPS)
    assert m.next_deadline() is None
    (row,) = m.rows()
    assert row.state is S.PRIMARY and row.preferred == ("s1",) and row.reasons == ()


def test_local_failure_falls_back_at_once_and_returns_after_the_hold_down() -> None:
    m = machine()
    p = only(m.on_event(bfd(up=False), 10.0))
    assert (p.state, p.active, p.reasons) == (S.FALLBACK, BACKUPS, (R.BFD_DOWN,))
    assert p.standby == BACKUPS  # the pre-armed backup holds the same members
    assert m.on_event(bfd(up=True), 12.0) == []  # good again: the hold-down starts
    assert m.next_deadline() == 12.0 + HOLD
    assert m.rows()[0].hold_until == 42.0
    assert m.on_timer(41.9) == []
    p = only(m.on_timer(42.0))
    assert (p.state, p.active, p.reasons) == (S.PRIMARY, (("s1", 10),), ())
    assert m.next_deadline() is None
    row = m.rows()[0]
    assert (row.fallbacks, row.hold_restarts, row.state_since) == (1, 0, 42.0)


def test_a_flap_restarts_the_hold_down() -> None:
    m = machine()
    m.on_event(LocalSignal("s1", R.LINK_DOWN, True), 10.0)
    m.on_event(LocalSignal("s1", R.LINK_DOWN, False), 11.0)
    assert m.next_deadline() == 41.0
    assert m.on_event(LocalSignal("s1", R.LINK_DOWN, True), 30.0) == []  # still FALLBACK
    assert m.next_deadline() is None
    m.on_event(LocalSignal("s1", R.LINK_DOWN, False), 31.0)
    assert m.next_deadline() == 61.0
    assert m.on_timer(41.0) == []  # the first wait would have ended here
    assert only(m.on_timer(61.0)).state is S.PRIMARY
    assert m.rows()[0].hold_restarts == 1


def test_preferred_back_while_the_remote_path_is_still_bad_stays_in_fallback() -> None:
    m = machine()
    m.on_event(bfd(up=False), 1.0)
    assert m.on_event(RemoteSignal("s1", "leaf3", R.HEARTBEAT_LINK_DOWN, True), 2.0) == []
    assert m.reasons(GREEN, "leaf3") == (R.BFD_DOWN, R.HEARTBEAT_LINK_DOWN)
    assert m.on_event(bfd(up=True), 3.0) == []
    assert m.next_deadline() is None  # no wait while a reason holds
    assert m.reasons(GREEN, "leaf3") == (R.HEARTBEAT_LINK_DOWN,)
    m.on_event(RemoteSignal("s1", "leaf3", R.HEARTBEAT_LINK_DOWN, False), 50.0)
    assert m.next_deadline() == 80.0
    assert only(m.on_timer(80.0)).state is S.PRIMARY


@pytest.mark.parametrize("reason", [R.HEARTBEAT_LINK_DOWN, R.QUALITY_ZERO, R.NNHN_LOST])
def test_remote_failures_move_only_their_destination(reason: ColourReason) -> None:
    m = machine()
    m.on_event(Members(GREEN, "leaf4", WEIGHTS), 0.0)
    p = only(m.on_event(RemoteSignal("s1", "leaf3", reason, True), 5.0))
    assert (p.dest, p.state, p.reasons) == ("leaf3", S.FALLBACK, (reason,))
    assert [r.state for r in m.rows()] == [S.FALLBACK, S.PRIMARY]  # leaf4 stays on s1
    # a remote signal about a spine that is not the colour's preferred one changes nothing
    assert m.on_event(RemoteSignal("s2", "leaf4", reason, True), 6.0) == []


def test_a_local_failure_moves_every_destination_of_the_colour_one_write_each() -> None:
    m = machine()
    m.on_event(Members(GREEN, "leaf4", WEIGHTS), 0.0)
    m.on_event(Members(BLUE, "leaf3", WEIGHTS), 0.0)
    effects = m.on_event(bfd(up=False), 5.0)
    assert [(e.colour, e.dest) for e in effects] == [(GREEN, "leaf3"), (GREEN, "leaf4")]
    assert all(isinstance(e, Program) and e.state is S.FALLBACK for e in effects)
    # blue prefers s2: s1's failure is the GLB weights' business there, not the colour machine's
    assert m.rows()[2].state is S.PRIMARY


def test_bgp_withdraw_of_the_preferred_copy() -> None:
    m = machine()
    without = {k: v for k, v in WEIGHTS.items() if k != "s1"}
    p = only(m.on_event(Members(GREEN, "leaf3", without), 5.0))
    assert (p.state, p.active, p.reasons) == (S.FALLBACK, BACKUPS, (R.BGP_WITHDRAWN,))
    assert m.on_event(Members(GREEN, "leaf3", WEIGHTS), 7.0) == []  # back: wait
    assert only(m.on_timer(37.0)).state is S.PRIMARY


def test_fallback_follows_the_glb_weights_one_write_per_change() -> None:
    m = machine()
    m.on_event(bfd(up=False), 1.0)
    w = dict(WEIGHTS, s3=15)
    p = only(m.on_event(Members(GREEN, "leaf3", w), 2.0))
    assert p.active == (("s2", 10), ("s3", 15), ("s4", 20))
    assert m.on_event(Members(GREEN, "leaf3", w), 3.0) == []  # nothing changed: no write
    # a backup whose weight fell to 0 leaves the group while others carry traffic
    p = only(m.on_event(Members(GREEN, "leaf3", dict(w, s4=0)), 4.0))
    assert p.active == (("s2", 10), ("s3", 15))


def test_in_primary_a_backup_weight_change_rewrites_only_the_standby() -> None:
    m = machine()
    p = only(m.on_event(Members(GREEN, "leaf3", dict(WEIGHTS, s2=1)), 1.0))
    assert (p.state, p.active) == (S.PRIMARY, (("s1", 10),))
    assert p.standby == (("s2", 1), ("s3", 5), ("s4", 20))
    # the preferred member's own weight is what GLB says; alone in its group it does not matter
    assert only(m.on_event(Members(GREEN, "leaf3", dict(WEIGHTS, s1=3)), 2.0)).active == (
        ("s1", 3),
    )


def test_every_backup_at_weight_zero_gets_weight_one() -> None:
    m = machine(weights={"s1": 10, "s2": 0, "s3": 0, "s4": 0})
    p = only(m.on_event(bfd(up=False), 1.0))
    assert p.active == (("s2", 1), ("s3", 1), ("s4", 1))


def test_no_backup_and_only_remote_reasons_keeps_the_preferred_as_last_resort() -> None:
    m = machine(weights={"s1": 10})
    p = only(m.on_event(RemoteSignal("s1", "leaf3", R.QUALITY_ZERO, True), 1.0))
    assert (p.state, p.active, p.last_resort, p.standby) == (S.FALLBACK, (("s1", 10),), True, ())
    # locally down too: nothing is left to program
    p = only(m.on_event(LocalSignal("s1", R.LINK_DOWN, True), 2.0))
    assert (p.state, p.active, p.last_resort) == (S.NO_PATH, (), False)
    # a backup appears: fall back to it
    p = only(m.on_event(Members(GREEN, "leaf3", {"s1": 10, "s2": 4}), 3.0))
    assert (p.state, p.active) == (S.FALLBACK, (("s2", 4),))


def test_no_session_of_the_colour_spreads_by_glb() -> None:
    m = ColourForwarding(HOLD, PREFERRED)
    p = only(m.on_event(Members(9, "leaf3", WEIGHTS), 0.0))
    assert p.state is S.FALLBACK and p.reasons == (R.NO_PREFERRED,)
    assert p.active == (("s1", 10), ("s2", 10), ("s3", 5), ("s4", 20))


def test_a_new_preferred_set_applies_at_once_without_hold_down() -> None:
    m = machine()
    m.on_event(bfd(up=False), 1.0)
    m.on_event(bfd(up=True), 2.0)  # s1 waits until 32
    p = only(m.on_event(SetPreferred(GREEN, frozenset({"s2"})), 3.0))
    assert (p.state, p.active) == (S.PRIMARY, (("s2", 10),))
    assert p.standby == (("s1", 10), ("s3", 5), ("s4", 20))
    assert m.next_deadline() is None
    # the same set again changes nothing (and does not cut a hold-down short)
    m.on_event(bfd(up=False, hop="s2"), 4.0)
    m.on_event(bfd(up=True, hop="s2"), 5.0)
    assert m.on_event(SetPreferred(GREEN, frozenset({"s2"})), 6.0) == []
    assert m.next_deadline() == 35.0
    # no session of the colour any more
    p = only(m.on_event(SetPreferred(GREEN, frozenset()), 7.0))
    assert p.state is S.FALLBACK and p.reasons == (R.NO_PREFERRED,)


def test_parallel_links_to_the_preferred_spine() -> None:
    """Two green sessions (two links to spine 1): losing one keeps green on the other; the
    returning link rejoins after its own hold-down."""
    m = ColourForwarding(HOLD, {GREEN: {"s1a", "s1b"}})
    w = {"s1a": 8, "s1b": 8, "s2": 10}
    assert only(m.on_event(Members(GREEN, "leaf3", w), 0.0)).active == (("s1a", 8), ("s1b", 8))
    p = only(m.on_event(bfd(up=False, hop="s1a"), 1.0))
    assert (p.state, p.active) == (S.PRIMARY, (("s1b", 8),))
    assert m.on_event(bfd(up=True, hop="s1a"), 2.0) == []
    assert only(m.on_timer(32.0)).active == (("s1a", 8), ("s1b", 8))


def test_hold_down_zero_returns_at_once() -> None:
    m = machine(hold=0.0)
    m.on_event(bfd(up=False), 1.0)
    assert only(m.on_event(bfd(up=True), 2.0)).state is S.PRIMARY
    assert m.next_deadline() is None


def test_an_event_after_a_due_deadline_ends_the_hold_down_first() -> None:
    m = machine()
    m.on_event(bfd(up=False), 1.0)
    m.on_event(bfd(up=True), 2.0)
    effects = m.on_event(Members(BLUE, "leaf3", WEIGHTS), 40.0)  # on_timer(32) was not called
    assert [(e.colour, e.state) for e in effects if isinstance(e, Program)] == [
        (GREEN, S.PRIMARY),
        (BLUE, S.PRIMARY),
    ]


def test_path_removal() -> None:
    m = machine()
    assert m.on_event(PathGone(GREEN, "leaf3"), 1.0) == [Remove(GREEN, "leaf3")]
    assert m.on_event(PathGone(GREEN, "leaf3"), 1.0) == []
    m.on_event(Members(GREEN, "leaf3", WEIGHTS), 2.0)
    assert m.on_event(Members(GREEN, "leaf3", {}), 3.0) == [Remove(GREEN, "leaf3")]
    assert m.rows() == []


def test_signals_before_the_path_exists_count() -> None:
    m = ColourForwarding(HOLD, PREFERRED)
    m.on_event(bfd(up=False), 0.0)
    p = only(m.on_event(Members(GREEN, "leaf3", WEIGHTS), 1.0))
    assert (p.state, p.reasons) == (S.FALLBACK, (R.BFD_DOWN,))
    # it was never usable: no history, no hold-down
    assert only(m.on_event(bfd(up=True), 2.0)).state is S.PRIMARY


def test_rows_and_reasons_as_glbctl_shows_them() -> None:
    m = machine()
    m.on_event(bfd(up=False), 1.0)
    m.on_event(bfd(up=True), 2.0)
    d = m.rows()[0].to_dict()
    assert d == {
        "colour": GREEN,
        "dest": "leaf3",
        "state": "fallback",
        "preferred": ["s1"],
        "active": [["s2", 10], ["s3", 5], ["s4", 20]],
        "standby": [["s2", 10], ["s3", 5], ["s4", 20]],
        "reasons": [],
        "last_resort": False,
        "state_since": 1.0,
        "hold_until": 32.0,
        "fallbacks": 1,
        "hold_restarts": 0,
    }
    assert m.reasons(7, "nowhere") == ()
    assert R.BFD_DOWN.local and R.LINK_DOWN.local and not R.QUALITY_ZERO.local


@pytest.mark.parametrize(
    "bad",
    [
        lambda: LocalSignal("s1", R.QUALITY_ZERO, True),
        lambda: RemoteSignal("s1", "leaf3", R.BFD_DOWN, True),
        lambda: RemoteSignal("s1", "leaf3", R.BGP_WITHDRAWN, True),
        lambda: RemoteSignal("s1", "leaf3", R.NO_PREFERRED, True),
        lambda: ColourForwarding(-1.0),
        lambda: ColourForwarding(float("nan")),
        lambda: ColourForwarding(HOLD, {0: {"s1"}}),
        lambda: ColourForwarding(HOLD).on_event(Members(0, "x", {"s1": 1}), 0.0),
    ],
)
def test_bad_inputs_raise_value_error(bad: object) -> None:
    with pytest.raises(ValueError) as e:
        bad()  # type: ignore[operator]
    assert "\n" not in str(e.value)


# -- properties: random event sequences -------------------------------------------------------

HOPS = ("s1", "s2", "s3")
DESTS = ("leaf3", "leaf4")

events = st.one_of(
    st.builds(
        LocalSignal,
        st.sampled_from(HOPS),
        st.sampled_from([R.BFD_DOWN, R.LINK_DOWN]),
        st.booleans(),
    ),
    st.builds(
        RemoteSignal,
        st.sampled_from(HOPS),
        st.sampled_from(DESTS),
        st.sampled_from([R.HEARTBEAT_LINK_DOWN, R.QUALITY_ZERO, R.NNHN_LOST]),
        st.booleans(),
    ),
    st.builds(
        Members,
        st.just(GREEN),
        st.sampled_from(DESTS),
        st.dictionaries(st.sampled_from(HOPS), st.integers(0, 5), max_size=3),
    ),
)
steps = st.lists(st.tuples(events, st.floats(0, 40, allow_nan=False)), max_size=40)


class Model:
    """What the test knows independently of the machine: when s1 (green's preferred spine) last
    turned good for each destination, and whether it has ever been used."""

    def __init__(self) -> None:
        self.local: set[ColourReason] = set()
        self.remote: dict[str, set[ColourReason]] = {d: set() for d in DESTS}
        self.weights: dict[str, Mapping[str, int]] = {}
        self.good_since: dict[str, float | None] = {}
        self.was_primary: set[str] = set()

    def good(self, dest: str) -> bool:
        w = self.weights.get(dest)
        return w is not None and "s1" in w and not self.local and not self.remote[dest]

    def apply(self, ev: Event, now: float) -> None:
        before = {d: self.good(d) for d in DESTS}
        if isinstance(ev, LocalSignal) and ev.next_hop == "s1":
            (self.local.add if ev.active else self.local.discard)(ev.reason)
        elif isinstance(ev, RemoteSignal) and ev.next_hop == "s1":
            s = self.remote[ev.dest]
            (s.add if ev.active else s.discard)(ev.reason)
        elif isinstance(ev, Members):
            if ev.weights:
                self.weights[ev.dest] = dict(ev.weights)
            else:
                self.weights.pop(ev.dest, None)
                self.was_primary.discard(ev.dest)
                self.good_since.pop(ev.dest, None)
        for d in DESTS:
            if d not in self.weights:
                continue
            if self.good(d) and not before[d]:
                self.good_since[d] = now
            elif not self.good(d):
                self.good_since[d] = None


@given(steps, st.sampled_from([0.0, 5.0, 30.0]))
@settings(max_examples=300, deadline=None)
def test_invariants_over_random_sequences(seq: list[tuple[Event, float]], hold: float) -> None:
    m = ColourForwarding(hold, {GREEN: {"s1"}})
    model = Model()
    now = 0.0
    last: dict[str, Program] = {}

    def take(effects: list[Effect]) -> None:
        for e in effects:
            if isinstance(e, Remove):
                last.pop(e.dest, None)
                continue
            prev = last.get(e.dest)
            # one write per change: never the same programming twice in a row
            assert prev is None or (prev.state, prev.active, prev.standby, prev.last_resort) != (
                e.state,
                e.active,
                e.standby,
                e.last_resort,
            )
            returning = prev is not None and prev.state is not S.PRIMARY
            if e.state is S.PRIMARY and returning and e.dest in model.was_primary:
                # a return: only after a whole hold-down of good
                since = model.good_since.get(e.dest)
                assert since is not None and now >= since + hold
            last[e.dest] = e

    for ev, dt in seq:
        d = m.next_deadline()
        if d is not None and d <= now + dt:  # the daemon's timer fires first
            assert d > now
            now = d
            fx = m.on_timer(now)
            assert fx and all(isinstance(e, Program) and e.state is S.PRIMARY for e in fx)
            take(fx)
        now += dt
        effects = m.on_event(ev, now)
        model.apply(ev, now)
        take(effects)
        for dest, p in last.items():
            assert all(w >= 1 for _, w in p.active)
            assert all(w >= 1 for _, w in p.standby)
            assert all(h != "s1" for h, _ in p.standby)
            assert bool(p.active) is (p.state is not S.NO_PATH)
            if p.state is S.PRIMARY:
                assert [h for h, _ in p.active] == ["s1"]
                assert model.good(dest)
                model.was_primary.add(dest)
            elif not p.last_resort:
                assert all(h != "s1" for h, _ in p.active)
        assert {r.dest for r in m.rows()} == set(last)


@given(
    st.lists(st.tuples(st.booleans(), st.floats(0.1, 50, allow_nan=False)), min_size=1, max_size=30)
)
@settings(max_examples=200, deadline=None)
def test_return_to_primary_only_after_a_whole_quiet_hold_down(
    flaps: list[tuple[bool, float]],
) -> None:
    """Toggle s1's BFD at random gaps, driving the timer as a daemon would: green is PRIMARY
    again only once s1 has been up for ``HOLD`` without a failure, and exactly then."""
    m = machine()
    now, up, up_since = 0.0, True, 0.0
    for want_up, gap in flaps:
        deadline_seen = m.next_deadline()
        target = now + gap
        if deadline_seen is not None and deadline_seen <= target:
            assert up and deadline_seen == pytest.approx(up_since + HOLD)
            assert only(m.on_timer(deadline_seen)).state is S.PRIMARY
        now = target
        effects = m.on_event(bfd(up=want_up), now)
        if want_up == up:
            assert effects == []
            continue
        if not want_up:
            state = m.rows()[0].state
            assert state is S.FALLBACK
            up = False
        else:
            assert effects == []  # a return waits
            up, up_since = True, now
            assert m.next_deadline() == pytest.approx(now + HOLD)
