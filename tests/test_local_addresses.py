"""A neighbor's local address, or why it has none yet (its port is missing or has no address),
and the rows glbctl shows for a neighbor that waits. Uses only the loopback interface."""

from __future__ import annotations

import asyncio
import ipaddress
import tomllib
from pathlib import Path
from typing import Any

import pytest

from glbd.bgp.neighbors import LocalAddresses
from glbd.bgp.rib import Rib
from glbd.bgp.ribtypes import NeighborParams, RibParams, Role
from glbd.config import config, params
from glbd.config.config_peers import NeighborSection

ROOT = Path(__file__).resolve().parents[1]
MISSING_IF = "glbdtest-nope0"


def _neighbor(**kw: Any) -> NeighborSection:
    return NeighborSection.model_validate(
        {"address": "127.0.0.2", "remote_as": 65100, "interface": "lo", **kw}
    )


def test_missing_interface_waits_for_it() -> None:
    r = params.resolve(_neighbor(interface=MISSING_IF))
    assert isinstance(r, params.Unresolved)
    assert r.reason is params.Waiting.WAITING_FOR_INTERFACE
    assert MISSING_IF in r.detail


def test_configured_address_that_is_not_ours_waits_for_it() -> None:
    r = params.resolve(_neighbor(local_address="192.0.2.77"))
    assert isinstance(r, params.Unresolved)
    assert r.reason is params.Waiting.NO_LOCAL_ADDRESS
    assert "192.0.2.77" in r.detail


def test_configured_address_that_is_ours_is_used() -> None:
    assert params.resolve(_neighbor(local_address="127.0.0.1")) == ipaddress.ip_address("127.0.0.1")


def test_automatic_address_is_the_kernels_choice() -> None:
    assert params.resolve(_neighbor()) == ipaddress.ip_address("127.0.0.1")


def _leaf_config(interface: str) -> config.Config:
    d = tomllib.loads((ROOT / "conf" / "leaf.toml").read_text())
    d["neighbors"][1]["interface"] = interface
    d["neighbors"][1]["local_address"] = "127.0.0.1"
    return config.parse(d, "leaf.toml")


def test_waiting_neighbors_are_left_out_of_the_sessions_and_shown_with_their_reason() -> None:
    cfg = _leaf_config(MISSING_IF)

    async def run() -> LocalAddresses:
        async def nothing(found: list[Any]) -> None:
            return None

        addrs = LocalAddresses(asyncio.get_running_loop(), nothing)
        addrs.update(cfg)
        await addrs.close()
        return addrs

    addrs = asyncio.run(run())
    sw1, missing = cfg.neighbors[0], cfg.neighbors[1]
    assert set(addrs.waiting) == {sw1.address, missing.address}  # no leaf1-sw1 here either
    assert addrs.local == {}
    assert params.rib_params(cfg, addrs.local).neighbors == ()
    assert params.bfd_sessions(cfg, addrs.local) == []
    rows = {r["peer"]: r for r in addrs.bgp_rows()}
    assert rows[str(missing.address)]["state"] == "waiting_for_interface"
    assert rows[str(missing.address)]["local_address"] == "127.0.0.1"
    # the same keys as a configured neighbor's row, so glbctl and scripts read both alike
    rib = Rib(
        RibParams(
            router_id=cfg.router_id,
            local_as=cfg.local_as,
            role=Role.LOAD_BALANCER,
            neighbors=(NeighborParams(missing.address, 65100, ipaddress.ip_address("127.0.0.1")),),
        )
    )
    assert set(rows[str(missing.address)]) == set(rib.neighbors_snapshot(0.0)[0])
    bfd_rows = {r["peer"]: r["state"] for r in addrs.bfd_rows(cfg)}
    assert bfd_rows[str(missing.address)] == "waiting_for_interface"


