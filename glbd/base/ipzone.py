"""IPv6 zones in address text (pure): ``fe80::1%eth0`` -> ``fe80::1``.

glbd's one helper for it (``bfd`` and ``heartbeat`` keep their own: they import only the
stdlib). Sockets report link-local peers with the zone; glbd's tables key on the bare address.
"""

from __future__ import annotations

__all__ = ["strip_zone"]


def strip_zone(addr: str) -> str:
    """``addr`` without its ``%zone`` suffix (unchanged when it has none)."""
    return addr.partition("%")[0]
