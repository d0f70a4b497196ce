"""Fabric colours against ECMP and GLB (docs/colours.md): RoCE-like sub-flows on a 4 x 4 fabric.

    .venv/bin/python -m bench.colours                 # ecmp, glb, colours; 3 runs, ~12 min
    .venv/bin/python -m bench.colours --runs 1 --out FILE.json

Every host has one address per colour (10.C.J.2 on host J, from leaf J's colour-C prefix
10.C.J.0/24, which leaf J originates; spine C's sessions have colour C). A sub-flow is what a
RoCEv2 queue pair looks like on the wire: UDP to port 4791 from a random source port, here one
per colour address, numbered datagrams at a fixed rate.

Contenders, each on a fabric of its own, interleaved run by run:

* ``ecmp``: static equal-cost routes (what any BGP ECMP installs), hashing on ports;
* ``glb``: glbd as shipped on every router (the colour prefixes uncoloured);
* ``colours``: glbd as shipped plus the colours: each colour prefix green/blue/red/yellow with
  the three others as backups (the issue's example).

Measured per run and contender:

* the **exchange**: all-to-all between the 4 hosts, 4 sub-flows per host pair (one per colour)
  at ``--pps`` for ``--seconds``; each spine records the sub-flows it forwards (nftables).
  *Collisions*: sub-flows of one host pair that share a spine with another of that pair
  (colours: 0). *Reorder*: datagrams that arrive after a later one of their sub-flow.
* **completion**: the fabric bench's exchange (deep profile: 10 Mbit/s links, 100 ms queues,
  TCP cubic, 2 MB per ordered host pair) as 4 TCP sub-flows per pair, one per colour address,
  to port 4791; without and with the fabric bench's hotspot (75 % background on spine1 ->
  leaf2, from 2 s before). Reported against ECMP and the fluid bound (bench/fabric/model.py).
* **failover**, a 1000 pps sub-flow host1 -> host2 (green): its spine's link to leaf1 loses
  carrier (*local*), then, restored, its spine's link to leaf2 (*remote*). *Outage*: the
  longest gap between two datagrams received across the failure; *lost*: datagrams never
  received. Targets (colours): local at most the BFD detection time + 10 ms (glbd's default BFD:
  3 x 50 ms), remote at most 50 ms.
* **return**, after each failure: the link back, the sub-flow back on its spine (colours: after
  the hold-down, 30 s by default); datagrams lost and reordered meanwhile (target: none).

CPU: routers on CPU 0, the bench (traffic) on the other CPU (bench/fabric/isolate.py). Timings
are benchmarks, never test assertions.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import random
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from glbdlab.nodes import GlbdNode, GlbdOptions, start_glbd, stop_all, wait_until
from glbdlab.topology import Fabric, leaf_spine

from bench.fabric import isolate
from bench.fabric.run import BG_PORT, DATA_TOS, Params, commit, install_static, prepare
from bench.fabric.traffic import UdpBlaster, all_to_all, loadavg

TOPO = leaf_spine(4, 4)
SPINES = TOPO.names("spine")
LEAVES = TOPO.names("leaf")
HOSTS = [f"host{j}" for j in range(1, 5)]
COLOURS = (1, 2, 3, 4)
NAMES = "{ green = 1, blue = 2, red = 3, yellow = 4 }"
ROCE_PORT = 4791
CONTENDERS = ("ecmp", "glb", "colours")
#: the fabric bench's deep profile: 10 Mbit/s links, 100 ms queues, cubic; 75 % background on
#: spine1 -> leaf2 for the completion case
P = Params().for_profile("deep")
#: glbd's default BFD: 50 ms x 3
BFD_DETECT_S = 0.150
_HDR = struct.Struct("!Q")
_NFT = """
table inet glbcol {
  set seen { type ipv4_addr . ipv4_addr . inet_service; flags dynamic; size 65536; }
  chain record { type filter hook forward priority 10; policy accept; }
}
add rule inet glbcol record udp dport 4791 add @seen { ip saddr . ip daddr . udp sport }
"""


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def host_addr(c: int, j: int) -> str:
    return f"10.{c}.{j}.2"


def colour_prefix(c: int, j: int) -> str:
    return f"10.{c}.{j}.0/24"


# ---- fabrics -----------------------------------------------------------------------------------


def add_colour_addresses(fab: Fabric) -> None:
    """Leaf J and host J share one /24 per colour on their link; the spines record the
    sub-flows they forward. (The fabric bench's ``prepare`` shapes the links, hashes on the
    5-tuple and skips next hops without carrier.)"""
    for j, (leaf, host) in enumerate(zip(LEAVES, HOSTS, strict=True), 1):
        fab.ns(leaf).ip_batch(
            [f"addr add 10.{c}.{j}.1/24 dev {fab.ifname(leaf, host)}" for c in COLOURS]
        )
        fab.ns(host).ip_batch(
            [f"addr add {host_addr(c, j)}/24 dev {fab.ifname(host, leaf)}" for c in COLOURS]
        )
        # hash on ports (sub-flows differ by source port only); skip next hops over a link
        # without carrier (the static baseline needs it to survive a dead link, as in
        # bench.fabric)
        linkdown = [f"net.ipv4.conf.{c}.ignore_routes_with_linkdown=1" for c in ("all", "default")]
        fab.ns(leaf).run(["sysctl", "-qw", "net.ipv4.fib_multipath_hash_policy=1", *linkdown])
    for s in SPINES:
        fab.ns(s).run(["nft", "-f", "-"], input=_NFT)


def static_colour_routes(fab: Fabric) -> None:
    """ECMP: the colour prefixes as static routes, like the host prefixes."""
    install_static(fab)
    for s in SPINES:
        fab.ns(s).ip_batch(
            [
                f"route replace {colour_prefix(c, j)} via {fab.addr(leaf, s)} "
                f"dev {fab.ifname(s, leaf)}"
                for j, leaf in enumerate(LEAVES, 1)
                for c in COLOURS
            ]
        )
    for j, leaf in enumerate(LEAVES, 1):
        cmds = []
        for k, _other in enumerate(LEAVES, 1):
            if k == j:
                continue
            for c in COLOURS:
                hops = " ".join(
                    f"nexthop via {fab.addr(s, leaf)} dev {fab.ifname(leaf, s)} weight 1"
                    for s in SPINES
                )
                cmds.append(f"route replace {colour_prefix(c, k)} {hops}")
        fab.ns(leaf).ip_batch(cmds)


def glbd_extra(fab: Fabric, coloured: bool) -> dict[str, str]:
    """Per node: each leaf advertises its colour prefixes (``[[bgp.network]]``); with colours,
    spine C's sessions are colour C, each leaf colours its uplinks by spine and originates
    colour C's prefix with the other colours as backups."""
    extra: dict[str, str] = {}
    names = {c: n for n, c in zip(("green", "blue", "red", "yellow"), COLOURS, strict=True)}
    for j, (leaf, host) in enumerate(zip(LEAVES, HOSTS, strict=True), 1):
        lines = []
        for c in COLOURS:
            lines += [
                "[[bgp.network]]",
                f'prefix = "{colour_prefix(c, j)}"',
                f'interface = "{fab.ifname(leaf, host)}"',
            ]
        if coloured:
            lines += ["[colours]", f"names = {NAMES}"]
            for c, s in zip(COLOURS, SPINES, strict=True):
                lines += ["[[colours.session]]", f'interface = "{fab.ifname(leaf, s)}"']
                lines += [f'colour = "{names[c]}"']
            for c in COLOURS:
                backups = ", ".join(f'"{names[b]}"' for b in COLOURS if b != c)
                lines += ["[[colours.originate]]", f'prefix = "{colour_prefix(c, j)}"']
                lines += [f'colour = "{names[c]}"', f"backup_colours = [{backups}]"]
        extra[leaf] = "\n".join(lines)
    if coloured:
        for c, s in zip(COLOURS, SPINES, strict=True):
            extra[s] = f'[colours]\nnames = {NAMES}\ndefault = "{names[c]}"'
    return extra


