"""Pinned BPF maps read and written with the bpf(2) syscall, through ctypes.

Only what a pinned map needs: open it by path (``BPF_OBJ_GET``), check its sizes
(``BPF_OBJ_GET_INFO_BY_FD``), walk its keys (``BPF_MAP_GET_NEXT_KEY``), look up, update and
delete elements. Loading programs stays with ``bpftool`` (libbpf); this is for the reads a
poll makes many times a second, where a process per read would cost more than the read.

Errors are :class:`OSError` with the kernel's errno, the command named in the message.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "BPF_ANY",
    "BPF_NOEXIST",
    "MapInfo",
    "PinnedMap",
    "count_cpus",
    "pinned_id",
    "possible_cpus",
]

#: bpf(2)'s number on the architectures glbd runs on (asm/unistd.h)
SYSCALL_NR = {"x86_64": 321, "aarch64": 280}

# enum bpf_cmd (linux/bpf.h)
_MAP_LOOKUP_ELEM = 1
_MAP_UPDATE_ELEM = 2
_MAP_DELETE_ELEM = 3
_MAP_GET_NEXT_KEY = 4
_OBJ_GET = 7
_OBJ_GET_INFO_BY_FD = 15
_NAMES = {1: "MAP_LOOKUP_ELEM", 2: "MAP_UPDATE_ELEM", 3: "MAP_DELETE_ELEM",
          4: "MAP_GET_NEXT_KEY", 7: "OBJ_GET", 15: "OBJ_GET_INFO_BY_FD"}  # fmt: skip

#: update flags
BPF_ANY = 0
BPF_NOEXIST = 1

_libc: ctypes.CDLL | None = None
_nr: int | None = None


def _syscall_nr() -> int:
    global _nr
    if _nr is None:
        machine = platform.machine()
        if machine not in SYSCALL_NR:
            known = ", ".join(SYSCALL_NR)
            raise OSError(f"bpf(2): no syscall number known for {machine!r} (known: {known})")
        _nr = SYSCALL_NR[machine]
    return _nr


def _bpf(cmd: int, attr: ctypes.Array[ctypes.c_char]) -> int:
    """bpf(cmd, attr, sizeof attr); raises OSError (ENOENT from a lookup included)."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
    ret: int = _libc.syscall(
        ctypes.c_long(_syscall_nr()), ctypes.c_long(cmd), attr, ctypes.c_long(len(attr))
    )
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"bpf({_NAMES.get(cmd, cmd)}): {os.strerror(err)}")
    return ret


def count_cpus(possible: str) -> int:
    """The number of CPUs in a kernel CPU list (``/sys/devices/system/cpu/possible``: "0-3",
    "0,2-5"): what the kernel's per-CPU map values hold one slot for."""
    n = 0
    for part in possible.strip().split(","):
        lo, _, hi = part.partition("-")
        n += (int(hi) if hi else int(lo)) - int(lo) + 1
    return n


def possible_cpus() -> int:
    return count_cpus(Path("/sys/devices/system/cpu/possible").read_text())


@dataclass(frozen=True)
class MapInfo:
    """struct bpf_map_info's leading fields."""

    type: int
    id: int
    key_size: int
    value_size: int
    max_entries: int


def _obj_get(path: Path | str) -> int:
    name = os.fsencode(str(path)) + b"\0"
    buf = ctypes.create_string_buffer(name, len(name))
    # pathname, bpf_fd, file_flags (0: read and write)
    attr = ctypes.create_string_buffer(struct.pack("<QII", ctypes.addressof(buf), 0, 0), 16)
    try:
        return _bpf(_OBJ_GET, attr)
    except OSError as exc:
        raise OSError(exc.errno, f"{exc.strerror} ({path})") from None


def _info_of(fd: int, size: int) -> bytes:
    """The leading ``size`` bytes of the object's info (map or program: type, id, ...)."""
    out = ctypes.create_string_buffer(size)
    attr = ctypes.create_string_buffer(struct.pack("<IIQ", fd, len(out), ctypes.addressof(out)), 16)
    _bpf(_OBJ_GET_INFO_BY_FD, attr)
    return out.raw


def pinned_id(path: Path | str) -> int:
    """The id of the pinned object (a program or a map) at ``path``; OSError if none."""
    fd = _obj_get(path)
    try:
        return int(struct.unpack_from("<2I", _info_of(fd, 8))[1])
    finally:
        os.close(fd)


class PinnedMap:
    """A map pinned on bpffs, open until :meth:`close`. ``value_size`` is what one lookup
    returns: a per-CPU map's value size (rounded up to 8) times the possible CPUs."""

    def __init__(self, path: Path | str, value_size: int | None = None) -> None:
        self.fd = _obj_get(path)
        self.path = str(path)
        self.info = self._info()
        self.key_size = self.info.key_size
        self.value_size = value_size if value_size is not None else self.info.value_size

    def _info(self) -> MapInfo:
        # struct bpf_map_info's first 80 bytes (what the kernel fills)
        return MapInfo(*struct.unpack_from("<5I", _info_of(self.fd, 80)))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _elem(self, cmd: int, key: bytes | None, value: int, flags: int = 0) -> int:
        if self.fd < 0:
            raise OSError(9, f"{self.path}: closed")
        kbuf = ctypes.create_string_buffer(key, self.key_size) if key is not None else None
        kaddr = ctypes.addressof(kbuf) if kbuf is not None else 0
        # map_fd, (pad), key, value or next_key, flags
        attr = ctypes.create_string_buffer(struct.pack("<I4xQQQ", self.fd, kaddr, value, flags), 32)
        return _bpf(cmd, attr)

    def lookup(self, key: bytes) -> bytes | None:
        """The value (all CPUs' for a per-CPU map), or None if the key is not there."""
        out = ctypes.create_string_buffer(self.value_size)
        try:
            self._elem(_MAP_LOOKUP_ELEM, key, ctypes.addressof(out))
        except OSError as exc:
            if exc.errno == 2:  # ENOENT
                return None
            raise
        return out.raw

    def update(self, key: bytes, value: bytes, flags: int = BPF_ANY) -> None:
        buf = ctypes.create_string_buffer(value, self.value_size)
        self._elem(_MAP_UPDATE_ELEM, key, ctypes.addressof(buf), flags)

    def delete(self, key: bytes) -> bool:
        """False if the key was not there."""
        try:
            self._elem(_MAP_DELETE_ELEM, key, 0)
        except OSError as exc:
            if exc.errno == 2:
                return False
            raise
        return True

    def keys(self) -> Iterator[bytes]:
        """Every key, in the map's order (a hash map: any). A key deleted meanwhile makes the
        kernel restart from the first key, so a walk racing deletes may see a key twice."""
        out = ctypes.create_string_buffer(self.key_size)
        key: bytes | None = None
        while True:
            try:
                self._elem(_MAP_GET_NEXT_KEY, key, ctypes.addressof(out))
            except OSError as exc:
                if exc.errno == 2:  # past the last key
                    return
                raise
            key = out.raw
            yield key

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) for every key still there when it is looked up."""
        for key in dict.fromkeys(self.keys()):
            value = self.lookup(key)
            if value is not None:
                yield key, value
