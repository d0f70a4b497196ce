"""The full-check schedule of the reconcile loops (flowlet program, foreign-load counter), in
ticks: pure, no clock."""

from __future__ import annotations

import pytest

from glbd.daemon.recheck import Recheck, retry_ticks


def checks(rc: Recheck, ticks: int, ok: bool, suspect: bool = False) -> list[int]:
    """The ticks (numbered from the next) at which ``rc`` asks for a full check, each
    reporting ``ok``."""
    out = []
    for i in range(1, ticks + 1):
        if rc.tick(lambda: suspect):
            out.append(i)
            rc.done(ok)
    return out


def test_while_checks_succeed_only_every_12th_tick_or_when_something_moved() -> None:
    rc = Recheck()
    assert checks(rc, 36, ok=True) == [12, 24, 36]
    assert checks(rc, 3, ok=True, suspect=True) == [1, 2, 3]
    asked = []
    assert rc.tick(lambda: asked.append(1) or False) is False and asked == [1]


def test_a_failing_check_is_retried_ever_less_often_then_every_tick_asks_again() -> None:
    """A machine that cannot run it (no bpftool, say) is not asked every tick: the wait
    doubles with each failure in a row, up to 64 ticks; the cheap test is not even asked."""
    assert [retry_ticks(m) for m in range(9)] == [1, 1, 2, 4, 8, 16, 32, 64, 64]
    rc = Recheck()
    rc.done(False)  # the first apply, before the loop, failed
    asked: list[int] = []
    due = []
    for i in range(1, 200):
        if rc.tick(lambda: asked.append(0) or True):
            due.append(i)
            rc.done(False)
    assert due == [1, 3, 7, 15, 31, 63, 127, 191] and asked == []  # waits 1, 2, 4 ... 64
    assert rc.failing and rc.misses == 1 + len(due)  # the first apply's failure too
    rc.done(True)  # it worked at last: back to the quiet schedule
    assert not rc.failing
    assert len(checks(rc, 12, ok=True)) == 1


@pytest.mark.parametrize("bad", [{"every": 0}, {"max_wait": 0}])
def test_params_are_checked(bad: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="every >= 1"):
        Recheck(**bad)
