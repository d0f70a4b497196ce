"""Fabric benchmark: glbd as shipped against ECMP and FRR's static NNHN weights on a 4 x 4
leaf-spine fabric in namespaces, under a downstream hotspot and a spine failure, in two traffic
profiles, against the topology's fluid bound.

Run as root from the repository root (creates and deletes its own namespaces)::

    .venv/bin/python -m bench.fabric                     # 5 runs, both profiles, ~12-20 min
    .venv/bin/python -m bench.fabric --runs 1            # quick look
    .venv/bin/python -m bench.fabric --profiles shallow --cases before --only glb,ecmp

Topology: 4 spines x 4 leaves, one host behind each leaf; every fabric link tbf-shaped (both
directions) to ``--rate`` Mbit/s over three strict-priority classes (control, best effort, the
exchange). Leaves hash the 5-tuple from the headers (``fib_multipath_hash_policy=3``), as a
switch does, with a fixed seed per leaf.

Workload: all-to-all -- every host sends ``--mbytes`` MB to every other host over ``--flows``
TCP flows per ordered pair, each flow a fixed share (in-process, bench/fabric/traffic.py).
Figure: the time until the last byte of the last flow arrived. Source ports are fixed per
(run, case), so every contender gets the same 5-tuples.

Traffic profiles (both reported):

* ``deep``: deep buffers, 100 ms pfifo per class at the link rate, TCP cubic in the hosts;
* ``shallow``: what an AI backend fabric looks like: queues of 8 ms at the link rate that mark
  ECN early, as such fabrics do (probability 0 at 55 % of the queue to 1 at 90 %, on the
  instantaneous queue). This kernel has no RED qdisc, so a tc BPF program of the bench's keeps
  each link's queue and marks (bench/fabric/ecn.py); the hosts negotiate ECN and run cubic,
  which halves on an echoed mark (no DCTCP in this kernel, BBR ignores ECN). Opt-in
  ``shallow-bbr``: the same queues drop-tail with BBR in the hosts (the profile up to run K).

Cases: ``none`` (no hotspot), ``before`` (UDP background of ``--hot`` x rate from spine1 into
its link to leaf2, from ``--settle`` s before the exchange), ``during`` (the same from
``--hot-at`` s into the exchange), ``fail`` (spine3's fabric ports go down ``--fail-at`` s into
the exchange; the share of running flows that changed spine is reported, bench/fabric/failcase.py).

Contenders, interleaved within each run (each on its own fabric, all built before the first
exchange; the order rotates from run to run):

1. ``glb``: glbd exactly as shipped. Its config says only what the topology requires: the
   neighbours, the leaf's prefix, the fabric links' capacity, the control socket path;
2. ``ecmp``: static equal-weight multipath routes on the leaves (what any BGP ECMP installs);
3. ``frr``: FRR 10.x on every node, eBGP, NNHN (``send-nexthop-characteristics`` spine->leaf)
   and ``bgp bestpath bandwidth ignore`` (static next-next-hop-count weights).

Opt-in (``--only``): ``glb-fl`` (``[flowlet] enabled = true`` said on the leaves: as shipped),
``glb-fl-always`` (the same with ``move = "always"``: every flowlet gap moves its flow),
``glb-fl-random`` (``placement = "random"``), ``glb-fl-nomig`` (busy buckets never move at
once), ``glb-place`` (the program places new flows only: ``move = "never"``), ``glb-nofl``
(flowlets off on the leaves: the default before), ``glb-htg`` (hash-threshold groups, whose
hash regions stay contiguous per member, so spread placement is exact);
``glb-ns``/``glb-fl-ns`` (as shipped, without/with flowlets, the band from the non-steerable
class alone: ``link_quality.band_from = "foreign"`` with the background's class named);
not glbd's defaults: ``glb-res``/``glb-ht``/``glb-flowlet``/``dlb`` (the
lab's timers, and helpers told the background's traffic class), ``optimum`` (static weights
from the known residual capacities), ``placed`` (no hash: each flow pinned to a spine by an
ip rule, evenly per destination, by the residual capacities for the hot leaf), and the
diagnostics in EXTRA_CONTENDERS.

CPU: the hosts' traffic never competes with the routers' control planes for a core
(bench/fabric/isolate.py): every router process on CPU 0, the traffic and every veth's receive
work (RPS) on the others. The report gives each contender's control-plane CPU per router next
to its results, and the share of packets the router CPU received (0 when isolation holds).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from glbdlab.netns import LabError, list_lab_namespaces
from glbdlab.nodes import GlbdNode, GlbdOptions, kernel_group_for, start_glbd, stop_all
from glbdlab.topology import Fabric, Topology, leaf_spine

from bench.fabric import ecn, failcase, isolate, model
from bench.fabric.traffic import (
    LinkSampler,
    UdpBlaster,
    all_to_all,
    loadavg,
    tcp_counters,
)

#: the default run: glbd as shipped first, then the baselines
CONTENDERS = ("glb", "ecmp", "frr")


@dataclass(frozen=True)
class Shipped:
    """glbd as shipped, changed only by what these fields say (nothing: ``glb`` itself)."""

    label: str
    #: the leaves' [flowlet] keys (flowlets are on by default on a load balancer;
    #: ``--flowlet-timeout-ms`` adds ``timeout_us`` to every contender that runs them)
    flowlet: Mapping[str, str] = field(default_factory=dict)
    #: extra TOML per role
    extra: Mapping[str, str] = field(default_factory=dict)
    #: [link_quality] keys
    link_quality: Mapping[str, str] = field(default_factory=dict)
    #: helpers told the background's class, and the band taken from it
    band_from_foreign: bool = False


_FL_ON = {"enabled": "true"}
_NOMIG = {"leaf": "[fib]\nresilient_migrate_share = 0"}
#: glbd as shipped, and variants of it
SHIPPED: dict[str, Shipped] = {
    "glb": Shipped("glbd as shipped"),
    "glb-nomig": Shipped(
        "glbd as shipped, busy buckets wait (the default before migrate_share)", extra=_NOMIG
    ),
    "glb-cap": Shipped(
        "glbd as shipped, leaves weigh by residual capacity only (a flat weight table)",
        extra={"leaf": "[path_quality]\nweight_table = [27, 27, 27, 27, 27, 27, 27, 27]"},
    ),
    "glb-all": Shipped(
        "glbd as shipped, band from all traffic (the default before the ingress counter)",
        link_quality={"foreign_from": '"none"'},
    ),
    "glb-fl": Shipped("glbd as shipped + flowlets on (said explicitly)", flowlet=_FL_ON),
    "glb-fl-always": Shipped(
        "glbd as shipped + flowlets on, every gap moves", flowlet=_FL_ON | {"move": '"always"'}
    ),
    "glb-fl-random": Shipped(
        "glbd as shipped + flowlets on, new flowlets hashed at random",
        flowlet=_FL_ON | {"placement": '"random"'},
    ),
    "glb-fl-nomig": Shipped(
        "glbd as shipped + flowlets on, busy buckets wait", flowlet=_FL_ON, extra=_NOMIG
    ),
    "glb-nofl": Shipped(
        "glbd as shipped, flowlets off (the default before)", flowlet={"enabled": "false"}
    ),
    "glb-place": Shipped(
        "glbd as shipped + flowlet program placing new flows only (no gap moves)",
        flowlet=_FL_ON | {"move": '"never"'},
    ),
    "glb-htg": Shipped(
        "glbd as shipped, hash-threshold groups",
        extra={"leaf": '[fib]\ngroup_type = "hash-threshold"'},
    ),
    "glb-ns": Shipped("glbd as shipped, band from the non-steerable class", band_from_foreign=True),
    "glb-fl-ns": Shipped(
        "glbd as shipped + flowlets, band from the non-steerable class",
        flowlet=_FL_ON,
        band_from_foreign=True,
    ),
}
#: opt-in contenders (``--only``): tuned glbd variants, the oracle, diagnostics
EXTRA_CONTENDERS = (
    *list(SHIPPED)[1:],
    "glb-res",
    "glb-ht",
    "glb-flowlet",
    "dlb",
    "optimum",
    "glb-res-fast",
    "ecmp-res",
    "glb-res-frozen",
    "glb-flowlet-ht",
    "placed",
)
#: contenders whose leaves run glbd's flowlet program
FLOWLET = ("glb-flowlet", "glb-flowlet-ht")
#: contenders with static routes (re-installed after the spine failure)
STATIC = ("ecmp", "optimum", "ecmp-res", "placed")
LABELS = {
    **{k: v.label for k, v in SHIPPED.items()},
    "ecmp": "ECMP (static, equal)",
    "frr": "FRR 10 NNHN + bw ignore",
    "dlb": "glbd DLB-only (tuned)",
    "glb-ht": "glbd hash-threshold (tuned)",
    "glb-res": "glbd resilient (tuned)",
    "optimum": "offline optimum",
    "glb-res-fast": "glbd resilient, 0.2 s timers",
    "ecmp-res": "ECMP, static resilient groups",
    "glb-res-frozen": "glbd resilient, weights frozen",
    "glb-flowlet": "glbd + flowlets (tuned)",
    "glb-flowlet-ht": "glbd ht + flowlets (tuned)",
    "placed": "flows placed evenly by the bench (oracle, no hash)",
}
#: [fib] settings of the diagnostic contenders (written into the generated glbd.toml)
FIB_OVERRIDES = {
    "glb-res-fast": {"resilient_idle_timer_s": "0.2", "resilient_unbalanced_timer_s": "0.2"},
}
CASES = ("none", "before", "during", "fail")
BG_PORT = 5399
#: the exchange's TCP sockets use TOS 0x08 (IPTOS_THROUGHPUT): routers put it in the lowest
#: strict-priority class of every fabric link (10:3), below the background (best effort,
#: class 10:2) and the control traffic (class 10:1). So the background is *steady*: TCP cannot
#: push it out of the tail of a shared queue, and the hot link's residual capacity is known
#: (rate - background).
DATA_TOS = 0x08
#: the class the tuned contenders' helpers count as not steerable
#: (``link_quality.foreign_classes``): the background's. glbd ships ``[]``; ``glb`` sets nothing.
FOREIGN_CLASSES = ("10:2",)
DATA_PORT = 5201


@dataclass(frozen=True)
class Profile:
    name: str
    latency: str  # queue of each class (and the tbf's), in time at the link rate
    cc: str  # the hosts' TCP congestion control
    flows: int  # TCP flows per ordered host pair
    note: str
    #: ECN: every fabric link end marks CE as a WRED/ECN profile would (bench/fabric/ecn.py)
    #: and the hosts negotiate ECN
    ecn: bool = False


PROFILES = {
    "deep": Profile(
        "deep",
        "100ms",
        "cubic",
        16,
        "deep buffers: 100 ms pfifo queues, TCP cubic, 16 flows per host pair",
    ),
    # few flows per pair, as RDMA queue pairs are: 192 flows over 7-packet queues at 10 Mbit/s
    # are past any TCP's minimum window and measure only losses
    "shallow": Profile(
        "shallow",
        "8ms",
        "cubic",
        4,
        "AI-backend-like: 8 ms queues (7 packets at the link rate) marking ECN from 55 % to "
        "90 % of the queue (a tc BPF marker of the bench's: this kernel has no RED qdisc), TCP "
        "cubic with ECN in the hosts (this kernel has no DCTCP; BBR ignores ECN), 4 flows per "
        "host pair",
        ecn=True,
    ),
    # the shallow profile up to run K (opt-in): drop-tail, no congestion signal but loss
    "shallow-bbr": Profile(
        "shallow-bbr",
        "8ms",
        "bbr",
        4,
        "8 ms drop-tail queues (7 packets at the link rate), TCP BBR in the hosts, 4 flows per "
        "host pair: no ECN (the shallow profile up to run K)",
    ),
}


@dataclass
class Params:
    spines: int = 4
    leaves: int = 4
    rate: float = 10.0  # Mbit/s, every fabric link
    hot: float = 0.75  # background share of the hot link
    hot_spine: str = "spine1"
    hot_leaf: str = "leaf2"
    fail_spine: str = "spine3"
    mbytes: float = 2.0  # per ordered host pair
    flows: int = 16  # per ordered host pair (set per profile)
    flows_override: int = 0  # --flows: every profile's flows per pair (0: the profile's)
    runs: int = 5
    cases: tuple[str, ...] = CASES
    profiles: tuple[str, ...] = ("deep", "shallow")
    profile: str = "deep"  # the profile being run (set per profile by main)
    settle: float = 2.0
    hot_at: float = 0.5
    fail_at: float = 0.5
    #: flows are recorded this long before and after the failure
    fail_window: float = 0.3
    sample: float = 0.25
    burst: str = "64kbit"
    latency: str = "100ms"
    hash_policy: int = 3  # leaves' fib_multipath_hash_policy (3 = 5-tuple from the headers)
    cc: str = "cubic"  # TCP congestion control in the hosts (the machine's default may be bbr)
    #: the tuned contenders' helpers report residual capacity (``foreign_classes``)
    residual: bool = True
    #: the tuned leaves' path table keeps weights with memory (``path_quality.weight_memory``)
    memory: bool = True
    #: flowlet timeout of the flowlet contenders, ms; 0 = glbd's default ("auto")
    flowlet_timeout_ms: float = 0.0
    #: every veth's receive work steered to the traffic CPUs (``isolate.steer_receive``)
    rps: bool = True
    ecn: bool = False  # set per profile

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

    def bound(self) -> model.Bound:
        return model.Bound(self.spines, self.leaves, self.rate, self.hot_mbps, self.pair_bytes)

    def for_profile(self, name: str) -> Params:
        pr = PROFILES[name]
        flows = self.flows_override or pr.flows
        return dataclasses.replace(
            self, profile=name, latency=pr.latency, cc=pr.cc, flows=flows, ecn=pr.ecn
        )


@dataclass
class Exchange:
    contender: str
    case: str
    run: int
    ok: bool
    completion_s: float
    error: str = ""
    profile: str = "deep"
    #: the fluid bound of this exchange, from when its background started or its spine failed
    bound_s: float = float("nan")
    t_event: float | None = None  # s after the start: the background started / the spine failed
    per_dst_s: dict[str, float] = field(default_factory=dict)
    util: dict[str, float] = field(default_factory=dict)
    spread_pp: float = float("nan")
    retrans: int = 0
    reorder: int = 0
    rto: int = 0
    ce: int = 0  # packets the hosts received marked CE
    cpu_idle_pct: float = float("nan")  # the traffic CPUs' idle share
    router_cpu_idle_pct: float = float("nan")  # the router CPUs' idle share
    #: share (%) of the machine's received packets that the router CPUs processed
    router_rx_pct: float = float("nan")
    #: every process in the contender's router namespaces, % of one core per router
    cp_cpu_pct: float = float("nan")
    bench_cpu_pct: float = float("nan")  # this process (flows, sampler) in % of one core
    connect_s: float = float("nan")  # until every flow's handshake completed
    loadavg: str = ""
    #: fail case: running flows (seen before and after), those that changed spine, and those
    #: that were on the failed spine
    fail_running: int = 0
    fail_changed: int = 0
    fail_on_failed: int = 0
    weights: list[tuple[float, dict[str, int]]] = field(default_factory=list)
    hot_series: dict[str, list[float]] = field(default_factory=dict)
    #: glbd's flowlet program over the exchange, summed over the leaves: flowlets, moved,
    #: kept gaps, move-gate openings (empty without flowlets)
    flowlet: dict[str, int] = field(default_factory=dict)

    @property
    def changed_share(self) -> float:
        return self.fail_changed / self.fail_running if self.fail_running else float("nan")


def fib_migrations(node: GlbdNode) -> int:
    """How often the glbd moved busy resilient buckets at once (``fib.resilient_migrate_share``):
    ``glbctl counters``, which reads the FIB's counters without walking its routes."""
    try:
        snap = node.request("counters", timeout=2.0)
    except Exception:  # busy: not counted
        return 0
    fib = snap.get("fib") if isinstance(snap, dict) else None
    return int((fib or {}).get("migrations", 0))


