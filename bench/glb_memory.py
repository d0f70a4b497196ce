"""Resident memory of glbd on a wide leaf: 64 neighbors, 10k prefixes.

Run as root (creates and deletes its own two namespaces)::

    .venv/bin/python bench/glb_memory.py                # 64 neighbors, 10k prefixes, 60 s
    .venv/bin/python bench/glb_memory.py --minutes 10   # the issue's full run
    .venv/bin/python bench/glb_memory.py --neighbors 8 --prefixes 1000 --seconds 20  # smoke

What is real and what is not:

* **real**: one leaf namespace running the real ``glbd run`` (role load-balancer) with its
  ExaBGP child (and ExaBGP's bridge process) and its BFD engine child, 64 BGP neighbors on 64
  veth interfaces, the kernel FIB it programs (10k routes on weighted nexthop groups), and
  every byte it receives: BGP sessions (OPEN/KEEPALIVE/UPDATE with the NHC attribute, type 39,
  carrying an NNHN encoded with :mod:`glbd.bgp.nhc`), BFD control packets from :mod:`bfd.engine`
  sessions (RFC 5881), heartbeat v1 datagrams (:mod:`heartbeat.wire`) sent to
  224.0.0.149:6149 with TTL 255 out of each interface (:func:`heartbeat.transport.open_socket`).
* **emulated**: the 64 spines. They all live in ONE second namespace (64 veth peers, one per
  spine) served by ONE feeder process (this file, ``--feeder``): a minimal BGP speaker (asyncio,
  passive on port 179 of every spine address, one BGP identifier per spine, AS 65100), a BFD
  engine (:class:`bfd.engine.BfdEngine`, one child process) with one session per spine, and a
  heartbeat sender per spine (one datagram per ``--hb-ms`` each, spine phases spread over the
  interval). Each spine announces every prefix (so the leaf holds 64 paths per prefix). By
  default all prefixes of one originating leaf share an UPDATE (FRR-like packing, up to 4096
  bytes) and the leaf sets ``trust_packed_nnhn``; ``--per-prefix`` sends one prefix per UPDATE
  like a glbd helper (ExaBGP ``group-updates false``): 640k UPDATEs, which this shared 2-core
  box needs many minutes to converge on. The feeder runs at nice -10 (the spines stand for
  other machines; a starved feeder would make the leaf see heartbeat expiries and BFD
  timeouts that are artefacts of the emulation).
* Timers: heartbeat 100 ms and BFD 300 ms x 3 by default (glbd's defaults are 20 ms and
  50 ms x 3: ``--hb-ms 20 --bfd-ms 50``) -- the rates set CPU, not the memory held.
* Prefixes: ``--prefixes`` prefixes from 198.19.0.0/16 spread over ``--remote-leaves``
  originating leaves (BGP ids 198.18.6.r, AS 65100+r... path ``65100 65200+r``); NNHN = [spine
  id, remote leaf id]. Every spine's heartbeat has one entry per remote leaf (and one for the
  leaf under test); ``--churn`` band changes per second (a random spine's entry for a random
  remote leaf toggles between band 7 and 5), and loads move every second, so the leaf keeps
  recomputing weights and rewriting groups for the whole run.

Measurement: VmRSS (``/proc/PID/status``) of glbd and each of its descendants every
``--interval`` seconds once the leaf has every session up and every route in the kernel;
start/end/max and the least-squares slope (MB/min) over the run and over its second half.
Then ``glbctl routes`` at that scale (streamed): time to the first part and to the last,
``glbctl routes --json`` and the table, and glbd's RSS before and after answering.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import math
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from glbdlab.nodes import PERMIT_ALL

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SPINE_AS = 65100
LEAF_AS = 65001
REMOTE_AS_BASE = 65200
LEAF_ID = "198.18.5.1"
PREFIX_BASE = int(ipaddress.IPv4Address("198.19.0.0"))
MARKER = b"\xff" * 16


def spine_id(i: int) -> str:
    return f"198.18.4.{i}"


def remote_id(r: int) -> str:
    return f"198.18.6.{r}"


def link_addrs(i: int) -> tuple[str, str]:
    """(spine, leaf) addresses of link i (1-based), /31s from 198.18.8.0 upward."""
    base = int(ipaddress.IPv4Address("198.18.8.0")) + 2 * (i - 1)
    return str(ipaddress.IPv4Address(base)), str(ipaddress.IPv4Address(base + 1))


def prefix_len(n: int) -> int:
    return 16 + max(0, math.ceil(math.log2(max(n, 1))))


def load() -> str:
    a, b, c = os.getloadavg()
    return f"{a:.2f} {b:.2f} {c:.2f}"


# =============================================================================== feeder (spines)
def bgp_msg(kind: int, body: bytes) -> bytes:
    return MARKER + struct.pack("!HB", 19 + len(body), kind) + body


def bgp_open(asn: int, hold: int, bgp_id: str) -> bytes:
    caps = bytes([1, 4, 0, 1, 0, 1])  # multiprotocol IPv4 unicast
    caps += bytes([65, 4]) + struct.pack("!I", asn)  # 4-octet AS
    caps += bytes([2, 0])  # route refresh
    opt = bytes([2, len(caps)]) + caps
    body = struct.pack("!BHH4sB", 4, asn, hold, ipaddress.IPv4Address(bgp_id).packed, len(opt))
    return bgp_msg(1, body + opt)


KEEPALIVE = bgp_msg(4, b"")
END_OF_RIB = bgp_msg(2, b"\x00\x00\x00\x00")
CEASE_ADMIN_RESET = bgp_msg(3, bytes([6, 4]))


def path_attrs(spine: int, remote: int, nh: str) -> bytes:
    from glbd.bgp import nhc

    origin = bytes([0x40, 1, 1, 0])
    asp = bytes([2, 2]) + struct.pack("!II", SPINE_AS, REMOTE_AS_BASE + remote)
    as_path = bytes([0x40, 2, len(asp)]) + asp
    next_hop = bytes([0x40, 3, 4]) + ipaddress.IPv4Address(nh).packed
    attr = nhc.Nhc.for_next_hop(
        nh,
        nnhn=nhc.Nnhn(
            ipaddress.IPv4Address(spine_id(spine)), (ipaddress.IPv4Address(remote_id(remote)),)
        ),
    ).encode()
    return origin + as_path + next_hop + attr


def nlri(i: int, plen: int) -> bytes:
    addr = PREFIX_BASE + (i << (32 - plen))
    nbytes = (plen + 7) // 8
    return bytes([plen]) + addr.to_bytes(4, "big")[:nbytes]


def remote_of(i: int, remotes: int) -> int:
    return i % remotes + 1


class Feeder:
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.n = cfg["neighbors"]
        self.established: set[int] = set()
        self.sent_updates = 0
        self.hb_sent = 0
        self.bfd_up: set[str] = set()
        self.bfd_downs = 0
        self.by_addr = {link_addrs(i)[0]: i for i in range(1, self.n + 1)}
        self.plen = prefix_len(cfg["prefixes"])
        self.rng = random.Random(1)
        self.writers: dict[int, asyncio.StreamWriter] = {}
        self.held: set[int] = set()  # spines whose sessions are refused (a peer restart)

    def say(self, **kw: Any) -> None:
        # t: CLOCK_MONOTONIC, system-wide, so the parent can compare it with its own clock
        print(json.dumps({**kw, "t": time.monotonic()}), flush=True)

    # --- BGP -------------------------------------------------------------------------------
    def updates(self, spine: int) -> list[bytes]:
        nh = link_addrs(spine)[0]
        remotes = self.cfg["remote_leaves"]
        attrs = {r: path_attrs(spine, r, nh) for r in range(1, remotes + 1)}
        out: list[bytes] = []
        if not self.cfg["packed"]:
            for i in range(self.cfg["prefixes"]):
                a = attrs[remote_of(i, remotes)]
                out.append(
                    bgp_msg(2, b"\x00\x00" + struct.pack("!H", len(a)) + a + nlri(i, self.plen))
                )
            return out
        for r in range(1, remotes + 1):
            a = attrs[r]
            head = b"\x00\x00" + struct.pack("!H", len(a)) + a
            chunk = b""
            for i in range(r - 1, self.cfg["prefixes"], remotes):
                nl = nlri(i, self.plen)
                if 19 + len(head) + len(chunk) + len(nl) > 4096:
                    out.append(bgp_msg(2, head + chunk))
                    chunk = b""
                chunk += nl
            if chunk:
                out.append(bgp_msg(2, head + chunk))
        return out

    def withdrawals(self) -> list[bytes]:
        """Every prefix withdrawn, packed into UPDATEs of up to 4096 bytes."""
        out: list[bytes] = []
        chunk = b""
        for i in range(self.cfg["prefixes"]):
            nl = nlri(i, self.plen)
            if 19 + 4 + len(chunk) + len(nl) > 4096:
                out.append(bgp_msg(2, struct.pack("!H", len(chunk)) + chunk + b"\x00\x00"))
                chunk = b""
            chunk += nl
        if chunk:
            out.append(bgp_msg(2, struct.pack("!H", len(chunk)) + chunk + b"\x00\x00"))
        return out

    @staticmethod
    async def send_all(writer: asyncio.StreamWriter, msgs: list[bytes], tail: bytes = b"") -> int:
        batch = bytearray()
        for m in msgs:
            batch += m
            if len(batch) > 65536:
                writer.write(bytes(batch))
                batch.clear()
                await writer.drain()
        writer.write(bytes(batch) + tail)
        await writer.drain()
        return len(msgs)

    async def session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        local = writer.get_extra_info("sockname")[0]
        spine = self.by_addr.get(local)
        if spine is None or spine in self.held:
            writer.close()
            return
        hold = self.cfg["hold"]
        ka_task: asyncio.Task[None] | None = None
        try:
            writer.write(bgp_open(SPINE_AS, hold, spine_id(spine)))
            await writer.drain()
            kind, _ = await self.read_msg(reader)
            if kind != 1:
                return
            writer.write(KEEPALIVE)
            kind, _ = await self.read_msg(reader)
            if kind != 4:
                return

            async def keepalives() -> None:
                while True:
                    await asyncio.sleep(hold / 3)
                    writer.write(KEEPALIVE)

            ka_task = asyncio.create_task(keepalives())
            self.established.add(spine)
            self.writers[spine] = writer
            self.say(ev="established", spine=spine, n=len(self.established))
            self.sent_updates += await self.send_all(writer, self.updates(spine), END_OF_RIB)
            self.say(ev="rib_sent", spine=spine)
            while True:
                kind, body = await self.read_msg(reader)
                if kind == 3:
                    self.say(ev="notification", spine=spine, data=body.hex())
                    return
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as e:
            self.say(ev="session_lost", spine=spine, error=str(e))
        finally:
            self.established.discard(spine)
            if self.writers.get(spine) is writer:
                del self.writers[spine]
            if ka_task is not None:
                ka_task.cancel()
            writer.close()

    @staticmethod
    async def read_msg(reader: asyncio.StreamReader) -> tuple[int, bytes]:
        head = await reader.readexactly(19)
        length, kind = struct.unpack("!HB", head[16:19])
        return kind, await reader.readexactly(length - 19)

    # --- heartbeats --------------------------------------------------------------------------
    async def heartbeats(self) -> None:
        from heartbeat import wire
        from heartbeat.transport import open_socket

        interval = self.cfg["hb_ms"] / 1000
        remotes = self.cfg["remote_leaves"]
        socks = {i: open_socket(f"l{i}") for i in range(1, self.n + 1)}
        bands = {(i, r): 7 for i in range(1, self.n + 1) for r in range(1, remotes + 1)}
        seq = {i: self.rng.randrange(1 << 32) for i in range(1, self.n + 1)}
        group = ("224.0.0.149", 6149)

        def entries(i: int) -> wire.Entries:
            es = [wire.Entry(wire.node_id(LEAF_ID), 1, 100_000, 7, 0, self.rng.randrange(3000), 0)]
            for r in range(1, remotes + 1):
                b = bands[(i, r)]
                es.append(
                    wire.Entry(
                        wire.node_id(remote_id(r)), 100 + r, 100_000, b, 0,
                        self.rng.randrange(2000) if b == 7 else 7000 + self.rng.randrange(500),
                        0 if b == 7 else 200_000,
                    )
                )  # fmt: skip
            return wire.Entries(es)

        ents = {i: entries(i) for i in socks}
        ids = {i: wire.node_id(spine_id(i)) for i in socks}
        slots = 8  # spines spread over the interval in 8 phases
        loop = asyncio.get_running_loop()
        t_next = loop.time()
        t_churn = t_next + 1.0
        k = 0
        while True:
            phase = k % slots
            for i in range(1 + phase, self.n + 1, slots):
                seq[i] = (seq[i] + 1) & 0xFFFFFFFF
                data = wire.Heartbeat(ids[i], seq[i], int(interval * 1e6), ents[i]).encode()
                with contextlib.suppress(OSError):
                    socks[i].sendto(data, group)
                    self.hb_sent += 1
            k += 1
            t_next += interval / slots
            now = loop.time()
            if now >= t_churn:  # once a second: loads move, some bands toggle
                t_churn += 1.0
                churn = float(self.cfg["churn"])
                changes = int(churn) + (1 if self.rng.random() < churn % 1 else 0)
                for _ in range(changes):
                    key = (self.rng.randrange(1, self.n + 1), self.rng.randrange(1, remotes + 1))
                    bands[key] = 5 if bands[key] == 7 else 7
                for i in socks:
                    ents[i] = entries(i)
            await asyncio.sleep(max(0.0, t_next - loop.time()))

    # --- BFD ---------------------------------------------------------------------------------
    def start_bfd(self) -> Any:
        from bfd.engine import BfdEngine, SessionConfig
        from bfd.session import SessionParams

        def on_event(ev: Any) -> None:
            if ev.new.name.upper() == "UP":
                self.bfd_up.add(ev.interface)
            else:
                if ev.interface in self.bfd_up:  # a flap: the leaf or this side missed packets
                    self.bfd_downs += 1
                    self.say(ev="bfd_down", interface=ev.interface, reason=ev.reason)
                self.bfd_up.discard(ev.interface)

        us = self.cfg["bfd_ms"] * 1000
        eng = BfdEngine(on_event, mode="process", call_timeout=30)
        eng.start()
        for i in range(1, self.n + 1):
            sp, lf = link_addrs(i)
            eng.add_session(
                SessionConfig(
                    peer=lf, interface=f"l{i}", local=sp,
                    params=SessionParams(desired_min_tx=us, required_min_rx=us, detect_mult=3),
                )
            )  # fmt: skip
        return eng

    # --- control (stdin lines from the parent) ------------------------------------------------
    async def command(self, line: str) -> None:
        """``drop N``: Cease to spine N's session, refuse it until ``restore N``;
        ``withdraw N`` / ``announce N``: withdraw or re-send all its prefixes on a live session."""
        words = line.split()
        if len(words) != 2 or not words[1].isdigit():
            self.say(ev="bad_command", line=line)
            return
        cmd, spine = words[0], int(words[1])
        w = self.writers.get(spine)
        if cmd == "drop":
            self.held.add(spine)
            if w is not None:
                w.write(CEASE_ADMIN_RESET)
                with contextlib.suppress(ConnectionError, OSError):
                    await w.drain()
                w.close()
            self.say(ev="dropped", spine=spine, live=w is not None)
        elif cmd == "restore":
            self.held.discard(spine)
            self.say(ev="restored", spine=spine)
        elif cmd in ("withdraw", "announce") and w is not None:
            msgs = self.withdrawals() if cmd == "withdraw" else self.updates(spine)
            with contextlib.suppress(ConnectionError, OSError):
                await self.send_all(w, msgs)
            self.say(ev=f"{cmd}_sent", spine=spine, updates=len(msgs))
        else:
            self.say(ev="bad_command", line=line)

    async def main(self) -> None:
        eng = self.start_bfd() if self.cfg["bfd_ms"] > 0 else None  # 0: no BFD (convergence.py)
        server = await asyncio.start_server(self.session, "0.0.0.0", 179, reuse_address=True)
        hb = asyncio.create_task(self.heartbeats())
        self.say(ev="ready", pid=os.getpid(), bfd_pid=eng.pid if eng is not None else None)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        pending = bytearray()
        tasks: set[asyncio.Task[None]] = set()

        def on_stdin() -> None:  # EOF (parent gone) or "quit" stops; other lines are commands
            data = os.read(sys.stdin.fileno(), 4096)
            if not data:
                loop.remove_reader(sys.stdin.fileno())
                stop.set()
                return
            pending.extend(data)
            while b"\n" in pending:
                line, _, rest = bytes(pending).partition(b"\n")
                pending[:] = rest
                text = line.decode(errors="replace").strip()
                if text == "quit":
                    stop.set()
                elif text:
                    t = asyncio.create_task(self.command(text))
                    tasks.add(t)
                    t.add_done_callback(tasks.discard)

        loop.add_reader(sys.stdin.fileno(), on_stdin)
        try:
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 5)
                self.say(
                    ev="status", established=len(self.established), bfd_up=len(self.bfd_up),
                    bfd_downs=self.bfd_downs,
                    updates=self.sent_updates, hb_sent=self.hb_sent,
                )  # fmt: skip
        finally:
            hb.cancel()
            server.close()
            if eng is not None:
                eng.stop()


def feeder_main(cfg_path: str) -> int:
    cfg = json.loads(Path(cfg_path).read_text())
    # the emulated spines stand for 64 other machines: do not let the shared box starve them
    with contextlib.suppress(OSError):
        os.nice(-10)
    asyncio.run(Feeder(cfg).main())
    return 0


# ============================================================================== leaf + bench
def leaf_config(args: argparse.Namespace, run_dir: Path) -> str:
    lines = [
        "# glbd on the leaf under test (generated by bench/glb_memory.py)",
        f'router_id = "{LEAF_ID}"',
        f"local_as = {LEAF_AS}",
        'role = "load-balancer"',
    ]
    for i in range(1, args.neighbors + 1):
        sp, lf = link_addrs(i)
        lines += [
            "",
            "[[neighbors]]",
            f'address = "{sp}"',
            f"remote_as = {SPINE_AS}",
            f'interface = "s{i}"',
            f'local_address = "{lf}"',
            f'description = "spine{i}"',
            "passive = false",
            f"import = {PERMIT_ALL}",
            f"export = {PERMIT_ALL}",
        ]
    lines += [
        "",
        "[bgp]",
        f"hold_time = {args.hold}",
        f"trust_packed_nnhn = {'true' if args.packed else 'false'}",
        "",
        "[bfd]",
        f"min_tx_ms = {args.bfd_ms}",
        f"min_rx_ms = {args.bfd_ms}",
        "detect_mult = 3",
        "",
        "[heartbeat]",
        f"interval_ms = {args.hb_ms}",
        f"min_spacing_ms = {min(5, args.hb_ms)}",
        "",
        "[fib]",
        'group_type = "resilient"',
        "",
        "[control]",
        f'socket = "{run_dir / "glbd.sock"}"',
        "",
        "[logging]",
        'level = "info"',
        'format = "json"',
    ]
    return "\n".join(lines) + "\n"


def rss_kb(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return 0


def children(pid: int) -> list[int]:
    out: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(x) for x in f.read().split()]
    return out


def proc_name(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    text = " ".join(a.decode(errors="replace") for a in argv if a)
    if "exabgp.bridge" in text or "glbd.bgp.exabgp_bridge" in text:
        return "exabgp bridge"
    if "exabgp" in text:
        return "exabgp"
    if "bfd" in text:
        return "bfd engine"
    return Path(argv[0].decode(errors="replace")).name or "?"


def tree(pid: int) -> dict[str, int]:
    """name -> pid for glbd and its descendants (names made unique)."""
    out: dict[str, int] = {"glbd": pid}
    todo = children(pid)
    while todo:
        p = todo.pop(0)
        name = proc_name(p)
        while name in out:
            name += "'"
        out[name] = p
        todo += children(p)
    return out


def slope_mb_per_min(ts: list[float], vs: list[float]) -> float:
    n = len(ts)
    if n < 2:
        return float("nan")
    mt, mv = sum(ts) / n, sum(vs) / n
    den = sum((t - mt) ** 2 for t in ts)
    if den == 0:
        return float("nan")
    return sum((t - mt) * (v - mv) for t, v in zip(ts, vs, strict=True)) / den * 60 / 1024


def kernel_counts(ns: Any) -> tuple[int, int, int]:
    """(routes on a nexthop group, groups they use, members of the narrowest of those) in the
    leaf's main table."""
    routes = json.loads(ns.ip("-j", "route", "show", check=False).stdout or "[]")
    nhs = {
        n["id"]: n for n in json.loads(ns.ip("-j", "nexthop", "show", check=False).stdout or "[]")
    }
    used = {r["nhid"] for r in routes if "nhid" in r}
    widths = [len(nhs[i].get("group", [])) for i in used if i in nhs]
    return sum(1 for r in routes if "nhid" in r), len(used), min(widths, default=0)


