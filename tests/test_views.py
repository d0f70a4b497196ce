"""``glbd.app.views``: what ``glbctl`` shows and the metrics derived from it."""

from __future__ import annotations

from typing import Any, cast

from glbd.app import views
from glbd.core.pathtable import PathTable


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
