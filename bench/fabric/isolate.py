"""CPU isolation of the fabric benchmark: the hosts' traffic and the routers' control planes
never share a core.

On a real fabric the hosts and the routers are different machines; on this box they share the
CPUs. Every process inside a router namespace (glbd, its BFD engine, ExaBGP and helpers, FRR's
daemons) is pinned to the *router CPUs* (CPU 0), and the bench (the in-process traffic, the UDP
background, the kernel's forwarding work it triggers in softirq on the sending CPU) to the
*traffic CPUs* (the others). Real-time priorities of the daemons then act only among themselves.
The bench's own measurement threads (link sampler, weight watch, failure injection) run on the
router CPUs: they are not the hosts' traffic either.

The control planes' CPU is read per contender from /proc (every task in its router
namespaces), so the report shows what each contender's routers cost next to its results.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass

from glbdlab.netns import Netns, namespace_pids
from glbdlab.procstat import cpu_ticks

_HZ = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Cpus:
    routers: frozenset[int]
    traffic: frozenset[int]

    @property
    def isolated(self) -> bool:
        return bool(self.routers) and bool(self.traffic) and not (self.routers & self.traffic)

    def describe(self) -> str:
        if not self.isolated:
            return "NOT isolated (one CPU): traffic and control planes share it"
        return (
            f"routers' control planes on CPU {fmt(self.routers)}, "
            f"hosts' traffic on CPU {fmt(self.traffic)}"
        )


def fmt(cpus: Iterable[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


def plan() -> Cpus:
    """CPU 0 for the routers, the rest of the CPUs this process may use for the traffic."""
    mine = sorted(os.sched_getaffinity(0))
    if len(mine) < 2:
        return Cpus(frozenset(mine), frozenset(mine))
    return Cpus(frozenset(mine[:1]), frozenset(mine[1:]))


def pin_thread(cpus: frozenset[int]) -> None:
    """Pin the calling thread (and what it spawns from now on) to ``cpus``."""
    os.sched_setaffinity(0, cpus)


#: SCHED_FIFO priority of the bench's failure injection: above every router daemon (glbd's
#: loop runs SCHED_RR 5, its BFD engine SCHED_FIFO 10) on the CPU they share, so the instant a
#: spine fails and the flow recording around it do not wait for them
INJECT_RT_PRIORITY = 50


def pin_injector(cpus: frozenset[int]) -> None:
    """The calling thread on ``cpus`` at :data:`INJECT_RT_PRIORITY` (what it spawns inherits
    both)."""
    os.sched_setaffinity(0, cpus)
    with contextlib.suppress(OSError):  # without the privilege it runs unprioritised
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(INJECT_RT_PRIORITY))


def tasks(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def namespace_processes(names: Iterable[str]) -> list[int]:
    return sorted({p for n in names for p in namespace_pids(n)})


def pin_namespaces(names: Iterable[str], cpus: frozenset[int]) -> int:
    """Pin every thread of every process inside the namespaces ``names`` to ``cpus`` (their
    later threads and children inherit it). Returns how many processes were pinned."""
    pids = namespace_processes(names)
    for pid in pids:
        for tid in tasks(pid):
            with contextlib.suppress(OSError):  # a thread that just ended
                os.sched_setaffinity(tid, cpus)
    return len(pids)


def cpu_mask(cpus: Iterable[int]) -> str:
    """``cpus`` as the hexadecimal mask sysfs takes (``rps_cpus``)."""
    return format(sum(1 << c for c in cpus), "x")


#: every interface but lo of the namespace it runs in: its receive work goes to the CPUs of $1
_STEER = (
    'for q in /sys/class/net/*/queues/rx-*/rps_cpus; do [ -e "$q" ] || continue; '
    'case "$q" in */lo/*) continue;; esac; '
    'echo "$1" > "$q"; done'
)


def steer_receive(namespaces: Iterable[Netns], cpus: frozenset[int]) -> None:
    """Receive packet steering of every interface in ``namespaces`` to ``cpus``.

    A veth hands a frame to its peer's receive path on the CPU that transmitted it. The CPU
    that transmits is whichever CPU ran the egress qdisc: a router's control packet (BFD, a
    heartbeat) sent on the router CPU dequeues the data packets queued behind it there too, and
    those then race the same flow's earlier packets still queued on the traffic CPU: a
    reordering that no switch makes, and a cost that grows with the control plane's packet
    rate. With RPS every frame is queued to the traffic CPUs' backlog, in the order the qdisc
    sent it. A kernel without RPS leaves the files out: the bench then runs as before, and
    each exchange's ``router_rx_pct`` shows it."""
    mask = cpu_mask(cpus)
    for ns in namespaces:
        ns.run(["sh", "-c", _STEER, "steer", mask])


