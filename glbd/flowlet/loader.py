"""Flowlet switching: glbd's tc BPF program (``glbd/flowlet/bpf/flowlet.bpf.c``) loaded, pinned,
attached, configured, read and removed, through ``bpftool`` and ``tc`` (JSON output).

Why the tools for loading and not a ``bpf()`` syscall layer: loading an ELF object
(relocations, BTF, map creation) is libbpf's job and ``bpftool`` is libbpf's command line; it
runs at start, on a reload and at each periodic check. The reads and writes a poll makes (the
counters each second, the config map on every change of timeout or move chance, the maps'
sizes) go through bpf(2) on the pinned maps (:mod:`glbd.quality.bpfmap`): a bpftool process
for each cost a router about 0.5 % of a core at idle.

Objects of one instance (one network namespace; the name carries the namespace's inode, so two
instances on one machine never clash)::

    /sys/fs/bpf/glbd/net-<inode>/prog         the program
    /sys/fs/bpf/glbd/net-<inode>/table        the flow table (LRU hash, created at table_size)
    /sys/fs/bpf/glbd/net-<inode>/maps/{flows,config,stats,dests}

The tc filters are the truth: the pins are re-made from the program an existing filter runs
(a restart under ``ip netns exec`` gets a fresh bpffs, pins and all, while the filters stay), and
pins that no filter uses are stale and removed.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import json
import os
import socket
import struct
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from ipaddress import IPv4Network, IPv6Network
from pathlib import Path
from typing import Any

import structlog

from glbd.daemon.bpftools import BPFFS, Tools, find_object, missing_tools, remove_pins
from glbd.daemon.netns import NETNS_RUN_DIR, read_sysctl, write_sysctl
from glbd.flowlet.movegate import ALWAYS, NEVER, MoveChance
from glbd.flowlet.placement import MAX_BUCKETS, listed, listed_routes
from glbd.quality.bpfmap import PinnedMap, pinned_id, possible_cpus

log = structlog.get_logger(__name__)

__all__ = [
    "COUNTERS",
    "PREF",
    "PROG_NAME",
    "FlowletAttachment",
    "FlowletError",
    "FlowletParams",
    "FlowletSkip",
    "object_path",
    "problems",
]

#: the program's function name (the kernel keeps its first 15 characters)
PROG_NAME = "glbd_flowlet"
#: the tc filter priority glbd's filter sits at on clsact ingress (one filter per interface)
PREF = 49_152
OBJECT = "flowlet.bpf.o"
#: per-interface counters in the order of ``enum counter`` in flowlet.bpf.c
COUNTERS = (
    "packets",
    "flowlets",
    "moved",
    "kept",
    "new_flows",
    "aged",
    "skip_not_ip",
    "skip_proto",
    "skip_fragment",
    "skip_short",
    "skip_no_config",
    "skip_table_full",
)
#: the flow table's key and value sizes (struct flow_key, struct flow_state)
KEY_SIZE = 40
VALUE_SIZE = 16
#: struct config's size; a pinned program whose config map differs is an older build: reloaded
CONFIG_SIZE = 48
#: the program's maps, pinned by name under the namespace's directory
MAP_NAMES = ("flows", "config", "stats", "dests", "layouts", "orders")
HASH_POLICY_SYSCTLS = ("net.ipv4.fib_multipath_hash_policy", "net.ipv6.fib_multipath_hash_policy")


class FlowletSkip(enum.StrEnum):
    """Packets the program leaves as they are (the kernel hashes them as without it), by
    reason; the program never drops a packet."""

    NOT_IP = "not_ip"
    PROTO = "proto"  # IP but not TCP/UDP, or IPv6 with extension headers
    FRAGMENT = "fragment"
    SHORT = "short"
    NO_CONFIG = "no_config"
    TABLE_FULL = "table_full"  # an insert the table refused (the LRU evicts, so rarely)


class FlowletError(RuntimeError):
    """A tool failed; the message names the command and what it said."""


def object_path() -> Path | None:
    """The compiled program: ``$GLBD_FLOWLET_OBJECT``, next to its source in the package (a
    source checkout: ``glbd/flowlet/bpf/build.sh``), or where the Debian package installs it."""
    return find_object("GLBD_FLOWLET_OBJECT", Path(__file__).resolve().parent / "bpf", OBJECT)


def problems() -> list[str]:
    """Why flowlet switching cannot run here (empty: it can), for ``glbd check-config``."""
    out = missing_tools((("bpftool", "bpftool"), ("tc", "iproute2"), ("nsenter", "util-linux")))
    if object_path() is None:
        out.append(
            "the compiled program flowlet.bpf.o is missing (a source checkout builds it with "
            "glbd/flowlet/bpf/build.sh; the Debian package ships /usr/lib/glbd/flowlet.bpf.o)"
        )
    if not Path("/proc/sys/net/ipv4/fib_multipath_hash_policy").exists():
        out.append("this kernel has no fib_multipath_hash_policy (CONFIG_IP_ROUTE_MULTIPATH)")
    return out


# ---- pure parsing (unit-tested on the tools' JSON) --------------------------------------------


@dataclass(frozen=True)
class Filter:
    """glbd's filter on one interface, as ``tc -j filter show`` reports it."""

    ifname: str
    prog_id: int


