"""Enter a named network namespace (``/run/netns/NAME``, as ``ip netns`` makes them) for the
duration of a short synchronous block, on the calling thread only, then switch back.

Sockets keep the namespace they were created in, so ``with in_netns("x"): s = socket(...)``
gives a socket that lives in ``x`` while the thread (and the rest of the process) stays where
it was. The block must not await: another coroutine would run inside the namespace.
A missing namespace raises FileNotFoundError; nothing is ever created (unlike pyroute2's
default ``O_CREAT``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["NETNS_RUN_DIR", "in_netns", "read_sysctl", "write_sysctl"]

NETNS_RUN_DIR = "/run/netns"
_CLONE_NEWNET = 0x40000000
_libc: ctypes.CDLL | None = None


def _setns(fd: int) -> None:
    # os.setns exists only from Python 3.12
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


@contextmanager
def in_netns(name: str | None) -> Iterator[None]:
    if name is None:
        yield
        return
    if "/" in name or name in ("", ".", ".."):
        raise ValueError(f"bad netns name {name!r}")
    target = os.open(os.path.join(NETNS_RUN_DIR, name), os.O_RDONLY | os.O_CLOEXEC)
    try:
        home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            _setns(target)
            try:
                yield
            finally:
                _setns(home)
        finally:
            os.close(home)
    finally:
        os.close(target)


def _sysctl_path(key: str) -> str:
    return "/proc/sys/" + key.replace(".", "/")


def read_sysctl(key: str, netns: str | None = None) -> str:
    """``read_sysctl("net.ipv4.nexthop_compat_mode", "ns1")`` (net.* is per namespace)."""
    with in_netns(netns), open(_sysctl_path(key)) as f:
        return f.read().strip()


def write_sysctl(key: str, value: str | int, netns: str | None = None) -> None:
    with in_netns(netns), open(_sysctl_path(key), "w") as f:
        f.write(f"{value}\n")
