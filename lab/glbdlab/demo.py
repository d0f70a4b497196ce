"""The lab demo: the whole GLB loop on a real (emulated) fabric, with measured latencies.

``glbd-lab demo`` builds the default fabric (2 spines running glbd as helpers, 2 leaves as load
balancers, a host behind each leaf; every fabric link shaped with tbf to the same rate), then:

1. waits for BGP and BFD and shows leaf1's weights toward leaf2's prefix (equal);
2. congests spine1->leaf2 for real: UDP traffic from spine1 into the tbf-shaped link toward leaf2.
   spine1's link monitor sees the load and the queue, its heartbeat carries the lower band, and
   leaf1 moves weight away from spine1 *for leaf2's prefix only* (leaf2's own weights and other
   prefixes stay). Latency: spine1's band change (its log) -> leaf1's RTM_NEWNEXTHOP (a netlink
   listener in leaf1's namespace);
3. cuts spine1--leaf2 and shows spine1 leaving leaf1's group for leaf2's prefix from the
   heartbeat's link-down flag, before BGP withdraws the route;
4. restores everything, prints the timeline, tears the fabric down.

``--spines frr`` runs FRR 10.x on the spines instead (NNHN from FRR, no heartbeats: the leaves
fall back to DLB-style local weights, which is the point of comparison).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from glbdlab.netns import LabError
from glbdlab.nodes import GlbdNode, GlbdOptions, kernel_group_for, start_glbd, stop_all, wait_until
from glbdlab.topology import Fabric, leaf_spine

RATE_MBIT = 20


@dataclass
class Mark:
    t: float
    what: str
    detail: str = ""


class Timeline:
    def __init__(self) -> None:
        self.t0 = time.time()
        self.marks: list[Mark] = []

    def mark(self, what: str, detail: str = "", at: float | None = None) -> None:
        m = Mark(at if at is not None else time.time(), what, detail)
        self.marks.append(m)
        print(f"  [{m.t - self.t0:7.3f}s] {what}" + (f": {detail}" if detail else ""), flush=True)

    def render(self) -> str:
        rows = sorted(self.marks, key=lambda m: m.t)
        w = max(len(m.what) for m in rows) if rows else 10
        return "\n".join(f"  {m.t - self.t0:8.3f} s  {m.what:<{w}}  {m.detail}" for m in rows)


class IpMonitorWatcher:
    """:class:`NexthopWatcher`'s records (``events``: nexthop groups, ``routes``: IPv4 routes),
    timestamped by ``ip -ts monitor`` run SCHED_FIFO in the namespace: a single-threaded C
    process stamps each message as it reads it, so neither this process's GIL nor its
    scheduling is in the figure (a Python watcher thread, even real-time, waits for the GIL
    holder, which a loaded box may have descheduled)."""

    def __init__(self, netns: str, rt_priority: int = 20) -> None:
        self.netns = netns
        self.rt_priority = rt_priority
        self.events: list[tuple[float, int, tuple[tuple[int, int], ...]]] = []
        self.routes: list[tuple[float, str, int | None, bool]] = []
        self._proc: subprocess.Popen[bytes] | None = None
        self._stop = threading.Event()
        # closed (and so removed) in __exit__
        self._out = tempfile.NamedTemporaryFile(prefix="glbd-ipmon-", suffix=".txt")  # noqa: SIM115
        self._thread = threading.Thread(target=self._read, name="ip-monitor", daemon=True)

    def __enter__(self) -> IpMonitorWatcher:
        argv = ["ip", "netns", "exec", self.netns]
        if os.geteuid() == 0:
            argv += ["chrt", "-f", str(self.rt_priority)]
        argv += ["ip", "-ts", "monitor", "label", "nexthop", "route"]
        # into a file, not a pipe: a pipe this process reads late would fill and stop ip,
        # which would then stamp the messages late
        self._proc = subprocess.Popen(argv, stdout=self._out, stderr=subprocess.DEVNULL)
        self._thread.start()
        # ip prints nothing until a message arrives: give it the time to subscribe
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not _subscribed(self._proc.pid):
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            self._proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(5)
        self._stop.set()
        self._thread.join(5)
        self._out.close()

    def _read(self) -> None:
        """Follow the file ip writes (whole lines only)."""
        with open(self._out.name, "rb") as f:
            part = b""
            while True:
                chunk = f.read()
                if not chunk:
                    if self._stop.is_set():
                        return
                    time.sleep(0.002)
                    continue
                *lines, part = (part + chunk).split(b"\n")
                for raw in lines:
                    rec = parse_ip_monitor_line(raw.decode(errors="replace"))
                    if rec is None:
                        continue
                    if rec[0] == "nexthop":
                        self.events.append(rec[1])
                    else:
                        self.routes.append(rec[1])


def _subscribed(pid: int) -> bool:
    """Whether process ``pid`` has a netlink socket open (``ip monitor`` has subscribed)."""
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                    return True
    return False


def parse_ip_monitor_line(
    line: str,
) -> tuple[str, tuple[Any, ...]] | None:
    """One line of ``ip -ts monitor label nexthop route``: ``("nexthop", (t, id, entries))`` for
    a nexthop group, ``("route", (t, prefix, nhid, deleted))`` for an IPv4 route, else None.
    The ``[YYYY-MM-DDTHH:MM:SS.ffffff]`` prefix is local time."""
    import datetime

    line = line.strip()
    if not line.startswith("[") or "]" not in line:
        return None
    stamp, _, rest = line[1:].partition("]")
    try:
        t = datetime.datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return None
    rest = rest.strip()
    for label in ("[NEXTHOP]", "[ROUTE]"):
        rest = rest.removeprefix(label)
    words = rest.split()
    deleted = words[:1] == ["Deleted"]
    if deleted:
        words = words[1:]
    if len(words) >= 4 and words[0] == "id" and words[2] == "group" and not deleted:
        entries = []
        for member in words[3].split("/"):
            nid, _, weight = member.partition(",")
            entries.append((int(nid), int(weight or 1)))
        return "nexthop", (t, int(words[1]), tuple(sorted(entries)))
    if words and ("/" in words[0] or words[0].count(".") == 3):
        prefix = words[0] if "/" in words[0] else words[0] + "/32"
        if ":" in prefix:
            return None
        nhid = int(words[words.index("nhid") + 1]) if "nhid" in words else None
        return "route", (t, prefix, nhid, deleted)
    return None


class NexthopWatcher:
    """Records, with wall-clock time, every RTM_NEWNEXTHOP for a nexthop group and every
    RTM_NEWROUTE/RTM_DELROUTE (IPv4) in one namespace.

    Netlink messages carry no kernel timestamp, so the time is taken when the watcher's thread
    handles the message. ``rt_priority`` runs that thread SCHED_FIFO (root only), so that on a
    loaded machine the instrument is not what waits for a CPU."""

    def __init__(self, netns: str, rt_priority: int | None = None) -> None:
        self.netns = netns
        self.rt_priority = rt_priority
        self.events: list[tuple[float, int, tuple[tuple[int, int], ...]]] = []
        self.routes: list[tuple[float, str, int | None, bool]] = []  # t, prefix, nhid, deleted
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nh-watch", daemon=True)

    def __enter__(self) -> NexthopWatcher:
        self._thread.start()
        if not self._ready.wait(10):
            raise LabError("nexthop watcher did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(5)

    def _run(self) -> None:
        if self.rt_priority and os.geteuid() == 0:
            # pid 0 = the calling thread (Linux schedules threads, not processes)
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(self.rt_priority))
        asyncio.run(self._main())

    async def _main(self) -> None:
        from glbd.fib.fibmodel import KGroup
        from glbd.fib.fibwire import parse_nexthop, parse_route
        from glbd.netlink import const as c
        from glbd.netlink.rtsocket import NetlinkSocket

        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()

        def on_event(msg: Any) -> None:
            now = time.time()
            if msg.type == c.RTM_NEWNEXTHOP:
                obj, _ = parse_nexthop(msg)
                if isinstance(obj, KGroup):
                    self.events.append((now, obj.id, obj.entries))
            elif msg.type in (c.RTM_NEWROUTE, c.RTM_DELROUTE):
                r = parse_route(msg)
                if r is not None:
                    self.routes.append((now, str(r.prefix), r.nhid, msg.type == c.RTM_DELROUTE))

        sock = await NetlinkSocket.open(
            netns=self.netns, groups=[c.RTNLGRP_NEXTHOP, c.RTNLGRP_IPV4_ROUTE], on_event=on_event
        )
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            sock.close()

    def first_after(
        self, t: float, pred: Callable[[tuple[tuple[int, int], ...]], bool]
    ) -> float | None:
        for at, _nid, entries in list(self.events):
            if at >= t and pred(entries):
                return at
        return None

    def route_change_after(self, t: float, prefix: str) -> float | None:
        for at, p, _nhid, _deleted in list(self.routes):
            if at >= t and p == prefix:
                return at
        return None


def _weights_line(g: dict[str, int], names: dict[str, str]) -> str:
    if not g:
        return "(no route)"
    total = sum(g.values())
    return "  ".join(
        f"{names.get(gw, gw)}={w} ({100 * w / total:.0f}%)"
        for gw, w in sorted(g.items(), key=lambda kv: names.get(kv[0], kv[0]))
    )


def _host_addr(topo: Any, host: str) -> str:
    ln = topo.links_of(host)[0]
    return str(ln.end(host)[1].split("/")[0])


def _band_events(node: GlbdNode, ifname: str, after: float) -> list[dict[str, Any]]:
    out = []
    for rec in node.events("link_band"):
        if rec.get("ifname") != ifname:
            continue
        ts = rec.get("timestamp", "")
        with contextlib.suppress(ValueError):
            from datetime import datetime

            t = datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
            if t >= after:
                rec["_t"] = t
                out.append(rec)
    return out


def run_demo(spines: str = "glbd", keep_dir: bool = False, rate: int = RATE_MBIT) -> int:
    topo = leaf_spine(2, 2)
    run_dir = Path(tempfile.mkdtemp(prefix="glbd-demo-"))
    tl = Timeline()
    print(
        f"glbd lab demo: 2 spines ({spines}) x 2 leaves (glbd), fabric links shaped to "
        f"{rate} Mbit/s; run dir {run_dir}\n",
        flush=True,
    )
    leaf2_prefix, leaf1_prefix = topo.node("leaf2").prefix4, topo.node("leaf1").prefix4
    assert leaf2_prefix and leaf1_prefix
    names = {}
    for s in topo.names("spine"):
        for leaf in topo.names("leaf"):
            ln = topo.link(s, leaf)
            names[ln.end(s)[1].split("/")[0]] = s
    nodes: dict[str, GlbdNode] = {}
    frr: list[Any] = []
    results: dict[str, Any] = {}
    with Fabric(topo) as fab:
        tl.mark("fabric built", f"namespaces glb-{fab.tag}-*")
        for s in topo.names("spine"):
            for leaf in topo.names("leaf"):
                for a, b in ((s, leaf), (leaf, s)):
                    fab.shape(a, b, rate=f"{rate}mbit", burst="64kbit", latency="100ms")
        opts = GlbdOptions(capacity_mbps=rate)
        try:
            if spines == "frr":
                from glbdlab import frr as frrmod

                nodes = start_glbd(fab, run_dir, opts, names=topo.names("leaf"))
                frr = list(
                    frrmod.start_fabric_frr(
                        fab, topo.names("spine"), build="sid", nhc_to=topo.names("leaf")
                    ).values()
                )
            else:
                nodes = start_glbd(fab, run_dir, opts)
            tl.mark("glbd running", ", ".join(nodes))
            leaf1 = nodes["leaf1"]
            wait_until(
                lambda: (
                    len(kernel_group_for(fab, "leaf1", leaf2_prefix)) == 2
                    and len(kernel_group_for(fab, "leaf2", leaf1_prefix)) == 2
                ),
                60,
                what="weighted groups on both leaves",
            )
            st = leaf1.request("neighbors")
            tl.mark(
                "BGP established + groups installed",
                "leaf1 peers: " + ", ".join(f"{n['peer']}({n['state']})" for n in st),
            )
            bfd = leaf1.request("bfd")
            sessions = bfd if isinstance(bfd, list) else bfd.get("sessions", [])
            tl.mark(
                "BFD",
                ", ".join(f"{s.get('peer')}={s.get('state')}" for s in sessions) or "(no sessions)",
            )
            host2 = _host_addr(topo, "host2")
            ok = fab.ns("host1").ping(host2, count=5, wait=1.0)
            tl.mark(f"host1 -> host2 ({host2}) ping", "ok" if ok else "FAILED")
            before = kernel_group_for(fab, "leaf1", leaf2_prefix)
            before_l2 = kernel_group_for(fab, "leaf2", leaf1_prefix)
            print(f"\n  leaf1 -> {leaf2_prefix}: {_weights_line(before, names)}")
            print(f"  leaf2 -> {leaf1_prefix}: {_weights_line(before_l2, names)}\n")

            # ---- congestion ----
            spine1_leaf2 = topo.link("spine1", "leaf2")
            dst = spine1_leaf2.end("leaf2")[1].split("/")[0]
            with NexthopWatcher(fab.ns("leaf1").name) as watch:
                srv = fab.ns("leaf2").popen(["iperf3", "-s", "-1", "-B", dst])
                time.sleep(0.3)
                t_c = time.time()
                cli = fab.ns("spine1").popen(
                    ["iperf3", "-c", dst, "-u", "-b", f"{rate * 2}M", "-t", "6", "-l", "1200"]
                )
                tl.mark(
                    "congestion on",
                    f"spine1 -> leaf2 UDP {rate * 2} Mbit/s into a {rate} Mbit/s link",
                    t_c,
                )
                try:
                    moved = wait_until(
                        lambda: (
                            (g := kernel_group_for(fab, "leaf1", leaf2_prefix))
                            and len(g) == 2
                            and len(set(g.values())) > 1
                            and g
                        ),
                        10 if spines == "glbd" else 3,
                        what="leaf1 to move weight off spine1",
                    )
                except LabError as e:
                    moved = {}
                    tl.mark("weights did not move", str(e))
                if moved:
                    t_nh = watch.first_after(
                        t_c, lambda es: len(es) == 2 and len({w for _, w in es}) > 1
                    )
                    bands = _band_events(nodes["spine1"], "leaf2", t_c) if "spine1" in nodes else []
                    t_band = bands[0]["_t"] if bands else None
                    if t_band is not None:
                        tl.mark(
                            "spine1 leaf2-link band change",
                            f"band {bands[0].get('old_band')} -> {bands[0].get('band')} "
                            f"(load {bands[0].get('load_pct')}%, queue "
                            f"{bands[0].get('queue_bytes')} B)",
                            t_band,
                        )
                    if t_nh is not None:
                        lat = (
                            f"{(t_nh - t_band) * 1e3:.1f} ms after spine1's band change"
                            if t_band
                            else f"{(t_nh - t_c) * 1e3:.0f} ms after traffic start"
                        )
                        tl.mark("leaf1 RTM_NEWNEXTHOP (weights moved)", lat, t_nh)
                        if t_band:
                            results["heartbeat_path_ms"] = round((t_nh - t_band) * 1e3, 1)
                    time.sleep(1.0)
                    during = kernel_group_for(fab, "leaf1", leaf2_prefix)
                    l2_during = kernel_group_for(fab, "leaf2", leaf1_prefix)
                    print(
                        f"\n  leaf1 -> {leaf2_prefix}: {_weights_line(during, names)}"
                        "   <- weight moved away from spine1"
                    )
                    print(
                        f"  leaf2 -> {leaf1_prefix}: {_weights_line(l2_during, names)}"
                        "   <- unchanged: the decision is next-next-hop specific\n"
                    )
                    results["prefix_specific"] = l2_during == before_l2
                    prof = leaf1.request("profiles")
                    for p in prof.get("profiles", []):
                        if leaf2_prefix in p.get("prefixes", []):
                            for w in p.get("weights", []):
                                tl.mark(
                                    f"leaf1 weight via {names.get(w['next_hop'], w['next_hop'])}",
                                    f"{w['value']} (source {w['source']})",
                                )
                cli.wait(15)
                srv.wait(5)
                tl.mark("congestion off")
                wait_until(
                    lambda: len(set(kernel_group_for(fab, "leaf1", leaf2_prefix).values())) == 1,
                    15,
                    what="weights back to equal",
                )
                tl.mark(
                    "weights equal again",
                    _weights_line(kernel_group_for(fab, "leaf1", leaf2_prefix), names),
                )

                # ---- link cut ----
                spine1_addr = topo.link("spine1", "leaf1").end("spine1")[1].split("/")[0]
                t_cut = time.time()
                fab.cut("spine1", "leaf2")
                tl.mark("cut spine1--leaf2", "link down on spine1's end", t_cut)
                wait_until(
                    lambda: spine1_addr not in kernel_group_for(fab, "leaf1", leaf2_prefix),
                    10,
                    what="spine1 out of leaf1's group for leaf2's prefix",
                )
                # spine1 leaves either inside the group (heartbeat: same profile, one member
                # less) or by the route moving to another group (BGP: the next-hop set changed)
                cands = [
                    t
                    for t in (
                        watch.first_after(t_cut, lambda es: len(es) == 1),
                        watch.route_change_after(t_cut, leaf2_prefix),
                    )
                    if t is not None
                ]
                t_out = min(cands) if cands else None
                if t_out is not None:
                    tl.mark(
                        "leaf1 kernel: spine1 out of the route",
                        f"{(t_out - t_cut) * 1e3:.1f} ms after the cut "
                        + (
                            "(heartbeat link-down flag)"
                            if spines == "glbd"
                            else "(BGP withdraw from the FRR spine)"
                        ),
                        t_out,
                    )
                    results["cut_failover_ms"] = round((t_out - t_cut) * 1e3, 1)

                def bgp_withdrawn() -> bool:
                    for r in leaf1.request("routes"):
                        if r.get("prefix") == leaf2_prefix:
                            return all(
                                nh.get("peer") != spine1_addr for nh in r.get("next_hops", [])
                            )
                    return False

                with contextlib.suppress(LabError):
                    wait_until(bgp_withdrawn, 10, interval=0.01, what="BGP withdraw at leaf1")
                    tl.mark("leaf1 RIB: spine1's path withdrawn by BGP")
                after_cut = kernel_group_for(fab, "leaf1", leaf2_prefix)
                print(f"\n  leaf1 -> {leaf2_prefix}: {_weights_line(after_cut, names)}\n")
                ok = fab.ns("host1").ping(host2, count=5, wait=1.0)
                tl.mark("host1 -> host2 ping after the cut", "ok" if ok else "FAILED")
                fab.restore("spine1", "leaf2")
                tl.mark("restored spine1--leaf2")
                wait_until(
                    lambda: len(kernel_group_for(fab, "leaf1", leaf2_prefix)) == 2,
                    30,
                    what="spine1 back in leaf1's group",
                )
                tl.mark(
                    "spine1 back in leaf1's group",
                    _weights_line(kernel_group_for(fab, "leaf1", leaf2_prefix), names),
                )
        finally:
            stop_all(nodes)
            for f in frr:
                with contextlib.suppress(Exception):
                    f.stop()
            tl.mark("glbd stopped")
    tl.mark("fabric torn down")
    print("\nTimeline\n" + tl.render())
    print("\nResults\n" + json.dumps(results, indent=2))
    if not keep_dir:
        shutil.rmtree(run_dir, ignore_errors=True)
    if spines == "frr":  # FRR spines send no link quality: only the failover is expected
        return 0 if "cut_failover_ms" in results else 1
    ok = bool(results.get("prefix_specific")) and "cut_failover_ms" in results
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="glbd-lab demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--spines", choices=["glbd", "frr"], default="glbd")
    p.add_argument("--rate", type=int, default=RATE_MBIT, help="fabric link rate, Mbit/s")
    p.add_argument("--keep", action="store_true", help="keep the run directory (logs, configs)")
    a = p.parse_args(argv)
    try:
        return run_demo(a.spines, a.keep, a.rate)
    except LabError as e:
        print(f"glbd-lab demo: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
