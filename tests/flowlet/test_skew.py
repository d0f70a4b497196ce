"""The "auto" flowlet timeout (glbd.flowlet.skew) in virtual time, and the heartbeat entries'
queue bound it reads."""

from __future__ import annotations

import pytest

from glbd.flowlet.skew import SkewEstimator, SkewParams
from heartbeat import wire


def test_starts_at_the_floor_and_stays_there_without_queues() -> None:
    est = SkewEstimator(SkewParams(floor_ns=500_000))
    assert est.timeout_ns == 500_000
    assert all(est.observe(50.0, 100.0, t / 20) is None for t in range(200))
    assert est.timeout_ns == 500_000


def test_covers_both_hops_at_once_on_the_ladder() -> None:
    est = SkewEstimator(SkewParams(floor_ns=500_000, step=1.25))
    new = est.observe(60_000.0, 100_000.0, 1.0)  # 60 ms local + 100 ms remote
    assert new is not None and new == est.timeout_ns
    assert 160_000_000 <= new < 160_000_000 * 1.25
    assert est.observe(60_000.0, 100_000.0, 1.05) is None  # same rung: no write


def test_peak_of_each_hop_is_held_for_a_window_of_loaded_seconds_then_forgotten() -> None:
    est = SkewEstimator(SkewParams(floor_ns=500_000, window_s=10.0))
    est.observe(0.0, 100_000.0, 0.0)  # the spine's queue was deep
    est.observe(50_000.0, 0.0, 3.0)  # later a local one; the remote has drained
    assert est.skew_us() == 150_000.0  # both peaks of the window, not one reading
    held = est.timeout_ns
    # an idle fabric says nothing about the skew under load: held however long it lasts
    for t in range(4, 200):
        assert est.observe(0.0, 0.0, float(t)) is None, t
    assert est.timeout_ns == held
    # seconds with shallow queues push the old peaks out, once they fill a window
    for t in range(200, 208):
        assert est.observe(1_000.0, 1_000.0, float(t)) is None, t
    assert est.skew_us() == 150_000.0
    assert est.observe(1_000.0, 1_000.0, 208.0) is not None  # the remote peak left
    assert est.skew_us() == 51_000.0
    est.observe(1_000.0, 1_000.0, 209.0)  # and the local one
    assert est.skew_us() == 2_000.0 and est.timeout_ns < held


def test_ceiling_bounds_a_runaway_queue() -> None:
    est = SkewEstimator(SkewParams(floor_ns=500_000, ceiling_ns=2_000_000_000))
    assert est.observe(1e9, 1e9, 0.0) == 2_000_000_000


def test_a_growing_queue_costs_few_writes() -> None:
    est = SkewEstimator(SkewParams(floor_ns=500_000, step=1.25))
    writes = [est.observe(q * 1000.0, 0.0, q / 1000) for q in range(0, 200)]  # 0..200 ms
    n = sum(w is not None for w in writes)
    assert 0 < n <= 30 and est.timeout_ns >= 199_000_000


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        ({"floor_ns": 0}, "floor"),
        ({"floor_ns": 5, "ceiling_ns": 4}, "floor"),
        ({"step": 1.0}, "step"),
    ],
)
def test_params_are_checked(bad: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SkewParams(**bad)  # type: ignore[arg-type]


def test_entries_queue_bound_is_the_deepest_queue_over_the_slowest_link() -> None:
    e = wire.Entries(
        [
            wire.Entry(1, 1, 10_000, 7, 0, 0, 12_500),  # 10 us at 10 Gbit/s
            wire.Entry(2, 2, 10, 3, 0, 9000, 125_000),  # 100 ms at 10 Mbit/s
            wire.Entry(3, 3, 0, 0, wire.ENTRY_FLAG_DOWN, 0, 0),  # down: no capacity
        ]
    )
    assert e.max_queue_delay_us() == pytest.approx(100_000.0)
    assert wire.Entries([]).max_queue_delay_us() == 0.0
    assert wire.Entries([wire.Entry(1, 1, 100, 7)]).max_queue_delay_us() == 0.0


def test_starts_conservative_for_one_window_then_follows_the_queues() -> None:
    """Before the window has seen the fabric, the timeout is at least start_ns: the first
    flowlets cannot overtake queues nobody has measured yet."""
    est = SkewEstimator(SkewParams(floor_ns=500_000, window_s=10.0, start_ns=100_000_000))
    assert est.timeout_ns == 100_000_000  # configured before any reading
    assert est.observe(50.0, 100.0, 5.0) is None  # shallow queues: still held
    assert est.observe(50.0, 100.0, 14.9) is None
    assert est.timeout_ns == 100_000_000
    new = est.observe(50.0, 100.0, 15.0)  # one window after the first reading
    assert new == 500_000 == est.timeout_ns
    # a deeper queue than the start value is followed at once, also inside the window
    est2 = SkewEstimator(SkewParams(floor_ns=500_000, window_s=10.0, start_ns=1_000_000))
    up = est2.observe(0.0, 5_000.0, 0.0)
    assert up is not None and up >= 5_000_000


def test_a_restart_resumes_the_timeout_it_left_for_one_window() -> None:
    """A restarted glbd has not measured the fabric yet: the timeout its predecessor left in
    the program holds for the first window (not the shorter start value), then the queues
    decide again."""
    est = SkewEstimator(SkewParams(floor_ns=500_000, window_s=10.0, start_ns=100_000_000))
    assert est.resume(505_000_000)
    assert est.timeout_ns == 505_000_000 and est.to_dict()["resumed_us"] == 505_000.0
    assert est.observe(50.0, 100.0, 0.0) is None
    assert est.observe(50.0, 100.0, 9.9) is None
    assert est.observe(50.0, 100.0, 10.0) == 500_000  # one window later: the queues again
    assert not est.resume(700_000_000)  # only before the first reading
    assert est.timeout_ns == 500_000
    low = SkewEstimator(SkewParams(floor_ns=500_000, window_s=10.0, start_ns=100_000_000))
    low.resume(2_000_000)  # below the start value: the start value holds
    assert low.timeout_ns == 100_000_000
    capped = SkewEstimator(SkewParams(floor_ns=500_000, ceiling_ns=1_000_000_000))
    capped.resume(5_000_000_000)
    assert capped.timeout_ns == 1_000_000_000
