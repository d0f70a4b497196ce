"""Residual capacity (``link_quality.foreign_classes``): the rate of strict-priority classes
that no load balancer can steer is taken off the capacity a helper's heartbeats report. The
core in virtual time, the config, and the qdisc reader against a real prio qdisc."""

from __future__ import annotations

import asyncio
import inspect
import json
import socket
import time
from collections.abc import Awaitable, Callable

import pytest
from glbdlab.netns import Lab, Netns

from glbd.base.reasons import LinkChange
from glbd.config import config as cfgmod
from glbd.config.config_quality import LinkQualitySection
from glbd.quality.linkq import (
    LinkMonitor,
    LinkMonParams,
    LinkSample,
    QualityChanged,
    parse_tc_handle,
)
from glbd.quality.linkrunner import MonitorRunner
from glbd.quality.linkstats import StatsReader, foreign_bytes

CLS = parse_tc_handle("10:2")


def _mon(cap: float = 10.0) -> LinkMonitor:
    m = LinkMonitor(LinkMonParams(capacity_mbps={"eth1": cap}, foreign_classes=frozenset({CLS})))
    m.set_interfaces(["eth1"])
    m.on_samples([LinkSample("eth1", True, 0, 0, 7)], 0.0)
    m.on_samples([LinkSample("eth1", True, 1000, 0, 7)], 0.01)
    return m


def _feed(m: LinkMonitor, mbps: float, t0: float, seconds: float, b0: int = 0) -> int:
    """Foreign traffic at ``mbps`` every 50 ms from ``t0``; returns the last byte count."""
    b = b0
    steps = round(seconds / 0.05)
    for i in range(steps + 1):
        m.on_foreign({7: b}, t0 + i * 0.05)
        b += int(mbps * 1e6 / 8 * 0.05)
    return b


def test_handles() -> None:
    assert parse_tc_handle("10:2") == 0x00100002
    assert parse_tc_handle("ffff:ffff") == 0xFFFFFFFF
    for bad in ("10", "10:", ":2", "0:1", "10:0", "g:1", "10:10000"):
        with pytest.raises(ValueError):
            parse_tc_handle(bad)


def test_residual_follows_the_foreign_rate_in_steps_with_a_deadband() -> None:
    m = _mon()
    entry = lambda: m.entries({"eth1": 42})[0]  # noqa: E731
    residual = lambda: m.quality("eth1").residual_mbps  # type: ignore[union-attr]  # noqa: E731
    b = _feed(m, 0.0, 0.0, 1.0)  # nothing foreign for a second: the configured capacity
    assert residual() is None and entry().capacity_mbps == 10
    # a steady 7.5 Mbit/s starts: big moves go out at once, then it converges on 2.5
    seen = []
    for i in range(1, 21):
        b += int(7.5e6 / 8 * 0.05)
        if ch := m.on_foreign({7: b}, 1.0 + i * 0.05):
            assert [(c.reason, c.old_band, c.quality.residual_mbps) for c in ch] == [
                ("residual", 7, residual())
            ]
            seen.append((i, residual()))
    assert seen[0] == (1, pytest.approx(7.0))  # the first 50 ms reading
    assert seen[-1][1] == pytest.approx(2.5) and seen[-1][0] <= 9  # within 0.45 s
    assert [r for _, r in seen] == sorted([r for _, r in seen], reverse=True)  # monotone
    assert entry().capacity_mbps == round(2.5)  # what the heartbeat carries (Mbit/s)
    # a bursty class wobbling around 7.5 (7.0 / 8.0 per reading) does not move it
    t = 2.0
    for i in range(20):
        b += int((7.0 if i % 2 else 8.0) * 1e6 / 8 * 0.05)
        t += 0.05
        assert m.on_foreign({7: b}, t) == []
    # a single reading inside the deadband does not move it either, a steady shift does
    b += int(7.0e6 / 8 * 0.05)
    t += 0.05
    assert m.on_foreign({7: b}, t) == []
    b = _feed(m, 7.0, t + 0.05, 1.0, b)
    assert residual() == pytest.approx(3.0)
    # the background stops: back to the full capacity (None = as configured)
    _feed(m, 0.0, t + 1.2, 1.0, b)
    assert residual() is None
    assert entry().capacity_mbps == 10


