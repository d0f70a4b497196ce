"""Flowlet switching in the real kernel: one 5-tuple from a host through a router whose route
is a 2-member nexthop group (weights 3:1), counted per member at the sink.

A flow that pauses longer than the flowlet timeout moves among the members in proportion to the
weights, with hash-threshold and resilient groups, IPv4 and IPv6, UDP and TCP; one that never
pauses that long stays on one member; without glbd's program the flow never moves at all (the
kernel uses the sender socket's hash under fib_multipath_hash_policy 1). With ``move =
"on-change"`` a gap moves the flow only with the move chance glbd writes: never while it is 0,
about half the gaps at 1/2, and none once a chance has decayed.
"""

from __future__ import annotations

import dataclasses
import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest
from flowletrig import DST4, DST6, PORT, Rig, Start, bursts, member_of_new_flow

from glbd.flowlet.loader import FlowletAttachment
from glbd.flowlet.movegate import ONE, MoveChance
from glbd.quality.bpfmap import pinned_id

pytestmark = [pytest.mark.netns, pytest.mark.slow]

BURSTS = 300
SIZE = 4
PAUSE_S = 0.004  # 4x the 1 ms timeout: every burst is a flowlet of its own


def share(rig: Rig) -> tuple[float, int]:
    m1, m2 = rig.counts()
    total = m1 + m2
    return (m1 / total if total else 0.0), total


def sink_tcp(rig: Rig, v6: bool) -> Iterator[None]:
    """A listener at the sink that reads and discards until the peer closes."""
    fam = socket.AF_INET6 if v6 else socket.AF_INET
    srv = rig.s.socket(fam, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((DST6 if v6 else DST4, PORT))
    srv.listen(4)

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            while conn.recv(65536):
                pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield
    srv.close()
    t.join(5)


def _send(rig: Rig, proto: str, v6: bool, n: int, size: int, pause_s: float) -> None:
    if proto == "udp":
        with rig.udp(v6) as s:
            bursts(s, n, size, pause_s)
        return
    gen = sink_tcp(rig, v6)
    next(gen)
    with rig.tcp(v6) as s:
        rig.reset()  # the handshake is not part of the stimulus
        bursts(s, n, size, pause_s)
        s.shutdown(socket.SHUT_WR)
    next(gen, None)


def _set_policy(rig: Rig) -> None:
    rig.r.run(["sysctl", "-q", "-w", "net.ipv4.fib_multipath_hash_policy=1",
               "net.ipv6.fib_multipath_hash_policy=1"])  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "proto", "v6"),
    [
        ("hash-threshold", "udp", False),
        ("resilient", "udp", False),
        ("hash-threshold", "udp", True),
        ("resilient", "udp", True),
        ("hash-threshold", "tcp", False),
        ("hash-threshold", "tcp", True),
    ],
)
async def test_flow_with_gaps_moves_by_weight(
    rig: Rig, flowlet: Start, kind: str, proto: str, v6: bool
) -> None:
    rig.group((3, 1), kind)
    att = await flowlet(timeout_us=1000, buckets=64 if kind == "resilient" else 0)
    rig.reset()
    _send(rig, proto, v6, BURSTS, SIZE, PAUSE_S)
    m1, total = share(rig)
    # TCP may carry a burst's writes in fewer segments; each burst is at least one
    assert total >= (BURSTS * SIZE * 0.9 if proto == "udp" else BURSTS), rig.counts()
    # 300 flowlets on a 3:1 group: member 1's share is 0.75 +- 0.025 (one sd)
    assert 0.62 <= m1 <= 0.88, (rig.counts(), m1)
    st = await att.poll()
    c = st.counters["r-h"]
    assert c["flowlets"] >= BURSTS * 0.9, c
    assert c["moved"] >= BURSTS * 0.9 - 1, c


@pytest.mark.parametrize("v6", [False, True])
async def test_flow_without_long_gaps_never_moves(rig: Rig, flowlet: Start, v6: bool) -> None:
    rig.group((3, 1))
    att = await flowlet(timeout_us=2_000_000)
    rig.reset()
    with rig.udp(v6) as s:
        bursts(s, BURSTS, SIZE, 0.001)
    m1, m2 = rig.counts()
    assert m1 + m2 >= BURSTS * SIZE * 0.9
    assert 0 in (m1, m2), (m1, m2)
    c = (await att.poll()).counters["r-h"]
    assert (c["flowlets"], c["moved"], c["new_flows"]) == (1, 0, 1), c


@pytest.mark.parametrize("v6", [False, True])
async def test_without_the_program_a_flow_never_moves(rig: Rig, v6: bool) -> None:
    """The control: the same stimulus as the moving test, policy 1, no program."""
    rig.group((3, 1))
    _set_policy(rig)
    rig.reset()
    with rig.udp(v6) as s:
        bursts(s, BURSTS, SIZE, PAUSE_S)
    m1, m2 = rig.counts()
    assert m1 + m2 >= BURSTS * SIZE * 0.9
    assert 0 in (m1, m2), (m1, m2)


