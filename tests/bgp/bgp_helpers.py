"""Helpers for BGP integration tests: glbd speakers on a leaf-spine lab in namespaces, and the
FRR routers, links and kernel tables around them."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from glbdlab.frr import FrrInstance
from glbdlab.netns import Lab, Netns, stop_pids
from glbdlab.waits import until

from glbd.bgp.ribtypes import NeighborParams, RibParams, Role
from glbd.bgp.speaker import BgpEvent, BgpSpeaker, ProcessOptions
from glbd.cli import glbctl as ctl

A = ipaddress.ip_address
N = ipaddress.ip_network
V4 = ipaddress.IPv4Address

#: ``neighbor_extra`` lines of :func:`frr_bgp_conf` for a peer that gets FRR's NHC attribute
NHC = ("send-nexthop-characteristics",)


async def wait_for(cond: Callable[[], object], timeout: float = 30.0, what: str = "") -> None:
    """:func:`glbdlab.waits.until` with the BGP tests' defaults (30 s, polled every 0.1 s)."""
    await until(cond, timeout, 0.1, what or getattr(cond, "__name__", "condition"))


@dataclass
class Node:
    speaker: BgpSpeaker
    events: list[BgpEvent] = field(default_factory=list)

    def nh(self, prefix: str) -> list[tuple[str, tuple[str, ...] | None, str]]:
        return [
            (
                str(x.peer),
                None if x.nnh is None else tuple(str(i) for i in x.nnh),
                x.nnhn_status,
            )
            for x in self.speaker.rib.next_hops(N(prefix))
        ]


def speaker_node(params: RibParams, netns: str | None, **process: Any) -> Node:
    """A glbd speaker for ``params`` (not started), its events collected in the Node; ExaBGP
    restarts and stops fast unless ``process`` (ProcessOptions fields) says otherwise."""
    events: list[BgpEvent] = []
    opts = ProcessOptions(backoff_initial_s=0.2, stop_grace_s=3.0, drain_timeout_s=3.0)
    sp = BgpSpeaker(params, netns=netns, on_event=events.append, process=replace(opts, **process))
    return Node(sp, events)


def make_node(
    netns: str | None,
    router_id: str,
    local_as: int,
    role: Role,
    neighbors: list[tuple[str, int, str, str]],
    originated: tuple[str, ...] = (),
    passive: bool | None = None,
    **kw: object,
) -> Node:
    params = RibParams(
        V4(router_id),
        local_as,
        role,
        tuple(
            NeighborParams(A(addr), ras, A(local), interface=ifname, hold_time=9, passive=passive)
            for addr, ras, local, ifname in neighbors
        ),
        tuple(N(p) for p in originated),
        **kw,  # type: ignore[arg-type]
    )
    return speaker_node(params, netns)


def glbd_leaf(
    ns: Netns,
    n: int,
    uplinks: Iterable[tuple[str, str, str]],
    originated: tuple[str, ...] = (),
    **kw: object,
) -> Node:
    """glbd load balancer leaf ``n``: router id 10.0.0.n, AS 65000 + n, opening its sessions to
    AS 65100 spines over ``uplinks`` (spine address, own address, interface)."""
    neighbors = [(peer, 65100, local, ifname) for peer, local, ifname in uplinks]
    return make_node(
        ns.name, f"10.0.0.{n}", 65000 + n, Role.LOAD_BALANCER, neighbors, originated, False, **kw
    )


def glbd_spine(
    ns: Netns,
    n: int,
    downlinks: Iterable[tuple[str, int, str, str]],
    originated: tuple[str, ...] = (),
) -> Node:
    """glbd helper spine ``n``: router id 10.0.0.(10 + n), AS 65100, opening its sessions over
    ``downlinks`` (leaf address, leaf AS, own address, interface)."""
    return make_node(
        ns.name, f"10.0.0.{10 + n}", 65100, Role.HELPER, list(downlinks), originated, False
    )