def test_floor_counter_reset_and_no_classes() -> None:
    m = _mon()
    b = _feed(m, 50.0, 0.0, 1.0)  # more than the link: floored at 5 %
    assert m.quality("eth1").residual_mbps == pytest.approx(0.5)  # type: ignore[union-attr]
    assert m.on_foreign({7: 0}, 1.1) == []  # qdisc replaced: counter reset, re-baseline
    assert m.quality("eth1").residual_mbps == pytest.approx(0.5)  # type: ignore[union-attr]
    # a reload that keeps the classes and the capacity moves nothing
    same = LinkMonParams(capacity_mbps={"eth1": 10.0}, foreign_classes=frozenset({CLS}))
    assert m.set_params(same) == []
    # feature off: capacity again, reported as a change so heartbeats and the table follow
    moved = m.set_params(LinkMonParams(capacity_mbps={"eth1": 10.0}))
    assert [(c.reason, c.quality.residual_mbps, c.quality.capacity_mbps) for c in moved] == [
        ("capacity", None, 10.0)
    ]
    assert m.quality("eth1").residual_mbps is None  # type: ignore[union-attr]
    # a new configured capacity is a change too
    moved = m.set_params(LinkMonParams(capacity_mbps={"eth1": 20.0}))
    assert [(c.reason, c.quality.capacity_mbps) for c in moved] == [("capacity", 20.0)]
    del b


def test_a_load_balancers_own_residual_feeds_its_local_capacity() -> None:
    """Foreign traffic on a leaf's own uplink: the path table's local part uses the residual
    (``LinkQuality.usable``, what the wiring hands to ``set_local``), so DLB weights follow."""
    from glbd.quality.pathmodel import NextHop, PathTableParams
    from glbd.quality.pathtable import PathTable

    mons = {}
    t = PathTable(PathTableParams())
    nhs = [NextHop(i + 1, f"198.18.{i}.0", f"eth{i + 1}") for i in range(2)]
    for i, nh in enumerate(nhs):
        m = LinkMonitor(
            LinkMonParams(capacity_mbps={nh.ifname: 10.0}, foreign_classes=frozenset({CLS}))
        )
        m.set_interfaces([nh.ifname])
        m.on_samples([LinkSample(nh.ifname, True, 0, 0, 7)], 0.0)
        m.on_samples([LinkSample(nh.ifname, True, 1000, 0, 7)], 0.01)
        _feed(m, 5.0 if i == 0 else 0.0, 0.0, 1.0)  # eth1 has 5 of 10 Mbit/s left
        mons[nh.ifname] = m
        q = m.quality(nh.ifname)
        assert q is not None
        t.set_local(nh.ifname, q.usable())
    assert mons["eth1"].quality("eth1").usable().capacity_mbps == pytest.approx(5.0)  # type: ignore[union-attr]
    assert mons["eth2"].quality("eth2").usable().capacity_mbps == 10.0  # type: ignore[union-attr]
    t.set_prefix("p", {nh: None for nh in nhs})
    ws = t.weights(t.profile_of("p") or "")
    assert [ws[nh].value for nh in nhs] == [128, 255]


def test_foreign_bytes_picks_the_classes_and_skips_garbage() -> None:
    import struct

    def nla(t: int, data: bytes) -> bytes:
        return struct.pack("=HH", 4 + len(data), t) + data + bytes(-len(data) % 4)

    def qdisc(ifindex: int, parent: int, sent: int | None) -> bytes:
        body = struct.pack("=BxxxiIII", 0, ifindex, 0, parent, 0) + nla(1, b"pfifo\0")  # KIND
        if sent is not None:
            body += nla(7, nla(1, struct.pack("=QI4x", sent, 1)))  # TCA_STATS2 { BASIC }
        return body

    rows = [
        (36, qdisc(3, CLS, 1000)),
        (36, qdisc(3, CLS, 500)),  # two qdiscs under that class: summed
        (36, qdisc(3, parse_tc_handle("10:3"), 9999)),  # another class
        (36, qdisc(4, CLS, None)),  # no stats
        (36, b"\x00" * 7),  # short
        (24, qdisc(5, CLS, 1)),  # not a qdisc message
    ]
    assert foreign_bytes(rows, frozenset({CLS})) == {3: 1500}


