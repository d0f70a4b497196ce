"""Where the engine loop runs: the child process (spawn and entry point) and what both modes
do before the loop starts (enter the network namespace, real-time priority, fd limit).

Process mode runs ``python -m bfd.engine --fd N [--netns NAME] [--rt-priority P] [--seed S]
[--log-priority]``
(``bfd/engine/__main__.py`` calls :func:`child_main`): its own interpreter and GIL, so the
daemon's main loop cannot delay a transmit or an expiry check, and with ``--rt-priority``
SCHED_FIFO, so a busy core cannot either (measurements: docs/benchmarks.md, "BFD engine:
process and priority"). A real-time priority cannot help a thread that waits for the GIL,
hence process mode by default.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import gc
import logging
import os
import random
import resource
import signal
import socket
import subprocess
import sys
from multiprocessing.connection import Connection
from typing import Any

from .. import log as bfdlog
from .channel import EngineEnd
from .loop import Loop

__all__ = ["child_main", "enter_netns", "prepare", "raise_nofile", "set_rt", "spawn"]

log = logging.getLogger(__name__)

_CLONE_NEWNET = 0x40000000
_PR_SET_PDEATHSIG = 1
#: the directory that holds the ``bfd`` package, put on the child's PYTHONPATH
_PKG_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def enter_netns(name: str) -> None:
    """Move the calling thread into /run/netns/NAME (sockets it creates stay there)."""
    path = name if name.startswith("/") else f"/run/netns/{name}"
    fd = os.open(path, os.O_RDONLY)
    try:
        if hasattr(os, "setns"):  # Python 3.12+
            os.setns(fd, _CLONE_NEWNET)
            return
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"setns {path}: {os.strerror(e)}")
    finally:
        os.close(fd)


def raise_nofile() -> None:
    """One socket per session: lift the soft fd limit to the hard one (1024 by default)."""
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = hard if hard != resource.RLIM_INFINITY else 1 << 20
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def set_rt(priority: int | None) -> None:
    """SCHED_FIFO at ``priority`` for the calling thread (a warning if not permitted)."""
    if not priority:
        return
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except OSError as exc:
        log.warning("bfd: SCHED_FIFO %d not available: %s", priority, exc)


def prepare(netns: str | None, rt_priority: int | None) -> None:
    """What the loop's thread does first, in either mode."""
    if netns:
        enter_netns(netns)
    set_rt(rt_priority)
    raise_nofile()


#: the service manager's handles, meant for the daemon alone: the engine must not ping the
#: watchdog or notify on the daemon's behalf, nor take its activated sockets
_NOT_INHERITED = ("NOTIFY_SOCKET",)
_NOT_INHERITED_PREFIXES = ("WATCHDOG_", "LISTEN_")


def engine_env(base: dict[str, str]) -> dict[str, str]:
    """The engine's environment: ``base`` without the service manager's handles, with this
    package importable."""
    env = {
        k: v
        for k, v in base.items()
        if k not in _NOT_INHERITED and not k.startswith(_NOT_INHERITED_PREFIXES)
    }
    env["PYTHONPATH"] = _PKG_ROOT + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
    )
    return env


def spawn(
    netns: str | None,
    rt_priority: int | None,
    seed: int | None,
    log_priority: bool = False,
    kernel_rx: bool = True,
) -> tuple[subprocess.Popen[bytes], Connection]:
    """Start the engine process; returns it and the daemon's end of its control socket.
    ``log_priority``: its stderr lines start with their syslog priority (``<4>``), for journald."""
    parent, child = socket.socketpair()
    env = engine_env(dict(os.environ))
    argv = [sys.executable, "-m", "bfd.engine", "--fd", str(child.fileno())]
    if netns:
        argv += ["--netns", netns]
    if rt_priority:
        argv += ["--rt-priority", str(rt_priority)]
    if seed is not None:
        argv += ["--seed", str(seed)]
    if log_priority:
        argv.append("--log-priority")
    if not kernel_rx:
        argv.append("--no-kernel-rx")
    try:
        proc = subprocess.Popen(argv, pass_fds=(child.fileno(),), env=env)
    finally:
        child.close()
    return proc, Connection(parent.detach())


def child_main(argv: list[str] | None = None) -> int:
    """Entry point of the engine process: ``python -m bfd.engine --fd N [...]``."""
    ap = argparse.ArgumentParser(prog="bfd.engine", description="glbd BFD engine process")
    ap.add_argument("--fd", type=int, required=True)
    ap.add_argument("--netns")
    ap.add_argument("--rt-priority", type=int)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--log-priority", action="store_true", help="<N> syslog prefixes (journald)")
    ap.add_argument("--no-kernel-rx", action="store_true", help="read every packet (no BPF)")
    args = ap.parse_args(argv)
    bfdlog.setup(logging.WARNING, priorities=args.log_priority)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the daemon's to handle
    with contextlib.suppress(Exception):  # die with the daemon
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, 15)
    chan = EngineEnd(socket.socket(fileno=args.fd))
    prepare(args.netns, args.rt_priority)
    loop = Loop(chan.send_event, rng=random.Random(args.seed), kernel_rx=not args.no_kernel_rx)
    loop.after = chan.flush_events  # one message per loop iteration, however many events
    chan.ep = loop.ep
    gc.freeze()  # the loop's objects live as long as the process: keep them out of GC passes

    def call(op: str, args: tuple[Any, ...]) -> Any:
        result = loop.call(op, args)
        if op == "add":  # a session lives long: keep it out of full collections too (with
            gc.freeze()  # hundreds of sessions one would hold the loop for milliseconds)
        return result

    loop.run(chan.fd, chan.serve(call))
    return 0
