from __future__ import annotations

import asyncio
import math

from glbd.io.metrics import MetricsServer, Sample, render


def test_render_groups_and_escapes() -> None:
    text = render(
        [
            Sample("glbd_bfd_up", 1, {"peer": "198.18.1.0"}, "BFD session up (1) or not (0)"),
            Sample("glbd_bfd_up", 0, {"peer": 'x"y'}),
            Sample("glbd_drops_total", 3, {"reason": "ttl"}, kind="counter"),
            Sample("glbd_loop_lag_seconds", 0.0015),
            Sample("glbd_nan", math.nan),
        ]
    )
    assert text.splitlines() == [
        "# HELP glbd_bfd_up BFD session up (1) or not (0)",
        "# TYPE glbd_bfd_up gauge",
        'glbd_bfd_up{peer="198.18.1.0"} 1',
        'glbd_bfd_up{peer="x\\"y"} 0',
        "# TYPE glbd_drops_total counter",
        'glbd_drops_total{reason="ttl"} 3',
        "# TYPE glbd_loop_lag_seconds gauge",
        "glbd_loop_lag_seconds 0.0015",
        "# TYPE glbd_nan gauge",
        "glbd_nan NaN",
    ]


async def _get(port: int, path: str) -> bytes:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    data = await r.read()
    w.close()
    return data


async def test_server_serves_and_survives_collector_errors() -> None:
    state = {"fail": False}

    def collect() -> list[Sample]:
        if state["fail"]:
            raise RuntimeError("bug")
        return [Sample("glbd_up", 1)]

    srv = MetricsServer("127.0.0.1:0", collect)
    await srv.start()
    try:
        ok = await _get(srv.bound_port, "/metrics")
        assert ok.startswith(b"HTTP/1.1 200") and ok.endswith(b"glbd_up 1\n")
        assert (await _get(srv.bound_port, "/nope")).startswith(b"HTTP/1.1 404")
        state["fail"] = True
        assert (await _get(srv.bound_port, "/metrics")).startswith(b"HTTP/1.1 500")
        state["fail"] = False
        assert (await _get(srv.bound_port, "/metrics")).startswith(b"HTTP/1.1 200")
    finally:
        await srv.stop()
