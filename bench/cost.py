"""What the control plane costs: CPU per router, % of one core, glbd next to FRR in the same run.

    python -m bench.cost [--cases idle,congest,fanout] [--seconds 10] [--json PATH]

Builds an S x L lab fabric (network namespaces, veths; no hosts) once per contender, one after
another in the same run, waits until every BGP session is established and every BFD session Up,
lets it settle, then reads each router's processes' CPU time (utime + stime from /proc, every
thread, every child) over ``--seconds``:

* ``glbd``: glbd as shipped (default config; only the topology's neighbours are set), every
  process of it: the main loop, the BFD engine, ExaBGP;
* ``glbd-nofl`` (opt-in, ``--only``): glbd as shipped with ``[flowlet] enabled = false``: the
  difference is the flowlet program's polling and its timeout's sampling on the leaves (the
  lab has no host ports, so the program is loaded but attached nowhere; its per-packet cost is
  the kernel's, in softirq);
* ``glbd-nofc``: the same without the foreign-load counter (``link_quality.foreign_from =
  "none"``): the difference is what counting the foreign load at ingress costs;
* ``glbd-nohb``: the same without heartbeats (``[heartbeat] enabled = false``);
* ``glbd-bgp-bfd``: also without link sampling (``sample_interval_ms`` 10 s) and flowlets:
  BGP + BFD alone, the part FRR does too; the differences to the rows above are what
  heartbeats, link sampling and flowlets cost;
* ``frr``: FRR 10.x (bgpd, bfdd, zebra, mgmtd, staticd) with BFD at glbd's default timers
  (3 x 50 ms; FRR's own default is 3 x 300 ms) and BGP at glbd's hold time (9 s, keepalives
  every 3 s: FRR's datacenter defaults too).

Two more cases, glbd alone:

* ``congest``: the same 4x4 fabric with every link's capacity at 10 Mbit/s, while spine1's
  link to leaf1 changes band every 100 ms (a UDP stream from spine1 at 12 Mbit/s, on for
  100 ms, off for 100 ms; the sender's CPU is not the router's);
* ``fanout``: one spine with 64 leaf neighbours: glbd on the spine, FRR 10.x on the 64 leaves
  (light peers: BGP and BFD at 3 x 50 ms, no heartbeats), idle, then with 8 of the spine's
  links changing band every 100 ms the same way; then FRR on that spine instead (BGP and BFD
  only), the reference. Only the spine is measured.

``--py-spy DIR`` samples the ``--profile`` routers (default leaf2 and spine1, with their
children) during every window and prints the functions most samples pass through; py-spy
pauses the process it samples, so a profiled run's CPU figures are not the bench's.

Prints one row per contender and role, then the issue's targets as verdict lines (``met`` /
``NOT met``). A bench, not a test: figures depend on the machine; the JSON carries the commit,
date, machine and load.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from glbdlab.frr import start_fabric_frr
from glbdlab.nodes import GlbdNode, GlbdOptions, start_glbd, stop_all, wait_until
from glbdlab.procstat import cpu_ticks, descendants
from glbdlab.topology import Fabric, leaf_spine

from glbd.config.config_bfd import BfdSection
from glbd.config.config_peers import BgpSection
from glbd.config.config_quality import HeartbeatSection, LinkQualitySection

HZ = os.sysconf("SC_CLK_TCK")

#: the issue's targets, % of one core
IDLE_PER_ROUTER = 2.0
EXABGP_PER_ROUTER = 0.3
BGP_BFD_VS_FRR = 1.5
CONGESTED_PER_ROUTER = 3.0
FANOUT_IDLE = 10.0
FANOUT_CONGESTED = 20.0

#: the congest cases' link capacity (Mbit/s) and the stream that changes the band
CAPACITY_MBPS = 10.0
STREAM_MBPS = 12.0
TOGGLE_S = 0.1

#: a UDP stream to each address in argv[3:] at argv[1] Mbit/s, on and off every argv[2] s
_TOGGLER = """
import socket, sys, time
rate, on, dests = float(sys.argv[1]) * 1e6 / 8, float(sys.argv[2]), sys.argv[3:]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setblocking(False)
pkt, tick = b"x" * 1000, 0.002
per_tick = rate * tick / len(pkt)
t0 = time.monotonic()
carry = 0.0
while True:
    now = time.monotonic()
    if int((now - t0) / on) % 2 == 0:
        carry += per_tick
        n, carry = int(carry), carry - int(carry)
        for _ in range(n):
            for d in dests:
                try:
                    s.sendto(pkt, (d, 9))
                except OSError:
                    pass
    time.sleep(tick)
