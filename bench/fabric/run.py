"""Fabric benchmark: GLB against ECMP, DLB-only, FRR's static NNHN weights and the
offline optimum, on a 4 x 4 leaf-spine fabric in namespaces, under a downstream hotspot.

Run as root from the repository root (creates and deletes its own namespaces)::

    .venv/bin/python -m bench.fabric                 # 5 runs, ~10 min
    .venv/bin/python -m bench.fabric --runs 1        # quick look, ~3 min
    .venv/bin/python -m bench.fabric --only ecmp,glb-ht --cases before

Topology: 4 spines x 4 leaves, one host behind each leaf; every fabric link tbf-shaped (both
directions) to ``--rate`` Mbit/s; leaves hash on L4 (``fib_multipath_hash_policy=1``).

Workload: all-to-all -- every host sends ``--mbytes`` MB to every other host over ``--flows``
TCP flows per ordered pair, each flow a fixed share (bench/fabric/traffic.py). Figure: the time
until the last byte of the last flow arrived. Source ports are fixed per (run, case), so every
contender gets the same 5-tuples.

Hotspot: spine1 -> leaf2 carries UDP background (iperf3, ``--hot`` x rate) from spine1 into
that link. Cases: ``none`` (no hotspot), ``before`` (background starts ``--settle`` s before the
exchange), ``during`` (starts ``--hot-at`` s into the exchange).

Contenders (each on a freshly built fabric, one after the other, same parameters):

1. ``ecmp``: static equal-weight multipath routes on the leaves (what any BGP ECMP installs;
   no control-plane noise);
2. ``frr``: FRR 10.x on every node, eBGP, NNHN (``send-nexthop-characteristics`` spine->leaf)
   and ``bgp bestpath bandwidth ignore`` (static next-next-hop-count weights);
3. ``dlb``: glbd everywhere, heartbeats off (leaves weight by their local links only);
4. ``glb-ht``: glbd GLB (heartbeats), hash-threshold nexthop groups;
5. ``glb-res``: glbd GLB, resilient nexthop groups (glbd's default);
6. ``optimum``: static weighted routes from the known residual capacities (spine1's share for
   the hot leaf's prefix = (1 - hot) of the others'); in the ``during`` case an oracle switches
   them at the instant the background starts;
7. ``glb-flowlet``: glbd GLB, resilient groups, with flowlet switching on the leaves
   (docs/flowlet.md), glbd's defaults otherwise: a flow may change spine after an idle gap
   longer than the flowlet timeout, by default ``"auto"`` (the peak queueing delay glbd
   measures on the leaf's uplinks and, from heartbeats, the spines' downlinks), and the
   resilient groups' idle timer follows that timeout, so idle buckets follow the weights as
   soon as moving them cannot reorder. ``--flowlet-timeout-ms`` fixes both instead.
   ``glb-flowlet-ht`` (opt-in): the same with hash-threshold groups.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from glbdlab.netns import LabError, list_lab_namespaces
from glbdlab.nodes import GlbdNode, GlbdOptions, kernel_group_for, start_glbd, stop_all
from glbdlab.topology import Fabric, Topology, leaf_spine

from bench.fabric import model
from bench.fabric.traffic import (
    LinkSampler,
    UdpBlaster,
    all_to_all,
    cpu_times,
    idle_pct,
    loadavg,
    tcp_counters,
)

CONTENDERS = ("ecmp", "frr", "dlb", "glb-ht", "glb-res", "glb-flowlet", "optimum")
#: opt-in diagnostic contenders (``--only``), not part of the default run
EXTRA_CONTENDERS = ("glb-res-fast", "ecmp-res", "glb-res-frozen", "glb-flowlet-ht")
#: contenders whose leaves run glbd's flowlet program
FLOWLET = ("glb-flowlet", "glb-flowlet-ht")
LABELS = {
    "ecmp": "ECMP (static, equal)",
    "frr": "FRR 10 NNHN + bw ignore",
    "dlb": "glbd DLB-only (no HB)",
    "glb-ht": "glbd GLB hash-threshold",
    "glb-res": "glbd GLB resilient",
    "optimum": "offline optimum",
    "glb-res-fast": "glbd GLB resilient, 0.2 s timers",
    "ecmp-res": "ECMP, static resilient groups",
    "glb-res-frozen": "glbd resilient, weights frozen equal",
    "glb-flowlet": "glbd GLB resilient + flowlets",
    "glb-flowlet-ht": "glbd GLB hash-threshold + flowlets",
}
#: [fib] settings of the diagnostic contenders (written into the generated glbd.toml)
FIB_OVERRIDES = {
    "glb-res-fast": {"resilient_idle_timer_s": "0.2", "resilient_unbalanced_timer_s": "0.2"},
}
CASES = ("none", "before", "during")
BG_PORT = 5399
#: the exchange's TCP sockets use TOS 0x08 (IPTOS_THROUGHPUT): routers put it in the lowest
#: strict-priority class of every fabric link (10:3), below the background (best effort,
#: class 10:2) and the control traffic (class 10:1). So the background is *steady*: TCP cannot
#: push it out of the tail of a shared queue, and the hot link's residual capacity is known
#: (rate - background).
DATA_TOS = 0x08
#: the class glbd's helpers count as not steerable (``link_quality.foreign_classes``): the
#: background's; their heartbeats then report the residual capacity
FOREIGN_CLASSES = ("10:2",)
DATA_PORT = 5201


@dataclass
class Params:
    spines: int = 4
    leaves: int = 4
    rate: float = 10.0  # Mbit/s, every fabric link
    hot: float = 0.75  # background share of the hot link
    hot_spine: str = "spine1"
    hot_leaf: str = "leaf2"
    mbytes: float = 2.0  # per ordered host pair
    flows: int = 16  # per ordered host pair
    runs: int = 5
    cases: tuple[str, ...] = CASES
    settle: float = 2.0
    hot_at: float = 0.5
    sample: float = 0.25
    burst: str = "64kbit"
    latency: str = "100ms"
    hash_policy: int = 3  # leaves' fib_multipath_hash_policy (3 = 5-tuple from the headers)
    cc: str = "cubic"  # TCP congestion control in the hosts (the machine's default may be bbr)
    #: glbd's helpers report residual capacity (``foreign_classes``: the background's class)
    residual: bool = True
    #: the leaves' path table keeps weights with memory (``path_quality.weight_memory``)
    memory: bool = True
    #: flowlet timeout of the flowlet contenders, ms; 0 = glbd's default ("auto")
    flowlet_timeout_ms: float = 0.0

    @property
    def pair_bytes(self) -> int:
        return int(self.mbytes * 1e6)

    @property
    def hot_mbps(self) -> float:
        return self.rate * self.hot

    @property
    def flowlet_timeout_s(self) -> float | None:
        """The fixed flowlet timeout, or None for glbd's default."""
        return self.flowlet_timeout_ms / 1e3 if self.flowlet_timeout_ms else None


