"""``glbctl graceful-restart`` and the armed stop, wired in the node with stand-ins for the BFD
engine, the BGP speaker and the FIB: the order of the stop's steps, what each is told, and the
control socket's answers (glbctl's parser and arguments included)."""

from __future__ import annotations

import asyncio
import ipaddress
from pathlib import Path
from typing import Any

from glbd.base.reasons import StopKind
from glbd.cli import glbctl as ctl
from glbd.config import config as cfgmod
from glbd.daemon.daemon import Daemon
from glbd.daemon.node import Node

S1, S2 = ipaddress.ip_address("198.18.1.0"), ipaddress.ip_address("198.18.2.0")


def _cfg(tmp: Path, mode: str = "full", fib_on_stop: str = "remove") -> Path:
    f = tmp / "glbd.toml"
    f.write_text(f"""
router_id = "198.18.255.1"
local_as = 65001
role = "load-balancer"
[[neighbors]]
address = "198.18.1.0"
remote_as = 65100
interface = "leaf1-sw1"
import = ["0.0.0.0/0 le 32"]
export = ["0.0.0.0/0 le 32"]
[bgp]
graceful_restart = "{mode}"
[fib]
on_stop = "{fib_on_stop}"
[control]
socket = "{tmp / "ctl.sock"}"
""")
    return f


class Steps:
    def __init__(self) -> None:
        self.calls: list[Any] = []


class Bfd:
    def __init__(self, steps: Steps) -> None:
        self.steps = steps

    def snapshot(self) -> dict[str, Any]:
        return {
            "sessions": [
                {"interface": "sw1", "peer": str(S1)},
                {"interface": "sw2", "peer": str(S2)},
            ]
        }

    def admin_down(self, interface: str, peer: str) -> None:
        self.steps.calls.append(("admin_down", interface, peer))

    def stop(self) -> None:
        self.steps.calls.append("bfd_stop")


class Bgp:
    def __init__(self, steps: Steps, sessions: dict[Any, bool]) -> None:
        self.steps, self.sessions = steps, sessions

    def gr_sessions(self) -> dict[Any, bool]:
        return dict(self.sessions)

    async def stop(self, keep: Any = ()) -> None:
        self.steps.calls.append(("bgp_stop", tuple(keep)))


class Fib:
    def __init__(self, steps: Steps) -> None:
        self.steps = steps

    async def stop(self, keep: bool) -> None:
        self.steps.calls.append(("fib_stop", keep))


async def _node(tmp: Path, sessions: dict[Any, bool], **kw: str) -> tuple[Node, Steps]:
    f = _cfg(tmp, **kw)
    node = Node(Daemon(str(f), cfgmod.load(f), components=lambda _: []))
    steps = Steps()
    node.bfd, node.bgp, node.fib = Bfd(steps), Bgp(steps, sessions), Fib(steps)  # type: ignore[assignment]
    return node, steps


async def _stop(node: Node) -> None:
    await node.stop_bgp()
    await node.stop_bfd()
    await node.fib_service.stop()


async def test_armed_stop_sends_admin_down_then_kills_quietly_and_keeps_the_fib(
    tmp_path: Path,
) -> None:
    node, steps = await _node(tmp_path, {S1: True, S2: False})
    res = node.graceful_restart(True)
    assert res["armed"] and res["next_stop"] == "graceful_restart" and res["keep"] == [str(S1)]
    assert res["withdraw"] == {str(S2): "peer_not_capable"} and res["note"]
    assert node.graceful_restart_status()["sessions_kept"] == 1
    plan = await node.prepare_stop()
    assert plan.kind is StopKind.GRACEFUL_RESTART
    await _stop(node)
    assert steps.calls == [
        ("admin_down", "sw1", str(S1)),
        ("admin_down", "sw2", str(S2)),
        ("bgp_stop", (S1,)),  # S2 withdrawn first, S1 kept: ExaBGP killed
        "bfd_stop",
        ("fib_stop", True),  # kept although fib.on_stop = "remove"
    ]
    assert node.cfg.flowlet.on_stop == "keep"
    assert node.counters["graceful_restart_arms"] == 1


async def test_unarmed_cancelled_or_helper_stop_is_the_planned_one(tmp_path: Path) -> None:
    for mode, arm in (("full", False), ("full", None), ("helper", True)):
        node, steps = await _node(tmp_path, {S1: True}, mode=mode)
        if arm is not None:
            node.graceful_restart(True)
        if arm is False:
            assert node.graceful_restart(False)["armed"] is False  # --cancel
        plan = await node.prepare_stop()
        assert plan.kind is StopKind.PLANNED, mode
        await _stop(node)
        assert steps.calls == [("bgp_stop", ()), "bfd_stop", ("fib_stop", False)], mode


async def test_control_command_and_status_on_a_daemon_without_bgp(tmp_path: Path) -> None:
    f = _cfg(tmp_path)
    d = Daemon(str(f), cfgmod.load(f), components=lambda _: [])
    await d.start()
    try:
        sock = str(tmp_path / "ctl.sock")
        st = await asyncio.to_thread(ctl.request, sock, "status")
        assert st["graceful_restart"] == {
            "armed": False,
            "expires_in_s": None,
            "next_stop": "planned",
            "fallback": "not_armed",
            "sessions_kept": 0,
            "sessions_withdrawn": 0,
        }
        res = await asyncio.to_thread(ctl.request, sock, "graceful-restart", {"cancel": True})
        assert res["armed"] is False and "bgp is not running" in res["note"]
    finally:
        await d.stop()


def test_glbctl_parses_the_command() -> None:
    args = ctl.build_parser().parse_args(["graceful-restart", "--cancel", "--json"])
    assert args.cmd == "graceful-restart" and ctl.request_args(args) == {"cancel": True}
    assert ctl.request_args(ctl.build_parser().parse_args(["graceful-restart"])) == {}
