"""ECN marking for the bench's shallow profile, with a marker of our own.

An AI backend fabric marks ECN early on shallow buffers (WRED/ECN profile: probability 0 at
55 % of the queue rising to 1 at 90 %, on the instantaneous queue) and its hosts slow down on
the marks instead of losing packets. This kernel has no RED qdisc, so
``bpf/ecnmark.bpf.c``, a tc egress program on each fabric link end, keeps the link's queue
itself (a FIFO that drains at the tbf's rate, less its burst) and sets CE on ECN-capable
packets as that profile would. The hosts negotiate ECN (``net.ipv4.tcp_ecn = 1``) and run a
loss-based TCP that halves on an echoed mark (cubic: this kernel has no DCTCP, and BBR
ignores ECN). ``tests/test_fabric_bench_ecn.py`` shows in the real kernel that it marks as
that profile would: nothing below the queue's threshold, nearly every packet of a full queue,
never a packet that is not ECN-capable.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from glbdlab.netns import Netns

__all__ = [
    "COUNTERS",
    "MTU_WIRE",
    "PROG_NAME",
    "Marker",
    "build_object",
    "counters",
    "tc_lines",
    "tc_size_bytes",
]

SOURCE = Path(__file__).with_name("bpf") / "ecnmark.bpf.c"
BUILD = Path(__file__).resolve().parents[2] / "glbd" / "flowlet" / "bpf" / "build.sh"
#: the program's function name, as tc shows its filter
PROG_NAME = "ecnmark"
#: the marker's counters (``enum counter`` in the program), in order
COUNTERS = ("packets", "ect", "marked", "over")
#: bytes a full-size frame occupies in a queue (what the pfifo's packet limit is sized by)
MTU_WIRE = 1514


@dataclass(frozen=True)
class Marker:
    """One link's marking: its rate and tbf burst, its queue, and the marking thresholds as
    shares of that queue."""

    rate_bps: int
    burst_bytes: int
    limit_bytes: int
    min_share: float = 0.55
    max_share: float = 0.90

    @property
    def min_bytes(self) -> int:
        return int(self.limit_bytes * self.min_share)

    @property
    def max_bytes(self) -> int:
        return int(self.limit_bytes * self.max_share)

    def defines(self) -> str:
        return (
            f"-DRATE_BPS={self.rate_bps}ULL -DBURST_BYTES={self.burst_bytes}ULL "
            f"-DLIMIT_BYTES={self.limit_bytes}ULL -DMIN_BYTES={self.min_bytes}ULL "
            f"-DMAX_BYTES={self.max_bytes}ULL"
        )


def tc_size_bytes(v: str) -> int:
    """A tc size (``64kbit``, ``8kb``, ``1500b``, ``1500``) in bytes."""
    v = v.strip().lower()
    for suf, mul in (("mbit", 1e6 / 8), ("kbit", 1e3 / 8), ("bit", 1 / 8), ("kb", 1024), ("b", 1)):
        if v.endswith(suf):
            return int(float(v[: -len(suf)]) * mul)
    return int(v)


def build_object(marker: Marker, out_dir: Path | None = None) -> Path:
    """The marker compiled for ``marker`` (one object per source and setting, reused)."""
    d = out_dir or Path(_private_dir().name)
    tag = hashlib.sha256(SOURCE.read_bytes() + marker.defines().encode()).hexdigest()[:16]
    out = d / f"ecnmark-{tag}.bpf.o"
    if not out.exists():
        env = {**os.environ, "BPF_DEFINES": marker.defines()}
        subprocess.run(["sh", str(BUILD), str(SOURCE), str(out)], check=True, env=env)
    return out


_TMP: list[tempfile.TemporaryDirectory[str]] = []


def _private_dir() -> tempfile.TemporaryDirectory[str]:
    """This process's own build directory (a shared, predictable /tmp path would let another
    user plant the object root loads into the kernel); removed at exit."""
    if not _TMP:
        _TMP.append(tempfile.TemporaryDirectory(prefix="glbbench-ecn-"))
    return _TMP[0]


def tc_lines(ifname: str, obj: Path) -> list[str]:
    """``tc -batch`` lines that attach the marker to ``ifname``'s egress."""
    return [
        f"qdisc replace dev {ifname} clsact",
        f"filter replace dev {ifname} egress pref 1 handle 1 bpf da obj {obj} sec tc",
    ]


def counters(ns: Netns, ifname: str) -> dict[str, int]:
    """The marker's counters on ``ifname`` (empty when none is attached)."""
    filters = json.loads(ns.run(["tc", "-j", "filter", "show", "dev", ifname, "egress"]).stdout)
    # the marker's filter, not another program on the same hook (glbd's foreign-load counter)
    ids = [
        f["options"]["prog"]["id"]
        for f in filters
        if f.get("options", {}).get("prog", {}).get("name") == PROG_NAME
    ]
    if not ids:
        return {}
    prog = json.loads(_bpftool("prog", "show", "id", str(ids[0])))
    for map_id in prog.get("map_ids", []):
        info = json.loads(_bpftool("map", "show", "id", str(map_id)))
        if info.get("name") == "stats":
            rows = json.loads(_bpftool("map", "dump", "id", str(map_id)))
            vals = {
                int.from_bytes(bytes(int(b, 16) for b in r["key"]), "little"): int.from_bytes(
                    bytes(int(b, 16) for b in r["value"]), "little"
                )
                for r in rows
            }
            return {name: vals.get(i, 0) for i, name in enumerate(COUNTERS)}
    return {}


def _bpftool(*args: str) -> str:
    return subprocess.run(
        ["bpftool", "-j", *args], check=True, capture_output=True, text=True
    ).stdout
