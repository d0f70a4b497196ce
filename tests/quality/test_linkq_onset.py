"""Link monitor core in virtual time: a congestion onset (saturated, queue building) moves the
band on its first sample; a link loaded in bursts does not flap; a better band is confirmed."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from glbd.config import config
from glbd.config.params import linkmon_params
from glbd.quality.linkq import LinkMonitor, LinkMonParams, LinkSample

CAP = 1000.0  # Mbit/s
P = LinkMonParams(default_capacity_mbps=CAP)
DT = P.sample_interval_s
FULL = CAP * 1e6 / 8 * DT  # bytes per sample at 100 %


class Link:
    """One monitored interface driven sample by sample: load in % of capacity, backlog bytes."""

    def __init__(self, params: LinkMonParams = P) -> None:
        self.mon = LinkMonitor(params)
        self.mon.set_interfaces(["e1"])
        self.now = 0.0
        self.tx = 0
        self.mon.on_samples([LinkSample("e1", True, 0, 0, 1)], 0.0)

    def step(self, load: float, backlog: int = 0, dt: float = DT) -> list[tuple[int, str]]:
        self.now += dt
        self.tx += round(FULL * load / 100 * dt / DT)
        ch = self.mon.on_samples([LinkSample("e1", True, self.tx, backlog, 1)], self.now)
        return [(c.quality.band, c.reason) for c in ch]

    @property
    def band(self) -> int:
        q = self.mon.quality("e1")
        assert q is not None
        return q.band


def idle(link: Link, n: int = 20) -> None:
    for _ in range(n):
        link.step(0)
    assert link.band == 7


def test_onset_moves_the_band_on_its_first_sample() -> None:
    link = Link()
    idle(link)
    # the first sample that finds the link saturated with a queue building
    ch = link.step(100, backlog=5_000)
    assert ch and ch[0][0] <= 5 and ch[0][1] == "jump"
    q = link.mon.quality("e1")
    assert q is not None and q.load_pct == pytest.approx(100)


def test_onset_off_the_ewma_needs_several_samples() -> None:
    link = Link(replace(P, onset_queue_bytes=0))
    idle(link)
    assert link.step(100, backlog=5_000) == []
    steps = 1
    while link.band == 7:
        link.step(100, backlog=5_000 + 5_000 * steps)
        steps += 1
    assert steps * DT >= 0.015  # the EWMA's time constant, not one sample


def test_saturated_without_a_queue_is_not_an_onset() -> None:
    link = Link()
    idle(link)
    assert link.step(100, backlog=0) == []  # full, but keeping up: the EWMA decides
    below = link.step(100, backlog=500)  # below onset_queue_bytes: the EWMA's own pace
    assert all(reason != "jump" and band >= 6 for band, reason in below), below


def test_a_draining_queue_is_not_an_onset() -> None:
    link = Link()
    idle(link)
    link.step(0, backlog=20_000)  # a queue left from before, now draining
    assert link.step(100, backlog=12_000) == []


def test_below_saturation_a_queue_is_not_an_onset() -> None:
    link = Link()
    idle(link)
    assert link.step(60, backlog=5_000) == []


def test_saturated_before_a_queue_forms_asks_for_a_sample_in_between() -> None:
    link = Link()
    idle(link)
    assert link.mon.recheck_due() is None
    # a shaper's bucket still passes the overload: saturated, no queue yet
    assert link.step(130, backlog=0) == []
    assert link.mon.recheck_due() == pytest.approx(link.now + P.onset_recheck * DT)
    # half an interval later the queue builds: the onset is taken on that sample
    ch = link.step(100, backlog=6_000, dt=P.onset_recheck * DT)
    assert ch and ch[0][1] == "jump" and ch[0][0] <= 5
    assert link.mon.recheck_due() is None  # at the onset band: nothing left to settle


def test_a_queue_building_over_a_partly_idle_interval_asks_for_a_sample_in_between() -> None:
    link = Link()
    idle(link)
    assert link.step(40, backlog=2_000) == []  # the overload began late in the interval
    assert link.mon.recheck_due() is not None
    assert link.step(100, backlog=8_000, dt=P.onset_recheck * DT)[0][1] == "jump"


def test_a_burst_draining_at_the_sample_in_between_is_not_an_onset() -> None:
    link = Link()
    idle(link)
    assert link.step(30, backlog=20_000) == []  # a burst arrived at once
    assert link.mon.recheck_due() is not None
    # half an interval later it drains at line rate: saturated, but the queue shrinks
    assert link.step(100, backlog=12_000, dt=P.onset_recheck * DT) == []
    assert link.band == 7


def test_no_sample_in_between_when_an_onset_would_not_lower_the_band() -> None:
    link = Link()
    idle(link)
    link.step(100, backlog=5_000)  # onset: at the band an onset gives
    for _ in range(20):  # saturated, the queue held: nothing an extra sample could change
        link.step(100, backlog=5_000)
        assert link.mon.recheck_due() is None
    off = Link(replace(P, onset_recheck=0))
    idle(off)
    off.step(130, backlog=0)
    assert off.mon.recheck_due() is None


def test_a_sample_of_half_an_interval_weighs_as_half_an_interval_in_the_ewma() -> None:
    a, b = Link(), Link()
    idle(a)
    idle(b)
    a.step(50, dt=DT / 2)
    a.step(50, dt=DT / 2)
    b.step(50)
    qa, qb = a.mon.quality("e1"), b.mon.quality("e1")
    assert qa is not None and qb is not None
    assert qa.load_pct == pytest.approx(qb.load_pct)


def bursts(link: Link, samples: int, every: int) -> list[tuple[int, str]]:
    """A link loaded in bursts: one saturated sample with a queue building every ``every``
    samples, idle in between."""
    out: list[tuple[int, str]] = []
    for i in range(samples):
        out += link.step(100, backlog=4_000) if i % every == 0 else link.step(0)
    return out


def test_a_link_loaded_in_bursts_keeps_one_band() -> None:
    link = Link()
    idle(link)
    assert bursts(link, 40, every=4)  # the first burst moves it
    assert bursts(link, 400, every=4) == []  # then 2 s without one band change


def test_bursts_flap_the_band_when_improvements_are_not_confirmed() -> None:
    link = Link(replace(P, confirm_improvements=False))
    idle(link)
    bursts(link, 40, every=4)
    assert len(bursts(link, 400, every=4)) >= 100


def test_a_better_band_is_confirmed_and_is_the_worst_of_the_confirming_samples() -> None:
    link = Link()
    idle(link)
    assert link.step(100, backlog=5_000)  # onset
    low = link.band
    # the load falls away: the score climbs, but only a run of hysteresis_samples samples a
    # margin above the band reports a better one, at the worst band of that run
    run: list[float] = []
    ch: list[tuple[int, str]] = []
    while not ch:
        ch = link.step(0)
        q = link.mon.quality("e1")
        assert q is not None
        if q.score >= low + 1 + P.hysteresis_margin:
            run.append(q.score)
        else:
            assert not ch and not run
    assert len(run) == P.hysteresis_samples
    band, reason = ch[0]
    assert reason == "persisted"
    assert band == math.ceil(run[0]) - 1 and low < band < math.ceil(run[-1]) - 1


def test_one_sample_of_headroom_does_not_lift_the_band() -> None:
    link = Link()
    idle(link)
    link.step(100, backlog=5_000)
    low = link.band
    for _ in range(10):  # saturated, then one idle sample, again and again
        assert link.step(100, backlog=3_000) == []
        assert link.step(0) == []
    assert link.band == low


def test_config_keys_reach_the_core() -> None:
    base = {"router_id": "10.0.0.1", "local_as": 65001, "role": "both"}
    c = config.parse(dict(base), "t.toml")
    p = linkmon_params(c)
    assert (p.sample_interval_s, p.onset_queue_bytes, p.confirm_improvements) == (
        P.sample_interval_s,
        P.onset_queue_bytes,
        P.confirm_improvements,
    )
    c = config.parse(
        {**base, "link_quality": {"onset_queue_bytes": 0, "confirm_improvements": False}},
        "t.toml",
    )
    p = linkmon_params(c)
    assert p.onset_queue_bytes == 0 and p.confirm_improvements is False


def test_the_peak_queue_is_every_samples_deepest_since_the_last_read() -> None:
    """The flowlet timeout reads the queues a few times a second; the monitor keeps the
    deepest smoothed queue of the samples in between, so a queue that came and went between
    two reads still counts, once."""
    link = Link()
    idle(link)
    assert link.mon.take_peak_queue_delay_us() == 0.0
    for backlog in (0, 50_000, 200_000, 0, 0):
        link.step(100, backlog=backlog)
    q = link.mon.quality("e1")
    assert q is not None
    peak = link.mon.take_peak_queue_delay_us()
    assert peak > q.queue_bytes * 8 / CAP  # the queue has drained since: the peak is kept
    assert peak >= 50_000 * 8 / CAP  # at least the first building sample, as drain time (us)
    assert link.mon.take_peak_queue_delay_us() == 0.0  # read once