class Contender:
    """One contender's fabric (closed by ``stack``) and control plane."""

    def __init__(
        self, key: str, run_dir: Path, cpus: isolate.Cpus, stack: contextlib.ExitStack
    ) -> None:
        self.key = key
        self.fab = stack.enter_context(Fabric(TOPO))
        self.nodes: dict[str, GlbdNode] = {}
        stack.callback(self.stop)
        prepare(self.fab, P)
        add_colour_addresses(self.fab)
        if key == "ecmp":
            static_colour_routes(self.fab)
        else:
            opts = GlbdOptions(
                defaults_only=True,
                capacity_mbps=P.rate,
                extra=glbd_extra(self.fab, key == "colours"),
            )
            self.nodes = start_glbd(self.fab, run_dir / key, opts)
        isolate.pin_namespaces([self.fab.ns(n).name for n in LEAVES + SPINES], cpus.routers)

    def ready(self) -> bool:
        """Every leaf routes every other leaf's colour prefixes (colours: on its colour's spine
        alone)."""
        for j, leaf in enumerate(LEAVES, 1):
            for k in range(1, 5):
                if k == j:
                    continue
                for c in COLOURS:
                    out = self.fab.ns(leaf).ip("-j", "route", "show", colour_prefix(c, k)).stdout
                    routes = json.loads(out or "[]")
                    if not routes:
                        return False
                    if self.key == "colours" and len(routes) < 2:
                        return False  # the standby route is there too
        return True

    def spine_of(self) -> dict[tuple[str, str, int], set[str]]:
        """(source, destination, source port) -> the spines that forwarded it."""
        out: dict[tuple[str, str, int], set[str]] = {}
        for s in SPINES:
            res = self.fab.ns(s).run(["nft", "-j", "list", "set", "inet", "glbcol", "seen"])
            for obj in json.loads(res.stdout).get("nftables", []):
                for el in obj.get("set", {}).get("elem", []) or []:
                    key = el.get("elem", {}).get("val", el) if isinstance(el, dict) else el
                    conc = key["concat"]
                    out.setdefault((conc[0], conc[1], int(conc[2])), set()).add(s)
        return out

    def link_back(self) -> None:
        """A link came back: static routes the kernel flushed with it are configured again
        (a router's static config outlives a link flap; Linux forgets it)."""
        if self.key == "ecmp":
            static_colour_routes(self.fab)

    def clear_seen(self) -> None:
        for s in SPINES:
            self.fab.ns(s).run(["nft", "flush", "set", "inet", "glbcol", "seen"])

    def stop(self) -> None:
        stop_all(self.nodes)


