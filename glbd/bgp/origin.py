"""What this router originates: its static prefixes always, the others only while they can be
delivered (pure: no sockets, no clock; ``now`` is passed in and only dates the rows).

Three sources, as FRR and BIRD have them:

* **static** (``originate``): always advertised (FRR ``network P`` without import check, a
  BIRD blackhole static route);
* **network** (``[[bgp.network]]``): a prefix with an interface, advertised while that interface
  is oper-up (BIRD ``route P via "host0"``, FRR ``network P`` whose import check follows a
  route out of ``host0``);
* **connected** (``[bgp.redistribute_connected]``): the subnet of each address on an interface
  whose name matches ``interfaces`` (a name or a glob such as ``host*``), advertised while that
  interface is oper-up and holds the address, and only if ``prefix_list`` permits it (FRR
  ``redistribute connected route-map``, BIRD ``protocol direct``). Link-local, loopback and
  multicast subnets are never taken.

The caller hands over the interface table (name -> oper-up) and each interface's connected
subnets whenever netlink reports a change (:meth:`Origins.observe`), and new parameters on a
reload (:meth:`Origins.set_params`). Each returns an :class:`OriginChange`: the prefixes that
start to be advertised and those withdrawn, each with its :class:`OriginReason`.
:meth:`Origins.prefixes` is the whole set to advertise; the RIB's originated set is exactly it,
so nothing glbd does not originate is ever withdrawn through here.
"""

from __future__ import annotations

import enum
import fnmatch
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from glbd.base.reasons import OriginReason
from glbd.bgp.prefixlist import PrefixList

__all__ = ["OriginChange", "OriginParams", "OriginRow", "Origins", "Source", "usable"]

Prefix = ipaddress.IPv4Network | ipaddress.IPv6Network


class Source(enum.StrEnum):
    """Where a prefix to originate is configured, in order of precedence."""

    STATIC = "static"
    NETWORK = "network"
    CONNECTED = "connected"


_RANK = {s: i for i, s in enumerate(Source)}


@dataclass(frozen=True, slots=True)
class OriginParams:
    #: ``originate``: always advertised
    static: tuple[Prefix, ...] = ()
    #: ``[[bgp.network]]``: (prefix, interface), advertised while the interface is up
    networks: tuple[tuple[Prefix, str], ...] = ()
    #: ``bgp.redistribute_connected.interfaces``: names or globs; empty: no connected prefix
    connected: tuple[str, ...] = ()
    #: ``bgp.redistribute_connected.prefix_list``; None: every connected prefix
    connected_filter: PrefixList | None = None

    @property
    def conditional(self) -> bool:
        """Anything here depends on the interfaces (else nothing needs watching)."""
        return bool(self.networks or self.connected)

    def redistributes(self, ifname: str) -> bool:
        """``ifname``'s connected prefixes are candidates."""
        return any(fnmatch.fnmatchcase(ifname, pat) for pat in self.connected)


@dataclass(frozen=True, slots=True)
class OriginRow:
    """One prefix this router may originate, and whether it does now."""

    prefix: Prefix
    source: Source
    #: the interface it depends on (None: static)
    interface: str | None
    reason: OriginReason
    #: when its reason last changed (the caller's clock)
    since: float

    @property
    def advertised(self) -> bool:
        return self.reason.advertised

    def to_dict(self, now: float) -> dict[str, Any]:
        """``glbctl routes``' ``origin`` of the prefix."""
        return {
            "source": self.source.value,
            "interface": self.interface,
            "state": "announced" if self.advertised else "withdrawn",
            "reason": self.reason.value,
            "state_for_s": round(max(0.0, now - self.since), 3),
        }


@dataclass(frozen=True, slots=True)
class OriginChange:
    """What an input changed: prefixes to announce and to withdraw, each with its reason."""

    announce: Mapping[Prefix, OriginReason] = field(default_factory=dict)
    withdraw: Mapping[Prefix, OriginReason] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.announce or self.withdraw)


def usable(p: Prefix) -> bool:
    """A connected subnet worth advertising: not link-local, loopback, multicast or
    unspecified."""
    return not (p.is_link_local or p.is_loopback or p.is_multicast or p.is_unspecified)


