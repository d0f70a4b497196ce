"""The ``fail`` case: one spine of four fails mid-exchange; which running flows changed spine.

Each spine records the exchange's flows it forwards (data direction: destination port of the
exchange) in nftables sets keyed by the 5-tuple: ``pre`` over the last ``window`` seconds
before the failure, ``post`` over ``window`` seconds after it. A flow seen in both is running
across the failure; it *changed spine* when a spine it used after is not one it used before.
Ideal: only the failed spine's flows (1/4 with four spines); hash-threshold over N members moves
about half, hash modulo N three quarters.

The failure is the spine's fabric ports going down (its links lose carrier at the leaves, as
when a switch dies or reboots).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from glbdlab.topology import Fabric

FlowKey = tuple[str, str, int, int]

_TABLE = """
table inet glbflows {
  set pre { type ipv4_addr . ipv4_addr . inet_service . inet_service; flags dynamic; size 65536; }
  set post { type ipv4_addr . ipv4_addr . inet_service . inet_service; flags dynamic; size 65536; }
  chain record { type filter hook forward priority 10; policy accept; }
}
"""


def install(fab: Fabric) -> None:
    """The (empty) flow-recording table on every spine."""
    for s in fab.topo.names("spine"):
        fab.ns(s).run(["nft", "-f", "-"], input=_TABLE)


def _record(fab: Fabric, spines: Sequence[str], into: str, port: int) -> None:
    """Every spine's forward chain now adds the exchange's flows to set ``into`` ("" = stop),
    in one nft transaction per spine; ``pre`` is emptied when it starts recording."""
    rules = ["flush chain inet glbflows record"]
    if into == "pre":
        rules.append("flush set inet glbflows pre")
    if into:
        rules.append(
            f"add rule inet glbflows record tcp dport {port} "
            f"add @{into} {{ ip saddr . ip daddr . tcp sport . tcp dport }}"
        )
    for s in spines:
        fab.ns(s).run(["nft", "-f", "-"], input="\n".join(rules) + "\n")


def _read(fab: Fabric, spine: str, name: str) -> set[FlowKey]:
    res = fab.ns(spine).run(["nft", "-j", "list", "set", "inet", "glbflows", name])
    out: set[FlowKey] = set()
    for obj in json.loads(res.stdout).get("nftables", []):
        for el in obj.get("set", {}).get("elem", []) or []:
            c = el.get("concat") if isinstance(el, dict) else None
            if c is None and isinstance(el, dict):
                c = el.get("elem", {}).get("val", {}).get("concat")
            if c and len(c) == 4:
                out.add((str(c[0]), str(c[1]), int(c[2]), int(c[3])))
    return out


def _clear(fab: Fabric, spines: Sequence[str]) -> None:
    for s in spines:
        fab.ns(s).run(
            ["nft", "-f", "-"],
            input="flush chain inet glbflows record\nflush set inet glbflows pre\n"
            "flush set inet glbflows post\n",
        )


@dataclass
class FailResult:
    t_fail: float = 0.0  # s after the exchange's start
    running: int = 0  # flows seen before and after
    changed: int = 0
    on_failed: int = 0  # of the running ones, on the failed spine before
    error: str = ""
    per_spine_pre: dict[str, int] = field(default_factory=dict)

    @property
    def changed_share(self) -> float:
        return self.changed / self.running if self.running else float("nan")


class SpineFailure:
    """Fails ``spine`` at ``t0 + at`` (a thread started by :meth:`arm`), records flows
    ``window`` s either side, and restores the spine with :meth:`restore`."""

    def __init__(self, fab: Fabric, spine: str, port: int, at: float, window: float) -> None:
        self.fab, self.spine, self.port = fab, spine, port
        self.at, self.window = at, window
        self.spines = fab.topo.names("spine")
        self.ports = [fab.ifname(spine, lf) for lf in fab.topo.names("leaf")]
        self.result = FailResult()
        self._th: threading.Thread | None = None
        self._stop = threading.Event()
        self._t0 = 0.0
        self._t_fail = 0.0
        self._done = threading.Event()
        self.on_thread_start: Callable[[], None] | None = None

    def arm(self, t0: float) -> None:
        self._t0 = t0
        self._th = threading.Thread(target=self._run, name="spine-fail", daemon=True)
        self._th.start()

    def _sleep_until(self, t: float) -> bool:
        return not self._stop.wait(max(0.0, t - time.monotonic()))

    def _run(self) -> None:
        if self.on_thread_start is not None:
            self.on_thread_start()
        try:
            if not self._sleep_until(self._t0 + self.at - self.window):
                return
            _record(self.fab, self.spines, "pre", self.port)
            if not self._sleep_until(self._t0 + self.at):
                return
            _record(self.fab, self.spines, "post", self.port)
            self.fab.ns(self.spine).ip_batch([f"link set dev {p} down" for p in self.ports])
            self._t_fail = time.monotonic()
            self.result.t_fail = round(self._t_fail - self._t0, 3)
            self._sleep_until(self._t_fail + self.window)
            _record(self.fab, self.spines, "", self.port)
        except Exception as e:  # reported with the exchange
            self.result.error = str(e)
        finally:
            self._done.set()

    def finish(self) -> FailResult:
        """After the exchange: stop the thread and count the flows that changed spine."""
        self._stop.set()
        if self._th is not None:
            self._th.join(10)
        if not self._t_fail:
            self.result.error = self.result.error or "the exchange ended before the failure"
            return self.result
        pre = {s: _read(self.fab, s, "pre") for s in self.spines}
        post = {s: _read(self.fab, s, "post") for s in self.spines}
        self.result.per_spine_pre = {s: len(v) for s, v in pre.items()}
        before: dict[FlowKey, set[str]] = {}
        after: dict[FlowKey, set[str]] = {}
        for s in self.spines:
            for k in pre[s]:
                before.setdefault(k, set()).add(s)
            for k in post[s]:
                after.setdefault(k, set()).add(s)
        running = [k for k in before if k in after]
        self.result.running = len(running)
        self.result.changed = sum(1 for k in running if not after[k] <= before[k])
        self.result.on_failed = sum(1 for k in running if self.spine in before[k])
        return self.result

    def restore(self) -> None:
        """The spine's ports up again and the flow sets emptied."""
        self.fab.ns(self.spine).ip_batch([f"link set dev {p} up" for p in self.ports])
        _clear(self.fab, self.spines)
