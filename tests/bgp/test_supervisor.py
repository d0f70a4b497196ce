"""ExaBGP supervisor pieces that need no namespace: config rendering (checked by ExaBGP's own
validator), child environment, command coalescing."""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import itertools
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bgp_helpers import wait_for
from glbdlab.waits import until

from glbd.bgp import exabgp_api as api
from glbd.bgp.exabgp import (
    ExabgpNeighbor,
    ExabgpParams,
    ExabgpSupervisor,
    default_exabgp,
    exabgp_env,
    render_config,
)
from glbd.daemon.paths import UnsafePathError

PARAMS = ExabgpParams(
    "10.0.0.11",
    65100,
    (
        ExabgpNeighbor("172.16.11.1", "172.16.11.2", 65001, 9),
        ExabgpNeighbor("172.16.12.1", "172.16.12.2", 65002, 30),
    ),
)


@pytest.mark.parametrize("raw", [False, True], ids=["parsed", "raw"])
def test_render_config_is_valid_for_exabgp(tmp_path: Path, raw: bool) -> None:
    params = dataclasses.replace(PARAMS, raw_messages=raw)
    text = render_config(params, [sys.executable, "-m", "glbd.bgp.exabgp_bridge", "/x/api.sock"])
    assert ("packets;" in text, "parsed;" in text) == (raw, not raw)
    assert "neighbor 172.16.12.1 {" in text and "hold-time 30;" in text
    assert "receive {" in text and "open;" in text and "neighbor-changes;" in text
    assert "group-updates false;" in text
    assert "adj-rib-in false;" in text  # glbd holds the Adj-RIB-In, ExaBGP need not
    conf = tmp_path / "exabgp.conf"
    conf.write_text(text)
    env = exabgp_env({"PATH": "/usr/bin:/bin"}, tmp_path / "log")
    res = subprocess.run(
        [*default_exabgp(), "validate", str(conf)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_child_env_strips_systemd_and_sets_exabgp() -> None:
    env = exabgp_env(
        {
            "PATH": "/bin",
            "NOTIFY_SOCKET": "/run/systemd/notify",
            "WATCHDOG_USEC": "1",
            "WATCHDOG_PID": "1",
            "LISTEN_FDS": "1",
            "LISTEN_PID": "1",
        },
        Path("/tmp/x.log"),
    )
    assert env["PATH"] == "/bin"
    assert not [k for k in env if k.startswith(("NOTIFY", "WATCHDOG", "LISTEN"))]
    assert env["exabgp.daemon.user"] == "root"
    assert env["exabgp.api.cli"] == "false"
    assert env["exabgp.api.compact"] == "true"  # prefixes as bare strings: less JSON
    assert env["exabgp.daemon.daemonize"] == "false"


def test_send_coalesces_per_neighbor_and_prefix() -> None:
    sup = ExabgpSupervisor(
        PARAMS, netns=None, on_line=lambda s: None, on_lost=lambda: None, on_ready=lambda: None
    )
    nb = ipaddress.ip_address("172.16.11.1")
    p = ipaddress.ip_network("10.1.0.0/24")
    sup.send(api.Announce(nb, p, None))
    sup.send(api.Withdraw(nb, p))
    sup.send(api.Teardown(nb, 10))
    assert sup.stats.coalesced == 1
    assert sup.queued() == [api.Withdraw(nb, p), api.Teardown(nb, 10)]
    sup.dir.rmdir()


async def test_acks_window_restart_and_replay() -> None:
    """With a fake ExaBGP: windowed writes all acknowledged, errors counted, a crash restarts
    the child with backoff and calls on_lost then on_ready again (where the owner replays)."""

    fake = Path(__file__).with_name("fake_exabgp.py")
    lines: list[str] = []
    calls: list[str] = []
    params = ExabgpParams(
        "10.0.0.2",
        65002,
        (ExabgpNeighbor("192.0.2.1", "192.0.2.2", 65001),),
        exabgp=(sys.executable, str(fake)),
        window=8,
        backoff_initial_s=0.1,
        stop_grace_s=2.0,
    )
    sup = ExabgpSupervisor(
        params,
        netns=None,
        on_line=lines.append,
        on_lost=lambda: calls.append("lost"),
        on_ready=lambda: calls.append("ready"),
    )
    nb = ipaddress.ip_address("192.0.2.1")
    try:
        await sup.start()
        for i in range(200):
            sup.send(api.Announce(nb, ipaddress.ip_network(f"10.1.{i}.0/24"), None))
        assert await sup.drain(20)
        assert sup.stats.acked_ok == 200 and sup.stats.sent == 200
        assert any('"state": "up"' in ln for ln in lines)
        sup.send(api.Announce(nb, ipaddress.ip_network("10.99.0.0/24"), None))
        assert await sup.drain(10)
        assert sup.stats.acked_error == 1
        first_pid = sup.pid
        sup.send(api.Announce(nb, ipaddress.ip_network("10.66.0.0/24"), None))
        await wait_for(lambda: calls.count("ready") >= 2 and sup.connected, 10, "a restart")
        assert calls == ["ready", "lost", "ready"], calls
        assert sup.pid != first_pid and sup.generation == 2 and sup.stats.deaths == 1
        sup.send(api.Announce(nb, ipaddress.ip_network("10.2.0.0/24"), None))
        assert await sup.drain(10)
    finally:
        await sup.stop()
    assert not sup.dir.exists()


async def test_reader_yields_to_the_loop_during_a_burst() -> None:
    """readline() never suspends while lines are buffered; the reader must still give other
    tasks (heartbeats, BFD events, FIB syncs, glbctl) a turn during a burst of updates."""
    seen: list[str] = []

    def on_line(line: str) -> None:  # ~50 us of work per line, like parsing an update
        t = time.perf_counter() + 50e-6
        while time.perf_counter() < t:
            pass
        seen.append(line)

    sup = ExabgpSupervisor(
        PARAMS, netns=None, on_line=on_line, on_lost=lambda: None, on_ready=lambda: None
    )
    reader = asyncio.StreamReader(limit=1 << 20)
    reader.feed_data(b"".join(b'{"type": "keepalive"}\n' for _ in range(6000)))
    reader.feed_eof()
    turns: list[int] = []  # lines processed when the other task got its turn
    ticking = asyncio.Event()

    async def ticker() -> None:
        ticking.set()
        while True:
            await asyncio.sleep(0)  # the other task: takes every turn the loop gives it
            turns.append(len(seen))

    t = asyncio.create_task(ticker())
    await ticking.wait()
    await sup.read_lines(reader)
    t.cancel()
    assert len(seen) == 6000
    # ~2 ms slices of ~50 us lines: about 40 lines between turns (preemption only shortens a
    # slice); without yielding, the other task would wait for all 6000
    between = [b - a for a, b in itertools.pairwise(turns)]
    assert len(turns) > 20 and max(between) < 200, (len(turns), max(between, default=None))


# ---- the runtime directory against a local attacker ------------------------------------------
# The daemon puts ExaBGP's directory at a predictable name next to the control socket; the file
# in it names the command ExaBGP runs as root. Whatever sits at that name already, or a parent
# others can write, must never be used.

NOBODY = 65534


def _fake_params(runtime_dir: Path) -> ExabgpParams:
    return ExabgpParams(
        "10.0.0.2",
        65002,
        (ExabgpNeighbor("192.0.2.1", "192.0.2.2", 65001),),
        exabgp=(sys.executable, str(Path(__file__).with_name("fake_exabgp.py"))),
        runtime_dir=runtime_dir,
        stop_grace_s=2.0,
    )


def _sup(runtime_dir: Path) -> ExabgpSupervisor:
    return ExabgpSupervisor(
        _fake_params(runtime_dir),
        netns=None,
        on_line=lambda s: None,
        on_lost=lambda: None,
        on_ready=lambda: None,
    )


def _assert_private(d: Path) -> None:
    st = os.lstat(d)
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()
    assert stat.S_IMODE(st.st_mode) == 0o700


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
async def test_runtime_dir_made_by_someone_else_is_not_used(tmp_path: Path) -> None:
    planted = tmp_path / "exabgp-4242"
    planted.mkdir(mode=0o777)
    os.chmod(planted, 0o777)
    os.chown(planted, NOBODY, NOBODY)
    sup = _sup(planted)
    try:
        await sup.start()
        assert sup.connected
        assert sup.dir != planted and sup.dir.parent == tmp_path
        _assert_private(sup.dir)
        sup.reload(_fake_params(planted))
    finally:
        await sup.stop()
    assert list(planted.iterdir()) == []  # nothing was written into the attacker's directory
    assert not sup.dir.exists()


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
async def test_runtime_dir_symlink_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "attacker"
    target.mkdir(mode=0o777)
    os.chown(target, NOBODY, NOBODY)
    link = tmp_path / "exabgp-4242"
    link.symlink_to(target)
    os.lchown(link, NOBODY, NOBODY)
    sup = _sup(link)
    try:
        await sup.start()
        assert sup.connected
        assert sup.dir != link and not sup.dir.is_symlink()
        _assert_private(sup.dir)
        sup.reload(_fake_params(link))
    finally:
        await sup.stop()
    assert list(target.iterdir()) == []
    assert link.is_symlink()  # left alone: not ours


async def test_stale_private_dir_of_ours_is_reused_and_files_are_replaced_not_followed(
    tmp_path: Path,
) -> None:
    d = tmp_path / "exabgp-4242"
    d.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("untouched\n")
    (d / "exabgp.conf").symlink_to(victim)  # e.g. left by an older run: never written through
    sup = _sup(d)
    try:
        await sup.start()
        assert sup.connected and sup.dir == d
        _assert_private(d)
        assert not (d / "exabgp.conf").is_symlink()
        assert stat.S_IMODE(os.lstat(d / "exabgp.conf").st_mode) == 0o600
    finally:
        await sup.stop()
    assert victim.read_text() == "untouched\n"
    assert not d.exists()


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o775])
async def test_runtime_dir_under_a_directory_others_can_write_is_refused(
    tmp_path: Path, mode: int
) -> None:
    public = tmp_path / "public"
    public.mkdir()
    os.chmod(public, mode)
    sup = _sup(public / "exabgp-4242")
    with pytest.raises(UnsafePathError) as ei:
        await sup.start()
    msg = str(ei.value)
    assert str(public) in msg and "writable" in msg and "\n" not in msg
    assert list(public.iterdir()) == [] and sup.pid is None
    await sup.stop()


async def test_a_reload_is_signalled_again_in_case_exabgp_dropped_it(tmp_path: Path) -> None:
    """ExaBGP drops a SIGUSR1 that arrives while it has routes to send: the supervisor sends
    it again, and a reload in between starts the repeats over."""
    sup = _sup(tmp_path / "exabgp")
    try:
        await sup.start()
        assert sup.connected
        signals = sup.config_path.with_name(sup.config_path.name + ".sigusr1")
        sup.reload(_fake_params(tmp_path / "exabgp"))
        await until(
            lambda: signals.exists() and len(signals.read_text().splitlines()) >= 2,
            what="a second SIGUSR1",
        )
        assert sup.snapshot()["reload_signals"] >= 2
    finally:
        await sup.stop()
