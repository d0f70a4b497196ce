"""Linux capabilities of this process, read from ``/proc/self/status`` (``CapEff``).

glbd needs a handful of capabilities, not root: systemd hands them to the ``glbd`` user with
``AmbientCapabilities=`` so ExaBGP and the BFD engine (children) inherit them too.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["CAP_BITS", "effective", "has", "missing"]

#: the capabilities glbd may ask for, by their bit in the kernel's capability sets
CAP_BITS = {
    "CAP_NET_BIND_SERVICE": 10,
    "CAP_NET_ADMIN": 12,
    "CAP_NET_RAW": 13,
    "CAP_SYS_NICE": 23,
    "CAP_BPF": 39,
}


def effective(status_path: str = "/proc/self/status") -> int:
    """The effective capability set as a bit mask (0 when the kernel does not say)."""
    with open(status_path) as f:
        for line in f:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return 0


def has(name: str) -> bool:
    return bool(effective() >> CAP_BITS[name] & 1)


def missing(required: Iterable[str], mask: int | None = None) -> list[str]:
    """The names in ``required`` that are not in ``mask`` (default: our effective set)."""
    eff = effective() if mask is None else mask
    return [n for n in required if not eff >> CAP_BITS[n] & 1]
