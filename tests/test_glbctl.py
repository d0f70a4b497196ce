"""glbctl against a real control server: replies of any size, tables, filters, exit codes."""

from __future__ import annotations

import asyncio
import io
import json
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from glbd import __version__
from glbd.cli import glbctl as ctl
from glbd.control import protocol as proto
from glbd.control.server import ControlServer

PEERS = 64
PREFIXES = 10_000


def next_hops(peers: int) -> list[dict[str, Any]]:
    return [
        {
            "peer": f"198.18.{j >> 7}.{(j & 127) * 2}",
            "peer_bgp_id": f"198.18.4.{j}",
            "interface": f"spine{j}",
            "next_hop": f"198.18.{j >> 7}.{(j & 127) * 2}",
            "nnh": [f"198.18.4.{j}", "198.18.6.1"],
            "nnhn_status": "ok",
        }
        for j in range(peers)
    ]


def max_rss() -> int:
    """This process's peak resident memory so far, bytes."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def route_rows(n: int, peers: int) -> Iterator[dict[str, Any]]:
    """``glbctl routes`` rows as the daemon builds them; the next-hop list is shared so the
    fake RIB itself stays small (the bytes on the wire are the same)."""
    nhs = next_hops(peers)
    for i in range(n):
        yield {
            "prefix": f"10.{i >> 8}.{i & 255}.0/24",
            "paths": peers,
            "multipath": True,
            "originated": False,
            "as_path": [65100, 65201],
            "advertised_to": [],
            "next_hops": nhs,
            "profile": "pf-1",
            "nhid": 100,
            "weights": [],
            "fib_diff": False,
        }


async def test_routes_at_64_peers_x_10k_prefixes_are_streamed(tmp_path: Path) -> None:
    """640k paths (~110 MB of JSON) through the real server and client; one line each way
    used to be capped at 1 MiB. Neither side holds the whole answer: parts are bounded and
    the process's peak memory grows by a small fraction of the answer."""
    path = tmp_path / "glbd.sock"
    srv = ControlServer(path, {"routes": lambda a: route_rows(PREFIXES, PEERS)})
    await srv.start()

    def consume() -> tuple[int, int, int, str, str, int]:
        rows = paths = parts = 0
        first = last = ""
        for resp in ctl.responses(str(path), "routes", timeout=60):
            parts += resp.more
            for r in resp.result:
                first = first or r["prefix"]
                last = r["prefix"]
                rows += 1
                paths += len(r["next_hops"])
        return rows, paths, parts, first, last, max_rss()

    rss0 = max_rss()
    try:
        rows, paths, parts, first, last, rss1 = await asyncio.to_thread(consume)
    finally:
        await srv.stop()
    assert (rows, paths) == (PREFIXES, PREFIXES * PEERS)
    assert (first, last) == ("10.0.0.0/24", f"10.{(PREFIXES - 1) >> 8}.{(PREFIXES - 1) & 255}.0/24")
    assert parts > 100  # ~110 MB in parts of at most PART_BYTES
    # buffered whole, the JSON text alone would be ~110 MB and its objects several times that
    assert rss1 - rss0 < 60e6, f"peak memory grew {(rss1 - rss0) / 1e6:.0f} MB"
    assert srv.counters["errors"] == 0


async def test_big_results_assemble_and_print_like_json_dumps(tmp_path: Path) -> None:
    """A list and an object, each over 1 MiB: ``request`` returns them whole and ``--json``
    prints exactly what ``json.dumps(result, indent=2)`` prints."""
    rows = list(route_rows(800, 8))
    obj: dict[str, Any] = {
        "profiles": [{"key": f"pf-{i}", "prefixes": ["10.0.0.0/24"] * 400} for i in range(300)]
    }
    obj |= {"fib": {"table": 254}, "empty": []}
    path = tmp_path / "glbd.sock"
    srv = ControlServer(path, {"routes": lambda a: rows, "profiles": lambda a: obj})
    await srv.start()
    try:
        for cmd, want in (("routes", rows), ("profiles", obj)):
            assert len(json.dumps(want)) > proto.MAX_LINE
            assert await asyncio.to_thread(ctl.request, str(path), cmd) == want
            out = io.StringIO()
            await asyncio.to_thread(ctl.print_json, ctl.responses(str(path), cmd), out)
            assert out.getvalue() == json.dumps(want, indent=2) + "\n"
    finally:
        await srv.stop()


