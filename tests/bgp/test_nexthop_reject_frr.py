"""An unusable received next hop against FRR 10.x, through the whole glbd daemon and the kernel
FIB: spine B announces P1 with NEXT_HOP = the glbd leaf's own address and P2 with an off-subnet
next hop (an outbound route-map), spine A announces both normally. The leaf installs both via A
alone, counts the two rejects by reason (``glbctl counters`` and ``neighbors``), and its
FIB sync does not retry: no write error over several reconcile runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from bgp_helpers import bgp_only_tail, frr_bgp_conf, glbd_daemon, kernel_gateways, wait_for
from glbdlab.frr import FrrInstance
from glbdlab.netns import Lab

from glbd.cli import glbctl as ctl

pytestmark = [pytest.mark.netns, pytest.mark.frr, pytest.mark.slow]

P1, P2 = "10.61.0.0/24", "10.62.0.0/24"
A_NET, B_NET = "172.16.61", "172.16.62"  # spine .1, leaf .2
LEAF_B = f"{B_NET}.2"  # the leaf's own address on spine B's link
OFF_SUBNET = "192.0.2.99"  # on no link of the leaf


def spine_conf(asn: int, rid: str, peer: str, route_map: bool) -> str:
    conf = frr_bgp_conf(
        asn,
        rid,
        [(peer, 65001)],
        networks=[P1, P2],
        neighbor_extra={peer: ["route-map BADNH out"]} if route_map else None,
        multipath=False,
    )
    if not route_map:
        return conf
    return conf + "\n".join(
        [
            f"ip prefix-list P1 seq 5 permit {P1}",
            f"ip prefix-list P2 seq 5 permit {P2}",
            "route-map BADNH permit 10",
            " match ip address prefix-list P1",
            f" set ip next-hop {LEAF_B}",
            "route-map BADNH permit 20",
            " match ip address prefix-list P2",
            f" set ip next-hop {OFF_SUBNET}",
            "route-map BADNH permit 30",
            "",
        ]
    )


def glbd_conf(run_dir: Path) -> str:
    neighbors = []
    for net, ifname in ((A_NET, "l1-sa"), (B_NET, "l1-sb")):
        neighbors += [
            "[[neighbors]]",
            f'address = "{net}.1"',
            "remote_as = 65100",
            f'interface = "{ifname}"',
            f'local_address = "{net}.2"',
            "passive = false",
            'import = ["0.0.0.0/0 le 32", "::/0 le 128"]',
            'export = ["0.0.0.0/0 le 32", "::/0 le 128"]',
            "",
        ]
    return "\n".join(
        [
            'router_id = "10.0.0.1"',
            "local_as = 65001",
            'role = "load-balancer"',
            "",
            *neighbors,
            "[fib]",
            "reconcile_interval_s = 0.5",
            "",
            *bgp_only_tail(run_dir),
        ]
    )


async def test_own_and_off_subnet_next_hops_drop_only_those_paths(
    netns_lab: Lab, tmp_path: Path
) -> None:
    lab = netns_lab
    leaf, sa, sb = lab.netns("leaf1"), lab.netns("spineA"), lab.netns("spineB")
    lab.veth(sa, "sa-l1", leaf, "l1-sa", a_addr=f"{A_NET}.1/24", b_addr=f"{A_NET}.2/24")
    lab.veth(sb, "sb-l1", leaf, "l1-sb", a_addr=f"{B_NET}.1/24", b_addr=f"{B_NET}.2/24")
    spine_a = FrrInstance(sa, hostname="spineA").start(
        spine_conf(65100, "10.0.0.11", f"{A_NET}.2", route_map=False)
    )
    spine_b = FrrInstance(sb, hostname="spineB").start(
        spine_conf(65100, "10.0.0.12", f"{B_NET}.2", route_map=True)
    )
    run_dir = tmp_path / "leaf1"
    run_dir.mkdir(mode=0o700)
    try:
        with glbd_daemon(leaf, run_dir, glbd_conf(run_dir)) as sock:

            def ask(cmd: str) -> Any:
                try:
                    return ctl.request(sock, cmd, timeout=2.0)
                except ctl.DaemonError:
                    return None

            def rows() -> dict[str, dict[str, Any]]:
                got = ask("neighbors")
                return {r["peer"]: r for r in got} if isinstance(got, list) else {}

            def counters() -> dict[str, Any]:
                got = ask("counters")
                return got if isinstance(got, dict) else {}

            def both_up() -> bool:
                r = rows()
                return all(r.get(f"{n}.1", {}).get("state") == "up" for n in (A_NET, B_NET))

            def b_counter(key: str) -> int:
                return int(rows().get(f"{B_NET}.1", {}).get("counters", {}).get(key, 0))

            await wait_for(both_up, 60, "both sessions up")
            # spine B's two UPDATEs (one per next hop) and its End-of-RIB are in
            await wait_for(lambda: b_counter("updates_in") >= 3, 30, "spine B's UPDATEs")
            # the kernel first: both prefixes via A alone (spine B's paths never reach the FIB)
            for p in (P1, P2):
                try:
                    await wait_for(
                        lambda p=p: kernel_gateways(leaf, p) == {f"{A_NET}.1"}, 30, f"{p} via A"
                    )
                except AssertionError as e:
                    raise AssertionError(f"{e}: the kernel has {kernel_gateways(leaf, p)}") from e

            def b_rejected() -> dict[str, int]:
                c = rows().get(f"{B_NET}.1", {}).get("counters", {})
                return {k: v for k, v in c.items() if k.startswith("rejected_nexthop")}

            assert b_rejected() == {"rejected_nexthop_self": 1, "rejected_nexthop_offlink": 1}
            bgp = counters().get("bgp", {})
            assert bgp.get("rejected_nexthop_self", 0) >= 1, bgp
            assert bgp.get("rejected_nexthop_offlink", 0) >= 1, bgp
            print(f"glbd's counters: bgp {b_rejected()}, fib {counters().get('fib')}")

            # the FIB sync is settled, not retrying: its write errors stay flat (zero) while
            # it runs several more reconciles (every 0.5 s)
            fib0 = counters()["fib"]
            await wait_for(
                lambda: counters()["fib"]["reconciles"] >= fib0["reconciles"] + 4,
                30,
                "four more FIB reconciles",
            )
            fib1 = counters()["fib"]
            print(f"FIB counters over the window: {fib0} -> {fib1}")
            assert fib1["op_errors"] == fib0["op_errors"] == 0, fib1
            assert kernel_gateways(leaf, P1) == kernel_gateways(leaf, P2) == {f"{A_NET}.1"}
    finally:
        spine_a.stop()
        spine_b.stop()
