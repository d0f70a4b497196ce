"""Foreign load: glbd's tc egress program (``glbd/quality/bpf/foreign.bpf.c``) on the fabric
interfaces, counting per interface the bytes leaving it that no load balancer steered.

A packet's class comes from where it entered this router (``skb->ingress_ifindex``): sent by
the router itself, foreign; from an interface in the ``ports`` map, that port's class; from any
other, the default class in ``config``. On a spine ("helper") the fabric ports are steered and
the default is foreign; on a leaf ("load-balancer") the fabric ports are foreign and the
default (the host ports) steered.

Loading and attaching go through ``bpftool`` and ``tc`` (subprocesses, JSON), as in
:mod:`glbd.flowlet.loader`, at start and on the periodic :meth:`ForeignCounter.apply`. The
counters are read with the bpf(2) syscall through ctypes (:mod:`glbd.quality.bpfmap`) on a map
fd opened once: the link monitor reads them every 50 ms, and ``bpftool map dump`` per read
would spawn a process (milliseconds of CPU) twenty times a second.

Nothing here is worth keeping across a restart: :meth:`ForeignCounter.start` loads the program
afresh and replaces any filter of ours, so the counters start again at 0 (the consumer
re-baselines when a counter goes backwards). Objects, per network namespace (its inode in the
name), next to the flowlet program's pins in ``net-<inode>/``, which are never touched::

    /sys/fs/bpf/glbd/net-<inode>/foreign/prog
    /sys/fs/bpf/glbd/net-<inode>/foreign/maps/{ports,config,counts}
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import socket
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import structlog

from glbd.daemon.bpftools import BPFFS, Tools, find_object, missing_tools, remove_pins
from glbd.daemon.netns import NETNS_RUN_DIR
from glbd.quality.bpfmap import SYSCALL_NR, PinnedMap, possible_cpus

log = structlog.get_logger(__name__)

__all__ = [
    "FOREIGN",
    "PREF",
    "PROG_NAME",
    "STEERED",
    "Counts",
    "ForeignCountError",
    "ForeignCounter",
    "PortClasses",
    "object_path",
    "problems",
]

#: the program's function name (what tc shows as the filter's program)
PROG_NAME = "glbd_foreign"
#: the priority of glbd's filter on clsact egress (handle 1; one filter per interface)
PREF = 49_152
OBJECT = "foreign.bpf.o"
#: the classes (CLASS_STEERED, CLASS_FOREIGN in foreign.bpf.c)
STEERED = 1
FOREIGN = 2
CLASS_NAMES = {STEERED: "steered", FOREIGN: "foreign"}
MAPS = ("ports", "config", "counts")
#: (key size, value size) of each map, as the program declares them; struct counts is four u64
MAP_SIZES = {"ports": (4, 4), "config": (4, 8), "counts": (4, 32)}
_U32 = struct.Struct("<I")
_COUNTS = struct.Struct("<4Q")
_U64 = struct.Struct("<Q")
#: struct counts' foreign_bytes: the third u64
_FOREIGN_BYTES_AT = 16


class ForeignCountError(RuntimeError):
    """A tool or syscall failed; the message names the command and what it said."""


def object_path() -> Path | None:
    """The compiled program: ``$GLBD_FOREIGN_OBJECT``, next to its source in the package (a
    source checkout: ``glbd/flowlet/bpf/build.sh glbd/quality/bpf/foreign.bpf.c``), or where
    the Debian package installs it."""
    return find_object("GLBD_FOREIGN_OBJECT", Path(__file__).resolve().parent / "bpf", OBJECT)


def problems() -> list[str]:
    """Why foreign-load counting cannot run here (empty: it can), for ``glbd check-config``."""
    out = missing_tools(
        (("bpftool", "bpftool"), ("tc", "iproute2"), ("ip", "iproute2"), ("nsenter", "util-linux"))
    )
    if object_path() is None:
        out.append(
            "the compiled program foreign.bpf.o is missing (a source checkout builds it with "
            "glbd/flowlet/bpf/build.sh glbd/quality/bpf/foreign.bpf.c; the Debian package "
            "ships /usr/lib/glbd/foreign.bpf.o)"
        )
    if platform.machine() not in SYSCALL_NR:
        out.append(f"no bpf(2) syscall number known for {platform.machine()}")
    return out


# ---- pure parts (unit-tested on literal inputs) -----------------------------------------------


@dataclass(frozen=True)
class PortClasses:
    """The class of packets by the interface they entered by: ``ports`` by name, any other
    ``default`` (packets this router sends are foreign whatever these say)."""

    default: int = FOREIGN
    ports: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ports", dict(self.ports))  # the caller's dict may change
        for what, cls in (("default", self.default), *self.ports.items()):
            if cls not in CLASS_NAMES:
                raise ValueError(f"class of {what}: {cls!r} is neither STEERED nor FOREIGN")

    def by_ifindex(self, links: Mapping[str, int]) -> dict[int, int]:
        """The ``ports`` map's content: ifindex -> class, for the named ports that exist."""
        return {links[name]: cls for name, cls in self.ports.items() if name in links}