"""


def kind(pid: int) -> str:
    """Which part of a router ``pid`` is: glbd, exabgp, bfd engine, or an FRR daemon."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    text = " ".join(a.decode(errors="replace") for a in argv if a)
    if "exabgp" in text:
        return "exabgp"
    if "bfd.engine" in text or "bfd engine" in text:
        return "bfd engine"
    for d in ("bgpd", "bfdd", "zebra", "mgmtd", "staticd"):
        if f"/usr/lib/frr/{d}" in text:
            return d
    if "glbd" in text:
        return "glbd"
    return Path(argv[0].decode(errors="replace")).name or "?"


@dataclass
class RouterCost:
    router: str
    role: str
    #: part -> % of one core over the window
    parts: dict[str, float] = field(default_factory=dict)
    #: BGP sessions (re-)established during the window (glbd routers): a flap's work is in it
    flaps: int = 0

    @property
    def total(self) -> float:
        return sum(self.parts.values())


@dataclass
class Profiler:
    """``--py-spy DIR``: py-spy samples ``routers`` (and their children) during each window,
    raw collapsed stacks in DIR/CASE-WINDOW-ROUTER.txt; :func:`hot` sums them."""

    out: Path
    routers: Sequence[str]
    case: str = ""
    window: int = 0

    def start(self, roots: dict[str, tuple[str, list[int]]]) -> list[subprocess.Popen[bytes]]:
        exe = Path(sys.executable).parent / "py-spy"
        self.out.mkdir(parents=True, exist_ok=True)
        procs = []
        for name in self.routers:
            if name not in roots or not exe.exists():
                continue
            path = self.out / f"{self.case}-{self.window}-{name}.txt"
            procs.append(subprocess.Popen(
                [str(exe), "record", "-r", "200", "-f", "raw", "--subprocesses", "-o",
                 str(path), "--pid", str(roots[name][1][0])],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            ))  # fmt: skip
        self.window += 1
        return procs

    @staticmethod
    def stop(procs: Sequence[subprocess.Popen[bytes]]) -> None:
        for p in procs:
            p.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(60)


def hot(path: Path, top: int = 25) -> list[str]:
    """The functions of a raw py-spy profile that most samples pass through (inclusive)."""
    total, incl = 0, Counter[str]()
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        total += int(n)
        for frame in set(stack.split(";")):
            incl[frame] += int(n)
    return [f"{v * 100 / max(total, 1):5.1f}% {k}" for k, v in incl.most_common(top)]


def measure(
    roots: dict[str, tuple[str, list[int]]], seconds: float, prof: Profiler | None = None
) -> list[RouterCost]:
    """CPU of each router (name -> (role, root pids)) over ``seconds``, by part."""

    def snap() -> dict[str, dict[int, tuple[str, int]]]:
        out: dict[str, dict[int, tuple[str, int]]] = {}
        for name, (_, pids) in roots.items():
            procs: dict[int, tuple[str, int]] = {}
            for root in pids:
                for p in descendants(root):
                    procs[p] = (kind(p), cpu_ticks(p))
            out[name] = procs
        return out

    spies = prof.start(roots) if prof is not None else []
    t0, a = time.monotonic(), snap()
    time.sleep(seconds)  # the measurement window itself
    t1, b = time.monotonic(), snap()
    Profiler.stop(spies)
    dt = t1 - t0
    rows = []
    for name, (role, _) in roots.items():
        rc = RouterCost(name, role)
        for pid, (k, tb) in b[name].items():
            ta = a[name].get(pid, (k, tb))[1]  # a process born in the window: from its start
            if k in ("sh", "unshare", "ip"):
                continue
            rc.parts[k] = rc.parts.get(k, 0.0) + (tb - ta) / HZ / dt * 100
        rows.append(rc)
    return rows


