"""IP prefixes that remember their hash (pure).

``ipaddress`` networks recompute ``hash(int(address) ^ int(netmask))`` on every dict or set
lookup; the FIB path looks each prefix up several times per route, and at 100k routes that
was a fifth of an install. :class:`Net4` and :class:`Net6` are the same networks (equal to,
and hashing like, the plain ``ipaddress`` ones, so mixed keys still match) with the hash
computed once. :func:`network` makes them; glbd's tables use it where prefixes enter (BGP
updates, the kernel's route dumps, the path table), so the same objects flow through.
:func:`network_of` parses a prefix text once, :func:`network_of_nlri` a prefix's BGP
encoding once: every peer of a fabric announces the same prefixes and the FIB syncs them
again and again (parsing is ~8 us, a lookup ~0.1 us).
"""

from __future__ import annotations

import ipaddress
from typing import Any

__all__ = ["CACHE_SIZE", "Net4", "Net6", "network", "network_of", "network_of_nlri"]


class _CachedHash:
    """The hash of the ``ipaddress`` network this is mixed into, computed once."""

    __slots__ = ("_hash",)
    _hash: int

    def __hash__(self) -> int:
        try:
            return self._hash
        except AttributeError:
            h = self._hash = super().__hash__()
            return h


class Net4(_CachedHash, ipaddress.IPv4Network):
    __slots__ = ()


class Net6(_CachedHash, ipaddress.IPv6Network):
    __slots__ = ()


def network(value: Any, strict: bool = True) -> Net4 | Net6:
    """``ipaddress.ip_network(value, strict)``, as a :class:`Net4` or :class:`Net6`."""
    try:
        return Net4(value, strict)
    except (ipaddress.AddressValueError, ipaddress.NetmaskValueError):
        pass
    try:
        return Net6(value, strict)
    except (ipaddress.AddressValueError, ipaddress.NetmaskValueError):
        pass
    raise ValueError(f"{value!r} does not appear to be an IPv4 or IPv6 network")


#: networks by their text (:func:`network_of`); a full cache starts over, a bound for a peer
#: that sends many distinct prefixes
_BY_TEXT: dict[str, Net4 | Net6] = {}
CACHE_SIZE = 1 << 18


def network_of(text: str) -> Net4 | Net6:
    """``network(text)`` (strict), parsed once per text: the same object for the same text
    (ValueError as :func:`network`)."""
    have = _BY_TEXT.get(text)
    if have is not None:
        return have
    net = network(text, strict=True)
    if len(_BY_TEXT) >= CACHE_SIZE:
        _BY_TEXT.clear()
    _BY_TEXT[text] = net
    return net


#: networks by their BGP NLRI encoding (:func:`network_of_nlri`), one table per IP version
_BY_NLRI: dict[int, dict[bytes, Net4 | Net6]] = {4: {}, 6: {}}


def network_of_nlri(version: int, raw: bytes) -> Net4 | Net6:
    """The network of one NLRI encoding (``raw[0]`` the prefix length, then its address
    octets; RFC 4271 §4.3), parsed once per encoding; bits past the length are ignored."""
    table = _BY_NLRI[version]
    have = table.get(raw)
    if have is not None:
        return have
    plen = raw[0]
    if version == 4:
        net: Net4 | Net6 = Net4((raw[1:].ljust(4, b"\0"), plen), strict=False)
    else:
        net = Net6((raw[1:].ljust(16, b"\0"), plen), strict=False)
    if len(table) >= CACHE_SIZE:
        table.clear()
    table[raw] = net
    return net
