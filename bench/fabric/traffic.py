"""Traffic and measurement for the fabric benchmark, all in-process (no per-flow processes).

* :func:`all_to_all` -- the AllReduce-like exchange: every host sends ``nbytes`` to every other
  host over ``flows`` TCP connections per ordered pair, each flow carrying exactly
  ``nbytes / flows`` bytes (so a flow hashed onto a slow path cannot hand its bytes to a fast
  one: that is what a collective's fixed chunks do). Sockets are created inside the host
  namespaces (``Netns.socket``) and driven by ONE selector loop in this thread. Source ports are
  fixed per (run, case), so every contender sees the same 5-tuples (same hash luck).
* :class:`LinkSampler` -- a thread reading tx byte counters of every fabric interface from
  raw rtnetlink sockets living in the router namespaces (one RTM_GETLINK dump per namespace and
  sample; no process spawned).
* :func:`tcp_counters` -- retransmitted segments and reordering events from the host
  namespaces' ``/proc/net/snmp`` and ``/proc/net/netstat``.
* :func:`cpu_times` -- ``/proc/stat`` for the machine-wide CPU idle share.
"""

from __future__ import annotations

import contextlib
import errno
import os
import selectors
import socket
import struct
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from glbdlab.netns import LabError, Netns

_CHUNK = 256 * 1024
_PAYLOAD = memoryview(bytes(_CHUNK))


@dataclass
class Flow:
    src: str
    dst: str
    sport: int
    nbytes: int
    sent: int = 0
    received: int = 0
    t_connected: float = 0.0
    t_sent: float = 0.0  # last byte handed to the kernel
    t_done: float = 0.0  # receiver saw EOF after every byte


@dataclass
class ExchangeResult:
    ok: bool
    completion_s: float
    error: str = ""
    flows: list[Flow] = field(default_factory=list)
    t0: float = 0.0

    def per_dst(self) -> dict[str, float]:
        """Destination host -> time its last incoming flow finished (s after the start)."""
        out: dict[str, float] = {}
        for f in self.flows:
            if f.t_done:
                out[f.dst] = max(out.get(f.dst, 0.0), f.t_done - self.t0)
        return out

    def flow_times(self) -> list[float]:
        return sorted(f.t_done - self.t0 for f in self.flows if f.t_done)


def all_to_all(
    ns: dict[str, Netns],
    addrs: dict[str, str],
    *,
    nbytes: int,
    flows: int,
    port: int,
    sport_base: int,
    timeout: float = 180.0,
    on_start: Any = None,
    cc: str = "",
    tos: int = 0,
) -> ExchangeResult:
    """Run one all-to-all exchange between the hosts ``ns`` (host name -> namespace, addresses
    in ``addrs``). Returns when every flow's receiver has seen all bytes and EOF, or after
    ``timeout`` seconds (``ok=False``). ``on_start(t0)`` is called right after the connects.
    ``cc``: TCP congestion control of every socket (TCP_CONGESTION; both ends). ``tos``: IP TOS
    of every socket (routers derive the forwarded packets' qdisc priority from it)."""
    hosts = sorted(ns)
    per_flow = nbytes // flows
    sel = selectors.DefaultSelector()
    socks: list[socket.socket] = []
    flows_l: list[Flow] = []
    by_peer: dict[tuple[str, int], Flow] = {}
    try:
        for h in hosts:
            ls = ns[h].socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(ls)
            ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if cc:  # accepted sockets inherit it (and the TOS)
                ls.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
            if tos:
                ls.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
            ls.bind((addrs[h], port))
            ls.listen(1024)
            ls.setblocking(False)
            sel.register(ls, selectors.EVENT_READ, ("listen", h))
        sport = sport_base
        clients: list[tuple[socket.socket, Flow]] = []
        for a in hosts:
            for b in hosts:
                if a == b:
                    continue
                for _ in range(flows):
                    f = Flow(a, b, sport, per_flow)
                    sport += 1
                    s = ns[a].socket(socket.AF_INET, socket.SOCK_STREAM)
                    socks.append(s)
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    if cc:
                        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
                    if tos:
                        s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
                    s.bind((addrs[a], f.sport))
                    s.setblocking(False)
                    clients.append((s, f))
                    flows_l.append(f)
                    by_peer[(addrs[a], f.sport)] = f
        t0 = time.monotonic()  # sockets exist; the exchange starts with the first SYN
        for s, f in clients:
            err = s.connect_ex((addrs[f.dst], port))
            if err not in (0, errno.EINPROGRESS):
                raise LabError(f"connect {f.src}->{f.dst}: {os.strerror(err)}")
            sel.register(s, selectors.EVENT_WRITE, ("send", f))
        if on_start is not None:
            on_start(t0)
        buf = bytearray(_CHUNK)
        pending = len(flows_l)
        deadline = t0 + timeout
        while pending:
            now = time.monotonic()
            if now > deadline:
                done = sum(1 for f in flows_l if f.t_done)
                return ExchangeResult(
                    False, now - t0, f"timeout: {done}/{len(flows_l)} flows done", flows_l, t0
                )
            for key, _ev in sel.select(min(1.0, deadline - now)):
                kind, obj = key.data
                sk = key.fileobj
                assert isinstance(sk, socket.socket)
                s = sk
                if kind == "listen":
                    while True:
                        try:
                            c, peer = s.accept()
                        except BlockingIOError:
                            break
                        c.setblocking(False)
                        socks.append(c)
                        fl = by_peer.get((peer[0], peer[1]))
                        if fl is None:
                            c.close()
                            continue
                        sel.register(c, selectors.EVENT_READ, ("recv", fl))
                elif kind == "recv":
                    fl = obj
                    try:
                        n = s.recv_into(buf)
                    except (BlockingIOError, InterruptedError):
                        continue
                    except ConnectionError:
                        n = 0
                    if n:
                        fl.received += n
                        continue
                    fl.t_done = time.monotonic()
                    sel.unregister(s)
                    s.close()
                    pending -= 1
                else:  # send
                    fl = obj
                    if not fl.t_connected:
                        e = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                        if e:
                            raise LabError(f"connect {fl.src}->{fl.dst}: {os.strerror(e)}")
                        fl.t_connected = time.monotonic()
                    try:
                        while fl.sent < fl.nbytes:
                            n = s.send(_PAYLOAD[: min(_CHUNK, fl.nbytes - fl.sent)])
                            fl.sent += n
                    except (BlockingIOError, InterruptedError):
                        continue
                    fl.t_sent = time.monotonic()
                    s.shutdown(socket.SHUT_WR)  # FIN after the queued bytes
                    sel.unregister(s)  # kept open (no orphan) until the end
        end = max(f.t_done for f in flows_l)
        short = [f for f in flows_l if f.received != f.nbytes]
        if short:
            return ExchangeResult(
                False, end - t0, f"{len(short)} flows short of bytes", flows_l, t0
            )
        return ExchangeResult(True, end - t0, "", flows_l, t0)
    finally:
        sel.close()
        for s in socks:
            with contextlib.suppress(OSError):
                s.close()