@pytest.mark.parametrize("result", [[], [{"a": 1}], {"a": []}, 7, "text", None])
def test_small_results_are_one_line_as_before(result: Any) -> None:
    lines = list(proto.encode_result(3, result))
    assert lines == [proto.Response(3, True, result).encode()]


def test_a_single_row_too_big_for_a_part_is_an_error() -> None:
    with pytest.raises(ValueError, match="one row"):
        list(proto.encode_result(1, [{"x": "y" * proto.MAX_LINE}]))


async def test_requests_stay_limited_to_one_line(tmp_path: Path) -> None:
    """The request limit is the daemon's defence against a local user: unchanged."""
    path = tmp_path / "glbd.sock"
    srv = ControlServer(path, {"status": lambda a: {}})
    await srv.start()
    try:
        reader, writer = await asyncio.open_unix_connection(str(path))
        writer.write(b'{"v":1,"id":1,"cmd":"status","args":{"x":"' + b"a" * proto.MAX_LINE)
        resp = proto.decode_response(await reader.readline())
        writer.close()
        assert (resp.ok, resp.error_reason) == (False, "too_long")
        assert srv.counters["decode_error_too_long"] == 1
    finally:
        await srv.stop()


async def test_client_refuses_an_endless_line(tmp_path: Path) -> None:
    """A fake daemon on the socket path cannot make glbctl buffer without bound."""
    path = tmp_path / "glbd.sock"

    async def hostile(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        writer.write(b'{"v":1,"id":1,"ok":true,"result":"' + b"a" * (2 * proto.MAX_LINE))
        await writer.drain()
        writer.close()

    srv = await asyncio.start_unix_server(hostile, path=str(path))
    try:
        with pytest.raises(ctl.DaemonError, match="too long"):
            await asyncio.to_thread(ctl.request, str(path), "status")
    finally:
        srv.close()


@pytest.mark.parametrize(
    ("cmd", "args", "reason"),
    [
        ("routes", {"prefix": "nope"}, "bad_args"),
        ("routes", {"prefix": 3}, "bad_args"),
        ("status", {"verbose": True}, "bad_args"),
        ("profiles", {"changed": "yes"}, "bad_args"),
        ("neighbors", {"peer": "x" * 500}, "bad_args"),
    ],
)
async def test_bad_arguments_are_named(
    tmp_path: Path, cmd: str, args: dict[str, Any], reason: str
) -> None:
    path = tmp_path / "glbd.sock"
    srv = ControlServer(path, {cmd: lambda a: {"args": a}})
    await srv.start()
    try:
        with pytest.raises(ctl.DaemonError) as ei:
            await asyncio.to_thread(ctl.request, str(path), cmd, args)
        assert ei.value.reason == reason
    finally:
        await srv.stop()


def test_prefix_argument_is_normalised() -> None:
    assert proto.check_args("routes", {"prefix": "10.1.2.3/16"}) == {"prefix": "10.1.0.0/16"}
    assert proto.check_args("routes", {"prefix": "2001:db8::1"}) == {"prefix": "2001:db8::1/128"}


# ---- the command line against a fake daemon ---------------------------------------------------

NEIGHBORS = [
    {"peer": "198.18.1.0", "interface": "spine1", "remote_as": 65100, "bgp_id": "198.18.4.1",
     "state": "up", "uptime_s": 12.5, "prefixes_in": 3, "prefixes_out": 1, "bfd_down": False,
     "last_down_reason": None, "local_address": "198.18.1.1", "counters": {"updates": 4}},
]  # fmt: skip
BFD = [
    {"peer": "198.18.1.0", "interface": "spine1", "state": "up", "remote_state": "up",
     "diag_name": "none", "detect_time_ms": 150.0, "flaps": 0, "local_discriminator": 7},
]  # fmt: skip
LINKS = [{"ifname": "spine1", "band": 7, "down": False, "load_pct": 1.5, "queue_bytes": 0.0}]
HEARTBEATS = [
    {"port": 6149, "auth": {"enabled": False}, "sender": None,
     "receiver": {"accepted": 9, "drops": {"bad_auth": 1},
                  "senders": [{"node_id": "198.18.4.1", "sequence": 5, "age_ms": 20}]}},
]  # fmt: skip

PROFILES = {
    "profiles": [
        {"key": "pf-1", "nhid": 7, "diff": False, "note": "", "prefixes": ["10.0.0.0/24"],
         "excluded": {}, "weights": [{"next_hop": "198.18.1.0", "ifname": "spine1", "value": 200,
                                      "programmed": 201, "installed": 202, "source": "glb"}]},
    ],
    "fib": {"table": 254},
}  # fmt: skip
QUALITY = {
    "role": "load-balancer",
    "profiles": [
        {"key": "pf-1", "prefixes": 1, "recomputes": 3, "next_hops": [
            {"address": "198.18.1.0", "ifname": "spine1", "weight": {"value": 128, "source": "glb"}}
        ]},
    ],
}  # fmt: skip


class FakeDaemon:
    """The handlers glbd serves, with canned rows; records the arguments each request had."""

    def __init__(self) -> None:
        self.args: list[tuple[str, dict[str, Any]]] = []
        self.reload_ok = True

    def handlers(self) -> dict[str, Any]:
        def h(cmd: str, value: Any) -> Any:
            def handler(args: dict[str, Any]) -> Any:
                self.args.append((cmd, args))
                return value() if callable(value) else value

            return handler

        return {
            "status": h("status", {"state": "running", "version": "x"}),
            "neighbors": h("neighbors", NEIGHBORS),
            "bfd": h("bfd", BFD),
            "links": h("links", LINKS),
            "heartbeats": h("heartbeats", HEARTBEATS),
            "quality": h("quality", QUALITY),
            "profiles": h("profiles", PROFILES),
            "routes": h("routes", lambda: list(route_rows(2, 2))),
            "reload": h(
                "reload",
                lambda: {
                    "ok": self.reload_ok,
                    "at": 1.0,
                    "message": "applied"
                    if self.reload_ok
                    else "rejected, old config kept: glbd.toml: local_as: must be 1..4294967295",
                    "changes": {},
                },
            ),
        }


async def glbctl(sock: Path | None, *args: str) -> subprocess.CompletedProcess[str]:
    pre = ["--socket", str(sock)] if sock else []
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "glbd.cli.glbctl", *pre, *args,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, COLUMNS="200"),
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return subprocess.CompletedProcess(args, proc.returncode, out.decode(), err.decode())


