"""BFD engine benchmark: sessions held, detection latency, CPU.

One command (root; creates and deletes its own namespaces)::

    .venv/bin/python bench/bfd_bench.py                       # 256 x 3x50ms + 64 x 3x10ms, 30 s
    .venv/bin/python bench/bfd_bench.py --sessions 1024 --interval-ms 50 --duration 300 --frr
    .venv/bin/python bench/bfd_bench.py --isolation           # thread vs process engine
    .venv/bin/python bench/bfd_bench.py --micro --sessions 512  # the loop's Python per packet
    .venv/bin/python bench/bfd_bench.py --sessions 512 --interval-ms 10 --duration 300 \
        --rt-priority 10 --frr                                # 512 x 3x10ms, 5 min, FRR too

Topology: namespaces a and b joined by one veth (198.18.0.1/30 - .2/30). Session i runs between
a_i = 198.19.x.y (on a's lo) and b_i = 198.20.x.y (on b's lo), over the veth on both sides,
with one /16 route each way, so N sessions need 1 neighbour entry instead of N (the kernel's
neighbour table is shared by all namespaces and its gc_thresh3 is 1024). Packets still leave with
TTL 255 and arrive on the veth, exactly like N single-hop peers on one link.

Scenario (per row): two glbd BFD engines (process mode; ``--rt-priority`` optional), N sessions
each, wait for all Up (from the events: a snapshot of hundreds of sessions holds an engine loop
for milliseconds), then for ``--duration`` seconds under load -- a second process spinning on
the last CPU and this process's main thread busy with synthetic Python work (the "busy glbd main
loop") -- count failure events (false Downs, "flaps") on both sides, the engines' timer lag
(p50/p99/p99.9/max, how late a timer fired) and CPU.
Then an nftables drop on a's input cuts every session at once and the detection latency (last
packet received -> Down) of each is measured against the theoretical detection time: min (never
below it, RFC 5880 §6.8.4), p50, p99 and max (how far past it scheduling pushed the Down; the
netns tests only bound this loosely).

``--frr`` runs FRR 10.x bfdd (the lab's sid chroot) through the same scenario (same sessions,
interval and load; with ``--rt-priority`` every bfdd thread gets the same SCHED_FIFO priority as
the glbd engines): flaps = the sum of ``session-down`` counters, CPU of both bfdd processes.
Detection latency is not measured for FRR (its JSON has no timestamps finer than seconds).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from glbdlab.netns import Lab, Netns, stop_pids

from bfd.engine import BfdEngine, BfdEvent, EngineError, SessionConfig
from bfd.packet import State
from bfd.session import SessionParams

TICK = os.sysconf("SC_CLK_TCK")
A_NET = ipaddress.IPv4Network("198.19.0.0/16")
B_NET = ipaddress.IPv4Network("198.20.0.0/16")


def addr(net: ipaddress.IPv4Network, i: int) -> str:
    return str(net.network_address + 1 + i)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


# ----------------------------------------------------------------------------- load


class Load:
    """A second process spinning on one core (pinned to the last CPU, so one core is busy
    whatever the scheduler does), plus a busy thread in this process."""

    def __init__(self, busy_process: bool, busy_main: bool) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        if busy_process:
            proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            self.procs.append(proc)
            os.sched_setaffinity(proc.pid, {max(os.sched_getaffinity(0))})
        if busy_main:
            self.thread = threading.Thread(target=self._spin, daemon=True)
            self.thread.start()

    def _spin(self) -> None:
        x = 0
        while not self.stop.is_set():
            for i in range(10_000):  # pure Python: holds the GIL like RIB/JSON work would
                x ^= i * i

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join()
            self.thread = None
        stop_pids(self.procs)
        self.procs = []


#: An RT process (SCHED_FIFO at the engines' priority) that sleeps 1 ms in a loop for argv[1]
#: seconds and prints each gap over 15 ms: a stall it sees too is the host's, not an engine's.
_PROBER = r"""
import os, sys, time
try:
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(int(sys.argv[2])))
except OSError:
    pass
end = time.monotonic() + float(sys.argv[1])
last = time.monotonic()
while (now := time.monotonic()) < end:
    if now - last > 0.015:
        print(f"{(now - last) * 1e3:.1f}", flush=True)
    last = now
    time.sleep(0.001)