# ---- traffic -----------------------------------------------------------------------------------


@dataclass
class SubFlow:
    src: str  # host
    dst: str
    saddr: str
    daddr: str
    sport: int = 0
    rx: list[tuple[int, float]] = field(default_factory=list)  # (seq, arrival)
    sent: int = 0

    def lost(self) -> int:
        return self.sent - len({s for s, _ in self.rx})

    def reordered(self) -> int:
        top, n = -1, 0
        for s, _ in self.rx:
            if s < top:
                n += 1
            top = max(top, s)
        return n


class Receivers:
    """One UDP socket on port 4791 per host; each datagram filed under its sub-flow."""

    def __init__(self, fab: Fabric, flows: Sequence[SubFlow]) -> None:
        self.by_key = {(f.saddr, f.sport): f for f in flows}
        self.socks = []
        for h in HOSTS:
            s = fab.ns(h).socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind(("0.0.0.0", ROCE_PORT))
            s.settimeout(0.05)
            self.socks.append(s)
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._run, args=(s,), daemon=True) for s in self.socks
        ]
        for t in self.threads:
            t.start()

    def _run(self, s: socket.socket) -> None:
        while not self.stop.is_set():
            try:
                data, (addr, port) = s.recvfrom(64)
            except TimeoutError:
                continue
            f = self.by_key.get((addr, port))
            if f is not None and len(data) >= 8:
                f.rx.append((_HDR.unpack_from(data)[0], time.monotonic()))

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()
        for s in self.socks:
            s.close()


def senders(fab: Fabric, flows: Sequence[SubFlow]) -> list[socket.socket]:
    out = []
    for f in flows:
        s = fab.ns(f.src).socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((f.saddr, random.randint(49152, 65535)))
        f.sport = s.getsockname()[1]
        s.connect((f.daddr, ROCE_PORT))
        out.append(s)
    return out


def send(
    flows: Sequence[SubFlow], socks: Sequence[socket.socket], pps: int, stop: threading.Event
) -> None:
    """Every sub-flow at ``pps``, round robin, until ``stop``."""
    t0, i = time.monotonic(), 0
    payload = bytes(56)
    while not stop.is_set():
        due = t0 + i / pps
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        for f, s in zip(flows, socks, strict=True):
            with contextlib.suppress(OSError):  # no route at that instant: counted as lost
                s.send(_HDR.pack(f.sent) + payload)
            f.sent += 1
        i += 1