def flowlet_totals(nodes: dict[str, GlbdNode]) -> dict[str, int]:
    """The flowlet counters of every glbd that runs the program and the busy-bucket
    migrations of every glbd, summed."""
    out: dict[str, int] = {}
    for node in nodes.values():
        out["migrations"] = out.get("migrations", 0) + fib_migrations(node)
        try:
            snap = node.request("flowlet", timeout=2.0)
        except Exception:  # a glbd without the part or busy: its counters are not in the sum
            continue
        if not isinstance(snap, dict) or not snap.get("counters"):
            continue
        c = snap["counters"]
        gate = snap.get("move_gate") or {}
        for k, v in (
            ("flowlets", c.get("flowlets", 0)),
            ("moved", c.get("moved", 0)),
            ("kept", c.get("kept", 0)),
            ("gate_opened", gate.get("opened", 0)),
        ):
            out[k] = out.get(k, 0) + int(v)
    return out


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


#: routing table of the ``placed`` contender's leaves that sends every prefix over spine i
PLACED_TABLE = 100
#: rule priorities of the ``placed`` contender: the placement at the start of an exchange,
#: and the one that replaces it for the hot prefix when the hotspot starts mid-exchange
PLACED_PRIO, PLACED_HOT_PRIO = 1000, 500


def install_spine_tables(fab: Fabric) -> None:
    """On each leaf, table PLACED_TABLE + i: every other leaf's prefix via spine i only."""
    topo = fab.topo
    for leaf in topo.names("leaf"):
        cmds = [
            f"route replace {topo.node(other).prefix4} via {fab.addr(s, leaf)} "
            f"dev {fab.ifname(leaf, s)} table {PLACED_TABLE + i}"
            for i, s in enumerate(topo.names("spine"))
            for other in topo.names("leaf")
            if other != leaf
        ]
        fab.ns(leaf).ip_batch(cmds)


