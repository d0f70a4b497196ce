"""``glbctl drain`` / ``undrain`` through the control socket and the CLI: the daemon hands the
command to the bgp part, ``status`` shows the state, and a drain set by the config says how to
undo it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from glbd.cli import glbctl as ctl
from glbd.config import config as cfgmod
from glbd.control.metrics_parts import bgp_samples
from glbd.daemon.daemon import Daemon


def _cfg(tmp: Path, drain: bool = False) -> Path:
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
[bgp]
drain = {str(drain).lower()}
[control]
socket = "{tmp / "ctl.sock"}"
""")
    return f


class FakeBgp:
    """The bgp part's drain interface (the part ORs the config's drain in, like Node)."""

    name = "bgp"

    def __init__(self, d: list[Daemon]) -> None:
        self.d = d
        self.cmd = False

    @property
    def drained(self) -> bool:
        return self.d[0].cfg.bgp.drain or self.cmd

    def set_drain(self, drain: bool) -> None:
        self.cmd = drain

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def reconfigure(self, new: cfgmod.Config, changes: dict[str, Any]) -> None: ...

    def snapshot(self) -> dict[str, Any]:
        return {}

    def samples(self) -> list[Any]:
        return []


def _glbctl(*argv: str) -> tuple[int, Any]:
    """The glbctl command line, in its own process (the daemon logs to this one's stdout)."""
    p = subprocess.run(
        [sys.executable, "-m", "glbd.cli.glbctl", *argv], capture_output=True, text=True
    )
    return p.returncode, json.loads(p.stdout) if p.stdout.strip() else p.stderr


async def test_drain_and_undrain_commands(tmp_path: Path) -> None:
    f = _cfg(tmp_path)
    holder: list[Daemon] = []
    bgp = FakeBgp(holder)
    d = Daemon(str(f), cfgmod.load(f), components=lambda _: [bgp])
    holder.append(d)
    await d.start()
    sock = str(tmp_path / "ctl.sock")
    try:
        st = await asyncio.to_thread(ctl.request, sock, "status")
        assert st["drained"] is False
        rc, res = await asyncio.to_thread(_glbctl, "--socket", sock, "--json", "drain")
        assert rc == 0 and res == {"drained": True, "by_config": False, "note": ""}
        assert (await asyncio.to_thread(ctl.request, sock, "status"))["drained"] is True
        rc, res = await asyncio.to_thread(_glbctl, "--socket", sock, "undrain", "--json")
        assert rc == 0 and res["drained"] is False and bgp.cmd is False
        # drained by the config: undrain cannot undo it and says what will
        _cfg(tmp_path, drain=True)
        assert (await d.reload()).ok
        rc, res = await asyncio.to_thread(_glbctl, "--socket", sock, "--json", "undrain")
        assert rc == 0 and res["drained"] is True and res["by_config"] is True
        assert "[bgp] drain = false" in res["note"]
    finally:
        await d.stop()


def test_drained_metric() -> None:
    (s,) = [x for x in bgp_samples({"drained": True}) if x.name == "glbd_drained"]
    assert s.value == 1.0
    (s,) = [x for x in bgp_samples({"drained": False}) if x.name == "glbd_drained"]
    assert s.value == 0.0
