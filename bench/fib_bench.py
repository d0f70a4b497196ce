"""FIB programmer benchmark, side by side in one run.

Run as root (creates and deletes its own namespaces)::

    .venv/bin/python bench/fib_bench.py            # 1 / 10k / 100k routes, ~1 min
    .venv/bin/python bench/fib_bench.py --quick    # 1 / 1k / 10k routes

Topology: namespace r with three veths to namespace p (198.18.10.{1,5,9}/30, next hops .2/.6/.10).
Routes are /32s from 198.18.16.0 upward (benchmark range 198.18.0.0/15).

1. Weight change of one group used by N routes (N = 1, 10k, 100k), nexthop_compat_mode 0 and 1:
   latency of ``FibProgrammer.set_weights`` until the kernel's ACK (median, p99 of 30).
   Baseline: the per-route alternative, replacing every route's RTA_MULTIPATH (batched raw
   netlink, the fastest way to do it), for the same N.
2. Installing 100k routes: routes/s of ``FibProgrammer.apply`` (plan + encode + batched send) and
   of the raw batched sender alone, against ``ip -batch`` on the same routes (target >= 0.5x).
3. Failover: one next hop removed from 1,000 groups (``remove_nexthop``), time to the last ACK.
   Baseline: the same 1,000 group replaces sent one by one, each waiting for its ACK.
4. Reading a resilient group's bucket table (``read_buckets``, spread placement's cost per
   group and read) at 128 and 1,024 buckets, and what the read budget
   (``glbd.flowlet.placement.READ_BUCKETS_PER_CALL`` buckets a second) costs at most, in % of
   a core.
   Baseline: one weight write of the same group, sent and ACKed (what makes a read due).
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from glbdlab.netns import Lab, Netns

from glbd.base.prefix import Net4
from glbd.fib.fibkernel import set_compat_mode
from glbd.fib.fibmodel import Desired, GroupSpec, Member, Resilient
from glbd.fib.fibplan import GroupSet, RouteSet
from glbd.fib.fibread import read_buckets
from glbd.fib.fibwire import op_message
from glbd.fib.programmer import FibProgrammer
from glbd.flowlet.placement import READ_BUCKETS_PER_CALL
from glbd.netlink import const as c
from glbd.netlink.codec import Attr, IfInfoMsg, Message, RtMsg
from glbd.netlink.rtnl import LINK_WANT, link_dump, link_state
from glbd.netlink.rtsocket import NetlinkSocket

PROTO = 200
GW = ["198.18.10.2", "198.18.10.6", "198.18.10.10"]
MEMBERS = [Member(ipaddress.ip_address(g), f"r-p{i + 1}") for i, g in enumerate(GW)]
BASE = int(ipaddress.IPv4Address("198.18.16.0"))


def prefixes(n: int) -> list[Net4]:
    """The routes' prefixes as glbd's path table hands them to the FIB (glbd.base.prefix)."""
    return [Net4((BASE + i, 32)) for i in range(n)]


def build(lab: Lab) -> Netns:
    r, p = lab.netns("r"), lab.netns("p")
    for i in (1, 2, 3):
        b = 4 * (i - 1)
        lab.veth(
            r,
            f"r-p{i}",
            p,
            f"p-r{i}",
            a_addr=f"198.18.10.{b + 1}/30",
            b_addr=f"198.18.10.{b + 2}/30",
        )
    return r


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def ms(x: float) -> str:
    return f"{x * 1e3:8.3f} ms"


def multipath_msgs(
    pfx: list[ipaddress.IPv4Network], weights: list[int], ifidx: list[int], table: int
) -> list[Message]:
    hops = b""
    for gw, w, idx in zip(GW, weights, ifidx, strict=True):
        gwa = Attr.addr(c.RTA_GATEWAY, gw).encode()
        # struct rtnexthop { u16 len; u8 flags; u8 hops; s32 ifindex; } + attrs
        hops += (
            (8 + len(gwa)).to_bytes(2, sys.byteorder)
            + bytes([0, w - 1])
            + idx.to_bytes(4, sys.byteorder, signed=True)
            + gwa
        )
    mp = Attr(c.RTA_MULTIPATH, hops)
    flags = c.NLM_F_REQUEST | c.NLM_F_CREATE | c.NLM_F_REPLACE
    return [
        Message(
            c.RTM_NEWROUTE,
            flags,
            header=RtMsg(socket.AF_INET, 32, 0, 0, 0, PROTO, 0, c.RTN_UNICAST),
            attrs=(Attr(c.RTA_DST, p.network_address.packed), Attr.u32(c.RTA_TABLE, table), mp),
        )
        for p in pfx
    ]


async def weight_change(r: Netns, n: int, compat: int, reps: int) -> dict[str, float]:
    set_compat_mode(compat, r.name)
    fib = FibProgrammer(netns=r.name, protocol=PROTO, reconcile_interval_s=3600)
    await fib.start(adopt=False)
    out: dict[str, float] = {}
    try:
        routes = dict.fromkeys(prefixes(n), "g")
        t = time.perf_counter()
        res = await fib.apply(Desired({"g": GroupSpec(dict.fromkeys(MEMBERS, 1))}, routes))
        out["install_s"] = time.perf_counter() - t
        assert not res.errors, res.errors[:3]
        lat = []
        for k in range(reps):
            w = {MEMBERS[0]: 1 + k % 7, MEMBERS[1]: 3, MEMBERS[2]: 2 + k % 3}
            t = time.perf_counter()
            res = await fib.set_weights("g", w)
            lat.append(time.perf_counter() - t)
            assert res.ops == 1 and not res.errors
        out["median"] = statistics.median(lat)
        out["p99"] = pct(lat, 0.99)
        t = time.perf_counter()
        await fib.reconcile(full=False)
        out["light_s"] = time.perf_counter() - t
        t = time.perf_counter()
        await fib.reconcile(full=True)
        out["audit1_s"] = time.perf_counter() - t  # first audit: builds the row memo
        t = time.perf_counter()
        await fib.reconcile(full=True)
        out["audit_s"] = time.perf_counter() - t  # steady state
    finally:
        await fib.stop(keep=False)
    return out


async def per_route_multipath(r: Netns, n: int) -> float:
    """Baseline: re-weight by replacing each route's RTA_MULTIPATH (table 100)."""
    s = await NetlinkSocket.open(netns=r.name)
    try:
        rows = await s.dump_select(link_dump(), IfInfoMsg, LINK_WANT)
        links = {st.name: st.ifindex for st in map(link_state, rows)}
        idx = [links[f"r-p{i}"] for i in (1, 2, 3)]
        pfx = prefixes(n)
        errs = await s.batch(multipath_msgs(pfx, [1, 1, 1], idx, 100))
        assert not errs, errs[:3]
        t = time.perf_counter()
        errs = await s.batch(multipath_msgs(pfx, [3, 1, 2], idx, 100))
        dt = time.perf_counter() - t
        assert not errs
        r.run(["ip", "route", "flush", "table", "100"])
        await asyncio.sleep(1.0)  # let the kernel finish freeing them before the next row
        return dt
    finally:
        s.close()


