"""Full convergence and a peer restart on a wide leaf: glbd against FRR bgpd+zebra, same run.

Run as root (creates and deletes its own namespaces, one pair per speaker and run)::

    .venv/bin/python bench/convergence.py                        # 64 x 10k, glbd then FRR
    .venv/bin/python bench/convergence.py --neighbors 8 --prefixes 1000     # quick
    .venv/bin/python bench/convergence.py --speakers frr --runs 3 --out r.json

Topology, per speaker: the emulated spines of :mod:`bench.glb_memory` (one namespace, one
feeder process: a minimal passive BGP speaker per spine announcing every prefix in packed
UPDATEs with the NHC/NNHN attribute, a BFD session per spine, heartbeats) and a leaf namespace
running the speaker under test:

* ``glbd``: the real ``glbd run`` (load-balancer) with the config glb_memory generates (its
  ExaBGP child, ExaBGP's bridge and the BFD engine child);
* ``frr``: FRR 10.x from the lab chroot (:class:`glbdlab.frr.FrrInstance`: mgmtd, zebra, bgpd,
  bfdd, staticd), one eBGP neighbour per spine in one peer group, ``maximum-paths 64``,
  ``bgp bestpath as-path multipath-relax``, BFD at the feeder's timers, nothing advertised
  back to the spines (glbd's load-balancer role advertises nothing either), zebra's defaults
  (kernel nexthop groups).

What is timed, from the kernel FIB of the leaf (a netlink dump of the main table's IPv4 routes
and of the nexthops, polled; see ``FibProbe``):

* **full convergence**: until every one of the N prefixes is in the kernel on a nexthop group
  with all the neighbours as members; from the speaker's start (glbd's exec, FRR's first
  daemon) and from the first BGP session the feeder saw Established;
* **peer restart**: the feeder sends one spine a Cease and closes its TCP session, refusing it
  meanwhile (``--restart close``, the default; ``--restart withdraw`` withdraws all N prefixes
  on the live session instead): time until every prefix is on a group without it (n-1
  members). Then the spine is let back in (or re-announces): time from its session's
  Established (with ``--restart withdraw``: from the start of the re-announcement) until
  every prefix is on an n-wide group again; the time from the restore itself, which includes
  the speaker's reconnect timer, is reported beside it;
* RSS: glbd and all its descendants; bgpd + zebra (the other FRR daemons beside them);
  at convergence, at the end and the maximum seen while polling.

A dump walks N routes that the kernel expands to n next hops (compat mode): ~0.15 s of CPU at
10k x 64. So the FIB is dumped only after a route or nexthop notification arrived, at least
``--poll`` (0.1 s) and twice the last dump's time apart, and while converging at least 1 % of
the elapsed time apart (at most 1 s). Every time is the end of the first dump that saw the
state: late by at most one interval plus one dump (``dump_s_max``, ``probe_cpu_s`` in the
JSON). ``--bfd-ms 0`` runs both speakers and the feeder without BFD.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import glb_memory as gm

PREFIX_NET = ipaddress.IPv4Network("198.19.0.0/16")
BFD_PROFILE = "bench"


# ================================================================================ kernel FIB
@dataclass
class FibState:
    """Routes under PREFIX_NET in the main table, counted by the width of their nexthop."""

    routes: int = 0
    widths: dict[int, int] = field(default_factory=dict)  # members -> routes
    dump_s: float = 0.0

    def at(self, width: int) -> int:
        return self.widths.get(width, 0)

    def brief(self) -> str:
        top = sorted(self.widths.items(), key=lambda kv: -kv[1])[:3]
        return f"{self.routes} routes (" + ", ".join(f"{w}-wide: {k}" for w, k in top) + ")"


class FibProbe:
    """Netlink dumps in the leaf namespace with glbd's own socket and parsers: the nexthops
    (their group widths) and the IPv4 routes of the main table (destination and nexthop id
    only; the expanded multipath attribute is skipped unparsed)."""

    def __init__(self, netns: str) -> None:
        from glbd.netlink.rtsocket import NetlinkSocket

        self.loop = asyncio.new_event_loop()
        self.netns = netns

        async def opener() -> NetlinkSocket:
            return await NetlinkSocket.open(netns=netns)

        self.sock = self.loop.run_until_complete(opener())
        # route and nexthop notifications, only counted: no change since the last dump, no dump
        from glbd.netlink import const as c
        from glbd.netlink.rtsocket import open_route_socket

        self.events = open_route_socket(
            netns=netns, groups=(c.RTNLGRP_IPV4_ROUTE, c.RTNLGRP_NEXTHOP), strict_check=False,
            rcvbuf=1 << 22,
        )  # fmt: skip
        self.buf = bytearray(1 << 20)

    def changed(self) -> bool:
        """Whether the FIB changed (or may have: an overrun) since the last call."""
        seen = False
        while True:
            try:
                if self.events.recv_into(self.buf) <= 0:
                    return seen
                seen = True
            except BlockingIOError:
                return seen
            except OSError:  # ENOBUFS: notifications were lost
                seen = True

    def close(self) -> None:
        self.sock.close()
        self.events.close()
        self.loop.close()

    async def _state(self) -> FibState:
        from glbd.netlink import const as c
        from glbd.netlink.codec import NhMsg, RtMsg
        from glbd.netlink.rtnl import nexthop_dump, route_dump

        t0 = time.monotonic()
        width: dict[int, int] = {}
        for row in await self.sock.dump_select(nexthop_dump(), NhMsg, (c.NHA_ID, c.NHA_GROUP)):
            nid = row.attrs.get(c.NHA_ID)
            if nid is not None:
                grp = row.attrs.get(c.NHA_GROUP)
                width[int.from_bytes(nid, sys.byteorder)] = len(grp) // 8 if grp else 1
        st = FibState()
        net = PREFIX_NET.network_address.packed[:2]
        rows = await self.sock.dump_select(
            route_dump(socket.AF_INET, table=254), RtMsg, (c.RTA_DST, c.RTA_NH_ID)
        )
        for row in rows:
            dst = row.attrs.get(c.RTA_DST)
            if dst is None or dst[:2] != net or row.header.dst_len < PREFIX_NET.prefixlen:
                continue
            st.routes += 1
            nh = row.attrs.get(c.RTA_NH_ID)
            w = width.get(int.from_bytes(nh, sys.byteorder), 0) if nh else 0
            st.widths[w] = st.widths.get(w, 0) + 1
        st.dump_s = time.monotonic() - t0
        return st

    def state(self) -> FibState:
        return self.loop.run_until_complete(self._state())


# ==================================================================================== speakers
def frr_config(n: int, hold: int, bfd_ms: int) -> str:
    """bgpd's config for the leaf (``bfd_ms`` 0: no BFD)."""
    lines = ["frr defaults datacenter", "hostname leaf", "log timestamp precision 3", "!"]
    if bfd_ms:
        lines += [
            "bfd",
            f" profile {BFD_PROFILE}",
            f"  receive-interval {bfd_ms}",
            f"  transmit-interval {bfd_ms}",
            "  detect-multiplier 3",
            " exit",
            "exit",
            "!",
        ]
    lines += [
        "route-map NOTHING deny 10",
        "exit",
        "!",
        f"router bgp {gm.LEAF_AS}",
        f" bgp router-id {gm.LEAF_ID}",
        " no bgp ebgp-requires-policy",
        " no bgp network import-check",
        " bgp bestpath as-path multipath-relax",
        " neighbor SPINES peer-group",
        f" neighbor SPINES remote-as {gm.SPINE_AS}",
        f" neighbor SPINES timers {max(1, hold // 3)} {hold}",
        " neighbor SPINES timers connect 1",
    ]
    if bfd_ms:
        lines.append(f" neighbor SPINES bfd profile {BFD_PROFILE}")
    for i in range(1, n + 1):
        sp, _ = gm.link_addrs(i)
        lines.append(f" neighbor {sp} peer-group SPINES")
    lines += [
        " address-family ipv4 unicast",
        "  neighbor SPINES route-map NOTHING out",
        "  maximum-paths 64",
        " exit-address-family",
        "exit",
        "!",
    ]
    return "\n".join(lines) + "\n"


