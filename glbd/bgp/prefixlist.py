"""Prefix lists (pure): the import and export filters of a BGP neighbor.

One entry per string, first match wins::

    [permit|deny] PREFIX [ge N] [le M]

``permit`` is the default action. Without ``ge``/``le`` an entry matches PREFIX exactly; with
them it matches every prefix inside PREFIX whose length is in ``[ge, le]`` (``ge`` defaults to
PREFIX's length, ``le`` to the family's maximum when only ``ge`` is given), as in FRR and IOS.
An entry applies to its own IP family only. A prefix of a family the list has entries for and
that no entry matches is denied (the implicit deny at the end); a family the list has no entry
for is not filtered, so an IPv4-only list leaves IPv6 alone.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Entry", "PrefixList", "parse"]

Prefix = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class Entry:
    permit: bool
    prefix: Prefix
    ge: int
    le: int

    def matches(self, p: Prefix) -> bool:
        return (
            p.version == self.prefix.version
            and self.ge <= p.prefixlen <= self.le
            and p.subnet_of(self.prefix)  # type: ignore[arg-type]
        )

    def __str__(self) -> str:
        out = f"{'permit' if self.permit else 'deny'} {self.prefix}"
        n, top = self.prefix.prefixlen, self.prefix.max_prefixlen
        if (self.ge, self.le) == (n, n):
            return out
        if self.ge != n:
            out += f" ge {self.ge}"
        if self.le != top or self.ge == n:
            out += f" le {self.le}"
        return out


def parse_entry(text: str) -> Entry:
    """One entry; ValueError with a readable message if it is not one."""
    words = text.split()
    permit = True
    if words and words[0] in ("permit", "deny"):
        permit = words.pop(0) == "permit"
    if not words:
        raise ValueError(f"{text!r}: no prefix (expected '[permit|deny] PREFIX [ge N] [le M]')")
    try:
        prefix = ipaddress.ip_network(words.pop(0))
    except ValueError as e:
        raise ValueError(f"{text!r}: {e}") from None
    top = prefix.max_prefixlen
    bounds: dict[str, int] = {}
    while words:
        key = words.pop(0)
        if key not in ("ge", "le") or key in bounds or not words:
            raise ValueError(f"{text!r}: expected 'ge N' and/or 'le M' after the prefix")
        value = words.pop(0)
        if not value.isdigit() or not prefix.prefixlen <= int(value) <= top:
            raise ValueError(
                f"{text!r}: {key} must be a length from {prefix.prefixlen} to {top}, got {value}"
            )
        bounds[key] = int(value)
    ge = bounds.get("ge", prefix.prefixlen)
    le = bounds.get("le", top if "ge" in bounds else prefix.prefixlen)
    if ge > le:
        raise ValueError(f"{text!r}: ge {ge} is greater than le {le}")
    return Entry(permit, prefix, ge, le)


@dataclass(frozen=True, slots=True)
class PrefixList:
    entries: tuple[Entry, ...]

    def permits(self, p: Prefix) -> bool:
        for e in self.entries:
            if e.matches(p):
                return e.permit
        return not any(e.prefix.version == p.version for e in self.entries)

    def __str__(self) -> str:
        return ", ".join(str(e) for e in self.entries)


def parse(lines: Iterable[str]) -> PrefixList:
    return PrefixList(tuple(parse_entry(x) for x in lines))