async def install(r: Netns, n: int) -> dict[str, float]:
    set_compat_mode(0, r.name)
    out: dict[str, float] = {}
    pfx = prefixes(n)
    # ip -batch on the same routes, into a group made by ip
    r.ip("nexthop", "add", "id", "1", "via", GW[0], "dev", "r-p1")
    r.ip("nexthop", "add", "id", "2", "group", "1")
    with tempfile.NamedTemporaryFile("w", suffix=".batch", delete=False) as f:
        f.writelines(f"route add {p} nhid 2 proto {PROTO}\n" for p in pfx)
        path = f.name
    try:
        t = time.perf_counter()
        r.ip("-batch", path)
        out["ip_batch_s"] = time.perf_counter() - t
    finally:
        os.unlink(path)
    r.ip("nexthop", "del", "id", "2")  # takes its routes with it
    r.ip("nexthop", "del", "id", "1")
    # FibProgrammer.apply end to end
    fib = FibProgrammer(netns=r.name, protocol=PROTO, reconcile_interval_s=3600)
    await fib.start(adopt=False)
    try:
        d = Desired({"g": GroupSpec({MEMBERS[0]: 1})}, dict.fromkeys(pfx, "g"))
        t = time.perf_counter()
        res = await fib.apply(d)
        out["apply_s"] = time.perf_counter() - t
        assert not res.errors, res.errors[:3]
        gid = fib.snapshot()["groups"]["g"]["nhid"]
    finally:
        await fib.stop(keep=True)
    # the raw batched sender alone (codec + socket), same routes, replace in place
    s = await NetlinkSocket.open(netns=r.name)
    try:
        msgs = [
            op_message(
                RouteSet(p, 0, gid, replace=True), protocol=PROTO, table=254, weight_16bit=True
            )
            for p in pfx
        ]
        t = time.perf_counter()
        encoded_errs = await s.batch(msgs)
        out["raw_batch_s"] = time.perf_counter() - t
        assert not encoded_errs
    finally:
        s.close()
    fib = FibProgrammer(netns=r.name, protocol=PROTO)
    await fib.start(adopt=False)
    await fib.stop(keep=False)
    return out


