"""The node's four parts as the daemon sees them (:class:`glbd.app.component.Component`), in
start order: fib, quality, bfd, bgp. Each starts, stops and reloads its part of the
:class:`~glbd.app.node.Node` and shows its snapshot and Prometheus samples."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

import structlog

from glbd.app import config as cfgmod
from glbd.app import views
from glbd.app.component import Component, Host
from glbd.app.node import Node
from glbd.io.metrics import Row

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

    def _samples(self, snap: dict[str, Any]) -> Iterable[Row]:
        raise NotImplementedError

    def sample_view(self) -> dict[str, Any]:
        """What the samples are derived from: the snapshot glbctl shows, or the part of it
        they need where the whole is costly."""
        return self.snapshot()

    def samples(self) -> Iterable[Row]:
        """Prometheus samples, derived from the same snapshot glbctl shows."""
        try:
            return list(self._samples(self.sample_view()))
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
            return fib.snapshot(routes=False).get("counters", {}) if fib else {}
        return super().section(key)

    def _samples(self, snap: dict[str, Any]) -> Iterable[Row]:
        yield from views.fib_samples(cast(views.FibView, snap))
        yield from self.node.latency.families()


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

    def _samples(self, snap: dict[str, Any]) -> Iterable[Row]:
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

    def section(self, key: str) -> Any:
        """``sessions`` also lists the neighbors waiting for their port (not in the samples)."""
        rows = super().section(key)
        if key == "sessions":
            rows = list(rows or [])
            have = {(r["interface"], r["peer"]) for r in rows}
            waiting = self.node.addrs.bfd_rows(self.node.cfg)
            rows += [w for w in waiting if (w["interface"], w["peer"]) not in have]
        return rows

    def _samples(self, snap: dict[str, Any]) -> Iterable[Row]:
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
            if key == "neighbors":  # and those waiting for their port (not in the samples)
                return bgp.neighbors_snapshot() + self.node.addrs.bgp_rows()
            if key == "routes":
                return self.routes()
            if key == "counters":
                return {
                    **dict(bgp.rib.counters),
                    "rib_pending": bgp.rib.pending,
                    "api_lines": bgp.parser.decoded,
                    "api_dropped": dict(bgp.parser.dropped),
                }
        return super().section(key)

    def routes(self, prefix: str | None = None) -> Iterator[dict[str, Any]]:
        """``glbctl routes [PREFIX]``: the selected RIB rows joined with the FIB, built one
        by one as the answer streams (the control server yields to the loop between parts),
        so a 64 x 10k RIB neither blocks the daemon nor sits whole in its memory."""
        n = self.node
        if n.bgp is None:
            return iter(())
        rows = n.bgp.rib.iter_routes(views.route_filter(prefix))
        look = n.fib.route_lookup().get if n.fib else _no_route
        return views.iter_routes(rows, look, n.table)

    def sample_view(self) -> dict[str, Any]:
        """Established or configured sessions and counters only: no per-route rows on a
        scrape."""
        bgp = self.node.bgp
        if bgp is None:
            return {}
        return {"neighbors": bgp.neighbors_snapshot(), "counters": self.section("counters")}

    def _samples(self, snap: dict[str, Any]) -> Iterable[Row]:
        return views.bgp_samples(cast(views.BgpView, snap))


def _no_route(_prefix: str) -> None:
    return None


PARTS: tuple[Callable[[Node], Component], ...] = (FibPart, QualityPart, BfdPart, BgpPart)


def build_components(d: Host) -> list[Component]:
    """The parts of one node, in start order (stop runs in reverse)."""
    if os.environ.get("GLBD_TEST_NO_COMPONENTS") == "1":  # lifecycle tests of the bare daemon
        return []
    node = Node(d)
    d.node = node  # type: ignore[attr-defined]  # tests and the lab reach the node through it
    return [part(node) for part in PARTS]
