"""The FIB programmer's kernel settings: ``nexthop_compat_mode``.

``net.ipv4.nexthop_compat_mode`` (per network namespace, covers IPv4 and IPv6): with the
default ``1`` the kernel also reports nhid routes with their expanded RTA_MULTIPATH, and
**every group replace sends one RTM_NEWROUTE notification per route using the group** (a
weight change costs time linear in the group's routes; measurements in docs/fib.md). glbd
never needs the expanded form, so set it to ``0`` in glbd's namespace when weights change
often (:func:`set_compat_mode`, or ``FibProgrammer(compat_mode=0)``); tools that read routes
without understanding nhid (old iproute2, some exporters) then see only ``nhid N``.

The messages themselves are built in :mod:`glbd.fib.fibmsg` and mapped from planner
ops in :mod:`glbd.fib.fibwire`.
"""

from __future__ import annotations

import structlog

from glbd.daemon.netns import read_sysctl, write_sysctl

log = structlog.get_logger(__name__)

__all__ = ["COMPAT_MODE_SYSCTL", "get_compat_mode", "set_compat_mode"]

COMPAT_MODE_SYSCTL = "net.ipv4.nexthop_compat_mode"


def set_compat_mode(value: int, netns: str | None = None) -> bool:
    """Set ``net.ipv4.nexthop_compat_mode`` in ``netns`` (None: the caller's namespace) unless
    it already is ``value``. Under systemd ``/proc/sys`` is read-only (the unit's
    ``glbd sysctl`` sets it before start): then a wrong value is a warning, not a failure."""
    if get_compat_mode(netns) == int(value):
        return True
    try:
        write_sysctl(COMPAT_MODE_SYSCTL, int(value), netns)
    except OSError as e:
        log.warning(
            "sysctl_not_set",
            key=COMPAT_MODE_SYSCTL,
            want=int(value),
            value=get_compat_mode(netns),
            error=e.strerror,
            fix="run 'glbd sysctl -c CONFIG' as root before glbd starts",
        )
        return False
    return True


def get_compat_mode(netns: str | None = None) -> int | None:
    try:
        return int(read_sysctl(COMPAT_MODE_SYSCTL, netns))
    except (OSError, ValueError):
        return None
