"""The colour part of a leaf (app): the RIB's coloured prefixes, the path table's weights and
BFD go into :class:`~glbd.colours.colourpaths.ColourPaths`; what it pins goes to the FIB
service, whose next step programs one group per colour path and its standby routes."""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import structlog

from bfd.engine import BfdEvent
from bfd.packet import State
from glbd.base.prefix import network_of
from glbd.bgp.ribtypes import NextHopsChanged
from glbd.colours.colourpaths import ColourPaths, Hop, HopWeight, hop_label
from glbd.fib.fibmodel import IPNetwork, Member
from glbd.quality.pathchanges import Changes
from glbd.quality.pathtable import PathTable

log = structlog.get_logger(__name__)

__all__ = ["ColourService"]


class PinSink(Protocol):
    def pin(
        self,
        groups: Mapping[str, Mapping[Member, int]],
        routes: Mapping[IPNetwork, str],
        standby: Mapping[IPNetwork, str],
    ) -> None: ...


class ColourService:
    """Routes the leaf's inputs into the colour paths and their pins into the FIB; re-arms the
    hold-down timer."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        hold_down_s: float,
        table: Callable[[], PathTable | None],
        fib: PinSink,
    ) -> None:
        self.loop = loop
        self.paths = ColourPaths(hold_down_s)
        self._table = table
        self._fib = fib
        self._members: dict[str, Member] = {}  # hop label -> its FIB member
        self._timer: asyncio.TimerHandle | None = None

    # -- inputs ----------------------------------------------------------------------------

    def next_hops_changed(self, ev: NextHopsChanged) -> None:
        """After the path table took the RIB's event."""
        table = self._table()
        colour = ev.colour
        if table is None or (colour is None and not self.paths):
            return  # the common case on a fabric without colours: no string built per event
        if colour is None and self.paths.path_of(str(ev.prefix)) is None:
            return
        hops = []
        for nh in ev.next_hops:
            label = hop_label(str(nh.next_hop), nh.interface)
            if nh.interface:
                self._members.setdefault(label, Member(nh.next_hop, nh.interface))
            nnh = None if nh.nnh is None else tuple(int(i) for i in nh.nnh)
            hops.append(Hop(label, nh.colour, nnh))
        prefix = str(ev.prefix)
        profile = table.profile_of(prefix)
        weights = _weights(table, profile) if profile is not None else {}
        now = self.loop.time()
        self._after(self.paths.on_prefix(prefix, colour, hops, profile, weights, now, ev.origin_as))

    def table_changed(self, changes: Changes) -> None:
        """New weights of profiles (a coloured path follows its profile's)."""
        table = self._table()
        if table is None or not changes.updated or not self.paths:
            return
        now = self.loop.time()
        moved = False
        for profile in sorted(changes.updated):
            moved |= self.paths.on_weights(profile, _weights(table, profile), now)
        self._after(moved)

    def bfd_state(self, ev: BfdEvent) -> None:
        """A BFD failure takes the next hop out of its colour's paths at once (the kernel's
        armed failover has removed it from the groups already); Up starts its hold-down."""
        if ev.new is not State.UP and not ev.failure:
            return  # a peer's AdminDown is not a failure
        label = hop_label(str(ipaddress.ip_address(ev.peer)), ev.interface)
        self._after(self.paths.on_bfd(label, ev.new is not State.UP, self.loop.time()))

    def set_hold_down(self, hold_down_s: float) -> None:
        """A reload's ``colours.hold_down_s``, for the waits that start from now on (a session
        recoloured by the reload comes back from the RIB with its new colour)."""
        self.paths.fwd.set_hold_down(hold_down_s)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- views -------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """``glbctl colours``; times as seconds from now (the loop's clock means nothing
        outside the daemon): ``state_for_s``, ``hold_left_s`` (None: no wait), and the last
        switch's ``ago_s``."""
        now = self.loop.time()
        rows = []
        for r in self.paths.rows():
            d = r.to_dict()
            d["state_for_s"] = round(now - d.pop("state_since"), 3)
            until = d.pop("hold_until")
            d["hold_left_s"] = None if until is None else round(max(0.0, until - now), 3)
            d["prefixes"] = self.paths.prefixes(r.colour, r.dest)
            last = self.paths.last_switch.get((r.colour, r.dest))
            if last is not None:
                last = {k: v for k, v in last.items() if k != "at"}
                last["ago_s"] = round(now - self.paths.last_switch[(r.colour, r.dest)]["at"], 3)
            d["last_switch"] = last
            rows.append(d)
        return {
            "hold_down_s": self.paths.fwd.hold_down_s,
            "paths": rows,
            "counters": dict(self.paths.counters),
        }

    # -- internals -----------------------------------------------------------------------------

    def _after(self, changed: bool) -> None:
        """After an input: the pins to the FIB if they changed, and the hold-down timer
        re-armed (an input may start a wait without changing what is programmed)."""
        if changed:
            self._push()
        self._arm()

    def _push(self) -> None:
        pins = self.paths.pins()
        groups = {
            key: {self._members[h]: w for h, w in weights if h in self._members}
            for key, weights in pins.groups.items()
        }
        routes: dict[IPNetwork, str] = {network_of(p): k for p, k in pins.routes.items()}
        standby: dict[IPNetwork, str] = {network_of(p): k for p, k in pins.standby.items()}
        self._fib.pin(groups, routes, standby)

    def _arm(self) -> None:
        due = self.paths.next_deadline()
        if self._timer is not None:
            if due == self._timer.when():
                return
            self._timer.cancel()
            self._timer = None
        if due is not None:
            self._timer = self.loop.call_at(due, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._after(self.paths.on_timer(self.loop.time()))


def _weights(table: PathTable, profile: str) -> dict[str, HopWeight]:
    out = {}
    for nh, w in table.weights(profile).items():
        i = w.inputs
        out[hop_label(nh.address, nh.ifname)] = HopWeight(
            w.value, local_down=i.local_down, remote_down=i.remote_down
        )
    return out