def test_config_validates_handles(tmp_path: object) -> None:
    from pathlib import Path

    base = 'router_id = "198.18.255.1"\nlocal_as = 65001\nrole = "helper"\n'
    p = Path(str(tmp_path)) / "g.toml"
    p.write_text(base + '[link_quality]\nforeign_classes = ["10:2", "1:3"]\n')
    assert cfgmod.load(p).link_quality.foreign_classes == ["10:2", "1:3"]
    p.write_text(base + '[link_quality]\nforeign_classes = ["10"]\n')
    with pytest.raises(cfgmod.ConfigError, match="foreign_classes"):
        cfgmod.load(p)


@pytest.mark.netns
async def test_reader_counts_the_foreign_class_of_a_real_prio_qdisc(netns_lab: Lab) -> None:
    """tbf over three strict-priority HTB classes with a pfifo each (the fabric benchmark's
    links); unmarked UDP lands in the default class 10:2, a socket with priority 10:3 in 10:3.
    The reader sums only 10:2, and the monitor driven by MonitorRunner reports the residual in
    its heartbeat entries."""
    a, _b = netns_lab.pair("fo", "fi")
    cmds = [
        "qdisc replace dev fo-fi root handle 1: tbf rate 20mbit burst 32kb latency 100ms",
        "qdisc replace dev fo-fi parent 1:1 handle 10: htb default 2",
    ]
    for i in (1, 2, 3):
        cmds += [
            f"class add dev fo-fi parent 10: classid 10:{i} htb rate 20mbit prio {i - 1} "
            "quantum 1514",
            f"qdisc add dev fo-fi parent 10:{i} handle {10 + i}: pfifo",
        ]
    a.run(["tc", "-batch", "-"], input="\n".join(cmds) + "\n")
    reader = await StatsReader.open(netns=a.name)
    mon = LinkMonitor(
        LinkMonParams(
            capacity_mbps={"fo-fi": 20.0}, foreign_classes=frozenset({CLS}), foreign_every=2
        )
    )
    mon.set_interfaces(["fo-fi"])
    updates: list[list[QualityChanged]] = []  # what the wiring's on_local gets
    runner = MonitorRunner(mon, reader, lambda ch, m: updates.append(ch))
    try:
        ifindex = json.loads(a.ip("-j", "link", "show", "fo-fi").stdout)[0]["ifindex"]
        with a.socket(socket.AF_INET, socket.SOCK_DGRAM) as warm:  # resolve the neighbour
            warm.sendto(b"w", ("198.18.0.2", 9))
        assert await _until(lambda: _neigh_resolved(a, "198.18.0.2", "fo-fi"), 5.0)

        async def foreign() -> dict[int, int]:
            return await reader.finish(reader.foreign_steps(frozenset({CLS})), started=False)

        before = await foreign()
        with (
            a.socket(socket.AF_INET, socket.SOCK_DGRAM) as be,
            a.socket(socket.AF_INET, socket.SOCK_DGRAM) as bulk,
        ):
            bulk.setsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY, 0x00100003)  # class 10:3
            for _ in range(50):
                be.sendto(b"x" * 1000, ("198.18.0.2", 9))
                bulk.sendto(b"y" * 1000, ("198.18.0.2", 9))
        sent = 0

        async def counted() -> bool:  # 100 kB through 20 Mbit/s: 40 ms (counted when sent)
            nonlocal sent
            sent = (await foreign()).get(ifindex, 0) - before.get(ifindex, 0)
            return sent >= 50 * 1028

        await _until(counted, 5.0)  # all 50 counted (or the assertion below says how many)
        assert 50 * 1028 <= sent < 2 * 50 * 1028  # the best-effort datagrams only
        # 15 Mbit/s of best effort for a second: residual 5 of 20 Mbit/s
        runner.start()
        with a.socket(socket.AF_INET, socket.SOCK_DGRAM) as be:
            be.setblocking(False)
            t_end = time.monotonic() + 1.5
            sent_b = 0
            t0 = time.monotonic()
            while time.monotonic() < t_end:
                due = (time.monotonic() - t0) * 15e6 / 8
                while sent_b < due:
                    try:
                        be.sendto(b"z" * 1400, ("198.18.0.2", 9))
                    except BlockingIOError:
                        break
                    sent_b += 1428
                await asyncio.sleep(0.002)  # the stimulus: pacing the sender
        q = mon.quality("fo-fi")
        assert q is not None and q.residual_mbps is not None
        assert 3.0 <= q.residual_mbps <= 7.0, q
        assert mon.entries({"fo-fi": 42})[0].capacity_mbps == round(q.residual_mbps)
        got = [c for u in updates for c in u if c.reason == "residual"]
        assert got and got[-1].quality.residual_mbps == q.residual_mbps  # handed on
    finally:
        await runner.stop()
        reader.close()


