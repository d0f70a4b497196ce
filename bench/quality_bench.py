"""Link-quality benchmarks: receiver CPU share, table recompute time, monitor CPU share.

Run as root: ``.venv/bin/python bench/quality_bench.py [--no-netns]``. CPU is process (thread)
time of this process on one core, so other load on the machine inflates it only a little.
Each section prints a ratio against a baseline measured in the same run:

1. receiver: 64 spines x 50 heartbeats/s x 128 entries (3,200 datagrams/s), HMAC on, one band
   change per spine per second. Per datagram: recvmsg with TTL cmsg on a real UDP socket, the
   receiver checklist, and the path-table update for the datagrams that change something.
   Baseline: bare ``recvmsg`` of the same datagrams.
2. table: one leaf of a 128-leaf x 64-spine 3-stage fabric (127 destination leaves x 4 prefixes,
   64 next hops each): one changed remote link -> weights recomputed (incremental). Also a
   whole spine expiring (every profile). Baseline: recomputing every profile.
3. monitor: 128 interfaces (64 veth pairs in a namespace) sampled every 10 ms by the module's
   own ``MonitorRunner`` (RTM_GETSTATS + RTM_GETQDISC dumps, the core), as the daemon runs it.
   Baseline: ``glbd/linkmon.py`` of git ``--baseline-ref`` (default 179d892, before the columns
   reader), loaded with ``git show`` and run in the same namespace in the same run, rounds
   interleaved so both see the same machine load; also the core alone on synthetic samples and
   a bare 10 ms asyncio wake-up (the floor). Monitor only: ``--monitor-only``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import socket
import statistics
import struct
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

from timing import module_at

from glbd.quality import linkq, linkrunner, linkstats
from glbd.quality.linkq import Columns, LinkMonitor, LinkMonParams, LinkSample
from glbd.quality.pathmodel import LocalLink, NextHop
from glbd.quality.pathtable import PathTable
from heartbeat import wire
from heartbeat.receiver import Neighbor, Receiver, ReceiverParams
from heartbeat.wire import Entry, Heartbeat, HmacKey

N_SPINES, N_LEAVES, N_ENTRIES, HB_RATE = 64, 128, 128, 50
KEY = HmacKey(1, b"benchmark-secret-0123456789")
SPINES = [wire.node_id(f"10.0.{i // 250}.{i % 250 + 1}") for i in range(N_SPINES)]
LEAVES = [wire.node_id(f"10.1.{i // 250}.{i % 250 + 1}") for i in range(N_LEAVES)]
ME = LEAVES[0]
# the current monitor as one module, like the baseline's single glbd/linkmon.py
linkmon_now = ModuleType("linkmon_now")
linkmon_now.__dict__.update(
    LinkMonitor=linkq.LinkMonitor,
    LinkMonParams=linkq.LinkMonParams,
    StatsReader=linkstats.StatsReader,
    MonitorRunner=linkrunner.MonitorRunner,
)


def cpu(fn: Callable[[], object], repeat: int = 5) -> float:
    """Median process time of one call, seconds."""
    ts = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        ts.append(time.process_time() - t0)
    return statistics.median(ts)


# --- 1. receiver -----------------------------------------------------------------------------


def receiver_bench() -> None:
    rng = random.Random(1)
    seconds = 1
    n = N_SPINES * HB_RATE * seconds
    datagrams: list[tuple[int, bytes]] = []
    bands = {s: [7] * N_ENTRIES for s in SPINES}
    for k in range(HB_RATE * seconds):
        for i, s in enumerate(SPINES):
            if k == i % HB_RATE:  # one band change per spine per second
                bands[s][rng.randrange(N_ENTRIES)] = rng.randrange(8)
            ents = [
                Entry(
                    LEAVES[j],
                    j + 1,
                    100_000,
                    bands[s][j],
                    0,
                    rng.randrange(3000),
                    rng.randrange(9000),
                )
                for j in range(N_ENTRIES)
            ]
            datagrams.append((i, Heartbeat(s, 1000 + k, 20_000, ents).encode(KEY)))

    rx_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx_sock.setsockopt(socket.IPPROTO_IP, 12, 1)  # IP_RECVTTL
    rx_sock.bind(("127.0.0.1", 0))
    tx_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx_sock.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, 255)
    addr = rx_sock.getsockname()
    chunk = 32  # fits the default receive buffer; only the receive side is timed

    def run(handle: Callable[[int, bytes, list[tuple[int, int, bytes]], str], None]) -> float:
        spent = 0.0
        for off in range(0, n, chunk):
            part = datagrams[off : off + chunk]
            for _, d in part:
                tx_sock.sendto(d, addr)
            t0 = time.process_time()
            for i, _ in part:
                data, anc, _f, src = rx_sock.recvmsg(65536, 64)
                handle(i, data, anc, src[0])
            spent += time.process_time() - t0
        return spent

    base = run(lambda i, d, a, s: None)
    r = Receiver(ReceiverParams(keys={KEY.key_id: KEY}))
    names = [f"eth{i}" for i in range(N_SPINES)]
    for i, s in enumerate(SPINES):
        r.set_neighbor(Neighbor(names[i], s, "127.0.0.1"))
    t = PathTable()
    for j in range(1, N_LEAVES):
        t.set_prefix(
            f"10.2.{j}.0/24",
            {
                NextHop(s, f"198.18.{i}.1", names[i]): frozenset({LEAVES[j]})
                for i, s in enumerate(SPINES)
            },
        )

    def handle(i: int, data: bytes, anc: list[tuple[int, int, bytes]], src: str) -> None:
        ttl = struct.unpack("@i", anc[0][2][:4])[0] if anc else None
        for u in r.on_datagram(data, ifname=names[i], src=src, ttl=ttl, now=0.0):
            t.set_remote(u.node_id, u.entries)

    # warm-up: the first heartbeat of every spine (each new spine touches every profile once)
    for i, s in enumerate(SPINES):
        first = Heartbeat(
            s, 999, 20_000, [Entry(LEAVES[j], j + 1, 100_000, 7) for j in range(N_ENTRIES)]
        )
        for u in r.on_datagram(
            first.encode(KEY), ifname=names[i], src="127.0.0.1", ttl=255, now=0.0
        ):
            t.set_remote(u.node_id, u.entries)
    tot = run(handle)
    assert r.accepted == n + N_SPINES and not r.drops, r.drops
    r2 = Receiver(ReceiverParams(keys={KEY.key_id: KEY}))
    for i, s in enumerate(SPINES):
        r2.set_neighbor(Neighbor(names[i], s))
    t0 = time.process_time()
    for i, d in datagrams:
        r2.on_datagram(d, ifname=names[i], src=None, ttl=255, now=0.0)
    core = time.process_time() - t0
    print(
        f"1. receiver: {N_SPINES} spines x {HB_RATE} hb/s x {N_ENTRIES} entries"
        f" = {n} datagrams/s, HMAC on"
    )
    print(
        f"   bare recvmsg (baseline)           {base * 1e3:8.1f} ms CPU per s"
        f" = {base * 100:5.1f} % of a core"
    )
    print(
        f"   recvmsg + checklist + table       {tot * 1e3:8.1f} ms CPU per s"
        f" = {tot * 100:5.1f} % of a core  (x{tot / base:.1f} baseline; target < 15 %)"
    )
    print(
        f"   receiver core only (no socket)    {core * 1e3:8.1f} ms CPU per s"
        f" = {core * 100:5.1f} % ; {core / n * 1e6:.1f} us/datagram"
    )
    rx_sock.close()
    tx_sock.close()


# --- 2. table --------------------------------------------------------------------------------


def table_bench() -> None:
    t = PathTable()
    nhs = [NextHop(s, f"198.18.{i}.1", f"eth{i}") for i, s in enumerate(SPINES)]
    for nh in nhs:
        t.set_local(nh.ifname or "", LocalLink(7, False, 400_000))
    snaps: dict[int, list[Entry]] = {}
    for s in SPINES:
        snaps[s] = [Entry(LEAVES[j], j + 1, 400_000, 7) for j in range(N_LEAVES)]
        t.set_remote(s, snaps[s])
    for j in range(1, N_LEAVES):
        for p in range(4):
            t.set_prefix(f"10.{j}.{p}.0/24", {nh: frozenset({LEAVES[j]}) for nh in nhs})
    n_prof = len(t.profiles())
    times = []
    for k in range(200):
        s = SPINES[k % N_SPINES]
        j = 1 + k % (N_LEAVES - 1)
        snap = list(snaps[s])
        snap[j] = snap[j]._replace(band=(snap[j].band + 3) % 8)
        snaps[s] = snap
        t0 = time.thread_time()
        ch = t.set_remote(s, snap)
        times.append(time.thread_time() - t0)
        assert len(ch.updated) == 1
    one = statistics.median(times)
    p99 = sorted(times)[int(len(times) * 0.99)]
    t0 = time.thread_time()
    ch = t.set_remote(SPINES[5], None)
    expire = time.thread_time() - t0
    assert len(ch.updated) == n_prof
    keys = t.profiles()
    prof = t._profiles  # full recompute baseline

    def full() -> None:
        for k in keys:
            t._compute(prof[k])

    base = cpu(full, repeat=3)
    print(
        f"2. table: 1 leaf of {N_LEAVES} leaves x {N_SPINES} spines: {n_prof} profiles"
        f", {len(t.prefixes())} prefixes, {N_SPINES} NHs each"
    )
    print(
        f"   one changed remote link          median {one * 1e3:6.3f} ms, p99 {p99 * 1e3:6.3f} ms"
        f" (target <= 1 ms)"
    )
    print(f"   one spine expired (all profiles) {expire * 1e3:6.3f} ms")
    print(
        f"   full recompute (baseline)        {base * 1e3:6.3f} ms "
        f" (incremental is x{base / one:.0f} faster)"
    )


# --- 3. monitor ------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
BASELINE_REF = "179d892"  # glbd/linkmon.py before the columns reader


def load_linkmon(ref: str) -> ModuleType | None:
    return module_at(ref, "glbd/linkmon.py", "linkmon_baseline")


def monitor_core_bench(n_if: int = 128) -> tuple[float, float]:
    """(s per sample through on_samples(LinkSample list), through on_columns); every link
    loaded 8..80 % with a random backlog, so every link does the full computation."""
    names = [f"v{i}" for i in range(n_if)]
    m = LinkMonitor(LinkMonParams())
    m.set_interfaces(names)
    tx = [0] * n_if
    rng = random.Random(3)
    batches = []
    for k in range(200):
        batch = []
        for i, nm in enumerate(names):
            tx[i] += rng.randrange(1_000_000, 10_000_000)
            batch.append(LinkSample(nm, True, tx[i], rng.randrange(50_000), i + 2))
        batches.append((k * 0.01, batch))
    cols = [(now, Columns(*zip(*b, strict=True))) for now, b in batches]

    def run() -> None:
        for now, b in batches:
            m.on_samples(b, now)

    def run_cols() -> None:
        for now, c in cols:
            m.on_columns(c, now)

    return cpu(run, repeat=3) / len(batches), cpu(run_cols, repeat=3) / len(batches)


async def wakeup_share(seconds: float) -> float:
    """CPU share of a bare asyncio loop waking every 10 ms (the floor of any 10 ms sampler)."""
    loop = asyncio.get_running_loop()
    c0, w0 = time.process_time(), loop.time()
    nxt = w0
    while loop.time() < w0 + seconds:
        nxt += 0.010
        await asyncio.sleep(max(0.0, nxt - loop.time()))
    return (time.process_time() - c0) / (loop.time() - w0)


async def runner_share(mod: ModuleType, ns: str, names: list[str], seconds: float) -> MonRun:
    """The module's own MonitorRunner (reader + core, as the daemon runs it) for ``seconds``;
    CPU share of this process (nothing else runs on its loop)."""
    m = mod.LinkMonitor(mod.LinkMonParams())
    m.set_interfaces(names)
    reader = await mod.StatsReader.open(netns=ns)
    runner = mod.MonitorRunner(m, reader, lambda changes, mon: None)
    loop = asyncio.get_running_loop()
    try:
        runner.start()
        await asyncio.sleep(0.3)  # first samples, link dump, layouts learned
        s0, c0, w0 = runner.samples, time.process_time(), loop.time()
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        await asyncio.sleep(seconds)
        cpu_s, wall, n = time.process_time() - c0, loop.time() - w0, runner.samples - s0
        r1 = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        await runner.stop()
        reader.close()
    assert runner.errors == 0 and len(m.qualities()) == len(names), (runner.errors, m.qualities())
    user, sys_ = r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime
    return MonRun(cpu_s / wall, cpu_s / max(1, n), n, runner.overruns, user / wall, sys_ / wall)


class MonRun(NamedTuple):
    share: float
    per_sample: float
    samples: int
    overruns: int
    user: float = 0.0  # user and system CPU share (getrusage: tick-granular, indicative)
    sys: float = 0.0


async def monitor_netns_bench(
    base: ModuleType | None, rounds: int, seconds: float, n_pairs: int = 64
) -> dict[str, list[MonRun]]:
    from glbdlab.netns import Lab

    mods: list[tuple[str, ModuleType]] = [("current", linkmon_now)]
    if base is not None:
        mods.insert(0, ("baseline", base))
    out: dict[str, list[MonRun]] = {k: [] for k, _ in mods}
    out["wakeup"] = []
    with Lab() as lab:
        ns = lab.netns("mon")
        ns.ip_batch([f"link add m{i}a type veth peer name m{i}b" for i in range(n_pairs)])
        ns.ip_batch([f"link set m{i}{s} up" for i in range(n_pairs) for s in "ab"])
        names = [f"m{i}{s}" for i in range(n_pairs) for s in "ab"]
        for _ in range(rounds):  # interleaved, so both see the same machine load
            for key, mod in mods:
                out[key].append(await runner_share(mod, ns.name, names, seconds))
            w = await wakeup_share(min(seconds, 1.0))
            out["wakeup"].append(MonRun(w, w * 0.010, 0, 0))
    return out


def _rng(xs: list[float], scale: float, fmt: str) -> str:
    lo, mid, hi = (v * scale for v in (min(xs), statistics.median(xs), max(xs)))
    return f"median {mid:{fmt}} (range {lo:{fmt}}-{hi:{fmt}})"


def monitor_bench(args: argparse.Namespace) -> None:
    core_s, core_c = monitor_core_bench()
    print("3. monitor: 128 interfaces every 10 ms")
    print(
        f"   core only, LinkSample list        {core_s * 1e6:7.1f} us per sample"
        f" = {core_s / 0.010 * 100:5.2f} % of a core (warm, every link loaded)"
    )
    print(
        f"   core only, columns                {core_c * 1e6:7.1f} us per sample"
        f" = {core_c / 0.010 * 100:5.2f} % of a core"
    )
    if args.no_netns:
        return
    base = load_linkmon(args.baseline_ref) if args.baseline_ref else None
    la0 = os.getloadavg()
    res = asyncio.run(monitor_netns_bench(base, args.rounds, args.seconds))
    la1 = os.getloadavg()
    print(
        f"   MonitorRunner on 64 veth pairs (128 + lo), {args.rounds} rounds x {args.seconds:g} s"
        f" each, interleaved; load average {la0[0]:.2f} before, {la1[0]:.2f} after"
    )
    for key, label in (
        ("baseline", f"baseline {args.baseline_ref}"),
        ("current", "current"),
        ("wakeup", "bare 10 ms asyncio wake-up"),
    ):
        runs = res.get(key)
        if not runs:
            continue
        line = f"   {label:<30} {_rng([r.share for r in runs], 100, '5.2f')} % of a core"
        if key != "wakeup":
            line += f", {_rng([r.per_sample for r in runs], 1e6, '6.0f')} us/sample"
            line += f", overruns {sum(r.overruns for r in runs)}"
            us = statistics.median(r.user for r in runs) * 100
            sy = statistics.median(r.sys for r in runs) * 100
            line += f", user ~{us:.1f} % sys ~{sy:.1f} %"
        print(line)
    for i, r in enumerate(res["current"]):
        b = res["baseline"][i].share if res.get("baseline") else None
        ratio = f" -> x{r.share / b:.2f} of baseline ({b * 100:.2f} %)" if b else ""
        print(f"     round {i + 1}: current {r.share * 100:5.2f} %{ratio}")
    cur = statistics.median(r.share for r in res["current"])
    if res.get("baseline"):
        bas = statistics.median(r.share for r in res["baseline"])
        print(f"   current / baseline (medians)   x{cur / bas:.2f}")
    worst = max(r.share for r in res["current"])
    verdict = "met in every round" if worst < 0.10 else "NOT met in every round"
    print(f"   target < 10 %: {verdict} (worst round {worst * 100:.2f} %)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-netns", action="store_true", help="skip the 128-interface netns run")
    ap.add_argument("--monitor-only", action="store_true", help="only section 3")
    ap.add_argument("--rounds", type=int, default=5, help="monitor rounds (each: both readers)")
    ap.add_argument("--seconds", type=float, default=2.0, help="monitor seconds per reader")
    ap.add_argument(
        "--baseline-ref",
        default=BASELINE_REF,
        help="git ref of the baseline glbd/linkmon.py ('' = none)",
    )
    args = ap.parse_args()
    if not args.monitor_only:
        receiver_bench()
        table_bench()
    monitor_bench(args)


if __name__ == "__main__":
    main()