def parse_filters(ifname: str, tc_json: str) -> list[Filter]:
    """glbd's filters in ``tc -j filter show dev IF ingress``: at :data:`PREF`, running a
    program named :data:`PROG_NAME`."""
    out = []
    for f in json.loads(tc_json or "[]"):
        prog = (f.get("options") or {}).get("prog") or {}
        if f.get("pref") == PREF and f.get("kind") == "bpf" and prog.get("name") == PROG_NAME:
            out.append(Filter(ifname, int(prog["id"])))
    return out


def sum_stats(items: Iterable[tuple[bytes, bytes]], ncpus: int) -> dict[int, dict[str, int]]:
    """The per-CPU stats map's (key, value) pairs as bpf(2) reads them (a value is every
    possible CPU's struct counters in turn): ifindex -> counter -> sum over CPUs."""
    out: dict[int, dict[str, int]] = {}
    n = len(COUNTERS)
    for key, value in items:
        (ifindex,) = struct.unpack_from("<I", key)
        sums = [0] * n
        for cpu in range(ncpus):
            vals = struct.unpack_from(f"<{n}Q", value, cpu * 8 * n)
            sums = [a + b for a, b in zip(sums, vals, strict=True)]
        out[ifindex] = dict(zip(COUNTERS, sums, strict=True))
    return out


def config_value(
    timeout_ns: int,
    aging_ns: int,
    move: MoveChance = ALWAYS,
    *,
    spread: bool = False,
    buckets: int = 0,
) -> bytes:
    """struct config, as the map holds it."""
    return struct.pack(
        "<5Q2I", timeout_ns, aging_ns, move.p0, move.t0_ns, move.decay_ns, int(spread), buckets
    )


@functools.lru_cache(maxsize=1 << 17)
def layout_key(net: IPv4Network | IPv6Network) -> bytes:
    """struct layout_key of a destination prefix: the family word counts in the prefix."""
    fam = 4 if net.version == 4 else 6
    return struct.pack("<II", 32 + net.prefixlen, fam) + net.network_address.packed.ljust(16, b"\0")


def layout_value(order: Sequence[int]) -> bytes:
    """struct layout: the bucket count, then the buckets member by member."""
    if not 0 < len(order) <= MAX_BUCKETS:
        raise ValueError(f"a layout holds 1..{MAX_BUCKETS} buckets, not {len(order)}")
    return struct.pack(f"<I{MAX_BUCKETS}H", len(order), *order, *[0] * (MAX_BUCKETS - len(order)))


def parse_links(ip_json: str) -> dict[int, str]:
    """``ip -j link show``: ifindex -> name."""
    return {int(link["ifindex"]): str(link["ifname"]) for link in json.loads(ip_json or "[]")}