@dataclass(frozen=True)
class Counts:
    """What left one interface since the program was loaded (skb->len: the link-layer header
    included, as the qdisc counters count)."""

    bytes: int = 0
    packets: int = 0
    foreign_bytes: int = 0
    foreign_packets: int = 0


def sum_percpu(raw: bytes, ncpus: int) -> Counts:
    """A per-CPU lookup of the counts map (one 32-byte struct counts per possible CPU) summed."""
    size = _COUNTS.size
    if len(raw) < size * ncpus:
        raise ValueError(f"per-CPU value of {len(raw)} bytes, {ncpus} CPUs want {size * ncpus}")
    sums = [0, 0, 0, 0]
    for cpu in range(ncpus):
        for i, v in enumerate(_COUNTS.unpack_from(raw, cpu * size)):
            sums[i] += v
    return Counts(*sums)


def parse_links(ip_json: str) -> dict[str, int]:
    """``ip -j link show``: name -> ifindex."""
    return {str(link["ifname"]): int(link["ifindex"]) for link in json.loads(ip_json or "[]")}


def parse_filters(tc_json: str) -> list[int]:
    """The program ids of glbd's filters in ``tc -j filter show dev IF egress``: at
    :data:`PREF`, kind bpf, running a program named :data:`PROG_NAME`."""
    out = []
    for f in json.loads(tc_json or "[]"):
        prog = (f.get("options") or {}).get("prog") or {}
        if f.get("pref") == PREF and f.get("kind") == "bpf" and prog.get("name") == PROG_NAME:
            out.append(int(prog["id"]))
    return out


def config_value(default: int) -> bytes:
    """struct config: the default class and 4 bytes of padding."""
    return struct.pack("<II", default, 0)


# ---- the counter ------------------------------------------------------------------------------