async def failover(r: Netns, groups: int, reps: int) -> dict[str, float]:
    set_compat_mode(0, r.name)
    fib = FibProgrammer(netns=r.name, protocol=PROTO, reconcile_interval_s=3600)
    await fib.start(adopt=False)
    out: dict[str, float] = {}
    try:
        gs = {
            f"p{i}": GroupSpec({MEMBERS[0]: 1 + i % 50, MEMBERS[1]: 2, MEMBERS[2]: 3})
            for i in range(groups)
        }
        pfx = prefixes(groups)
        await fib.apply(Desired(gs, {p: f"p{i}" for i, p in enumerate(pfx)}))
        lat = []
        for _ in range(reps):
            t = time.perf_counter()
            n = await fib.remove_nexthop(GW[0])
            lat.append(time.perf_counter() - t)
            assert n == groups, n
            await fib.restore_nexthop(GW[0])
        out["median"] = statistics.median(lat)
        out["max"] = max(lat)
        # baseline: the same replaces, one request/ACK each
        snap = fib.snapshot()
        ids = [(g["nhid"]) for g in snap["groups"].values()]
        assert fib._req is not None  # benchmark reaches in for the same socket
        member_ids = sorted(fib.cache.ids.members[m] for m in MEMBERS[1:])
        t = time.perf_counter()
        for gid in ids:
            op = GroupSet(gid, "", ((member_ids[0], 2), (member_ids[1], 3)), None, create=False)
            await fib._req.request(op_message(op, protocol=PROTO, table=254, weight_16bit=True))
        out["one_by_one_s"] = time.perf_counter() - t
        # kernel floor: the same 1000 replaces through ip -batch
        with tempfile.NamedTemporaryFile("w", suffix=".batch", delete=False) as f:
            f.writelines(
                f"nexthop replace id {gid} group {member_ids[0]},3/{member_ids[1]},2\n"
                for gid in ids
            )
            path = f.name
        try:
            t = time.perf_counter()
            r.ip("-batch", path)
            out["ip_batch_s"] = time.perf_counter() - t
        finally:
            os.unlink(path)
    finally:
        await fib.stop(keep=False)
    return out


