"""``glbd.control.views``: what ``glbctl`` shows and the metrics derived from it."""

from __future__ import annotations

import math
from typing import Any, cast

from prometheus_client.parser import text_string_to_metric_families

from glbd.control import metrics_daemon, metrics_parts, views
from glbd.control.metrics import render
from glbd.quality.pathtable import PathTable
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
    samples = metrics_parts.fib_samples(cast(metrics_parts.FibView, snap))
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
    assert counters["heartbeat_expirations"] == 0
    snap = views.quality_snapshot([], hb, None, {})
    got = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for s in metrics_parts.quality_samples(cast(metrics_parts.QualityView, snap))
    }
    assert got[("glbd_heartbeat_drops_total", (("reason", "bad_ttl"),))] == 1
    assert got[("glbd_heartbeat_sequence_recoveries_total", ())] == 0
    assert got[("glbd_heartbeat_expirations_total", ())] == 0
    assert views.quality_counters({}, None) == {}


def _rows(samples: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for s in samples}


def test_link_metrics_are_in_base_units() -> None:
    """Load is a 0-1 ratio and capacity is bytes/s (Mb/s in glbctl), so PromQL can divide
    node_exporter's byte counters by it."""
    link = {"ifname": "eth1", "band": 5, "load_pct": 42.5, "capacity_mbps": 1000.0}
    shaped = {"ifname": "eth2", "capacity_mbps": 1000.0, "residual_mbps": 400.0}
    snap = views.quality_snapshot([link, shaped], None, None, {})
    got = _rows(metrics_parts.quality_samples(cast(metrics_parts.QualityView, snap)))
    assert got[("glbd_link_load_ratio", (("ifname", "eth1"),))] == 0.425
    assert got[("glbd_link_reported_capacity_bytes_per_second", (("ifname", "eth1"),))] == 125e6
    assert got[("glbd_link_reported_capacity_bytes_per_second", (("ifname", "eth2"),))] == 50e6


def test_the_foreign_load_metrics() -> None:
    """The foreign rate per link in bytes/s (0 where none is counted), and the counter's gauge
    only where the ingress counter is used: 1 counting, 0 not."""
    link = {"ifname": "eth1", "capacity_mbps": 10.0, "foreign_mbps": 2.5}
    bare = {"ifname": "eth2", "capacity_mbps": 10.0, "foreign_mbps": None}
    for foreign, up in ((None, None), ({"counting": True}, 1.0), ({"counting": False}, 0.0)):
        snap = views.quality_snapshot([link, bare], None, None, {}, foreign)
        got = _rows(metrics_parts.quality_samples(cast(metrics_parts.QualityView, snap)))
        assert got[("glbd_link_foreign_bytes_per_second", (("ifname", "eth1"),))] == 312_500
        assert got[("glbd_link_foreign_bytes_per_second", (("ifname", "eth2"),))] == 0
        assert got.get(("glbd_foreign_counter_up", ())) == up


def test_node_counters_have_explicit_names_and_help() -> None:
    """Each node counter has its own name and help; a key without one is not exported under a
    generated name."""
    snap = views.quality_snapshot([], None, None, {"fib_syncs": 4, "brand_new_counter": 1})
    samples = list(metrics_parts.quality_samples(cast(metrics_parts.QualityView, snap)))
    by_name = {s.name: s for s in samples}
    assert by_name["glbd_fib_syncs_total"].value == 4
    assert by_name["glbd_fib_syncs_total"].help == metrics_parts.NODE_COUNTERS["fib_syncs"][1]
    assert not [s for s in samples if "brand_new" in s.name]