def run_traffic(
    c: Contender, flows: list[SubFlow], pps: int, seconds: float, during: Any = None
) -> None:
    socks = senders(c.fab, flows)
    rx = Receivers(c.fab, flows)
    stop = threading.Event()
    tx = threading.Thread(target=send, args=(flows, socks, pps, stop), daemon=True)
    tx.start()
    try:
        if during is not None:
            during()
        else:
            time.sleep(seconds)
    finally:
        stop.set()
        tx.join()
        time.sleep(0.3)  # the last datagrams in flight
        rx.close()
        for s in socks:
            s.close()


# ---- measurements ------------------------------------------------------------------------------


def exchange(c: Contender, pps: int, seconds: float) -> dict[str, Any]:
    flows = [
        SubFlow(src, dst, host_addr(col, i), host_addr(col, j))
        for i, src in enumerate(HOSTS, 1)
        for j, dst in enumerate(HOSTS, 1)
        if i != j
        for col in COLOURS
    ]
    c.clear_seen()
    run_traffic(c, flows, pps, seconds)
    seen = c.spine_of()
    colliding = pairs_hit = 0
    for i, src in enumerate(HOSTS, 1):
        for j, dst in enumerate(HOSTS, 1):
            if i == j:
                continue
            spines = [
                frozenset(seen.get((f.saddr, f.daddr, f.sport), set()))
                for f in flows
                if f.src == src and f.dst == dst
            ]
            used = [s for sp in spines for s in sp]
            n = sum(1 for sp in spines if any(used.count(s) > 1 for s in sp))
            colliding += n
            pairs_hit += n > 0
    return {
        "subflows": len(flows),
        "colliding_subflows": colliding,
        "pairs_with_collision": pairs_hit,
        "reordered": sum(f.reordered() for f in flows),
        "subflows_reordered": sum(1 for f in flows if f.reordered()),
        "lost": sum(f.lost() for f in flows),
    }


def outage(f: SubFlow, t_fail: float, t_up: float) -> float:
    """The longest gap between arrivals from the last one before ``t_fail`` to ``t_up`` (the
    link back): the whole window when the flow did not resume meanwhile."""
    before = [t for _, t in f.rx if t < t_fail]
    times = [before[-1] if before else t_fail]
    times += [t for _, t in f.rx if t_fail <= t < t_up]
    times.append(t_up)
    return max(b - a for a, b in itertools.pairwise(times))


def completion(c: Contender, sport_base: int, hotspot: bool) -> dict[str, Any]:
    """All-to-all, 4 TCP sub-flows per ordered host pair (one per colour: colour address to
    colour address, port 4791, the fabric bench's exchange class), ``P.pair_bytes`` per pair;
    with ``hotspot``, the fabric bench's background (``P.hot`` of spine1 -> leaf2) runs from
    ``P.settle`` s before. Completion: when the last sub-flow is done."""
    bg = None
    if hotspot:
        dst = c.fab.addr(P.hot_leaf, P.hot_spine)
        bg = UdpBlaster(c.fab.ns(P.hot_spine), c.fab.ns(P.hot_leaf), dst, BG_PORT, P.hot_mbps)
        bg.start()
        time.sleep(P.settle)
    results: dict[int, Any] = {}

    def one(colour: int) -> None:
        ns = {h: c.fab.ns(h) for h in HOSTS}
        addrs = {h: host_addr(colour, j) for j, h in enumerate(HOSTS, 1)}
        results[colour] = all_to_all(
            ns,
            addrs,
            nbytes=P.pair_bytes // len(COLOURS),
            flows=1,
            port=ROCE_PORT,
            sport_base=sport_base + 100 * colour,
            cc=P.cc,
            tos=DATA_TOS,
            timeout=120.0,
        )

    threads = [threading.Thread(target=one, args=(col,)) for col in COLOURS]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        if bg is not None:
            bg.close()
    ok = all(r.ok for r in results.values())
    t0 = min(r.t0 for r in results.values())
    end = max(r.t0 + r.completion_s for r in results.values())
    bound = P.bound()
    return {
        "ok": ok,
        "completion_s": round(end - t0, 3),
        "bound_s": round(bound.t_opt if hotspot else bound.t_nohot, 3),
    }


def _lost(f: SubFlow, lo: int, hi: int) -> int:
    """Datagrams numbered ``lo`` .. ``hi - 1`` never received."""
    return (hi - lo) - len({q for q, _ in f.rx if lo <= q < hi})