@dataclass
class Exchange:
    contender: str
    case: str
    run: int
    ok: bool
    completion_s: float
    error: str = ""
    per_dst_s: dict[str, float] = field(default_factory=dict)
    util: dict[str, float] = field(default_factory=dict)
    spread_pp: float = float("nan")
    retrans: int = 0
    reorder: int = 0
    rto: int = 0
    cpu_idle_pct: float = float("nan")
    bench_cpu_pct: float = float("nan")  # this process (flows, sampler) in % of one core
    connect_s: float = float("nan")  # until every flow's handshake completed
    loadavg: str = ""
    weights: list[tuple[float, dict[str, int]]] = field(default_factory=list)
    hot_series: dict[str, list[float]] = field(default_factory=dict)


def log(msg: str) -> None:
    print(f"[{datetime.now(UTC).strftime('%H:%M:%S')}] {msg}", flush=True)


def _ip(cidr: str) -> str:
    return cidr.split("/")[0]


# ------------------------------------------------------------------------------ routes


def leaf_paths(fab: Fabric, leaf: str, prefix: str) -> dict[str, int]:
    """Kernel next hops (gateway -> weight) of ``prefix`` on ``leaf``: nexthop-group routes
    (glbd, FRR) and legacy multipath routes (static) alike."""
    ns = fab.ns(leaf)
    routes = json.loads(ns.ip("-j", "route", "show", prefix, check=False).stdout or "[]")
    if not routes:
        return {}
    r = routes[0]
    if "nhid" in r:
        return kernel_group_for(fab, leaf, prefix)
    if "nexthops" in r:
        return {nh["gateway"]: int(nh.get("weight", 1)) for nh in r["nexthops"]}
    if "gateway" in r:
        return {r["gateway"]: 1}
    return {}


def install_static(
    fab: Fabric, weights: dict[str, dict[str, dict[str, int]]] | None = None
) -> None:
    """Static routes: on each spine, each leaf's host prefix via that leaf; on each leaf, every
    other leaf's prefix over all spines, weight 1 unless ``weights[leaf][prefix][spine]``."""
    topo = fab.topo
    for s in topo.names("spine"):
        cmds = []
        for leaf in topo.names("leaf"):
            pfx = topo.node(leaf).prefix4
            cmds.append(f"route replace {pfx} via {fab.addr(leaf, s)} dev {fab.ifname(s, leaf)}")
        fab.ns(s).ip_batch(cmds)
    for leaf in topo.names("leaf"):
        cmds = []
        for other in topo.names("leaf"):
            if other == leaf:
                continue
            pfx = topo.node(other).prefix4
            assert pfx
            cmds.append(_mp_route(fab, leaf, pfx, (weights or {}).get(leaf, {}).get(pfx, {})))
        fab.ns(leaf).ip_batch(cmds)


def install_static_resilient(fab: Fabric) -> None:
    """:func:`install_static` with equal weights, but each leaf's routes use one resilient
    nexthop group per prefix (glbd's defaults: 128 buckets, idle 1 s, unbalanced 5 s) and no
    control plane: what resilient hashing alone does to the exchange."""
    topo = fab.topo
    install_static(fab)
    for leaf in topo.names("leaf"):
        spines = topo.names("spine")
        cmds = [
            f"nexthop replace id {100 + i} via {fab.addr(s, leaf)} dev {fab.ifname(leaf, s)}"
            for i, s in enumerate(spines)
        ]
        members = "/".join(str(100 + i) for i in range(len(spines)))
        for k, other in enumerate(topo.names("leaf")):
            if other == leaf:
                continue
            cmds += [
                f"nexthop replace id {200 + k} group {members} type resilient buckets 128 "
                "idle_timer 1 unbalanced_timer 5",
                f"route replace {topo.node(other).prefix4} nhid {200 + k}",
            ]
        fab.ns(leaf).ip_batch(cmds)


def _mp_route(fab: Fabric, leaf: str, pfx: str, w: dict[str, int]) -> str:
    parts = [f"route replace {pfx}"]
    for s in fab.topo.names("spine"):
        wt = w.get(s, 1) if w else 1
        if wt > 0:
            parts.append(f"nexthop via {fab.addr(s, leaf)} dev {fab.ifname(leaf, s)} weight {wt}")
    return " ".join(parts)


def optimum_routes(fab: Fabric, p: Params, hot: bool) -> dict[str, dict[str, dict[str, int]]]:
    """Per leaf, per prefix, per spine: weights from the known residual capacities."""
    if not hot:
        return {}
    topo = fab.topo
    resid = {s: p.rate - (p.hot_mbps if s == p.hot_spine else 0.0) for s in topo.names("spine")}
    w = model.optimum_weights(resid)
    pfx = topo.node(p.hot_leaf).prefix4
    assert pfx
    return {leaf: {pfx: w} for leaf in topo.names("leaf") if leaf != p.hot_leaf}


