"""``glbd.app.views``: what ``glbctl`` shows and the metrics derived from it."""

from __future__ import annotations

from typing import Any, cast

from glbd.app import views
from glbd.core.pathtable import PathTable
from heartbeat.receiver import Receiver


def test_fib_view_and_metrics_show_foreign_routes_conflicts_and_stale_hold() -> None:
    """What the FIB leaves alone because it is not glbd's is visible in ``glbctl profiles``
    (the ``fib`` summary) and in the metrics, by reason."""
    fib: dict[str, Any] = {
        "protocol": 200,
        "stale_held": {"routes": 3, "groups": 1, "nexthops": 1},
        "foreign_routes": [{"prefix": "192.0.2.0/24", "group": "p", "metric": 0}],
        "conflicts": {"route_exists_on_create": 2, "nexthop_reowned": 1},
    }
    snap = views.fib_snapshot(fib, PathTable(), None)
    assert snap["fib"]["foreign_routes"] == [{"prefix": "192.0.2.0/24", "group": "p", "metric": 0}]
    assert snap["fib"]["conflicts"]["route_exists_on_create"] == 2
    assert snap["fib"]["stale_held"]["routes"] == 3
    samples = views.fib_samples(cast(views.FibView, snap))
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in samples}
    assert got[("glbd_fib_foreign_routes", ())] == 1
    assert got[("glbd_fib_conflicts_total", (("reason", "route_exists_on_create"),))] == 2
    assert got[("glbd_fib_conflicts_total", (("reason", "nexthop_reowned"),))] == 1
    assert got[("glbd_fib_stale_held", (("kind", "routes"),))] == 3


def test_counters_and_metrics_show_every_heartbeat_drop_by_reason() -> None:
    """``glbctl counters`` (quality part) carries the heartbeat receiver's drops by reason next
    to the node's counters, and the metrics carry the sequence resynchronisations."""

    r = Receiver()
    r.on_datagram(b"\x00" * 40, ifname="eth1", src="192.0.2.1", ttl=64, now=1.0)
    r.on_datagram(b"\x00" * 40, ifname="eth9", src="192.0.2.9", ttl=255, now=1.0)
    hb = {"receiver": r.to_dict(1.0), "sender": {"sent": 5}}
    counters = views.quality_counters({"local_changes": 2}, hb)
    assert counters["local_changes"] == 2 and counters["heartbeats_sent"] == 5
    assert counters["heartbeat_drops"] == {"bad_ttl": 1, "no_neighbor": 1}
    assert counters["heartbeat_sequence_jumps"] == 0
    snap = views.quality_snapshot([], hb, None, {})
    got = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for s in views.quality_samples(cast(views.QualityView, snap))
    }
    assert got[("glbd_heartbeat_drops_total", (("reason", "bad_ttl"),))] == 1
    assert got[("glbd_heartbeat_sequence_recoveries_total", ())] == 0
    assert views.quality_counters({}, None) == {}