"""


class Prober:
    """Host stalls over a window, seen by :data:`_PROBER` (started now, for ``seconds``)."""

    def __init__(self, seconds: float, priority: int | None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _PROBER, str(seconds), str(priority or 0)],
            stdout=subprocess.PIPE,
            text=True,
        )

    def note(self) -> str:
        out, _ = self.proc.communicate()
        gaps = [float(x) for x in out.split()]
        if not gaps:
            return "host stalls seen by an RT prober: none over 15 ms"
        return f"host stalls seen by an RT prober: {len(gaps)} over 15 ms, max {max(gaps):.0f} ms"


# ----------------------------------------------------------------------------- topology


def build(lab: Lab, n: int) -> tuple[Netns, Netns]:
    a, b = lab.pair(a_addr="198.18.0.1/30", b_addr="198.18.0.2/30")
    a.ip_batch([f"addr add {addr(A_NET, i)}/32 dev lo" for i in range(n)])
    b.ip_batch([f"addr add {addr(B_NET, i)}/32 dev lo" for i in range(n)])
    a.ip("route", "add", str(B_NET), "via", "198.18.0.2", "dev", "a-b")
    b.ip("route", "add", str(A_NET), "via", "198.18.0.1", "dev", "b-a")
    return a, b


def cut(sender: Netns, ifname: str) -> None:
    """Lose every BFD packet ``sender`` sends on ``ifname`` (its egress, as on the wire: the
    receiver's BFD kernel path would take repeats before an input-hook drop)."""
    sender.drop_egress(ifname, "udp dport 3784")


# ----------------------------------------------------------------------------- glbd


@dataclass
class Result:
    impl: str
    sessions: int
    interval_ms: int
    mult: int
    duration: float
    up: int = 0
    up_time_s: float = 0.0
    flaps: int = 0
    cpu_s: float = 0.0
    lag: dict[str, float] = field(default_factory=dict)
    detect: dict[str, float] = field(default_factory=dict)
    note: str = ""

    @property
    def cpu_per_session_us_per_s(self) -> float:
        """CPU µs per session per second, both ends together."""
        if not self.sessions or not self.duration:
            return float("nan")
        return self.cpu_s / (self.sessions * self.duration) * 1e6

    @property
    def held(self) -> bool:
        return self.up == self.sessions and self.flaps == 0


def run_glbd(
    n: int,
    interval_ms: int,
    mult: int,
    duration: float,
    *,
    mode: str = "process",
    rt_priority: int | None = None,
    busy_process: bool = True,
    busy_main: bool = True,
    kernel_rx: bool = True,
) -> Result:
    res = Result(
        f"glbd-{mode}"
        + (f"-rt{rt_priority}" if rt_priority else "")
        + ("" if kernel_rx else "-nokrx"),
        n,
        interval_ms,
        mult,
        duration,
    )
    params = SessionParams(interval_ms * 1000, interval_ms * 1000, mult)
    with Lab() as lab:
        a, b = build(lab, n)
        (ea, ev_a), (eb, ev_b) = (_engine(lab, ns, mode, rt_priority, kernel_rx) for ns in (a, b))
        t0 = time.monotonic()
        for i in range(n):
            ea.add_session(SessionConfig(addr(B_NET, i), "a-b", addr(A_NET, i), params))
            eb.add_session(SessionConfig(addr(A_NET, i), "b-a", addr(B_NET, i), params))
        res.up = _wait_all_up((ev_a, ev_b), n)
        res.up_time_s = time.monotonic() - t0
        time.sleep(1.0)  # the Polls to the fast rate are done
        _drain(ev_a)
        _drain(ev_b)
        load = Load(busy_process, busy_main)
        try:
            time.sleep(0.5)
            ea.reset_lag_stats()
            eb.reset_lag_stats()
            pids = {ea.pid, eb.pid}
            c0 = sum(cpu_seconds(p) for p in pids) if mode == "process" else 0.0
            prober = Prober(duration, rt_priority)
            time.sleep(duration)
            c1 = sum(cpu_seconds(p) for p in pids) if mode == "process" else 0.0
            stalls = prober.note()
            res.cpu_s = c1 - c0
            # the window is over: the load stops before the counters are read, so that two
            # real-time engines and the load together cannot starve this process's reads
            load.close()
            sa, sb = _patient_snapshot(ea), _patient_snapshot(eb)
            flaps = [e for q in (ev_a, ev_b) for e in _drain(q) if e.failure]
            res.flaps = len(flaps)
            pkts = sum(x["counters"]["packets_in"] for x in (sa, sb))
            kern = sum(x["counters"].get("kernel_packets_in", 0) for x in (sa, sb))
            res.note = (f"kernel path took {kern / pkts:.0%} of packets; " if pkts else "") + stalls
            res.lag = {
                k: max(sa["engine"][k], sb["engine"][k])
                for k in (
                    "timer_lag_p50_ms",
                    "timer_lag_p99_ms",
                    "timer_lag_p999_ms",
                    "timer_lag_max_ms",
                )
            }
            res.lag["timers_late_5ms"] = (
                sa["engine"]["timers_late_5ms"] + sb["engine"]["timers_late_5ms"]
            )
            load = Load(busy_process, busy_main)  # detection is measured under the same load
            res.detect = _detection(a, b, ev_a, n, mult, interval_ms)
        finally:
            load.close()
    return res


def _engine(
    lab: Lab, ns: Netns, mode: str, rt_priority: int | None, kernel_rx: bool = True
) -> tuple[BfdEngine, queue.SimpleQueue[BfdEvent]]:
    """A started engine in ``ns`` (stopped with the lab) and the queue of its events."""
    events: queue.SimpleQueue[BfdEvent] = queue.SimpleQueue()
    eng = BfdEngine(
        events.put,
        mode=mode,  # type: ignore[arg-type]
        netns=ns.name,
        rt_priority=rt_priority,
        call_timeout=30,
        kernel_rx=kernel_rx,
    )
    eng.start()
    lab.on_close(eng.stop)
    return eng, events


def _patient_snapshot(eng: BfdEngine, tries: int = 10) -> dict[str, Any]:
    """The engine counters; an engine that saturates both cores at SCHED_FIFO leaves this
    process little CPU, so a call that timed out is retried before the run gives up."""
    for i in range(tries):
        try:
            return eng.snapshot(sessions=False)
        except EngineError:
            if i == tries - 1:
                raise
            print(f"# engine {eng.pid} did not answer a snapshot, retrying", file=sys.stderr)
    raise AssertionError("unreachable")


def _wait_all_up(
    evs: tuple[queue.SimpleQueue[BfdEvent], queue.SimpleQueue[BfdEvent]], n: int
) -> int:
    """Wait (bounded) until all ``n`` sessions are Up on both sides, from the engines' events
    (a snapshot of hundreds of sessions would hold the engine loops); returns a's Up count."""
    state: list[dict[str, State]] = [{}, {}]
    deadline = time.monotonic() + 30 + n / 50
    while time.monotonic() < deadline:
        for side, q in enumerate(evs):
            for e in _drain(q):
                state[side][e.peer] = e.new
        ups = [sum(1 for s in st.values() if s == State.UP) for st in state]
        if ups == [n, n]:
            break
        time.sleep(0.2)
    return sum(1 for s in state[0].values() if s == State.UP)


def _detection(
    a: Netns,
    b: Netns,
    ev_a: queue.SimpleQueue[BfdEvent],
    n: int,
    mult: int,
    interval_ms: int,
) -> dict[str, float]:
    """Cut everything ``b`` sends to ``a``; the latency from each session's last packet to
    its Down (ms) against the theoretical detection time."""
    t_cut = time.monotonic()
    cut(b, "b-a")
    lat: list[float] = []
    deadline = t_cut + 10.0 + mult * interval_ms / 1000  # events may queue; `at` is exact
    while len(lat) < n and time.monotonic() < deadline:
        try:
            e = ev_a.get(timeout=0.1)
        except queue.Empty:
            continue
        if e.new == State.DOWN and e.reason == "detection_timeout" and e.last_rx:
            lat.append((e.at - e.last_rx) * 1e3)
    return {
        "theoretical_ms": mult * interval_ms,
        "n": len(lat),
        "min_ms": min(lat) if lat else float("nan"),
        "p50_ms": pct(lat, 0.5),
        "p99_ms": pct(lat, 0.99),
        "max_ms": max(lat) if lat else float("nan"),
    }


def _drain(q: queue.SimpleQueue[BfdEvent]) -> list[BfdEvent]:
    out = []
    while not q.empty():
        out.append(q.get())
    return out


# ----------------------------------------------------------------------------- FRR


def run_frr(
    n: int,
    interval_ms: int,
    mult: int,
    duration: float,
    *,
    busy_process: bool = True,
    busy_main: bool = True,
    rt_priority: int | None = None,
) -> Result:
    from glbdlab.frr import FrrInstance

    res = Result(
        "frr-bfdd" + (f"-rt{rt_priority}" if rt_priority else ""), n, interval_ms, mult, duration
    )

    def conf(me: ipaddress.IPv4Network, peer: ipaddress.IPv4Network, ifname: str) -> str:
        lines = ["frr defaults datacenter", "bfd"]
        for i in range(n):
            lines += [
                f" peer {addr(peer, i)} local-address {addr(me, i)} interface {ifname}",
                f"  receive-interval {interval_ms}",
                f"  transmit-interval {interval_ms}",
                f"  detect-multiplier {mult}",
                " exit",
            ]
        return "\n".join([*lines, "exit", ""])

    with Lab() as lab:
        a, b = build(lab, n)
        fa = FrrInstance(a, daemons=("mgmtd", "zebra", "bfdd"))
        fb = FrrInstance(b, daemons=("mgmtd", "zebra", "bfdd"))
        t0 = time.monotonic()
        fa.start(conf(A_NET, B_NET, "a-b"), timeout=60)
        fb.start(conf(B_NET, A_NET, "b-a"), timeout=60)
        notes: list[str] = []

        def ups() -> int:
            try:
                return sum(1 for v in fa.bfd_peers().values() if v == "up")
            except subprocess.TimeoutExpired:  # an overloaded bfdd answers vtysh late
                notes.append("vtysh timed out")
                return 0

        deadline = time.monotonic() + 60 + n / 20
        while time.monotonic() < deadline:
            if ups() == n:
                break
            time.sleep(0.5)
        res.up_time_s = time.monotonic() - t0
        res.up = ups()
        time.sleep(1.0)

        def downs() -> int | None:
            try:
                return sum(
                    int(p.get("session-down", 0))
                    for f in (fa, fb)
                    for p in f.vtysh_json("show bfd peers counters json") or []
                )
            except subprocess.TimeoutExpired:
                notes.append("vtysh timed out")
                return None

        d0 = downs()
        pids = [fa.procs["bfdd"].pid, fb.procs["bfdd"].pid]
        if rt_priority:  # the same SCHED_FIFO as the glbd engines get, on every bfdd thread
            for pid in pids:
                for tid in os.listdir(f"/proc/{pid}/task"):
                    os.sched_setscheduler(int(tid), os.SCHED_FIFO, os.sched_param(rt_priority))
        load = Load(busy_process, busy_main)
        try:
            time.sleep(0.5)
            c0 = sum(cpu_seconds(p) for p in pids)
            prober = Prober(duration, rt_priority)
            time.sleep(duration)
            c1 = sum(cpu_seconds(p) for p in pids)
            notes.append(prober.note())
        finally:
            load.close()
        res.cpu_s = c1 - c0
        d1 = downs()
        res.flaps = d1 - d0 if d0 is not None and d1 is not None else -1  # -1: unknown
        res.note = "; ".join(["detection latency not measured", *sorted(set(notes))])
    return res


# ----------------------------------------------------------------------------- main


def fmt(r: Result) -> str:
    det = r.detect
    return (
        f"{r.impl:<18} {r.sessions:>5} {r.mult}x{r.interval_ms:<4}ms {r.duration:>5.0f}s "
        f"up {r.up:>5}/{r.sessions:<5} {'HELD' if r.held else 'LOST':<5} flaps {r.flaps:>5} "
        f"cpu {r.cpu_per_session_us_per_s:>7.1f} us/sess/s "
        + (
            f"lag p99 {r.lag.get('timer_lag_p99_ms', float('nan')):>5.1f} "
            f"max {r.lag.get('timer_lag_max_ms', float('nan')):>6.1f} ms "
            if r.lag
            else ""
        )
        + (
            f"detect min {det['min_ms']:.1f} p50 {det['p50_ms']:.1f} "
            f"p99 {det['p99_ms']:.1f} max {det['max_ms']:.1f} "
            f"(theory {det['theoretical_ms']} ms, n={det['n']})"
            if det
            else r.note
        )
        + (f"; {r.note}" if det and r.note else "")
    )


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, nargs="*", help="session counts (default per row)")
    ap.add_argument("--interval-ms", type=int, help="only this interval (50 or 10 typically)")
    ap.add_argument("--mult", type=int, default=3)
    ap.add_argument("--duration", type=float, default=30.0, help="seconds held under load")
    ap.add_argument("--frr", action="store_true", help="also run FRR 10.x bfdd, same scenario")
    ap.add_argument("--skip-glbd", action="store_true", help="with --frr: FRR only")
    ap.add_argument("--no-load", action="store_true", help="idle machine (no busy core/main)")
    ap.add_argument("--rt-priority", type=int, help="run the glbd engines SCHED_FIFO")
    ap.add_argument("--mode", choices=["process", "thread"], default="process")
    ap.add_argument(
        "--kernel-rx",
        choices=["on", "off", "both"],
        default="on",
        help="the engines' BPF receive path (default on, as glbd); both: one run each, off first",
    )
    ap.add_argument(
        "--isolation",  # busy main loop always; --no-load drops only the busy core
        action="store_true",
        help="thread vs process engine with a busy main loop (64 x 3x10ms)",
    )
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument(
        "--micro",
        action="store_true",
        help="the engine loop's own CPU per packet: N sessions Up, fake sockets, virtual time",
    )
    return ap.parse_args(argv)


