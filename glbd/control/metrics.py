"""Optional Prometheus endpoint (``metrics.listen = "HOST:PORT"``).

The exposition is ``prometheus_client``'s: a registry with the process collector and one custom
collector that turns the daemon's rows (:class:`Sample`, or a ready metric family such as a
histogram's) into metric families at scrape time. Nothing is kept between scrapes, so metrics
cannot drift from what ``glbctl`` shows. The HTTP side stays on the asyncio loop.

At most :data:`MAX_CONNECTIONS` connections are served at once; more are closed at once, and a
client has :data:`REQUEST_TIMEOUT_S` to send its request and again to take the answer. Each
connection closed unanswered is counted by :class:`~glbd.base.reasons.MetricsDrop`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import structlog
from prometheus_client import (
    CollectorRegistry,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.registry import Collector

from glbd.base.reasons import MetricsDrop

__all__ = [
    "LATENCY_BUCKETS",
    "MAX_CONNECTIONS",
    "REQUEST_TIMEOUT_S",
    "Metric",
    "MetricsServer",
    "Row",
    "Sample",
    "exposition",
    "families",
    "histogram",
    "render",
]

log = structlog.get_logger(__name__)

# no ``*_created`` series: a histogram's creation time says nothing an operator needs, and
# Prometheus 2.x would store it as a gauge of its own
disable_created_metrics()  # type: ignore[no-untyped-call]


@dataclass(frozen=True)
class Sample:
    name: str
    value: float
    labels: dict[str, str] = field(default_factory=dict)
    help: str = ""
    kind: str = "gauge"  # gauge | counter


#: what a collector returns: samples, or a metric family built elsewhere (a histogram's)
Row = Sample | Metric


def families(rows: Iterable[Row]) -> list[Metric]:
    """Rows grouped into metric families, one per name; the first row's help and kind win."""
    out: dict[str, Metric] = {}
    label_names: dict[str, list[str]] = {}
    for r in rows:
        if isinstance(r, Metric):
            out.setdefault(r.name, r)
            continue
        fam = out.get(r.name)
        names = sorted(r.labels)
        if fam is None:
            cls = CounterMetricFamily if r.kind == "counter" else GaugeMetricFamily
            fam = out[r.name] = cls(r.name, r.help or r.name, labels=names)
            label_names[r.name] = names
        elif label_names.get(r.name) != names:  # one label set per name, or the scrape fails
            log.warning("metrics_label_mismatch", metric=r.name, labels=names)
            continue
        fam.add_metric([str(r.labels[k]) for k in names], float(r.value))  # type: ignore[attr-defined]
    return list(out.values())


class _Fixed(Collector):
    """Metric families built beforehand (on the event loop), rendered elsewhere."""

    def __init__(self, fams: Iterable[Metric]) -> None:
        self._fams = list(fams)

    def collect(self) -> Iterator[Metric]:
        return iter(self._fams)


def exposition(fams: Iterable[Metric], *collectors: Collector) -> bytes:
    """Text exposition (format 0.0.4) of ``fams`` and of what ``collectors`` collect now."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Fixed(fams))
    for c in collectors:
        reg.register(c)
    return generate_latest(reg)


def render(rows: Iterable[Row]) -> str:
    """Text exposition of ``rows`` alone."""
    return exposition(families(rows)).decode()


def histogram(name: str, doc: str, buckets: Iterable[float]) -> Histogram:
    """A histogram in no registry: its owner hands ``h.collect()`` to a collector."""
    return Histogram(name, doc, buckets=tuple(buckets), registry=None)


#: latency buckets (seconds) from 1 ms to 10 s: covers a weight change (a few ms) and a FIB
#: sync that waits for its hold-down (1 s by default) or a big full apply
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


#: connections served at once; more are closed at once: each holds a file descriptor, and
#: idle clients must not take the ones the daemon's own sockets need (a scrape needs one)
MAX_CONNECTIONS = 64
#: seconds a client has to send its request head, and again to take the answer
REQUEST_TIMEOUT_S = 5.0


class MetricsServer:
    """``GET /metrics``: the rows are read on the event loop (the parts' state is the loop's),
    the text is rendered in a worker thread: on a big fabric rendering takes tens of ms, which
    the loop (FIB failovers, heartbeats) must not wait for."""

    def __init__(
        self,
        listen: str,
        collect: Callable[[], Iterable[Row]],
        *,
        max_connections: int = MAX_CONNECTIONS,
        request_timeout: float = REQUEST_TIMEOUT_S,
    ) -> None:
        host, _, port = listen.rpartition(":")
        self.host = host.strip("[]")
        self.port = int(port)
        self.collect = collect
        self.max_connections = max_connections
        self.request_timeout = request_timeout
        #: ``connections`` (served) and ``dropped_<reason>`` per :class:`MetricsDrop`
        self.counters: dict[str, int] = {"connections": 0} | {r.counter: 0 for r in MetricsDrop}
        #: connections being served now
        self.open = 0
        self._process = ProcessCollector(registry=None)
        self._server: asyncio.Server | None = None

    @property
    def bound_port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._client, self.host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)
            self._server = None

    async def _respond(self, method: bytes, path: bytes) -> tuple[bytes, bytes, bytes]:
        if method != b"GET" or path.split(b"?")[0] not in (b"/metrics", b"/"):
            return b"404 Not Found", b"text/plain", b"not found\n"
        try:
            fams = families(self.collect())
            body = await asyncio.to_thread(exposition, fams, self._process)
        except Exception as e:  # a collector bug must not kill the endpoint
            log.warning("metrics_collect_failed", error=repr(e))
            return b"500 Internal Server Error", b"text/plain", b"collect failed\n"
        return b"200 OK", CONTENT_TYPE_PLAIN_0_0_4.encode(), body

    def _drop(self, reason: MetricsDrop, writer: asyncio.StreamWriter) -> None:
        """Count ``reason`` and reset the connection: its descriptor is freed now."""
        self.counters[reason.counter] += 1
        writer.transport.abort()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.open >= self.max_connections:
            if not self.counters[MetricsDrop.OVER_LIMIT.counter]:  # once: a flood of log lines
                log.warning("metrics_connection_limit", max_connections=self.max_connections)
            self._drop(MetricsDrop.OVER_LIMIT, writer)
            return
        self.open += 1
        self.counters["connections"] += 1
        waiting = MetricsDrop.REQUEST_TIMEOUT
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.request_timeout)
            parts = head.split(b"\r\n", 1)[0].split()
            method, path = (parts[0], parts[1]) if len(parts) >= 2 else (b"", b"")
            status, ctype, body = await self._respond(method, path)
            # drain() then waits until the kernel took it all: the close after it never waits
            # on a client that does not read (holding the descriptor past the cap)
            writer.transport.set_write_buffer_limits(0)
            writer.write(
                b"HTTP/1.1 "
                + status
                + b"\r\nContent-Type: "
                + ctype
                + b"\r\nContent-Length: "
                + str(len(body)).encode()
                + b"\r\nConnection: close\r\n\r\n"
                + body
            )
            waiting = MetricsDrop.RESPONSE_TIMEOUT
            await asyncio.wait_for(writer.drain(), self.request_timeout)
        except TimeoutError:
            self._drop(waiting, writer)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            self.open -= 1
            with contextlib.suppress(Exception):
                writer.close()