class Speaker:
    """The speaker under test in the leaf namespace."""

    kind = ""

    def start(self) -> None:
        raise NotImplementedError

    def alive(self) -> bool:
        raise NotImplementedError

    def rss_mb(self) -> dict[str, float]:
        """Resident memory of each process, and the headline sum under ``"total"``."""
        raise NotImplementedError

    def pids(self) -> dict[str, int]:
        raise NotImplementedError

    def stop(self, keep: Path | None = None) -> None:
        raise NotImplementedError


class GlbdSpeaker(Speaker):
    kind = "glbd"

    def __init__(self, leaf: Any, args: argparse.Namespace, run_dir: Path) -> None:
        self.leaf, self.args, self.run_dir = leaf, args, run_dir
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        conf = self.run_dir / "glbd.toml"
        bfd_ms = self.args.bfd_ms
        cfg = argparse.Namespace(
            neighbors=self.args.neighbors, hold=self.args.hold, packed=True,
            bfd_ms=bfd_ms or 300, hb_ms=self.args.hb_ms,
        )  # fmt: skip
        text = gm.leaf_config(cfg, self.run_dir)
        if not bfd_ms:
            text = text.replace("[bfd]\n", "[bfd]\nenabled = false\n")
        if self.args.rt_priority is not None:  # a top-level key: before every section
            text = f"rt_priority = {self.args.rt_priority}\n" + text
        conf.write_text(text)
        log = open(self.run_dir / "glbd.daemon.log", "ab")  # noqa: SIM115 - handed to the child
        self.proc = self.leaf.popen(
            [sys.executable, "-m", "glbd", "run", "-c", str(conf)],
            stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )  # fmt: skip
        log.close()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def bfd_failures(self) -> dict[str, int]:
        """reason -> count of the BFD sessions glbd saw fail (its log)."""
        out: dict[str, int] = {}
        with contextlib.suppress(OSError), open(self.run_dir / "glbd.daemon.log") as f:
            for line in f:
                if '"bfd_state"' in line:
                    with contextlib.suppress(ValueError):
                        ev = json.loads(line)
                        if ev.get("failure"):
                            out[ev.get("reason", "?")] = out.get(ev.get("reason", "?"), 0) + 1
        return out

    def pids(self) -> dict[str, int]:
        return gm.tree(self.proc.pid) if self.proc is not None else {}

    def rss_mb(self) -> dict[str, float]:
        out = {name: (gm.rss_kb(pid) or 0) / 1024 for name, pid in self.pids().items()}
        out["total"] = sum(out.values())
        # the target counts glbd and ExaBGP (not the bridge and the BFD engine)
        out["glbd+exabgp"] = out.get("glbd", 0.0) + out.get("exabgp", 0.0)
        return out

    def stop(self, keep: Path | None = None) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