def _rows(args: argparse.Namespace) -> list[tuple[int, int]]:
    """(sessions, interval ms) of each scenario row."""
    if args.isolation:
        return [(args.sessions[0] if args.sessions else 64, args.interval_ms or 10)]
    if args.sessions and args.interval_ms:
        return [(s, args.interval_ms) for s in args.sessions]
    if args.interval_ms:
        return [(256 if args.interval_ms >= 50 else 64, args.interval_ms)]
    return [(256, 50), (64, 10)]


def _run_row(args: argparse.Namespace, n: int, iv: int, busy: bool) -> list[Result]:
    """Every implementation/mode the arguments ask for, on one row; printed as they finish."""
    runs: list[Callable[[], Result]] = []
    if args.isolation:
        for mode, rt in (("thread", None), ("process", None), ("thread", 10), ("process", 10)):
            runs.append(
                partial(
                    run_glbd,
                    n,
                    iv,
                    args.mult,
                    args.duration,
                    mode=mode,
                    rt_priority=rt,
                    busy_process=busy,
                    busy_main=True,
                )
            )
    else:
        krx = {"on": [True], "off": [False], "both": [False, True]}[args.kernel_rx]
        for k in krx if not args.skip_glbd else []:
            runs.append(
                partial(
                    run_glbd,
                    n,
                    iv,
                    args.mult,
                    args.duration,
                    mode=args.mode,
                    rt_priority=args.rt_priority,
                    busy_process=busy,
                    busy_main=busy,
                    kernel_rx=k,
                )
            )
        if args.frr:
            runs.append(
                partial(
                    run_frr,
                    n,
                    iv,
                    args.mult,
                    args.duration,
                    busy_process=busy,
                    busy_main=busy,
                    rt_priority=args.rt_priority,
                )
            )
    results = []
    for run in runs:
        r = run()
        print(fmt(r), flush=True)
        results.append(r)
    return results


