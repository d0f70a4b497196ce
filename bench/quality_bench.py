"""Link-quality benchmarks (issue 8): receiver CPU share, table recompute time, monitor CPU share.

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
3. monitor: 128 interfaces (64 veth pairs in a namespace) sampled every 10 ms through the netlink
   link + qdisc dumps and the core. Baseline: the core alone on synthetic samples.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import socket
import statistics
import struct
import time
from collections.abc import Callable

from glbd.linkmon import LinkMonitor, LinkMonParams, LinkSample, StatsReader
from glbd.pathtable import LocalLink, NextHop, PathTable
from heartbeat import wire
from heartbeat.receiver import Neighbor, Receiver, ReceiverParams
from heartbeat.wire import Entry, Heartbeat, HmacKey

N_SPINES, N_LEAVES, N_ENTRIES, HB_RATE = 64, 128, 128, 50
KEY = HmacKey(1, b"benchmark-secret-0123456789")
SPINES = [wire.node_id(f"10.0.{i // 250}.{i % 250 + 1}") for i in range(N_SPINES)]
LEAVES = [wire.node_id(f"10.1.{i // 250}.{i % 250 + 1}") for i in range(N_LEAVES)]
ME = LEAVES[0]


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


def monitor_core_bench(n_if: int = 128) -> float:
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

    def run() -> None:
        for now, b in batches:
            m.on_samples(b, now)

    return cpu(run, repeat=3) / len(batches)


async def monitor_netns_bench(n_pairs: int = 64, seconds: float = 2.0) -> tuple[float, float, int]:
    from glbd.lab.netns import Lab

    with Lab() as lab:
        ns = lab.netns("mon")
        ns.ip_batch([f"link add m{i}a type veth peer name m{i}b" for i in range(n_pairs)])
        ns.ip_batch([f"link set m{i}{s} up" for i in range(n_pairs) for s in "ab"])
        names = [f"m{i}{s}" for i in range(n_pairs) for s in "ab"]
        m = LinkMonitor(LinkMonParams())
        m.set_interfaces(names)
        reader = await StatsReader.open(netns=ns.name)
        loop = asyncio.get_running_loop()
        samples = 0
        t_end = loop.time() + seconds
        c0 = time.process_time()
        w0 = loop.time()
        nxt = w0
        while loop.time() < t_end:
            rows = await reader.read(names)
            m.on_samples(rows, loop.time())
            samples += 1
            nxt += 0.010
            await asyncio.sleep(max(0.0, nxt - loop.time()))
        cpu_s = time.process_time() - c0
        wall = loop.time() - w0
        reader.close()
        assert len(m.qualities()) == len(names)
        return cpu_s / wall, cpu_s / samples, samples


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-netns", action="store_true", help="skip the 128-interface netns run")
    args = ap.parse_args()
    receiver_bench()
    table_bench()
    core = monitor_core_bench()
    print("3. monitor: 128 interfaces every 10 ms")
    print(
        f"   core only (baseline)             {core * 1e6:7.1f} us per sample"
        f" = {core / 0.010 * 100:5.2f} % of a core"
    )
    if not args.no_netns:
        share, per, n = asyncio.run(monitor_netns_bench())
        print(
            f"   netlink dumps + core             {per * 1e6:7.1f} us per sample"
            f" = {share * 100:5.2f} % of a core over {n} samples"
            f" (x{per / core:.1f} baseline; target < 10 %)"
        )


if __name__ == "__main__":
    main()
