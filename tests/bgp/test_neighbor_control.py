"""``glbctl neighbor PEER [received [--pre-policy] | advertised]``, one neighbor's shutdown,
enable, hard and soft reset and drain, and ``glbctl log-level``, through a real daemon, its
control socket and the glbctl command line: the bgp part is the real one over a real
(unstarted) speaker whose RIB is fed UPDATEs like ExaBGP's; its ExaBGP supervisor is replaced
by one that records the commands and config reloads the speaker hands it."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import structlog
from rib_helpers import LEAVES, V4, N, update_from

from glbd.bgp import exabgp_api as api
from glbd.bgp import prefixlist
from glbd.bgp.exabgp import ExabgpParams
from glbd.bgp.ribtypes import RibParams, Role
from glbd.bgp.speaker import BgpSpeaker
from glbd.cli import glbctl as ctl
from glbd.config import config as cfgmod
from glbd.daemon import log as logmod
from glbd.daemon.daemon import Daemon
from glbd.daemon.parts import BgpPart
from tests.glbdtoml import daemon_conf

L1 = replace(LEAVES[1], import_filter=prefixlist.parse(["10.0.0.0/8 le 24"]))
L2 = LEAVES[2]


class Addrs:
    """No neighbor waits for its port."""

    def bgp_rows(self) -> list[dict[str, Any]]:
        return []


class Recorder:
    """In place of the speaker's ExaBGP supervisor: what it is told to send and to run."""

    def __init__(self) -> None:
        self.sent: list[api.Command] = []
        self.configs: list[ExabgpParams] = []

    def send(self, cmd: api.Command) -> None:
        self.sent.append(cmd)

    def reload(self, params: ExabgpParams) -> None:
        self.configs.append(params)

    def take(self) -> list[api.Command]:
        out, self.sent = self.sent, []
        return out


class FakeNode:
    """What the bgp part reads of the node: the speaker and the waiting neighbors."""

    def __init__(self) -> None:
        params = RibParams(V4("10.0.0.11"), 65100, Role.HELPER, (L1, L2), update_coalesce_s=0.0)
        self.bgp = BgpSpeaker(params)
        self.exabgp = Recorder()
        self.bgp.supervisor = cast(Any, self.exabgp)
        self.addrs = Addrs()
        rib = self.bgp.rib
        rib.initial_decisions()
        for i, n in ((1, L1), (2, L2)):
            rib.on_open(n.address, V4(f"10.0.0.{i}"), None)
            rib.on_state(n.address, "up", 0.0)
        # one route the import list takes, one it refuses; leaf2's goes to leaf1
        rib.on_update(update_from(L1, "10.1.0.0/24", "192.0.2.0/24"), 1.0)
        rib.on_update(update_from(L2, "10.2.0.0/24"), 1.0)

    @property
    def drained(self) -> bool:
        return self.bgp.drained

    async def start_bgp(self) -> None: ...

    async def stop_bgp(self) -> None: ...


def _cfg(tmp: Path) -> Path:
    return daemon_conf(
        tmp, rid="10.0.0.11", asn=65100, role="helper", peer="172.16.11.1", peer_as=65001,
        ifname="s1-l1",
    )  # fmt: skip


def glbctl(sock: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "glbd.cli.glbctl", "--socket", sock, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, COLUMNS="200"),
    )


def ok_json(r: subprocess.CompletedProcess[str]) -> Any:
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


