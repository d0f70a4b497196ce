"""Each configured neighbor's local address, or why it has none yet.

A router boots with ports down or not yet created: such a neighbor waits (logged once, shown by
``glbctl neighbors``/``glbctl bfd`` with the reason as its state) while the others start, and is
looked up again on a timer with backoff; when its address appears the node sets it up. A port
deleted later (its address gone with it) sends its neighbor back to waiting: the node removes its
sessions, and sets them up again when the port is back. A port that is only down keeps them.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from glbd.config import config as cfgmod
from glbd.config import params
from glbd.config.config_peers import NeighborSection, UnnumberedSection

log = structlog.get_logger(__name__)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: retry delays (seconds): doubled after each look-up that resolved nothing, up to the maximum
RETRY_INITIAL_S = 0.5
RETRY_MAX_S = 5.0
#: how often the set-up neighbors' local addresses are checked (is the port still there?)
WATCH_S = 1.0

Callback = Callable[[list[IPAddress]], Awaitable[None]]


class LocalAddresses:
    """The resolved local address per neighbor (:attr:`local`) and the waiting ones
    (:attr:`waiting`). ``on_resolved`` is awaited with the neighbors that got an address;
    ``on_lost`` with those whose address went away (checked every ``watch_s``), which wait
    again. The two are never awaited at the same time."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        on_resolved: Callback,
        on_lost: Callback | None = None,
        *,
        watch_s: float = WATCH_S,
    ) -> None:
        self._loop = loop
        self._on_resolved = on_resolved
        self._on_lost = on_lost
        self._watch_s = watch_s
        self._watch_task: asyncio.Task[None] | None = None
        self._setting_up = asyncio.Lock()  # a neighbor set up and torn down in order
        self.local: dict[IPAddress, IPAddress] = {}
        self.waiting: dict[IPAddress, params.Unresolved] = {}
        self._sections: dict[IPAddress, NeighborSection] = {}
        self._unnumbered: list[UnnumberedSection] = []
        self._task: asyncio.Task[None] | None = None
        self.ready = False  # update() ran at least once

    def ensure(self, cfg: cfgmod.Config) -> None:
        """Resolve ``cfg``'s neighbors unless done already (the first part to start does)."""
        if not self.ready:
            self.update(cfg)

    def update(self, cfg: cfgmod.Config) -> None:
        """Resolve ``cfg``'s neighbors. One already resolved whose interface and configured
        address are unchanged keeps its address while it is still ours: a reload does not drop
        the sessions of a port that is only down, but one whose port was deleted waits again
        (a restarted ExaBGP could not bind the address that went with it)."""
        old, self._sections = self._sections, {n.address: n for n in cfg.neighbors}
        self._unnumbered = list(cfg.unnumbered)
        local: dict[IPAddress, IPAddress] = {}
        waiting: dict[IPAddress, params.Unresolved] = {}
        for n in cfg.neighbors:
            prev = old.get(n.address)
            had = self.local.get(n.address)
            if had and prev is not None and _same_port(prev, n) and params.still_ours(n, had):
                local[n.address] = had
                continue
            r = params.resolve(n)
            if isinstance(r, params.Unresolved):
                waiting[n.address] = r
                if n.address not in self.waiting:
                    _log_waiting(n, r)
            else:
                local[n.address] = r
        self.local, self.waiting, self.ready = local, waiting, True
        self._retry_waiting()
        if self._on_lost is not None and self._watch_task is None:
            self._watch_task = self._loop.create_task(self._watch())

    def _retry_waiting(self) -> None:
        if self.waiting and (self._task is None or self._task.done()):
            self._task = self._loop.create_task(self._retry())

    def check(self) -> list[IPAddress]:
        """Set-up neighbors whose local address is no longer ours (the port was deleted, or
        its address removed): they wait again, looked up on the retry timer. Returns them."""
        lost: list[IPAddress] = []
        for addr, had in list(self.local.items()):
            n = self._sections.get(addr)
            if addr in self.waiting or n is None or params.still_ours(n, had):
                continue  # being set up, or still there
            r = params.resolve(n)
            if not isinstance(r, params.Unresolved):  # the port has another address now
                r = params.Unresolved(params.Waiting.NO_LOCAL_ADDRESS, f"{had} is gone")
            del self.local[addr]
            self.waiting[addr] = r
            lost.append(addr)
            _log_waiting(n, r, note="its port went away; retried until it is back")
        if lost:
            self._retry_waiting()
        return lost

    async def _watch(self) -> None:
        assert self._on_lost is not None
        while True:
            await asyncio.sleep(self._watch_s)
            async with self._setting_up:
                lost = self.check()
                if not lost:
                    continue
                try:
                    await self._on_lost(lost)
                except Exception as e:
                    log.error(
                        "neighbor_teardown_failed", neighbors=[str(a) for a in lost], error=repr(e)
                    )

    async def _retry(self) -> None:
        delay = RETRY_INITIAL_S
        while self.waiting:
            await asyncio.sleep(delay)  # the backoff between look-ups
            found: list[IPAddress] = []
            for addr, was in list(self.waiting.items()):
                n = self._sections.get(addr)
                r = None if n is None else params.resolve(n)
                if r is None or isinstance(r, params.Unresolved):
                    if r is not None and r.reason != was.reason:
                        self.waiting[addr] = r  # shown, not logged again
                    continue
                self.local[addr] = r  # still shown as waiting until it is set up
                found.append(addr)
                log.info("neighbor_resolved", neighbor=str(addr), local_address=str(r))
            if not found:
                delay = min(delay * 2, RETRY_MAX_S)
                continue
            delay = RETRY_INITIAL_S
            async with self._setting_up:
                try:
                    await self._on_resolved(found)
                except Exception as e:  # the next look-up does not redo these: say so loudly
                    log.error(
                        "neighbor_setup_failed", neighbors=[str(a) for a in found], error=repr(e)
                    )
                finally:
                    for addr in found:
                        self.waiting.pop(addr, None)

    async def close(self) -> None:
        for task in (self._task, self._watch_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._watch_task = None

    # ---- rows for glbctl ------------------------------------------------------------------

    def bgp_rows(self) -> list[dict[str, Any]]:
        """``glbctl neighbors`` rows of the waiting neighbors (same keys as the RIB's); one
        being set up is the RIB's already. An unnumbered neighbor whose peer was not heard
        yet is shown by its port."""
        rows: list[dict[str, Any]] = []
        learned = {n.interface for n in self._sections.values() if n.address.is_link_local}
        for u in self._unnumbered:
            if u.interface not in learned:
                why = "no router advertisement heard on the port yet"
                rows.append(
                    _row(u, f"{u.interface} (unnumbered)", params.Waiting.WAITING_FOR_PEER, why)
                )
        for addr, w in self.waiting.items():
            if addr in self.local:
                continue
            rows.append(_row(self._sections[addr], str(addr), w.reason, w.detail))
        return rows

    def bfd_rows(self, cfg: cfgmod.Config) -> list[dict[str, Any]]:
        """``glbctl bfd`` rows of the waiting neighbors with BFD on (also while their session
        is being added to the engine: the caller drops those the engine shows)."""
        return [
            {
                "peer": str(addr),
                "interface": self._sections[addr].interface,
                "local": None,
                "state": w.reason.value,
                "socket_error": w.detail,
            }
            for addr, w in self.waiting.items()
            if addr in self._sections and cfg.neighbor_bfd(self._sections[addr]).enabled
        ]


def _row(
    n: NeighborSection | UnnumberedSection,
    peer: str,
    state: params.Waiting,
    detail: str,
) -> dict[str, Any]:
    return {
        "peer": peer,
        "remote_as": n.remote_as,
        "interface": n.interface,
        "local_address": None if n.local_address is None else str(n.local_address),
        "tcp_md5": n.password is not None,
        "bgp_id": None,
        "state": state.value,
        "bfd_down": False,
        "held_for_s": None,
        "uptime_s": None,
        "prefixes_in": 0,
        "prefixes_out": 0,
        "last_down_reason": detail,
        "graceful_restart": None,
        "gr_helping": False,
        "stale_for_s": None,
        "update_delay": None,  # no session: nothing the RIB's deferral waits for
        "policy_missing": None,  # RFC 8212: the RIB says once it has the neighbor
        "counters": {},
    }


def _same_port(a: NeighborSection, b: NeighborSection) -> bool:
    return (a.interface, a.local_address) == (b.interface, b.local_address)


def _log_waiting(
    n: NeighborSection,
    r: params.Unresolved,
    note: str = "started without it; retried until its port is up",
) -> None:
    log.warning(
        "neighbor_waiting",
        neighbor=str(n.address),
        interface=n.interface,
        reason=r.reason.value,
        detail=r.detail,
        note=note,
    )
