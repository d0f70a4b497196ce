"""Daemon lifecycle without the network parts: control socket, status, reload with rollback."""

from __future__ import annotations

import asyncio
import gc
import ipaddress
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from glbdlab.nodes import wait_until
from glbdlab.waits import until

from glbd.cli import glbctl as ctl
from glbd.config import config as cfgmod
from glbd.daemon.daemon import GC_YOUNG_THRESHOLD, Daemon

ROOT = Path(__file__).resolve().parent.parent


def _write_cfg(tmp: Path, extra: str = "", hold: int = 3) -> Path:
    f = tmp / "glbd.toml"
    f.write_text(f"""
router_id = "198.18.255.1"
local_as = 65001
role = "load-balancer"
[[neighbors]]
address = "198.18.1.0"
remote_as = 65100
interface = "leaf1-sw1"
import = ["0.0.0.0/0 le 32", "::/0 le 128"]
export = ["0.0.0.0/0 le 32", "::/0 le 128"]
[heartbeat]
hold_multiplier = {hold}
[control]
socket = "{tmp / "ctl.sock"}"
{extra}
""")
    return f


class Dummy:
    name = "dummy"

    def __init__(self) -> None:
        self.events: list[Any] = []

    async def start(self) -> None:
        self.events.append("start")

    async def stop(self) -> None:
        self.events.append("stop")

    async def reconfigure(self, new: cfgmod.Config, changes: dict[str, Any]) -> None:
        self.events.append(("reconfigure", changes["sections"]))

    def snapshot(self) -> dict[str, Any]:
        return {"counters": {"x": 1}}

    def samples(self) -> list[Any]:
        return []


async def test_status_reload_and_rollback(tmp_path: Path) -> None:
    f = _write_cfg(tmp_path)
    dummy = Dummy()
    d = Daemon(str(f), cfgmod.load(f), components=lambda _: [dummy])
    await d.start()
    try:
        sock = str(tmp_path / "ctl.sock")
        st = await asyncio.to_thread(ctl.request, sock, "status")
        assert st["state"] == "running" and st["role"] == "load-balancer"
        assert st["components"] == ["dummy"]
        assert (await asyncio.to_thread(ctl.request, sock, "counters"))["dummy"] == {"x": 1}
        # a good change is applied and handed to the components
        _write_cfg(tmp_path, hold=5)
        res = await asyncio.to_thread(ctl.request, sock, "reload")
        assert res["ok"] and res["changes"]["sections"] == ["heartbeat"]
        assert ("reconfigure", ["heartbeat"]) in dummy.events
        assert d.cfg.heartbeat.hold_multiplier == 5
        # a bad file is rejected, the old config stays, and status says why
        f.write_text(f.read_text().replace("hold_multiplier = 5", "hold_multiplier = 1\nbogus=1"))
        res = await asyncio.to_thread(ctl.request, sock, "reload")
        assert not res["ok"] and "old config kept" in res["message"]
        assert "heartbeat.bogus: unknown key" in res["message"]
        assert d.cfg.heartbeat.hold_multiplier == 5
        st = await asyncio.to_thread(ctl.request, sock, "status")
        assert st["last_reload"]["ok"] is False and "bogus" in st["last_reload"]["message"]
        # identity changes need a restart
        f.write_text(_write_cfg(tmp_path).read_text().replace("65001", "65009"))
        res = await d.reload()
        assert not res.ok and "local_as" in res.message
        cfg = await asyncio.to_thread(ctl.request, sock, "config")
        assert cfg["local_as"] == 65001
    finally:
        await d.stop()
    assert dummy.events[0] == "start" and dummy.events[-1] == "stop"
    assert not (tmp_path / "ctl.sock").exists()


async def test_loop_lag_is_measured(tmp_path: Path) -> None:
    f = _write_cfg(tmp_path)
    d = Daemon(str(f), cfgmod.load(f), components=lambda _: [])
    d.lag.interval = 0.01
    await d.start()
    try:
        await until(lambda: d.lag.ticks >= 2, what="the lag monitor ticking")
        time.sleep(0.05)  # the stimulus: block the loop on purpose
        await until(lambda: d.lag.max >= 0.03, 5.0, what="the block measured")
        assert d.status()["loop_lag"]["late_10ms"] >= 1
    finally:
        await d.stop()


async def test_gc_pauses_are_measured_while_running(tmp_path: Path) -> None:
    f = _write_cfg(tmp_path)
    d = Daemon(str(f), cfgmod.load(f), components=lambda _: [])
    before = gc.get_threshold()
    await d.start()
    try:
        # young passes are rarer than CPython's default (700 allocations)
        assert gc.get_threshold()[0] == GC_YOUNG_THRESHOLD > before[0]
        gc.collect()
        gc.collect(0)
        got = d.status()["gc"]
        assert got["collections"][2] >= 1 and got["collections"][0] >= 1, got
        assert got["max_ms"][2] > 0 and got["total_ms"][2] >= got["max_ms"][2]
    finally:
        await d.stop()
    counted = d.status()["gc"]["collections"]
    gc.collect()
    assert d.status()["gc"]["collections"] == counted  # stopped: no longer counting
    assert gc.get_threshold() == before