# ------------------------------------------------------------------ background (UDP)


class UdpBlaster:
    """Steady UDP at ``mbps`` (IP payload + headers counted as ``size + 28`` bytes) from a
    socket in ``src`` to ``dst``:``port``, paced by a thread every ~2 ms (it catches up after a
    late wake-up, at most 50 ms worth at once). A socket in ``sink`` bound to the destination
    swallows the datagrams without reading them (no ICMP port-unreachable back). Starts and
    stops exactly when told; no process to spawn."""

    def __init__(
        self, src: Netns, sink: Netns, dst: str, port: int, mbps: float, size: int = 1200
    ) -> None:
        self.sink = sink.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sink.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sink.bind((dst, port))
        self.sock = src.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.connect((dst, port))
        self.sock.setblocking(False)
        self.payload = bytes(size)
        self.pps = mbps * 1e6 / 8 / (size + 28)
        self.sent = 0
        self.t_on = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.t_on = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="udp-bg", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        t0 = self.t_on
        while not self._stop.is_set():
            due = int((time.monotonic() - t0) * self.pps)
            if due - self.sent > self.pps * 0.05:
                self.sent = due - int(self.pps * 0.05)
            while self.sent < due:
                # a full buffer/queue (ENOBUFS) or a stray ICMP: the link is saturated anyway
                with contextlib.suppress(OSError):
                    self.sock.send(self.payload)
                self.sent += 1
            self._stop.wait(0.002)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def close(self) -> None:
        self.stop()
        self.sock.close()
        self.sink.close()


# ------------------------------------------------------------------ link counters (rtnetlink)

_NLMSG = struct.Struct("=IHHII")
_IFINFO = struct.Struct("=BxHiII")
_RTA = struct.Struct("=HH")
_RTM_GETLINK, _RTM_NEWLINK = 18, 16
_NLMSG_DONE, _NLMSG_ERROR = 3, 2
_IFLA_IFNAME, _IFLA_STATS64 = 3, 23