@pytest.fixture
async def fake(tmp_path: Path) -> Any:
    d = FakeDaemon()
    srv = ControlServer(tmp_path / "glbd.sock", d.handlers())
    await srv.start()
    try:
        yield d, srv
    finally:
        await srv.stop()


async def test_json_before_or_after_the_command(fake: Any) -> None:
    _d, srv = fake
    for args in (("--json", "status"), ("status", "--json"), ("routes", "--json")):
        r = await glbctl(srv.path, *args)
        assert r.returncode == 0, r.stderr
        assert isinstance(json.loads(r.stdout), dict | list)


@pytest.mark.parametrize(
    ("cmd", "words"),
    [
        ("neighbors", ["peer", "remote_as", "198.18.1.0", "65100", "up"]),
        ("bfd", ["diag_name", "detect_time_ms", "198.18.1.0", "150"]),
        ("links", ["ifname", "band", "spine1", "1.5"]),
        ("heartbeats", ["receiver.accepted", "receiver.drops.bad_auth", "node_id", "198.18.4.1"]),
        ("routes", ["prefix", "next hops", "10.0.1.0/24", "198.18.0.2%spine1 [198.18.4.1,"]),
        ("profiles", ["fib.table", "254", "pf-1", "198.18.1.0%spine1: 200/201/202 glb"]),
        ("quality", ["load-balancer", "pf-1", "198.18.1.0%spine1: 128 (glb)"]),
    ],
)
async def test_every_command_prints_a_table(fake: Any, cmd: str, words: list[str]) -> None:
    _d, srv = fake
    r = await glbctl(srv.path, cmd)
    assert r.returncode == 0, r.stderr
    assert r.stdout.lstrip()[:1] not in ("{", "["), r.stdout
    assert cmd == "routes" or "━" in r.stdout or "─" in r.stdout, r.stdout  # rich's rules
    for w in words:
        assert w in r.stdout, (w, r.stdout)


