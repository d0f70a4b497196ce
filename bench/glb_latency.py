"""End-to-end GLB latency in the lab: real glbd daemons, real kernel.

Run as root (builds and deletes its own namespaces)::

    .venv/bin/python bench/glb_latency.py                 # 200 band + 200 cut events, 20 BFD
    .venv/bin/python bench/glb_latency.py --events 30 --bfd 5      # quick (~1 min)
    .venv/bin/python bench/glb_latency.py --kinds band --events 400

Fabric: ``leaf_spine(2, 2)`` (hosts included), glbd on every spine (helper) and leaf
(load balancer), ``GlbdOptions`` defaults (heartbeat 20 ms, link sampling 10 ms, BFD 50 ms x 3,
resilient groups) with ``capacity_mbps = --rate``. spine1 -> leaf2 is tbf-shaped to ``--rate``.
``ip -ts monitor`` (:class:`~glbdlab.demo.IpMonitorWatcher`, SCHED_FIFO 20) in leaf1's
namespace timestamps every ``RTM_NEWNEXTHOP`` of a group (the Python
:class:`~glbdlab.demo.NexthopWatcher` runs beside it; how late it stamps the same messages is
reported as ``python_watcher_late_ms``); spines log ``link_band`` (JSON, ISO time with microseconds)
on every band/down change of one of their links. Same machine, same wall clock.

Event kinds, each measured on leaf1's group for leaf2's prefix (members: spine1, spine2):

* ``band``: a UDP generator in spine1 (its own process, paced bursts, 2x ``--rate``) is switched
  on and off into the shaped spine1->leaf2 link. One event per switch: spine1's ``link_band``
  record for ``leaf2`` -> leaf1's first RTM_NEWNEXTHOP whose weights moved (on: unequal,
  off: any change after the switch). The band record paired with a nexthop message is the last
  one logged before it (the change that caused that write); the first band record after the switch
  is reported too (``first band -> nh``).
* ``cut``: ``ip link set leaf2 down`` on spine1 (carrier loss on spine1's end), then up again as
  soon as leaf1 reacted. ``cut`` events: spine1's ``link_band`` record with ``down=true`` ->
  leaf1's RTM_NEWNEXTHOP with spine1 gone (heartbeat link-down flag path); ``restore`` events:
  ``down=false`` record -> RTM_NEWNEXTHOP with spine1 back. The cut is short (~latency + one
  ``ip`` command) so BFD (150 ms) and BGP do not notice; cycles where they did are counted.
* ``bfd``: nftables drops everything on leaf1's interface to spine1 (link stays up). drop ->
  leaf1's RTM_NEWNEXTHOP without spine1, against the configured detection time
  (detect_mult x interval); target detection + 5 ms. Measured from *before* the ``nft`` command
  (conservative: the drop takes effect somewhere inside that command) and, separately, from
  leaf1's ``bfd_state`` log record (glbd's own reaction time).

Caveats: the ``link_band`` record is written right after the new heartbeat has been handed to
the sender, so the band -> nexthop figure excludes the microseconds between the band decision
and that log call; the nexthop timestamp is taken when ``ip monitor`` reads the message (netlink
has no kernel timestamps), a single-threaded real-time C process.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from glbdlab.demo import IpMonitorWatcher, NexthopWatcher
from glbdlab.netns import LabError
from glbdlab.nodes import PERMIT_ALL, GlbdNode, GlbdOptions, kernel_group_for, stop_all, wait_until
from glbdlab.procstat import cpu_ticks, descendants
from glbdlab.topology import Fabric, leaf_spine

from glbd.config.config_quality import LinkQualitySection

Entries = tuple[tuple[int, int], ...]

# A paced UDP source: stdin "on [RATE [BURST_MS]]" / "off" / "quit"; sends 1200-byte datagrams
# at RATE Mbit/s (default argv[2]) in BURST_MS bursts (default 2 ms) while on, never more than
# one burst's worth at once (no catch-up after a stall). After the first
# datagram of an "on" period it prints "first <time.time() before that sendto>" (the congestion's
# first packet, on the bench's clock). Its own process so that the measuring process is not
# slowed down.
GENERATOR = r"""
import socket, sys, threading, time
dst, rate0 = sys.argv[1], float(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
payload = b"\x00" * 1200
state = {"on": False, "quit": False, "gen": 0, "rate": rate0, "burst": 0.002}
def ctl():
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        if cmd[0] == "on":
            state["rate"] = float(cmd[1]) if len(cmd) > 1 else rate0
            state["burst"] = float(cmd[2]) / 1e3 if len(cmd) > 2 else 0.002
            state["gen"] += 1
        state["on"] = cmd[0] == "on"
    state["quit"] = True
threading.Thread(target=ctl, daemon=True).start()
sent, t0, gen = 0, None, 0
while not state["quit"]:
    if not state["on"]:
        t0 = None
        time.sleep(0.0005)
        continue
    if gen != state["gen"]:
        gen, t0 = state["gen"], None
    pps = state["rate"] * 1e6 / 8 / (1200 + 28)
    now = time.monotonic()
    if t0 is None:
        t0, sent = now, 0
        t_first = time.time()
        try:
            s.sendto(payload, (dst, 9))
        except OSError:
            pass
        sent = 1
        print(f"first {t_first:.6f}", flush=True)
    due = int((now - t0) * pps) + 1
    # no catch-up after a stall (a busy machine): the lost time is skipped, so a stall never
    # turns into a burst larger than one period's
    sent = max(sent, due - int(pps * state["burst"]) - 1)
    while sent < due:
        try:
            s.sendto(payload, (dst, 9))
        except OSError:
            pass
        sent += 1
    time.sleep(state["burst"])
"""


class Generator:
    """The paced UDP source (:data:`GENERATOR`) in one namespace, driven over stdin; keeps the
    "first packet" times it reports."""

    def __init__(self, fab: Fabric, node: str, dst: str, rate_mbps: float) -> None:
        self.proc = fab.ns(node).popen(
            [sys.executable, "-c", GENERATOR, dst, str(rate_mbps)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self.firsts: list[float] = []
        self._cv = threading.Condition()
        threading.Thread(target=self._read, name="gen-out", daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            parts = line.split()
            if len(parts) == 2 and parts[0] == b"first":
                with self._cv:
                    self.firsts.append(float(parts[1]))
                    self._cv.notify_all()

    def send(self, cmd: str) -> float:
        t = time.time()
        assert self.proc.stdin is not None
        self.proc.stdin.write(cmd.encode() + b"\n")
        self.proc.stdin.flush()
        return t

    def on(self, rate_mbps: float | None = None, burst_ms: float | None = None) -> float:
        """Switch on; returns the time of the period's first datagram (the generator's own
        timestamp, taken just before its first ``sendto``)."""
        with self._cv:
            n = len(self.firsts)
        cmd = "on" if rate_mbps is None else f"on {rate_mbps:g} {burst_ms or 2:g}"
        self.send(cmd)
        with self._cv:
            if not self._cv.wait_for(lambda: len(self.firsts) > n, 2.0):
                raise LabError("the generator did not report its first packet")
            return self.firsts[n]

    def off(self) -> float:
        return self.send("off")

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.send("quit")
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


class NftShell:
    """A persistent ``nft -i`` in one namespace with its own table (``glbbench``): adding or
    removing the interface from the drop set is acknowledged by a listing, so the moment the
    drop takes effect is bracketed to ~1 ms (a fresh ``nft`` process takes 10-30 ms).

    Without ``egress``: what goes in and out of the interfaces in the set, at the input and
    output hooks. With ``egress`` (an interface): what leaves it, at its netdev egress hook, as a
    wire would lose it (the peer's BFD kernel path runs before any input hook)."""

    SETUP = (
        "add table inet glbbench\n"
        "add set inet glbbench dropif { type ifname; }\n"
        "add chain inet glbbench input { type filter hook input priority -20; }\n"
        "add chain inet glbbench output { type filter hook output priority -20; }\n"
        "add rule inet glbbench input iifname @dropif drop\n"
        "add rule inet glbbench output oifname @dropif drop\n"
    )
    EGRESS = (
        "add table netdev glbbench\n"
        "add set netdev glbbench dropif {{ type ifname; }}\n"
        'add chain netdev glbbench out {{ type filter hook egress device "{dev}" priority -20; }}\n'
        "add rule netdev glbbench out oifname @dropif drop\n"
    )

    def __init__(self, fab: Fabric, node: str, egress: str | None = None) -> None:
        self.family = "netdev" if egress else "inet"
        self.proc = fab.ns(node).popen(["nft", "-i"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self._cmd(self.EGRESS.format(dev=egress) if egress else self.SETUP)

    def _cmd(self, text: str) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write((text + f"list set {self.family} glbbench dropif\n").encode())
        self.proc.stdin.flush()
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise LabError("nft -i exited")
            if line.rstrip() == b"}":
                return

    def drop(self, ifname: str) -> None:
        self._cmd(f'add element {self.family} glbbench dropif {{ "{ifname}" }}\n')

    def undrop(self, ifname: str) -> None:
        self._cmd(f'delete element {self.family} glbbench dropif {{ "{ifname}" }}\n')

    def close(self) -> None:
        with contextlib.suppress(Exception):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(5)


class LinkSwitch:
    """Link down/up of one interface from this process (rtnetlink, acknowledged): no ``ip``
    process start between the timestamp and the carrier loss."""

    def __init__(self, fab: Fabric, node: str, ifname: str) -> None:
        from pyroute2 import IPRoute

        with fab.ns(node).entered():
            self.ipr = IPRoute()
        self.idx = self.ipr.link_lookup(ifname=ifname)[0]

    def set(self, up: bool) -> None:
        self.ipr.link("set", index=self.idx, state="up" if up else "down")

    def close(self) -> None:
        self.ipr.close()


class Sniffer:
    """Kernel timestamps (SO_TIMESTAMPNS) of the UDP datagrams to ``port`` that cross one
    interface in one direction, seen by an AF_PACKET socket (ahead of nftables' input hook, so
    also the packets a drop rule will discard). ``on_packet(t, udp_payload)`` runs on the
    sniffer's thread."""

    def __init__(
        self,
        fab: Fabric,
        node: str,
        ifname: str,
        port: int,
        on_packet: Callable[[float, bytes], None],
        *,
        outgoing: bool = False,
    ) -> None:
        # transmitted packets reach only ETH_P_ALL packet sockets (dev_queue_xmit_nit)
        proto = 0x0003 if outgoing else 0x0800
        with fab.ns(node).entered():
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(proto))
        self.sock.bind((ifname, proto))
        self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.sock.settimeout(0.2)
        self.port = port
        self.outgoing = outgoing
        self.on_packet = on_packet
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="sniff", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop:
            try:
                data, anc, _flags, addr = self.sock.recvmsg(2048, 64)
            except TimeoutError:
                continue
            except OSError:
                return
            if (addr[2] == socket.PACKET_OUTGOING) != self.outgoing:
                continue
            if addr[1] != 0x0800 or len(data) < 28 or data[9] != 17:
                continue
            ihl = (data[0] & 0x0F) * 4
            if int.from_bytes(data[ihl + 2 : ihl + 4], "big") != self.port:
                continue
            t = time.time()
            for level, kind, raw in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    sec, nsec = struct.unpack("qq", raw[:16])
                    t = sec + nsec / 1e9
            self.on_packet(t, data[ihl + 8 :])

    def close(self) -> None:
        self._stop = True
        self._thread.join(1)
        self.sock.close()


class BfdSniffer(Sniffer):
    """Arrival times of BFD control packets (UDP 3784) on one interface."""

    def __init__(self, fab: Fabric, node: str, ifname: str) -> None:
        self.times: list[float] = []
        super().__init__(fab, node, ifname, 3784, lambda t, _d: self.times.append(t))

    def last_before(self, t: float) -> float | None:
        prev = [x for x in list(self.times) if x < t]
        return prev[-1] if prev else None

    def any_between(self, a: float, b: float) -> bool:
        return any(a <= x <= b for x in list(self.times))


class HbSniffer(Sniffer):
    """Heartbeats a spine sends out of one interface: every change of the (band, down) it
    reports for one far end, with the kernel's transmit timestamp."""

    def __init__(self, fab: Fabric, node: str, ifname: str, far_end: str) -> None:
        from heartbeat import wire

        self.wire = wire
        self.far = wire.node_id(far_end)
        self.state: tuple[int, bool] | None = None
        self.changes: list[tuple[float, int, bool]] = []
        super().__init__(fab, node, ifname, 6149, self._packet, outgoing=True)

    def _packet(self, t: float, data: bytes) -> None:
        try:
            hb = self.wire.decode(data)
        except ValueError:
            return
        for e in hb.entries:
            if e.far_end_id == self.far:
                st = (e.band, e.down)
                if st != self.state:
                    self.state = st
                    self.changes.append((t, e.band, e.down))
                return

    def last_change(
        self, t0: float, t1: float, down: bool | None = None
    ) -> tuple[float, int, bool] | None:
        cs = [c for c in list(self.changes) if t0 <= c[0] <= t1 and (down is None or c[2] == down)]
        return cs[-1] if cs else None


SO_TIMESTAMPNS = 35


def watcher_lateness(late: NexthopWatcher, ref: IpMonitorWatcher) -> dict[str, Any]:
    """How much later ``late`` stamped the nexthop group messages than ``ref`` (ms): the same
    (group, entries) messages paired in order."""
    from collections import defaultdict

    seen: dict[tuple[int, Entries], list[float]] = defaultdict(list)
    for t, nid, es in list(ref.events):
        seen[(nid, es)].append(t)
    deltas: list[float] = []
    used: dict[tuple[int, Entries], int] = defaultdict(int)
    for t, nid, es in list(late.events):
        key = (nid, es)
        i = used[key]
        if i < len(seen[key]):
            deltas.append((t - seen[key][i]) * 1e3)
            used[key] = i + 1
    return {
        "n": len(deltas),
        "p50": round(pct(deltas, 0.5), 2) if deltas else None,
        "p99": round(pct(deltas, 0.99), 2) if deltas else None,
        "max": round(max(deltas), 2) if deltas else None,
    }


def load() -> str:
    a, b, c = os.getloadavg()
    return f"{a:.2f} {b:.2f} {c:.2f}"


def iso_ts(rec: dict[str, Any]) -> float | None:
    ts = rec.get("timestamp")
    if not isinstance(ts, str):
        return None
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class LogTail:
    """Incremental reader of a glbd JSON-lines log: keeps records of the wanted events."""

    def __init__(self, path: Path, events: tuple[str, ...]) -> None:
        self.path = path
        self.want = events
        self.pos = 0
        self.buf = b""
        self.records: list[dict[str, Any]] = []

    def poll(self) -> list[dict[str, Any]]:
        with contextlib.suppress(OSError), open(self.path, "rb") as f:
            f.seek(self.pos)
            data = f.read()
            self.pos += len(data)
            self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        for line in lines:
            if not any(e.encode() in line for e in self.want):
                continue
            with contextlib.suppress(ValueError):
                rec = json.loads(line)
                if rec.get("event") in self.want:
                    t = iso_ts(rec)
                    if t is not None:
                        rec["_t"] = t
                        self.records.append(rec)
        return self.records

    def since(self, t: float, pred: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
        self.poll()
        return [r for r in self.records if r["_t"] >= t and pred(r)]


def _unequal(es: Entries) -> bool:
    return len(es) == 2 and len({w for _, w in es}) > 1


def _two(es: Entries) -> bool:
    return len(es) == 2


def pct(values: list[float], q: float) -> float:
    """Percentile with linear interpolation between closest ranks (q in [0, 100])."""
    v = sorted(values)
    if not v:
        return float("nan")
    k = (len(v) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


@dataclass
class Series:
    name: str
    path: str
    values: list[float] = field(default_factory=list)  # ms
    missed: int = 0
    load_start: str = ""
    load_end: str = ""
    notes: list[str] = field(default_factory=list)

    def row(self, target: str) -> str:
        v = self.values
        if not v:
            return f"| {self.name} | {self.path} | 0 | - | - | - | - | {target} | {self.missed} |"
        return (
            f"| {self.name} | {self.path} | {len(v)} | {pct(v, 50):.1f} | {pct(v, 99):.1f} | "
            f"{max(v):.1f} | {min(v):.1f} | {target} | {self.missed} |"
        )

    def to_dict(self) -> dict[str, Any]:
        v = self.values
        return {
            "name": self.name,
            "n": len(v),
            "p50_ms": round(pct(v, 50), 2) if v else None,
            "p99_ms": round(pct(v, 99), 2) if v else None,
            "max_ms": round(max(v), 2) if v else None,
            "min_ms": round(min(v), 2) if v else None,
            "samples_ms": sorted(round(x, 3) for x in v),  # for bench/plots.py's CDF
            "missed": self.missed,
            "load_start": self.load_start,
            "load_end": self.load_end,
            "notes": self.notes,
        }


class Bench:
    def __init__(
        self,
        fab: Fabric,
        nodes: dict[str, GlbdNode],
        watch: IpMonitorWatcher,
        prefix: str,
        args: argparse.Namespace,
    ) -> None:
        self.fab = fab
        self.nodes = nodes
        self.watch = watch
        self.prefix = prefix
        self.args = args
        self.spine_log = LogTail(nodes["spine1"].log, ("link_band",))
        self.leaf_log = LogTail(nodes["leaf1"].log, ("bfd_state",))
        leaf2_id = fab.topo.node("leaf2").router_id
        assert leaf2_id is not None
        self.hb = HbSniffer(fab, "spine1", fab.ifname("spine1", "leaf1"), leaf2_id)
        self.verbose = args.verbose

    # --- watcher helpers -----------------------------------------------------------------------
    def nh_after(self, t: float, pred: Callable[[Entries], bool], timeout: float) -> float | None:
        deadline = time.monotonic() + timeout
        while True:
            for at, _nid, entries in list(self.watch.events):
                if at >= t and pred(entries):
                    return at
            if time.monotonic() > deadline:
                return None
            time.sleep(0.005)

    def out_after(self, t: float, timeout: float) -> float | None:
        """First moment after ``t`` that spine1 left leaf1's route for the prefix: a group
        message with one member or the route moving (to another group, or deleted)."""
        deadline = time.monotonic() + timeout
        while True:
            cands = [at for at, _n, es in list(self.watch.events) if at >= t and len(es) == 1]
            cands += [
                at for at, p, _nh, _d in list(self.watch.routes) if at >= t and p == self.prefix
            ]
            if cands:
                return min(cands)
            if time.monotonic() > deadline:
                return None
            time.sleep(0.005)

    def back_in(self, timeout: float) -> bool:
        with contextlib.suppress(LabError):
            wait_until(
                lambda: len(kernel_group_for(self.fab, "leaf1", self.prefix)) == 2,
                timeout,
                interval=0.02,
                what="spine1 back in leaf1's group",
            )
            return True
        return False

    def bands(self, t: float, t_end: float, *, down: bool | None = None) -> list[dict[str, Any]]:
        return [
            r
            for r in self.spine_log.since(t, lambda r: r.get("ifname") == "leaf2")
            if r["_t"] <= t_end and (down is None or bool(r.get("down")) == down)
        ]

    # --- band changes from real congestion -----------------------------------------------------
    def run_band(self, n_events: int) -> list[Series]:
        s = Series("band (congestion on/off)", "spine1 band change -> leaf1 RTM_NEWNEXTHOP")
        wire_s = Series("band, from the wire", "spine1 hb tx w/ new band -> leaf1 RTM_NEWNEXTHOP")
        log_s = Series("band, from the log", "spine1 link_band record -> leaf1 RTM_NEWNEXTHOP")
        out = [s, wire_s, log_s]
        for x in out:
            x.load_start = load()
        gen = Generator(self.fab, "spine1", self.fab.addr("leaf2", "spine1"), 2 * self.args.rate)

        def switch(on: bool) -> float:
            return gen.send("on" if on else "off")

        try:
            on = True
            timeouts = 0
            while len(s.values) + s.missed < n_events:
                t_sw = switch(on)
                # on: weights became unequal; off: any rewrite of the two-member group
                pred = _unequal if on else _two
                t_nh = self.nh_after(t_sw, pred, self.args.timeout)
                if t_nh is None:
                    s.missed += 1
                    timeouts += 1
                    s.notes.append(
                        f"{'on' if on else 'off'} switch: no nexthop change in "
                        f"{self.args.timeout:g} s"
                    )
                    if timeouts == 1:
                        self.diag("band-timeout")
                    if timeouts > 5 and not s.values:
                        raise LabError("congestion does not move leaf1's weights")
                else:
                    time.sleep(0.1)  # let the log catch up
                    lat = self.pair(t_sw, t_nh, None, s, wire_s, log_s)
                    if self.verbose and lat is not None:
                        print(
                            f"  {'on ' if on else 'off'} nh +{lat:.1f} ms at {t_nh:.4f}",
                            flush=True,
                        )
                time.sleep(self.args.hold)
                if on:
                    on = False
                else:
                    # back to equal before the next congestion
                    with contextlib.suppress(LabError):
                        wait_until(
                            lambda: (
                                len(set(kernel_group_for(self.fab, "leaf1", self.prefix).values()))
                                == 1
                            ),
                            10,
                            interval=0.02,
                            what="weights equal again",
                        )
                    time.sleep(self.args.hold)
                    on = True
                if len(s.values) % 20 == 0 and s.values and not self.verbose:
                    print(f"  band: {len(s.values)} events, load {load()}", flush=True)
        finally:
            gen.close()
        for x in out:
            x.load_end = load()
        return out

    def diag(self, tag: str) -> None:
        """leaf1's view when an event timed out: its kernel group for the prefix, and its
        quality, heartbeat, counter and status answers, into the run directory."""
        out: dict[str, Any] = {"kernel_group": kernel_group_for(self.fab, "leaf1", self.prefix)}
        evs = list(self.watch.events)
        two = [e for e in evs if len(e[2]) == 2]
        out["watcher"] = {
            "events": len(evs),
            "last_age_s": time.time() - evs[-1][0] if evs else None,
            "two_member": [(round(time.time() - t, 3), nid, es) for t, nid, es in two[-5:]],
        }
        for cmd in ("status", "quality", "heartbeats", "counters"):
            try:
                out[cmd] = self.nodes["leaf1"].request(cmd, timeout=10)
            except Exception as e:  # a stuck daemon is itself the finding
                out[cmd] = repr(e)
        path = self.args.run_dir / f"diag-{tag}-{time.time():.0f}.json"
        path.write_text(json.dumps(out, indent=1, default=str))
        print(
            f"  {tag}: leaf1 group {out['kernel_group']}, watcher {out['watcher']}; "
            f"details in {path}",
            flush=True,
        )

    # --- from the congestion itself -----------------------------------------------------------
    def calm(self, timeout: float = 15.0) -> bool:
        """Equal weights at leaf1 and spine1 advertising band 7 (up) for leaf2 again."""
        with contextlib.suppress(LabError):
            wait_until(
                lambda: (
                    self.hb.state == (7, False)
                    and len(set(kernel_group_for(self.fab, "leaf1", self.prefix).values())) == 1
                    and len(kernel_group_for(self.fab, "leaf1", self.prefix)) == 2
                ),
                timeout,
                interval=0.02,
                what="spine1 at band 7 and equal weights at leaf1",
            )
            return True
        return False

    def band_change_at(self, t0: float, t_nh: float) -> tuple[float | None, float | None]:
        """(time of the spine1 band change leaf1 acted on at ``t_nh``, time of spine1's first
        band change after ``t0``): each the earlier of its first heartbeat on the wire and its
        ``link_band`` record."""
        ch = self.hb.last_change(t0, t_nh, False)
        recs = self.bands(t0, t_nh + 1.0, down=False)
        mine = recs
        if ch is not None:
            mine = [r for r in recs if r.get("band") == ch[1]]
        before = [r for r in mine if r["_t"] <= t_nh]
        rec = before[-1] if before else (mine[0] if mine else None)
        cands = [x for x in (ch[0] if ch else None, rec["_t"] if rec else None) if x is not None]
        acted = min(cands) if cands else None
        firsts = [c[0] for c in list(self.hb.changes) if c[0] >= t0][:1]
        firsts += [r["_t"] for r in recs[:1]]
        return acted, (min(firsts) if firsts else None)

    def run_congestion(self, n_events: int) -> tuple[list[Series], dict[str, Any]]:
        """Congestion onsets: spine1's generator at 2x the shaped rate from idle. Each event runs
        from the generator's first datagram to leaf1's first RTM_NEWNEXTHOP with unequal
        weights, split at the spine1 band change that write carried."""
        what = "leaf1 RTM_NEWNEXTHOP, weights moved"
        tot = Series("congestion (first packet -> leaf)", f"first congesting packet -> {what}")
        det = Series("congestion -> band change", "first packet -> spine1 band change (that one)")
        prop = Series("band change -> leaf", f"that spine1 band change -> {what}")
        first = Series("congestion -> first band change", "first packet -> spine1's first change")
        out = [tot, det, prop, first]
        for x in out:
            x.load_start = load()
        gen = Generator(self.fab, "spine1", self.fab.addr("leaf2", "spine1"), 2 * self.args.rate)
        rng = random.Random(21)
        t_start = time.time()
        n_band = self._band_records()
        not_calm = 0
        try:
            while len(tot.values) + tot.missed < n_events:
                if not self.calm():
                    not_calm += 1
                # a random phase against the spine's 10 ms sampling
                time.sleep(self.args.hold + rng.uniform(0, 0.02))
                t0 = gen.on()
                t_nh = self.nh_after(t0, _unequal, self.args.timeout)
                if t_nh is None:
                    tot.missed += 1
                    tot.notes.append(f"no weight change in {self.args.timeout:g} s")
                    if tot.missed > 5 and not tot.values:
                        raise LabError("congestion does not move leaf1's weights")
                else:
                    time.sleep(0.1)  # the log catches up
                    acted, t_first = self.band_change_at(t0, t_nh)
                    tot.values.append((t_nh - t0) * 1e3)
                    if acted is None:
                        det.missed += 1
                    else:
                        det.values.append((acted - t0) * 1e3)
                        prop.values.append((t_nh - acted) * 1e3)
                    if t_first is not None:
                        first.values.append((t_first - t0) * 1e3)
                    if self.verbose:
                        d = f"{(acted - t0) * 1e3:.1f}" if acted else "-"
                        print(f"  onset -> band {d} ms -> leaf {(t_nh - t0) * 1e3:.1f} ms")
                gen.off()
                done = len(tot.values)
                if done % 20 == 0 and done and not self.verbose:
                    print(f"  congestion: {done} events, load {load()}", flush=True)
        finally:
            gen.close()
            self.calm()
        for x in out:
            x.load_end = load()
        cycles = len(tot.values) + tot.missed
        info = {
            "duration_s": round(time.time() - t_start, 1),
            "cycles": cycles,
            "band_changes": self._band_records() - n_band,
            "band_changes_per_cycle": round((self._band_records() - n_band) / max(cycles, 1), 2),
            "not_calm_before_onset": not_calm,
        }
        return out, info

    def _band_records(self) -> int:
        return len(self.bands(0.0, float("inf")))

    def run_quiet(self, duration: float, load_frac: float, burst_ms: float) -> dict[str, Any]:
        """No congestion: ``load_frac`` x the shaped rate from spine1 to leaf2 (0: no traffic)
        in ``burst_ms`` bursts, for ``duration`` s after a settle time. Every spine1 band change
        for leaf2 in that window is a false one, and so is every weight move at leaf1."""
        gen = Generator(self.fab, "spine1", self.fab.addr("leaf2", "spine1"), self.args.rate)
        try:
            if load_frac > 0:
                gen.on(load_frac * self.args.rate, burst_ms)
            time.sleep(self.args.settle)
            t0 = time.time()
            state0 = self.hb.state
            time.sleep(duration)
            t1 = time.time()
        finally:
            gen.close()
        recs = self.bands(t0, t1)
        wire_changes = [c for c in list(self.hb.changes) if t0 <= c[0] <= t1]
        moves = 0
        last: dict[int, Entries] = {}
        for at, nid, es in list(self.watch.events):
            if len(es) != 2 or at > t1:
                continue
            if at >= t0 and nid in last and es != last[nid]:
                moves += 1
            last[nid] = es
        self.calm()
        return {
            "traffic": (
                f"{load_frac * self.args.rate:g} Mbit/s ({load_frac:.0%} of the shaped "
                f"{self.args.rate} Mbit/s) in {burst_ms:g} ms bursts"
                if load_frac > 0
                else "none"
            ),
            "duration_s": round(t1 - t0, 1),
            "band_at_start": state0,
            "band_changes_log": len(recs),
            "band_changes_wire": len(wire_changes),
            "bands_seen": sorted({int(r.get("band", -1)) for r in recs}),
            "reasons": sorted({str(r.get("reason")) for r in recs}),
            "leaf1_weight_moves": moves,
        }

    def pair(
        self,
        t_sw: float,
        t_nh: float,
        down: bool | None,
        main: Series,
        wire_s: Series,
        log_s: Series,
    ) -> float | None:
        """Attribute the nexthop write at ``t_nh`` to the spine's last (band, down) change
        before it: its first heartbeat on the wire, and its ``link_band`` record (written
        just after that heartbeat was handed to the socket, so it may even come after
        ``t_nh``). The change's time is the earlier of the two. Returns the latency (ms)."""
        ch = self.hb.last_change(t_sw, t_nh, down)
        recs = self.bands(t_sw, t_nh + 1.0, down=down)
        if ch is not None:
            recs = [r for r in recs if r.get("band") == ch[1] and bool(r.get("down")) == ch[2]]
        before = [r for r in recs if r["_t"] <= t_nh]
        rec = before[-1] if before else (recs[0] if recs else None)
        cands = [x for x in (ch[0] if ch else None, rec["_t"] if rec else None) if x is not None]
        if not cands:
            main.missed += 1
            main.notes.append("nexthop change with no band change seen before it")
            return None
        lat = (t_nh - min(cands)) * 1e3
        main.values.append(lat)
        if ch is not None:
            wire_s.values.append((t_nh - ch[0]) * 1e3)
        if rec is not None:
            log_s.values.append((t_nh - rec["_t"]) * 1e3)
            if rec["_t"] > t_nh:
                log_s.notes.append("link_band record logged after the leaf's nexthop write")
        return lat

    # --- link cut / restore (heartbeat link-down flag) ------------------------------------------
    def run_cut(self, n_events: int) -> list[Series]:
        what = "RTM_NEWNEXTHOP w/o spine1"
        cut = Series("cut (link down)", f"spine1 down flag -> leaf1 {what}")
        cut_w = Series("cut, from the wire", f"spine1 hb tx w/ down flag -> {what}")
        cut_l = Series("cut, from the log", f"spine1 link_band down record -> {what}")
        cut_c = Series("cut, from link down", f"before RTM_SETLINK down on spine1 -> {what}")
        what = "RTM_NEWNEXTHOP w/ spine1"
        rest = Series("restore (link up)", f"spine1 down flag cleared -> leaf1 {what}")
        rest_w = Series("restore, from the wire", f"spine1 hb tx w/o down flag -> {what}")
        rest_l = Series("restore, from the log", f"spine1 link_band up record -> {what}")
        rest_c = Series("restore, from link up", f"before RTM_SETLINK up on spine1 -> {what}")
        out = [cut, cut_w, cut_l, cut_c, rest, rest_w, rest_l, rest_c]
        for x in out:
            x.load_start = load()
        sw = LinkSwitch(self.fab, "spine1", self.fab.ifname("spine1", "leaf2"))
        try:
            self._cut_loop(n_events, sw, out)
        finally:
            sw.set(True)
            sw.close()
        for x in out:
            x.load_end = load()
        return out

    def _cut_loop(self, n_events: int, sw: LinkSwitch, out: list[Series]) -> None:
        cut, cut_w, cut_l, cut_c, rest, rest_w, rest_l, rest_c = out
        slow_recoveries = 0
        while len(cut.values) + cut.missed + len(rest.values) + rest.missed < n_events:
            t0 = time.time()
            sw.set(False)
            t_out = self.out_after(t0, self.args.timeout)
            t1 = time.time()
            sw.set(True)
            lat_cut = lat_rest = None
            if t_out is None:
                cut.missed += 1
                cut.notes.append("spine1 never left leaf1's group")
            else:
                time.sleep(0.1)
                lat_cut = self.pair(t0, t_out, True, cut, cut_w, cut_l)
                cut_c.values.append((t_out - t0) * 1e3)
            t_nh = self.nh_after(t1, _two, 1.0)
            if t_nh is None:  # BFD/BGP noticed: spine1 comes back via BGP, not a hb event
                slow_recoveries += 1
                rest.missed += 1
                if not self.back_in(60):
                    raise LabError("spine1 did not come back into leaf1's group in 60 s")
            else:
                time.sleep(0.1)
                lat_rest = self.pair(t1, t_nh, False, rest, rest_w, rest_l)
                rest_c.values.append((t_nh - t1) * 1e3)
            if self.verbose:
                print(f"  cut +{lat_cut} ms, restore +{lat_rest} ms", flush=True)
            time.sleep(self.args.hold)
            done = len(cut.values) + len(rest.values)
            if done % 20 == 0 and done and not self.verbose:
                print(f"  cut/restore: {done} events, load {load()}", flush=True)
        if slow_recoveries:
            rest.notes.append(
                f"{slow_recoveries} cycle(s) where spine1 came back only via "
                "BFD/BGP recovery (not counted)"
            )

    # --- BFD failover --------------------------------------------------------------------------
    def run_bfd(self, n: int, detect_ms: float) -> list[Series]:
        fail = Series("bfd failover", "last BFD rx before drop -> RTM_NEWNEXTHOP w/o spine1")
        drop = Series("bfd failover, from drop", "nft drop -> same RTM_NEWNEXTHOP")
        det = Series("bfd detection", "last BFD rx before drop -> leaf1 bfd_state Down (log)")
        react = Series(
            "bfd reaction",
            "leaf1 bfd_state Down (log) -> RTM_NEWNEXTHOP (< 0: the engine's own failover)",
        )
        engine = Series(
            "bfd engine decision",
            "engine's last accepted rx -> its Down decision (since_rx_ms, engine clock)",
        )
        out = [fail, drop, det, react, engine]
        for s in out:
            s.load_start = load()
        # the cut: leaf1's end of the link, and what spine1 sends into it (as a wire loses it)
        sp_if = self.fab.ifname("spine1", "leaf1")
        nft = NftShell(self.fab, "leaf1")
        nft_sp = NftShell(self.fab, "spine1", egress=sp_if)
        sniff = BfdSniffer(self.fab, "leaf1", self.fab.ifname("leaf1", "spine1"))
        time.sleep(0.3)  # a few BFD packets seen before the first drop
        try:
            self._bfd_loop(n, detect_ms, (nft, nft_sp, sp_if), sniff, out)
        finally:
            with contextlib.suppress(Exception):
                nft.undrop("spine1")
            with contextlib.suppress(Exception):
                nft_sp.undrop(sp_if)
            nft.close()
            nft_sp.close()
            sniff.close()
        for s in out:
            s.load_end = load()
        return out

    def _bfd_loop(
        self,
        n: int,
        detect_ms: float,
        cut: tuple[NftShell, NftShell, str],
        sniff: BfdSniffer,
        out: list[Series],
    ) -> None:
        nft, nft_sp, sp_if = cut
        fail, drop, det, react, engine = out
        engine_sent = 0
        bracket: list[float] = []
        ambiguous = 0
        for i in range(n):
            t0 = time.time()
            nft_sp.drop(sp_if)
            nft.drop("spine1")
            t0b = time.time()
            bracket.append((t0b - t0) * 1e3)
            t_out = self.out_after(t0, max(5.0, detect_ms / 1e3 * 10))
            time.sleep(0.05)
            downs = self.leaf_log.since(
                t0,
                lambda r: (
                    str(r.get("new", "")).upper() == "DOWN" and r.get("interface") == "spine1"
                ),
            )
            nft.undrop("spine1")
            nft_sp.undrop(sp_if)
            t_rx = sniff.last_before(t0)
            if sniff.any_between(t0, t0b):
                # a packet arrived while the nft command ran: the sniffer (ahead of nftables)
                # cannot tell whether BFD got it, so the last packet BFD saw is unknown
                t_rx = None
                ambiguous += 1
            if t_out is None:
                fail.missed += 1
                fail.notes.append("spine1 never left leaf1's group")
            else:
                drop.values.append((t_out - t0) * 1e3)
                if t_rx is not None:
                    fail.values.append((t_out - t_rx) * 1e3)
                elif not sniff.any_between(t0, t0b):
                    fail.missed += 1
                    fail.notes.append("no BFD packet seen before the drop")
                if downs:
                    react.values.append((t_out - downs[0]["_t"]) * 1e3)
                    if downs[0].get("since_rx_ms") is not None:
                        engine.values.append(float(downs[0]["since_rx_ms"]))
                    engine_sent += bool(downs[0].get("failover_sent"))
                    if t_rx is not None:
                        det.values.append((downs[0]["_t"] - t_rx) * 1e3)
                if self.verbose:
                    rx = f"{(t_out - t_rx) * 1e3:.1f} ms" if t_rx else "-"
                    print(
                        f"  bfd {i + 1}: last rx -> nh {rx}, drop -> nh "
                        f"{(t_out - t0) * 1e3:.1f} ms (nft ack {(t0b - t0) * 1e3:.1f} ms)",
                        flush=True,
                    )
            if not self.back_in(90):
                raise LabError("spine1 did not come back into leaf1's group in 90 s")
            time.sleep(max(self.args.hold, 1.0))
            if not self.verbose and (i + 1) % 5 == 0:
                print(f"  bfd: {i + 1} drops, load {load()}", flush=True)
        engine.notes.append(f"{engine_sent} of {n} failovers sent by the BFD engine itself")
        if ambiguous:
            fail.notes.append(
                f"{ambiguous} drop(s) left out: a BFD packet arrived while the nft command ran, "
                "so which packet BFD saw last is unknown (the 'from drop' row has them all)"
            )
        if bracket:
            drop.notes.append(
                f"nft drop acknowledged within {max(bracket):.1f} ms "
                f"(median {pct(bracket, 50):.1f} ms) of the start timestamp"
            )


EMU_PREFIX_BASE = "100.64.0.0"  # the emulated spines' prefixes: outside the lab's 198.18/15


class LoadRig:
    """The load ``--load`` applies, all inside this run's lab (and one local process):

    * one core busy: a busy-loop process pinned (sched_setaffinity) to the last CPU;
    * leaf1 receiving 64 spines' heartbeats: ``--emu-spines`` emulated spines (default 62, plus
      the 2 real ones) in one extra namespace, one veth each to leaf1, served by one feeder
      process (bench/glb_memory.py's :class:`Feeder`: a minimal BGP speaker, one heartbeat
      sender per spine every 20 ms, a BFD engine); leaf1 has a BGP session to each, so their
      heartbeats are accepted and land in its path table;
    * BGP churn: the feeder withdraws or re-announces one random (spine, prefix) every
      1 / ``--bgp-churn`` s, and toggles ``--hb-churn`` heartbeat bands per second.

    The feeder stands for 62 other routers, whose CPUs the leaf's busy core does not slow:
    it runs at SCHED_FIFO ``--feeder-rt-priority`` (default 1, below glbd's loop and BFD).
    Starved at normal priority it stalled past the 60 ms heartbeat hold time, and all its
    spines expired and came back at once (a fabric-wide failure, not load); leaf1's
    heartbeat expirations during the events are reported with the results.
    """

    def __init__(self, fab: Fabric, args: argparse.Namespace, run_dir: Path) -> None:
        self.fab = fab
        self.args = args
        self.n = args.emu_spines
        self.cpu = (os.cpu_count() or 1) - 1
        self.busy = subprocess.Popen(
            [
                sys.executable,
                "-c",
                f"import os\nos.sched_setaffinity(0, {{{self.cpu}}})\nwhile True:\n    pass\n",
            ]
        )
        self.feeder: subprocess.Popen[bytes] | None = None
        self.status: dict[str, Any] = {}
        self.ready = threading.Event()
        if self.n <= 0:
            return
        from bench import glb_memory as gm

        self.gm = gm
        leaf = fab.ns("leaf1")
        emu = fab.lab.netns("emu")
        from glbdlab.netns import _run

        cmds = [
            f"link add s{i} netns {leaf.name} type veth peer name l{i} netns {emu.name}"
            for i in range(1, self.n + 1)
        ]
        _run(["ip", "-batch", "-"], input="\n".join(cmds) + "\n")
        lcmds, ecmds = [], []
        for i in range(1, self.n + 1):
            sp, lf = gm.link_addrs(i)
            lcmds += [f"addr add {lf}/31 dev s{i}", f"link set s{i} up"]
            ecmds += [f"addr add {sp}/31 dev l{i}", f"link set l{i} up"]
        leaf.ip_batch(lcmds)
        emu.ip_batch(ecmds)
        cfg = {
            "neighbors": self.n,
            "prefixes": args.emu_prefixes,
            "remote_leaves": 8,
            "packed": False,
            "hold": 9,
            "hb_ms": 20,
            "churn": args.hb_churn,
            "bfd_ms": 300,
            "bgp_churn": args.bgp_churn,
        }
        cfg_path = run_dir / "feeder.json"
        cfg_path.write_text(json.dumps(cfg))
        self.feeder = emu.popen(
            [sys.executable, str(Path(__file__).resolve()), "--feeder", str(cfg_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        if args.feeder_rt_priority > 0:
            subprocess.run(
                ["chrt", "-a", "-f", "-p", str(args.feeder_rt_priority), str(self.feeder.pid)],
                check=True,
            )
        threading.Thread(target=self._read, name="feeder-out", daemon=True).start()

    def _read(self) -> None:
        assert self.feeder is not None and self.feeder.stdout is not None
        for line in self.feeder.stdout:
            with contextlib.suppress(ValueError):
                ev = json.loads(line)
                if ev.get("ev") == "status":
                    self.status = ev
                    if ev.get("established") == self.n:
                        self.ready.set()

    def leaf_neighbors(self) -> str:
        """leaf1's extra ``[[neighbors]]`` (appended to its generated config)."""
        lines = []
        for i in range(1, self.n + 1):
            sp, lf = self.gm.link_addrs(i)
            lines += [
                "",
                "[[neighbors]]",
                f'address = "{sp}"',
                f"remote_as = {self.gm.SPINE_AS}",
                f'interface = "s{i}"',
                f'local_address = "{lf}"',
                f'description = "emu-spine{i}"',
                "passive = false",
                f"import = {PERMIT_ALL}",
                f"export = {PERMIT_ALL}",
            ]
        return "\n".join(lines) + "\n"

    def describe(self) -> str:
        a = self.args
        spines = (
            f"leaf1 receives the heartbeats of {self.n + 2} spines ({self.n} emulated in one "
            f"feeder process + 2 real): every 20 ms each, 9 entries, {a.hb_churn:g} band "
            f"toggles/s; BGP: {self.n} more sessions to leaf1, {a.emu_prefixes} prefixes each "
            f"(8 remote leaves, NNHN), churn {a.bgp_churn:g} UPDATEs/s (one random spine's "
            "prefix withdrawn or re-announced each); BFD to each emulated spine at 300 ms x 3"
            if self.n > 0
            else "no emulated spines"
        )
        rt = a.feeder_rt_priority
        feeder = f"; the feeder at SCHED_FIFO {rt}" if self.n > 0 and rt > 0 else ""
        return f"one busy-loop process pinned to CPU {self.cpu}; {spines}{feeder}"

    def wait_ready(self, timeout: float = 120.0) -> None:
        if self.n > 0 and not self.ready.wait(timeout):
            raise LabError(f"emulated spines not established in {timeout:g} s: {self.status}")

    def close(self) -> None:
        if self.feeder is not None:
            with contextlib.suppress(OSError, ValueError):
                assert self.feeder.stdin is not None
                self.feeder.stdin.write(b"quit\n")
                self.feeder.stdin.close()
            try:
                self.feeder.wait(10)
            except subprocess.TimeoutExpired:
                self.feeder.kill()
                self.feeder.wait(5)
        self.busy.kill()
        self.busy.wait(5)


def feeder_main(cfg_path: str) -> int:
    """The emulated spines of ``--load`` (runs in the lab's ``emu`` namespace)."""
    import asyncio
    import ipaddress

    from bench import glb_memory as gm

    gm.PREFIX_BASE = int(ipaddress.IPv4Address(EMU_PREFIX_BASE))
    cfg = json.loads(Path(cfg_path).read_text())

    class ChurnFeeder(gm.Feeder):
        """glb_memory's feeder plus BGP churn on the established sessions."""

        def __init__(self, cfg: dict[str, Any]) -> None:
            super().__init__(cfg)
            self.writers: dict[int, Any] = {}
            self.withdrawn: set[tuple[int, int]] = set()
            self.churn_sent = 0

        def say(self, **kw: Any) -> None:
            if kw.get("ev") == "status":
                kw["churn_sent"] = self.churn_sent
            super().say(**kw)

        async def session(self, reader: Any, writer: Any) -> None:
            spine = self.by_addr.get(writer.get_extra_info("sockname")[0])
            if spine is not None:
                self.writers[spine] = writer
            try:
                await super().session(reader, writer)
            finally:
                self.writers.pop(spine or 0, None)

        async def heartbeats(self) -> None:
            asyncio.get_running_loop().create_task(self.churn())
            await super().heartbeats()

        async def churn(self) -> None:
            rate = float(self.cfg["bgp_churn"])
            if rate <= 0:
                return
            remotes = self.cfg["remote_leaves"]
            loop = asyncio.get_running_loop()
            t = loop.time()
            while True:
                t += 1 / rate
                await asyncio.sleep(max(0.0, t - loop.time()))
                up = sorted(self.established & set(self.writers))
                if not up:
                    continue
                spine = self.rng.choice(up)
                i = self.rng.randrange(self.cfg["prefixes"])
                nl = gm.nlri(i, self.plen)
                if (spine, i) in self.withdrawn:
                    self.withdrawn.discard((spine, i))
                    a = gm.path_attrs(spine, gm.remote_of(i, remotes), gm.link_addrs(spine)[0])
                    msg = gm.bgp_msg(2, b"\x00\x00" + struct.pack("!H", len(a)) + a + nl)
                else:
                    self.withdrawn.add((spine, i))
                    msg = gm.bgp_msg(2, struct.pack("!H", len(nl)) + nl + b"\x00\x00")
                with contextlib.suppress(Exception):
                    self.writers[spine].write(msg)
                    self.churn_sent += 1

    asyncio.run(ChurnFeeder(cfg).main())
    return 0


def _pname(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    text = " ".join(a.decode(errors="replace") for a in argv if a)
    for key, name in (("exabgp", "exabgp"), ("bfd", "bfd engine"), ("--feeder", "feeder")):
        if key in text:
            return name
    return "glbd" if "glbd" in text else Path(argv[0].decode(errors="replace")).name


class PySpy:
    """``py-spy record`` of one glbd (its main thread) in raw (collapsed stacks) format."""

    def __init__(self, path: str, node: GlbdNode) -> None:
        assert node.proc is not None
        self.path = Path(path).resolve()
        exe = Path(sys.executable).parent / "py-spy"
        self.proc = subprocess.Popen(
            [
                *(str(exe), "record", "--pid", str(node.proc.pid), "--rate", "250"),
                *("--format", "raw", "--nonblocking", "-o", str(self.path)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(30)
        if self.proc.poll() is None:
            self.proc.kill()
        return f"{self.path}: {top_frames(self.path)}"


def top_frames(path: Path, n: int = 12) -> str:
    """The functions with the most samples anywhere on the stack (inclusive), from py-spy's
    collapsed stacks: ``frame;frame;... count`` per line."""
    total = 0
    incl: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            stack, _, cnt = line.rpartition(" ")
            if not cnt.isdigit():
                continue
            c = int(cnt)
            total += c
            for fr in set(stack.split(";")):
                name = fr.split(" (")[0]
                incl[name] = incl.get(name, 0) + c
    top = sorted(incl.items(), key=lambda kv: -kv[1])[:n]
    return f"{total} samples; " + "; ".join(f"{k} {v * 100 / max(total, 1):.0f}%" for k, v in top)


class CpuMeter:
    """CPU time (% of one core) of each glbd (and its ExaBGP and BFD children) and of the
    load's feeder between :meth:`start` and :meth:`report`."""

    def __init__(self, roots: dict[str, int]) -> None:
        self.roots = roots
        self.t0 = 0.0
        self.c0: dict[tuple[str, int], int] = {}

    def _snap(self) -> dict[tuple[str, int], int]:
        out = {}
        for node, root in self.roots.items():
            for pid in descendants(root):
                out[(f"{node} {_pname(pid)}", pid)] = cpu_ticks(pid)
        return out

    def start(self) -> None:
        self.t0 = time.monotonic()
        self.c0 = self._snap()

    def report(self) -> str:
        dt = time.monotonic() - self.t0
        hz = os.sysconf("SC_CLK_TCK")
        now = self._snap()
        parts = []
        for key, ticks in sorted(now.items()):
            pct = (ticks - self.c0.get(key, ticks)) / hz / dt * 100 if dt > 0 else 0.0
            if pct >= 0.5:
                parts.append(f"{key[0]} {pct:.0f}%")
        return ", ".join(parts)


def commit() -> str:
    r = subprocess.run(
        ["git", "-C", str(Path(__file__).resolve().parent), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return r.stdout.strip() or "?"


#: leaf1 counters the bench reports as a difference over the run: heartbeat expirations
#: (0 on a box that keeps the feeder on time) and weight changes sent on the FIB's fast lane
LEAF_COUNTERS = ("heartbeat_expirations", "fib_fast_weights")


def leaf_counters(node: GlbdNode) -> dict[str, int] | None:
    """``LEAF_COUNTERS`` of ``node`` (``glbctl counters``; None if unreadable)."""
    try:
        counters = node.request("counters", timeout=10)
    except Exception:
        return None
    out = {}
    for section in counters.values():
        if isinstance(section, dict):
            out.update({k: int(section[k]) for k in LEAF_COUNTERS if k in section})
    return out


def leaf_gc(node: GlbdNode) -> dict[str, Any] | None:
    """``node``'s garbage-collector passes so far (``glbctl status``; None if unreadable)."""
    try:
        gc = node.request("status", timeout=10).get("gc")
    except Exception:
        return None
    return gc if isinstance(gc, dict) and "collections" in gc else None


def start_nodes(
    fab: Fabric,
    run_dir: Path,
    opts: GlbdOptions,
    rig: LoadRig | None,
    linkq: dict[str, str],
    leaf_rt: int = 0,
) -> dict[str, GlbdNode]:
    """:func:`start_glbd`, with ``[link_quality]`` keys added (``linkq``) and leaf1's config
    extended by the load's emulated spines; ``leaf_rt`` > 0: leaf1's glbd process (all its
    threads, not its children) runs SCHED_FIFO at that priority, an experiment that tells
    CPU scheduling from glbd's own work in the loop's tail (glbd itself never does this)."""
    topo = fab.topo
    nodes = {n: GlbdNode(fab, n, run_dir, opts) for n in topo.names("leaf") + topo.names("spine")}
    for node in nodes.values():
        text = node.config.read_text()
        keys = "".join(f"{k} = {v}\n" for k, v in linkq.items())
        text = text.replace("[link_quality]\n", "[link_quality]\n" + keys, 1)
        if rig is not None and rig.n > 0 and node.name == "leaf1":
            text += rig.leaf_neighbors()
        node.config.write_text(text)
    for node in nodes.values():
        node.start()
    for node in nodes.values():
        node.wait_ready()
    leaf1 = nodes.get("leaf1")
    if leaf_rt > 0 and leaf1 is not None and leaf1.proc is not None:
        subprocess.run(["chrt", "-a", "-f", "-p", str(leaf_rt), str(leaf1.proc.pid)], check=True)
    return nodes


def main() -> int:
    # the watcher thread must get the GIL from the polling main thread without a 5 ms wait
    sys.setswitchinterval(0.0005)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--events",
        type=int,
        default=200,
        help="events per heartbeat kind (band; cut+restore), default 200",
    )
    ap.add_argument("--bfd", type=int, default=20, help="BFD failovers (default 20)")
    ap.add_argument(
        "--kinds",
        default="band,cut,bfd",
        help="comma list of congestion,quiet,band,cut,bfd (default band,cut,bfd)",
    )
    ap.add_argument(
        "--quiet-s",
        type=float,
        default=60.0,
        help="no-congestion run length, s, when no congestion run sets it (default 60)",
    )
    ap.add_argument(
        "--quiet",
        default="0.6@2,0.6@20",
        metavar="FRAC@MS,...",
        help="no-congestion runs: traffic at FRAC x --rate sent in bursts every MS ms, one run "
        "each (0@0: no traffic; default 0.6@2,0.6@20)",
    )
    ap.add_argument("--settle", type=float, default=2.0, help="before counting false changes, s")
    ap.add_argument(
        "--load",
        action="store_true",
        help="apply the load: one core busy, 64 spines' heartbeats at leaf1, BGP churn",
    )
    ap.add_argument("--emu-spines", type=int, default=62, help="emulated spines (--load)")
    ap.add_argument("--emu-prefixes", type=int, default=64, help="prefixes per emulated spine")
    ap.add_argument("--bgp-churn", type=float, default=20.0, help="BGP UPDATEs/s (--load)")
    ap.add_argument("--hb-churn", type=float, default=5.0, help="heartbeat band toggles/s")
    ap.add_argument(
        "--feeder-rt-priority",
        type=int,
        default=1,
        metavar="N",
        help="the emulated spines' process at SCHED_FIFO N (0: normal priority; default 1)",
    )
    ap.add_argument(
        "--py-spy",
        metavar="FILE",
        help="record leaf1's glbd with py-spy (.venv/bin/py-spy) over the whole run into FILE "
        "(collapsed stacks) and print its top frames",
    )
    ap.add_argument(
        "--leaf-rt-priority",
        type=int,
        default=0,
        metavar="N",
        help="experiment: run leaf1's glbd process at SCHED_FIFO N (not something glbd does)",
    )
    ap.add_argument(
        "--linkq",
        default="",
        metavar="KEY=VALUE,...",
        help="[link_quality] keys for every glbd (default: glbd's own defaults), e.g. the "
        "previous detection: sample_interval_ms=10,hysteresis_samples=3,onset_queue_bytes=0,"
        "confirm_improvements=false",
    )
    ap.add_argument("--rate", type=int, default=10, help="tbf rate of spine1->leaf2, Mbit/s")
    ap.add_argument("--hold", type=float, default=0.3, help="settle time between events, s")
    ap.add_argument("--timeout", type=float, default=5.0, help="per-event wait, s")
    ap.add_argument("--bfd-interval-ms", type=int, default=50)
    ap.add_argument("--detect-mult", type=int, default=3)
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    ap.add_argument("--plot", metavar="DIR", help="also draw the latency CDF into DIR (PNG)")
    ap.add_argument("--keep", action="store_true", help="keep the run directory (glbd logs)")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per event")
    if len(sys.argv) == 3 and sys.argv[1] == "--feeder":
        return feeder_main(sys.argv[2])
    args = ap.parse_args()
    kinds = {k.strip() for k in args.kinds.split(",") if k.strip()}
    if os.geteuid() != 0:
        print("needs root (network namespaces)", file=sys.stderr)
        return 2
    detect_ms = args.bfd_interval_ms * args.detect_mult
    linkq = dict(kv.split("=", 1) for kv in args.linkq.split(",") if kv.strip())
    sample_ms = int(linkq.pop("sample_interval_ms", LinkQualitySection().sample_interval_ms))
    opts = GlbdOptions(
        capacity_mbps=args.rate,
        bfd_interval_ms=args.bfd_interval_ms,
        detect_mult=args.detect_mult,
        sample_interval_ms=sample_ms,
    )
    args.linkq_keys = linkq
    started = datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    print(
        f"glb_latency: {started}, {os.cpu_count()} CPUs, load {load()}; "
        f"events={args.events} bfd={args.bfd} kinds={','.join(sorted(kinds))} "
        f"rate={args.rate} Mbit/s, heartbeat {opts.hb_interval_ms} ms, sampling "
        f"{opts.sample_interval_ms} ms, BFD {args.bfd_interval_ms} ms x {args.detect_mult}; "
        f"link_quality {linkq or 'defaults'}; commit {commit()}"
        + (f"; leaf1's glbd SCHED_FIFO {args.leaf_rt_priority}" if args.leaf_rt_priority else ""),
        flush=True,
    )
    topo = leaf_spine(2, 2)
    prefix = topo.node("leaf2").prefix4
    assert prefix
    run_dir = Path(tempfile.mkdtemp(prefix="glb-latency-"))
    args.run_dir = run_dir
    results: list[tuple[Series, str]] = []
    nodes: dict[str, GlbdNode] = {}
    rig: LoadRig | None = None
    info: dict[str, Any] = {}
    try:
        with Fabric(topo) as fab:
            fab.shape("spine1", "leaf2", rate=f"{args.rate}mbit", burst="64kbit", latency="100ms")
            try:
                t = time.monotonic()
                if args.load:
                    rig = LoadRig(fab, args, run_dir)
                    info["load"] = rig.describe()
                    print(f"load: {info['load']}", flush=True)
                nodes = start_nodes(fab, run_dir, opts, rig, linkq, args.leaf_rt_priority)
                wait_until(
                    lambda: len(kernel_group_for(fab, "leaf1", prefix)) == 2,
                    90,
                    what="leaf1's weighted group for leaf2's prefix",
                )
                wait_until(
                    lambda: len(set(kernel_group_for(fab, "leaf1", prefix).values())) == 1,
                    30,
                    what="equal weights",
                )
                print(
                    f"fabric up, glbd x{len(nodes)} converged in "
                    f"{time.monotonic() - t:.1f} s, load {load()}",
                    flush=True,
                )
                if rig is not None:
                    rig.wait_ready()
                    print(f"load ready: feeder {rig.status}, load {load()}", flush=True)
                time.sleep(1.0)
                # netlink has no kernel timestamps: the figures use ip monitor's, a real-time
                # C process; the Python watcher (a real-time thread that still needs this
                # process's GIL) runs beside it, and how late it stamps is reported
                with (
                    NexthopWatcher(fab.ns("leaf1").name, rt_priority=20) as pywatch,
                    IpMonitorWatcher(fab.ns("leaf1").name, rt_priority=20) as watch,
                ):
                    b = Bench(fab, nodes, watch, prefix, args)
                    hb = "p50 <= 20, p99 <= 30"
                    roots = {n: g.proc.pid for n, g in nodes.items() if g.proc is not None}
                    if rig is not None and rig.feeder is not None:
                        roots["emu"] = rig.feeder.pid
                    meter = CpuMeter(roots)
                    spy = PySpy(args.py_spy, nodes["leaf1"]) if args.py_spy else None
                    meter.start()
                    counted_before = leaf_counters(nodes["leaf1"])
                    gc_before = leaf_gc(nodes["leaf1"])
                    if "congestion" in kinds and args.events > 0:
                        cong, info["congestion"] = b.run_congestion(args.events)
                        results += [(cong[0], "p99 <= 20"), (cong[1], "(info)")]
                        results += [(cong[2], "(info)"), (cong[3], "(info)")]
                        print(f"congestion run: {info['congestion']}", flush=True)
                    if "quiet" in kinds:
                        dur = info.get("congestion", {}).get("duration_s", args.quiet_s)
                        for spec in args.quiet.split(","):
                            frac, _, burst = spec.partition("@")
                            q = b.run_quiet(dur, float(frac), float(burst or 2))
                            info.setdefault("quiet", []).append(q)
                            print(f"no-congestion run: {q}", flush=True)
                    if "band" in kinds and args.events > 0:
                        band = b.run_band(args.events)
                        results += [(band[0], hb)] + [(x, "(info)") for x in band[1:]]
                    if "cut" in kinds and args.events > 0:
                        c = b.run_cut(args.events)
                        results += [(c[0], hb)] + [(x, "(info)") for x in c[1:4]]
                        results += [(c[4], hb)] + [(x, "(info)") for x in c[5:]]
                    if "bfd" in kinds and args.bfd > 0:
                        fail, drop, det, react, engine = b.run_bfd(args.bfd, detect_ms)
                        results += [
                            (fail, f"<= {detect_ms + 5} (detect {detect_ms} + 5)"),
                            (drop, f"(info, < {detect_ms + 5})"),
                            (det, f"~ {detect_ms}"),
                            (react, "(info)"),
                            (engine, f"~ {detect_ms}"),
                        ]
                    info["cpu"] = meter.report()
                    info["python_watcher_late_ms"] = watcher_lateness(pywatch, watch)
                    counted = leaf_counters(nodes["leaf1"])
                    if counted is not None and counted_before is not None:
                        for k, v in counted.items():
                            info[f"leaf1_{k}"] = v - counted_before.get(k, 0)
                    gc_after = leaf_gc(nodes["leaf1"])
                    if gc_before is not None and gc_after is not None:
                        # the passes that could hold an event: those during the events
                        info["leaf1_gc_during_events"] = {
                            "collections": [
                                a - b
                                for a, b in zip(
                                    gc_after["collections"], gc_before["collections"], strict=True
                                )
                            ],
                            "over_5ms": gc_after["over_5ms"] - gc_before["over_5ms"],
                        }
                    with contextlib.suppress(Exception):
                        st = nodes["leaf1"].request("status")
                        info["leaf1_loop"] = {
                            k: st.get(k) for k in ("loop_lag", "gc", "scheduling")
                        }
                    if spy is not None:
                        info["py_spy"] = spy.stop()
                    if rig is not None:
                        info["load_end"] = rig.status
            finally:
                stop_all(nodes)
                if rig is not None:
                    rig.close()
    finally:
        if args.keep:
            print(f"run dir kept: {run_dir}")
        else:
            shutil.rmtree(run_dir, ignore_errors=True)
    print(f"\nResults ({started}; load at end {load()}), milliseconds\n")
    print("| series | path | n | p50 | p99 | max | min | target | missed |")
    print("|---|---|---:|---:|---:|---:|---:|---|---:|")
    for s, target in results:
        print(s.row(target))
    print("\nload average (1/5/15 min) per series, start -> end:")
    for s, _ in results:
        print(f"  {s.name}: {s.load_start} -> {s.load_end}")
        for n in sorted(set(s.notes)):
            print(f"    note: {n} (x{s.notes.count(n)})")
    for k, v in info.items():
        print(f"{k}: {v}")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "date": started,
                    "commit": commit(),
                    "args": vars(args),
                    "info": info,
                    "series": [s.to_dict() for s, _ in results],
                },
                indent=1,
                default=str,
            )
        )
    if args.plot:
        _plot(args, started, [s.to_dict() for s, _ in results])
    return 0


def _plot(args: argparse.Namespace, started: str, series: list[dict[str, Any]]) -> None:
    """Draw this run's CDF with bench/plots.py (matplotlib: the bench extra)."""
    from bench.plots import plot_latency

    src = Path(args.json) if args.json else Path(args.plot) / "glb-latency.json"
    if not args.json:
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_text(json.dumps({"date": started, "series": series}, indent=1))
    print(f"plot: {plot_latency([(src, started)], Path(args.plot) / 'glb-latency-cdf.png')}")


if __name__ == "__main__":
    sys.exit(main())