async def test_what_exists_once_started_is_frozen_out_of_the_collectors_passes(
    tmp_path: Path,
) -> None:
    f = _write_cfg(tmp_path)
    d = Daemon(str(f), cfgmod.load(f), components=lambda _: [])
    assert gc.get_freeze_count() == 0
    await d.start()
    try:
        frozen = d.status()["gc"]["frozen"]
        # the modules and the parts built at start: a pass no longer walks them
        assert frozen > 10_000 and gc.get_freeze_count() > 10_000
        assert gc.get_count()[1:] == (0, 0)  # the imports' generation counts are gone
    finally:
        await d.stop()
    assert gc.get_freeze_count() == 0  # given back to an embedding process
    assert d.status()["gc"]["frozen"] == 0


def policy() -> int:
    return os.sched_getscheduler(0) & ~os.SCHED_RESET_ON_FORK


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="real-time scheduling needs root")
async def test_the_loop_runs_real_time_gives_it_up_while_busy_and_takes_it_back(
    tmp_path: Path,
) -> None:
    f = _write_cfg(tmp_path, hold=3)
    d = Daemon(str(f), cfgmod.load(f), components=lambda _: [])
    await d.start()
    try:
        assert policy() == os.SCHED_RR
        assert os.sched_getparam(0).sched_priority == 5  # the default
        deadline = time.monotonic() + 10
        while d.status()["scheduling"]["demotions"] < 1:  # the stimulus: bulk work, in slices
            assert time.monotonic() < deadline, d.status()["scheduling"]
            end = time.process_time() + 0.05
            while time.process_time() < end:
                pass
            await asyncio.sleep(0)  # the stimulus: yield between slices
        assert policy() == os.SCHED_OTHER
        sched = lambda: d.status()["scheduling"]  # noqa: E731
        await until(lambda: sched()["promotions"] >= 1, 5, what="back to real time")
        assert policy() == os.SCHED_RR
    finally:
        await d.stop()
    assert policy() == os.SCHED_OTHER


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="real-time scheduling needs root")
async def test_a_reload_changes_the_loops_priority(tmp_path: Path) -> None:
    f = _write_cfg(tmp_path)
    d = Daemon(str(f), cfgmod.load(f), components=lambda _: [])
    await d.start()
    try:
        text = f.read_text()
        f.write_text("rt_priority = 0\n" + text)
        assert (await d.reload()).ok
        assert policy() == os.SCHED_OTHER and d.status()["scheduling"]["policy"] == "normal"
        f.write_text("rt_priority = 7\n" + text)
        assert (await d.reload()).ok
        assert policy() == os.SCHED_RR and os.sched_getparam(0).sched_priority == 7
    finally:
        await d.stop()
    assert policy() == os.SCHED_OTHER


