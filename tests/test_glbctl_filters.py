"""glbctl's filters, applied by the daemon: ``routes PREFIX``, ``neighbors PEER``,
``profiles --changed``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from glbd.app import config as cfgmod
from glbd.app import views
from glbd.app.daemon import Daemon
from glbd.cli import glbctl as ctl

NEIGHBORS = [
    {"peer": "198.18.1.0", "interface": "spine1", "bgp_id": "198.18.4.1", "state": "up"},
]


ROUTES = [{"prefix": p} for p in ("10.0.0.0/8", "10.1.0.0/16", "10.1.2.0/24", "10.2.0.0/16",
                                  "192.0.2.0/24", "2001:db8::/32")]  # fmt: skip


@pytest.mark.parametrize(
    ("prefix", "want"),
    [
        (None, [r["prefix"] for r in ROUTES]),
        ("10.1.0.0/16", ["10.1.0.0/16", "10.1.2.0/24"]),  # exact and contained
        ("10.0.0.0/8", ["10.0.0.0/8", "10.1.0.0/16", "10.1.2.0/24", "10.2.0.0/16"]),
        ("10.1.2.3/32", ["10.0.0.0/8", "10.1.0.0/16", "10.1.2.0/24"]),  # an address: covering
        ("10.3.0.0/16", []),
        ("2001:db8::/16", ["2001:db8::/32"]),
    ],
)
def test_select_routes(prefix: str | None, want: list[str]) -> None:
    assert [r["prefix"] for r in views.select_routes(ROUTES, prefix)] == want


def test_select_neighbors_by_address_bgp_id_or_interface() -> None:
    rows = [NEIGHBORS[0], {**NEIGHBORS[0], "peer": "198.18.2.0", "bgp_id": "198.18.4.2",
                           "interface": "spine2"}]  # fmt: skip
    for key in ("198.18.2.0", "198.18.4.2", "spine2"):
        assert views.select_neighbors(rows, key) == [rows[1]]
    assert views.select_neighbors(rows, "spine9") == []


def _profile(values: list[int], diff: bool = False, excluded: Any = None) -> dict[str, Any]:
    ws = [{"next_hop": f"nh{i}", "value": v} for i, v in enumerate(values)]
    return {"key": "pf", "weights": ws, "diff": diff, "excluded": excluded or {}}


@pytest.mark.parametrize(
    ("row", "changed"),
    [
        (_profile([255, 255]), False),  # plain ECMP, kernel as programmed
        (_profile([255, 128]), True),  # steered
        (_profile([255, 255], diff=True), True),  # kernel differs from what glbd programs
        (_profile([255, 255], excluded={"nh1": "link_down"}), True),
    ],
)
def test_profile_changed(row: dict[str, Any], changed: bool) -> None:
    assert views.profile_changed(row) is changed


class FakeBgp:
    """A bgp part: ``routes(prefix)`` builds only what it is asked for."""

    name = "bgp"

    def __init__(self) -> None:
        self.asked: list[str | None] = []

    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    async def reconfigure(self, new: Any, changes: dict[str, Any]) -> None: ...

    def snapshot(self) -> dict[str, Any]:
        return {"neighbors": NEIGHBORS}

    def section(self, key: str) -> Any:
        return self.snapshot().get(key)

    def routes(self, prefix: str | None = None) -> list[dict[str, Any]]:
        self.asked.append(prefix)
        return views.select_routes(ROUTES, prefix)

    def samples(self) -> list[Any]:
        return []


class FakeFib(FakeBgp):
    name = "fib"

    def snapshot(self) -> dict[str, Any]:
        return {"profiles": [_profile([1, 1]), {**_profile([2, 1]), "key": "pf-steered"}]}


async def test_daemon_filters_before_it_sends(tmp_path: Path) -> None:
    f = tmp_path / "glbd.toml"
    f.write_text(f"""
router_id = "198.18.255.1"
local_as = 65001
role = "load-balancer"
[[neighbors]]
address = "198.18.1.0"
remote_as = 65100
interface = "spine1"
import = ["0.0.0.0/0 le 32", "::/0 le 128"]
export = ["0.0.0.0/0 le 32", "::/0 le 128"]
[control]
socket = "{tmp_path / "ctl.sock"}"
""")
    bgp = FakeBgp()
    d = Daemon(str(f), cfgmod.load(f), components=lambda _: [FakeFib(), bgp])
    await d.start()
    sock = str(tmp_path / "ctl.sock")

    def ask(cmd: str, **args: Any) -> Any:
        return ctl.request(sock, cmd, args)

    try:
        routes = await asyncio.to_thread(ask, "routes", prefix="10.1.2.3")
        assert [r["prefix"] for r in routes] == ["10.0.0.0/8", "10.1.0.0/16", "10.1.2.0/24"]
        assert bgp.asked == ["10.1.2.3/32"]
        assert len(await asyncio.to_thread(ask, "routes")) == len(ROUTES)
        assert await asyncio.to_thread(ask, "neighbors", peer="spine1") == NEIGHBORS
        assert await asyncio.to_thread(ask, "neighbors", peer="spine2") == []
        profiles = await asyncio.to_thread(ask, "profiles", changed=True)
        assert [p["key"] for p in profiles["profiles"]] == ["pf-steered"]
        assert len((await asyncio.to_thread(ask, "profiles"))["profiles"]) == 2
    finally:
        await d.stop()
