"""The move gate (glbd/flowlet/movegate.py) in virtual time: which weight changes let flowlet gaps
move flows, and how the chance the program computes falls."""

from __future__ import annotations

import pytest

from glbd.flowlet.movegate import (
    ALWAYS,
    NEVER,
    ONE,
    MoveChance,
    MoveGate,
    MoveGateParams,
    weight_shift,
)

S = 10**9
EQUAL4 = {"s1": 64, "s2": 64, "s3": 64, "s4": 64}


def test_a_failed_next_hop_is_no_shift_of_the_others() -> None:
    assert weight_shift(EQUAL4, {"s1": 64, "s2": 64, "s4": 64}) == 0.0
    gate = MoveGate()
    assert gate.observe({"g": EQUAL4}, (), 0) is None  # first sight: the reference
    assert gate.observe({"g": {"s1": 64, "s2": 64, "s4": 64}}, (), S) is None
    assert gate.chance == NEVER and gate.opened == 0


def test_a_next_hop_whose_link_went_down_is_no_shift_of_the_others() -> None:
    # the path table gives a locally down next hop weight 0 before BGP withdraws it: the
    # kernel moves its flows, the others' split is unchanged, so gaps must not move theirs
    down = {"s1": 64, "s2": 64, "s3": 0, "s4": 64}
    assert weight_shift(EQUAL4, down) == 0.0
    gate = MoveGate()
    gate.observe({"g": EQUAL4}, (), 0)
    assert gate.observe({"g": down}, (), S) is None
    assert gate.chance == NEVER and gate.opened == 0
    # while a survivor losing weight alongside is still a shift
    assert weight_shift(EQUAL4, {"s1": 32, "s2": 64, "s3": 0, "s4": 64}) == pytest.approx(
        1 / 3 - 32 / 160
    )


def test_a_hotspot_opens_the_gate_for_every_gap_then_it_closes() -> None:
    hot = {"s1": 8, "s2": 64, "s3": 64, "s4": 64}
    assert weight_shift(EQUAL4, hot) == pytest.approx(0.25 - 8 / 200)
    gate = MoveGate(MoveGateParams(threshold=0.05, decay_s=2.0))
    gate.observe({"g": EQUAL4}, (), 0)
    chance = gate.observe({"g": hot}, (), 5 * S)
    assert chance == MoveChance(ONE, 5 * S, 2 * S)
    assert chance.at(5 * S) == 1.0
    assert chance.at(6 * S) == pytest.approx(0.5, abs=1e-4)
    assert chance.at(7 * S) == 0.0 and chance.at(99 * S) == 0.0
    assert chance.at(4 * S) == 1.0  # a clock read before t0 counts as t0
    # the same weights again: settled, nothing new
    assert gate.observe({"g": hot}, (), 6 * S) is None


def test_noise_below_the_threshold_never_opens_but_a_drift_adds_up() -> None:
    gate = MoveGate(MoveGateParams(threshold=0.05))
    gate.observe({"g": EQUAL4}, (), 0)
    for i in range(50):  # +-1 around the level: ~0.2 % of the traffic
        d = 1 if i % 2 else -1
        assert gate.observe({"g": {**EQUAL4, "s1": 64 + d, "s2": 64 - d}}, (), i * S) is None
    opened_at = None
    for step in range(1, 20):  # s1 loses 2 a step: opens once the drift reaches 5 %
        w = {**EQUAL4, "s1": 64 - 2 * step}
        if gate.observe({"g": w}, (), (100 + step) * S) is not None:
            opened_at = step
            break
    assert opened_at is not None
    assert weight_shift(EQUAL4, {**EQUAL4, "s1": 64 - 2 * opened_at}) >= 0.05
    assert weight_shift(EQUAL4, {**EQUAL4, "s1": 64 - 2 * (opened_at - 1)}) < 0.05
    assert gate.last_shift >= 0.05 and gate.opened == 1


def test_a_next_hop_that_joins_is_a_shift_toward_it() -> None:
    three = {"s1": 64, "s2": 64, "s4": 64}
    assert weight_shift(three, EQUAL4) == pytest.approx(0.25)
    gate = MoveGate()
    gate.observe({"g": three}, (), 0)
    assert gate.observe({"g": EQUAL4}, (), S) is not None


def test_the_largest_shift_of_any_group_counts_and_removed_groups_are_forgotten() -> None:
    gate = MoveGate()
    gate.observe({"a": EQUAL4, "b": EQUAL4}, (), 0)
    assert gate.observe({"a": {**EQUAL4, "s1": 63}}, ("b",), S) is None
    # "b" comes back: a new reference, not a shift from the old one
    assert gate.observe({"b": {"s1": 1, "s2": 200}}, (), 2 * S) is None
    assert gate.observe({"a": EQUAL4, "b": {"s1": 200, "s2": 1}}, (), 3 * S) is not None


def test_the_chance_in_python_is_the_programs_integer_arithmetic() -> None:
    c = MoveChance(ONE, 1000, 3 * S)
    for age in (0, 1, S // 3, S, 2 * S + 12345, 3 * S - 1):
        left = ((c.decay_ns - age) << 16) // c.decay_ns
        assert c.at(1000 + age) == ((ONE * left) >> 16) / ONE
    assert ALWAYS.at(123 * S) == 1.0 and NEVER.at(0) == 0.0
    assert MoveChance(ONE // 4, 0, 0).at(10**18) == 0.25


@pytest.mark.parametrize(
    "bad", [{"threshold": 0}, {"threshold": 1.5}, {"decay_s": 0}, {"refresh_below": 0}]
)
def test_params_are_checked(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="threshold"):
        MoveGateParams(**bad)


def test_swinging_weights_rewrite_the_chance_only_as_it_falls() -> None:
    """A shift every 10 ms for a second: the gate stays open, written at most every quarter
    of the decay (the chance falls below 0.75), not 100 times."""
    gate = MoveGate(MoveGateParams(threshold=0.05, decay_s=1.0, refresh_below=0.75))
    gate.observe({"g": EQUAL4}, (), 0)
    writes = []
    for i in range(1, 101):
        hot = "s1" if i % 2 else "s2"
        w = {**EQUAL4, hot: 8}
        now = i * S // 100
        if gate.observe({"g": w}, (), now) is not None:
            writes.append(now)
        assert gate.chance.at(now) >= 0.74
    assert 3 <= len(writes) <= 5, writes
    assert gate.opened == len(writes) and gate.refreshes_skipped == 100 - len(writes)