def spread(n: int, weights: Sequence[float]) -> list[int]:
    """``n`` flows over members with ``weights``: the member of each flow, as evenly as the
    weights allow (smooth weighted round robin)."""
    total = sum(weights)
    credit = [0.0] * len(weights)
    out = []
    for _ in range(n):
        for i, w in enumerate(weights):
            credit[i] += w
        best = max(range(len(weights)), key=lambda i: credit[i])
        credit[best] -= total
        out.append(best)
    return out


def place_flows(fab: Fabric, p: Params, sport_base: int, hot: bool, prio: int) -> None:
    """The ``placed`` oracle: each host's flows to each destination spread evenly over the
    spines by one ip rule per flow (its source port), the hot leaf's by the residual
    capacities when ``hot``. Flows are numbered as ``all_to_all`` numbers them."""
    topo = fab.topo
    hosts = topo.names("host")
    spines = topo.names("spine")
    resid = [p.rate - (p.hot_mbps if s == p.hot_spine else 0.0) for s in spines]
    cmds: dict[str, list[str]] = {}
    sport = sport_base
    for a in hosts:
        leaf = f"leaf{topo.node(a).index}"
        for b in hosts:
            if a == b:
                continue
            to_hot = f"leaf{topo.node(b).index}" == p.hot_leaf
            members = spread(p.flows, resid if hot and to_hot else [1.0] * len(spines))
            for m in members:
                if prio == PLACED_PRIO or to_hot:
                    cmds.setdefault(leaf, []).append(
                        f"rule add priority {prio + sport - sport_base} iif "
                        f"{fab.ifname(leaf, a)} ipproto tcp sport {sport} "
                        f"table {PLACED_TABLE + m}"
                    )
                sport += 1
    for leaf, lines in cmds.items():
        fab.ns(leaf).ip_batch(lines)


