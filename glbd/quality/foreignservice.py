"""The foreign load's ingress counter in the daemon (``link_quality.foreign_from = "ingress"``).

Which ports carry load a balancer steers follows from the role: a helper's fabric ports (its
leaves balance what they send it), a load balancer's other ports (its hosts' traffic is what it
balances); a router's own traffic never is. The counter is started with the quality part,
checked every reconcile interval (an interface made again, a filter someone removed) and
stopped with it. Where it cannot run, glbd says so once, keeps trying, and the link monitor
takes its bands from all traffic meanwhile (:meth:`ForeignService.effective`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import structlog

from glbd.daemon.recheck import Recheck
from glbd.quality.foreigncount import (
    FOREIGN,
    STEERED,
    ForeignCounter,
    ForeignCountError,
    PortClasses,
)
from glbd.quality.linkq import LinkMonParams

__all__ = ["ForeignService", "port_classes"]

log = structlog.get_logger(__name__)


def port_classes(fabric: Sequence[str], helper: bool, load_balancer: bool) -> PortClasses:
    """The class of each ingress port: a helper's fabric ports are steered (and nothing
    else), a load balancer's fabric ports are not (everything else is); a router that is
    both steers what enters from either."""
    if helper and not load_balancer:
        return PortClasses(default=FOREIGN, ports=dict.fromkeys(fabric, STEERED))
    if load_balancer and not helper:
        return PortClasses(default=STEERED, ports=dict.fromkeys(fabric, FOREIGN))
    return PortClasses(default=STEERED, ports=dict.fromkeys(fabric, STEERED))


class ForeignService:
    """The counter of one node. ``on_state`` is called when counting starts or stops working
    (the node then gives the link monitor :meth:`effective` parameters)."""

    def __init__(
        self, netns: str | None, on_state: Callable[[], None], obj: Path | None = None
    ) -> None:
        self.netns = netns
        #: the compiled program (None: where glbd finds it, :func:`object_path`)
        self.obj = obj
        self._on_state = on_state
        self.counter: ForeignCounter | None = None
        self.wanted = False
        self.counting = False
        self.error: str | None = None
        self.read_errors = 0
        self._started = False
        self._target: tuple[list[str], PortClasses] = ([], PortClasses(default=FOREIGN, ports={}))
        self._every_s = 5.0
        self._task: asyncio.Task[None] | None = None

    async def start(
        self, wanted: bool, interfaces: Sequence[str], classes: PortClasses, every_s: float
    ) -> None:
        """Count (``wanted``) on ``interfaces`` with ``classes``, or remove what an earlier
        glbd left; safe to call again with new values (a reload)."""
        self._target, self._every_s = (list(interfaces), classes), every_s
        if not wanted:
            await self.stop()
            await self._remove_leftovers()
            return
        self.wanted = True
        if self.counter is None:
            self.counter = ForeignCounter(netns=self.netns, obj=self.obj)
        await self._apply()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="foreign")

    async def _apply(self) -> None:
        assert self.counter is not None
        interfaces, classes = self._target
        try:
            if not self._started:
                await self.counter.start(interfaces, classes)
                self._started = True
            else:
                await self.counter.apply(interfaces, classes)
            ok, err = True, None
        except (OSError, ForeignCountError) as e:
            ok, err = False, str(e)
        was = self.counting
        if err is not None and err != self.error:
            log.error(
                "foreign_counter_failed",
                error=err,
                effect="bands and heartbeat capacities come from all traffic until it runs",
            )
        elif ok and not was and self.error is not None:
            log.info("foreign_counter_running")
        self.counting, self.error = ok, err
        if ok != was:
            self._on_state()

    async def _run(self) -> None:
        """Every reconcile interval, the full check (processes: ``ip``, ``tc`` per interface)
        as :class:`Recheck` schedules it: when an interface moved (an ioctl per name), every
        12th interval (a filter someone removed) and, while the counter cannot run, at ever
        longer intervals: on a spine with 64 leaves a full check every 5 s would cost ~5 %
        of a core."""
        rc = Recheck()
        rc.done(self.counting)
        while True:
            await asyncio.sleep(self._every_s)  # the reconcile period
            if rc.tick(self._moved):
                await self._apply()
                rc.done(self.counting)

    def _moved(self) -> bool:
        return self.counter is None or self.counter.interfaces_moved()

    def read(self) -> Mapping[int, int] | None:
        """The foreign bytes by egress ifindex (the link monitor's reading), or None while
        nothing counts. A failed read is counted; the next check repairs what it can."""
        if not self.counting or self.counter is None:
            return None
        try:
            return self.counter.foreign_bytes()
        except (OSError, ForeignCountError) as e:
            self.read_errors += 1
            if self.read_errors == 1:
                log.warning("foreign_counter_read_failed", error=str(e))
            return None

    def effective(self, p: LinkMonParams) -> LinkMonParams:
        """``p`` as the link monitor can run it now: without the ingress counter while it
        does not count (bands from all traffic, the configured capacity)."""
        if p.foreign_ingress and not self.counting:
            return replace(p, foreign_ingress=False, band_from_foreign=False)
        return p

    async def _remove_leftovers(self) -> None:
        """A glbd that died left its filters: with the counter off, they go."""
        try:
            counter = ForeignCounter(netns=self.netns)
            if os.path.isdir(counter.dir):
                await counter.stop()
                log.info("foreign_counter_leftovers_removed", dir=str(counter.dir))
        except (OSError, ForeignCountError) as e:
            log.warning("foreign_counter_leftovers", error=str(e))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self.counter is not None:
            try:
                await self.counter.stop()
            except (OSError, ForeignCountError) as e:
                log.error("foreign_counter_stop_failed", error=str(e))
        was = self.counting
        self.counter, self._started, self.wanted = None, False, False
        self.counting, self.error = False, None
        if was:
            self._on_state()

    def snapshot(self) -> dict[str, Any] | None:
        """``glbctl status`` and the metrics: None where the counter is not wanted."""
        if not self.wanted:
            return None
        out: dict[str, Any] = {
            "source": "ingress",
            "counting": self.counting,
            "error": self.error,
            "read_errors": self.read_errors,
        }
        if self.counter is not None and self.counting:
            out.update(self.counter.snapshot())
        return out
