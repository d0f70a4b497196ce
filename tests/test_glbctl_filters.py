"""glbctl's filters, applied by the daemon: ``routes PREFIX``, ``neighbors PEER``,
``profiles --changed``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from glbd.cli import glbctl as ctl
from glbd.config import config as cfgmod
from glbd.control import views
from glbd.daemon.daemon import Daemon
from tests.glbdtoml import daemon_conf

NEIGHBORS = [
    {"peer": "198.18.1.0", "interface": "spine1", "bgp_id": "198.18.4.1", "state": "up"},
]


def _conf(tmp: Path) -> Path:
    return daemon_conf(
        tmp, rid="198.18.255.1", asn=65001, role="load-balancer", peer="198.18.1.0",
        peer_as=65100, ifname="spine1",
    )  # fmt: skip


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
    f = _conf(tmp_path)
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


# ---- bfd / links / heartbeats / quality: --neighbor, --interface, --state ---------------------

BFD_ROWS = [
    {"peer": "198.18.1.0", "interface": "spine1", "state": "up"},
    {"peer": "198.18.2.0", "interface": "spine2", "state": "down"},
    {"peer": "fe80::2", "interface": "spine2", "state": "waiting_for_interface"},
]
LINK_ROWS = [{"ifname": "spine1", "down": False}, {"ifname": "spine2", "down": True}]
HEARTBEAT_ROWS = [
    {"port": 6149, "sender": None, "receiver": {
        "accepted": 9,
        "interfaces": [
            {"ifname": "spine1", "neighbor_id": "198.18.4.1", "neighbor_address": "198.18.1.0"},
            {"ifname": "spine2", "neighbor_id": "198.18.4.2", "neighbor_address": "198.18.2.0"},
        ],
        "senders": [{"node_id": "198.18.4.1", "sequence": 5}, {"node_id": "198.18.4.2"}],
    }},
]  # fmt: skip


def _nh(addr: str, ifname: str, bgp_id: str, source: str, down: bool = False) -> dict[str, Any]:
    return {"address": addr, "ifname": ifname, "bgp_id": bgp_id,
            "weight": {"value": 1, "source": source, "inputs": {"local_down": down}}}  # fmt: skip


QUALITY_VIEW = {
    "role": "load-balancer",
    "profiles": [
        {"key": "pf-1", "next_hops": [_nh("198.18.1.0", "spine1", "198.18.4.1", "glb"),
                                      _nh("198.18.2.0", "spine2", "198.18.4.2", "dlb", True)]},
        {"key": "pf-2", "next_hops": [_nh("198.18.2.0", "spine2", "198.18.4.2", "dlb", True)]},
    ],
    "local": {"spine1": {"band": 7}, "spine2": {"band": 0}},
    "remote": {"198.18.4.1": [], "198.18.4.2": []},
}  # fmt: skip
BGP_ROWS = [
    {"peer": "198.18.1.0", "bgp_id": "198.18.4.1", "interface": "spine1"},
    {"peer": "198.18.2.0", "bgp_id": "198.18.4.2", "interface": "spine2"},
]


def _f(**args: str) -> views.RowFilter:
    return views.row_filter(args, BGP_ROWS)


@pytest.mark.parametrize(
    ("args", "want"),
    [
        ({}, ["198.18.1.0", "198.18.2.0", "fe80::2"]),
        ({"neighbor": "spine1"}, ["198.18.1.0"]),  # by interface: its address
        ({"neighbor": "198.18.4.2"}, ["198.18.2.0"]),  # by BGP id
        ({"neighbor": "198.18.2.0"}, ["198.18.2.0"]),
        ({"interface": "spine2"}, ["198.18.2.0", "fe80::2"]),
        ({"state": "UP"}, ["198.18.1.0"]),
        ({"interface": "spine2", "state": "waiting_for_interface"}, ["fe80::2"]),
        ({"neighbor": "spine9"}, []),
    ],
)
def test_bfd_rows_filtered(args: dict[str, str], want: list[str]) -> None:
    assert [r["peer"] for r in views.filter_section("bfd", BFD_ROWS, _f(**args))] == want


def test_links_heartbeats_quality_filtered() -> None:
    links = views.filter_section("links", LINK_ROWS, _f(neighbor="198.18.2.0"))
    assert links == [LINK_ROWS[1]]  # a link has no peer: the neighbor's interface
    assert views.filter_section("links", LINK_ROWS, _f(state="up")) == [LINK_ROWS[0]]

    (hb,) = views.filter_section("heartbeats", HEARTBEAT_ROWS, _f(interface="spine2"))
    assert [p["ifname"] for p in hb["receiver"]["interfaces"]] == ["spine2"]
    assert [s["node_id"] for s in hb["receiver"]["senders"]] == ["198.18.4.2"]
    assert hb["receiver"]["accepted"] == 9  # the endpoint's totals stay
    (hb,) = views.filter_section("heartbeats", HEARTBEAT_ROWS, _f(neighbor="198.18.1.0"))
    assert [s["node_id"] for s in hb["receiver"]["senders"]] == ["198.18.4.1"]

    q = views.filter_section("quality", QUALITY_VIEW, _f(neighbor="spine1"))
    assert [(p["key"], [n["ifname"] for n in p["next_hops"]]) for p in q["profiles"]] == [
        ("pf-1", ["spine1"])
    ]  # pf-2 has no next hop left: gone
    assert list(q["local"]) == ["spine1"] and list(q["remote"]) == ["198.18.4.1"]
    assert q["role"] == "load-balancer"
    down = views.filter_section("quality", QUALITY_VIEW, _f(state="down"))
    assert [p["key"] for p in down["profiles"]] == ["pf-1", "pf-2"]
    assert {n["ifname"] for p in down["profiles"] for n in p["next_hops"]} == {"spine2"}
    glb = views.filter_section("quality", QUALITY_VIEW, _f(state="glb"))
    assert [p["key"] for p in glb["profiles"]] == ["pf-1"]
    # no filter: the very same result; a note (part not running) passes through
    assert views.filter_section("quality", QUALITY_VIEW, _f()) is QUALITY_VIEW
    note = {"sessions": [], "note": "bfd is not running"}
    assert views.filter_section("bfd", note, _f(state="up")) is note


class FakeBfd(FakeBgp):
    name = "bfd"

    def snapshot(self) -> dict[str, Any]:
        return {"sessions": BFD_ROWS}


class FakeQuality(FakeBgp):
    name = "quality"

    def snapshot(self) -> dict[str, Any]:
        return {"links": LINK_ROWS, "heartbeats": HEARTBEAT_ROWS, "quality": QUALITY_VIEW}


class FakeBgpPeers(FakeBgp):
    """Two BGP neighbors, by whose rows a --neighbor name is resolved."""

    def snapshot(self) -> dict[str, Any]:
        return {"neighbors": BGP_ROWS}


async def test_daemon_filters_sections_by_neighbor_interface_state(tmp_path: Path) -> None:
    """The daemon resolves a neighbor's name through the BGP neighbors, then filters."""
    f = _conf(tmp_path)
    parts = [FakeQuality(), FakeBfd(), FakeBgpPeers()]
    d = Daemon(str(f), cfgmod.load(f), components=lambda _: list(parts))
    await d.start()
    sock = str(tmp_path / "ctl.sock")

    def ask(cmd: str, **args: Any) -> Any:
        return ctl.request(sock, cmd, args)

    try:
        assert await asyncio.to_thread(ask, "bfd", neighbor="198.18.4.1") == [BFD_ROWS[0]]
        assert await asyncio.to_thread(ask, "bfd", interface="spine2", state="down") == [
            BFD_ROWS[1]
        ]
        assert await asyncio.to_thread(ask, "links", neighbor="198.18.4.2") == [LINK_ROWS[1]]
        (hb,) = await asyncio.to_thread(ask, "heartbeats", neighbor="spine1")
        assert [p["ifname"] for p in hb["receiver"]["interfaces"]] == ["spine1"]
        q = await asyncio.to_thread(ask, "quality", neighbor="spine2", state="down")
        assert [p["key"] for p in q["profiles"]] == ["pf-1", "pf-2"]
        assert len(await asyncio.to_thread(ask, "bfd")) == len(BFD_ROWS)
    finally:
        await d.stop()
