"""Conditional origination in the real kernel with real peers: a glbd leaf (``glbd run``) with a
host port, an FRR 10.x spine, and an FRR leaf behind the spine.

The leaf's host port ``host0`` holds 198.19.1.1/24 (``[bgp.redistribute_connected]``) and
198.19.9.0/24 is configured behind it (``[[bgp.network]]``); 10.99.1.0/24 is a static
``originate``. The host's end of the cable goes down (carrier off at the leaf): within a second
the spine and the other leaf have neither prefix in their kernels, and the static one stays.
The host port comes back: both prefixes return. A reload that drops
``[bgp.redistribute_connected]`` withdraws the connected subnet only. Every wait is on the
condition; the times are printed."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from bgp_helpers import (
    bgp_only_tail,
    frr_bgp_conf,
    frr_paths,
    glbd_daemon,
    kernel_gateways,
    link,
)
from glbdlab.frr import FrrInstance
from glbdlab.netns import Lab, Netns
from glbdlab.waits import until

from glbd.cli import glbctl as ctl
from tests.glbdtoml import PERMIT_ALL

pytestmark = [pytest.mark.netns, pytest.mark.frr, pytest.mark.slow]

CONNECTED = "198.19.1.0/24"
NETWORK = "198.19.9.0/24"
STATIC = "10.99.1.0/24"
#: the issue's bound: the leaf withdraws within a second
WITHDRAW_BOUND_S = 1.0


def leaf_conf(run_dir: Path, *, connected: bool = True) -> str:
    redistribute = [
        "[bgp.redistribute_connected]",
        'interfaces = ["host*"]',
        'prefix_list = ["permit 198.19.0.0/16 le 24"]',
        "",
    ]
    return "\n".join(
        [
            'router_id = "10.0.0.1"',
            "local_as = 65001",
            'role = "load-balancer"',
            f'originate = ["{STATIC}"]',
            "",
            "[[neighbors]]",
            'address = "172.16.11.1"',
            "remote_as = 65100",
            'interface = "l1-s"',
            'local_address = "172.16.11.2"',
            f"import = {PERMIT_ALL}",
            f"export = {PERMIT_ALL}",
            "",
            "[bgp]",
            "hold_time = 9",
            "",
            "[[bgp.network]]",
            f'prefix = "{NETWORK}"',
            'interface = "host0"',
            "",
            *(redistribute if connected else []),
            *bgp_only_tail(run_dir),
        ]
    )


def origins(sock: str) -> dict[str, Any]:
    """``glbctl routes`` on the leaf: prefix -> its ``origin`` (learned routes left out)."""
    try:
        rows = ctl.request(sock, "routes", timeout=2.0)
    except ctl.DaemonError:
        return {}
    return {r["prefix"]: r["origin"] for r in rows or [] if r.get("origin")}


async def timed(cond: Callable[[], object], since: float, what: str) -> float:
    """Wait for ``cond`` (polled every 10 ms, 10 s at most); seconds from ``since``."""
    await until(cond, 10.0, 0.01, what)
    return time.monotonic() - since


def has(ns: Netns, gateway: str, *prefixes: str) -> bool:
    return all(kernel_gateways(ns, p) == {gateway} for p in prefixes)


def has_none(ns: Netns, *prefixes: str) -> bool:
    return not any(kernel_gateways(ns, p) for p in prefixes)


async def test_host_port_down_withdraws_within_a_second_and_up_announces(
    netns_lab: Lab, tmp_path: Path
) -> None:
    lab = netns_lab
    leaf1, spine, leaf2, host = (lab.netns(n) for n in ("leaf1", "spine", "leaf2", "host"))
    _, l1_a = link(lab, spine, "s-l1", leaf1, "l1-s", "172.16.11")
    s_b, l2_a = link(lab, spine, "s-l2", leaf2, "l2-s", "172.16.12")
    lab.veth(leaf1, "host0", host, "eth0", a_addr="198.19.1.1/24", b_addr="198.19.1.2/24")
    spine_frr = FrrInstance(spine, hostname="spine").start(
        frr_bgp_conf(65100, "10.0.0.100", [(l1_a, 65001), (l2_a, 65002)])
    )
    FrrInstance(leaf2, hostname="leaf2").start(frr_bgp_conf(65002, "10.0.0.2", [(s_b, 65100)]))
    with glbd_daemon(leaf1, tmp_path, leaf_conf(tmp_path)) as sock:
        every = (CONNECTED, NETWORK, STATIC)
        await until(lambda: has(spine, l1_a, *every), 90, 0.1, "the spine has all three")
        await until(lambda: has(leaf2, s_b, *every), 30, 0.1, "leaf2 has all three")
        # the fabric port's subnet is not a host port's: never advertised
        assert frr_paths(spine_frr, "172.16.11.0/24") == []
        got = origins(sock)
        assert got[CONNECTED] | {"state_for_s": 0} == {
            "source": "connected",
            "interface": "host0",
            "state": "announced",
            "reason": "connected",
            "state_for_s": 0,
        }
        assert (got[NETWORK]["reason"], got[STATIC]["reason"]) == ("interface_up", "static")

        # the host's end goes down: no carrier on the leaf's host0
        t0 = time.monotonic()
        host.link_down("eth0")
        at_spine = await timed(lambda: has_none(spine, CONNECTED, NETWORK), t0, "spine withdraw")
        at_leaf2 = await timed(lambda: has_none(leaf2, CONNECTED, NETWORK), t0, "leaf2 withdraw")
        print(
            f"\nhost port down -> withdrawn from the spine's kernel in {at_spine * 1e3:.0f} ms, "
            f"from the other leaf's in {at_leaf2 * 1e3:.0f} ms"
        )
        assert at_spine < WITHDRAW_BOUND_S and at_leaf2 < WITHDRAW_BOUND_S
        assert has(spine, l1_a, STATIC) and has(leaf2, s_b, STATIC)  # nothing else moved
        got = origins(sock)
        assert (got[CONNECTED]["state"], got[CONNECTED]["reason"]) == (
            "withdrawn",
            "interface_down",
        )
        assert (got[NETWORK]["state"], got[NETWORK]["reason"]) == ("withdrawn", "interface_down")

        t0 = time.monotonic()
        host.link_up("eth0")
        at_spine = await timed(lambda: has(spine, l1_a, CONNECTED, NETWORK), t0, "spine again")
        at_leaf2 = await timed(lambda: has(leaf2, s_b, CONNECTED, NETWORK), t0, "leaf2 again")
        print(
            f"host port up -> back in the spine's kernel in {at_spine * 1e3:.0f} ms, "
            f"in the other leaf's in {at_leaf2 * 1e3:.0f} ms"
        )
        assert origins(sock)[CONNECTED]["state"] == "announced"

        # a reload without [bgp.redistribute_connected]: live, its subnet goes, the rest stays
        (tmp_path / "glbd.toml").write_text(leaf_conf(tmp_path, connected=False))
        res = ctl.request(sock, "reload", timeout=10.0)
        assert res["ok"] and res["changes"]["keys"] == ["bgp.redistribute_connected"], res
        await until(lambda: has_none(spine, CONNECTED), 10, 0.01, "spine withdraw (reload)")
        assert has(spine, l1_a, NETWORK, STATIC)
        assert CONNECTED not in origins(sock)