def set_optimum(fab: Fabric, p: Params, hot: bool) -> None:
    pfx = fab.topo.node(p.hot_leaf).prefix4
    assert pfx
    ws = optimum_routes(fab, p, hot)
    for leaf in fab.topo.names("leaf"):
        if leaf != p.hot_leaf:
            fab.ns(leaf).ip_batch([_mp_route(fab, leaf, pfx, ws.get(leaf, {}).get(pfx, {}))])


# ------------------------------------------------------------------------------ control planes


def start_glbd_with(
    fab: Fabric, run_dir: Path, opts: GlbdOptions, fib: dict[str, str]
) -> dict[str, GlbdNode]:
    """``start_glbd``, with extra ``[fib]`` keys added to each generated config (GlbdOptions
    has no field for them and ``extra`` cannot reopen the ``[fib]`` table)."""
    if not fib:
        return start_glbd(fab, run_dir, opts)
    topo = fab.topo
    nodes = {n: GlbdNode(fab, n, run_dir, opts) for n in topo.names("leaf") + topo.names("spine")}
    for node in nodes.values():
        text = node.config.read_text()
        add = "".join(f"{k} = {v}\n" for k, v in fib.items())
        node.config.write_text(text.replace("[fib]\n", "[fib]\n" + add, 1))
    for node in nodes.values():
        node.start()
    for node in nodes.values():
        node.wait_ready()
    return nodes


#: [path_quality] of the diagnostic contender whose leaves run everything but keep every weight
#: equal (a constant weight table, no capacity term, no memory): glbd's CPU and packets
#: without its weight changes
FROZEN = "weight_table = [1, 1, 1, 1, 1, 1, 1, 1]\ncapacity_aware = false\nweight_memory = false"


def leaf_extra(key: str, p: Params) -> dict[str, str]:
    """Extra TOML of the leaves' glbd.toml for contender ``key``."""
    if key == "glb-res-frozen":
        return {"leaf": "[path_quality]\n" + FROZEN}
    out = "" if p.memory else "[path_quality]\nweight_memory = false\n"
    if key in FLOWLET:  # on every host-facing port (the default: all but the fabric's)
        out += "[flowlet]\nenabled = true\n"
        if p.flowlet_timeout_s is not None:
            out += f"timeout_us = {round(p.flowlet_timeout_s * 1e6)}\n"
    return {"leaf": out.rstrip("\n")} if out else {}


def fib_extra(key: str, p: Params) -> dict[str, str]:
    """Extra ``[fib]`` keys of contender ``key``: with a fixed flowlet timeout, a flowlet
    contender's resilient groups move an idle bucket once it has been idle that long (never
    sooner than the kernel's 10 ms clock); glbd's "auto" idle timer does that by itself."""
    out = dict(FIB_OVERRIDES.get(key, {}))
    if key in FLOWLET and p.flowlet_timeout_s is not None:
        out["resilient_idle_timer_s"] = f"{max(0.01, p.flowlet_timeout_s):g}"
    return out


class ControlPlane:
    """Starts and stops one contender's routing on a built fabric."""

    def __init__(self, key: str, fab: Fabric, p: Params, run_dir: Path) -> None:
        self.key = key
        self.fab = fab
        self.p = p
        self.run_dir = run_dir
        self.glbd: dict[str, GlbdNode] = {}
        self.frr: list[Any] = []

    def start(self) -> None:
        fab, topo = self.fab, self.fab.topo
        routers = topo.names("leaf") + topo.names("spine")
        if self.key in ("ecmp", "optimum"):
            install_static(fab)
        elif self.key == "ecmp-res":
            install_static_resilient(fab)
        elif self.key == "frr":
            from glbdlab.frr import start_fabric_frr

            self.frr = list(
                start_fabric_frr(
                    fab,
                    routers,
                    build="sid",
                    nhc_to=topo.names("leaf"),
                    extra_bgp=[" bgp bestpath bandwidth ignore"],
                ).values()
            )
        else:
            opts = GlbdOptions(
                heartbeat=self.key != "dlb",
                group_type="hash-threshold"
                if self.key in ("glb-ht", "glb-flowlet-ht")
                else "resilient",
                capacity_mbps=self.p.rate,
                foreign_classes=FOREIGN_CLASSES if self.p.residual else (),
                extra=leaf_extra(self.key, self.p),
            )
            self.glbd = start_glbd_with(
                fab, self.run_dir / self.key, opts, fib_extra(self.key, self.p)
            )
        self.wait_routes(90.0)

    def wait_routes(self, timeout: float) -> None:
        """Every leaf has every spine as next hop for every other leaf's prefix."""
        topo = self.fab.topo
        deadline = time.monotonic() + timeout
        missing: list[str] = []
        while time.monotonic() < deadline:
            missing = []
            for leaf in topo.names("leaf"):
                for other in topo.names("leaf"):
                    if other != leaf:
                        pfx = topo.node(other).prefix4
                        assert pfx
                        if len(leaf_paths(self.fab, leaf, pfx)) != topo.spines:
                            missing.append(f"{leaf}->{pfx}")
            if not missing:
                return
            time.sleep(0.5)
        raise LabError(f"{self.key}: routes not complete after {timeout:g} s: {missing[:4]}")

    def wait_equal(self, timeout: float) -> bool:
        """glbd: wait until the weights toward the hot leaf are equal again (after a hotspot)."""
        if not self.glbd:
            return True
        pfx = self.fab.topo.node(self.p.hot_leaf).prefix4
        assert pfx
        leaves = [lf for lf in self.fab.topo.names("leaf") if lf != self.p.hot_leaf]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            groups = [leaf_paths(self.fab, lf, pfx) for lf in leaves]
            if all(len(g) == self.fab.topo.spines and len(set(g.values())) == 1 for g in groups):
                return True
            time.sleep(0.25)
        return False

    def stop(self) -> None:
        stop_all(self.glbd)
        for f in self.frr:
            with contextlib.suppress(Exception):
                f.stop()


