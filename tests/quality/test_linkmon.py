"""Link monitor core in virtual time: EWMA, bands, hysteresis, down/up, missing interfaces;
the columns path agrees with the LinkSample path; the runner (with a fake reader)."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Callable, Generator

import pytest
from glbdlab.waits import until

from glbd.quality.linkq import (
    Columns,
    LinkMonitor,
    LinkMonParams,
    LinkQuality,
    LinkSample,
    QualityChanged,
    band_of,
    score,
)
from glbd.quality.linkrunner import MonitorRunner
from heartbeat import wire
from tests import vtime

DT = 0.010
CAP = 1000.0  # Mbit/s
FULL = CAP * 1e6 / 8 * DT  # bytes per sample at 100 %


class Feed:
    """Drives one monitor with per-interface load percentages, 10 ms apart."""

    def __init__(self, mon: LinkMonitor, names: list[str]) -> None:
        self.mon = mon
        self.now = 0.0
        self.tx = dict.fromkeys(names, 0)
        mon.set_interfaces(names)
        mon.on_samples([LinkSample(n, True, 0, 0, i + 1) for i, n in enumerate(names)], 0.0)

    def step(
        self,
        load: dict[str, float],
        queue: dict[str, int] | None = None,
        up: dict[str, bool] | None = None,
    ) -> list[tuple[str, int, bool, str]]:
        self.now += DT
        out = []
        for i, n in enumerate(self.tx):
            self.tx[n] += round(FULL * load.get(n, 0.0) / 100)
            out.append(
                LinkSample(n, (up or {}).get(n, True), self.tx[n], (queue or {}).get(n, 0), i + 1)
            )
        ch = self.mon.on_samples(out, self.now)
        return [(c.quality.ifname, c.quality.band, c.quality.down, c.reason) for c in ch]


def entry_of(q: LinkQuality, far_end_id: int) -> wire.Entry:
    """What ``LinkMonitor.entries`` must send for ``q``, worked out independently."""
    cap = q.capacity_mbps if q.residual_mbps is None else q.residual_mbps
    return wire.Entry(
        far_end_id,
        q.ifindex,
        min(0xFFFFFFFF, round(cap)),
        0 if q.down else q.band,
        wire.ENTRY_FLAG_DOWN if q.down else 0,
        min(0xFFFF, round((q.load_pct or 0.0) * 100)),
        min(0xFFFFFFFF, round(q.queue_bytes)),
    )


def mon(**kw: object) -> LinkMonitor:
    base: dict[str, object] = {"default_capacity_mbps": CAP, "ewma_alpha": 1.0, "rate_weight": 1.0}
    base.update(kw)
    return LinkMonitor(LinkMonParams(**base))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "band"),
    [
        (0, 7),
        (10, 7),
        (19.9, 7),
        (20, 6),
        (50, 3),
        (50.1, 3),
        (49.9, 4),
        (80, 0),
        (80.1, 0),
        (90, 0),
        (200, 0),
    ],
)
def test_eight_equal_bands_between_min_and_max(value: float, band: int) -> None:
    assert band_of(score(value, 10, 90)) == band


def test_first_sample_is_baseline_then_measured() -> None:
    m = mon()
    f = Feed(m, ["e1"])
    assert m.qualities() == {}  # one sample: no rate yet, unknown
    assert f.step({"e1": 45}) == [("e1", 4, False, "new")]
    q = m.quality("e1")
    assert q is not None and q.load_pct == pytest.approx(45, rel=1e-3)


def test_ewma_smooths_a_step() -> None:
    m = mon(ewma_alpha=0.25)
    f = Feed(m, ["e1"])
    f.step({"e1": 0})
    loads = []
    for _ in range(12):
        f.step({"e1": 100})
        q = m.quality("e1")
        assert q is not None
        loads.append(q.load_pct)
    assert loads[0] == pytest.approx(25, rel=1e-3) and loads[1] == pytest.approx(43.75, rel=1e-3)
    assert all(a < b for a, b in itertools.pairwise(loads)) and loads[-1] > 95


def test_one_band_wobble_does_not_flap() -> None:
    m = mon()
    f = Feed(m, ["e1"])
    assert f.step({"e1": 45}) == [("e1", 4, False, "new")]
    for i in range(40):  # 50 % is the 4|3 boundary
        assert f.step({"e1": 50.5 if i % 2 else 49.5}) == []
    q = m.quality("e1")
    assert q is not None and q.band == 4


def test_one_band_change_by_margin_or_persistence() -> None:
    m = mon(hysteresis_samples=3, confirm_improvements=False)
    f = Feed(m, ["e1"])
    f.step({"e1": 45})
    assert f.step({"e1": 50.5}) == []  # just past the boundary
    assert f.step({"e1": 50.5}) == []
    assert f.step({"e1": 50.5}) == [("e1", 3, False, "persisted")]  # 3 samples
    assert f.step({"e1": 49}) == []  # score 4.1: back to 4 only a quarter band past
    assert f.step({"e1": 47.5}) == [("e1", 4, False, "margin")]  # score 4.25


def test_two_band_drop_and_down_go_out_at_once() -> None:
    m = mon()
    f = Feed(m, ["e1", "e2"])
    assert sorted(f.step({"e1": 45, "e2": 0})) == [("e1", 4, False, "new"), ("e2", 7, False, "new")]
    assert f.step({"e1": 62, "e2": 0}) == [("e1", 2, False, "jump")]
    assert f.step({"e1": 62}, up={"e2": False}) == [("e2", 0, True, "down")]
    assert f.step({"e1": 62}, up={"e2": False}) == []
    assert f.step({"e1": 62}) == []  # up again: re-baseline first
    assert f.step({"e1": 62, "e2": 15}) == [("e2", 7, False, "up")]


def test_queue_band_and_rate_weight() -> None:
    m = mon(rate_weight=0.5)
    f = Feed(m, ["e1"])
    # load idle (score 8), queue at max (score 0): combined 4 -> band 3
    assert f.step({"e1": 0}, queue={"e1": 300_000}) == [("e1", 3, False, "new")]
    m2 = mon(rate_weight=0.0)
    f2 = Feed(m2, ["e1"])
    assert f2.step({"e1": 100}, queue={"e1": 0}) == [("e1", 7, False, "new")]


def test_missing_interface_is_down_and_counter_reset_rebaselines() -> None:
    m = mon()
    m.set_interfaces(["e1", "e2"])
    m.on_samples([LinkSample("e1", True, 0), LinkSample("e2", True, 0)], 0.0)
    m.on_samples([LinkSample("e1", True, 1000), LinkSample("e2", True, 1000)], 0.01)
    ch = m.on_samples([LinkSample("e1", True, 2000)], 0.02)
    assert [(c.quality.ifname, c.quality.down, c.reason) for c in ch] == [("e2", True, "down")]
    assert m.on_samples([LinkSample("e1", True, 5)], 0.03) == []  # counter went back
    ch = m.set_interfaces(["e1"])
    assert [c.reason for c in ch] == ["removed"]


def test_capacity_override_and_entry() -> None:
    m = LinkMonitor(LinkMonParams(ewma_alpha=1.0, rate_weight=1.0, capacity_mbps={"e1": 100.0}))
    m.set_interfaces(["e1"])
    m.on_samples([LinkSample("e1", True, 0, 0, 7)], 0.0)
    m.on_samples([LinkSample("e1", True, 62_500, 1500, 7)], 0.01)  # 50 Mbit/s of 100
    q = m.quality("e1")
    assert q is not None and q.load_pct == pytest.approx(50) and q.capacity_mbps == 100
    e = entry_of(q, wire.node_id("10.0.0.9"))
    assert e == wire.Entry(wire.node_id("10.0.0.9"), 7, 100, 3, 0, 5000, 1500)
    assert m.entries({"e1": 1}) == [e._replace(far_end_id=1)]
    assert m.to_dict()["links"][0]["band"] == 3


def test_down_entry_has_band_zero_and_flag() -> None:
    m = mon()
    f = Feed(m, ["e1"])
    f.step({"e1": 0})
    f.step({}, up={"e1": False})
    (e,) = m.entries({"e1": 5})
    assert e.down and e.band == 0


def _drive(m: LinkMonitor, via_columns: bool, steps: list[list[LinkSample]]) -> list[object]:
    out: list[object] = []
    for k, batch in enumerate(steps):
        now = 0.01 * (k + 1)
        if via_columns:
            cols = Columns(*zip(*batch, strict=True)) if batch else Columns((), (), (), (), ())
            ch = m.on_columns(cols, now)
        else:
            ch = m.on_samples(batch, now)
        out.append([(c.quality, c.old_band, c.old_down, c.reason) for c in ch])
    out.append(m.to_dict())
    return out


def test_columns_and_samples_agree() -> None:
    rng = random.Random(5)
    names = [f"e{i}" for i in range(6)]
    tx = dict.fromkeys(names, 0)
    steps = []
    for k in range(300):
        batch = []
        order = names[:] if k % 50 < 40 else rng.sample(names, len(names))  # order changes
        for i, n in enumerate(order):
            if k % 37 == 5 and n == "e2":
                continue  # missing from this dump
            tx[n] += rng.randrange(0, int(FULL * 1.2))
            up = not (k % 23 < 3 and n == "e4")
            batch.append(LinkSample(n, up, tx[n], rng.randrange(0, 400_000), i + 1))
        batch.append(LinkSample("not-monitored", True, k, 0, 99))
        steps.append(batch)
    a, b = mon(ewma_alpha=0.25, rate_weight=0.5), mon(ewma_alpha=0.25, rate_weight=0.5)
    a.set_interfaces(names)
    b.set_interfaces(names)
    assert _drive(a, False, steps) == _drive(b, True, steps)


def test_interface_set_and_entries() -> None:
    m = mon()
    f = Feed(m, ["e1", "e2", "e3"])
    s = m.interface_set
    assert s == {"e1", "e2", "e3"} and m.interface_set is s
    f.step({"e1": 45, "e2": 95, "e3": 5}, queue={"e1": 5000})
    f.step({"e1": 45}, up={"e2": False})
    far = {"e1": 11, "e2": 12}
    want = [entry_of(q, far[n]) for n, q in sorted(m.qualities().items()) if n in far]
    assert sorted(m.entries(far)) == sorted(want) and any(e.down for e in want)
    m.set_interfaces(["e1"])
    assert m.interface_set == {"e1"} and m.interface_set is not s
    assert [c.reason for c in m.on_samples([LinkSample("e1", True, 0)], 1.0)] == []


class _FakeReader:
    """A StatsReader stand-in: read_steps yields ``waits`` times before returning."""

    def __init__(self, waits: int = 0, fail_every: int = 0) -> None:
        self.waits = waits
        self.fail_every = fail_every
        self.calls = 0
        self.tx = 0

    def watch_links(self, callback: object) -> None:
        pass

    def read_steps(self, ifnames: object, now: float) -> Generator[None, None, Columns]:
        self.calls += 1
        for _ in range(self.waits):
            yield
        if self.fail_every and self.calls % self.fail_every == 0:
            raise OSError(105, "No buffer space available")
        self.tx += 1000
        return Columns(("e1",), (True,), (self.tx,), (0,), (3,))

    async def finish(self, steps: Generator[None, None, Columns]) -> Columns:
        while True:
            try:
                next(steps)
            except StopIteration as stop:
                cols: Columns = stop.value
                return cols
            await asyncio.sleep(0)  # a fake dump not ready yet: one loop turn per step


@pytest.mark.parametrize("waits", [0, 2])
def test_runner_samples_waits_and_counts_errors(waits: int) -> None:
    vtime.run(lambda: _samples_waits_and_counts_errors(waits))


async def _samples_waits_and_counts_errors(waits: int) -> None:
    m = LinkMonitor(LinkMonParams(sample_interval_s=0.001))
    m.set_interfaces(["e1"])
    reader = _FakeReader(waits=waits, fail_every=4)
    seen: list[int] = []
    runner = MonitorRunner(m, reader, lambda ch, mm: seen.append(len(ch)))  # type: ignore[arg-type]
    runner.start()
    try:
        await until(lambda: runner.samples >= 6 and runner.errors >= 2, what="6 samples, 2 errors")
    finally:
        await runner.stop()
    assert runner.samples >= 6 and runner.errors >= 2 and len(seen) == runner.samples
    assert (runner.waits > 0) == (waits > 0)
    q = m.quality("e1")
    assert q is not None and q.ifindex == 3
    n = runner.samples
    await asyncio.sleep(0.01)  # the stimulus: time in which a running monitor would tick
    assert runner.samples == n  # stopped: no more ticks


class _ForeignReader(_FakeReader):
    """Also answers the foreign-class dump: nothing, then a burst far above the capacity."""

    def __init__(self) -> None:
        super().__init__()
        self.foreign_calls = 0

    def foreign_steps(self, parents: frozenset[int]) -> Generator[None, None, dict[int, int]]:
        self.foreign_calls += 1
        return {3: 0 if self.foreign_calls == 1 else 10**9}
        yield  # a generator that never waits

    def drain(self) -> None:
        pass


def test_runner_hands_on_a_residual_move_in_the_same_sample_as_a_band_change() -> None:
    """The second sample brings the link's first band ("new") and, from the foreign classes,
    a residual move: both reach on_update, the residual one with the residual."""
    vtime.run(_residual_move_in_the_same_sample)


async def _residual_move_in_the_same_sample() -> None:
    m = LinkMonitor(
        LinkMonParams(
            sample_interval_s=0.001,
            capacity_mbps={"e1": 10.0},
            foreign_classes=frozenset({0x00100002}),
            foreign_every=1,
        )
    )
    m.set_interfaces(["e1"])
    updates: list[list[tuple[str, float | None]]] = []

    def on_update(changes: list[QualityChanged], mm: LinkMonitor) -> None:
        updates.append([(c.reason, c.quality.residual_mbps) for c in changes])

    runner = MonitorRunner(m, _ForeignReader(), on_update)  # type: ignore[arg-type]
    runner.start()
    try:
        await until(lambda: runner.samples >= 2, what="two samples")
    finally:
        await runner.stop()
    assert updates[:2] == [[], [("new", None), ("residual", pytest.approx(0.5))]]
    q = m.quality("e1")
    assert q is not None and q.residual_mbps == pytest.approx(0.5)


class _OnsetReader(_FakeReader):
    """Idle, then a link saturated before its queue forms, then its queue building: the byte
    counter runs at exactly the capacity (10 Mbit/s) from the fourth read on, whenever the
    reads come."""

    def __init__(self) -> None:
        super().__init__()
        self.backlogs = [0, 0, 0, 0, 6_000, 12_000, 18_000]
        self.t0: float | None = None

    def read_steps(self, ifnames: object, now: float) -> Generator[None, None, Columns]:
        self.calls += 1
        i = min(self.calls - 1, len(self.backlogs) - 1)
        if i == 2:
            self.t0 = now
        tx = 0 if self.t0 is None else round((now - self.t0) * 1.25e6)
        return Columns(("e1",), (True,), (tx,), (self.backlogs[i],), (3,))
        yield  # a generator that never waits


def test_runner_takes_the_sample_in_between_the_core_asks_for() -> None:
    """The first saturated sample has no queue yet; the runner samples again before the next
    interval and the onset is reported on that sample, the only one taken in between. In
    virtual time: on a busy machine a late loop would skip ticks, and the count would measure
    the machine, not the runner."""
    vtime.run(_sample_in_between)


async def _sample_in_between() -> None:
    m = LinkMonitor(LinkMonParams(sample_interval_s=0.01, capacity_mbps={"e1": 10.0}))
    m.set_interfaces(["e1"])
    reader = _OnsetReader()
    onset: list[int] = []

    def on_update(changes: list[QualityChanged], mm: LinkMonitor) -> None:
        if any(c.reason == "jump" for c in changes):
            onset.append(reader.calls)

    runner = MonitorRunner(m, reader, on_update)  # type: ignore[arg-type]
    runner.start()
    try:
        await until(lambda: onset, what="the onset")
    finally:
        await runner.stop()
    assert onset == [5] and runner.rechecks == 1


# ---- idle sampling: a quiet router samples at idle_sample_interval_s ----------------------


def test_the_core_asks_for_the_idle_interval_only_while_every_link_is_quiet() -> None:
    m = mon(idle_sample_interval_s=0.05)
    f = Feed(m, ["e1", "e2"])
    f.step({})  # first rates: "new" bands go out, not yet quiet
    assert m.next_interval() == DT
    f.step({"e1": 2.0, "e2": 1.0})
    assert m.next_interval() == 0.05
    f.step({"e1": 30.0})  # above load_min_pct on one link: its band drops
    assert m.next_interval() == DT
    f.step({})  # idle again, but the better band is not confirmed yet
    assert m.next_interval() == DT
    f.step({})
    f.step({})  # the best band is back (hysteresis_samples = 3): a change, not quiet yet
    assert m.quality("e1").band == 7 and m.next_interval() == DT  # type: ignore[union-attr]
    f.step({})
    assert m.next_interval() == 0.05
    f.step({}, queue={"e2": 5_000})  # a queue without load
    assert m.next_interval() == DT


def test_without_an_idle_interval_the_core_always_asks_for_the_sample_interval() -> None:
    m = mon()
    f = Feed(m, ["e1"])
    for _ in range(3):
        f.step({})
        assert m.next_interval() == DT


class _LinkEventReader(_FakeReader):
    """Idle counters; holds the runner's link watcher so a test can fire a link event."""

    def __init__(self) -> None:
        super().__init__()
        self.watcher: Callable[[], None] | None = None
        self.at: list[float] = []

    def watch_links(self, callback: Callable[[], None] | None) -> None:
        self.watcher = callback

    def read_steps(self, ifnames: object, now: float) -> Generator[None, None, Columns]:
        self.at.append(now)
        return Columns(("e1",), (True,), (0,), (0,), (3,))
        yield  # a generator that never waits


def test_runner_samples_at_the_idle_interval_and_a_link_event_wakes_it() -> None:
    vtime.run(_idle_and_woken)


async def _idle_and_woken() -> None:
    m = LinkMonitor(LinkMonParams(sample_interval_s=0.01, idle_sample_interval_s=0.05))
    m.set_interfaces(["e1"])
    reader = _LinkEventReader()
    runner = MonitorRunner(m, reader, lambda ch, mm: None)  # type: ignore[arg-type]
    loop = asyncio.get_running_loop()
    runner.start()
    try:
        await until(lambda: len(reader.at) >= 6, what="six samples")
        gaps = [round(b - a, 6) for a, b in itertools.pairwise(reader.at)]
        assert gaps[:2] == [0.01, 0.01] and set(gaps[2:]) == {0.05}, gaps
        n, woken_at = len(reader.at), loop.time() + 0.012
        await asyncio.sleep(woken_at - loop.time())  # the stimulus: a link event at this time
        assert reader.watcher is not None
        reader.watcher()
        await until(lambda: len(reader.at) > n, what="the sample the event brings")
        assert reader.at[n] == pytest.approx(woken_at) and runner.wakeups == 1
    finally:
        await runner.stop()
    assert reader.watcher is None
