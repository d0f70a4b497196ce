"""Unnumbered neighbors: the part that learns their peers and makes them neighbors.

The config's unnumbered neighbors (``[[neighbors]]`` without ``address``) name only a port. This
part runs router advertisements on those ports (:class:`glbd.unnumbered.ndpsock.NdpSpeaker`); when a
port's peer is learned, or moves to another address, it has the daemon apply the config in force
again with that neighbor's address filled in (``Config.with_learned``): the node then sets the
neighbor up, or moves its sessions, exactly as a reload that added it would. Until
then the neighbor waits, shown by ``glbctl neighbors`` as ``waiting_for_peer``. A peer that
stops advertising keeps its address (the session, if up, lives on its own timers).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

import structlog

from glbd.config import config as cfgmod
from glbd.control.metrics import Row, Sample
from glbd.unnumbered.ndpeers import NdpEvent, PeerChange
from glbd.unnumbered.ndpsock import STATE_FILE, NdpSpeaker

log = structlog.get_logger(__name__)


class Applier(Protocol):
    """What this part needs of the daemon."""

    cfg: cfgmod.Config
    resolve: Callable[[cfgmod.Config], cfgmod.Config]

    async def reapply(self) -> None: ...


class UnnumberedPart:
    name = "unnumbered"

    def __init__(self, host: Applier, *, netns: str | None = None) -> None:
        self.host = host
        self.netns = netns
        self.speaker: NdpSpeaker | None = None
        #: port -> the peer's link-local address, as last learned (kept when it expires)
        self.learned: dict[str, ipaddress.IPv6Address] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        host.resolve = self.resolve

    def resolve(self, cfg: cfgmod.Config) -> cfgmod.Config:
        ports = {u.interface for u in cfg.unnumbered}
        return cfg.with_learned({p: a for p, a in self.learned.items() if p in ports})

    async def start(self) -> None:
        await self._ports(self.host.cfg)

    async def _ports(self, cfg: cfgmod.Config) -> None:
        ports = sorted({u.interface for u in cfg.unnumbered})
        if not ports:
            if self.speaker is not None:
                await self.speaker.stop()
                self.speaker = None
            return
        if self.speaker is None:
            # learned peers survive a restart (not a reboot: the socket's directory is a tmpfs)
            state = Path(cfg.control.socket).parent / STATE_FILE
            self.speaker = NdpSpeaker(ports, self._on_event, netns=self.netns, state_path=state)
            await self.speaker.start()
            return
        have = set(self.speaker.snapshot()["ports"])
        for p in have - set(ports):
            self.speaker.remove(p)
            self.learned.pop(p, None)
        for p in ports:
            self.speaker.add(p)

    async def stop(self) -> None:
        for t in list(self._tasks):
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        if self.speaker is not None:
            await self.speaker.stop()
            self.speaker = None

    async def reconfigure(self, new: cfgmod.Config, changes: dict[str, Any]) -> None:
        await self._ports(new)

    def _on_event(self, ev: NdpEvent) -> None:
        if ev.change is PeerChange.EXPIRED:
            return  # the session (if any) ends on its own timers; a new advert moves it
        self.learned[ev.interface] = ev.address
        t = asyncio.get_running_loop().create_task(self._apply(ev))
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def _apply(self, ev: NdpEvent) -> None:
        try:
            await self.host.reapply()
        except Exception:
            log.exception("unnumbered_apply_failed", interface=ev.interface)

    def snapshot(self) -> dict[str, Any]:
        snap = self.speaker.snapshot() if self.speaker is not None else {}
        counters = {
            "received": snap.get("received", 0),
            **{f"sent_{k}": v for k, v in (snap.get("sent") or {}).items()},
            **{f"dropped_{k}": v for k, v in (snap.get("dropped") or {}).items()},
        }
        learned = {p: str(a) for p, a in self.learned.items()}
        return {**snap, "learned": learned, "counters": counters}

    def samples(self) -> Iterable[Row]:
        snap = self.snapshot()
        for reason, n in (snap.get("dropped") or {}).items():
            yield Sample(
                "glbd_ndp_dropped_total",
                float(n),
                {"reason": str(reason)},
                help="received router solicitations/advertisements not used, by reason",
                kind="counter",
            )
        for kind, n in (snap.get("sent") or {}).items():
            yield Sample(
                "glbd_ndp_sent_total",
                float(n),
                {"kind": str(kind)},
                help="router advertisements (ra) and solicitations (rs) sent, and failed sends",
                kind="counter",
            )
        yield Sample(
            "glbd_ndp_learned_peers",
            float(len(self.learned)),
            help="unnumbered ports whose peer's link-local address is known",
        )