async def bucket_read(r: Netns, buckets: int, reps: int) -> dict[str, float]:
    """A resilient group of 3 members: its bucket table read, and a weight write of it."""
    gid = 900 + buckets % 97
    r.ip("nexthop", "add", "id", str(gid + 1), "via", GW[0], "dev", "r-p1")
    r.ip("nexthop", "add", "id", str(gid + 2), "via", GW[1], "dev", "r-p2")
    r.ip("nexthop", "add", "id", str(gid + 3), "via", GW[2], "dev", "r-p3")
    members = f"{gid + 1}/{gid + 2}/{gid + 3}"
    r.ip("nexthop", "add", "id", str(gid), "group", members, "type", "resilient",
         "buckets", str(buckets), "idle_timer", "0")  # fmt: skip
    s = await NetlinkSocket.open(netns=r.name)
    try:
        reads, writes = [], []
        for i in range(reps):
            t = time.perf_counter()
            got = await read_buckets(s, gid)
            reads.append(time.perf_counter() - t)
            assert len(got) == buckets, len(got)
            res = Resilient(buckets=buckets, idle_timer_s=0.0)
            op = GroupSet(gid, "", ((gid + 1, 1 + i % 2), (gid + 2, 1), (gid + 3, 1)), res, False)
            t = time.perf_counter()
            await s.request(op_message(op, protocol=PROTO, table=254, weight_16bit=False))
            writes.append(time.perf_counter() - t)
    finally:
        s.close()
        r.ip("nexthop", "del", "id", str(gid))
        for i in (1, 2, 3):
            r.ip("nexthop", "del", "id", str(gid + i))
    return {"read": statistics.median(reads), "read_p99": pct(reads, 0.99),
            "write": statistics.median(writes)}  # fmt: skip


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 / 1k / 10k routes")
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args()
    sizes = [1, 1_000, 10_000] if a.quick else [1, 10_000, 100_000]
    with Lab() as lab:
        r = build(lab)
        print(f"kernel {os.uname().release}, {os.cpu_count()} cpus, lab {lab.tag}")
        print("\n1. weight change of one group (set_weights -> ACK), vs per-route multipath")
        print(
            f"{'routes':>8} {'compat':>6} {'median':>12} {'p99':>12} {'per-route':>12} "
            f"{'ratio':>9}  install  reconcile light / audit (first audit)"
        )
        for n in sizes:
            rows = [(compat, await weight_change(r, n, compat, a.reps)) for compat in (0, 1)]
            base = await per_route_multipath(r, n)
            for compat, w in rows:
                print(
                    f"{n:>8} {compat:>6} {ms(w['median'])} {ms(w['p99'])} {ms(base)} "
                    f"{base / w['median']:>8.0f}x  {w['install_s']:5.2f} s  "
                    f"{ms(w['light_s'])} / {ms(w['audit_s'])} ({w['audit1_s']:.2f} s)"
                )
        n = sizes[-1]
        print(f"\n2. installing {n} routes")
        ins = await install(r, n)
        ipb = n / ins["ip_batch_s"]
        for name, key in (
            ("ip -batch", "ip_batch_s"),
            ("FibProgrammer.apply", "apply_s"),
            ("raw batched sender", "raw_batch_s"),
        ):
            rate = n / ins[key]
            print(f"  {name:<22} {ins[key]:6.2f} s  {rate:>9.0f} routes/s  {rate / ipb:5.2f}x")
        print("\n3. failover: one next hop removed from 1000 groups")
        fo = await failover(r, 1000, max(3, a.reps // 10))
        print(f"  remove_nexthop -> last ACK: median {ms(fo['median'])}, max {ms(fo['max'])}")
        print(
            f"  baseline one request/ACK per group: {ms(fo['one_by_one_s'])} "
            f"({fo['one_by_one_s'] / fo['median']:.1f}x slower)"
        )
        print(
            f"  ip -batch, the same 1000 replaces:  {ms(fo['ip_batch_s'])} "
            f"({fo['ip_batch_s'] / fo['median']:.2f}x of glbd's time)"
        )
        print("\n4. a resilient group's bucket table read (spread placement), vs a weight write")
        for b in (128, 1024):
            br = await bucket_read(r, b, a.reps)
            worst = READ_BUCKETS_PER_CALL / b * br["read"] * 100
            print(
                f"  {b:>5} buckets: read median {ms(br['read'])}, p99 {ms(br['read_p99'])}; "
                f"weight write {ms(br['write'])} ({br['read'] / br['write']:.1f}x); "
                f"{READ_BUCKETS_PER_CALL} buckets read a second: {worst:.1f} % of a core at most"
            )
        set_compat_mode(1, r.name)


if __name__ == "__main__":
    asyncio.run(main())
