"""sd_notify in a few lines of stdlib: READY, STATUS, WATCHDOG, STOPPING.

Does nothing when ``NOTIFY_SOCKET`` is unset (not started by systemd), so callers need no checks.
The watchdog is pinged from the event loop itself (``watchdog_interval()`` gives the period to
use: half of ``WATCHDOG_USEC``), so a blocked loop stops the pings and systemd restarts glbd.
"""

from __future__ import annotations

import os
import socket

#: the service manager's handles, the daemon's alone: a child must not ping the watchdog or
#: notify on its behalf (a stuck event loop would go unnoticed), nor take its sockets
CHILD_ENV_STRIP = ("NOTIFY_SOCKET",)
CHILD_ENV_STRIP_PREFIXES = ("WATCHDOG_", "LISTEN_")


def notify(**fields: str | int) -> bool:
    """Send ``KEY=value`` lines (keys upper-cased) to systemd; True if a message was sent."""
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return False
    if addr.startswith("@"):
        addr = "\0" + addr[1:]
    msg = "\n".join(f"{k.upper()}={v}" for k, v in fields.items()).encode()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.connect(addr)
            s.sendall(msg)
    except OSError:
        return False
    return True


def ready(status: str = "") -> bool:
    return notify(ready=1, status=status) if status else notify(ready=1)


def status(text: str) -> bool:
    return notify(status=text)


def stopping(status: str = "stopping") -> bool:
    return notify(stopping=1, status=status)


def watchdog() -> bool:
    return notify(watchdog=1)


def watchdog_interval() -> float | None:
    """Seconds between pings (half the watchdog timeout), or None when no watchdog is set."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or not usec.isdigit() or int(usec) == 0:
        return None
    if pid and pid.isdigit() and int(pid) != os.getpid():
        return None
    return int(usec) / 2e6


def child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """A copy of the environment for a child process (ExaBGP) without systemd's handles."""
    src = os.environ if env is None else env
    return {
        k: v
        for k, v in src.items()
        if k not in CHILD_ENV_STRIP and not k.startswith(CHILD_ENV_STRIP_PREFIXES)
    }