# ------------------------------------------------------------------------------ hotspot


class Background:
    """Steady UDP from the hot spine into its link toward the hot leaf (in-process sender
    thread, so it starts at the instant asked for)."""

    def __init__(self, fab: Fabric, p: Params) -> None:
        dst = fab.addr(p.hot_leaf, p.hot_spine)
        self.udp = UdpBlaster(fab.ns(p.hot_spine), fab.ns(p.hot_leaf), dst, BG_PORT, p.hot_mbps)
        self.t_on = 0.0

    def start(self) -> None:
        self.udp.start()
        self.t_on = self.udp.t_on

    def stop(self) -> None:
        self.udp.stop()

    def close(self) -> None:
        self.udp.close()


class WeightWatch:
    """Polls one leaf's kernel weights toward the hot leaf's prefix every ``interval`` s."""

    def __init__(self, fab: Fabric, leaf: str, prefix: str, names: dict[str, str], interval: float):
        self.fab, self.leaf, self.prefix, self.names = fab, leaf, prefix, names
        self.interval = interval
        self.t0 = time.monotonic()
        self.rows: list[tuple[float, dict[str, int]]] = []
        self._stop = threading.Event()
        self._th = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):
                g = leaf_paths(self.fab, self.leaf, self.prefix)
                self.rows.append(
                    (
                        round(time.monotonic() - self.t0, 2),
                        {self.names.get(k, k): v for k, v in sorted(g.items())},
                    )
                )
            self._stop.wait(self.interval)

    def __enter__(self) -> WeightWatch:
        self.t0 = time.monotonic()
        self._th.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._th.join(5)


# ------------------------------------------------------------------------------ one contender


#: control traffic (BFD, glbd heartbeats, BGP) of the routers goes to class 10:1 inside each
#: link's tbf, like CS6 into a strict-priority queue on a real switch; the exchange (TOS 0x08)
#: to 10:3, below the UDP background (unmarked: the default class 10:2). Applies to every
#: contender alike.
_NFT_CONTROL = """
table inet glbbench {
  chain out { type filter hook output priority 0; policy accept;
    udp dport { 3784, 4784, 6149 } meta priority set 10:1
    udp sport { 3784, 4784, 6149 } meta priority set 10:1
    tcp dport 179 meta priority set 10:1
    tcp sport 179 meta priority set 10:1
  }
  chain post { type filter hook postrouting priority 0; policy accept;
    ip dscp 0x02 meta priority set 10:3
  }
}
"""


def prepare(fab: Fabric, p: Params) -> None:
    """Shape every fabric link end: tbf (rate, burst) over three strict-priority classes, each
    with a pfifo queue (txqueuelen packets) that holds ``latency`` at the link rate, as the
    tbf's own queue would: 10:1 control (BFD, heartbeats, BGP: nftables sets their priority),
    10:2 best effort (the background; the default class), 10:3 the exchange (TOS 0x08, set by
    nftables on every router). L4 hashing on the leaves.

    The classes are an HTB (this kernel has no prio/ets qdisc) whose classes each may send at
    the full rate: the tbf above is the only limit, so HTB always serves the lowest priority
    number first (strict priority, as pfifo_fast's bands were before). Classes with leaf
    qdiscs of their own have per-class byte counters, like a switch's per-queue counters, which
    glbd's ``foreign_classes`` reads."""
    topo = fab.topo
    qlen = max(10, math.ceil(p.rate * 1e6 / 8 * _secs(p.latency) / 1514))
    for node in topo.names("spine") + topo.names("leaf"):
        ns = fab.ns(node)
        cmds = []
        for ln in topo.links_of(node):
            ifname, _, _, peer = ln.end(node)
            if topo.node(peer).role == "host":
                continue
            ns.ip("link", "set", "dev", ifname, "txqueuelen", str(qlen))
            cmds += [
                f"qdisc replace dev {ifname} root handle 1: tbf rate {p.rate:g}mbit "
                f"burst {p.burst} latency {p.latency}",
                f"qdisc replace dev {ifname} parent 1:1 handle 10: htb default 2",
            ]
            for b in (1, 2, 3):
                cmds += [
                    f"class add dev {ifname} parent 10: classid 10:{b} htb rate {p.rate:g}mbit "
                    f"prio {b - 1} quantum 1514",
                    f"qdisc add dev {ifname} parent 10:{b} handle {10 + b}: pfifo limit {qlen}",
                ]
        ns.run(["tc", "-batch", "-"], input="\n".join(cmds) + "\n")
        ns.run(["nft", "-f", "-"], input=_NFT_CONTROL)
        if topo.node(node).role == "leaf":
            ns.run(["sysctl", "-q", "-w", *hash_sysctls(p, topo.node(node).index)])
    # one segment per skb from the hosts' TCP (no 64 KB TSO bursts that tbf would split into
    # 44 back-to-back packets and tail-drop together: a NIC would pace them onto the wire)
    for h in topo.names("host"):
        fab.ns(h).ip(
            "link", "set", "dev", fab.ifname(h, f"leaf{topo.node(h).index}"), "gso_max_segs", "1"
        )


def hash_sysctls(p: Params, index: int) -> list[str]:
    """L4 multipath hashing for a leaf.

    Policy 1 on this kernel short-circuits to the skb's socket hash when one is present
    (``fib_multipath_hash``: "short-circuit if we already have L4 hash present"), and a veth
    keeps the sending host's ``sk_txhash``: the leaf would then hash on a random per-socket
    value that TCP re-draws after every RTO (``sk_rethink_txhash``), so flows hop off a slow
    path by themselves -- no switch can see that value. Policy 3 with fields 0x37 (source and
    destination address and port, protocol) hashes the packet's 5-tuple from the headers, as a
    switch does. A fixed per-leaf seed (6.11+) makes every contender hash alike."""
    out = [f"net.ipv4.fib_multipath_hash_policy={p.hash_policy}"]
    if p.hash_policy == 3:
        out.append("net.ipv4.fib_multipath_hash_fields=0x0037")
    if Path("/proc/sys/net/ipv4/fib_multipath_hash_seed").exists():
        out.append(f"net.ipv4.fib_multipath_hash_seed={1000 + index}")
    return out