# ---- the attachment ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FlowletParams:
    #: where the filter goes; None: every interface but ``exclude`` and loopback
    interfaces: tuple[str, ...] | None
    timeout_ns: int
    aging_ns: int
    table_size: int
    #: write fib_multipath_hash_policy = 1 (IPv4 and IPv6): the kernel then uses the hash the
    #: program sets; under 0 or 3 it hashes the headers and the program changes nothing
    set_hash_policy: bool = True
    #: with ``interfaces`` None: the fabric interfaces (BGP neighbours' ports)
    exclude: tuple[str, ...] = ()
    #: a gap moves its flow only with the chance :meth:`FlowletAttachment.set_move` writes
    #: (starting at 0; ``move = "never"`` writes none); False: every gap moves it
    move_on_change: bool = True
    #: a new flowlet takes its destination's next point of a low-discrepancy sequence in the
    #: hash space (flows spread over a group's members evenly); False: a random hash
    spread: bool = True
    #: the resilient groups' bucket count, which the spread points aim at (0: hash-threshold)
    buckets: int = 0
    #: an adopted program keeps its timeout where it is longer (the "auto" timeout, which
    #: the previous glbd measured for the fabric's queues; a fixed one is written as set)
    resume_timeout: bool = False

    def targets(self, links: Iterable[str]) -> list[str]:
        """The interfaces the filter belongs on, of those that exist."""
        present = set(links)
        if self.interfaces is not None:
            return sorted(present & set(self.interfaces))
        return sorted(present - set(self.exclude) - {"lo"})


@dataclass
class State:
    """What glbctl and the metrics show (refreshed by :meth:`FlowletAttachment.poll`)."""

    prog_id: int | None = None
    table_size: int = 0
    attached: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    hash_policy: dict[str, str] = field(default_factory=dict)
    counters: dict[str, dict[str, int]] = field(default_factory=dict)
    events: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            (
                "loaded",
                "adopted",
                "repinned",
                "attached",
                "reattached",
                "detached",
                "timeout_changed",
                "move_chance_set",
                "layouts_written",
                "errors",
            ),
            0,
        )
    )


