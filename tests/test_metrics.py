"""``glbd.control.metrics``: rows -> prometheus_client exposition, served by the asyncio
endpoint."""

from __future__ import annotations

import asyncio
import math

from prometheus_client.parser import text_string_to_metric_families

from glbd.control.metrics import LATENCY_BUCKETS, MetricsServer, Row, Sample, histogram, render


def _parse(
    text: str,
) -> dict[str, tuple[str, str, dict[tuple[str, tuple[tuple[str, str], ...]], float]]]:
    """name -> (type, help, {(sample name, labels): value}) as Prometheus would read it."""
    out = {}
    for fam in text_string_to_metric_families(text):
        rows = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in fam.samples}
        out[fam.name] = (fam.type, fam.documentation, rows)
    return out


def test_render_groups_rows_by_name_escapes_labels_and_keeps_types() -> None:
    h = histogram("glbd_test_seconds", "a test latency", LATENCY_BUCKETS)
    h.observe(0.003)
    text = render(
        [
            Sample("glbd_bfd_up", 1, {"peer": "198.18.1.0"}, "BFD session up (1) or not (0)"),
            Sample("glbd_drops_total", 3, {"reason": "ttl"}, "drops", kind="counter"),
            Sample("glbd_bfd_up", 0, {"peer": 'x"y\\z\n'}),
            Sample("glbd_nan", math.nan, help="not a number"),
            *h.collect(),
        ]
    )
    got = _parse(text)
    assert got["glbd_bfd_up"][:2] == ("gauge", "BFD session up (1) or not (0)")
    assert got["glbd_bfd_up"][2] == {
        ("glbd_bfd_up", (("peer", "198.18.1.0"),)): 1.0,
        ("glbd_bfd_up", (("peer", 'x"y\\z\n'),)): 0.0,
    }
    # a counter family is named without _total; its sample keeps it
    assert got["glbd_drops"][0] == "counter"
    assert got["glbd_drops"][2] == {("glbd_drops_total", (("reason", "ttl"),)): 3.0}
    assert math.isnan(got["glbd_nan"][2][("glbd_nan", ())])
    hist = got["glbd_test_seconds"]
    assert hist[0] == "histogram"
    assert hist[2][("glbd_test_seconds_bucket", (("le", "0.0025"),))] == 0
    assert hist[2][("glbd_test_seconds_bucket", (("le", "0.005"),))] == 1
    assert hist[2][("glbd_test_seconds_count", ())] == 1
    assert "_created" not in text  # no creation-time series next to the histogram
    assert text.count("# TYPE glbd_bfd_up gauge") == 1


def test_a_row_with_another_label_set_is_left_out_not_a_broken_scrape() -> None:
    text = render(
        [
            Sample("glbd_x", 1, {"a": "1"}, "x"),
            Sample("glbd_x", 2, {"b": "2"}, "x"),  # a sampler bug: a second label set
            Sample("glbd_y", 3, help="y"),
        ]
    )
    got = _parse(text)
    assert got["glbd_x"][2] == {("glbd_x", (("a", "1"),)): 1.0}
    assert got["glbd_y"][2] == {("glbd_y", ()): 3.0}


async def _get(port: int, path: str) -> bytes:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    data = await r.read()
    w.close()
    return data


async def test_server_serves_rows_and_process_metrics_and_survives_collector_errors() -> None:
    state = {"fail": False}

    def collect() -> list[Row]:
        if state["fail"]:
            raise RuntimeError("bug")
        return [Sample("glbd_up", 1, help="up")]

    srv = MetricsServer("127.0.0.1:0", collect)
    await srv.start()
    try:
        ok = await _get(srv.bound_port, "/metrics")
        head, _, body = ok.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        assert b"Content-Type: text/plain; version=0.0.4" in head
        got = _parse(body.decode())
        assert got["glbd_up"][2] == {("glbd_up", ()): 1.0}
        assert got["process_resident_memory_bytes"][2][("process_resident_memory_bytes", ())] > 0
        assert (await _get(srv.bound_port, "/nope")).startswith(b"HTTP/1.1 404")
        state["fail"] = True
        assert (await _get(srv.bound_port, "/metrics")).startswith(b"HTTP/1.1 500")
        state["fail"] = False
        assert (await _get(srv.bound_port, "/metrics")).startswith(b"HTTP/1.1 200")
    finally:
        await srv.stop()