def micro(n: int, interval_ms: int, seconds: float = 2.0) -> None:
    """CPU per packet of the engine loop's Python (no kernel): ``n`` sessions brought Up by
    hand, then ``seconds`` of virtual time in which every peer sends its steady packet every
    87.5 % of the interval (the mean of the RFC 5880 jitter), read through the same receive
    path as real datagrams, while the loop's timers send through fake sockets."""
    import random
    import struct

    from bfd.engine.loop import Loop
    from bfd.engine.sockets import RxSock
    from bfd.packet import ControlPacket

    clock = [1000.0]
    sent = [0]

    class FakeTx:
        def send(self, data: bytes) -> int:
            sent[0] += 1
            return len(data)

    class FakeRx:
        def __init__(self) -> None:
            self.q: list[tuple[bytes, list[tuple[int, int, bytes]], int, tuple[str, int]]] = []

        def recvmsg(self, *_: int) -> tuple[bytes, list[tuple[int, int, bytes]], int, Any]:
            if self.q:
                return self.q.pop()
            raise BlockingIOError

        def fileno(self) -> int:
            return -1

        def close(self) -> None:
            pass

    logging.disable(logging.WARNING)  # the loop warns that interface "x" has no sockets
    loop = Loop(lambda w: None, clock=lambda: clock[0], rng=random.Random(1))
    frx = FakeRx()
    rx = RxSock(frx, "x", 2)  # type: ignore[arg-type]
    iv = interval_ms * 1000
    params = SessionParams(iv, iv, 3)
    anc = [(1, 35, struct.pack("@ll", 0, 0)), (0, 2, struct.pack("=i", 255))]
    peers = []
    for i in range(n):
        host = f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}"
        ent = loop.by_discr[loop.add(SessionConfig(host, "x", None, params))]
        ent.tx, ent.rx = FakeTx(), rx  # type: ignore[assignment]

        def pkt(state: State, your: int, poll: bool = False, final: bool = False) -> bytes:
            return ControlPacket(
                state=state,
                my_discriminator=5000 + i,  # noqa: B023
                your_discriminator=your,
                desired_min_tx=iv,
                required_min_rx=iv,
                poll=poll,
                final=final,
            ).encode()

        mine = ent.sess.local_discr
        for data in (
            pkt(State.DOWN, 0),
            pkt(State.UP, mine),
            pkt(State.UP, mine, final=True),
            pkt(State.UP, mine, poll=True),
            pkt(State.UP, mine),
        ):
            frx.q.append((data, anc, 0, (host, 49152)))
            loop._read(rx, clock[0])
        peers.append((host, pkt(State.UP, mine), random.random()))
    assert all(e.sess.state == State.UP for e in loop.by_key.values())
    period = interval_ms / 1000 * 0.875
    tick = 0.00025

    def run(secs: float, work: bool) -> int:
        t0 = clock[0]
        sched = sorted(
            (t0 + (off + k) * period, j)
            for j, (_, _, off) in enumerate(peers)
            for k in range(int(secs / period) + 1)
        )
        k = 0
        while clock[0] < t0 + secs:
            clock[0] += tick
            now = clock[0]
            while k < len(sched) and sched[k][0] <= now:
                host, data, _ = peers[sched[k][1]]
                frx.q.append((data, anc, 0, (host, 49152)))
                k += 1
            if work:
                loop._read(rx, now)
                loop._run_timers(now)
            else:
                frx.q.clear()
        return k

    run(0.2, True)
    h0 = time.process_time()
    run(seconds, False)  # the harness alone, subtracted below
    harness = time.process_time() - h0
    clock[0] -= seconds
    sent[0] = 0
    c0 = time.process_time()
    received = run(seconds, True)
    cpu = time.process_time() - c0 - harness
    flaps = sum(e.sess.flaps for e in loop.by_key.values())
    print(
        f"micro: {n} sessions 3x{interval_ms} ms, {seconds:.0f} s virtual: {received} in, "
        f"{sent[0]} out, {flaps} flaps; loop CPU {cpu / seconds * 100:.1f} % of a core, "
        f"{cpu / (received + sent[0]) * 1e6:.2f} us per packet",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    if args.micro:
        micro(args.sessions[0] if args.sessions else 512, args.interval_ms or 10)
        return 0
    busy = not args.no_load
    print(
        f"# bfd_bench: {os.cpu_count()} cpus, load={'busy core + busy main' if busy else 'idle'}"
        f", duration {args.duration:.0f}s",
        flush=True,
    )
    results = [r for n, iv in _rows(args) for r in _run_row(args, n, iv, busy)]
    if args.json:
        args.json.write_text(
            json.dumps(
                [
                    {
                        **r.__dict__,
                        "cpu_us_per_session_s": r.cpu_per_session_us_per_s,
                        "held": r.held,
                    }
                    for r in results
                ],
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
