"""The colours bench's measures (bench/colours.py) on made-up arrivals: reordering, loss and the
outage across a failure, and its report's verdicts."""

from __future__ import annotations

from typing import Any

from bench.colours import SubFlow, _lost, _reordered, outage, report


def flow(rx: list[tuple[int, float]], sent: int) -> SubFlow:
    f = SubFlow("host1", "host2", "10.1.1.2", "10.1.2.2", 50000, rx)
    f.sent = sent
    return f


def test_a_datagram_after_a_later_one_is_reordered() -> None:
    f = flow([(0, 0.0), (2, 0.1), (1, 0.2), (3, 0.3), (4, 0.4)], 5)
    assert f.reordered() == 1
    assert _reordered(f, 3, 5) == 0
    assert f.lost() == 0


def test_lost_counts_the_numbers_never_received_in_a_range() -> None:
    f = flow([(0, 0.0), (1, 0.1), (4, 0.4), (4, 0.41)], 6)  # 4 twice: counted once
    assert f.lost() == 3
    assert _lost(f, 0, 2) == 0 and _lost(f, 2, 6) == 3


def test_the_outage_is_the_longest_gap_and_the_whole_window_without_a_resume() -> None:
    arrivals = [(i, i * 0.001) for i in range(3000)]
    resumed = arrivals[:500] + [(i, 0.505 + (i - 504) * 0.001) for i in range(504, 3000)]
    f = flow(resumed, 3000)
    assert abs(outage(f, 0.5, 2.0) - 0.006) < 1e-9  # 0.499 -> 0.505
    dead = flow(arrivals[:500], 3000)
    assert abs(outage(dead, 0.5, 2.0) - (2.0 - 0.499)) < 1e-9


def _row(key: str, collide: int, local_ms: float, remote_ms: float, ret: int) -> dict[str, Any]:
    leg = {"outage_ms": local_ms, "lost": 0, "return_lost": ret, "return_reordered": 0}
    return {
        "contender": key,
        "exchange": {"colliding_subflows": collide, "pairs_with_collision": 0, "reordered": 0},
        "local": leg,
        "remote": {**leg, "outage_ms": remote_ms},
    }


META = {"commit": "c", "date": "d", "machine": "m", "cpus": "x", "load_start": "0"}


def test_the_report_says_which_colour_targets_are_met() -> None:
    text = report([_row("ecmp", 20, 3, 3000, 0), _row("colours", 0, 7, 15, 0)], META)
    assert "VERDICT colours spine collisions: 0 (target == 0): met" in text
    assert "VERDICT colours remote failover ms: 15 (target <= 50 ms): met" in text
    bad = report([_row("colours", 2, 400, 80, 3)], META)
    assert bad.count("NOT met") == 4  # collisions, local, remote, return