@dataclass
class Contender:
    key: str
    what: str
    start: Callable[[Fabric, Path], dict[str, tuple[str, list[int]]]]
    stop: Callable[[], None] = lambda: None
    #: router -> BGP sessions established since start (glbd's counters; FRR: not asked)
    sessions: Callable[[], dict[str, int]] = dict


def _established(nodes: dict[str, GlbdNode]) -> dict[str, int]:
    out = {}
    for name, n in nodes.items():
        with contextlib.suppress(Exception):
            rows = n.request("neighbors")
            out[name] = sum(int((r.get("counters") or {}).get("established", 0)) for r in rows)
    return out


def _glbd(
    heartbeat: bool = True,
    sample_ms: int | None = None,
    capacity: float | None = None,
    names: Sequence[str] | None = None,
    extra: Mapping[str, str] | None = None,
    link_quality: Mapping[str, str] | None = None,
) -> Any:
    """A contender starter: glbd on every router (or on ``names``) at its defaults (``extra``:
    TOML tables added per role; ``link_quality``: keys of that table)."""
    holder: dict[str, dict[str, GlbdNode]] = {}

    def start(fab: Fabric, run_dir: Path) -> dict[str, tuple[str, list[int]]]:
        opts = GlbdOptions(
            heartbeat=heartbeat,
            hb_interval_ms=HeartbeatSection().interval_ms,
            bfd_interval_ms=BfdSection().min_tx_ms,
            detect_mult=BfdSection().detect_mult,
            sample_interval_ms=sample_ms or LinkQualitySection().sample_interval_ms,
            hold_time=BgpSection().hold_time,
            log_level="warning",
            capacity_mbps=capacity,
            extra=extra or {},
            link_quality=link_quality or {},
        )
        nodes = start_glbd(fab, run_dir, opts, names=names)
        holder["nodes"] = nodes

        def converged() -> bool:
            for n in nodes.values():
                bgp, bfd = n.request("neighbors"), n.request("bfd")
                if not bgp or any(r["state"] != "up" for r in bgp):
                    return False
                if len(bfd) != len(bgp) or any(str(r["state"]).lower() != "up" for r in bfd):
                    return False
            return True

        wait_until(converged, 300, 0.5, "every glbd's BGP established and BFD Up")
        return {
            name: (fab.topo.node(name).role, [n.proc.pid])
            for name, n in nodes.items()
            if n.proc is not None
        }

    def stop() -> None:
        stop_all(holder.pop("nodes", {}))

    def sessions() -> dict[str, int]:
        return _established(holder.get("nodes", {}))

    return start, stop, sessions