def _reordered(f: SubFlow, lo: int, hi: int) -> int:
    part = SubFlow(f.src, f.dst, f.saddr, f.daddr, f.sport, [r for r in f.rx if lo <= r[0] < hi])
    return part.reordered()


def failover(c: Contender, where: str, hold_s: float) -> dict[str, Any]:
    """A 1000 pps green sub-flow host1 -> host2; the link of its spine toward leaf1 (``local``)
    or toward leaf2 (``remote``) loses carrier 1 s in and is back 3 s later; the flow is
    watched until it is on that spine again (at most ``hold_s`` + 15 s), then 1 s more."""
    f = SubFlow("host1", "host2", host_addr(1, 1), host_addr(1, 2))
    marks: dict[str, Any] = {}

    def script() -> None:
        time.sleep(1.0)
        c.clear_seen()
        time.sleep(0.3)
        seen = c.spine_of().get((f.saddr, f.daddr, f.sport), set())
        spine = marks["spine"] = sorted(seen)[0] if seen else SPINES[0]
        dev = c.fab.ifname(spine, "leaf1" if where == "local" else "leaf2")
        marks["t_fail"], marks["n_fail"] = time.monotonic(), f.sent
        c.fab.ns(spine).ip("link", "set", dev, "down")
        time.sleep(3.0)
        marks["n_up"] = f.sent
        c.fab.ns(spine).ip("link", "set", dev, "up")
        t_up = marks["t_up"] = time.monotonic()
        c.link_back()
        deadline = t_up + hold_s + 15.0
        while time.monotonic() < deadline:
            c.clear_seen()
            time.sleep(0.5)
            if spine in c.spine_of().get((f.saddr, f.daddr, f.sport), set()):
                marks["back_s"] = round(time.monotonic() - t_up, 1)
                break
        time.sleep(1.0)

    run_traffic(c, [f], 1000, 0, during=script)
    gap = outage(f, marks["t_fail"], marks["t_up"])
    return {
        "spine": marks["spine"],
        "outage_ms": round(gap * 1e3, 1),
        "lost": _lost(f, marks["n_fail"], marks["n_up"]),
        "back_after_s": marks.get("back_s"),
        "return_lost": _lost(f, marks["n_up"], f.sent),
        "return_reordered": _reordered(f, marks["n_up"], f.sent),
    }


# ---- report ------------------------------------------------------------------------------------


