"""Optional Prometheus endpoint (``metrics.listen = "HOST:PORT"``), stdlib only.

The daemon passes a collector that returns :class:`Sample` rows at scrape time; nothing is kept
between scrapes, so metrics cannot drift from what ``glbctl`` shows. Text exposition format 0.0.4.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import structlog

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Sample:
    name: str
    value: float
    labels: dict[str, str] = field(default_factory=dict)
    help: str = ""
    kind: str = "gauge"  # gauge | counter


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _num(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v)) if not float(v).is_integer() else str(int(v))


def render(samples: Iterable[Sample]) -> str:
    """Text exposition: one HELP/TYPE header per metric name, samples grouped by name."""
    by_name: dict[str, list[Sample]] = {}
    for s in samples:
        by_name.setdefault(s.name, []).append(s)
    lines: list[str] = []
    for name, rows in by_name.items():
        if rows[0].help:
            lines.append(f"# HELP {name} {rows[0].help}")
        lines.append(f"# TYPE {name} {rows[0].kind}")
        for s in rows:
            lab = ",".join(f'{k}="{_esc(str(v))}"' for k, v in sorted(s.labels.items()))
            lines.append(f"{name}{{{lab}}} {_num(s.value)}" if lab else f"{name} {_num(s.value)}")
    return "\n".join(lines) + "\n"


class MetricsServer:
    def __init__(self, listen: str, collect: Callable[[], Iterable[Sample]]) -> None:
        host, _, port = listen.rpartition(":")
        self.host = host.strip("[]")
        self.port = int(port)
        self.collect = collect
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

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5.0)
            parts = head.split(b"\r\n", 1)[0].split()
            method, path = (parts[0], parts[1]) if len(parts) >= 2 else (b"", b"")
            if method != b"GET" or path.split(b"?")[0] not in (b"/metrics", b"/"):
                body, status = b"not found\n", b"404 Not Found"
                ctype = b"text/plain"
            else:
                try:
                    body = render(self.collect()).encode()
                    status, ctype = b"200 OK", b"text/plain; version=0.0.4; charset=utf-8"
                except Exception as e:  # a collector bug must not kill the endpoint
                    log.warning("metrics_collect_failed", error=repr(e))
                    body, status, ctype = (
                        b"collect failed\n",
                        b"500 Internal Server Error",
                        b"text/plain",
                    )
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
            await writer.drain()
        except (
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            TimeoutError,
            ConnectionError,
        ):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()