class FrrSpeaker(Speaker):
    kind = "frr"
    HEADLINE = ("bgpd", "zebra")

    def __init__(self, leaf: Any, args: argparse.Namespace) -> None:
        from glbdlab.frr import FrrInstance

        self.args = args
        self.inst = FrrInstance(leaf, hostname="leaf")

    @property
    def version(self) -> str:
        return str(self.inst.build.version)

    def start(self) -> None:
        conf = frr_config(self.args.neighbors, self.args.hold, self.args.bfd_ms)
        if self.args.keep:  # one log file for all daemons, with BGP's session events
            log = "/" + str((self.inst.log_dir / "frr.log").relative_to(self.inst.build.root))
            conf = f"log file {log} debugging\ndebug bgp neighbor-events\n" + conf
        self.inst.start(conf)

    def alive(self) -> bool:
        return all(self.inst.alive().values())

    def pids(self) -> dict[str, int]:
        return {d: p.pid for d, p in self.inst.procs.items()}

    def resets(self) -> dict[str, str]:
        """peer -> why bgpd last reset its session, for the peers that dropped one."""
        out: dict[str, str] = {}
        with contextlib.suppress(Exception):
            for addr, p in self.inst.vtysh_json("show bgp neighbors json").items():
                if p.get("connectionsDropped"):
                    out[addr] = f"{p.get('connectionsDropped')}x {p.get('lastResetDueTo')}"
        return out

    def rss_mb(self) -> dict[str, float]:
        out = {d: (gm.rss_kb(pid) or 0) / 1024 for d, pid in self.pids().items()}
        out["total"] = sum(out.get(d, 0.0) for d in self.HEADLINE)
        return out

    def stop(self, keep: Path | None = None) -> None:
        if keep is not None:  # the daemons' logs go with the instance's directories
            for name, text in self.inst.logs().items():
                (keep / f"frr-{name}").write_text(text)
        self.inst.stop()