def _secs(v: str) -> float:
    v = v.strip()
    for suf, mul in (("ms", 1e-3), ("us", 1e-6), ("s", 1.0)):
        if v.endswith(suf):
            return float(v[: -len(suf)]) * mul
    return float(v)


def host_addr(topo: Topology, host: str) -> str:
    return _ip(topo.links_of(host)[0].end(host)[1])


def run_contender(key: str, p: Params, run_dir: Path) -> list[Exchange]:
    topo = leaf_spine(p.spines, p.leaves)
    out: list[Exchange] = []
    hosts = topo.names("host")
    hot_pfx = topo.node(p.hot_leaf).prefix4
    assert hot_pfx
    gw_names = {
        fab_gw: s for s in topo.names("spine") for fab_gw in [_ip(topo.link(s, "leaf1").end(s)[1])]
    }
    with Fabric(topo) as fab:
        tag = fab.tag
        prepare(fab, p)
        cp = ControlPlane(key, fab, p, run_dir)
        t = time.monotonic()
        try:
            cp.start()
            log(f"{key}: fabric {tag} ready in {time.monotonic() - t:.1f} s")
            hns = {h: fab.ns(h) for h in hosts}
            addrs = {h: host_addr(topo, h) for h in hosts}
            for a in hosts:
                for b in hosts:
                    if a != b and not fab.ns(a).ping(addrs[b], count=5, wait=1.0):
                        raise LabError(f"{key}: {a} cannot reach {b}")
            links = [
                (s, fab.ifname(s, lf)) for s in topo.names("spine") for lf in topo.names("leaf")
            ]
            links += [
                (lf, fab.ifname(lf, s)) for lf in topo.names("leaf") for s in topo.names("spine")
            ]
            sampler = LinkSampler({n: fab.ns(n) for n, _ in links}, links, p.sample)
            try:
                for run in range(p.runs):
                    for ci, case in enumerate(p.cases):
                        ex = one_exchange(
                            key, case, run, ci, fab, cp, p, hns, addrs, sampler, gw_names, hot_pfx
                        )
                        out.append(ex)
                        log(
                            f"{key:8} run {run + 1}/{p.runs} {case:6}: "
                            + (f"{ex.completion_s:6.2f} s" if ex.ok else f"FAILED {ex.error}")
                            + f"  retrans {ex.retrans:5d} reorder {ex.reorder:4d}"
                            f"  spread {ex.spread_pp:5.1f} pp  cpu idle {ex.cpu_idle_pct:4.1f} %"
                            f" (bench {ex.bench_cpu_pct:3.0f} %)"
                            f"  load {ex.loadavg}"
                        )
            finally:
                sampler.close()
        finally:
            cp.stop()
    left = list_lab_namespaces(tag)
    if left:
        log(f"WARNING: namespaces left behind: {left}")
    else:
        log(f"{key}: fabric {tag} deleted (no glb-{tag}-* namespace left)")
    return out


def one_exchange(
    key: str,
    case: str,
    run: int,
    ci: int,
    fab: Fabric,
    cp: ControlPlane,
    p: Params,
    hns: dict[str, Any],
    addrs: dict[str, str],
    sampler: LinkSampler,
    gw_names: dict[str, str],
    hot_pfx: str,
) -> Exchange:
    topo = fab.topo
    bg = Background(fab, p)
    timer: threading.Timer | None = None
    if case == "before":
        if key == "optimum":
            set_optimum(fab, p, True)
        bg.start()
        time.sleep(p.settle)

    def hot_now() -> None:
        if key == "optimum":
            set_optimum(fab, p, True)
        bg.start()

    def on_start(_t0: float) -> None:
        nonlocal timer
        if case == "during":
            timer = threading.Timer(p.hot_at, hot_now)
            timer.start()

    watch_leaf = next(lf for lf in topo.names("leaf") if lf != p.hot_leaf)
    sport_base = 20000 + (run * len(CASES) + ci) * 400
    c0 = tcp_counters(list(hns.values()))
    cpu0 = cpu_times()
    pt0 = time.process_time()
    sampler.start()
    try:
        with WeightWatch(fab, watch_leaf, hot_pfx, gw_names, 0.5) as ww:
            res = all_to_all(
                hns,
                addrs,
                nbytes=p.pair_bytes,
                flows=p.flows,
                port=DATA_PORT + ci,
                sport_base=sport_base,
                cc=p.cc,
                tos=DATA_TOS,
                timeout=max(
                    120.0,
                    6 * model.Bound(p.spines, p.leaves, p.rate, p.hot_mbps, p.pair_bytes).t_ecmp,
                ),
                on_start=on_start,
            )
    finally:
        samples = sampler.stop()
        if timer is not None:
            timer.cancel()
            timer.join()
        bg.close()
        if key == "optimum":
            set_optimum(fab, p, False)
    cpu1 = cpu_times()
    ex_cpu = time.process_time() - pt0
    c1 = tcp_counters(list(hns.values()))
    ex = Exchange(key, case, run, res.ok, res.completion_s, res.error)
    conn = [f.t_connected - res.t0 for f in res.flows if f.t_connected]
    ex.connect_s = round(max(conn), 3) if conn else float("nan")
    ex.per_dst_s = {h: round(v, 3) for h, v in res.per_dst().items()}
    ex.retrans = c1["retrans"] - c0["retrans"]
    ex.reorder = c1["reorder"] - c0["reorder"]
    ex.rto = c1["rto"] - c0["rto"]
    ex.cpu_idle_pct = idle_pct(cpu0, cpu1)
    ex.bench_cpu_pct = 100.0 * ex_cpu / max(res.completion_s, 1e-3)
    ex.loadavg = loadavg()
    ex.weights = ww.rows
    down = [(s, fab.ifname(s, lf)) for s in topo.names("spine") for lf in topo.names("leaf")]
    util = model.utilisation(samples, res.t0, res.t0 + res.completion_s, p.rate)
    ex.util = {f"{n}>{i}": round(u, 3) for (n, i), u in util.items()}
    dvals = [util[k] for k in down if k in util]
    if dvals:
        ex.spread_pp = 100.0 * (max(dvals) - min(dvals))
    for s in topo.names("spine"):
        k = (s, fab.ifname(s, p.hot_leaf))
        ex.hot_series[f"{s}>{p.hot_leaf}"] = [
            round(v, 3) for v in model.series(samples, k, res.t0, 0.5, p.rate)
        ]
    # let queues drain and adaptive weights relax before the next exchange
    time.sleep(1.0)
    if case != "none" and not cp.wait_equal(20.0):
        log(f"{key}: weights toward {hot_pfx} still unequal 20 s after the hotspot ended")
    return ex


