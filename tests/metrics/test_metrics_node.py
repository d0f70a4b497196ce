"""The node's metrics: every counter named, the heartbeat -> FIB latency observed through the
node's own FIB sync, and scrapes that build no per-route rows."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from glbd.control import metrics_parts
from glbd.control.metrics import Sample
from glbd.daemon.daemon import Daemon
from glbd.daemon.node import Node
from glbd.daemon.parts import BgpPart, FibPart
from glbd.quality.pathmodel import LocalLink, RemoteLink
from heartbeat.reasons import UpdateReason
from heartbeat.receiver import RemoteUpdate
from tests.quality.test_path_quality_reload import _cfg
from tests.quality.test_pathtable import L2, L3, NH, G, S, all_remote, to_leaf


class FakeFib:
    """Takes FIB sync steps and snapshots; records what was asked of it."""

    def __init__(self) -> None:
        self.steps: list[str] = []
        self.snapshots: list[bool] = []

    async def apply(self, desired: Any) -> str:
        self.steps.append("apply")
        return "ok"

    async def set_group_weights(self, weights: Any) -> str:
        self.steps.append("set_weights")
        return "ok"

    async def update(self, **kw: Any) -> str:
        self.steps.append("update")
        return "ok"

    def snapshot(self, routes: bool = True) -> dict[str, Any]:
        self.snapshots.append(routes)
        out: dict[str, Any] = {"groups": {}, "conflicts": {}, "foreign_routes": []}
        if routes:
            out["routes"] = {}
        return out


def _hist(h: Any, sample: str) -> float:
    return next(s.value for f in h.collect() for s in f.samples if s.name == sample)


async def _wait(pred: Any, timeout: float = 5.0) -> None:
    async def poll() -> None:
        while not pred():
            await asyncio.sleep(0.01)  # poll interval

    await asyncio.wait_for(poll(), timeout)


async def test_every_node_counter_has_a_metric_name(tmp_path: Path) -> None:
    node = Node(Daemon("glbd.toml", _cfg(tmp_path)))
    assert set(node.counters) <= set(metrics_parts.NODE_COUNTERS)


async def test_heartbeat_that_moves_a_weight_is_timed_until_the_fib_sync_programs_it(
    tmp_path: Path,
) -> None:
    node = Node(Daemon("glbd.toml", _cfg(tmp_path)))
    node.table = t = node.build_table()
    fib = FakeFib()
    node.fib = fib  # type: ignore[assignment]
    node.fib_service.hold_s = 0.0
    node.fib_service.sync.bgp_up(node.loop.time())  # the first BGP session: syncs may run
    for nh in NH:
        t.set_local(nh.ifname or "", LocalLink(7, False, G))
    all_remote(t)
    t.set_prefix("10.2.0.0/24", to_leaf(L2))
    t.set_prefix("10.3.0.0/24", to_leaf(L3))
    # spine 3's link to leaf 2 goes down: leaf 2's profile loses a next hop
    down = [RemoteLink(L2, 1, 0, True, G), RemoteLink(L3, 2, 7, False, G)]
    node.on_remote([RemoteUpdate(S[2], down, UpdateReason.CHANGED)])
    lat = node.latency
    await _wait(lambda: _hist(lat.heartbeat_to_fib, "glbd_heartbeat_to_fib_seconds_count") == 1)
    assert fib.steps
    assert _hist(lat.fib_sync, "glbd_fib_sync_duration_seconds_count") == len(fib.steps)
    assert node.counters["fib_syncs"] == len(fib.steps)


async def test_a_scrape_builds_no_per_route_rows(tmp_path: Path) -> None:
    """The FIB part asks the programmer for its summary without routes; the BGP part reads
    neighbours and counters, never the RIB's routes."""
    node = Node(Daemon("glbd.toml", _cfg(tmp_path)))
    node.table = node.build_table()
    fib = FakeFib()
    node.fib = fib  # type: ignore[assignment]
    routes_built: list[int] = []
    rib = SimpleNamespace(
        counters={"updates": 2},
        pending=0,
        iter_routes=lambda *_a: routes_built.append(1) or iter(()),
    )
    node.bgp = SimpleNamespace(  # type: ignore[assignment]
        neighbors_snapshot=lambda: [{"peer": "198.18.1.0", "state": "up", "prefixes_in": 7}],
        rib=rib,
        parser=SimpleNamespace(decoded=3, dropped={"bad_json": 1}),
        supervisor=SimpleNamespace(snapshot=lambda: {"deaths": 2}),
    )
    fib_rows = {s.name for s in FibPart(node).samples() if isinstance(s, Sample)}
    bgp_rows = {(s.name, s.value) for s in BgpPart(node).samples() if isinstance(s, Sample)}
    assert "glbd_fib_foreign_routes" in fib_rows
    assert fib.snapshots and not any(fib.snapshots)
    assert ("glbd_bgp_prefixes_in", 7.0) in bgp_rows
    assert ("glbd_exabgp_api_drops_total", 1.0) in bgp_rows
    assert ("glbd_exabgp_restarts_total", 2.0) in bgp_rows
    assert routes_built == []
    node.fib = None  # the stub is the path the routes take, so a scrape using it would show
    list(BgpPart(node).routes())
    assert routes_built == [1]