@pytest.mark.root
def test_processes_started_by_a_real_time_loop_start_normal() -> None:
    code = (
        "import os, subprocess, sys\n"
        "from glbd.daemon.loopprio import Policy\n"
        "from glbd.daemon import sched\n"
        "sched.apply(Policy.REALTIME, 5)\n"
        "assert os.sched_getscheduler(0) & ~os.SCHED_RESET_ON_FORK == os.SCHED_RR\n"
        "child = [sys.executable, '-c', 'import os; print(os.sched_getscheduler(0))']\n"
        "print(subprocess.run(child, capture_output=True, text=True).stdout.strip())\n"
    )
    if os.geteuid() != 0:
        pytest.skip("real-time scheduling needs root")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(out.stdout) == os.SCHED_OTHER


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="glbd run needs root")
def test_glbd_run_sighup_bad_config_keeps_running_and_sigterm_stops(tmp_path: Path) -> None:
    f = _write_cfg(tmp_path)
    # the bare daemon (daemon.main without components): signals, reload and the socket only
    bare = (
        "import sys; from glbd.daemon.daemon import main; sys.exit(main(sys.argv[1], None, 'json'))"
    )
    p = subprocess.Popen(
        [sys.executable, "-c", bare, str(f)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    sock = str(tmp_path / "ctl.sock")
    try:
        wait_until(lambda: ctl.request(sock, "status", timeout=1), 10, what="the control socket")
        f.write_text(f.read_text() + "\nnot valid toml [[[\n")
        p.send_signal(signal.SIGHUP)
        st = wait_until(
            lambda: (s := ctl.request(sock, "status"))["last_reload"] and s, 10, what="the reload"
        )
        assert st["state"] == "running" and st["last_reload"]["ok"] is False
        assert p.poll() is None
        p.send_signal(signal.SIGTERM)
        assert p.wait(10) == 0
        err = p.stderr.read() if p.stderr else ""
        assert "reload_rejected" in err and "glbd_stopped" in err
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


async def test_component_failing_to_start_is_one_line_and_stops_the_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = _write_cfg(tmp_path)
    ok = Dummy()

    class Broken(Dummy):
        name = "bfd"

        async def start(self) -> None:
            raise RuntimeError("engine did not answer")

    d = Daemon(str(f), cfgmod.load(f), components=lambda _: [ok, Broken()])
    assert await d.run() == 1
    assert ok.events == ["start", "stop"]
    assert d.state == "stopped" and not (tmp_path / "ctl.sock").exists()
    err = capsys.readouterr().err
    assert "glbd: bfd failed to start: engine did not answer" in err and "Traceback" not in err


async def test_bfd_failure_reaches_the_fib_before_the_rib_recompute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """BFD Down: the fast FIB failover is started before the log record is rendered and
    before the RIB recomputes the peer's prefixes (which at scale is the whole table), and
    the RIB still follows."""
    from bfd.engine import BfdEvent
    from bfd.packet import Diag, State
    from glbd.daemon import node as wiring
    from glbd.daemon.node import Node

    f = _write_cfg(tmp_path)
    d = Daemon(str(f), cfgmod.load(f), components=lambda _: [])
    node = Node(d)
    calls: list[str] = []

    class Fib:
        async def remove_nexthop(self, peer: Any, ifname: str) -> int:
            calls.append(f"fib {peer} {ifname}")
            return 1

    class Bgp:
        def peer_bfd_down(self, peer: Any) -> None:
            calls.append(f"rib {peer}")

    class Log:
        def info(self, event: str, **kw: Any) -> None:
            calls.append(f"log {event} {kw.get('new')}")

    monkeypatch.setattr(wiring, "log", Log())
    node.fib, node.bgp = Fib(), Bgp()  # type: ignore[assignment]
    ev = BfdEvent("l1-s1", "172.16.11.2", State.UP, State.DOWN, Diag.CONTROL_DETECTION_TIME_EXPIRED,
                  "detection_timeout", True, True, 0, 1, 0.0)  # fmt: skip
    node.on_bfd(ev)
    assert calls == []  # nothing heavy inside the callback
    await until(lambda: len(calls) == 3, what="the failover's three steps")
    assert calls == ["fib 172.16.11.2 l1-s1", "log bfd_state DOWN", "rib 172.16.11.2"]
    assert node.counters["fib_fast_failovers"] == 1


async def test_bfd_failover_done_by_the_engine_is_mirrored_at_once(tmp_path: Path) -> None:
    """An event whose failover the engine already sent to the kernel: the FIB only mirrors it,
    synchronously inside the callback (no task that a busy loop could delay), and does not
    send its own group replaces; the RIB follows as before."""
    from bfd.engine import BfdEvent
    from bfd.packet import Diag, State
    from glbd.daemon.node import Node

    f = _write_cfg(tmp_path)
    node = Node(Daemon(str(f), cfgmod.load(f), components=lambda _: []))
    calls: list[str] = []

    class Fib:
        def failed_over(self, peer: Any, ifname: str) -> int:
            calls.append(f"mirror {peer} {ifname}")
            return 1

        async def remove_nexthop(self, peer: Any, ifname: str) -> int:
            calls.append("remove_nexthop")
            return 1

    class Bgp:
        def peer_bfd_down(self, peer: Any) -> None:
            calls.append(f"rib {peer}")

    node.fib, node.bgp = Fib(), Bgp()  # type: ignore[assignment]
    ev = BfdEvent("l1-s1", "172.16.11.2", State.UP, State.DOWN, Diag.CONTROL_DETECTION_TIME_EXPIRED,
                  "detection_timeout", True, True, 0, 1, 0.0, None, True)  # fmt: skip
    node.on_bfd(ev)
    assert calls == ["mirror 172.16.11.2 l1-s1"]
    await until(lambda: len(calls) == 2, what="the RIB's step")
    assert calls == ["mirror 172.16.11.2 l1-s1", "rib 172.16.11.2"]
    assert node.counters["bfd_engine_failovers"] == node.counters["fib_fast_failovers"] == 1


async def test_failover_requests_are_armed_per_session_and_follow_the_config(
    tmp_path: Path,
) -> None:
    """The FIB's failover map becomes one RTM_DELNEXTHOP batch per BFD session in the engine;
    a next hop without a session is not armed, an unchanged one is not re-sent, and with
    ``bfd.kernel_failover = false`` every session is disarmed."""
    from glbd.daemon.node import Node
    from glbd.fib.fibmsg import failover_wire

    f = _write_cfg(tmp_path)
    node = Node(Daemon(str(f), cfgmod.load(f), components=lambda _: []))
    armed: list[tuple[str, str, bytes]] = []

    class Engine:
        running = True

        def set_failover(self, ifname: str, peer: str, data: bytes) -> int:
            armed.append((ifname, peer, data))
            return len(data) // 32

    node.bfd = Engine()  # type: ignore[assignment]
    arming = node.fib_service.failover
    gw, other = ipaddress.ip_address("198.18.1.0"), ipaddress.ip_address("198.18.2.0")
    arming.map_changed({(gw, "leaf1-sw1"): (7, 9), (other, "leaf1-sw2"): (8,)})
    assert await arming.settled()
    assert armed == [("leaf1-sw1", "198.18.1.0", failover_wire([7, 9]))]
    arming.map_changed({(gw, "leaf1-sw1"): (7, 9)})  # only the other one changed
    await arming.settled()
    assert len(armed) == 1
    arming.map_changed({})  # the member is gone: disarm
    await arming.settled()
    assert armed[-1] == ("leaf1-sw1", "198.18.1.0", b"")
    arming.map_changed({(gw, "leaf1-sw1"): (7,)})
    await arming.settled()
    assert armed[-1] == ("leaf1-sw1", "198.18.1.0", failover_wire([7]))
    node.cfg = cfgmod.load(_write_cfg(tmp_path, "[bfd]\nkernel_failover = false\n"))
    arming.rearm()
    await arming.settled()
    assert armed[-1] == ("leaf1-sw1", "198.18.1.0", b"")
    assert node.counters["bfd_failover_arms"] == 4


async def test_bfd_flap_read_in_one_go_reaches_the_rib_in_order(tmp_path: Path) -> None:
    """A Down and the Up right after it, handled in one loop iteration (the engine's pipe
    delivered both): the RIB must see Down then Up. With the Up applied at once and the Down
    deferred, the late Down left the peer BFD-down for good and its paths out of selection
    (the e2e fabric lost a spine for a prefix under load)."""
    from bfd.engine import BfdEvent
    from bfd.packet import Diag, State
    from glbd.daemon.node import Node
    from tests.bgp.rib_helpers import LEAVES, spine_rib, update_from

    f = _write_cfg(tmp_path)
    node = Node(Daemon(str(f), cfgmod.load(f), components=lambda _: []))
    r = spine_rib()
    r.on_update(update_from(LEAVES[1], "10.1.1.0/24"), 1.0)
    peer = LEAVES[1].address

    class Bgp:
        def peer_bfd_down(self, p: Any) -> None:
            r.peer_bfd_down(p, 2.0)

        def peer_bfd_up(self, p: Any) -> None:
            r.peer_bfd_up(p, 2.0)

    node.bgp = Bgp()  # type: ignore[assignment]
    down = BfdEvent("s1-l1", str(peer), State.UP, State.DOWN, Diag.CONTROL_DETECTION_TIME_EXPIRED,
                    "detection_timeout", True, True, 0, 1, 0.0)  # fmt: skip
    up = BfdEvent("s1-l1", str(peer), State.DOWN, State.UP, Diag.NONE,
                  "neighbor_signal", False, False, 0, 1, 0.0)  # fmt: skip
    node.on_bfd(down)
    node.on_bfd(up)
    await until(lambda: r.peers[peer].counters["bfd_down"] == 1, what="the down event")
    assert r.peers[peer].bfd_down is False
    assert r.peers[peer].counters["bfd_down"] == 1


async def test_control_socket_drops_reach_the_metrics(tmp_path: Path) -> None:
    """A request that does not decode is answered, counted by reason in ``glbctl counters``
    and exported as ``glbd_control_decode_errors_total{reason}``."""
    f = _write_cfg(tmp_path)
    d = Daemon(str(f), cfgmod.load(f), components=lambda _: [])
    await d.start()
    try:
        sock = str(tmp_path / "ctl.sock")
        reader, writer = await asyncio.open_unix_connection(sock)
        writer.write(b"[" * 5000 + b"\n")
        await writer.drain()
        reply = json.loads(await reader.readline())
        writer.close()
        assert reply["ok"] is False
        counters = await asyncio.to_thread(ctl.request, sock, "counters")
        assert counters["control"]["decode_error_too_deep"] == 1
        got = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in d.samples()}
        assert got[("glbd_control_decode_errors_total", (("reason", "too_deep"),))] == 1
        assert got[("glbd_control_requests_total", ())] >= 1
    finally:
        await d.stop()