# ------------------------------------------------------------------------------ report


def report(p: Params, results: list[Exchange], meta: dict[str, Any]) -> str:
    b = model.Bound(p.spines, p.leaves, p.rate, p.hot_mbps, p.pair_bytes)
    lines = [
        f"# Fabric benchmark {meta['date']}",
        "",
        f"command: `{meta['command']}`",
        f"machine: {meta['machine']}; load average at start {meta['load_start']}, "
        f"at end {meta['load_end']}; CPU idle during the exchanges (machine-wide, median) "
        f"{meta['cpu_idle_median']:.0f} % (min {meta['cpu_idle_min']:.0f} %)",
        f"fabric: {p.spines} spines x {p.leaves} leaves, every link tbf {p.rate:g} Mbit/s "
        f"(burst {p.burst}, latency {p.latency}); all-to-all {p.mbytes:g} MB per ordered host "
        f"pair over {p.flows} TCP {p.cc} flows ({p.leaves * (p.leaves - 1) * p.flows} flows); "
        f"hotspot: {p.hot_mbps:g} Mbit/s UDP {p.hot_spine}->{p.hot_leaf} "
        f"(before: {p.settle:g} s ahead; during: from t={p.hot_at:g} s); runs: {p.runs}",
        "",
        "Fluid-model bound (what the topology allows, before any measurement):",
        f"  no hotspot, every contender  : {b.t_nohot:.2f} s",
        f"  hotspot, ECMP                : {b.t_ecmp:.2f} s "
        f"(1/{p.spines} of {p.hot_leaf}'s traffic through {p.rate - p.hot_mbps:g} Mbit/s)",
        f"  hotspot, optimum             : {b.t_opt:.2f} s "
        f"({p.hot_leaf} receives over {p.spines * p.rate - p.hot_mbps:g} Mbit/s)",
        f"  => best possible speed-up over ECMP: {b.gain:.2f}x; a 2x speed-up needs a background "
        f"share >= {b.min_hot_for_2x:.2f} of the link with {p.spines} spines "
        f"(here {p.hot:.2f})",
        "",
    ]
    by: dict[tuple[str, str], list[Exchange]] = {}
    for ex in results:
        by.setdefault((ex.case, ex.contender), []).append(ex)
    keys = [c for c in CONTENDERS + EXTRA_CONTENDERS if any(ex.contender == c for ex in results)]
    for case in p.cases:
        rows = {k: by.get((case, k), []) for k in keys}
        med = {k: model.summarize([e.completion_s for e in v if e.ok]) for k, v in rows.items()}
        ecmp = med.get("ecmp")
        opt = med.get("optimum")
        title = {
            "none": "no hotspot",
            "before": "hotspot before the exchange",
            "during": f"hotspot from t={p.hot_at:g} s",
        }[case]
        lines += [
            f"## {title}",
            "",
            "| contender | completion s, median [min-max] | speed-up vs ECMP | vs optimum "
            "| util spread pp | retrans | reorder | CPU idle % | ok |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for k in keys:
            s = med[k]
            vs_e = f"{ecmp.median / s.median:.2f}x" if ecmp and ecmp.n and s.n else "-"
            vs_o = f"{s.median / opt.median:.2f}" if opt and opt.n and s.n else "-"
            sp = model.summarize([e.spread_pp for e in rows[k]])
            rt = model.summarize([float(e.retrans) for e in rows[k]])
            ro = model.summarize([float(e.reorder) for e in rows[k]])
            okn = sum(1 for e in rows[k] if e.ok)
            # the machine's idle CPU during the exchange: the routers' control planes and the
            # bench's traffic share it (ECMP's row is what the traffic alone leaves)
            idle = model.summarize([e.cpu_idle_pct for e in rows[k]])
            lines.append(
                f"| {LABELS[k]} | {s.fmt()} | {vs_e} | {vs_o} | {sp.median:.0f} "
                f"| {rt.median:.0f} | {ro.median:.0f} | {idle.median:.0f} | {okn}/{len(rows[k])} |"
            )
        lines.append("")
    lines += targets(p, by, keys)
    lines += [
        "",
        "Utilisation of the downlinks into the hot leaf, 0.5 s bins, first run, "
        "hotspot before (' ' idle ... '@' saturated; includes the background):",
        "",
    ]
    for k in keys:
        exs = by.get(("before", k)) or by.get(("during", k)) or []
        if not exs:
            continue
        lines.append(f"  {LABELS[k]} ({exs[0].case}, {exs[0].completion_s:.1f} s):")
        for link, ser in exs[0].hot_series.items():
            lines.append(f"    {link:<14} |{model.spark(ser)}|")
    lines += [
        "",
        f"Weights on the watch leaf toward {p.hot_leaf}'s prefix mid-exchange "
        "(first run, hotspot before):",
        "",
    ]
    for k in keys:
        exs = by.get(("before", k)) or []
        if exs and exs[0].weights:
            mid = exs[0].weights[len(exs[0].weights) // 2][1]
            lines.append(f"  {LABELS[k]:<26} " + " ".join(f"{n}={w}" for n, w in mid.items()))
    return "\n".join(lines)


def targets(p: Params, by: dict[tuple[str, str], list[Exchange]], keys: list[str]) -> list[str]:
    def med(case: str, k: str) -> float | None:
        s = model.summarize([e.completion_s for e in by.get((case, k), []) if e.ok])
        return s.median if s.n else None

    out = ["## Targets", ""]
    same = [m for k in ("ecmp", "frr", "optimum") if (m := med("none", k)) is not None]
    if len(same) >= 2:
        mid = (max(same) + min(same)) / 2
        out += [
            f"- noise floor: without a hotspot ECMP, FRR and the optimum forward identically "
            f"(equal weights, same hash); their medians span {min(same):.2f}-{max(same):.2f} s "
            f"(+-{100 * (max(same) - mid) / mid:.0f} %), so differences below that are not "
            "resolved by this run",
        ]

    def per_run(case: str, num: str, den: str) -> model.Summary:
        """Per-run ratio time(num)/time(den); the same run index means the same 5-tuples."""
        a = {e.run: e.completion_s for e in by.get((case, num), []) if e.ok}
        b = {e.run: e.completion_s for e in by.get((case, den), []) if e.ok}
        return model.summarize([a[r] / b[r] for r in a if r in b])

    for k in ("glb-ht", "glb-res", "glb-flowlet", *EXTRA_CONTENDERS):
        if k not in keys:
            continue
        for case in ("before", "during"):
            sp, vo = per_run(case, "ecmp", k), per_run(case, k, "optimum")
            if sp.n and vo.n:
                out.append(
                    f"- {LABELS[k]}, hotspot {case}, run by run (same 5-tuples): speed-up vs "
                    f"ECMP {sp.fmt()}, time / optimum's {vo.fmt()}"
                )
        t_none, e_none = med("none", k), med("none", "ecmp")
        if t_none and e_none:
            ok = t_none <= 1.05 * e_none
            out.append(
                f"- {LABELS[k]}, no hotspot: {t_none / e_none:.3f} x ECMP's time "
                f"(target <= 1.05): {'met' if ok else 'NOT met'}"
            )
        for case in ("before", "during"):
            t = med(case, k)
            if t is None:
                continue
            for base in ("ecmp", "frr"):
                tb = med(case, base)
                if tb:
                    out.append(
                        f"- {LABELS[k]}, hotspot {case}: {tb / t:.2f}x faster than {LABELS[base]} "
                        f"(target >= 2): {'met' if tb / t >= 2 else 'NOT met'}"
                    )
            to = med(case, "optimum")
            if to:
                out.append(
                    f"- {LABELS[k]}, hotspot {case}: {t / to:.2f} x the optimum's time "
                    f"(target <= 1.15): {'met' if t / to <= 1.15 else 'NOT met'}"
                )
        if k in FLOWLET:
            out += _flowlet_targets(p, by, k, med)
    return out


def _flowlet_targets(
    p: Params,
    by: dict[tuple[str, str], list[Exchange]],
    k: str,
    med: Callable[[str, str], float | None],
) -> list[str]:
    """The flowlet contenders' own targets: within 1.25x of the fluid bound in every case
    (the hotspot-during bound taken as the hotspot-before one: the background starts 0.5 s
    in, so it is slightly above the true one), not slower than ECMP without a hotspot, and
    no more reorder events per exchange than resilient groups (5)."""
    b = model.Bound(p.spines, p.leaves, p.rate, p.hot_mbps, p.pair_bytes)
    out: list[str] = []
    for case, bound in (("none", b.t_nohot), ("before", b.t_opt), ("during", b.t_opt)):
        t = med(case, k)
        if t is None:
            continue
        out.append(
            f"- {LABELS[k]}, {case}: {t / bound:.2f} x the fluid bound {bound:.2f} s "
            f"(target <= 1.25): {'met' if t / bound <= 1.25 else 'NOT met'}"
        )
        ro = model.summarize([float(e.reorder) for e in by.get((case, k), [])])
        if ro.n:
            out.append(
                f"- {LABELS[k]}, {case}: {ro.median:.0f} reorder events per exchange, median "
                f"(target <= 5): {'met' if ro.median <= 5 else 'NOT met'}"
            )
    t, e = med("none", k), med("none", "ecmp")
    if t and e:
        out.append(
            f"- {LABELS[k]}, no hotspot: {t / e:.3f} x ECMP's time (target <= 1, not slower): "
            f"{'met' if t <= e else 'NOT met'}"
        )
    return out


# ------------------------------------------------------------------------------ main


def parse(argv: Sequence[str] | None) -> tuple[Params, list[str], argparse.Namespace]:
    ap = argparse.ArgumentParser(
        prog="python -m bench.fabric", description=(__doc__ or "").split("\n\n")[0]
    )
    d = Params()
    ap.add_argument("--runs", type=int, default=d.runs)
    ap.add_argument("--rate", type=float, default=d.rate, help="fabric link rate, Mbit/s")
    ap.add_argument("--hot", type=float, default=d.hot, help="background share of the hot link")
    ap.add_argument("--mbytes", type=float, default=d.mbytes, help="MB per ordered host pair")
    ap.add_argument("--flows", type=int, default=d.flows, help="TCP flows per ordered host pair")
    ap.add_argument(
        "--hash-policy", type=int, choices=(1, 3), default=d.hash_policy,
        help="leaves' fib_multipath_hash_policy: 3 = 5-tuple from the headers (default), "
        "1 = L4 but short-circuited to the sender's socket hash on veths",
    )  # fmt: skip
    ap.add_argument("--cc", default=d.cc, help="TCP congestion control in the hosts")
    ap.add_argument("--settle", type=float, default=d.settle)
    ap.add_argument("--hot-at", type=float, default=d.hot_at)
    ap.add_argument("--cases", default=",".join(d.cases))
    ap.add_argument(
        "--only", default=",".join(CONTENDERS),
        help=f"contenders, comma-separated (also: {', '.join(EXTRA_CONTENDERS)})",
    )  # fmt: skip
    ap.add_argument(
        "--no-residual", action="store_true",
        help="glbd's helpers report the configured capacity, not the residual (no foreign_classes)",
    )  # fmt: skip
    ap.add_argument(
        "--no-memory", action="store_true",
        help="the leaves' weights without memory (path_quality.weight_memory = false)",
    )  # fmt: skip
    ap.add_argument(
        "--flowlet-timeout-ms", type=float, default=d.flowlet_timeout_ms,
        help='fixed flowlet timeout of the flowlet contenders (default: glbd\'s "auto")',
    )  # fmt: skip
    ap.add_argument("--out", default="", help="JSON results file (default: in /tmp)")
    ap.add_argument("--keep", action="store_true", help="keep the run directory (glbd logs)")
    ap.add_argument("--report", default="", help="only print the report of a saved JSON file")
    ap.add_argument("--plot", default="", metavar="DIR", help="also draw the results into DIR")
    a = ap.parse_args(argv)
    cases = tuple(c for c in a.cases.split(",") if c)
    only = [c for c in a.only.split(",") if c]
    for c in cases:
        if c not in CASES:
            ap.error(f"unknown case {c!r}")
    for c in only:
        if c not in CONTENDERS + EXTRA_CONTENDERS:
            ap.error(f"unknown contender {c!r}")
    p = Params(
        rate=a.rate, hot=a.hot, mbytes=a.mbytes, flows=a.flows, runs=a.runs, cases=cases,
        settle=a.settle, hot_at=a.hot_at, cc=a.cc, hash_policy=a.hash_policy,
        residual=not a.no_residual, memory=not a.no_memory,
        flowlet_timeout_ms=a.flowlet_timeout_ms,
    )  # fmt: skip
    return p, only, a


def load(path: str) -> tuple[Params, list[Exchange], dict[str, Any]]:
    """Params, results and meta of a JSON file written by a run."""
    d = json.loads(Path(path).read_text())
    prm = dict(d["params"])
    prm["cases"] = tuple(prm["cases"])
    prm.setdefault("residual", False)  # files from before the option
    prm.setdefault("memory", True)
    prm.setdefault("flowlet_timeout_ms", 0.0)
    rows = []
    for r in d["results"]:
        r["weights"] = [(t, w) for t, w in r.get("weights", [])]
        rows.append(Exchange(**r))
    return Params(**prm), rows, d["meta"]


def _plot(out_dir: str, results: Path) -> None:
    """With ``--plot DIR``: completion times per contender and case (bench/plots.py)."""
    if out_dir:
        from bench.plots import plot_fabric

        print(f"plot: {plot_fabric(results, Path(out_dir) / 'fabric-completion.png')}")


def main(argv: Sequence[str] | None = None) -> int:
    p, only, a = parse(argv)
    if a.report:
        rp, rows, saved = load(a.report)
        print(report(rp, rows, saved))
        _plot(a.plot, Path(a.report))
        return 0
    run_dir = Path(tempfile.mkdtemp(prefix="glbd-fabric-"))
    out_path = Path(a.out) if a.out else run_dir.with_suffix(".json")
    with open("/proc/cpuinfo") as f:
        model_name = next((ln.split(":", 1)[1].strip() for ln in f if "model name" in ln), "?")
    meta: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join(
            ["python -m bench.fabric", *(argv if argv is not None else sys.argv[1:])]
        ),
        "machine": f"{model_name}, {os.cpu_count()} CPUs, "
        f"kernel {Path('/proc/sys/kernel/osrelease').read_text().strip()}",
        "load_start": loadavg(),
    }
    log(
        f"fabric benchmark: contenders {','.join(only)}, cases {','.join(p.cases)}, "
        f"{p.runs} runs; load {meta['load_start']}; run dir {run_dir}"
    )
    results: list[Exchange] = []
    failed: list[str] = []
    t_all = time.monotonic()
    try:
        for key in only:
            try:
                results += run_contender(key, p, run_dir)
            except LabError as e:  # one contender's failure does not cost the others
                log(f"{key}: error: {e}")
                failed.append(key)
    finally:
        meta["load_end"] = loadavg()
        meta["duration_s"] = round(time.monotonic() - t_all, 1)
        idles = [e.cpu_idle_pct for e in results if e.cpu_idle_pct == e.cpu_idle_pct]
        meta["cpu_idle_median"] = model.summarize(idles).median if idles else float("nan")
        meta["cpu_idle_min"] = min(idles) if idles else float("nan")
        out_path.write_text(
            json.dumps(
                {"meta": meta, "params": p.__dict__, "results": [e.__dict__ for e in results]},
                indent=1,
                default=str,
            )
        )
        if not a.keep:
            shutil.rmtree(run_dir, ignore_errors=True)
    text = report(p, results, meta)
    print("\n" + text + f"\n\n(total {meta['duration_s']:.0f} s; raw results: {out_path})")
    _plot(a.plot, out_path)
    if failed:
        print(f"contenders that could not run: {', '.join(failed)}")
    if not results:
        return 1
    return 0 if all(e.ok for e in results) and not failed else 2


if __name__ == "__main__":
    sys.exit(main())