@pytest.mark.parametrize("resolved", [True, False])
def test_rib_and_bfd_params_take_only_the_resolved_neighbors(resolved: bool) -> None:
    cfg = _leaf_config(MISSING_IF)
    local = {cfg.neighbors[1].address: ipaddress.ip_address("127.0.0.1")} if resolved else {}
    rib = params.rib_params(cfg, local)
    assert [n.address for n in rib.neighbors] == list(local)
    assert [s.peer for s in params.bfd_sessions(cfg, local)] == [str(a) for a in local]


def test_a_waiting_neighbor_is_retried_until_its_port_is_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cfg = _leaf_config(MISSING_IF)
    up: set[str] = set()  # the interfaces that are "up" (stimulus)
    real = params.resolve

    def resolve(n: NeighborSection) -> Any:
        return real(n.model_copy(update={"interface": "lo"})) if n.interface in up else real(n)

    monkeypatch.setattr(params, "resolve", resolve)

    async def run() -> tuple[list[Any], LocalAddresses]:
        got: list[Any] = []
        done = asyncio.Event()

        async def on_resolved(found: list[Any]) -> None:
            got.extend(found)
            done.set()

        addrs = LocalAddresses(asyncio.get_running_loop(), on_resolved)
        addrs.update(cfg)
        assert cfg.neighbors[1].address in addrs.waiting
        up.add(MISSING_IF)
        await asyncio.wait_for(done.wait(), 30)
        await addrs.close()
        return got, addrs

    got, addrs = asyncio.run(run())
    missing = cfg.neighbors[1].address
    assert got == [missing]
    assert addrs.local == {missing: ipaddress.ip_address("127.0.0.1")}
    assert missing not in addrs.waiting
    assert [r["peer"] for r in addrs.bgp_rows()] == [str(cfg.neighbors[0].address)]


def test_a_port_deleted_later_sends_its_neighbor_back_to_waiting_and_back_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Set up, its port deleted (no reload): ``on_lost`` tears it down and it waits again,
    shown as waiting; the port re-created: ``on_resolved`` sets it up again."""
    cfg = _leaf_config(MISSING_IF)
    up: set[str] = {MISSING_IF}  # the interfaces that exist (stimulus)
    real_resolve, real_still_ours = params.resolve, params.still_ours

    def on_lo(n: NeighborSection) -> NeighborSection:
        return n.model_copy(update={"interface": "lo"})

    def resolve(n: NeighborSection) -> Any:
        return real_resolve(on_lo(n)) if n.interface in up else real_resolve(n)

    def still_ours(n: NeighborSection, addr: Any) -> bool:
        return real_still_ours(on_lo(n), addr) if n.interface in up else real_still_ours(n, addr)

    monkeypatch.setattr(params, "resolve", resolve)
    monkeypatch.setattr(params, "still_ours", still_ours)
    port = cfg.neighbors[1].address

    async def run() -> tuple[list[str], dict[str, str]]:
        calls: list[str] = []
        events: asyncio.Queue[str] = asyncio.Queue()

        async def on_resolved(found: list[Any]) -> None:
            calls.append(f"resolved {found}")
            await events.put("resolved")

        async def on_lost(lost: list[Any]) -> None:
            calls.append(f"lost {lost}")
            await events.put("lost")

        addrs = LocalAddresses(asyncio.get_running_loop(), on_resolved, on_lost, watch_s=0.01)
        addrs.update(cfg)
        assert port in addrs.local and port not in addrs.waiting
        up.discard(MISSING_IF)  # the port is deleted
        assert await asyncio.wait_for(events.get(), 30) == "lost"
        assert port not in addrs.local
        waiting = {r["peer"]: r["state"] for r in addrs.bgp_rows()}
        up.add(MISSING_IF)  # and created again
        assert await asyncio.wait_for(events.get(), 30) == "resolved"
        await addrs.close()
        assert addrs.local[port] == ipaddress.ip_address("127.0.0.1")
        assert port not in addrs.waiting
        return calls, waiting

    calls, waiting = asyncio.run(run())
    assert calls == [f"lost {[port]}", f"resolved {[port]}"]
    assert waiting[str(port)] == "waiting_for_interface"
