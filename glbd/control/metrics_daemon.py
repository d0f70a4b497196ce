"""The daemon's own metrics (build info, reload status, event loop, garbage collector, control
socket, metrics endpoint) as a table over :func:`daemon_samples`'s arguments, and the node's
latency histograms.

Apart from :mod:`glbd.control.metrics_parts`: these come from the daemon and the node themselves,
not from a part's snapshot. The table is walked by :func:`glbd.control.metrics_table.walk`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from glbd.base.reasons import MetricsDrop
from glbd.control.metrics import LATENCY_BUCKETS, Metric, Sample, histogram
from glbd.control.metrics_table import (
    Each,
    Entry,
    One,
    Rows,
    by_reason,
    equals,
    flag,
    num,
    part,
    prefixed,
    present,
    text,
    walk,
)


class Latencies:
    """The node's latency histograms, shown with the FIB part's metrics."""

    def __init__(self) -> None:
        self.heartbeat_to_fib = histogram(
            "glbd_heartbeat_to_fib_seconds",
            "a heartbeat that changed a path weight -> the FIB sync that programmed it",
            LATENCY_BUCKETS,
        )
        self.fib_sync = histogram(
            "glbd_fib_sync_duration_seconds",
            "one FIB sync step: plan and netlink writes until the kernel acknowledged",
            LATENCY_BUCKETS,
        )

    def synced(self, took: float, since: float | None, now: float) -> None:
        """A FIB sync step took ``took`` seconds; ``since``: the first heartbeat it carries."""
        self.fib_sync.observe(took)
        self.sent_now(since, now)

    def sent_now(self, since: float | None, now: float) -> None:
        """Weights reached the kernel (a sync step, or the fast lane with no step);
        ``since``: the first heartbeat they carry."""
        if since is not None:
            self.heartbeat_to_fib.observe(max(0.0, now - since))

    def families(self) -> list[Metric]:
        return [*self.heartbeat_to_fib.collect(), *self.fib_sync.collect()]


def _generations(d: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The garbage collector's pauses (``GcPauses.to_dict()``) as a row per generation."""
    gc = d.get("gc_pauses")
    if not gc:
        return []
    per_gen = zip(gc.get("collections", ()), gc.get("total_ms", ()), strict=False)
    return [
        {"generation": gen, "collections": n, "total_ms": ms} for gen, (n, ms) in enumerate(per_gen)
    ]


#: over the arguments of :func:`daemon_samples`, by name
DAEMON_METRICS: tuple[Entry, ...] = (
    One(
        "glbd_build_info",
        "gauge",
        "glbd's version (always 1)",
        lambda d: 1,
        labels={"version": lambda d: d["version"]},
    ),
    One(
        "glbd_up",
        "gauge",
        "the daemon is running (always 1; Prometheus's up says whether it answered)",
        lambda d: 1,
    ),
    One(
        "glbd_config_last_reload_successful",
        "gauge",
        "the last config reload was applied (1) or rejected, old config kept (0)",
        flag("reload_ok"),
    ),
    One(
        "glbd_config_last_reload_success_timestamp_seconds",
        "gauge",
        "unix time the config in force was loaded (start or last applied reload)",
        lambda d: d["loaded_at"],
    ),
    One(
        "glbd_loop_lag_seconds",
        "gauge",
        "how late the last 100 ms event-loop tick ran",
        num("lag.last_ms", 1e3),
    ),
    One(
        "glbd_loop_lag_max_seconds",
        "gauge",
        "the latest an event-loop tick has run since start",
        num("lag.max_ms", 1e3),
    ),
    Rows(
        _generations,
        (
            One(
                "glbd_gc_collections_total",
                "counter",
                "cyclic garbage collections by generation",
                num("collections"),
            ),
            One(
                "glbd_gc_pause_seconds_total",
                "counter",
                "time the event loop spent in cyclic garbage collections, by generation",
                num("total_ms", 1e3),
            ),
        ),
        labels={"generation": text("generation")},
    ),
    Rows(
        present("scheduling"),
        (
            One(
                "glbd_loop_realtime",
                "gauge",
                "the event loop runs at real-time priority now (0: normal, bulk work or off)",
                equals("policy", "realtime"),
            ),
            One(
                "glbd_loop_realtime_demotions_total",
                "counter",
                "times the event loop gave up real time for bulk work",
                num("demotions"),
            ),
        ),
    ),
    Rows(
        part("control"),
        (
            One(
                "glbd_control_requests_total", "counter", "control socket requests", num("requests")
            ),
            One(
                "glbd_control_errors_total",
                "counter",
                "control requests answered with an error (unknown command, bad arguments, failed)",
                num("errors"),
            ),
            One(
                "glbd_control_stalled_clients_total",
                "counter",
                "control clients dropped for not reading an answer within the stall timeout",
                num("stalled_clients"),
            ),
            Each(
                "glbd_control_decode_errors_total",
                "counter",
                "control requests that did not decode, by reason",
                prefixed("decode_error_"),
            ),
        ),
    ),
    Rows(
        present("metrics", empty=True),
        (
            Each(
                "glbd_metrics_connections_dropped_total",
                "counter",
                "metrics endpoint connections closed unanswered: over the cap, or too slow",
                by_reason(MetricsDrop),
            ),
        ),
    ),
)


def daemon_samples(
    version: str,
    reload_ok: bool,
    loaded_at: float,
    lag: Mapping[str, Any],
    control: Mapping[str, int],
    gc_pauses: Mapping[str, Any] | None = None,
    scheduling: Mapping[str, Any] | None = None,
    metrics: Mapping[str, int] | None = None,
) -> Iterable[Sample]:
    """The daemon's own rows (:data:`DAEMON_METRICS`): build info, reload status
    (``reload_ok``: the last reload was applied, True before any; ``loaded_at``: unix time the
    config in force was loaded), the event loop's lag (``LoopLag.to_dict()``), the control
    socket's counters, the garbage collector's pauses (``GcPauses.to_dict()``), the loop's
    scheduling (``LoopPriority.to_dict()``) and the metrics endpoint's counters
    (``MetricsServer``)."""
    args = {
        "version": version,
        "reload_ok": reload_ok,
        "loaded_at": loaded_at,
        "lag": lag,
        "control": control,
        "gc_pauses": gc_pauses,
        "scheduling": scheduling,
        "metrics": metrics,
    }
    return walk(DAEMON_METRICS, args)