def unplace_flows(fab: Fabric, p: Params) -> None:
    """Delete every rule :func:`place_flows` may have added."""
    n = p.flows * len(fab.topo.names("host")) ** 2
    dels = [f"rule del priority {base + i}" for base in (PLACED_PRIO, PLACED_HOT_PRIO)
            for i in range(n)]  # fmt: skip
    for leaf in fab.topo.names("leaf"):
        fab.ns(leaf).run(["ip", "-force", "-batch", "-"], input="\n".join(dels) + "\n",
                         check=False)  # fmt: skip


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


def shipped_flowlet(key: str, p: Params) -> dict[str, str]:
    """The leaves' [flowlet] keys of shipped contender ``key``, with ``--flowlet-timeout-ms``
    on every one that runs the program."""
    out = dict(SHIPPED[key].flowlet)
    if p.flowlet_timeout_s is not None and out.get("enabled") != "false":
        out["timeout_us"] = str(round(p.flowlet_timeout_s * 1e6))
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
        if self.key in ("ecmp", "optimum", "placed"):
            install_static(fab)
            if self.key == "placed":
                install_spine_tables(fab)
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
        elif self.key in SHIPPED:
            v = SHIPPED[self.key]
            opts = GlbdOptions(
                capacity_mbps=self.p.rate,
                defaults_only=True,
                extra=v.extra,
                flowlet=shipped_flowlet(self.key, self.p),
                foreign_classes=FOREIGN_CLASSES if v.band_from_foreign else (),
                band_from_foreign=v.band_from_foreign,
                link_quality=v.link_quality,
            )
            self.glbd = start_glbd(fab, self.run_dir / self.key, opts)
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

    def __init__(
        self,
        fab: Fabric,
        leaf: str,
        prefix: str,
        names: dict[str, str],
        interval: float,
        cpus: frozenset[int] = frozenset(),
    ):
        self.fab, self.leaf, self.prefix, self.names = fab, leaf, prefix, names
        self.cpus = cpus
        self.interval = interval
        self.t0 = time.monotonic()
        self.rows: list[tuple[float, dict[str, int]]] = []
        self._stop = threading.Event()
        self._th = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        if self.cpus:
            isolate.pin_thread(self.cpus)
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
    glbd's ``foreign_classes`` reads. An ECN profile adds the bench's marker on each link end's
    egress (bench/fabric/ecn.py: it keeps the tbf's queue, all classes together, as the
    strict-priority classes above the exchange's hold little) and turns ECN on in the hosts."""
    topo = fab.topo
    qlen = max(2, math.ceil(p.rate * 1e6 / 8 * _secs(p.latency) / ecn.MTU_WIRE))
    marker = None
    if p.ecn:
        marker = ecn.build_object(
            ecn.Marker(int(p.rate * 1e6), ecn.tc_size_bytes(p.burst), qlen * ecn.MTU_WIRE)
        )
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
            if marker is not None:
                cmds += ecn.tc_lines(ifname, marker)
        ns.run(["tc", "-batch", "-"], input="\n".join(cmds) + "\n")
        ns.run(["nft", "-f", "-"], input=_NFT_CONTROL)
        if topo.node(node).role == "leaf":
            # a next hop whose link lost carrier is not used (the spine-failure case): what
            # a static ECMP baseline needs to survive a dead spine; nexthop objects (glbd,
            # FRR) are flushed by the kernel anyway
            linkdown = [
                f"net.ipv4.conf.{c}.ignore_routes_with_linkdown=1" for c in ("all", "default")
            ]
            ns.run(["sysctl", "-q", "-w", *hash_sysctls(p, topo.node(node).index), *linkdown])
    failcase.install(fab)
    # one segment per skb from the hosts' TCP (no 64 KB TSO bursts that tbf would split into
    # 44 back-to-back packets and tail-drop together: a NIC would pace them onto the wire)
    for h in topo.names("host"):
        fab.ns(h).ip(
            "link", "set", "dev", fab.ifname(h, f"leaf{topo.node(h).index}"), "gso_max_segs", "1"
        )
        if p.ecn:
            fab.ns(h).run(["sysctl", "-q", "-w", "net.ipv4.tcp_ecn=1"])


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


@dataclass
class Setup:
    """One contender's fabric, control plane and measurement, built before the first run."""

    key: str
    fab: Fabric
    cp: ControlPlane
    sampler: LinkSampler
    hns: dict[str, Any]
    addrs: dict[str, str]
    gw_names: dict[str, str]
    cpu: isolate.ControlPlaneCpu


def build(
    key: str, p: Params, run_dir: Path, cpus: isolate.Cpus, stack: contextlib.ExitStack
) -> Setup:
    """A fabric for ``key`` with its control plane converged and its routers on the router CPUs
    (torn down by ``stack``)."""
    topo = leaf_spine(p.spines, p.leaves)
    fab = stack.enter_context(Fabric(topo))
    prepare(fab, p)
    if p.rps and cpus.isolated:
        isolate.steer_receive([fab.ns(n) for n in topo.names()], cpus.traffic)
    cp = ControlPlane(key, fab, p, run_dir / p.profile)
    stack.callback(cp.stop)
    t = time.monotonic()
    cp.start()
    routers = [fab.ns(n).name for n in topo.names("leaf") + topo.names("spine")]
    pinned = isolate.pin_namespaces(routers, cpus.routers)
    log(f"{p.profile}/{key}: fabric {fab.tag} ready in {time.monotonic() - t:.1f} s "
        f"({pinned} router processes on CPU {sorted(cpus.routers)})")  # fmt: skip
    hosts = topo.names("host")
    hns = {h: fab.ns(h) for h in hosts}
    addrs = {h: host_addr(topo, h) for h in hosts}
    for a in hosts:
        for b in hosts:
            if a != b and not fab.ns(a).ping(addrs[b], count=5, wait=1.0):
                raise LabError(f"{key}: {a} cannot reach {b}")
    links = [(s, fab.ifname(s, lf)) for s in topo.names("spine") for lf in topo.names("leaf")]
    links += [(lf, fab.ifname(lf, s)) for lf in topo.names("leaf") for s in topo.names("spine")]
    sampler = LinkSampler({n: fab.ns(n) for n, _ in links}, links, p.sample, cpus.routers)
    stack.callback(sampler.close)
    gw_names = {_ip(topo.link(s, "leaf1").end(s)[1]): s for s in topo.names("spine")}
    return Setup(key, fab, cp, sampler, hns, addrs, gw_names, isolate.ControlPlaneCpu(routers))


def _teardown_check(tags: list[str]) -> None:
    left = [n for tag in tags for n in list_lab_namespaces(tag)]
    if left:
        log(f"WARNING: namespaces left behind: {left}")


def run_profile(
    keys: Sequence[str], p: Params, run_dir: Path, cpus: isolate.Cpus
) -> list[Exchange]:
    """Every run of profile ``p.profile``: each case, every contender in turn (the order
    rotates per run), so the box's noise falls on all of them alike."""
    out: list[Exchange] = []
    tags: list[str] = []
    with contextlib.ExitStack() as stack:
        stack.callback(_teardown_check, tags)  # last: after every fabric was deleted
        setups: dict[str, Setup] = {}
        for key in keys:
            try:
                setups[key] = build(key, p, run_dir, cpus, stack)
            except LabError as e:  # one contender's failure does not cost the others
                log(f"{p.profile}/{key}: error: {e}")
        ready = [k for k in keys if k in setups]
        tags += [st.fab.tag for st in setups.values()]
        for run in range(p.runs):
            order = ready[run % len(ready) :] + ready[: run % len(ready)] if ready else []
            for ci, case in enumerate(p.cases):
                for key in order:
                    ex = one_exchange(setups[key], case, run, ci, p, cpus)
                    out.append(ex)
                    log(
                        f"{p.profile:7} {key:8} run {run + 1}/{p.runs} {case:6}: "
                        + (f"{ex.completion_s:6.2f} s" if ex.ok else f"FAILED {ex.error}")
                        + f" ({ex.completion_s / ex.bound_s:4.2f} x bound)"
                        f"  reorder {ex.reorder:4d} retrans {ex.retrans:5d} ce {ex.ce:5d}"
                        + (
                            f"  changed {ex.fail_changed}/{ex.fail_running}"
                            if case == "fail"
                            else ""
                        )
                        + f"  routers {ex.cp_cpu_pct:4.1f} %/router"
                        f"  traffic CPU idle {ex.cpu_idle_pct:4.1f} %"
                        f"  rx on router CPU {ex.router_rx_pct:4.1f} %"
                    )
    return out


def one_exchange(
    st: Setup, case: str, run: int, ci: int, p: Params, cpus: isolate.Cpus
) -> Exchange:
    key, fab, cp = st.key, st.fab, st.cp
    topo = fab.topo
    hot_pfx = topo.node(p.hot_leaf).prefix4
    assert hot_pfx
    bg = Background(fab, p)
    timer: threading.Timer | None = None
    fail: failcase.SpineFailure | None = None
    if case == "fail":
        fail = failcase.SpineFailure(fab, p.fail_spine, DATA_PORT + ci, p.fail_at, p.fail_window)
        fail.on_thread_start = lambda: isolate.pin_injector(cpus.routers)
    sport_base = 20000 + (run * len(CASES) + ci) * 400
    if key == "placed":
        unplace_flows(fab, p)
        place_flows(fab, p, sport_base, case == "before", PLACED_PRIO)
    if case == "before":
        if key == "optimum":
            set_optimum(fab, p, True)
        bg.start()
        time.sleep(p.settle)

    def hot_now() -> None:
        if key == "optimum":
            set_optimum(fab, p, True)
        elif key == "placed":
            place_flows(fab, p, sport_base, True, PLACED_HOT_PRIO)
        bg.start()

    def on_start(t0: float) -> None:
        nonlocal timer
        if case == "during":
            timer = threading.Timer(max(0.0, t0 + p.hot_at - time.monotonic()), hot_now)
            timer.start()
        if fail is not None:
            fail.arm(t0)

    watch_leaf = next(lf for lf in topo.names("leaf") if lf != p.hot_leaf)
    c0 = tcp_counters(list(st.hns.values()))
    f0 = flowlet_totals(cp.glbd)
    cpu0 = isolate.per_cpu_times()
    rx0 = isolate.softnet_processed()
    st.cpu.start(time.monotonic())
    pt0 = time.process_time()
    st.sampler.start()
    try:
        with WeightWatch(fab, watch_leaf, hot_pfx, st.gw_names, 0.5, cpus.routers) as ww:
            res = all_to_all(
                st.hns,
                st.addrs,
                nbytes=p.pair_bytes,
                flows=p.flows,
                port=DATA_PORT + ci,
                sport_base=sport_base,
                cc=p.cc,
                tos=DATA_TOS,
                timeout=max(120.0, 6 * p.bound().t_ecmp),
                on_start=on_start,
            )
    finally:
        samples = st.sampler.stop()
        if timer is not None:
            timer.cancel()
            timer.join()
        bg.close()
        if key == "optimum":
            set_optimum(fab, p, False)
    t_end = time.monotonic()
    cpu1 = isolate.per_cpu_times()
    rx1 = isolate.softnet_processed()
    cp_pct = st.cpu.pct_of_core(t_end)
    ex_cpu = time.process_time() - pt0
    c1 = tcp_counters(list(st.hns.values()))
    ex = Exchange(key, case, run, res.ok, res.completion_s, res.error, profile=p.profile)
    n_routers = p.spines + p.leaves
    ex.cp_cpu_pct = cp_pct / n_routers
    ex.cpu_idle_pct = isolate.cpu_idle_pct(cpus.traffic, cpu0, cpu1)
    ex.router_cpu_idle_pct = isolate.cpu_idle_pct(cpus.routers, cpu0, cpu1)
    ex.router_rx_pct = isolate.processed_share(cpus.routers, rx0, rx1)
    if case == "during" and bg.t_on:
        ex.t_event = round(bg.t_on - res.t0, 3)
    ex.bound_s = model.exchange_bound(p.bound(), case, ex.t_event, p.hot_mbps * BG_WIRE)
    if fail is not None:
        fr = fail.finish()
        ex.t_event = fr.t_fail or None
        ex.bound_s = model.exchange_bound(p.bound(), case, ex.t_event)
        ex.fail_running, ex.fail_changed, ex.fail_on_failed = fr.running, fr.changed, fr.on_failed
        if fr.error:
            ex.error = (ex.error + "; " if ex.error else "") + f"fail case: {fr.error}"
        fail.restore()
        if key in STATIC:
            install_static(fab)  # the spine's routes went with its ports
        cp.wait_routes(90.0)
    conn = [f.t_connected - res.t0 for f in res.flows if f.t_connected]
    ex.connect_s = round(max(conn), 3) if conn else float("nan")
    ex.per_dst_s = {h: round(v, 3) for h, v in res.per_dst().items()}
    ex.retrans = c1["retrans"] - c0["retrans"]
    ex.reorder = c1["reorder"] - c0["reorder"]
    ex.rto = c1["rto"] - c0["rto"]
    ex.ce = c1["ce"] - c0["ce"]
    ex.bench_cpu_pct = 100.0 * ex_cpu / max(res.completion_s, 1e-3)
    ex.loadavg = loadavg()
    ex.weights = ww.rows
    f1 = flowlet_totals(cp.glbd)
    ex.flowlet = {k: f1[k] - f0.get(k, 0) for k in f1}
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
    if case in ("before", "during") and not cp.wait_equal(20.0):
        log(f"{key}: weights toward {hot_pfx} still unequal 20 s after the hotspot ended")
    return ex


#: the background's bytes on the wire per byte UdpBlaster counts (it counts IP + UDP headers
#: with the payload; the Ethernet header comes on top): 1200-byte datagrams
BG_WIRE = (1200 + 28 + 14) / (1200 + 28)


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
    ap.add_argument("--flows", type=int, default=0,
                    help="TCP flows per ordered host pair (default: the profile's)")  # fmt: skip
    ap.add_argument(
        "--hash-policy", type=int, choices=(1, 3), default=d.hash_policy,
        help="leaves' fib_multipath_hash_policy: 3 = 5-tuple from the headers (default), "
        "1 = L4 but short-circuited to the sender's socket hash on veths",
    )  # fmt: skip
    ap.add_argument("--profiles", default=",".join(d.profiles),
                    help=f"traffic profiles: {', '.join(PROFILES)}")  # fmt: skip
    ap.add_argument("--settle", type=float, default=d.settle)
    ap.add_argument("--hot-at", type=float, default=d.hot_at)
    ap.add_argument("--fail-at", type=float, default=d.fail_at)
    ap.add_argument("--cases", default=",".join(d.cases))
    ap.add_argument(
        "--only", default=",".join(CONTENDERS),
        help=f"contenders, comma-separated (also: {', '.join(EXTRA_CONTENDERS)})",
    )  # fmt: skip
    ap.add_argument(
        "--no-residual", action="store_true",
        help="tuned contenders: helpers report the configured capacity (no foreign_classes)",
    )  # fmt: skip
    ap.add_argument(
        "--no-memory", action="store_true",
        help="tuned contenders: weights without memory (path_quality.weight_memory = false)",
    )  # fmt: skip
    ap.add_argument(
        "--flowlet-timeout-ms", type=float, default=d.flowlet_timeout_ms,
        help='fixed flowlet timeout of every contender that runs flowlets, glb included '
        '(default: glbd\'s "auto")',
    )  # fmt: skip
    ap.add_argument(
        "--no-rps", action="store_true",
        help="leave every veth's receive work on the CPU that sent the frame (no RPS)",
    )  # fmt: skip
    ap.add_argument("--out", default="", help="JSON results file (default: in /tmp)")
    ap.add_argument("--keep", action="store_true", help="keep the run directory (glbd logs)")
    ap.add_argument("--report", default="", help="only print the report of a saved JSON file")
    ap.add_argument("--plot", default="", metavar="DIR", help="also draw the results into DIR")
    a = ap.parse_args(argv)
    cases = tuple(c for c in a.cases.split(",") if c)
    profiles = tuple(c for c in a.profiles.split(",") if c)
    only = [c for c in a.only.split(",") if c]
    for c in cases:
        if c not in CASES:
            ap.error(f"unknown case {c!r}")
    for c in profiles:
        if c not in PROFILES:
            ap.error(f"unknown profile {c!r}")
    for c in only:
        if c not in CONTENDERS + EXTRA_CONTENDERS:
            ap.error(f"unknown contender {c!r}")
    p = Params(
        rate=a.rate, hot=a.hot, mbytes=a.mbytes, flows_override=a.flows, runs=a.runs, cases=cases,
        profiles=profiles, settle=a.settle, hot_at=a.hot_at, fail_at=a.fail_at,
        hash_policy=a.hash_policy, residual=not a.no_residual, memory=not a.no_memory,
        flowlet_timeout_ms=a.flowlet_timeout_ms, rps=not a.no_rps,
    )  # fmt: skip
    return p, only, a


def load(path: str) -> tuple[Params, list[Exchange], dict[str, Any]]:
    """Params, results and meta of a JSON file written by a run."""
    d = json.loads(Path(path).read_text())
    known = {f.name for f in dataclasses.fields(Params)}
    prm = {k: v for k, v in d["params"].items() if k in known}
    prm.setdefault("rps", False)  # files from before RPS ran without it
    for k in ("cases", "profiles"):
        if k in prm:
            prm[k] = tuple(prm[k])
    ex_fields = {f.name for f in dataclasses.fields(Exchange)}
    rows = []
    for r in d["results"]:
        r = {k: v for k, v in r.items() if k in ex_fields}
        r["weights"] = [(t, w) for t, w in r.get("weights", [])]
        rows.append(Exchange(**r))
    return Params(**prm), rows, d["meta"]


def commit() -> str:
    """The commit this run measures (``+dirty`` with uncommitted changes to tracked files)."""
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], check=False).returncode
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return rev + ("+dirty" if dirty else "")