async def test_neighbor_detail_received_and_advertised(tmp_path: Path) -> None:
    f = _cfg(tmp_path)
    part = BgpPart(cast(Any, FakeNode()))
    d = Daemon(str(f), cfgmod.load(f), components=lambda _: [part])
    await d.start()
    sock = str(tmp_path / "ctl.sock")

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return glbctl(sock, *argv)

    try:
        got = ok_json(await asyncio.to_thread(run, "neighbor", "172.16.11.1", "--json"))
        assert (got["peer"], got["state"], got["bgp_id"]) == ("172.16.11.1", "up", "10.0.0.1")
        assert got["prefixes_in"] == 1 and got["config"]["import"] == "permit 10.0.0.0/8 le 24"
        assert got["config"]["families"] == ["ipv4", "ipv6"] and got["bfd"] == []
        assert got["drained"] is False

        # by interface: the Adj-RIB-In after the import policy, the refused one counted
        got = ok_json(await asyncio.to_thread(run, "--json", "neighbor", "s1-l1", "received"))
        assert [(r["prefix"], r["used"], r["as_path"]) for r in got["routes"]] == [
            ("10.1.0.0/24", True, [65001])
        ]
        assert got["rejected"] == {"import_denied": 1}

        # before the policy: the route taken and the one refused, with why
        argv = ("neighbor", "172.16.11.1", "received", "--pre-policy", "--json")
        pre = ok_json(await asyncio.to_thread(run, *argv))
        assert [(r["prefix"], r["refused"]) for r in pre["routes"]] == [
            ("10.1.0.0/24", None),
            ("192.0.2.0/24", "import_denied"),
        ], pre
        assert pre["rejected"] == {"import_denied": 1}

        # by BGP id: what leaf2 is sent, next-hop-self and our AS first
        out = ok_json(await asyncio.to_thread(run, "neighbor", "10.0.0.2", "advertised", "--json"))
        assert [(r["prefix"], r["next_hop"], r["as_path"]) for r in out["routes"]] == [
            ("10.1.0.0/24", "172.16.12.2", [65100, 65001])
        ]
        own = ok_json(await asyncio.to_thread(run, "neighbor", "s1-l1", "advertised", "--json"))
        assert [r["prefix"] for r in own["routes"]] == ["10.2.0.0/24"]  # not its own back

        table = await asyncio.to_thread(run, "neighbor", "172.16.11.1", "received")
        assert table.returncode == 0, table.stderr
        for word in ("10.1.0.0/24", "rejected.import_denied", "65001"):
            assert word in table.stdout, (word, table.stdout)

        # an unknown neighbor is a bad argument, named; under --json as JSON on stderr
        bad = await asyncio.to_thread(run, "neighbor", "192.0.2.99")
        assert bad.returncode == ctl.EXIT_USAGE and "no neighbor '192.0.2.99'" in bad.stderr
        bad = await asyncio.to_thread(run, "neighbor", "192.0.2.99", "--json")
        err = json.loads(bad.stderr)
        assert bad.returncode == err["exit"] == ctl.EXIT_USAGE and bad.stdout == ""
        assert err["error"]["reason"] == "bad_args"
        assert "no neighbor" in err["error"]["message"]
        # --pre-policy belongs to "received"
        use = await asyncio.to_thread(run, "neighbor", "s1-l1", "advertised", "--pre-policy")
        assert use.returncode == ctl.EXIT_USAGE and "--pre-policy" in use.stderr
    finally:
        await d.stop()


async def test_log_level_changes_at_run_time(tmp_path: Path) -> None:
    f = _cfg(tmp_path)
    d = Daemon(str(f), cfgmod.load(f))
    await d.start()
    sock = str(tmp_path / "ctl.sock")
    before = logmod.current_level()
    logmod.set_level("info")
    try:
        res = ok_json(await asyncio.to_thread(glbctl, sock, "log-level", "debug", "--json"))
        assert (res["level"], res["previous"], res["config"]) == ("debug", "info", "info")
        assert structlog.get_logger().bind().is_enabled_for(logging.DEBUG)
        assert logging.getLogger().getEffectiveLevel() == logging.DEBUG
        res = ok_json(await asyncio.to_thread(glbctl, sock, "--json", "log-level", "error"))
        assert (res["level"], res["previous"]) == ("error", "debug")
        assert not structlog.get_logger().bind().is_enabled_for(logging.WARNING)
        # a level the daemon does not know is refused there too (not only by the CLI)
        try:
            await asyncio.to_thread(ctl.request, sock, "log-level", {"level": "verbose"})
        except ctl.DaemonError as e:
            assert e.reason == "bad_args"
        else:
            raise AssertionError("log-level verbose was accepted")
        assert logmod.current_level() == "error"
        r = await asyncio.to_thread(glbctl, sock, "log-level", "verbose")
        assert r.returncode == ctl.EXIT_USAGE and "invalid choice" in r.stderr
    finally:
        logmod.set_level(before)
        await d.stop()