async def test_filters_travel_to_the_daemon(fake: Any) -> None:
    d, srv = fake
    for args in (
        ("routes", "10.1.2.3/16"),
        ("neighbors", "spine1"),
        ("profiles", "--changed"),
        ("bfd", "--neighbor", "spine1", "--state", "up"),
        ("links", "--interface", "spine2", "--state", "down"),
        ("heartbeats", "--neighbor", "198.18.4.1", "--interface", "spine1"),
        ("quality", "--state", "glb", "--json"),
    ):
        assert (await glbctl(srv.path, *args)).returncode == 0
    assert d.args == [
        ("quality", {}),  # routes PREFIX shows each next hop's weight, quality and source
        ("routes", {"prefix": "10.1.0.0/16"}),
        ("neighbors", {"peer": "spine1"}),
        ("profiles", {"changed": True}),
        ("bfd", {"neighbor": "spine1", "state": "up"}),
        ("links", {"interface": "spine2", "state": "down"}),
        ("heartbeats", {"neighbor": "198.18.4.1", "interface": "spine1"}),
        ("quality", {"state": "glb"}),
    ]
    # heartbeats have no per-row state: refused by the CLI and by the daemon
    r = await glbctl(srv.path, "heartbeats", "--state", "up")
    assert r.returncode == ctl.EXIT_USAGE and "--state" in r.stderr
    with pytest.raises(ctl.DaemonError) as ei:
        await asyncio.to_thread(ctl.request, str(srv.path), "heartbeats", {"state": "up"})
    assert ei.value.reason == "bad_args"


async def test_routes_prefix_is_one_line_per_next_hop_at_64(tmp_path: Path) -> None:
    """``routes PREFIX`` at 64 next hops: a head line, then per next hop its spine, the
    weight glbd wants and the one installed, its quality and the weight's source."""
    (row,) = route_rows(1, PEERS)
    hops = row["next_hops"]
    row["weights"] = [
        {"next_hop": nh["next_hop"], "ifname": nh["interface"], "installed": 100 + j}
        for j, nh in enumerate(hops)
    ]
    quality = {"profiles": [{"key": "pf-1", "next_hops": [
        {"address": nh["next_hop"], "ifname": nh["interface"], "bgp_id": nh["peer_bgp_id"],
         "weight": {"value": 200 + j % 50, "source": "glb" if j % 2 else "dlb",
                    "inputs": {"quality": j % 8}}}
        for j, nh in enumerate(hops)]}]}  # fmt: skip
    path = tmp_path / "glbd.sock"
    srv = ControlServer(path, {"routes": lambda a: [row], "quality": lambda a: quality})
    await srv.start()
    try:
        r = await glbctl(path, "routes", "10.0.0.0/24")
    finally:
        await srv.stop()
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("10.0.0.0/24  paths 64  nhid 100  profile pf-1  fib ok")
    assert lines[1].split() == ["spine", "next", "hop", "bgp", "id", "weight", "installed",
                                "quality", "source", "next-next", "hops"]  # fmt: skip
    hop_lines = lines[2:]
    assert len(hop_lines) == PEERS
    for j, line in enumerate(hop_lines):
        spine, addr, bgp_id, weight, installed, q, source, *_nnh = line.split()
        assert (spine, addr, bgp_id) == (hops[j]["interface"], hops[j]["next_hop"],
                                         hops[j]["peer_bgp_id"])  # fmt: skip
        assert (int(weight), int(installed), int(q)) == (200 + j % 50, 100 + j, j % 8)
        assert source == ("glb" if j % 2 else "dlb")
    assert max(len(x) for x in lines) < 160  # one readable line each