def _ktime_ns() -> int:
    """The program's clock (bpf_ktime_get_ns: CLOCK_MONOTONIC)."""
    return time.monotonic_ns()


async def _gappy(rig: Rig, att: FlowletAttachment) -> tuple[tuple[int, int], dict[str, int]]:
    """One new flow with a gap after each burst: what each member carried of it, and the
    program's counters (totals since it started)."""
    b1, b2 = rig.counts()
    with rig.udp(False) as s:
        bursts(s, BURSTS, SIZE, PAUSE_S)
    m1, m2 = rig.counts()
    return (m1 - b1, m2 - b2), (await att.poll()).counters["r-h"]


async def test_a_closed_gate_keeps_the_flow_at_every_gap(rig: Rig, flowlet: Start) -> None:
    rig.group((3, 1))
    att = await flowlet(timeout_us=1000, move_on_change=True)
    (m1, m2), c = await _gappy(rig, att)
    assert m1 + m2 >= BURSTS * SIZE * 0.9
    assert 0 in (m1, m2), (m1, m2)
    assert (c["flowlets"], c["moved"], c["new_flows"]) == (1, 0, 1), c
    assert c["kept"] >= BURSTS * 0.9 - 1, c


async def test_the_move_chance_sets_the_share_of_gaps_that_move(rig: Rig, flowlet: Start) -> None:
    rig.group((1, 1))
    att = await flowlet(timeout_us=1000, move_on_change=True)
    await att.set_move(MoveChance(ONE // 2, 0, 0))  # 1/2 for good
    (m1, m2), c = await _gappy(rig, att)
    gaps = c["moved"] + c["kept"]
    assert gaps >= BURSTS * 0.9 - 1, c
    # 1/2 of ~300 gaps: 150 +- 8.7 (one sd)
    assert 0.38 <= c["moved"] / gaps <= 0.62, c
    assert min(m1, m2) > 0, (m1, m2)

    # an hour-long decay that started an hour ago: 0 now, nothing moves
    hour = 3600 * 10**9
    await att.set_move(MoveChance(ONE, _ktime_ns() - hour, hour))
    before = dict(c)
    (m1, m2), c = await _gappy(rig, att)
    assert c["moved"] == before["moved"], (before, c)
    assert 0 in (m1, m2), (m1, m2)

    # the same decay started now: about 1 for the next second, every gap moves
    await att.set_move(MoveChance(ONE, _ktime_ns(), hour))
    before = dict(c)
    (m1, m2), c = await _gappy(rig, att)
    assert c["moved"] - before["moved"] >= (BURSTS - 1) * 0.95, (before, c)
    assert min(m1, m2) > 0, (m1, m2)


#: what a loaded program leaves on bpffs: its maps by name (under maps/), program and table
PINS = ["config", "dests", "flows", "layouts", "maps", "orders", "prog", "stats", "table"]


def _pins(att: FlowletAttachment) -> list[str]:
    return sorted(p.name for p in att.dir.rglob("*")) if att.dir.exists() else []


async def test_stop_removes_filter_and_pins_restart_adopts(rig: Rig, flowlet: Start) -> None:
    rig.group((1, 1))
    first = await flowlet()
    assert first.state.attached == ["r-h"]
    assert first.state.events["loaded"] == 1
    assert _pins(first) == PINS
    prog = first.state.prog_id
    # bpf(2) on the pins names the objects bpftool loaded
    assert pinned_id(first.prog_pin) == prog
    assert pinned_id(first.map_pin("flows")) == pinned_id(first.table_pin)
    with rig.udp() as s:
        bursts(s, 3, 2, PAUSE_S)
    before = (await first.poll()).counters["r-h"]["packets"]
    assert before == 6

    # a restart adopts: same program, same table, counters go on
    second = await flowlet()
    assert second.state.prog_id == prog
    assert (second.state.events["adopted"], second.state.events["loaded"]) == (1, 0)
    assert second.state.counters["r-h"]["packets"] == before

    # a restart in a fresh mount namespace finds no pins: they are made again from the filter
    for p in sorted(second.dir.rglob("*"), key=lambda p: -len(p.parts)):
        p.rmdir() if p.is_dir() else p.unlink()
    third = await flowlet()
    assert third.state.prog_id == prog
    assert third.state.events["repinned"] == 1
    assert _pins(third) == PINS

    # pins deleted under a running glbd: the next apply pins the same program again
    for p in sorted(third.dir.rglob("*"), key=lambda p: -len(p.parts)):
        p.rmdir() if p.is_dir() else p.unlink()
    assert third.params is not None
    await third.apply(third.params)
    assert third.state.prog_id == prog and third.state.events["repinned"] == 2
    assert third.state.events["loaded"] == 0

    # a filter someone deleted is put back by the next apply
    rig.r.run(["tc", "filter", "del", "dev", "r-h", "ingress"])
    assert third.params is not None
    await third.apply(third.params)
    assert third.state.attached == ["r-h"]
    assert third.state.events["reattached"] == 1

    # a new table size replaces the program (and the table)
    assert third.params is not None
    await third.apply(dataclasses.replace(third.params, table_size=8192))
    assert third.state.prog_id != prog and third.state.table_size == 8192

    await third.stop()
    assert third.state.attached == []
    assert not third.dir.exists()
    out = rig.r.run(["tc", "-j", "filter", "show", "dev", "r-h", "ingress"]).stdout
    assert "glbd_flowlet" not in out


@pytest.mark.parametrize(
    ("kind", "v6"), [("hash-threshold", False), ("resilient", False), ("resilient", True)]
)
async def test_spread_placement_splits_each_destinations_flows_by_weight(
    rig: Rig, flowlet: Start, kind: str, v6: bool
) -> None:
    """Each destination's new flows fill the members by the weights exactly, which a random
    hash does only by chance (here 0.42 per destination, 0.42^8 ~ 1e-3 for all eight)."""
    rig.group((3, 1), kind)
    await flowlet(timeout_us=2_000_000, buckets=64 if kind == "resilient" else 0)
    per_dest = []
    for d in range(2, 10):
        dst = f"2001:db8:ff::{d:x}" if v6 else f"203.0.113.{d}"
        per_dest.append(sum(member_of_new_flow(rig, dst, v6) for _ in range(4)))
    # flows on m2 per destination: a quarter of 4
    assert per_dest == [1] * 8, per_dest


def _bare_ack(rig: Rig, dst: str, sport: int) -> None:
    """One TCP segment with ACK set and no data to ``dst`` (a port the sink does not count):
    the first packet of an ACK stream, a flow the other way's traffic."""
    hdr = struct.pack("!HHIIBBHHH", sport, PORT + 1, 1, 1, 5 << 4, 0x10, 65535, 0, 0)
    with rig.h.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP) as s:
        s.sendto(hdr, (dst, 0))


async def test_spread_gives_bare_tcp_segments_a_sequence_of_their_own(
    rig: Rig, flowlet: Start
) -> None:
    """Data flows to a destination alternating with ACK streams to it (a TCP exchange both
    ways) still split by the weights: were the ACK streams to take every other point, the
    data flows would all take points of one half of the hash space, i.e. one member of two."""
    rig.group((1, 1), "resilient")
    await flowlet(timeout_us=2_000_000, buckets=64)
    per_dest = []
    for d in range(2, 10):
        dst = f"203.0.113.{d}"
        on_m2 = 0
        for i in range(4):
            _bare_ack(rig, dst, 40_000 + 10 * d + i)
            on_m2 += member_of_new_flow(rig, dst, False)
        per_dest.append(on_m2)
    assert per_dest == [2] * 8, per_dest


async def test_random_placement_is_the_control(rig: Rig, flowlet: Start) -> None:
    """The same stimulus with ``placement = "random"``: some destination is off its share
    (all eight exact by chance: ~1e-3)."""
    rig.group((3, 1), "resilient")
    await flowlet(timeout_us=2_000_000, spread=False, buckets=64)
    per_dest = [
        sum(member_of_new_flow(rig, f"203.0.113.{d}", False) for _ in range(4))
        for d in range(2, 10)
    ]
    assert per_dest != [1] * 8, per_dest


async def test_an_adopted_auto_timeout_is_kept_a_fixed_one_written(
    rig: Rig, flowlet: Start
) -> None:
    """Adopting a running program, an "auto" timeout (``resume_timeout``) keeps the longer
    one the previous glbd left in the config map; a fixed one is written as configured."""
    first = await flowlet(timeout_us=300_000)
    assert first.left_timeout_ns is None and first.params is not None  # nothing to adopt
    auto = FlowletAttachment(netns=rig.r.name)
    await auto.start(dataclasses.replace(first.params, timeout_ns=10**8, resume_timeout=True))
    assert auto.state.events["adopted"] == 1 and auto.left_timeout_ns == 300_000_000
    assert auto.params is not None and auto.params.timeout_ns == 300_000_000
    fixed = await flowlet(timeout_us=100_000)
    assert fixed.left_timeout_ns == 300_000_000
    assert fixed.params is not None and fixed.params.timeout_ns == 100_000_000
    again = FlowletAttachment(netns=rig.r.name)  # what the map holds now: the fixed one
    await again.start(dataclasses.replace(first.params, timeout_ns=10**6, resume_timeout=True))
    assert again.left_timeout_ns == 100_000_000