class ControlPlaneCpu:
    """CPU time of every process in a contender's router namespaces, between two reads."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = list(names)
        self._t0 = 0.0
        self._ticks0: dict[int, int] = {}

    def _read(self) -> dict[int, int]:
        return {p: cpu_ticks(p) for p in namespace_processes(self.names)}

    def start(self, now: float) -> None:
        self._t0 = now
        self._ticks0 = self._read()

    def pct_of_core(self, now: float) -> float:
        """Their CPU since :meth:`start`, in % of one core (processes started in between count
        from zero; processes that ended in between are lost)."""
        dt = now - self._t0
        if dt <= 0:
            return float("nan")
        ticks = sum(t - self._ticks0.get(p, 0) for p, t in self._read().items())
        return 100.0 * ticks / _HZ / dt


def cpu_idle_pct(
    cpus: frozenset[int], a: dict[int, tuple[int, int]], b: dict[int, tuple[int, int]]
) -> float:
    """Idle share (%) of ``cpus`` between two :func:`per_cpu_times` readings."""
    idle = sum(b[c][0] - a[c][0] for c in cpus if c in a and c in b)
    total = sum(b[c][1] - a[c][1] for c in cpus if c in a and c in b)
    return 100.0 * idle / total if total > 0 else float("nan")


#: columns of /proc/net/softnet_stat: packets processed, and times another CPU's RPS woke
#: this one to process packets it steered here
SOFTNET_PROCESSED, SOFTNET_RECEIVED_RPS = 0, 9


def softnet_processed(text: str | None = None, column: int = SOFTNET_PROCESSED) -> dict[int, int]:
    """CPU number -> a counter of its receive softirq (packets processed by default), from
    /proc/net/softnet_stat (the whole machine: the counters are not per namespace)."""
    if text is None:
        with open("/proc/net/softnet_stat") as f:
            text = f.read()
    out: dict[int, int] = {}
    for i, line in enumerate(text.splitlines()):
        cols = line.split()
        if cols:
            out[int(cols[12], 16) if len(cols) > 12 else i] = int(cols[column], 16)
    return out


def processed_share(cpus: frozenset[int], a: dict[int, int], b: dict[int, int]) -> float:
    """Share (%) of the packets processed between two :func:`softnet_processed` readings that
    ``cpus`` processed."""
    d = {c: (b[c] - a[c]) % (1 << 32) for c in b if c in a}  # the counters are 32 bits wide
    total = sum(d.values())
    return 100.0 * sum(v for c, v in d.items() if c in cpus) / total if total else float("nan")


def per_cpu_times() -> dict[int, tuple[int, int]]:
    """CPU number -> (idle + iowait, total) jiffies, from /proc/stat."""
    out: dict[int, tuple[int, int]] = {}
    with open("/proc/stat") as f:
        for line in f:
            head, _, rest = line.partition(" ")
            if head.startswith("cpu") and head[3:].isdigit():
                vals = [int(x) for x in rest.split()]
                out[int(head[3:])] = (vals[3] + vals[4], sum(vals[:8]))
    return out