async def test_watch_json_is_one_object_per_line_with_the_filter(fake: Any) -> None:
    d, srv = fake
    r = await glbctl(
        srv.path, "watch", "--json", "--count", "3", "--interval", "0.01", "--interface", "spine1"
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 3
    for line in lines:
        obj = json.loads(line)
        assert set(obj) == {"time", "quality", "profiles"}
        assert obj["quality"] == QUALITY
        # the profiles are cut to the next hops the filtered quality kept
        assert [w["ifname"] for p in obj["profiles"]["profiles"] for w in p["weights"]] == [
            "spine1"
        ]
    assert ("quality", {"interface": "spine1"}) in d.args
    # a filter that leaves nothing leaves no profile either
    prof = ctl.watch_profiles(PROFILES, {"profiles": []})
    assert prof["profiles"] == [] and prof["fib"] == PROFILES["fib"]


async def test_errors_under_json_are_one_json_object_on_stderr(fake: Any, tmp_path: Path) -> None:
    """Same exit codes as without --json; stderr is one JSON object naming the reason."""
    d, srv = fake
    d.reload_ok = False
    cases = [
        (tmp_path / "none.sock", ("routes", "--json"), ctl.EXIT_DAEMON, "unreachable"),
        (srv.path, ("--json", "routes", "not-a-prefix"), ctl.EXIT_USAGE, "usage"),
        (srv.path, ("--json", "nope"), ctl.EXIT_USAGE, "usage"),
        (srv.path, ("counters", "--json"), ctl.EXIT_DAEMON, "unknown_command"),
        (srv.path, ("reload", "--json"), ctl.EXIT_REJECTED, "rejected"),
        (None, ("decode", "bfd", "zz", "--json"), ctl.EXIT_DECODE, "bad_hex"),
    ]
    for sock, args, code, reason in cases:
        r = await glbctl(sock, *args)
        assert r.returncode == code, (args, r.stderr)
        (line,) = r.stderr.splitlines()
        err = json.loads(line)
        assert err["exit"] == code and err["error"]["reason"] == reason, (args, err)
        assert err["error"]["message"], args
        # and without --json, the text as before
        plain = await glbctl(sock, *(a for a in args if a != "--json"))
        assert plain.returncode == code and plain.stderr.startswith(("glbctl", "usage:")), plain


async def test_reload_rejected_exits_3_with_the_reason(fake: Any) -> None:
    d, srv = fake
    ok = await glbctl(srv.path, "reload")
    assert ok.returncode == 0, ok.stderr
    d.reload_ok = False
    r = await glbctl(srv.path, "reload")
    assert r.returncode == ctl.EXIT_REJECTED == 3
    assert r.stderr.strip().splitlines() == [
        "glbctl reload: rejected, old config kept: glbd.toml: local_as: must be 1..4294967295"
    ]
    r = await glbctl(srv.path, "reload", "--json")  # the same, as one JSON object
    assert r.returncode == ctl.EXIT_REJECTED
    assert json.loads(r.stderr)["error"]["message"] == (
        "glbctl reload: rejected, old config kept: glbd.toml: local_as: must be 1..4294967295"
    )


@pytest.mark.parametrize("args", [("watch", "--interval", "-1"), ("watch", "--interval", "0"),
                                  ("routes", "not-a-prefix"), ("nope",)])  # fmt: skip
async def test_usage_errors_exit_2_without_a_traceback(tmp_path: Path, args: tuple[str]) -> None:
    r = await glbctl(tmp_path / "none.sock", *args)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "usage:" in r.stderr


async def test_unreachable_daemon_exits_1(tmp_path: Path) -> None:
    r = await glbctl(tmp_path / "none.sock", "routes")
    assert r.returncode == 1 and r.stderr.startswith("glbctl: glbd is not running")


async def test_ctrl_c_in_watch_exits_130_without_a_traceback(fake: Any) -> None:
    d, srv = fake
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "glbd.cli.glbctl", "--socket", str(srv.path), "watch",
        "--interval", "600", stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        async with asyncio.timeout(60):
            while len(d.args) < 2:  # it has drawn once and sleeps until the next refresh
                await asyncio.sleep(0.02)  # poll interval
        proc.send_signal(signal.SIGINT)
        _out, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    # 130 from glbctl's own handler, or death by SIGINT when the signal lands while the
    # interpreter exits: a shell reports 130 for both
    assert proc.returncode in (130, -signal.SIGINT), err
    assert b"Traceback" not in err and b"KeyboardInterrupt" not in err, err


@pytest.mark.parametrize(
    "argv",
    [
        [sys.executable, "-m", "glbd.cli.glbctl", "--version"],
        [sys.executable, "-m", "glbd", "--version"],
        [sys.executable, "-m", "glbdlab.cli", "--version"],
    ],
)
def test_version(argv: list[str]) -> None:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert __version__ in r.stdout or "glbd-lab" in r.stdout, r.stdout


def test_help_lists_the_exit_codes() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "glbd.cli.glbctl", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "exit codes:" in r.stdout and "reload: the new config file was rejected" in r.stdout


async def test_a_client_that_stops_reading_is_dropped_and_others_are_answered(
    tmp_path: Path,
) -> None:
    """A local user who asks for a big answer and never reads it must not hold the daemon's
    memory or the socket: the server drops it once it stalls and answers the next client."""
    path = tmp_path / "glbd.sock"
    srv = ControlServer(
        path,
        {"routes": lambda a: route_rows(PREFIXES, PEERS), "status": lambda a: {"ok": 1}},
        stall_timeout=0.5,
        max_answers=1,
    )
    await srv.start()
    try:
        _reader, writer = await asyncio.open_unix_connection(str(path))
        writer.write(proto.Request(1, "routes").encode())  # and never read
        await writer.drain()
        assert await asyncio.to_thread(ctl.request, str(path), "status", timeout=60) == {"ok": 1}
        assert srv.counters["stalled_clients"] == 1
        writer.close()
    finally:
        await srv.stop()
