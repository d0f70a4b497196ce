"""The link-quality monitor's asyncio runner: one timer, re-armed every sample interval.

:class:`MonitorRunner` reads the counters with :class:`glbd.quality.linkstats.StatsReader`, feeds
them to the pure core :class:`glbd.quality.linkq.LinkMonitor` and hands the core's changes on.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping

import structlog

from glbd.base.reasons import LinkChange
from glbd.quality.linkq import Columns, LinkMonitor, QualityChanged
from glbd.quality.linkstats import StatsReader, Steps

__all__ = ["MonitorRunner"]

log = structlog.get_logger(__name__)


class MonitorRunner:
    """Samples every :meth:`LinkMonitor.next_interval` (``params.sample_interval_s``, or the
    idle interval while every link is quiet; on the loop's clock, without drift), at once when
    the reader sees a link go up or down while idle, plus
    one sample in between when the core asks for it (:meth:`LinkMonitor.recheck_due`), and
    calls ``on_update(changes, monitor)`` after every sample; ``changes`` may be empty (the
    raw figures moved). A failed dump is logged and counted; the next tick tries again.

    Each tick is a plain ``loop.call_at`` callback that runs the reader's
    :meth:`StatsReader.read_steps` to its end (it does not wait: the kernel answers a dump
    inside send/recv), then the core. Only if the socket had nothing queued yet does the rest
    of that sample continue in a task that awaits it (a task per sample would cost an extra
    future, task step and loop turn every 10 ms: docs/heartbeat.md §6)."""

    def __init__(
        self,
        monitor: LinkMonitor,
        reader: StatsReader,
        on_update: Callable[[list[QualityChanged], LinkMonitor], None],
    ) -> None:
        self.monitor = monitor
        self._reader = reader
        self._on_update = on_update
        self._handle: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self._next = 0.0
        self._running = False
        self.errors = 0
        self.samples = 0
        self.overruns = 0
        self.waits = 0  # samples that had to wait for the socket (continued in a task)
        self.foreign_skipped = 0  # foreign-class readings dropped (socket not ready at once)
        self.rechecks = 0  # samples taken between two regular ones (the core's recheck_due)
        self._offgrid = False  # the pending tick is such a sample
        self.wakeups = 0  # idle samples brought forward by a link event
        #: the ingress counter's foreign bytes by ifindex (``params.foreign_ingress``), read
        #: at once; None, or it returning None: nothing read yet (the app sets it)
        self.foreign_source: Callable[[], Mapping[int, int] | None] | None = None

    def start(self) -> None:
        if not self._running:
            self._running = True
            loop = asyncio.get_running_loop()
            self._next = loop.time()
            self._handle = loop.call_at(self._next, self._tick)
            self._reader.watch_links(self._link_changed)

    def _link_changed(self) -> None:
        """A link went up or down: an idle wait ends now (a regular one is short anyway)."""
        h = self._handle
        if not self._running or h is None or self._offgrid:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        if h.when() - now > self.monitor.params.sample_interval_s:
            h.cancel()
            self.wakeups += 1
            self._next = now
            self._handle = loop.call_at(now, self._tick)

    async def stop(self) -> None:
        self._running = False
        self._reader.watch_links(None)
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _tick(self) -> None:
        self._handle = None
        loop = asyncio.get_running_loop()
        reader = self._reader
        try:
            steps = reader.read_steps(self.monitor.interface_set, loop.time())
            try:
                next(steps)
            except StopIteration as done:
                self._sampled(done.value, loop)
            else:  # the socket had nothing queued yet: finish this sample in a task
                self.waits += 1
                self._task = loop.create_task(self._sample_async(steps), name="linkmon")
                return
        except Exception as e:
            self.errors += 1
            log.warning("link stats dump failed", error=str(e))
        self._arm(loop)

    async def _sample_async(self, steps: Steps[Columns]) -> None:
        loop = asyncio.get_running_loop()
        try:
            cols = await self._reader.finish(steps)
            self._sampled(cols, loop)
        except asyncio.CancelledError:
            steps.close()
            raise
        except Exception as e:
            self.errors += 1
            log.warning("link stats dump failed", error=str(e))
        self._task = None
        self._arm(loop)

    def _sampled(self, cols: Columns, loop: asyncio.AbstractEventLoop) -> None:
        mon = self.monitor
        changes = mon.on_columns(cols, loop.time())
        self.samples += 1
        p = mon.params
        if p.counts_foreign and self.samples % p.foreign_every == 0:
            # after the sample's own changes: a link whose band and residual both moved gets
            # both, the later one carrying its current quality (residual included)
            changes = changes + self._read_foreign(p.foreign_classes, loop)
        self._on_update(changes, mon)

    def _read_foreign(
        self, parents: frozenset[int], loop: asyncio.AbstractEventLoop
    ) -> list[QualityChanged]:
        """The foreign load's counters (the ingress counter's map, or one more qdisc dump for
        the classes), fed to the core before this sample's update is handed on, so the
        heartbeat built from it carries the residual. Its changes (reason "residual") join
        the sample's."""
        if self.monitor.params.foreign_ingress:
            src = self.foreign_source
            try:
                counts = None if src is None else src()
            except Exception as e:
                self.errors += 1
                log.warning("foreign counter read failed", error=str(e))
                return []
            return [] if counts is None else self.monitor.on_foreign(counts, loop.time())
        try:
            steps = self._reader.foreign_steps(parents)
            try:
                next(steps)
            except StopIteration as done:
                return self.monitor.on_foreign(done.value, loop.time())
            steps.close()  # not ready at once (rare): skip this reading, not the sample
            self._reader.drain()
            self.foreign_skipped += 1
        except Exception as e:
            self.errors += 1
            log.warning("foreign class dump failed", error=str(e))
        return []

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self._running:
            return
        step = self.monitor.next_interval()
        now = loop.time()
        offgrid, self._offgrid = self._offgrid, False
        if not offgrid:
            self._next += step
            if self._next < now:  # fell behind (loop busy): skip ticks instead of bursting
                self.overruns += 1
                self._next = now + step
        at = self._next
        due = None if offgrid else self.monitor.recheck_due()
        if due is not None and due < at - step / 4:
            # the core saw an onset in part: one sample in between (never two in a row)
            at = max(due, now)
            self._offgrid = True
            self.rechecks += 1
        self._handle = loop.call_at(at, self._tick)


def log_link_change(ch: QualityChanged) -> None:
    """The log record of a link's new band, down flag or capacity."""
    q = ch.quality
    if ch.reason in (LinkChange.RESIDUAL, LinkChange.CAPACITY):  # same band and flag
        log.info(
            "link_capacity",
            ifname=q.ifname,
            residual_mbps=q.residual_mbps,
            capacity_mbps=q.capacity_mbps,
            band=q.band,
            reason=ch.reason,
        )
        return
    log.info(
        "link_band",
        ifname=q.ifname,
        band=q.band,
        old_band=ch.old_band,
        down=q.down,
        load_pct=round(q.load_pct, 1),
        queue_bytes=int(q.queue_bytes),
        reason=ch.reason,
    )
