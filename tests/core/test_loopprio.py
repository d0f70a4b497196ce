"""The event loop's real-time policy: real time while it mostly waits, normal scheduling while
it is busy with bulk work, back once quiet; off at priority 0 or once the kernel refused."""

from __future__ import annotations

from glbd.daemon.loopprio import LoopPriority, Policy


def test_real_time_from_the_start_then_normal_while_busy_and_back_when_quiet() -> None:
    p = LoopPriority(5)
    assert p.start() is Policy.REALTIME
    # the GLB loop's own work under load, with one busy tick among them: stays real time
    for cpu in (0.04, 0.04, 0.09, 0.04, 0.04):
        assert p.on_tick(cpu, 0.1) is None
    # a table arriving: a core's worth for a few ticks
    got = [p.on_tick(0.1, 0.1) for _ in range(5)]
    assert got.count(Policy.NORMAL) == 1 and got[0] is None  # not on the first busy tick
    # quiet again: real time back after a few ticks, not at once
    got = [p.on_tick(0.01, 0.1) for _ in range(5)]
    assert got.count(Policy.REALTIME) == 1 and got[0] is None
    d = p.to_dict()
    assert (d["policy"], d["demotions"], d["promotions"]) == ("realtime", 1, 1)


def test_priority_zero_never_asks_for_real_time() -> None:
    p = LoopPriority(0)
    assert p.start() is None
    assert all(p.on_tick(0.1, 0.1) is None for _ in range(10))
    assert p.policy is Policy.NORMAL


def test_a_refusal_is_kept_and_shown() -> None:
    p = LoopPriority(5)
    p.start()
    p.refuse("Operation not permitted")
    assert p.on_tick(0.0, 0.1) is None  # never retried tick after tick
    assert p.to_dict()["refused"] == "Operation not permitted"
    assert p.policy is Policy.NORMAL


def test_a_new_priority_applies_at_once_unless_busy_and_zero_stops_real_time() -> None:
    p = LoopPriority(5)
    p.start()
    assert p.set_priority(7) is Policy.REALTIME and p.priority == 7  # re-applied at 7
    assert p.set_priority(0) is Policy.NORMAL
    assert p.set_priority(0) is None  # already normal
    for _ in range(6):
        p.on_tick(0.1, 0.1)  # bulk work under way
    assert p.busy and p.set_priority(5) is None  # real time only once it is over
    got = [p.on_tick(0.0, 0.1) for _ in range(5)]
    assert Policy.REALTIME in got
    assert p.stop() is Policy.NORMAL and p.stop() is None