def _plot(out_dir: str, results: Path) -> None:
    """With ``--plot DIR``: completion times per contender, case and profile (bench/plots.py)."""
    if out_dir:
        from bench.plots import plot_fabric

        for prof in json.loads(results.read_text())["params"].get("profiles", ["deep"]):
            out = Path(out_dir) / f"fabric-completion-{prof}.png"
            print(f"plot: {plot_fabric(results, out, profile=prof)}")


def main(argv: Sequence[str] | None = None) -> int:
    from bench.fabric.report import report

    p, only, a = parse(argv)
    if a.report:
        rp, rows, saved = load(a.report)
        print(report(rp, rows, saved))
        _plot(a.plot, Path(a.report))
        return 0
    cpus = isolate.plan()
    isolate.pin_thread(cpus.traffic)  # this thread drives the traffic
    run_dir = Path(tempfile.mkdtemp(prefix="glbd-fabric-"))
    out_path = Path(a.out) if a.out else run_dir.with_suffix(".json")
    with open("/proc/cpuinfo") as f:
        model_name = next((ln.split(":", 1)[1].strip() for ln in f if "model name" in ln), "?")
    meta: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit(),
        "command": " ".join(
            ["python -m bench.fabric", *(argv if argv is not None else sys.argv[1:])]
        ),
        "machine": f"{model_name}, {os.cpu_count()} CPUs, "
        f"kernel {Path('/proc/sys/kernel/osrelease').read_text().strip()}",
        "cpus": cpus.describe()
        + (
            f"; every veth's receive work steered to CPU {isolate.fmt(cpus.traffic)} (RPS)"
            if p.rps and cpus.isolated
            else "; receive work on the CPU that sent each frame (no RPS)"
        ),
        "load_start": loadavg(),
    }
    log(
        f"fabric benchmark at {meta['commit']}: contenders {','.join(only)}, profiles "
        f"{','.join(p.profiles)}, cases {','.join(p.cases)}, {p.runs} runs; {meta['cpus']}; "
        f"load {meta['load_start']}; run dir {run_dir}"
    )
    results: list[Exchange] = []
    t_all = time.monotonic()
    try:
        for prof in p.profiles:
            results += run_profile(only, p.for_profile(prof), run_dir, cpus)
    finally:
        meta["load_end"] = loadavg()
        meta["duration_s"] = round(time.monotonic() - t_all, 1)
        out_path.write_text(
            json.dumps(
                {
                    "meta": meta,
                    "params": dataclasses.asdict(p),
                    "results": [dataclasses.asdict(e) for e in results],
                },
                indent=1,
                default=str,
            )
        )
        if not a.keep:
            shutil.rmtree(run_dir, ignore_errors=True)
    text = report(p, results, meta)
    print("\n" + text + f"\n\n(total {meta['duration_s']:.0f} s; raw results: {out_path})")
    _plot(a.plot, out_path)
    missing = [k for k in only if not any(e.contender == k for e in results)]
    if missing:
        print(f"contenders that could not run: {', '.join(missing)}")
    if not results:
        return 1
    return 0 if all(e.ok for e in results) and not missing else 2


if __name__ == "__main__":
    sys.exit(main())
