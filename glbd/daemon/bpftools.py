"""What glbd's tc BPF programs (flowlet switching, the foreign-load counter) share: finding
the tools and the compiled object, running a tool in a network namespace, bpffs mounted.

Why the tools and not a ``bpf()`` syscall layer for loading: an ELF object (relocations, BTF,
map creation) is libbpf's job and ``bpftool`` is libbpf's command line; these calls run at
start, on a reload or on a check, never per packet.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path

from glbd.daemon.netns import NETNS_RUN_DIR

__all__ = [
    "BPFFS",
    "Tools",
    "find_object",
    "is_bpffs",
    "missing_tools",
    "remove_pins",
    "tool",
]

BPFFS = Path("/sys/fs/bpf")
#: where the Debian package installs the compiled programs
LIB_DIR = Path("/usr/lib/glbd")


def tool(name: str) -> str | None:
    """A tool's path: on PATH, or in /usr/sbin or /sbin (a service's PATH may lack them)."""
    return shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/sbin/{name}") if os.access(p, os.X_OK)), None
    )


def missing_tools(tools: Sequence[tuple[str, str]]) -> list[str]:
    """One line per (tool, Debian package) that is not installed."""
    return [f"'{t}' is missing: apt-get install {pkg}" for t, pkg in tools if tool(t) is None]


def find_object(env: str, source_dir: Path, name: str) -> Path | None:
    """A compiled program: ``$env``, next to its source (a source checkout), or where the
    Debian package installs it."""
    value = os.environ.get(env)
    cands = [Path(value)] if value else []
    cands += [source_dir / name, LIB_DIR / name]
    return next((p for p in cands if p.is_file()), None)


def is_bpffs(mountinfo_line: str) -> bool:
    """A /proc/self/mountinfo line of a bpffs mounted on :data:`BPFFS`."""
    f = mountinfo_line.split()
    return len(f) > 4 and f[4] == str(BPFFS) and " - bpf " in mountinfo_line


def remove_pins(pins: Iterable[Path], dirs: Iterable[Path]) -> None:
    """Unlink ``pins`` (those already gone are fine), then remove each of ``dirs``, innermost
    first, if it is empty: a directory still holding someone else's pins stays."""
    for p in pins:
        p.unlink(missing_ok=True)
    for d in dirs:
        with contextlib.suppress(OSError):  # not empty, or gone
            d.rmdir()


class Tools:
    """The tools run as subprocesses in one network namespace (``netns``: a name under
    /run/netns, or None for this process's); a failure raises ``error`` naming the command
    and what it said."""

    def __init__(self, netns: str | None, error: type[Exception]) -> None:
        self.netns = netns
        self.error = error

    async def run(self, argv: Sequence[str], *, check: bool = True) -> str:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as exc:
            raise self.error(f"{' '.join(argv)}: {exc}") from exc
        out, err = await proc.communicate()
        if check and proc.returncode != 0:
            msg = (err or out).decode(errors="replace").strip().splitlines()
            raise self.error(f"{' '.join(argv)}: {msg[-1] if msg else proc.returncode}")
        return out.decode(errors="replace")

    def in_ns(self, argv: Sequence[str]) -> list[str]:
        # nsenter switches the network namespace only: the bpffs pins stay visible (``tc -n``
        # and ``ip netns exec`` also remount /sys, which hides /sys/fs/bpf)
        if self.netns is None:
            return list(argv)
        return ["nsenter", f"--net={os.path.join(NETNS_RUN_DIR, self.netns)}", *argv]

    async def tc(self, *args: str, check: bool = True) -> str:
        return await self.run(self.in_ns([tool("tc") or "tc", *args]), check=check)

    async def ip(self, *args: str) -> str:
        return await self.run(self.in_ns([tool("ip") or "ip", *args]))

    async def bpftool(self, *args: str, check: bool = True) -> str:
        return await self.run([tool("bpftool") or "bpftool", *args], check=check)

    async def ensure_bpffs(self) -> None:
        """Mount bpffs on /sys/fs/bpf unless it is (systemd mounts it on a host; a process
        started by ``ip netns exec`` gets a fresh /sys without it)."""
        with open("/proc/self/mountinfo") as f:
            mounted = any(is_bpffs(line) for line in f)
        if not mounted:
            BPFFS.mkdir(parents=True, exist_ok=True)
            await self.run(["mount", "-t", "bpf", "bpf", str(BPFFS)])