def _neigh_resolved(ns: Netns, addr: str, dev: str) -> bool:
    rows = json.loads(ns.ip("-j", "neigh", "show", addr, "dev", dev).stdout or "[]")
    return any(set(r.get("state", [])) & {"REACHABLE", "STALE", "DELAY", "PROBE"} for r in rows)


async def _until(cond: Callable[[], bool | Awaitable[bool]], timeout: float) -> bool:
    """Poll ``cond`` until it holds (True) or ``timeout``, a generous upper bound, passes."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        got = cond()
        if await got if inspect.isawaitable(got) else got:
            return True
        if loop.time() >= end:
            return False
        await asyncio.sleep(0.01)  # poll interval


def _saturate(m: LinkMonitor, t0: float, seconds: float, foreign_mbps: float) -> None:
    """The link sent at its full 10 Mbit/s with a 200 kB queue, ``foreign_mbps`` of it foreign,
    sampled every 10 ms (foreign classes read every 50 ms)."""
    tx = fb = 0
    for i in range(round(seconds / 0.01) + 1):
        t = t0 + i * 0.01
        m.on_samples([LinkSample("eth1", True, tx, 200_000, 7)], t)
        if i % 5 == 0:
            m.on_foreign({7: fb}, t)
        tx += int(10e6 / 8 * 0.01)
        fb += int(foreign_mbps * 1e6 / 8 * 0.01)


@pytest.mark.parametrize("band_from_foreign", [False, True])
def test_band_from_foreign_ignores_the_load_balancers_own_traffic(
    band_from_foreign: bool,
) -> None:
    """A link full of steerable traffic (no foreign load) keeps its best band only when the
    band comes from the foreign load; 7.5 Mbit/s of foreign traffic lowers it either way."""
    p = LinkMonParams(
        capacity_mbps={"eth1": 10.0},
        foreign_classes=frozenset({CLS}),
        band_from_foreign=band_from_foreign,
    )
    m = LinkMonitor(p)
    m.set_interfaces(["eth1"])
    _saturate(m, 0.0, 2.0, foreign_mbps=0.0)
    band = m.quality("eth1").band  # type: ignore[union-attr]
    assert (band == 7) if band_from_foreign else (band is not None and band <= 1), band
    _saturate(m, 2.01, 2.0, foreign_mbps=7.5)
    assert m.quality("eth1").band <= 2  # type: ignore[union-attr]


def test_band_from_foreign_needs_a_foreign_source(tmp_path: object) -> None:
    with pytest.raises(ValueError, match="foreign_classes or foreign_ingress"):
        LinkMonParams(band_from_foreign=True)
    with pytest.raises(ValueError, match="exclude each other"):
        LinkMonParams(foreign_ingress=True, foreign_classes=frozenset({CLS}))
    assert LinkMonParams(foreign_ingress=True, band_from_foreign=True).counts_foreign
    with pytest.raises(ValueError, match='needs foreign_from "ingress" or "classes"'):
        LinkQualitySection(band_from="foreign", foreign_from="none")
    with pytest.raises(ValueError, match='foreign_from = "classes" needs foreign_classes'):
        LinkQualitySection(foreign_from="classes")
    with pytest.raises(ValueError, match="read only with foreign_from"):
        LinkQualitySection(foreign_from="ingress", foreign_classes=["10:2"])


@pytest.mark.parametrize(
    ("keys", "source", "band"),
    [
        ({}, "ingress", "foreign"),  # glbd as shipped
        ({"foreign_classes": ["10:2"]}, "classes", "foreign"),
        ({"foreign_from": "none"}, "none", "all"),
        ({"band_from": "all"}, "ingress", "all"),
        (
            {"foreign_from": "classes", "foreign_classes": ["10:2"], "band_from": "all"},
            "classes",
            "all",
        ),
    ],
)
def test_where_the_foreign_load_and_the_band_come_from(
    keys: dict[str, object], source: str, band: str
) -> None:
    q = LinkQualitySection(**keys)  # type: ignore[arg-type]
    assert (q.foreign_source, q.band_source) == (source, band)


def test_the_ingress_counter_feeds_the_same_residual_and_band() -> None:
    """With the ingress counter as the source, on_foreign takes its foreign bytes as it takes
    the classes': a link full of steered traffic keeps band 7, 7.5 Mbit/s of foreign load
    lowers it and the residual."""
    m = LinkMonitor(
        LinkMonParams(capacity_mbps={"eth1": 10.0}, foreign_ingress=True, band_from_foreign=True)
    )
    m.set_interfaces(["eth1"])
    _saturate(m, 0.0, 2.0, foreign_mbps=0.0)
    q = m.quality("eth1")
    assert q is not None and q.band == 7 and q.residual_mbps is None, q
    _saturate(m, 2.01, 2.0, foreign_mbps=7.5)
    q = m.quality("eth1")
    assert q is not None and q.band <= 2 and q.residual_mbps is not None, q
    assert q.foreign_mbps is not None and 6.5 < q.foreign_mbps < 8.5, q


def test_changing_the_foreign_source_drops_the_old_readings() -> None:
    """A reload from the classes to the ingress counter (or a fallback from it) starts the
    foreign rate afresh: the other source's byte count is no baseline."""
    p = LinkMonParams(capacity_mbps={"eth1": 10.0}, foreign_classes=frozenset({CLS}))
    m = LinkMonitor(p)
    m.set_interfaces(["eth1"])
    _saturate(m, 0.0, 2.0, foreign_mbps=7.5)
    assert m.quality("eth1").residual_mbps is not None  # type: ignore[union-attr]
    moved = m.set_params(LinkMonParams(capacity_mbps={"eth1": 10.0}, foreign_ingress=True))
    assert [c.reason for c in moved] == [LinkChange.CAPACITY]
    q = m.quality("eth1")
    assert q is not None and q.residual_mbps is None and q.foreign_mbps is None, q