async def test_one_neighbor_shutdown_enable_reset_and_drain(tmp_path: Path) -> None:
    f = _cfg(tmp_path)
    node = FakeNode()
    rec = node.exabgp
    rec.take()
    d = Daemon(str(f), cfgmod.load(f), components=lambda _: [BgpPart(cast(Any, node))])
    await d.start()
    sock = str(tmp_path / "ctl.sock")

    async def run(*argv: str) -> Any:
        return ok_json(await asyncio.to_thread(glbctl, sock, *argv, "--json"))

    def peers() -> dict[str, str]:
        return {r["peer"]: r["state"] for r in ctl.request(sock, "neighbors")}

    l1, l2 = L1.address, L2.address
    try:
        # drain toward leaf1 only: its routes again with GRACEFUL_SHUTDOWN; leaf2 untouched
        res = await run("drain", "s1-l1")
        assert (res["peer"], res["drained"], res["state"]) == (str(l1), True, "up")
        sent = rec.take()
        assert [(c.neighbor, str(c.prefix)) for c in sent if isinstance(c, api.Announce)] == [
            (l1, "10.2.0.0/24")
        ]
        (adv,) = (await run("neighbor", "s1-l1", "advertised"))["routes"]
        assert "65535:0" in adv["communities"] and adv["as_path"][:2] == [65100, 65100]
        assert (await run("status"))["drained"] is False  # the router is not
        res = await run("undrain", "172.16.11.1")
        assert res["drained"] is False
        (adv,) = (await run("neighbor", "s1-l1", "advertised"))["routes"]
        assert adv["communities"] == [] and adv["as_path"] == [65100, 65002]
        rec.take()

        # hard reset: a Cease, Administrative Reset (subcode 4); ExaBGP opens it again
        assert (await run("neighbor-reset", "10.0.0.1"))["action"] == "reset"
        assert rec.take() == [api.Teardown(l1, 4)]
        # soft: no teardown; route refresh (in) and the Adj-RIB-Out again (out)
        assert (await run("neighbor-reset", "s1-l1", "--soft"))["action"] == "soft reset"
        assert rec.take() == [api.RouteRefresh(l1, "ipv4 unicast"), api.FlushAdjRibOut(l1)]
        assert api.RouteRefresh(l1).encode() == (
            "neighbor 172.16.11.1 announce route-refresh ipv4 unicast"
        )  # ExaBGP 5.0's "announce route-refresh" and "flush adj-rib out" commands
        assert api.FlushAdjRibOut(l1).encode() == "neighbor 172.16.11.1 flush adj-rib out"

        # shutdown: out of ExaBGP's config, its routes withdrawn from the others at once
        res = await run("neighbor-shutdown", "s1-l1")
        assert (res["shutdown"], res["state"]) == (True, "shutdown")
        assert [n.address for n in rec.configs[-1].neighbors] == [str(l2)]
        assert api.Withdraw(l2, N("10.1.0.0/24"), L2.local_address) in rec.take()
        assert (await asyncio.to_thread(peers)) == {str(l1): "shutdown", str(l2): "up"}
        # a reset of a shut neighbor is refused, not sent to an ExaBGP that no longer has it
        refused = await asyncio.to_thread(glbctl, sock, "neighbor-reset", "s1-l1")
        assert refused.returncode == ctl.EXIT_USAGE and "neighbor-enable" in refused.stderr
        assert rec.take() == []
        # enable: listed again, with what glbd advertises to it
        res = await run("neighbor-enable", "172.16.11.1")
        assert res["shutdown"] is False
        assert [n.address for n in rec.configs[-1].neighbors] == [str(l1), str(l2)]
        assert [(c.neighbor, str(c.prefix)) for c in rec.take()] == [(l1, "10.2.0.0/24")]
        assert (await asyncio.to_thread(peers))[str(l1)] == "down"  # until ExaBGP says up

        bad = await asyncio.to_thread(glbctl, sock, "neighbor-shutdown", "spine9", "--json")
        assert bad.returncode == ctl.EXIT_USAGE
        assert json.loads(bad.stderr)["error"]["reason"] == "bad_args"
    finally:
        await d.stop()