def build(lab: Any, n: int) -> tuple[Any, Any]:
    from glbdlab.netns import _run

    leaf, fab = lab.netns("leaf"), lab.netns("spines")
    cmds = [
        f"link add s{i} netns {leaf.name} type veth peer name l{i} netns {fab.name}"
        for i in range(1, n + 1)
    ]
    _run(["ip", "-batch", "-"], input="\n".join(cmds) + "\n")
    lcmds, fcmds = [], []
    for i in range(1, n + 1):
        sp, lf = link_addrs(i)
        lcmds += [f"addr add {lf}/31 dev s{i}", f"link set s{i} up"]
        fcmds += [f"addr add {sp}/31 dev l{i}", f"link set l{i} up"]
    leaf.ip_batch(lcmds)
    fab.ip_batch(fcmds)
    return leaf, fab


class FeederProc:
    """The feeder process in the spines' namespace; its events (JSON lines with a monotonic
    ``t``) are kept in ``events``; :meth:`send` writes one control line (see ``Feeder.command``)."""

    def __init__(self, fab: Any, cfg_path: Path) -> None:
        self.proc = fab.popen(
            [sys.executable, str(Path(__file__).resolve()), "--feeder", str(cfg_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self.last: dict[str, Any] = {}
        self.ready = threading.Event()
        self.info: dict[str, Any] = {}
        self.quiet = False  # set once glbd is being stopped: its sessions closing is expected
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def find(self, ev: str, since: float = 0.0, **match: Any) -> dict[str, Any] | None:
        """The first event named ``ev`` at or after monotonic ``since`` matching ``match``."""
        with self.lock:
            for e in self.events:
                ok = e.get("ev") == ev and e.get("t", 0.0) >= since
                if ok and all(e.get(k) == v for k, v in match.items()):
                    return e
        return None

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(ValueError):
                ev = json.loads(line)
                if ev.get("ev") != "status":
                    with self.lock:
                        self.events.append(ev)
                if ev.get("ev") == "ready":
                    self.info = ev
                    self.ready.set()
                elif ev.get("ev") == "status":
                    self.last = ev
                elif ev.get("ev") in ("notification", "session_lost") and not self.quiet:
                    print(f"  feeder: {ev}", flush=True)

    def stop(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.write(b"quit\n")
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def run(args: argparse.Namespace) -> int:
    from glbdlab.netns import Lab, LabError

    from glbd.cli import glbctl as ctl

    started = datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    duration = args.minutes * 60 if args.minutes else args.seconds
    print(
        f"glb_memory: {started}, {os.cpu_count()} CPUs, load {load()}; neighbors={args.neighbors} "
        f"prefixes={args.prefixes} (/{prefix_len(args.prefixes)}) remote leaves="
        f"{args.remote_leaves} {'packed' if args.packed else 'one prefix per UPDATE'}, heartbeat "
        f"{args.hb_ms} ms, BFD {args.bfd_ms} ms x 3, churn {args.churn}/s, measure {duration:g} s "
        f"every {args.interval:g} s",
        flush=True,
    )
    run_dir = Path(tempfile.mkdtemp(prefix="glb-memory-"))
    samples: list[tuple[float, str, dict[str, int]]] = []
    glbd_proc: subprocess.Popen[bytes] | None = None
    feeder: FeederProc | None = None
    result = 1
    try:
        with Lab() as lab:
            t0 = time.monotonic()
            leaf, fab = build(lab, args.neighbors)
            print(
                f"namespaces + {args.neighbors} veths in {time.monotonic() - t0:.1f} s", flush=True
            )
            cfg_path = run_dir / "feeder.json"
            cfg_path.write_text(json.dumps({
                "neighbors": args.neighbors, "prefixes": args.prefixes,
                "remote_leaves": args.remote_leaves, "packed": args.packed, "hold": args.hold,
                "hb_ms": args.hb_ms, "bfd_ms": args.bfd_ms, "churn": args.churn,
            }))  # fmt: skip
            feeder = FeederProc(fab, cfg_path)
            if not feeder.ready.wait(60):
                raise LabError("feeder not ready in 60 s")
            conf = run_dir / "glbd.toml"
            conf.write_text(leaf_config(args, run_dir))
            log = open(run_dir / "glbd.daemon.log", "ab")  # noqa: SIM115 - handed to the child
            t_start = time.monotonic()
            glbd_proc = leaf.popen(
                [sys.executable, "-m", "glbd", "run", "-c", str(conf)],
                stdout=log, stderr=subprocess.STDOUT,
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
            )  # fmt: skip
            log.close()
            sock = str(run_dir / "glbd.sock")
            # converge: every prefix in the kernel on a group with every neighbor in it.
            # The control socket is NOT polled meanwhile: its answers are not free (see the
            # docs page) and would be part of what is measured.
            deadline = time.monotonic() + args.converge_timeout
            last_print = 0.0
            converged = True
            while True:
                if glbd_proc.poll() is not None:
                    raise LabError(f"glbd exited with {glbd_proc.returncode}; see {run_dir}")
                routes, groups, width = kernel_counts(leaf)
                now = time.monotonic()
                if now - last_print > 10:
                    last_print = now
                    print(
                        f"  [{now - t_start:5.0f} s] kernel routes {routes}/{args.prefixes}, "
                        f"groups {groups} (narrowest {width}/{args.neighbors}), feeder "
                        f"{feeder.last}, glbd RSS {(rss_kb(glbd_proc.pid) or 0) / 1024:.0f} MB, "
                        f"load {load()}",
                        flush=True,
                    )
                if routes >= args.prefixes and width >= args.neighbors:
                    break
                if now > deadline:  # measure anyway: a leaf that cannot converge is a result
                    print(
                        f"NOT converged after {args.converge_timeout:g} s (routes {routes}, "
                        f"narrowest group {width}); measuring anyway",
                        flush=True,
                    )
                    converged = False
                    break
                time.sleep(3)
            conv = time.monotonic() - t_start if converged else -1.0
            print(
                f"measuring after {time.monotonic() - t_start:.0f} s (load {load()}); "
                f"settling {args.settle:g} s",
                flush=True,
            )
            time.sleep(args.settle)
            procs = tree(glbd_proc.pid)
            print("processes: " + ", ".join(f"{k}={v}" for k, v in procs.items()), flush=True)
            names = list(procs)
            hdr = f"{'t (s)':>6} " + " ".join(f"{n[:14]:>14}" for n in names) + "   load"
            print(f"\nVmRSS, MB\n{hdr}", flush=True)
            t_m0 = time.monotonic()
            while True:
                t = time.monotonic() - t_m0
                row = {n: rss_kb(p) or 0 for n, p in procs.items()}
                samples.append((t, load(), row))
                print(
                    f"{t:6.0f} "
                    + " ".join(f"{row[n] / 1024:14.1f}" for n in names)
                    + f"   {load()}",
                    flush=True,
                )
                if glbd_proc.poll() is not None:
                    raise LabError("glbd exited during the run")
                if t >= duration:
                    break
                time.sleep(min(args.interval, max(0.0, duration - t)))
            glbctl_timing(sock, glbd_proc.pid)
            routes, groups, width = kernel_counts(leaf)
            status: dict[str, Any] = {}
            with contextlib.suppress(ctl.DaemonError):
                status = {"counters": ctl.request(sock, "counters", timeout=5)}
            hb = status.get("counters", {})
            print(
                f"\nend: kernel routes {routes}, groups {groups} (narrowest {width}); "
                f"feeder {feeder.last}; "
                f"glbd counters: {json.dumps(hb)[:600]}",
                flush=True,
            )
            report(samples, names, started, args, conv, load())
            result = 0
            feeder.quiet = True
            glbd_proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                glbd_proc.wait(20)
    finally:
        if feeder is not None:
            feeder.stop()
        if glbd_proc is not None and glbd_proc.poll() is None:
            glbd_proc.kill()
        if args.keep:
            print(f"run dir kept: {run_dir}")
        else:
            shutil.rmtree(run_dir, ignore_errors=True)
    return result


def glbctl_timing(sock: str, pid: int) -> dict[str, float]:
    """``glbctl routes`` at this scale (64 x 10k: 640k paths, ~110 MB of JSON, streamed):
    glbctl's wall time with ``--json`` and as a table (output to /dev/null), the rows and
    parts it got, and glbd's RSS before and after (what answering costs the daemon)."""
    from glbd.cli import glbctl as ctl

    out: dict[str, float] = {"rss_before_mb": (rss_kb(pid) or 0) / 1024}
    t0 = time.monotonic()
    rows = paths = parts = 0
    first = 0.0
    try:
        for resp in ctl.responses(sock, "routes", timeout=120):
            first = first or time.monotonic() - t0
            parts += resp.more
            rows += len(resp.result)
            paths += sum(len(r.get("next_hops") or []) for r in resp.result)
    except ctl.DaemonError as e:
        print(f"glbctl routes: {e}", flush=True)
        return out
    out |= {"rows": rows, "paths": paths, "parts": parts, "first_part_s": first,
            "stream_s": time.monotonic() - t0}  # fmt: skip
    glbctl = [sys.executable, "-m", "glbd.cli.glbctl", "--socket", sock, "routes"]
    for name, argv in (("json_s", [*glbctl, "--json"]), ("table_s", glbctl)):
        t0 = time.monotonic()
        r = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=600)
        out[name] = time.monotonic() - t0 if r.returncode == 0 else -1.0
    out["rss_after_mb"] = (rss_kb(pid) or 0) / 1024
    print(
        f"\nglbctl routes: {rows} prefixes, {paths} paths in {parts} parts; first part after "
        f"{first:.2f} s, all in {out['stream_s']:.1f} s; glbctl routes --json "
        f"{out['json_s']:.1f} s, table {out['table_s']:.1f} s; glbd RSS "
        f"{out['rss_before_mb']:.0f} -> {out['rss_after_mb']:.0f} MB",
        flush=True,
    )
    return out


def report(
    samples: list[tuple[float, str, dict[str, int]]],
    names: list[str],
    started: str,
    args: argparse.Namespace,
    conv: float,
    load_end: str,
) -> None:
    ts = [t for t, _, _ in samples]
    half = [i for i, t in enumerate(ts) if t >= ts[-1] / 2]
    print(
        f"\nResults ({started}; load start {samples[0][1]}, end {load_end}; "
        + (f"converged in {conv:.0f} s)\n" if conv >= 0 else "NOT converged)\n")
    )
    print(
        "| process | start MB | end MB | max MB | slope MB/min | 2nd-half slope MB/min | target |"
    )
    print("|---|---:|---:|---:|---:|---:|---|")
    out = {}
    for n in names:
        vs = [row[n] / 1 for _, _, row in samples]
        s_all = slope_mb_per_min(ts, vs)
        s_half = slope_mb_per_min([ts[i] for i in half], [vs[i] for i in half])
        target = "<= 100 MB, no growth" if n == "glbd" else "(info)"
        print(
            f"| {n} | {vs[0] / 1024:.1f} | {vs[-1] / 1024:.1f} | {max(vs) / 1024:.1f} | "
            f"{s_all:+.3f} | {s_half:+.3f} | {target} |"
        )
        out[n] = {"start_mb": vs[0] / 1024, "end_mb": vs[-1] / 1024, "max_mb": max(vs) / 1024,
                  "slope_mb_min": s_all, "half_slope_mb_min": s_half}  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"date": started, "args": vars(args), "converged_s": conv, "processes": out,
             "samples": samples}, indent=1))  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--neighbors", type=int, default=64)
    ap.add_argument("--prefixes", type=int, default=10_000)
    ap.add_argument("--remote-leaves", type=int, default=32, help="originating leaves (NNHNs)")
    ap.add_argument("--seconds", type=float, default=60.0, help="measuring time (default 60)")
    ap.add_argument("--minutes", type=float, default=0.0, help="measuring time in minutes")
    ap.add_argument("--interval", type=float, default=5.0, help="RSS sampling period, s")
    ap.add_argument("--settle", type=float, default=10.0, help="wait after convergence, s")
    ap.add_argument(
        "--hb-ms", type=int, default=100, help="heartbeat interval (glbd's default is 20)"
    )
    ap.add_argument("--bfd-ms", type=int, default=300, help="BFD tx/rx interval (x3)")
    ap.add_argument("--hold", type=int, default=9, help="BGP hold time")
    ap.add_argument("--churn", type=float, default=2.0, help="band toggles per second")
    ap.add_argument(
        "--per-prefix",
        action="store_true",
        help="one prefix per UPDATE like a glbd helper (default: packed, FRR-like)",
    )
    ap.add_argument("--converge-timeout", type=float, default=600.0, help="then measure anyway, s")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--keep", action="store_true", help="keep the run directory")
    ap.add_argument("--feeder", metavar="CFG", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.feeder:
        return feeder_main(args.feeder)
    if os.geteuid() != 0:
        print("needs root (network namespaces)", file=sys.stderr)
        return 2
    args.packed = not args.per_prefix
    if not 1 <= args.neighbors <= 250 or not 1 <= args.remote_leaves <= 250:
        print("--neighbors and --remote-leaves: 1..250", file=sys.stderr)
        return 2
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