def everything() -> list[Any]:
    """Every sampler over a snapshot with every kind of row, plus the daemon's own rows."""
    r = Receiver()
    r.on_datagram(b"\x00" * 40, ifname="eth1", src="192.0.2.1", ttl=64, now=1.0)
    rx = {
        **r.to_dict(1.0),
        "senders": [{"node_id": 167837953, "age_ms": 20.0}],
        "interfaces": [{"ifname": "eth1", "neighbor_id": 167837953, "last_rx_ago_ms": 20.0}],
    }
    hb = {"receiver": rx, "sender": {"sent": 5}}
    link = {"ifname": "eth1", "band": 5, "load_pct": 42.5, "capacity_mbps": 1000.0}
    counters = dict.fromkeys(metrics_parts.NODE_COUNTERS, 1)
    bfd: dict[str, Any] = {
        "sessions": [
            {
                "peer": "198.18.1.0",
                "interface": "eth1",
                "state": "up",
                "flaps": 1,
                "detect_time_ms": 150.0,
                "drops": {"bad_ttl": 2},
            }
        ],
        "counters": {"unmatched_drops": {"no_session": 1}, "truncated_datagrams": 0},
        "engine": {"timer_lag_max_ms": 1.5},
    }
    fib: dict[str, Any] = {
        "profiles": [
            {
                "key": "pf-1",
                "weights": [{"next_hop": "198.18.1.0", "value": 255, "source": "glb"}],
                "diff": False,
            }
        ],
        "fib": {
            "stale_held": {"routes": 3},
            "foreign_routes": [{"prefix": "192.0.2.0/24", "group": "p", "metric": 0}],
            "conflicts": {"route_exists_on_create": 2},
        },
    }
    bgp: dict[str, Any] = {
        "neighbors": [
            {
                "peer": "198.18.1.0",
                "interface": "eth1",
                "state": "up",
                "uptime_s": 12.5,
                "prefixes_in": 3,
                "prefixes_out": 1,
                "counters": {"established": 2, "max_prefixes_exceeded": 1},
            }
        ],
        "counters": {"api_dropped": {"bad_json": 1}},
        "exabgp": {"deaths": 1},
        "colours": {
            "paths": [
                {"colour": 1, "dest": "nnh:10.0.0.1", "state": "fallback", "fallbacks": 1},
            ]
        },
    }
    lat = metrics_daemon.Latencies()
    lat.synced(0.002, 10.0, 10.5)
    return [
        *metrics_parts.quality_samples(
            cast(
                metrics_parts.QualityView,
                views.quality_snapshot([link], hb, None, counters, {"counting": True}),
            )
        ),
        *metrics_parts.bfd_samples(cast(metrics_parts.BfdView, bfd)),
        *metrics_parts.fib_samples(cast(metrics_parts.FibView, fib)),
        *metrics_parts.bgp_samples(cast(metrics_parts.BgpView, bgp)),
        *metrics_daemon.daemon_samples(
            "1.2.3", True, 1700000000.0, {"last_ms": 1.0}, {"requests": 3}
        ),
        *lat.families(),
    ]


def test_every_metric_follows_prometheus_naming() -> None:
    """Counters end in _total, quantities are in base units (no percent, Mb/s or ms), every
    metric has a help text of its own, and the whole set parses as Prometheus reads it."""
    text = render(everything())
    fams = list(text_string_to_metric_families(text))
    names = {f.name for f in fams}
    assert {
        "glbd_build_info",
        "glbd_heartbeat_to_fib_seconds",
        "glbd_fib_sync_duration_seconds",
        "glbd_config_last_reload_successful",
        "glbd_bfd_up",
        "glbd_fib_conflicts",
    } <= names
    for f in fams:
        assert f.name.startswith("glbd_"), f.name
        assert not any(u in f.name for u in ("percent", "mbps", "_ms")), f.name
        assert f.documentation and f.documentation != f.name, f.name
        assert not f.documentation.startswith("glbd "), f.name  # no help generated from a key
        for s in f.samples:
            if f.type == "counter":
                assert s.name.endswith("_total"), s.name
            if s.name.endswith("_ratio"):
                assert 0 <= s.value <= 1, s
    build = next(f for f in fams if f.name == "glbd_build_info")
    assert [(s.labels, s.value) for s in build.samples] == [({"version": "1.2.3"}, 1.0)]