def report(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    out = [
        f"# colours bench at {meta['commit']}, {meta['date']}; {meta['machine']}; {meta['cpus']}"
    ]
    out.append(f"# load {meta['load_start']} -> {meta.get('load_end')}")
    out.append("")
    out.append(
        "| contender | colliding sub-flows (of 48) | pairs with a collision | reordered "
        "datagrams | local outage ms | local lost | remote outage ms | remote lost | return "
        "lost / reordered |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|")
    med = statistics.median
    for key in CONTENDERS:
        rs = [r for r in rows if r["contender"] == key]
        if not rs:
            continue

        def m(path: str, rs: list[dict[str, Any]] = rs) -> float:
            a, b = path.split(".")
            vals = [r[a][b] for r in rs if r[a].get(b) is not None]
            return med(vals) if vals else float("nan")

        out.append(
            f"| {key} | {m('exchange.colliding_subflows'):g} "
            f"| {m('exchange.pairs_with_collision'):g} "
            f"| {m('exchange.reordered'):g} | {m('local.outage_ms'):g} | {m('local.lost'):g} "
            f"| {m('remote.outage_ms'):g} | {m('remote.lost'):g} "
            f"| {m('local.return_lost') + m('remote.return_lost'):g} / "
            f"{m('local.return_reordered') + m('remote.return_reordered'):g} |"
        )
    out.append("")
    out.append(
        "| contender | completion s, no hotspot | x ECMP | completion s, hotspot | x ECMP "
        "| x fluid bound (hotspot) |"
    )
    out.append("|---|---|---|---|---|---|")

    def comp(key: str, case: str) -> float:
        vals = [
            r[f"completion_{case}"]["completion_s"]
            for r in rows
            if r["contender"] == key and f"completion_{case}" in r
        ]
        return med(vals) if vals else float("nan")

    for key in CONTENDERS:
        if not any(r["contender"] == key for r in rows):
            continue
        bounds = [r["completion_hotspot"]["bound_s"] for r in rows if "completion_hotspot" in r]
        b = bounds[0] if bounds else float("nan")
        out.append(
            f"| {key} | {comp(key, 'none'):.2f} | {comp('ecmp', 'none') / comp(key, 'none'):.2f}x "
            f"| {comp(key, 'hotspot'):.2f} | {comp('ecmp', 'hotspot') / comp(key, 'hotspot'):.2f}x "
            f"| {comp(key, 'hotspot') / b:.2f} |"
        )
    out.append("")
    rs = [r for r in rows if r["contender"] == "colours"]
    if rs:
        med_local = med(r["local"]["outage_ms"] for r in rs)
        med_remote = med(r["remote"]["outage_ms"] for r in rs)
        checks = [
            ("spine collisions", med(r["exchange"]["colliding_subflows"] for r in rs), 0, "== 0"),
            ("reordered datagrams", med(r["exchange"]["reordered"] for r in rs), 0, "== 0"),
            ("local failover ms", med_local, BFD_DETECT_S * 1e3 + 10, "<= BFD detect + 10 ms"),
            ("remote failover ms", med_remote, 50, "<= 50 ms"),
            (
                "return lost + reordered",
                med(
                    r["local"]["return_lost"]
                    + r["remote"]["return_lost"]
                    + r["local"]["return_reordered"]
                    + r["remote"]["return_reordered"]
                    for r in rs
                ),
                0,
                "== 0",
            ),
        ]
        for name, got, limit, text in checks:
            ok = got <= limit
            out.append(
                f"VERDICT colours {name}: {got:g} (target {text}): {'met' if ok else 'NOT met'}"
            )
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.colours", description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--pps", type=int, default=200, help="datagrams a second per sub-flow in the exchange"
    )
    ap.add_argument("--seconds", type=float, default=3.0, help="length of the exchange")
    ap.add_argument("--hold", type=float, default=30.0, help="colours.hold_down_s (glbd's default)")
    ap.add_argument("--only", default=",".join(CONTENDERS))
    ap.add_argument("--out", default="")
    ap.add_argument("--report", default="", help="print the report of a saved JSON")
    a = ap.parse_args(argv)
    if a.report:
        d = json.loads(Path(a.report).read_text())
        print(report(d["rows"], d["meta"]))
        return 0
    if os.geteuid() != 0:
        print("bench.colours: run as root (it builds network namespaces)", file=sys.stderr)
        return 2
    only = [k for k in a.only.split(",") if k]
    cpus = isolate.plan()
    isolate.pin_thread(cpus.traffic)
    run_dir = Path(tempfile.mkdtemp(prefix="glbd-colours-"))
    with open("/proc/cpuinfo") as fh:
        model = next((ln.split(":", 1)[1].strip() for ln in fh if "model name" in ln), "?")
    kernel = Path("/proc/sys/kernel/osrelease").read_text().strip()
    meta: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit(),
        "command": " ".join(
            ["python -m bench.colours", *(argv if argv is not None else sys.argv[1:])]
        ),
        "machine": f"{model}, {os.cpu_count()} CPUs, kernel {kernel}",
        "cpus": cpus.describe(),
        "load_start": loadavg(),
    }
    rows: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        contenders = {k: Contender(k, run_dir, cpus, stack) for k in only}
        for c in contenders.values():
            wait_until(c.ready, 120, what=f"{c.key}: every colour prefix routed")
        # the same source ports for every contender within a run: the same hash luck
        sports = [random.randrange(20000, 40000, 1000) for _ in range(a.runs)]
        for run in range(a.runs):
            order = only[run % len(only) :] + only[: run % len(only)]
            for key in order:
                c = contenders[key]
                log(f"run {run + 1}/{a.runs}: {key}")
                row = {"run": run, "contender": key, "exchange": exchange(c, a.pps, a.seconds)}
                for case in ("none", "hotspot"):
                    row[f"completion_{case}"] = completion(c, sports[run], case == "hotspot")
                for where in ("local", "remote"):
                    row[where] = failover(c, where, a.hold if key == "colours" else 0.0)
                log(json.dumps(row))
                rows.append(row)
    meta["load_end"] = loadavg()
    out = Path(a.out) if a.out else run_dir.with_suffix(".json")
    out.write_text(json.dumps({"meta": meta, "params": vars(a), "rows": rows}, indent=1) + "\n")
    print(report(rows, meta))
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