class FlowletAttachment:
    """glbd's program in one network namespace (``netns``: a name under /run/netns, or None
    for the namespace this process is in). Every method runs the tools as subprocesses."""

    def __init__(self, netns: str | None = None, obj: Path | None = None) -> None:
        self.netns = netns
        self.obj = obj
        self._tools = Tools(netns, FlowletError)
        self.state = State()
        self.params: FlowletParams | None = None
        #: the chance that a gap moves a flow (written with the params by _write_config)
        self.move = ALWAYS
        #: the timeout in the config map of the program :meth:`start` adopted, if any
        self.left_timeout_ns: int | None = None
        self._config_lock = asyncio.Lock()
        self._links: dict[int, str] = {}
        #: the program's maps open by bpf(2) for the polls (a bpftool process each second
        #: cost more than the rest of the poll); closed whenever the pins change
        self._maps: dict[str, PinnedMap] = {}
        #: the layouts and orders maps as last written (key -> value): a refresh writes changes
        self._layouts: dict[bytes, bytes] = {}
        self._orders: dict[bytes, bytes] = {}
        self._left_out = 0
        self._given: tuple[Mapping[Any, int], Mapping[int, Sequence[int]]] = ({}, {})
        ino = os.stat(os.path.join(NETNS_RUN_DIR, netns) if netns else "/proc/self/ns/net")
        self.dir = BPFFS / "glbd" / f"net-{ino.st_ino}"

    # -- paths
    @property
    def prog_pin(self) -> Path:
        return self.dir / "prog"

    @property
    def table_pin(self) -> Path:
        return self.dir / "table"

    def map_pin(self, name: str) -> Path:
        return self.dir / "maps" / name

    # -- tools
    async def _run(self, argv: Sequence[str], *, check: bool = True) -> str:
        return await self._tools.run(argv, check=check)

    async def _tc(self, *args: str, check: bool = True) -> str:
        return await self._tools.tc(*args, check=check)

    async def _bpftool(self, *args: str, check: bool = True) -> str:
        return await self._tools.bpftool(*args, check=check)

    async def _json(self, *args: str) -> Any:
        return json.loads(await self._bpftool("-j", *args))

    async def links(self) -> dict[int, str]:
        return parse_links(await self._tools.ip("-j", "link", "show"))

    # -- maps
    def _map(self, name: str) -> PinnedMap:
        m = self._maps.get(name)
        if m is None:
            size = 8 * len(COUNTERS) * possible_cpus() if name == "stats" else None
            m = self._maps[name] = PinnedMap(self.map_pin(name), size)
        return m

    def _close_maps(self) -> None:
        for m in self._maps.values():
            m.close()
        self._maps.clear()
        self._layouts, self._orders = {}, {}  # other pins: written again in full

    def _map_info(self, path: Path) -> tuple[int, int]:
        """(value size, max entries) of a pinned map; (0, 0) if it cannot be read."""
        try:
            m = PinnedMap(path)
        except OSError:
            return 0, 0
        m.close()
        return m.info.value_size, m.info.max_entries

    # -- bpffs
    def _remove_pins(self) -> None:
        self._close_maps()
        remove_pins(
            [*(self.map_pin(n) for n in MAP_NAMES), self.prog_pin, self.table_pin],
            [self.dir / "maps", self.dir, self.dir.parent],
        )

    # -- filters
    def _ours(self, links: Mapping[int, str]) -> list[str]:
        """The interfaces a periodic check reads filters on: where the filter belongs or was
        put (one tc call each, so a router with many fabric ports pays for none of them);
        start and stop read every interface."""
        want = set(self.params.targets(links.values())) if self.params else set()
        return [n for n in links.values() if n in want or n in self.state.attached]

    async def filters(self, links: Iterable[str]) -> list[Filter]:
        out: list[Filter] = []
        for ifname in links:
            js = await self._tc("-j", "filter", "show", "dev", ifname, "ingress", check=False)
            out += parse_filters(ifname, js)
        return out

    async def _attach(self, ifname: str) -> None:
        await self._tc("qdisc", "replace", "dev", ifname, "clsact")
        await self._tc(
            "filter", "replace", "dev", ifname, "ingress", "pref", str(PREF), "handle", "1",
            "bpf", "da", "object-pinned", str(self.prog_pin),
        )  # fmt: skip

    async def _detach(self, ifname: str) -> None:
        await self._tc(
            "filter", "del", "dev", ifname, "ingress", "pref", str(PREF), "handle", "1", "bpf",
            check=False,
        )  # fmt: skip

    # -- load / adopt
    async def _pinned_prog_id(self) -> int | None:
        if not self.prog_pin.exists():
            return None
        try:
            return pinned_id(self.prog_pin)
        except OSError:
            return None

    async def _repin(self, prog_id: int) -> None:
        """Pins for the program a filter runs, and for its maps (found by name)."""
        self._remove_pins()
        (self.dir / "maps").mkdir(parents=True, exist_ok=True)
        info = await self._json("prog", "show", "id", str(prog_id))
        await self._bpftool("prog", "pin", "id", str(prog_id), str(self.prog_pin))
        for mid in info.get("map_ids", []):
            m = await self._json("map", "show", "id", str(mid))
            name = m.get("name", "")
            if name in MAP_NAMES:
                await self._bpftool("map", "pin", "id", str(mid), str(self.map_pin(name)))
            if name == "flows":
                await self._bpftool("map", "pin", "id", str(mid), str(self.table_pin))

    async def _load(self, table_size: int) -> None:
        obj = self.obj or object_path()
        if obj is None:
            raise FlowletError("flowlet.bpf.o not found: " + "; ".join(problems()))
        self._remove_pins()
        (self.dir / "maps").mkdir(parents=True, exist_ok=True)
        # the table at the configured size: libbpf takes an existing map as it is
        await self._bpftool(
            "map", "create", str(self.table_pin), "type", "lru_hash", "key", str(KEY_SIZE),
            "value", str(VALUE_SIZE), "entries", str(table_size), "name", "flows",
        )  # fmt: skip
        await self._bpftool(
            "prog", "load", str(obj), str(self.prog_pin), "type", "classifier",
            "map", "name", "flows", "pinned", str(self.table_pin),
            "pinmaps", str(self.dir / "maps"),
        )  # fmt: skip
        self.state.events["loaded"] += 1

    async def _table_size(self) -> int:
        return self._map_info(self.table_pin)[1]

    async def start(self, p: FlowletParams) -> None:
        """Adopt what a previous glbd left (its filters and their program) or load afresh,
        then configure and attach (see :meth:`apply`). With ``p.resume_timeout``, an adopted
        program keeps its timeout (:attr:`left_timeout_ns`) where it is longer than ``p``'s."""
        await self._tools.ensure_bpffs()
        links = await self.links()
        found = await self.filters(links.values())
        pinned = await self._pinned_prog_id()
        ids = {f.prog_id for f in found}
        if ids:
            keep = pinned if pinned in ids else min(ids)
            if keep != pinned:
                await self._repin(keep)
                self.state.events["repinned"] += 1
            self.state.events["adopted"] += 1
            left = self.left_timeout_ns = self._left_timeout_ns()
            if p.resume_timeout and left is not None and left > p.timeout_ns:
                p = replace(p, timeout_ns=left)  # not shortened, not even for a moment
            log.info(
                "flowlet_adopted",
                prog_id=keep,
                interfaces=[f.ifname for f in found],
                timeout_us=None if left is None else left / 1e3,
            )
        else:
            if pinned is not None or self.dir.exists():
                log.info("flowlet_stale_pins_removed", dir=str(self.dir))
            self._remove_pins()
        await self.apply(p, links=links, found=found)

    async def apply(
        self,
        p: FlowletParams,
        *,
        links: Mapping[int, str] | None = None,
        found: list[Filter] | None = None,
    ) -> None:
        """Bring the kernel to ``p``: the program (reloaded when the table size changed), the
        timeout, the hash policy, a filter on each of ``p.interfaces`` that exists and none
        elsewhere. Safe to repeat (the periodic check calls it)."""
        if self.params is None or self.params.move_on_change != p.move_on_change:
            self.move = NEVER if p.move_on_change else ALWAYS
        self.params = p
        links = links if links is not None else await self.links()
        found = found if found is not None else await self.filters(self._ours(links))
        pinned = await self._pinned_prog_id()
        ids = sorted({f.prog_id for f in found})
        if pinned is None and ids:  # pins gone under running filters: made again, no rehash
            await self._repin(ids[0])
            self.state.events["repinned"] += 1
            pinned = await self._pinned_prog_id()
        if (
            pinned is None
            or await self._table_size() != p.table_size
            or await self._config_size() != CONFIG_SIZE
            or not self.map_pin("orders").exists()  # an older build: no bucket orders
        ):
            await self._load(p.table_size)  # the filters move to it as they are replaced below
            pinned = await self._pinned_prog_id()
        await self._write_config()
        if p.set_hash_policy:
            for key in HASH_POLICY_SYSCTLS:
                if read_sysctl(key, self.netns) != "1":
                    write_sysctl(key, 1, self.netns)
        have = {f.ifname: f.prog_id for f in found}
        targets = p.targets(links.values())
        for ifname in targets:
            if have.get(ifname) != pinned:
                # a filter that was ours and went (someone deleted it) counts as reattached
                again = ifname in self.state.attached and ifname not in have
                await self._attach(ifname)
                self.state.events["reattached" if again else "attached"] += 1
        for ifname in have.keys() - set(targets):
            await self._detach(ifname)
            self.state.events["detached"] += 1
        self.state.prog_id = pinned
        self.state.table_size = p.table_size
        # the filters are now where apply put them: no second tc call per interface
        await self.poll(links, found=[Filter(n, pinned) for n in targets if pinned is not None])

    async def _config_size(self) -> int:
        return self._map_info(self.map_pin("config"))[0]

    async def _write_config(self) -> None:
        """Write the config this attachment holds now (its params and move chance). Callers
        set the state first; writes are serialized and each one writes the latest state, so a
        timeout change racing a move chance never leaves the older of the two in the map."""
        async with self._config_lock:
            p = self.params
            if p is None:
                raise FlowletError("the program is not loaded")
            value = config_value(
                p.timeout_ns, p.aging_ns, self.move, spread=p.spread, buckets=p.buckets
            )
            try:
                self._map("config").update(bytes(4), value)
            except OSError:
                self._close_maps()  # reopened at the next write
                raise

    async def set_move(self, move: MoveChance) -> None:
        """A new move chance for the running program (one map write; nothing else)."""
        if self.params is None:
            raise FlowletError("the program is not loaded")
        self.move = move
        await self._write_config()
        self.state.events["move_chance_set"] += 1

    async def set_timeout(self, timeout_ns: int) -> None:
        """A new flowlet timeout for the running program (one map write; nothing else)."""
        if self.params is None:
            raise FlowletError("the program is not loaded")
        self.params = replace(self.params, timeout_ns=timeout_ns)
        await self._write_config()
        self.state.events["timeout_changed"] += 1

    def set_layouts(
        self,
        routes: Mapping[IPv4Network | IPv6Network, int],
        orders: Mapping[int, Sequence[int]],
    ) -> int:
        """Spread placement on glbd's resilient groups: each group's bucket order
        (:func:`glbd.flowlet.placement.bucket_order`, by group id) and the group of each
        destination prefix over one. Entries are written where new or changed and deleted
        where gone; a group larger than the program's list, and what is beyond the maps'
        room (:func:`glbd.flowlet.placement.listed`), are left out: their points aim as
        without a list. Returns the entries written or deleted."""
        if self.params is None:
            raise FlowletError("the program is not loaded")
        if self._layouts and routes == self._given[0] and orders == self._given[1]:
            return 0  # the usual tick: nothing moved
        # never more than the maps hold: a full map would fail every write after it
        chosen = listed({g: len(o) for g, o in orders.items()}, routes)
        want_o = {struct.pack("<I", g): layout_value(orders[g]) for g in chosen}
        mapped = listed_routes(routes, chosen)
        want_l = {layout_key(n): struct.pack("<I", g) for n, g in mapped.items()}
        try:
            # what goes, first: a full map takes no new entry; a prefix whose group lost its
            # list meanwhile aims as without one (the program checks) until it is rewritten
            n = self._delete_from("layouts", self._layouts, want_l)
            n += self._delete_from("orders", self._orders, want_o)
            n += self._write_map("orders", self._orders, want_o)
            n += self._write_map("layouts", self._layouts, want_l)
        except OSError:
            self._close_maps()  # written again in full at the next call
            raise
        self._orders, self._layouts = want_o, want_l
        self._left_out = len(routes) - len(mapped)
        self._given = (dict(routes), dict(orders))
        self.state.events["layouts_written"] += n
        return n

    def _write_map(self, name: str, held: dict[bytes, bytes], want: dict[bytes, bytes]) -> int:
        """Write the entries of ``want`` that map ``name`` does not hold as ``held`` says."""
        m = self._map(name)
        new = [k for k, v in want.items() if held.get(k) != v]
        for k in new:
            m.update(k, want[k])
        return len(new)

    def _delete_from(self, name: str, held: dict[bytes, bytes], want: dict[bytes, bytes]) -> int:
        """Delete what map ``name`` holds beyond ``want`` (``held`` empty: not known, after a
        (re)open: the map's keys are read once)."""
        m = self._map(name)
        gone = [k for k in (held.keys() if held else list(m.keys())) if k not in want]
        for k in gone:
            m.delete(k)
        return len(gone)

    def _left_timeout_ns(self) -> int | None:
        """The timeout in the config map of the program just adopted (kept on stop or left by
        a crash), before :meth:`apply` rewrites it; None if there is none to read."""
        try:
            m = self._map("config")  # the fd the config writes use next
            value = m.lookup(bytes(4)) if m.value_size == CONFIG_SIZE else None
        except OSError:
            return None
        return struct.unpack_from("<Q", value)[0] if value else None

    def interfaces_moved(self) -> bool:
        """Whether an interface appeared, went or was renamed since the last apply or full
        poll (one netlink dump by the C library, no process). In another namespace than this
        process's it cannot tell, and says True."""
        if self.netns is not None or not self._links:
            return True
        try:
            return dict(socket.if_nameindex()) != self._links
        except OSError:
            return True

    async def poll(
        self,
        links: Mapping[int, str] | None = None,
        *,
        full: bool = True,
        found: list[Filter] | None = None,
    ) -> State:
        """Refresh :attr:`state`: the counters and (``full``) where the filter is and the
        hash policy; ``found``: the filters as the caller just made them (no tc call)."""
        st = self.state
        if full or links is not None or not self._links:
            self._links = dict(links if links is not None else await self.links())
        links = self._links
        attached: list[str] | None = None
        if full:
            if found is None:
                found = await self.filters(self._ours(links))
            attached = sorted(f.ifname for f in found if f.prog_id == st.prog_id)
        try:
            by_index = sum_stats(self._map("stats").items(), possible_cpus())
        except OSError:
            self._close_maps()  # reopened at the next poll
            raise
        # the state changes at once, after the last await: a status read in between sees the
        # previous poll whole, never new filters with the old counters
        if attached is not None:
            st.attached = attached
            # configured by name but not there (yet): attached by the next apply once it is
            want = (self.params.interfaces or ()) if self.params else ()
            st.missing = sorted(set(want) - set(attached))
            st.hash_policy = {
                k.split(".")[1]: read_sysctl(k, self.netns) for k in HASH_POLICY_SYSCTLS
            }
        st.counters = {links.get(i, f"ifindex-{i}"): c for i, c in sorted(by_index.items())}
        return st

    async def stop(self, keep: bool = False) -> None:
        """Remove the filters and the pins (``keep``: leave both for the next glbd to adopt)."""
        if keep:
            self._close_maps()
            return
        links = await self.links()
        for f in await self.filters(links.values()):
            await self._detach(f.ifname)
            self.state.events["detached"] += 1
        self._remove_pins()
        self.state.attached = []

    def snapshot(self) -> dict[str, Any]:
        st = self.state
        total = dict.fromkeys(COUNTERS, 0)
        for c in st.counters.values():
            for k, v in c.items():
                total[k] += v
        # no entry is ever deleted but by the LRU when the table is full, so the flows inserted
        # give both (to within the LRU's per-CPU free lists, which evict a little early)
        entries = min(total["new_flows"], st.table_size)
        return {
            "prog_id": st.prog_id,
            "pin_dir": str(self.dir),
            "table_entries": entries,
            "evictions": total["new_flows"] - entries,
            "timeout_us": self.params.timeout_ns / 1e3 if self.params else None,
            "aging_s": self.params.aging_ns / 1e9 if self.params else None,
            "move_chance": round(self.move.at(time.monotonic_ns()), 3),
            # destination prefixes with a bucket order in the program (spread placement)
            "layouts": len(self._layouts),
            # prefixes over glbd's resilient groups without one: not read yet, a group of
            # more than 1,024 buckets, or beyond the maps' room
            "layouts_left_out": self._left_out,
            "table_size": st.table_size,
            "attached": st.attached,
            "missing": st.missing,
            "hash_policy": st.hash_policy,
            "interfaces": [
                {"interface": name, "attached": name in st.attached, **c}
                for name, c in st.counters.items()
            ],
            "counters": total,
            "events": dict(st.events),
        }