class _LinkStats:
    """tx/rx byte counters of one namespace's interfaces over a NETLINK_ROUTE socket."""

    def __init__(self, ns: Netns) -> None:
        self.sock = ns.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        self.sock.bind((0, 0))
        self.seq = 0

    def read(self) -> dict[str, tuple[int, int]]:
        """ifname -> (tx_bytes, tx_dropped)."""
        self.seq += 1
        req = _NLMSG.pack(_NLMSG.size + _IFINFO.size, _RTM_GETLINK, 0x301, self.seq, 0)
        self.sock.send(req + _IFINFO.pack(0, 0, 0, 0, 0))
        out: dict[str, tuple[int, int]] = {}
        while True:
            data = self.sock.recv(65536)
            off = 0
            while off + _NLMSG.size <= len(data):
                ln, typ, _fl, seq, _pid = _NLMSG.unpack_from(data, off)
                if ln < _NLMSG.size:
                    return out
                if seq == self.seq:
                    if typ == _NLMSG_DONE:
                        return out
                    if typ == _NLMSG_ERROR:
                        raise LabError("RTM_GETLINK failed")
                    if typ == _RTM_NEWLINK:
                        self._parse(data[off + _NLMSG.size + _IFINFO.size : off + ln], out)
                off += (ln + 3) & ~3

    @staticmethod
    def _parse(attrs: bytes, out: dict[str, tuple[int, int]]) -> None:
        name, stats = None, None
        off = 0
        while off + 4 <= len(attrs):
            rlen, rtype = _RTA.unpack_from(attrs, off)
            if rlen < 4:
                break
            val = attrs[off + 4 : off + rlen]
            if rtype == _IFLA_IFNAME:
                name = val.rstrip(b"\0").decode()
            elif rtype == _IFLA_STATS64 and len(val) >= 64:
                tx_bytes = struct.unpack_from("=Q", val, 24)[0]
                tx_dropped = struct.unpack_from("=Q", val, 56)[0]
                stats = (tx_bytes, tx_dropped)
            off += (rlen + 3) & ~3
        if name is not None and stats is not None:
            out[name] = stats

    def close(self) -> None:
        self.sock.close()


Sample = dict[tuple[str, str], tuple[float, int]]


class LinkSampler:
    """Samples tx bytes of ``links`` ((node, ifname) pairs) every ``interval`` s in a thread.

    ``samples`` is a list of {(node, ifname): (monotonic time of the read, tx_bytes)}: each
    namespace's read carries its own time, so a late thread (busy machine) skews nothing."""

    def __init__(
        self,
        ns: dict[str, Netns],
        links: Iterable[tuple[str, str]],
        interval: float,
        cpus: frozenset[int] = frozenset(),
    ):
        self.cpus = cpus  # the thread's CPUs (empty: inherited)
        self.links = list(links)
        self.interval = interval
        nodes = sorted({n for n, _ in self.links})
        self._readers = {n: _LinkStats(ns[n]) for n in nodes}
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> Sample:
        raw = {}
        for n, r in self._readers.items():
            stats = r.read()
            raw[n] = (time.monotonic(), stats)
        return {(n, i): (raw[n][0], raw[n][1].get(i, (0, 0))[0]) for n, i in self.links}

    def start(self) -> None:
        self.samples = [self.sample()]
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="link-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        if self.cpus:
            os.sched_setaffinity(0, self.cpus)
        nxt = time.monotonic()
        while not self._stop.wait(max(0.0, nxt + self.interval - time.monotonic())):
            nxt += self.interval
            self.samples.append(self.sample())

    def stop(self) -> list[Sample]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self.samples.append(self.sample())
        return self.samples

    def close(self) -> None:
        for r in self._readers.values():
            r.close()


# ------------------------------------------------------------------ TCP counters, CPU


def _proc_pairs(text: str) -> dict[str, int]:
    """Parse /proc/net/snmp or /proc/net/netstat ("Prefix: names" / "Prefix: values" pairs)."""
    out: dict[str, int] = {}
    lines = text.splitlines()
    for head, vals in zip(lines[::2], lines[1::2], strict=False):
        p, names = head.split(":", 1)
        _, values = vals.split(":", 1)
        for k, v in zip(names.split(), values.split(), strict=False):
            with contextlib.suppress(ValueError):
                out[f"{p}{k}"] = int(v)
    return out


def tcp_counters(namespaces: Sequence[Netns]) -> dict[str, int]:
    """Summed over ``namespaces``: retransmitted segments, reordering detections, timeouts,
    packets received marked CE."""
    tot = {"retrans": 0, "reorder": 0, "rto": 0, "ce": 0}
    for ns in namespaces:
        with ns.entered():  # /proc/thread-self/net shows the calling thread's namespace
            with open("/proc/thread-self/net/snmp") as f:
                snmp = _proc_pairs(f.read())
            with open("/proc/thread-self/net/netstat") as f:
                ext = _proc_pairs(f.read())
        tot["retrans"] += snmp.get("TcpRetransSegs", 0)
        tot["reorder"] += sum(
            v for k, v in ext.items() if k.startswith("TcpExt") and "Reorder" in k
        )
        tot["rto"] += ext.get("TcpExtTCPTimeouts", 0)
        tot["ce"] += ext.get("IpExtInCEPkts", 0)
    return tot


def cpu_times() -> tuple[int, int]:
    """(idle + iowait, total) jiffies of the whole machine."""
    with open("/proc/stat") as f:
        vals = [int(x) for x in f.readline().split()[1:]]
    return vals[3] + vals[4], sum(vals[:8])


def idle_pct(a: tuple[int, int], b: tuple[int, int]) -> float:
    d_total = b[1] - a[1]
    return 100.0 * (b[0] - a[0]) / d_total if d_total > 0 else float("nan")


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])