@contextmanager
def glbd_daemon(ns: Netns, run_dir: Path, config: str) -> Iterator[str]:
    """``glbd run`` in ``ns`` with ``config`` (written to run_dir/glbd.toml; its control socket
    must be run_dir/glbd.sock), its output in run_dir/glbd.log: yields the socket's path.
    Stopped with SIGTERM after (killed if that takes 20 s), the log's tail printed."""
    conf = run_dir / "glbd.toml"
    conf.write_text(config)
    with open(run_dir / "glbd.log", "ab") as out:
        proc = ns.popen(
            [sys.executable, "-m", "glbd", "run", "-c", str(conf)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield str(run_dir / "glbd.sock")
    finally:
        stop_pids([proc], grace=20.0)
        print((run_dir / "glbd.log").read_text(errors="replace")[-3000:])


def glbd_neighbors(sock: str) -> list[dict[str, Any]]:
    """``glbctl neighbors`` of the daemon at ``sock``: none while it does not answer or has
    no rows to give yet (a daemon still starting can answer null)."""
    try:
        rows = ctl.request(sock, "neighbors", timeout=2.0)
    except ctl.DaemonError:
        return []
    return rows if isinstance(rows, list) else []


async def stop_all(nodes: Iterable[Node]) -> None:
    await asyncio.gather(*(n.speaker.stop() for n in nodes), return_exceptions=True)


def link(lab: Lab, a: Netns, a_if: str, b: Netns, b_if: str, net: str) -> tuple[str, str]:
    """A veth in the /24 ``net`` (e.g. '172.16.11'): a gets .1, b gets .2 (returned so)."""
    lab.veth(a, a_if, b, b_if, a_addr=f"{net}.1/24", b_addr=f"{net}.2/24")
    return f"{net}.1", f"{net}.2"


# ------------------------------------------------------------------------------------- FRR


def frr_bgp_conf(
    asn: int,
    rid: str,
    neighbors: Iterable[tuple[str, int | str]],
    *,
    networks: Iterable[str] = (),
    extra: Iterable[str] = (),
    neighbor_extra: Mapping[str, Iterable[str]] | None = None,
    multipath: bool = True,
    interface: bool = False,
    ipv6: bool = False,
) -> str:
    """frr.conf of an FRR router in a test: eBGP to ``neighbors`` (address, remote AS) with
    timers 3 9 and connect 1, IPv4 unicast announcing ``networks``.

    ``extra``: more ``router bgp`` lines, before the neighbors. ``neighbor_extra[peer]``: more
    ``neighbor PEER ...`` settings (e.g. :data:`NHC`). ``multipath``: multipath-relax and
    ``maximum-paths 64``. ``interface``: the neighbors are ports (unnumbered, remote AS e.g.
    "external"), left to FRR's default IPv4 unicast activation. ``ipv6``: the neighbors are
    activated for IPv6 unicast too."""
    more = neighbor_extra or {}
    peers = list(neighbors)
    lines = [
        "frr defaults datacenter",
        f"router bgp {asn}",
        f" bgp router-id {rid}",
        " no bgp ebgp-requires-policy",
        " no bgp network import-check",
        *([" bgp bestpath as-path multipath-relax"] if multipath else []),
        *extra,
    ]
    for peer, ras in peers:
        lines += [
            f" neighbor {peer} {'interface ' if interface else ''}remote-as {ras}",
            f" neighbor {peer} timers 3 9",
            f" neighbor {peer} timers connect 1",
            *(f" neighbor {peer} {x}" for x in more.get(peer, ())),
        ]
    activate = [] if interface else [f"  neighbor {peer} activate" for peer, _ in peers]
    lines += [" address-family ipv4 unicast", *activate, *(f"  network {n}" for n in networks)]
    lines += [*(["  maximum-paths 64"] if multipath else []), " exit-address-family"]
    if ipv6:
        lines += [" address-family ipv6 unicast", *activate, " exit-address-family"]
    return "\n".join([*lines, "exit", ""])


def frr_paths(frr: FrrInstance, prefix: str) -> list[dict[str, Any]]:
    """FRR's BGP paths for the IPv4 ``prefix`` (none when it has no route)."""
    r = frr.vtysh_json(f"show bgp ipv4 unicast {prefix} json")
    paths = r.get("paths", []) if isinstance(r, dict) else []
    return paths if isinstance(paths, list) else []


def frr_nnhns(frr: FrrInstance, prefix: str) -> list[tuple[str, ...]]:
    """The NNHN of each of FRR's paths for ``prefix`` (the sender's own id is not listed),
    sorted."""
    return sorted(tuple(p.get("nextNextHopNodes", [])) for p in frr_paths(frr, prefix))


# ---------------------------------------------------------------------------------- kernel


def kernel_routes(ns: Netns, prefix: str) -> list[dict[str, Any]]:
    """The kernel's routes to ``prefix`` in ``ns`` (``ip -j route show``)."""
    routes = json.loads(ns.ip("-j", "route", "show", prefix).stdout or "[]")
    return routes if isinstance(routes, list) else []


def kernel_has(ns: Netns, prefix: str) -> bool:
    return bool(kernel_routes(ns, prefix))


def kernel_gateways(ns: Netns, prefix: str) -> set[str]:
    out: set[str] = set()
    for r in kernel_routes(ns, prefix):
        if "gateway" in r:
            out.add(r["gateway"])
        out |= {nh["gateway"] for nh in r.get("nexthops", []) if "gateway" in nh}
    return out


def kernel_weights(ns: Netns, prefix: str) -> dict[str, int]:
    """{gateway: weight} of the kernel's multipath route to ``prefix`` (an IPv6 gateway of an
    IPv4 route shows as "via inet6 fe80::...")."""
    got: dict[str, int] = {}
    for r in kernel_routes(ns, prefix):
        for nh in r.get("nexthops", []):
            gw = nh.get("gateway") or (nh.get("via") or {}).get("host")
            got[str(gw)] = int(nh.get("weight", 1))
    return got


def unnumbered_conf(
    run_dir: Path, rid: str, asn: int, role: str, prefix: str, port: str, extra: Iterable[str] = ()
) -> str:
    """glbd.toml of a router with one unnumbered eBGP neighbour on ``port`` (permit-all policy,
    RFC 8212); ``extra`` lines go before the ``[control]`` table."""
    return "\n".join(
        [
            f'router_id = "{rid}"',
            f"local_as = {asn}",
            f'role = "{role}"',
            f'originate = ["{prefix}"]',
            "[[neighbors]]",
            f'interface = "{port}"',
            'remote_as = "external"',
            'import = ["0.0.0.0/0 le 32", "::/0 le 128"]',
            'export = ["0.0.0.0/0 le 32", "::/0 le 128"]',
            *extra,
            "[control]",
            f'socket = "{run_dir / "glbd.sock"}"',
            "[logging]",
            'format = "json"',
            "",
        ]
    )


def link_local(ns: Netns, ifname: str) -> str:
    """The usable (not tentative) link-local address of ``ifname`` in ``ns``, or ""."""
    out = json.loads(ns.ip("-6", "-j", "addr", "show", "dev", ifname).stdout)
    for a in out[0].get("addr_info", []):
        if ipaddress.IPv6Address(a["local"]).is_link_local and not a.get("tentative"):
            return str(a["local"])
    return ""


def glbctl_request(sock: Path, cmd: str) -> Any:
    """``cmd`` on the control socket, or None while glbd does not answer."""
    try:
        return ctl.request(str(sock), cmd, timeout=2.0)
    except Exception:
        return None


def bgp_only_tail(run_dir: Path) -> list[str]:
    """The end of a glbd.toml for a BGP-only test: no BFD, no heartbeats, the control socket in
    ``run_dir``, JSON logs at info."""
    return [
        "[bfd]",
        "enabled = false",
        "",
        "[heartbeat]",
        "enabled = false",
        "",
        "[control]",
        f'socket = "{run_dir / "glbd.sock"}"',
        "",
        "[logging]",
        'level = "info"',
        'format = "json"',
        "",
    ]