def test_reload_status_metrics() -> None:
    got = _rows(metrics_daemon.daemon_samples("1", False, 123.0, {}, {}))
    assert got[("glbd_config_last_reload_successful", ())] == 0
    assert got[("glbd_config_last_reload_success_timestamp_seconds", ())] == 123.0


def test_gc_and_loop_scheduling_metrics() -> None:
    gc_pauses = {"collections": [7, 2, 1], "total_ms": [3.0, 4.0, 50.0]}
    sched = {"policy": "realtime", "demotions": 2}
    got = _rows(metrics_daemon.daemon_samples("1", True, 0.0, {}, {}, gc_pauses, sched))
    assert got[("glbd_gc_collections_total", (("generation", "2"),))] == 1
    assert got[("glbd_gc_pause_seconds_total", (("generation", "2"),))] == 0.05
    assert got[("glbd_loop_realtime", ())] == 1
    assert got[("glbd_loop_realtime_demotions_total", ())] == 2
    sched = {"policy": "normal", "demotions": 3}
    got = _rows(metrics_daemon.daemon_samples("1", True, 0.0, {}, {}, gc_pauses, sched))
    assert got[("glbd_loop_realtime", ())] == 0


def test_bfd_kernel_receive_path_metrics() -> None:
    snap = {
        "counters": {"packets_in": 900, "kernel_packets_in": 870, "truncated_datagrams": 1},
        "engine": {"kernel_rx": {"enabled": True, "error": ""}, "timer_lag_max_ms": 2.0},
    }
    got = _rows(metrics_parts.bfd_samples(cast(metrics_parts.BfdView, snap)))
    assert got[("glbd_bfd_packets_in_total", ())] == 900
    assert got[("glbd_bfd_kernel_packets_in_total", ())] == 870
    assert got[("glbd_bfd_truncated_datagrams_total", ())] == 1
    assert got[("glbd_bfd_kernel_rx", ())] == 1
    snap["engine"] = {"kernel_rx": {"enabled": False, "error": "Operation not permitted"}}
    assert (
        _rows(metrics_parts.bfd_samples(cast(metrics_parts.BfdView, snap)))[
            ("glbd_bfd_kernel_rx", ())
        ]
        == 0
    )


def test_heartbeat_to_fib_latency_is_observed_only_for_syncs_that_carry_a_heartbeat() -> None:
    lat = metrics_daemon.Latencies()
    lat.synced(0.004, None, 5.0)  # a sync no heartbeat asked for
    lat.synced(0.003, 4.9, 5.0)
    got = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in lat.families()
        for s in f.samples
    }
    assert got[("glbd_fib_sync_duration_seconds_count", ())] == 2
    assert got[("glbd_heartbeat_to_fib_seconds_count", ())] == 1
    assert math.isclose(got[("glbd_heartbeat_to_fib_seconds_sum", ())], 0.1)
    assert got[("glbd_heartbeat_to_fib_seconds_bucket", (("le", "0.1"),))] == 1
    assert got[("glbd_heartbeat_to_fib_seconds_bucket", (("le", "0.05"),))] == 0


def test_control_server_counters_are_metrics() -> None:
    """What ``glbctl counters`` shows of the control socket is exported too, the clients
    dropped for not reading included."""
    control = {
        "requests": 7,
        "errors": 2,
        "decode_errors": 3,
        "stalled_clients": 1,
        "decode_error_too_long": 3,
    }
    got = _rows(metrics_daemon.daemon_samples("1", True, 0.0, {}, control))
    assert got[("glbd_control_requests_total", ())] == 7
    assert got[("glbd_control_errors_total", ())] == 2
    assert got[("glbd_control_stalled_clients_total", ())] == 1
    assert got[("glbd_control_decode_errors_total", (("reason", "too_long"),))] == 3
