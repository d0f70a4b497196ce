"""NNHN refresh latency: how fast a helper (spine) re-advertises a prefix with a new Next Next
Hop Nodes list when its multipath set for the prefix changes; glbd and FRR 10.x as the helper,
one after the other in the same run.

Run as root: ``.venv/bin/python bench/nnhn_refresh.py [--events 30] [--quick] [--seed N]``

Topology (``leaf_spine(1, 4)`` without hosts, fresh namespaces per helper)::

    leaf1 (FRR, observer) -- spine1 (helper under test) -- leaf2, leaf3, leaf4 (FRR)

leaf2..4 all originate the anycast prefix 198.19.200.0/24, so spine1's multipath set for it
is the set of those leaves whose session is up. spine1 is glbd (role helper) or FRR 10.x with
``neighbor <leaf1> send-nexthop-characteristics``; BFD is off everywhere (failure detection is
not what is measured). leaf2..4 start with a random delay each (``--jitter-ms``); then each
event toggles leaf3 or leaf4 (never both down, so the set has 2 or 3 members):

* ``shut`` / ``noshut``: ``neighbor <spine> shutdown`` and ``no neighbor ... shutdown`` on the
  leaf; ``cut`` / ``restore``: the leaf's end of the veth goes down / up (the spine sees
  carrier loss).

tcpdump runs in spine1's namespace on every interface (``-i any``), so triggers and answers
are timed by one capture on one clock. The trigger is the packet that changes the helper's
multipath set, as the helper receives it: the leaf's NOTIFICATION (shut), the leaf's first
UPDATE carrying the prefix after its session came up (start-up, noshut, restore); for ``cut``
there is no such packet, so its trigger is the moment the link went down and its latency
includes the helper's failure detection (reported apart). The answer is the first UPDATE
spine1 sends to leaf1 for the prefix whose NNHN (after the helper's own id) is exactly the
new multipath set, as it leaves spine1's interface (on a veth, the observer gets it within
microseconds). An event with no such UPDATE within ``--answer-timeout`` s (the hold time + 3 s
for a cut) is *missing*: the helper never told its peer (the next event waits until then).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from glbdlab.capture import Packet, parse_pcap, parse_update
from glbdlab.frr import FrrInstance, fabric_bgp_config
from glbdlab.netns import LabError, Netns, require_netns
from glbdlab.nodes import GlbdNode, GlbdOptions
from glbdlab.provision import provisioned
from glbdlab.topology import Fabric, leaf_spine

from glbd.bgp import nhc as nhcmod

ANYCAST = "198.19.200.0/24"
OBSERVER = "leaf1"
STABLE = "leaf2"
TOGGLED = ("leaf3", "leaf4")
DOWNSTREAM = (STABLE, *TOGGLED)
BGP_UPDATE, BGP_NOTIFICATION = 2, 3


# ------------------------------------------------------------------------------ capture


@dataclass(frozen=True)
class Msg:
    ts: float
    src: str
    dst: str
    kind: int
    body: bytes


def bgp_messages(packets: list[Packet]) -> list[Msg]:
    """Every BGP message of the capture, each timed by the segment that completed it, in
    time order. TCP reassembly per connection by sequence number (retransmissions dropped)."""
    conns: dict[tuple[str, int, str, int], list[Packet]] = {}
    for p in packets:
        if p.proto == 6 and 179 in (p.sport, p.dport) and p.payload:
            conns.setdefault((p.src, p.sport, p.dst, p.dport), []).append(p)
    out: list[Msg] = []
    for (src, _sp, dst, _dp), segs in conns.items():
        base = segs[0].seq
        buf = bytearray()
        done = 0  # bytes of buf already cut into messages
        for p in segs:
            rel = (p.seq - base) & 0xFFFFFFFF
            if rel > len(buf) or rel + len(p.payload) <= len(buf):
                continue  # a gap (not captured) or a retransmission
            buf += p.payload[len(buf) - rel :]
            while len(buf) - done >= 19:
                if buf[done : done + 16] != b"\xff" * 16:
                    done = len(buf)  # out of sync (capture began mid-stream): skip
                    break
                ln = struct.unpack("!H", buf[done + 16 : done + 18])[0]
                if len(buf) - done < ln:
                    break
                out.append(Msg(p.ts, src, dst, buf[done + 18], bytes(buf[done : done + ln])))
                done += ln
    out.sort(key=lambda m: m.ts)
    return out


def nnhn_of(msg: Msg) -> frozenset[str] | None:
    """The NNHN ids after the sender's own, if the UPDATE announces the anycast prefix with
    an NHC carrying NNHN; None otherwise."""
    if msg.kind != BGP_UPDATE:
        return None
    upd = parse_update(msg.body)
    if ANYCAST not in upd["nlri"] or 39 not in upd["attrs"]:
        return None
    try:
        nhc = nhcmod.decode_value(upd["attrs"][39][2])
    except nhcmod.DecodeError:
        return None
    if nhc.nnhn is None:
        return None
    return frozenset(str(i) for i in nhc.nnhn.nnh_ids)


def announces(msg: Msg) -> bool:
    return msg.kind == BGP_UPDATE and ANYCAST in parse_update(msg.body)["nlri"]


class Capture:
    """tcpdump -i any in a namespace, re-read on demand."""

    def __init__(self, ns: Netns, path: Path) -> None:
        self.path = path
        self.proc = ns.popen(
            ["tcpdump", "-i", "any", "-y", "LINUX_SLL", "-n", "-U", "--immediate-mode",
             "-s", "0", "-w", str(path), "tcp port 179"],
            stderr=subprocess.PIPE,
        )  # fmt: skip
        assert self.proc.stderr is not None
        line = ""
        for _ in range(3):  # "data link type LINUX_SLL", then "listening on ..."
            line = self.proc.stderr.readline().decode(errors="replace")
            if "listening on" in line or not line:
                break
        if "listening on" not in line:
            raise LabError(f"tcpdump did not start: {line.strip()}")

    def messages(self) -> list[Msg]:
        data = self.path.read_bytes()
        if len(data) < 24:
            return []
        # a record may be half written: parse_pcap stops at a short header; drop a short body
        with contextlib.suppress(struct.error, IndexError):
            return bgp_messages(list(_whole_records(data)))
        return []

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def _whole_records(data: bytes) -> Iterator[Packet]:
    off, end = 24, len(data)
    while off + 16 <= end:
        incl = struct.unpack("<I", data[off + 8 : off + 12])[0]
        if off + 16 + incl > end:
            data = data[:off]
            break
        off += 16 + incl
    yield from parse_pcap(data)


# ------------------------------------------------------------------------------ helpers


@dataclass
class Event:
    kind: str  # startup, shut, noshut, cut, restore
    leaf: str
    want: frozenset[str]
    t0: float  # trigger time (capture clock)
    latency_ms: float | None = None  # None: missing


@dataclass
class Result:
    helper: str
    events: list[Event] = field(default_factory=list)
    stuck: str = ""  # why the events stopped early, if they did


def wait_for(pred: Callable[[], Any], timeout: float, what: str, interval: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    raise LabError(f"timed out after {timeout:g} s waiting for {what}")


#: BGP hold time on the leaves' sessions: the lab's 3 s flaps a Python speaker on a loaded
#: 2-core machine; 9 s keeps sessions up (only a cut is detected by it, when carrier loss is not)
HOLD = 9


def leaf_conf(fab: Fabric, leaf: str) -> str:
    nets = [ANYCAST] if leaf in DOWNSTREAM else []
    timers = [f" neighbor {fab.addr('spine1', leaf)} timers {HOLD // 3} {HOLD}"]
    return fabric_bgp_config(
        fab, leaf, bfd=False, networks=nets, originate_own=False, extra_bgp=timers
    )


def spine_frr_conf(fab: Fabric) -> str:
    return fabric_bgp_config(fab, "spine1", bfd=False, originate_own=False, nhc_to=[OBSERVER])


def run_helper(helper: str, events: int, jitter_ms: float, answer_timeout: float,
               rng: random.Random, log: Callable[[str], None],
               coalesce_ms: float | None = None) -> Result:  # fmt: skip
    res = Result(helper)
    with Fabric(leaf_spine(1, 4, hosts=False)) as fab, tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp)
        sp_ns = fab.ns("spine1")
        cap = Capture(sp_ns, run_dir / "spine1.pcap")
        ids = {n: fab.topo.node(n).router_id or "" for n in DOWNSTREAM}
        spine_addr = {n: fab.addr("spine1", n) for n in (OBSERVER, *DOWNSTREAM)}
        leaf_addr = {n: fab.addr(n, "spine1") for n in (OBSERVER, *DOWNSTREAM)}
        frr: dict[str, FrrInstance] = {}
        glbd: GlbdNode | None = None
        try:
            if helper == "glbd":
                glbd = GlbdNode(
                    fab, "spine1", run_dir, GlbdOptions(bfd=False, heartbeat=False, hold_time=9)
                )
                if coalesce_ms is not None:  # [bgp] exists in the generated config
                    text = glbd.config.read_text()
                    glbd.config.write_text(
                        text.replace("[bgp]\n", f"[bgp]\nupdate_coalesce_ms = {coalesce_ms:g}\n")
                    )
                glbd.start()
                glbd.wait_ready(timeout=120)
            else:
                frr["spine1"] = FrrInstance(sp_ns, hostname="spine1").start(spine_frr_conf(fab))
            frr[OBSERVER] = FrrInstance(fab.ns(OBSERVER), hostname=OBSERVER).start(
                leaf_conf(fab, OBSERVER)
            )
            frr[OBSERVER].wait_bgp_established([spine_addr[OBSERVER]], timeout=60)

            def answers(after: float, want: frozenset[str]) -> float | None:
                for m in cap.messages():
                    if (
                        m.ts >= after
                        and m.src == spine_addr[OBSERVER]
                        and m.dst == leaf_addr[OBSERVER]
                        and nnhn_of(m) == want
                    ):
                        return m.ts
                return None

            def trigger(leaf: str, kind: str, after: float) -> float | None:
                for m in cap.messages():
                    if m.ts < after or m.src != leaf_addr[leaf] or m.dst != spine_addr[leaf]:
                        continue
                    if kind == "shut" and m.kind == BGP_NOTIFICATION:
                        return m.ts
                    if kind != "shut" and announces(m):
                        return m.ts
                return None

            def measure(ev: Event) -> None:
                # a cut is detected by carrier loss or, failing that, the hold timer
                wait = max(answer_timeout, HOLD + 3.0) if ev.kind == "cut" else answer_timeout
                deadline = time.monotonic() + wait
                while time.monotonic() < deadline:
                    t = answers(ev.t0, ev.want)
                    if t is not None:
                        ev.latency_ms = (t - ev.t0) * 1e3
                        break
                    time.sleep(0.05)
                res.events.append(ev)
                lat = "MISSING" if ev.latency_ms is None else f"{ev.latency_ms:.1f} ms"
                if ev.latency_ms is None:  # what the helper did send to the observer
                    sent = [
                        m
                        for m in cap.messages()
                        if m.ts >= ev.t0 and m.src == spine_addr[OBSERVER] and m.kind == 2
                    ]
                    seen = sorted({",".join(sorted(x)) for m in sent if (x := nnhn_of(m))})
                    before = [
                        x
                        for m in cap.messages()
                        if m.ts < ev.t0 and m.src == spine_addr[OBSERVER]
                        if (x := nnhn_of(m)) is not None
                    ]
                    last = ",".join(sorted(before[-1])) if before else "none"
                    plain = [
                        39 in parse_update(m.body)["attrs"]
                        for m in cap.messages()
                        if m.src == spine_addr[OBSERVER] and announces(m) and nnhn_of(m) is None
                    ]
                    last += (
                        f"; announcements of the prefix without NNHN in all: {len(plain)}"
                        f" ({sum(plain)} with an NHC attribute)"
                    )
                    lat += (
                        f" ({len(sent)} UPDATEs since, NNHNs {seen or 'none'};"
                        f" last NNHN before: {last}; wanted {','.join(sorted(ev.want))})"
                    )
                log(f"{helper}: {ev.kind:8s} {ev.leaf}: {lat}")

            # start-up: the downstream leaves with jittered delays, in parallel
            start_at = time.monotonic()
            delays = {n: rng.uniform(0, jitter_ms) / 1e3 for n in DOWNSTREAM}
            errors: list[BaseException] = []

            def start_leaf(n: str) -> None:
                time.sleep(max(0.0, start_at + delays[n] - time.monotonic()))
                try:
                    frr[n] = FrrInstance(fab.ns(n), hostname=n).start(leaf_conf(fab, n))
                except BaseException as e:
                    errors.append(e)

            t_start = time.time()
            threads = [threading.Thread(target=start_leaf, args=(n,)) for n in DOWNSTREAM]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            if errors:
                raise errors[0]
            firsts = wait_for(
                lambda: (
                    [trigger(n, "up", t_start) for n in DOWNSTREAM]
                    if all(trigger(n, "up", t_start) for n in DOWNSTREAM)
                    else None
                ),
                60,
                "every downstream leaf's UPDATE",
                interval=0.1,
            )
            assert isinstance(firsts, list)
            last = max(range(len(DOWNSTREAM)), key=lambda i: firsts[i])
            measure(Event("startup", DOWNSTREAM[last], frozenset(ids.values()), max(firsts)))

            down: tuple[str, str] | None = None  # (leaf, how)
            for _ in range(events):
                time.sleep(rng.uniform(0.0, 0.15))
                if down is None:
                    leaf, how = rng.choice(TOGGLED), rng.choice(("shut", "cut"))
                    want = frozenset(v for k, v in ids.items() if k != leaf)
                else:
                    leaf, how = down[0], {"shut": "noshut", "cut": "restore"}[down[1]]
                    want = frozenset(ids.values())
                after = time.time()
                peer = fab.addr("spine1", leaf)
                if how == "shut":
                    frr[leaf].configure(f"router bgp {fab.topo.node(leaf).asn}",
                                        f"neighbor {peer} shutdown")  # fmt: skip
                elif how == "noshut":
                    frr[leaf].configure(f"router bgp {fab.topo.node(leaf).asn}",
                                        f"no neighbor {peer} shutdown")  # fmt: skip
                elif how == "cut":
                    fab.cut(leaf, "spine1", end=leaf)
                else:
                    fab.restore(leaf, "spine1")
                if how == "cut":
                    t0: float | None = after
                else:
                    try:
                        t0 = wait_for(partial(trigger, leaf, how, after), 60, f"{how} on the wire")
                    except LabError as e:  # e.g. the session never came back: stop here
                        log(f"{helper}: {how} {leaf}: {e}; no further events")
                        res.stuck = f"{how} {leaf}: {e}"
                        break
                assert isinstance(t0, float)
                measure(Event(how, leaf, want, t0))
                down = (leaf, how) if how in ("shut", "cut") else None
        finally:
            cap.stop()
            if glbd is not None:
                glbd.stop()
            for f in frr.values():
                with contextlib.suppress(Exception):
                    f.stop()
    return res


# ------------------------------------------------------------------------------ report


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * len(s) + 0.5) - 1))]


def summary(r: Result, kinds: tuple[str, ...]) -> str:
    evs = [e for e in r.events if e.kind in kinds]
    got = [e.latency_ms for e in evs if e.latency_ms is not None]
    miss = sum(1 for e in evs if e.latency_ms is None)
    if not got:
        return f"{r.helper:6s} {len(evs):6d} {'-':>8s} {'-':>8s} {'-':>8s} {miss:8d}"
    return (
        f"{r.helper:6s} {len(evs):6d} {statistics.median(got):8.1f} {pct(got, 0.99):8.1f} "
        f"{max(got):8.1f} {miss:8d}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=30, help="multipath changes per helper")
    ap.add_argument("--quick", action="store_true", help="8 events per helper")
    ap.add_argument("--jitter-ms", type=float, default=300.0, help="start-up jitter per leaf")
    ap.add_argument("--answer-timeout", type=float, default=3.0)
    ap.add_argument("--helpers", default="glbd,frr")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--coalesce-ms", type=float, help="glbd's [bgp] update_coalesce_ms (default: its own)"
    )
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    require_netns()
    if provisioned() is None:
        sys.exit("no FRR 10.x chroot: run glbd-lab provision")
    if shutil.which("tcpdump") is None:
        sys.exit("tcpdump not found")
    n = 8 if args.quick else args.events

    def say(msg: str) -> None:
        if args.verbose:
            print(msg, flush=True)

    results = [
        run_helper(
            h,
            n,
            args.jitter_ms,
            args.answer_timeout,
            random.Random(args.seed),
            say,
            args.coalesce_ms,
        )
        for h in args.helpers.split(",")
    ]
    print(f"command: {' '.join([sys.executable, *sys.argv])}")
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"{os.cpu_count()} CPUs, load average at the end {load}")
    print(
        f"NNHN refresh latency, helper spine1 -> observer leaf1, {n} events + start-up "
        f"(jitter {args.jitter_ms:g} ms) per helper; missing = no UPDATE with the new NNHN "
        f"within {args.answer_timeout:g} s (cut: {max(args.answer_timeout, HOLD + 3.0):g} s);"
        f" BGP hold time {HOLD} s, no BFD"
    )
    head = (
        f"{'helper':6s} {'events':>6s} {'p50 ms':>8s} {'p99 ms':>8s} {'max ms':>8s} {'missing':>8s}"
    )
    groups = {
        "from the triggering packet (start-up, shut, noshut, restore)": (
            "startup", "shut", "noshut", "restore"),
        "link cut, from the cut (includes the helper's failure detection)": ("cut",),
    }  # fmt: skip
    for title, kinds in groups.items():
        print(f"\n{title}\n{head}")
        for r in results:
            print(summary(r, kinds))
    for r in results:
        if r.stuck:
            print(f"\n{r.helper}: events stopped early: {r.stuck}")
    print("\nper kind (p50 ms / missing of n):")
    for r in results:
        parts = []
        for k in ("startup", "shut", "noshut", "cut", "restore"):
            evs = [e for e in r.events if e.kind == k]
            got = [e.latency_ms for e in evs if e.latency_ms is not None]
            p50 = f"{statistics.median(got):.1f}" if got else "-"
            parts.append(f"{k} {p50} / {len(evs) - len(got)} of {len(evs)}")
        print(f"  {r.helper}: " + ", ".join(parts))


if __name__ == "__main__":
    main()