class ForeignCounter:
    """glbd's foreign-load program in one network namespace (``netns``: a name under /run/netns,
    or None for this process's own). The async methods run ``ip``, ``tc`` and ``bpftool``;
    :meth:`read` only makes syscalls."""

    def __init__(self, netns: str | None = None, obj: Path | None = None) -> None:
        self.netns = netns
        self.obj = obj
        self._tools = Tools(netns, ForeignCountError)
        ino = os.stat(os.path.join(NETNS_RUN_DIR, netns) if netns else "/proc/self/ns/net")
        self.dir = BPFFS / "glbd" / f"net-{ino.st_ino}" / "foreign"
        self.prog_id: int | None = None
        self.interfaces: tuple[str, ...] = ()
        self.classes: PortClasses | None = None
        #: where our filter is, and the wanted interfaces that do not exist (last apply)
        self.attached: list[str] = []
        self.missing: list[str] = []
        #: name -> ifindex of the attached interfaces and the named ports (last apply)
        self.ifindex: dict[str, int] = {}
        self.events = dict.fromkeys(("loaded", "attached", "reattached", "detached", "errors"), 0)
        #: every interface attached since start: one of them without our filter is reattached
        self._ever: set[str] = set()
        self._maps: dict[str, PinnedMap] = {}
        self._ncpus = 0

    @property
    def prog_pin(self) -> Path:
        return self.dir / "prog"

    def map_pin(self, name: str) -> Path:
        return self.dir / "maps" / name

    # -- tools
    async def _tc(self, *args: str, check: bool = True) -> str:
        return await self._tools.tc(*args, check=check)

    async def _bpftool(self, *args: str) -> str:
        return await self._tools.bpftool(*args)

    async def links(self) -> dict[str, int]:
        """The namespace's interfaces: name -> ifindex."""
        return parse_links(await self._tools.ip("-j", "link", "show"))

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        """Count a failure as an event; a syscall's OSError becomes a ForeignCountError."""
        try:
            yield
        except ForeignCountError as exc:
            self.events["errors"] += 1
            log.warning("foreign_count_failed", what=what, error=str(exc))
            raise
        except OSError as exc:
            self.events["errors"] += 1
            log.warning("foreign_count_failed", what=what, error=str(exc))
            raise ForeignCountError(f"{what}: {exc}") from exc

    # -- bpffs and maps
    def _remove_pins(self) -> None:
        """Our pins, then our directories and the shared ones above them if empty (the
        flowlet program's pins live in net-<inode>/ too: never touched)."""
        remove_pins(
            [*(self.map_pin(name) for name in MAPS), self.prog_pin],
            [self.dir / "maps", self.dir, self.dir.parent, self.dir.parent.parent],
        )

    def _open_maps(self) -> None:
        self._close_maps()
        self._ncpus = possible_cpus()
        for name in MAPS:
            m = PinnedMap(self.map_pin(name))
            self._maps[name] = m
            if (m.key_size, m.info.value_size) != MAP_SIZES[name]:
                raise ForeignCountError(
                    f"{m.path}: key/value sizes {m.key_size}/{m.info.value_size}, want "
                    f"{MAP_SIZES[name][0]}/{MAP_SIZES[name][1]} (a foreign.bpf.o of another build?)"
                )
        self._maps["counts"].value_size = MAP_SIZES["counts"][1] * self._ncpus

    def _close_maps(self) -> None:
        for m in self._maps.values():
            m.close()
        self._maps.clear()

    async def _load(self) -> None:
        obj = self.obj or object_path()
        if obj is None:
            raise ForeignCountError("foreign.bpf.o not found: " + "; ".join(problems()))
        self._close_maps()
        self._remove_pins()  # a previous run's: its filters keep their program until replaced
        (self.dir / "maps").mkdir(parents=True, exist_ok=True)
        await self._bpftool(
            "prog", "load", str(obj), str(self.prog_pin), "type", "classifier",
            "pinmaps", str(self.dir / "maps"),
        )  # fmt: skip
        show = json.loads(await self._bpftool("-j", "prog", "show", "pinned", str(self.prog_pin)))
        self.prog_id = int(show["id"])
        self._open_maps()
        self.events["loaded"] += 1
        log.info("foreign_count_loaded", prog_id=self.prog_id, pin_dir=str(self.dir))

    # -- filters
    async def _ours(self, ifname: str) -> list[int]:
        # unchecked: an interface gone since it was listed has no filter
        js = await self._tc("-j", "filter", "show", "dev", ifname, "egress", check=False)
        return parse_filters(js)

    async def _attach(self, ifname: str) -> None:
        await self._tc("qdisc", "replace", "dev", ifname, "clsact")
        await self._tc(
            "filter", "replace", "dev", ifname, "egress", "pref", str(PREF), "handle", "1",
            "bpf", "da", "object-pinned", str(self.prog_pin),
        )  # fmt: skip

    async def _detach(self, ifname: str) -> None:
        await self._tc(
            "filter", "del", "dev", ifname, "egress", "pref", str(PREF), "handle", "1", "bpf",
        )  # fmt: skip

    # -- the API
    async def start(self, interfaces: Sequence[str], classes: PortClasses) -> None:
        """Load the program afresh and attach it to each of ``interfaces`` that exists
        (replacing a filter a previous glbd left), classes written first."""
        with self._errors("start"):
            await self._tools.ensure_bpffs()
            self._ever.clear()
            await self._load()
            await self._apply(interfaces, classes, scan_all=True)

    async def apply(self, interfaces: Sequence[str], classes: PortClasses) -> None:
        """Bring the kernel to ``interfaces`` and ``classes``: names resolved again (a
        re-created interface has a new ifindex), a filter where one is wanted and missing,
        none where it is no longer wanted, the ports map and config rewritten. Safe to repeat
        (called periodically)."""
        with self._errors("apply"):
            if not self._maps:
                raise ForeignCountError("the program is not loaded (start first)")
            await self._apply(interfaces, classes, scan_all=False)

    async def _apply(
        self, interfaces: Sequence[str], classes: PortClasses, *, scan_all: bool
    ) -> None:
        links = await self.links()
        self._write_classes(classes, links)
        wanted = [name for name in dict.fromkeys(interfaces) if name in links]
        # where our filter may be: anywhere after a restart, else where we put it or want it
        scan = links.keys() if scan_all else {*wanted, *self.attached} & links.keys()
        ours = {name: await self._ours(name) for name in sorted(scan)}
        for name in wanted:
            if self.prog_id not in ours.get(name, []):
                # one of ours that went (deleted, or its interface re-created) is reattached
                again = name in self._ever and not ours.get(name)
                await self._attach(name)
                self._ever.add(name)
                self.events["reattached" if again else "attached"] += 1
                log.info("foreign_count_attached", interface=name, again=again)
        for name, ids in ours.items():
            if ids and name not in wanted:
                await self._detach(name)
                self.events["detached"] += 1
                log.info("foreign_count_detached", interface=name)
        self.interfaces = tuple(interfaces)
        self.attached = sorted(wanted)
        self.missing = sorted(set(interfaces) - links.keys())
        self.ifindex = {n: links[n] for n in sorted({*wanted, *classes.ports}) if n in links}
        self._drop_counts(keep={links[n] for n in wanted})

    def _write_classes(self, classes: PortClasses, links: Mapping[str, int]) -> None:
        self._maps["config"].update(_U32.pack(0), config_value(classes.default))
        ports = self._maps["ports"]
        want = classes.by_ifindex(links)
        for ifindex, cls in want.items():
            ports.update(_U32.pack(ifindex), _U32.pack(cls))
        for key in list(ports.keys()):
            if _U32.unpack(key)[0] not in want:
                ports.delete(key)
        self.classes = classes

    def _drop_counts(self, keep: set[int]) -> None:
        """Forget the counters of interfaces no longer attached (gone, re-created or
        detached), so the map never fills up with dead ifindexes."""
        counts = self._maps["counts"]
        for key in list(counts.keys()):
            if _U32.unpack(key)[0] not in keep:
                counts.delete(key)

    def read(self) -> dict[int, Counts]:
        """Egress ifindex -> what left it, summed over the CPUs (syscalls only; {} if not
        loaded)."""
        counts = self._maps.get("counts")
        if counts is None:
            return {}
        try:
            items = list(counts.items())
        except OSError as exc:  # counted, not logged: the caller reads every 50 ms
            self.events["errors"] += 1
            raise ForeignCountError(f"reading {counts.path}: {exc}") from exc
        return {_U32.unpack(key)[0]: sum_percpu(value, self._ncpus) for key, value in items}

    def interfaces_moved(self) -> bool:
        """Whether a wanted interface or a named port appeared, went or was made again (a new
        ifindex) since the last apply: one ioctl per name, no process. In another namespace
        than this process's it cannot tell, and says True."""
        if self.netns is not None:
            return True
        for name in {*self.interfaces, *(self.classes.ports if self.classes else ())}:
            try:
                index = socket.if_nametoindex(name)
            except OSError:
                index = 0
            if index != self.ifindex.get(name, 0):
                return True
        return False

    def foreign_bytes(self) -> dict[int, int]:
        """Egress ifindex -> foreign bytes of each attached interface (what the link monitor's
        ``on_foreign`` takes): one lookup each, no walk of the map (it is read every 50 ms)."""
        counts = self._maps.get("counts")
        if counts is None:
            return {}
        size, at, out = _COUNTS.size, _FOREIGN_BYTES_AT, {}
        try:
            for name in self.attached:
                ifindex = self.ifindex.get(name)
                raw = None if ifindex is None else counts.lookup(_U32.pack(ifindex))
                if ifindex is not None and raw is not None:
                    out[ifindex] = sum(
                        _U64.unpack_from(raw, cpu * size + at)[0] for cpu in range(self._ncpus)
                    )
        except OSError as exc:  # counted, not logged: the caller reads every 50 ms
            self.events["errors"] += 1
            raise ForeignCountError(f"reading {counts.path}: {exc}") from exc
        return out

    async def stop(self) -> None:
        """Remove our filters (at :data:`PREF`, running :data:`PROG_NAME`; no other) from every
        interface, close the maps and remove our pins."""
        try:
            with self._errors("stop"):
                links = await self.links()
                for name in sorted(links):
                    if await self._ours(name):
                        await self._detach(name)
                        self.events["detached"] += 1
        finally:
            self._close_maps()
            self._remove_pins()
            self.prog_id = None
            self.attached = []
            self._ever.clear()

    def snapshot(self) -> dict[str, Any]:
        """For glbctl: the program, where it is attached, the classes and the counters."""
        error = None
        try:
            counts = self.read()
        except ForeignCountError as exc:
            counts, error = {}, str(exc)
        names = {i: n for n, i in self.ifindex.items()}
        c = self.classes
        return {
            "prog_id": self.prog_id,
            "pin_dir": str(self.dir),
            "attached": list(self.attached),
            "missing": list(self.missing),
            "default_class": CLASS_NAMES.get(c.default) if c else None,
            "ports": {n: CLASS_NAMES[k] for n, k in sorted(c.ports.items())} if c else {},
            "counts": {names.get(i, f"ifindex-{i}"): asdict(v) for i, v in sorted(counts.items())},
            "events": dict(self.events),
            "read_error": error,
        }