def test_a_band_from_the_foreign_load_is_advertised_in_the_capacity_alone() -> None:
    """With bands from the foreign load, the heartbeat carries that load once: in the residual
    capacity, with the link at band 7 (the receiver weighs capacity x band). The monitor's own
    band still shows it; with bands from all traffic the entry carries the measured band."""
    for from_foreign in (True, False):
        m = LinkMonitor(
            LinkMonParams(
                capacity_mbps={"eth1": 10.0},
                foreign_classes=frozenset({CLS}),
                band_from_foreign=from_foreign,
            )
        )
        m.set_interfaces(["eth1"])
        tx, t, b = 0, 0.0, 0
        for _ in range(100):  # one second: 7.5 Mbit/s foreign, the link full
            m.on_samples([LinkSample("eth1", True, tx, 200_000, 7)], t)
            if round(t * 100) % 5 == 0:
                m.on_foreign({7: b}, t)
                b += int(7.5e6 / 8 * 0.05)
            tx += int(10e6 / 8 * 0.01)
            t += 0.01
        q = m.quality("eth1")
        assert q is not None and q.band <= 2, q  # measured: the link is loaded either way
        (e,) = m.entries({"eth1": 42})
        assert e.capacity_mbps == round(q.residual_mbps or 0) <= 3
        assert e.band == (7 if from_foreign else q.band)
        # the local part of this router's path table sees the link as the heartbeat says it
        u = m.usable("eth1")
        assert u is not None and (u.band, u.capacity_mbps) == (e.band, q.residual_mbps)
