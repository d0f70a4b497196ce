"""The node's four parts as the daemon sees them (:class:`glbd.app.component.Component`), in
start order: fib, quality, bfd, bgp. Each starts, stops and reloads its part of the
:class:`~glbd.app.node.Node` and shows its snapshot and Prometheus samples."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any, cast

import structlog

from glbd.app import config as cfgmod
from glbd.app import views
from glbd.app.component import Component, Host
from glbd.app.node import Node
from glbd.io.metrics import Sample

log = structlog.get_logger(__name__)


class _Part:
    name = ""

    def __init__(self, node: Node) -> None:
        self.node = node

    def snapshot(self) -> dict[str, Any]:
        raise NotImplementedError

    def section(self, key: str) -> Any:
        """One key of the snapshot (parts override it where building everything is costly)."""
        return self.snapshot().get(key)

    def _samples(self, snap: dict[str, Any]) -> Iterable[Sample]:
        raise NotImplementedError

    def samples(self) -> Iterable[Sample]:
        """Prometheus samples, derived from the same snapshot glbctl shows."""
        try:
            return list(self._samples(self.snapshot()))
        except Exception as e:  # a scrape must never break on one part's odd state
            log.warning("metrics_samples_failed", component=self.name, error=repr(e))
            return []


class FibPart(_Part):
    name = "fib"

    async def start(self) -> None:
        await self.node.start_fib()

    async def stop(self) -> None:
        await self.node.stop_fib()

    async def reconfigure(self, new: cfgmod.Config, changes: dict[str, Any]) -> None:
        await self.node.reconfigure_fib(new, changes)

    def snapshot(self) -> dict[str, Any]:
        return self.node.fib_snapshot()

    def section(self, key: str) -> Any:
        if key == "counters":
            fib = self.node.fib
            return fib.snapshot().get("counters", {}) if fib else {}
        return super().section(key)

    def _samples(self, snap: dict[str, Any]) -> Iterable[Sample]:
        return views.fib_samples(cast(views.FibView, snap))


class QualityPart(_Part):
    name = "quality"

    async def start(self) -> None:
        await self.node.start_quality()

    async def stop(self) -> None:
        await self.node.stop_quality()

    async def reconfigure(self, new: cfgmod.Config, changes: dict[str, Any]) -> None:
        await self.node.reconfigure_quality(new, changes)

    def snapshot(self) -> dict[str, Any]:
        return self.node.quality_snapshot()

    def section(self, key: str) -> Any:
        if key == "counters":
            ep = self.node.endpoint
            return views.quality_counters(self.node.counters, ep.to_dict() if ep else None)
        return super().section(key)

    def _samples(self, snap: dict[str, Any]) -> Iterable[Sample]:
        return views.quality_samples(cast(views.QualityView, snap))


class BfdPart(_Part):
    name = "bfd"

    async def start(self) -> None:
        await self.node.start_bfd()

    async def stop(self) -> None:
        await self.node.stop_bfd()

    async def reconfigure(self, new: cfgmod.Config, changes: dict[str, Any]) -> None:
        await self.node.reconfigure_bfd(new, changes)

    def snapshot(self) -> dict[str, Any]:
        bfd = self.node.bfd
        return bfd.snapshot() if bfd else {"sessions": []}

    def _samples(self, snap: dict[str, Any]) -> Iterable[Sample]:
        return views.bfd_samples(cast(views.BfdView, snap))


class BgpPart(_Part):
    name = "bgp"

    async def start(self) -> None:
        await self.node.start_bgp()

    async def stop(self) -> None:
        await self.node.stop_bgp()

    async def reconfigure(self, new: cfgmod.Config, changes: dict[str, Any]) -> None:
        await self.node.reconfigure_bgp(new, changes)

    def snapshot(self) -> dict[str, Any]:
        n = self.node
        return {**n.bgp.snapshot(), "routes": n.routes_snapshot()} if n.bgp else {}

    def section(self, key: str) -> Any:
        """``neighbors``, ``routes`` and ``counters`` are built alone (the routes of a big
        RIB are costly)."""
        bgp = self.node.bgp
        if bgp is not None:
            if key == "neighbors":
                return bgp.neighbors_snapshot()
            if key == "routes":
                return self.node.routes_snapshot()
            if key == "counters":
                return {
                    **dict(bgp.rib.counters),
                    "rib_pending": bgp.rib.pending,
                    "api_lines": bgp.parser.decoded,
                    "api_dropped": dict(bgp.parser.dropped),
                }
        return super().section(key)

    def _samples(self, snap: dict[str, Any]) -> Iterable[Sample]:
        return views.bgp_samples(cast(views.BgpView, snap))


PARTS: tuple[Callable[[Node], Component], ...] = (FibPart, QualityPart, BfdPart, BgpPart)


def build_components(d: Host) -> list[Component]:
    """The parts of one node, in start order (stop runs in reverse)."""
    if os.environ.get("GLBD_TEST_NO_COMPONENTS") == "1":  # lifecycle tests of the bare daemon
        return []
    node = Node(d)
    d.node = node  # type: ignore[attr-defined]  # tests and the lab reach the node through it
    return [part(node) for part in PARTS]