# ======================================================================================= phases
class Run:
    """One speaker, one fresh pair of namespaces, one feeder: converge, then a peer restart."""

    def __init__(self, kind: str, args: argparse.Namespace, no: int) -> None:
        self.kind, self.args, self.no = kind, args, no
        self.res: dict[str, Any] = {"speaker": kind, "run": no}
        self.rss_max: dict[str, float] = {}
        self.polls = 0
        self.probe_cpu_s = 0.0
        self.pyspy: tuple[subprocess.Popen[bytes], Path] | None = None
        self.dump_s_max = 0.0

    def say(self, msg: str) -> None:
        print(f"  [{self.kind} #{self.no}] {msg}", flush=True)

    def sample_rss(self) -> dict[str, float]:
        rss = self.speaker.rss_mb()
        for k, v in rss.items():
            self.rss_max[k] = max(self.rss_max.get(k, 0.0), v)
        return rss

    def wait_fib(self, width: int, t_from: float, timeout: float, what: str) -> float | None:
        """Poll until all N prefixes are on ``width``-wide nexthops; the monotonic time of the
        end of the dump that saw it, or None after ``timeout``."""
        n_pfx = self.args.prefixes
        deadline = time.monotonic() + timeout
        last_print = time.monotonic()
        st: FibState | None = None
        t_dump = 0.0
        while True:
            if not self.speaker.alive():
                raise RuntimeError(f"{self.kind} died while waiting for {what}")
            now = time.monotonic()
            # a dump walks N routes expanded to n next hops: only when something changed
            if self.probe.changed() or st is None or now - t_dump > 5:
                r0 = time.process_time()
                st = self.probe.state()
                self.probe_cpu_s += time.process_time() - r0
                t_dump = now = time.monotonic()
                self.polls += 1
                self.dump_s_max = max(self.dump_s_max, st.dump_s)
            self.sample_rss()
            # how the routes reach the state: (s since t_from, routes, routes at width)
            self.res.setdefault("timeline", {}).setdefault(what, []).append(
                (round(now - t_from, 3), st.routes, st.at(width))
            )
            if st.routes == n_pfx and st.at(width) == n_pfx:
                return now
            if now > deadline:
                self.say(f"{what}: NOT reached in {timeout:g} s: {st.brief()}")
                return None
            if now - last_print >= self.args.progress:
                last_print = now
                self.say(
                    f"{what}: {now - t_from:5.1f} s, kernel {st.brief()}, feeder "
                    f"{self.feeder.last}, load {gm.load()}"
                )
            # 1 % of the elapsed time while converging, and twice a dump's time: the probe
            # takes at most a third of a core from the speaker
            grow = (now - t_from) / 100 if width == self.args.neighbors else 0.0
            time.sleep(min(max(self.args.poll, grow, 2 * st.dump_s), 1.0))

    def execute(self) -> dict[str, Any]:
        from glbdlab.netns import Lab, LabError

        args, res = self.args, self.res
        run_dir = Path(tempfile.mkdtemp(prefix=f"convergence-{self.kind}-"))
        self.feeder: gm.FeederProc | None = None  # type: ignore[assignment]
        self.probe: FibProbe | None = None  # type: ignore[assignment]
        try:
            with Lab() as lab:
                leaf, fab = gm.build(lab, args.neighbors)
                cfg_path = run_dir / "feeder.json"
                cfg_path.write_text(json.dumps({
                    "neighbors": args.neighbors, "prefixes": args.prefixes,
                    "remote_leaves": args.remote_leaves, "packed": True, "hold": args.hold,
                    "hb_ms": args.hb_ms, "bfd_ms": args.bfd_ms, "churn": args.churn,
                }))  # fmt: skip
                self.feeder = feeder = gm.FeederProc(fab, cfg_path)
                if not feeder.ready.wait(60):
                    raise LabError("feeder not ready in 60 s")
                self.probe = FibProbe(leaf.name)
                self.speaker: Speaker = (
                    GlbdSpeaker(leaf, args, run_dir) if self.kind == "glbd"
                    else FrrSpeaker(leaf, args)
                )  # fmt: skip
                if isinstance(self.speaker, FrrSpeaker):
                    res["frr_version"] = self.speaker.version
                res["load_start"] = gm.load()
                t0 = time.monotonic()
                self.speaker.start()
                res["start_call_s"] = time.monotonic() - t0
                self.profile_start("converge")
                self.converge(t0)
                if res.get("converged_s") is not None and args.restart != "none":
                    self.restart()
                rss = self.sample_rss()
                res["rss_end_mb"] = rss
                res["rss_max_mb"] = dict(self.rss_max)
                res["load_end"] = gm.load()
                res["polls"] = self.polls
                res["probe_cpu_s"] = self.probe_cpu_s
                res["dump_s_max"] = self.dump_s_max
                feeder.quiet = True
                self.speaker.stop(run_dir if args.keep else None)
        finally:
            self.profile_stop()
            if self.probe is not None:
                self.probe.close()
            if self.feeder is not None:
                self.feeder.stop()
            if args.keep:
                print(f"  run dir kept: {run_dir}", flush=True)
            else:
                shutil.rmtree(run_dir, ignore_errors=True)
        return res

    def converge(self, t0: float) -> None:
        args, res, feeder = self.args, self.res, self.feeder
        assert feeder is not None
        n = args.neighbors
        seen = self.wait_fib(n, t0, args.converge_timeout, f"convergence ({n}-wide)")
        self.profile_stop()
        first = feeder.find("established", since=t0)
        last = feeder.find("established", since=t0, n=n)
        res["first_established_s"] = first["t"] - t0 if first else None
        res["all_established_s"] = last["t"] - t0 if last else None
        sent = [e["t"] for s in range(1, n + 1) if (e := feeder.find("rib_sent", t0, spine=s))]
        res["feeder_sent_s"] = max(sent) - t0 if len(sent) == n else None
        downs = [e for e in list(feeder.events) if e.get("ev") == "bfd_down" and e["t"] >= t0]
        res["bfd_downs_feeder"] = len(downs)
        res["bfd_downs_feeder_reasons"] = sorted({str(e.get("reason")) for e in downs})
        res["sessions_established"] = sum(
            1 for e in list(feeder.events) if e.get("ev") == "established" and e["t"] >= t0
        )
        if isinstance(self.speaker, FrrSpeaker):
            res["frr_resets"] = self.speaker.resets()
        else:
            res["bfd_failures_glbd"] = self.speaker.bfd_failures()
        if res["bfd_downs_feeder"] or res.get("bfd_failures_glbd"):
            self.say(
                f"BFD flaps while converging: feeder saw {res['bfd_downs_feeder']} Downs "
                f"({', '.join(res['bfd_downs_feeder_reasons'])}), "
                f"glbd {res.get('bfd_failures_glbd')}"
            )
        if seen is None:
            res["converged_s"] = res["converged_from_established_s"] = None
            return
        res["converged_s"] = seen - t0
        res["converged_from_established_s"] = seen - first["t"] if first else None
        res["rss_converged_mb"] = self.sample_rss()
        self.say(
            f"converged: {seen - t0:.2f} s from start, "
            f"{res['converged_from_established_s'] or float('nan'):.2f} s from the first "
            f"Established (all {n} up at {res['all_established_s'] or float('nan'):.2f} s, "
            f"feeder done sending at {res['feeder_sent_s'] or float('nan'):.2f} s); RSS "
            f"{res['rss_converged_mb']['total']:.1f} MB; load {gm.load()}"
        )

    def restart(self) -> None:
        args, res, feeder = self.args, self.res, self.feeder
        assert feeder is not None
        n, spine = args.neighbors, args.neighbors
        time.sleep(args.settle)  # let the converged state settle before disturbing it
        mode = args.restart
        self.profile_start("restart")
        t_drop = time.monotonic()
        feeder.send(f"{'drop' if mode == 'close' else 'withdraw'} {spine}")
        down = self.wait_fib(n - 1, t_drop, args.restart_timeout, f"spine {spine} out")
        res["restart_down_s"] = down - t_drop if down is not None else None
        if down is not None:
            self.say(f"spine {spine} out of every group in {down - t_drop:.2f} s")
        t_back = time.monotonic()
        feeder.send(f"{'restore' if mode == 'close' else 'announce'} {spine}")
        up = self.wait_fib(n, t_back, args.restart_timeout, f"spine {spine} back")
        self.profile_stop()
        ev = feeder.find("established" if mode == "close" else "announce_sent", t_back, spine=spine)
        if ev is not None and mode == "withdraw":  # announce_sent is logged once all is sent
            ev = dict(ev, t=t_back)
        res["restart_up_from_restore_s"] = up - t_back if up is not None else None
        res["restart_reconnect_s"] = ev["t"] - t_back if ev is not None else None
        res["restart_up_s"] = up - ev["t"] if up is not None and ev is not None else None
        if up is not None:
            self.say(
                f"spine {spine} back in every group {res['restart_up_s']:.2f} s after its "
                f"session came back ({up - t_back:.2f} s after the restore)"
            )

    def profile_start(self, phase: str) -> None:
        """``--py-spy DIR``: sample glbd and its children (50 Hz, raw collapsed stacks) into
        DIR/glbd-RUN-PHASE.txt until :meth:`profile_stop`."""
        if not self.args.py_spy or not isinstance(self.speaker, GlbdSpeaker):
            return
        exe = Path(sys.executable).parent / "py-spy"
        if not exe.exists() or self.speaker.proc is None:
            self.say("py-spy is not installed in the venv: no profile")
            return
        out = Path(self.args.py_spy).resolve()
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"glbd-{self.no}-{phase}.txt"
        self.pyspy = (subprocess.Popen(
            [str(exe), "record", "-r", "50", "-f", "raw", "--subprocesses", "-o", str(path),
             "--pid", str(self.speaker.proc.pid)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ), path)  # fmt: skip

    def profile_stop(self) -> None:
        if self.pyspy is None:
            return
        proc, path = self.pyspy
        self.pyspy = None
        proc.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(60)
        self.res.setdefault("py_spy", []).append(str(path))
        self.say(f"py-spy profile: {path}")


# ===================================================================================== report
GENERIC = frozenset({
    "<module>", "main", "run", "_run_module_as_main", "_run_code", "Runner.run",
    "BaseEventLoop.run_until_complete", "BaseEventLoop.run_forever", "BaseEventLoop._run_once",
    "Handle._run", "Thread._bootstrap", "Thread._bootstrap_inner", "Thread.run", "cmdline",
})  # fmt: skip


def profile_summary(path: str, top: int = 30) -> str:
    """A py-spy raw file (``--py-spy``) as text: samples per process, then the functions with
    the largest inclusive share of each process's samples (idle waits included: read them as
    wall time, not CPU)."""
    procs: dict[str, int] = {}
    incl: dict[tuple[str, str], int] = {}
    for line in Path(path).read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        frames = stack.split(";")
        # --subprocesses: each stack starts with its process chain; the innermost names it
        chain = [f for f in frames if f.startswith("process ")]
        pid, _, cmd = chain[-1].partition(":") if chain else ("?", "", "")
        proc = cmd.strip('"')[:70] or f"glbd ({pid})"  # glbd's own cmdline shows empty
        n = int(count)
        procs[proc] = procs.get(proc, 0) + n
        seen: set[str] = set()
        for f in frames:
            name = f.split(" (")[0]
            if name.startswith("process ") or name in GENERIC or name in seen:
                continue
            seen.add(name)
            incl[(proc, name)] = incl.get((proc, name), 0) + n
    lines = [f"{path}: {sum(procs.values())} samples"]
    for proc, n in sorted(procs.items(), key=lambda kv: -kv[1]):
        lines.append(f"\n{n:7d} samples  {proc}")
        rows = sorted(((v, k[1]) for k, v in incl.items() if k[0] == proc), reverse=True)
        lines += [f"  {100 * v / n:5.1f} %  {name}" for v, name in rows[:top]]
    return "\n".join(lines)


KEYS = (
    ("converged_s", "full convergence from start, s"),
    ("converged_from_established_s", "full convergence from 1st Established, s"),
    ("restart_down_s", "peer restart: spine out of all groups, s"),
    ("restart_up_s", "peer restart: spine back in all, from its Established, s"),
    ("restart_up_from_restore_s", "peer restart: spine back in all, from the restore, s"),
)


def median(vs: list[float]) -> float | None:
    vs = sorted(vs)
    if not vs:
        return None
    m = len(vs) // 2
    return vs[m] if len(vs) % 2 else (vs[m - 1] + vs[m]) / 2


def summarize(results: list[dict[str, Any]], speakers: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for s in speakers:
        rs = [r for r in results if r["speaker"] == s]
        d: dict[str, Any] = {}
        for k, _ in KEYS:
            vals = [r[k] for r in rs if r.get(k) is not None]
            d[k] = {"median": median(vals), "min": min(vals, default=None),
                    "max": max(vals, default=None), "n": len(vals), "runs": len(rs)}  # fmt: skip
        for k in ("rss_converged_mb", "rss_end_mb", "rss_max_mb"):
            vals = [r[k]["total"] for r in rs if k in r]
            d[k] = max(vals, default=None)
        maxes = [r.get("rss_max_mb", {}) for r in rs]
        vals = [m["glbd+exabgp"] for m in maxes if "glbd+exabgp" in m]
        d["rss_glbd_exabgp_max_mb"] = max(vals, default=None)
        out[s] = d
    if "glbd" in out and "frr" in out:
        out["ratio_glbd_frr"] = {
            k: (g / f if g is not None and f else None)
            for k, _ in KEYS
            for g, f in [(out["glbd"][k]["median"], out["frr"][k]["median"])]
        }
    return out


def fmt(v: float | None, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def print_summary(summary: dict[str, Any], speakers: list[str]) -> None:
    cols = [*speakers] + (["glbd/frr"] if "ratio_glbd_frr" in summary else [])
    print("\n| what (median over runs) | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * len(cols))
    for k, label in KEYS:
        row = [fmt(summary[s][k]["median"]) for s in speakers]
        if "ratio_glbd_frr" in summary:
            row.append(fmt(summary["ratio_glbd_frr"][k], ".2f") + "x")
        print(f"| {label} | " + " | ".join(row) + " |")
    for k, label in (("rss_converged_mb", "RSS at convergence, MB"),
                     ("rss_max_mb", "RSS max, MB")):  # fmt: skip
        row = [fmt(summary[s][k], ".1f") for s in speakers]
        if "ratio_glbd_frr" in summary:
            g, f = summary["glbd"][k], summary["frr"][k]
            row.append(fmt(g / f if g and f else None) + "x")
        print(f"| {label} | " + " | ".join(row) + " |")
    if "glbd" in summary and summary["glbd"]["rss_glbd_exabgp_max_mb"] is not None:
        print(
            f"glbd + ExaBGP alone, max: {summary['glbd']['rss_glbd_exabgp_max_mb']:.1f} MB "
            "(target <= 150)"
        )
    print(
        "(RSS: glbd + ExaBGP + its bridge + the BFD engine; FRR: bgpd + zebra, the other "
        "daemons listed per run)",
        flush=True,
    )


def commit() -> str:
    res = subprocess.run(
        ["git", "-C", str(Path(__file__).resolve().parent.parent), "log", "-1",
         "--format=%h"], capture_output=True, text=True,
    )  # fmt: skip
    return res.stdout.strip()[:100]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--speakers", default="glbd,frr", help="comma list of glbd, frr")
    ap.add_argument("--neighbors", type=int, default=64)
    ap.add_argument("--prefixes", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=1, help="runs per speaker (alternating)")
    ap.add_argument("--remote-leaves", type=int, default=32, help="originating leaves (NNHNs)")
    ap.add_argument("--hb-ms", type=int, default=100, help="feeder heartbeat interval")
    ap.add_argument(
        "--bfd-ms", type=int, default=300, help="BFD tx/rx interval (x3) on both sides; 0: off"
    )
    ap.add_argument("--hold", type=int, default=9, help="BGP hold time")
    ap.add_argument("--churn", type=float, default=0.0, help="heartbeat band toggles per second")
    ap.add_argument("--restart", choices=("close", "withdraw", "none"), default="close")
    ap.add_argument(
        "--rt-priority",
        type=int,
        default=None,
        metavar="N",
        help="glbd's rt_priority (default: glbd's own default); 0: its loop never real time",
    )
    ap.add_argument("--settle", type=float, default=2.0, help="wait after convergence, s")
    ap.add_argument("--poll", type=float, default=0.1, help="FIB poll interval (minimum), s")
    ap.add_argument("--converge-timeout", type=float, default=900.0)
    ap.add_argument("--restart-timeout", type=float, default=120.0)
    ap.add_argument("--progress", type=float, default=10.0, help="progress line period, s")
    ap.add_argument("--py-spy", metavar="DIR", help="profile glbd (and children) into DIR")
    ap.add_argument("--out", metavar="FILE", help="JSON results")
    ap.add_argument("--keep", action="store_true", help="keep the run directories")
    ap.add_argument("--profile-summary", metavar="FILE", help="print a --py-spy file and exit")
    args = ap.parse_args(argv)
    if args.profile_summary:
        print(profile_summary(args.profile_summary))
        return 0
    speakers = [s.strip() for s in args.speakers.split(",") if s.strip()]
    if not speakers or any(s not in ("glbd", "frr") for s in speakers):
        ap.error("--speakers: a comma list of glbd, frr")
    if not 2 <= args.neighbors <= 250 or not 1 <= args.remote_leaves <= 250:
        ap.error("--neighbors: 2..250, --remote-leaves: 1..250")
    if os.geteuid() != 0:
        print("needs root (network namespaces)", file=sys.stderr)
        return 2
    started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    head = commit()
    bfd = f"{args.bfd_ms} ms x 3" if args.bfd_ms else "off"
    print(
        f"convergence: {started}, commit {head}, {os.cpu_count()} CPUs, load {gm.load()}; "
        f"speakers {','.join(speakers)} x {args.runs}; {args.neighbors} neighbours x "
        f"{args.prefixes} prefixes (/{gm.prefix_len(args.prefixes)}, {args.remote_leaves} "
        f"originating leaves, packed UPDATEs); BFD {bfd}, heartbeats "
        f"{args.hb_ms} ms, hold {args.hold} s; restart: {args.restart}",
        flush=True,
    )
    results: list[dict[str, Any]] = []
    failed = False
    for no in range(1, args.runs + 1):
        for s in speakers:
            print(f"\n{s}, run {no}: load {gm.load()}", flush=True)
            try:
                r = Run(s, args, no).execute()
            except Exception as e:  # a failed run is a result; the others still run
                print(f"  [{s} #{no}] FAILED: {type(e).__name__}: {e}", flush=True)
                r = {"speaker": s, "run": no, "error": f"{type(e).__name__}: {e}"}
            results.append(r)
            ok = r.get("converged_s") is not None and (
                args.restart == "none"
                or (r.get("restart_down_s") is not None and r.get("restart_up_s") is not None)
            )
            failed |= not ok
            rss = r.get("rss_converged_mb", {})
            if rss:
                print(
                    f"  [{s} #{no}] RSS at convergence: "
                    + ", ".join(f"{k} {v:.1f}" for k, v in rss.items())
                    + " MB",
                    flush=True,
                )
    summary = summarize(results, speakers)
    print(f"\nResults ({started}, commit {head}, load at end {gm.load()})")
    print_summary(summary, speakers)
    if args.out:
        Path(args.out).write_text(
            json.dumps(
                {
                    "date": started,
                    "commit": head,
                    "cpus": os.cpu_count(),
                    "args": vars(args),
                    "results": results,
                    "summary": summary,
                },
                indent=1,
            )
        )
    if failed:
        print("some run did not converge or did not complete its peer restart", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