class Origins:
    """The prefixes to originate, from the parameters and the interfaces as last observed."""

    def __init__(self, params: OriginParams, now: float = 0.0) -> None:
        self.params = params
        self._links: dict[str, bool] = {}
        self._connected: dict[str, frozenset[Prefix]] = {}
        self._rows: dict[Prefix, OriginRow] = {}
        self._update(now)

    # ---- answers ---------------------------------------------------------------------------

    def prefixes(self) -> frozenset[Prefix]:
        """Every prefix to advertise now."""
        return frozenset(p for p, r in self._rows.items() if r.advertised)

    def rows(self) -> list[OriginRow]:
        """Every configured or connected candidate, advertised or not, by family and prefix."""
        return [self._rows[p] for p in sorted(self._rows, key=lambda p: (p.version, p))]

    def row(self, prefix: Prefix) -> OriginRow | None:
        return self._rows.get(prefix)

    # ---- inputs ----------------------------------------------------------------------------

    def observe(
        self,
        links: Mapping[str, bool],
        connected: Mapping[str, Iterable[Prefix]],
        now: float,
    ) -> OriginChange:
        """The interfaces as they are now: name -> oper-up, and name -> the subnets of its
        addresses (an interface missing from ``links`` does not exist)."""
        self._links = dict(links)
        self._connected = {
            name: frozenset(nets) for name, nets in connected.items() if name in self._links
        }
        return self._update(now)

    def set_params(self, params: OriginParams, now: float) -> OriginChange:
        """A reload's parameters; the interfaces stay as last observed."""
        self.params = params
        return self._update(now)

    # ---- the decision ----------------------------------------------------------------------

    def _candidates(self) -> dict[Prefix, list[tuple[Source, str | None, OriginReason]]]:
        out: dict[Prefix, list[tuple[Source, str | None, OriginReason]]] = {}
        p = self.params
        for net in p.static:
            out.setdefault(net, []).append((Source.STATIC, None, OriginReason.STATIC))
        for net, ifname in p.networks:
            up = self._links.get(ifname)
            why = (
                OriginReason.NO_INTERFACE
                if up is None
                else OriginReason.INTERFACE_UP
                if up
                else OriginReason.INTERFACE_DOWN
            )
            out.setdefault(net, []).append((Source.NETWORK, ifname, why))
        if p.connected:
            for ifname in sorted(self._connected):
                if not p.redistributes(ifname):
                    continue
                up = self._links[ifname]
                for net in sorted(self._connected[ifname], key=lambda n: (n.version, n)):
                    if not usable(net):
                        continue
                    if p.connected_filter is not None and not p.connected_filter.permits(net):
                        why = OriginReason.FILTERED
                    else:
                        why = OriginReason.CONNECTED if up else OriginReason.INTERFACE_DOWN
                    out.setdefault(net, []).append((Source.CONNECTED, ifname, why))
        return out

    def _vanished(self, old: OriginRow) -> OriginReason:
        """Why a prefix that is no candidate any more went."""
        if old.source is Source.CONNECTED and old.interface is not None:
            if old.interface not in self._links:
                return OriginReason.NO_INTERFACE
            if self.params.redistributes(old.interface):
                return OriginReason.NO_ADDRESS
        return OriginReason.UNCONFIGURED

    def _update(self, now: float) -> OriginChange:
        old = self._rows
        rows: dict[Prefix, OriginRow] = {}
        for net, cands in self._candidates().items():
            # an advertising source first, then by precedence (static, network, connected)
            source, ifname, why = min(cands, key=lambda c: (not c[2].advertised, _RANK[c[0]]))
            prev = old.get(net)
            same = prev is not None and (prev.source, prev.interface, prev.reason) == (
                source,
                ifname,
                why,
            )
            since = prev.since if same and prev is not None else now
            rows[net] = OriginRow(net, source, ifname, why, since)
        self._rows = rows
        was = {p for p, r in old.items() if r.advertised}
        now_on = {p for p, r in rows.items() if r.advertised}
        announce = {p: rows[p].reason for p in sorted(now_on - was, key=_order)}
        withdraw = {
            p: rows[p].reason if p in rows else self._vanished(old[p])
            for p in sorted(was - now_on, key=_order)
        }
        return OriginChange(announce, withdraw)


def _order(p: Prefix) -> tuple[int, Prefix]:
    return (p.version, p)