def _frr(role: str | None = None) -> Any:
    """A contender starter: FRR on every router (or on every router of ``role``)."""

    def start(fab: Fabric, run_dir: Path) -> dict[str, tuple[str, list[int]]]:
        names = [n.name for n in fab.nodes() if n.role != "host" and role in (None, n.role)]
        frr = start_fabric_frr(
            fab,
            names,
            bfd_interval_ms=BfdSection().min_tx_ms,
            bfd_detect_mult=BfdSection().detect_mult,
            # glbd's hold time (keepalives a third of it), FRR's datacenter default too
            timers=(BgpSection().hold_time // 3, BgpSection().hold_time),
        )
        if role is not None:
            return {}  # light peers of a glbd: it waits for them, they are not measured
        for inst in frr.values():
            inst.wait_bgp_established(timeout=120)
        for inst in frr.values():
            inst.wait_bfd_up(timeout=120)
        return {
            n: (fab.topo.node(n).role, [p.pid for p in inst.procs.values()])
            for n, inst in frr.items()
        }

    return start, lambda: None  # the fabric's Lab stops FRR when it is destroyed


def contenders() -> dict[str, Contender]:
    g, gs, gn = _glbd()
    nh, nhs, nhn = _glbd(heartbeat=False)
    off = {"leaf": "[flowlet]\nenabled = false"}
    bb, bbs, bbn = _glbd(heartbeat=False, sample_ms=10_000, extra=off)
    nofl, nofls, nofln = _glbd(extra=off)
    nf, nfs, nfn = _glbd(link_quality={"foreign_from": '"none"'})
    f, fs = _frr()
    return {
        "glbd": Contender("glbd", "glbd as shipped (default timers)", g, gs, gn),
        "glbd-nohb": Contender("glbd-nohb", "glbd, heartbeats off", nh, nhs, nhn),
        "glbd-nofc": Contender(
            "glbd-nofc", "glbd, no foreign-load counter (foreign_from none)", nf, nfs, nfn
        ),
        "glbd-nofl": Contender("glbd-nofl", "glbd, flowlets off", nofl, nofls, nofln),
        "glbd-bgp-bfd": Contender(
            "glbd-bgp-bfd",
            "glbd, heartbeats and flowlets off, link sampling every 10 s",
            bb,
            bbs,
            bbn,
        ),
        "frr": Contender("frr", "FRR 10.x, BFD 3 x 50 ms", f, fs),
    }


def toggle(fab: Fabric, spine: str, leaves: Sequence[str]) -> None:
    """Change the band of ``spine``'s links to ``leaves`` every TOGGLE_S (the stream runs
    until the fabric is destroyed)."""
    dests = [fab.addr(lf, spine) for lf in leaves]
    fab.ns(spine).popen([sys.executable, "-c", _TOGGLER, str(STREAM_MBPS), str(TOGGLE_S), *dests])


def run_one(
    starters: Sequence[Contender],
    spines: int,
    leaves: int,
    seconds: float,
    settle: float,
    toggled: Sequence[str] = (),
    only: Sequence[str] | None = None,
    prof: Profiler | None = None,
) -> list[list[RouterCost]]:
    """Each starter on one fabric; measured idle, then (``toggled``: leaves whose link from
    spine1 changes band) once more with those links changing band. Returns the windows."""
    run_dir = Path(tempfile.mkdtemp(prefix="glbd-cost-"))
    fab = Fabric(leaf_spine(spines, leaves, hosts=False))
    try:
        fab.build()
        roots: dict[str, tuple[str, list[int]]] = {}
        for c in reversed(starters):  # light peers first, the measured routers last
            roots.update(c.start(fab, run_dir))
        if only is not None:
            roots = {k: v for k, v in roots.items() if k in only}
        time.sleep(settle)  # let the start's own work (first dumps, first UPDATEs) end

        def window() -> list[RouterCost]:
            before = {k: v for c in starters for k, v in c.sessions().items()}
            rows = measure(roots, seconds, prof)
            after = {k: v for c in starters for k, v in c.sessions().items()}
            for r in rows:
                r.flaps = after.get(r.router, 0) - before.get(r.router, 0)
            return rows

        out = [window()]
        if toggled:
            toggle(fab, "spine1", toggled)
            time.sleep(settle)
            out.append(window())
        return out
    finally:
        for c in starters:
            with contextlib.suppress(Exception):
                c.stop()
        fab.destroy()
        shutil.rmtree(run_dir, ignore_errors=True)


def _commit() -> str:
    root = Path(__file__).resolve().parent.parent
    try:
        return subprocess.run(
            ["git", "-C", str(root), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def _mean(xs: Iterable[float]) -> float:
    v = list(xs)
    return sum(v) / len(v) if v else float("nan")


def report(results: dict[str, list[RouterCost]]) -> list[str]:
    lines = ["", f"{'contender':<14} {'role':<6} {'per router':>10}  parts (% of a core)"]
    for key, rows in results.items():
        for role in ("spine", "leaf"):
            rr = [r for r in rows if r.role == role]
            if not rr:
                continue
            parts: dict[str, float] = {}
            for r in rr:
                for k, v in r.parts.items():
                    parts[k] = parts.get(k, 0.0) + v / len(rr)
            ptxt = ", ".join(f"{k} {v:.2f}" for k, v in sorted(parts.items(), key=lambda x: -x[1]))
            lines.append(f"{key:<14} {role:<6} {_mean(r.total for r in rr):>9.2f}%  {ptxt}")
        lines.append(f"{key:<14} {'all':<6} {_mean(r.total for r in rows):>9.2f}%")
        flaps = sum(r.flaps for r in rows)
        if flaps:
            lines.append(f"{key:<14} BGP sessions re-established in the window: {flaps}")
    lines.append("")

    def per_router(key: str, part: str | None = None) -> float:
        rows = results.get(key, [])
        if part is None:
            return _mean(r.total for r in rows)
        return _mean(r.parts.get(part, 0.0) for r in rows)

    def verdict(ok: bool, key: str = "") -> str:
        flaps = sum(r.flaps for r in results.get(key, []))
        note = f" ({flaps} BGP sessions re-established in the window)" if flaps else ""
        return ("met" if ok else "NOT met") + note

    if "glbd" in results:
        g = per_router("glbd")
        lines.append(
            f"target idle, all glbd processes <= {IDLE_PER_ROUTER} % per router: "
            f"{g:.2f} % ({g / IDLE_PER_ROUTER:.2f}x the target): "
            f"{verdict(g <= IDLE_PER_ROUTER, 'glbd')}"
        )
        e = per_router("glbd", "exabgp")
        lines.append(
            f"target idle, ExaBGP <= {EXABGP_PER_ROUTER} % per router: {e:.2f} %: "
            f"{verdict(e <= EXABGP_PER_ROUTER)}"
        )
    if "frr" in results:
        fr = per_router("frr")
        lines.append(f"FRR, all daemons: {fr:.2f} % per router")
        if "glbd" in results:
            lines.append(f"glbd / FRR, everything: {per_router('glbd') / fr:.1f}x")
        if "glbd-bgp-bfd" in results:
            bb = per_router("glbd-bgp-bfd")
            lines.append(
                f"target BGP+BFD, glbd (no heartbeats, no sampling) <= {BGP_BFD_VS_FRR}x FRR: "
                f"{bb:.2f} % vs {fr:.2f} % = {bb / fr:.2f}x: "
                f"{verdict(bb <= BGP_BFD_VS_FRR * fr)}"
            )
    if {"glbd", "glbd-nohb"} <= results.keys():
        lines.append(
            f"heartbeats cost {per_router('glbd') - per_router('glbd-nohb'):.2f} % per router"
        )
    if {"glbd", "glbd-nofc"} <= results.keys():
        lines.append(
            "the foreign-load counter costs "
            f"{per_router('glbd') - per_router('glbd-nofc'):.2f} % per router"
        )
    if {"glbd-nohb", "glbd-bgp-bfd"} <= results.keys():
        lines.append(
            "link sampling costs "
            f"{per_router('glbd-nohb') - per_router('glbd-bgp-bfd'):.2f} % per router"
        )
    if "congest" in results:
        c = per_router("congest")
        sp = _mean(r.total for r in results["congest"] if r.router == "spine1")
        lines.append(
            f"target one link changing band every {TOGGLE_S * 1e3:.0f} ms, per router <= "
            f"{CONGESTED_PER_ROUTER} %: {c:.2f} % (spine1, whose link it is: {sp:.2f} %): "
            f"{verdict(c <= CONGESTED_PER_ROUTER, 'congest')}"
        )
    if "fanout-idle" in results:
        f = per_router("fanout-idle")
        lines.append(
            f"target spine with 64 leaves, idle <= {FANOUT_IDLE} %: {f:.2f} %: "
            f"{verdict(f <= FANOUT_IDLE, 'fanout-idle')}"
        )
    if "fanout-frr-idle" in results:
        lines.append(
            f"spine with 64 leaves, idle, FRR on it instead: {per_router('fanout-frr-idle'):.2f} %"
        )
    if "fanout-congest" in results:
        f = per_router("fanout-congest")
        lines.append(
            f"target spine with 64 leaves, 8 links changing band <= {FANOUT_CONGESTED} %: "
            f"{f:.2f} %: {verdict(f <= FANOUT_CONGESTED, 'fanout-congest')}"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.cost", description=__doc__.split("\n")[0])
    ap.add_argument("--spines", type=int, default=4)
    ap.add_argument("--leaves", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=10.0, help="measurement window")
    ap.add_argument("--settle", type=float, default=5.0, help="wait after convergence")
    ap.add_argument(
        "--only",
        default="glbd,glbd-nofc,glbd-nohb,glbd-bgp-bfd,frr",
        help="idle contenders, in order",
    )
    ap.add_argument(
        "--cases", default="idle,congest,fanout", help="idle (the contenders), congest, fanout"
    )
    ap.add_argument("--fanout", type=int, default=64, help="the fanout case's leaves")
    ap.add_argument(
        "--fanout-settle",
        type=float,
        default=30.0,
        help="wait after convergence in the fanout case (64 peers' initial exchange)",
    )
    ap.add_argument("--json", help="write the raw results here")
    ap.add_argument("--py-spy", help="profile --profile routers into this folder (py-spy)")
    ap.add_argument("--profile", default="leaf2,spine1", help="the routers --py-spy samples")
    a = ap.parse_args(argv)
    all_c = contenders()
    keys = [k for k in a.only.split(",") if k]
    for k in keys:
        if k not in all_c:
            ap.error(f"unknown contender {k!r} (known: {', '.join(all_c)})")
    with open("/proc/cpuinfo") as f:
        model_name = next((ln.split(":", 1)[1].strip() for ln in f if "model name" in ln), "?")
    meta = {
        "commit": _commit(),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join(["python -m bench.cost", *(argv or sys.argv[1:])]),
        "machine": f"{model_name}, {os.cpu_count()} CPUs, "
        f"kernel {Path('/proc/sys/kernel/osrelease').read_text().strip()}",
        "load_start": Path("/proc/loadavg").read_text().split()[:3],
    }
    print(
        f"control-plane cost: {a.spines}x{a.leaves} fabric, {a.seconds:g} s window, "
        f"commit {meta['commit']}, load {' '.join(meta['load_start'])}",
        flush=True,
    )
    cases = [c for c in a.cases.split(",") if c]
    results: dict[str, list[RouterCost]] = {}
    t0 = time.monotonic()

    def done(what: str) -> None:
        print(f"  {what}: measured ({time.monotonic() - t0:.0f} s so far)", flush=True)

    def prof(case: str) -> Profiler | None:
        if not a.py_spy:
            return None
        return Profiler(Path(a.py_spy), a.profile.split(","), case)

    if "idle" in cases:
        for k in keys:
            results[k] = run_one([all_c[k]], a.spines, a.leaves, a.seconds, a.settle, prof=prof(k))[
                0
            ]
            done(k)
    if "congest" in cases:
        g, gs, gn = _glbd(capacity=CAPACITY_MBPS)
        c = Contender("congest", "glbd, one link changing band", g, gs, gn)
        results["congest"] = run_one(
            [c], a.spines, a.leaves, a.seconds, a.settle, toggled=["leaf1"], prof=prof("congest")
        )[1]
        done("congest")
    if "fanout" in cases:
        g, gs, gn = _glbd(capacity=CAPACITY_MBPS, names=["spine1"])
        f, fs = _frr(role="leaf")
        spine = Contender("fanout", "glbd on a spine with many leaves", g, gs, gn)
        peers = Contender("fanout-peers", "FRR on the leaves", f, fs)
        idle, busy = run_one(
            [spine, peers],
            1,
            a.fanout,
            a.seconds,
            a.fanout_settle,
            toggled=[f"leaf{i}" for i in range(1, 9)],
            only=["spine1"],
            prof=prof("fanout"),
        )
        results["fanout-idle"], results["fanout-congest"] = idle, busy
        done("fanout")
        # the same spine running FRR (no heartbeats, no sampling: BGP and BFD alone)
        ff, ffs = _frr()
        frr_spine = Contender("fanout-frr", "FRR on the spine and the leaves", ff, ffs)
        (results["fanout-frr-idle"],) = run_one(
            [frr_spine], 1, a.fanout, a.seconds, a.fanout_settle, only=["spine1"]
        )
        done("fanout-frr")
    meta["load_end"] = Path("/proc/loadavg").read_text().split()[:3]
    text = report(results)
    print("\n".join(text))
    for pf in sorted(Path(a.py_spy).glob("*.txt")) if a.py_spy else []:
        print(f"\nprofile {pf.name}:", *hot(pf), sep="\n  ")
    if a.json:
        Path(a.json).write_text(
            json.dumps(
                {
                    "meta": meta,
                    "results": {k: [r.__dict__ for r in v] for k, v in results.items()},
                    "report": text,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
