"""The metrics endpoint serves a bounded number of connections: more are reset at once, idle ones
are closed after the request timeout, each counted by reason; a scrape still answers after."""

from __future__ import annotations

import asyncio
import contextlib
import socket

from glbdlab.waits import until

from glbd.base.reasons import MetricsDrop
from glbd.control import metrics_daemon
from glbd.control.metrics import MetricsServer, Sample

Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def _closed_by_server(conn: Conn) -> bool:
    """True once the server closed or reset ``conn`` (it never sends an idle client anything)."""
    with contextlib.suppress(ConnectionError):
        return await asyncio.wait_for(conn[0].read(), 10.0) == b""
    return True


async def _scrape(port: int) -> bytes:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    try:
        return await asyncio.wait_for(r.read(), 10.0)
    finally:
        w.close()


async def test_connections_over_the_cap_are_reset_and_idle_ones_time_out() -> None:
    srv = MetricsServer(
        "127.0.0.1:0", lambda: [Sample("up_probe", 1)], max_connections=4, request_timeout=0.5
    )
    await srv.start()
    conns: list[Conn] = []
    try:
        port = srv.bound_port
        for _ in range(4):
            conns.append(await asyncio.open_connection("127.0.0.1", port))
        await until(lambda: srv.open == 4, what="4 idle connections served")
        extra = [await asyncio.open_connection("127.0.0.1", port) for _ in range(10)]
        conns += extra
        assert all([await _closed_by_server(c) for c in extra])
        assert srv.counters[MetricsDrop.OVER_LIMIT.counter] == 10
        assert srv.open == 4
        # the idle ones are closed once the request timeout passes (the stimulus: they wait)
        assert all([await _closed_by_server(c) for c in conns[:4]])
        await until(lambda: srv.open == 0)
        assert srv.counters == {
            "connections": 4,
            "dropped_over_limit": 10,
            "dropped_request_timeout": 4,
            "dropped_response_timeout": 0,
        }
        got = await _scrape(port)
        assert got.startswith(b"HTTP/1.1 200 OK") and b"up_probe 1.0" in got
        assert srv.counters["connections"] == 5 and srv.open == 0
    finally:
        for _r, w in conns:
            w.close()
        await srv.stop()


def test_drops_are_exported_by_reason() -> None:
    counters = {"connections": 3, "dropped_over_limit": 7, "dropped_request_timeout": 2}
    rows = metrics_daemon.daemon_samples("v", True, 0.0, {}, {}, metrics=counters)
    got = {
        s.labels["reason"]: s.value
        for s in rows
        if s.name == "glbd_metrics_connections_dropped_total"
    }
    assert got == {"over_limit": 7, "request_timeout": 2, "response_timeout": 0}
    assert all(r.value == r for r in MetricsDrop)


async def test_a_client_that_does_not_take_the_answer_is_dropped() -> None:
    # ~7 MB: more than the kernel's largest TCP send buffer (4 MB by default) takes
    rows = [Sample("big_probe", i, {"n": f"{i:0200d}"}) for i in range(30_000)]
    srv = MetricsServer("127.0.0.1:0", lambda: rows, request_timeout=1.0)
    await srv.start()
    loop = asyncio.get_running_loop()
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect
            s.setblocking(False)
            await loop.sock_connect(s, ("127.0.0.1", srv.bound_port))
            await loop.sock_sendall(s, b"GET /metrics HTTP/1.1\r\n\r\n")  # and never read
            await until(lambda: srv.counters[MetricsDrop.RESPONSE_TIMEOUT.counter] == 1, 30.0)
            await until(lambda: srv.open == 0)
        assert (await _scrape(srv.bound_port)).startswith(b"HTTP/1.1 200 OK")
    finally:
        await srv.stop()
