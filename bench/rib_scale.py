"""RIB scale: N peers each announcing the same P prefixes (the "64 neighbors x 10k prefixes"
run of docs/benchmarks-e2e.md, without ExaBGP), fed through ``Rib.on_update`` as parsed
UpdateEvents the way ``glbd.bgp.speaker.BgpSpeaker`` does (one event per UPDATE, ``--per-update``
prefixes each, fresh prefix/attribute objects per event as the API parser makes them).

Run: ``.venv/bin/python bench/rib_scale.py [--peers 64] [--prefixes 1000] [--order peer|interleaved]
[--baseline-ref REF] [--coalesce-ms 50]``

Prints paths/s (CPU time), tracemalloc bytes per path held after the fill and the work handed
to the rest of the daemon (NextHopsChanged events and the next hops they carry), for the
baseline ``glbd/rib.py`` of git REF (default e3b5a1b, before the scaling changes; loaded from
``git show`` into a private module in the same run), the current one selecting every UPDATE
(``update_coalesce_s=0``) and the current one with UPDATE coalescing; and the ratios. The RIB's
clock is the CPU time spent, so a coalescing window is that much of a busy daemon's time.
"""

from __future__ import annotations

import argparse
import gc
import ipaddress
import sys
import time
import tracemalloc
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import logging  # noqa: E402

import structlog  # noqa: E402
from timing import module_at  # noqa: E402

from glbd.bgp import exabgp_api as api  # noqa: E402
from glbd.bgp import nhc as nhcmod  # noqa: E402
from glbd.bgp import rib as rib_mod  # noqa: E402
from glbd.bgp import ribtypes  # noqa: E402

#: the current RIB in the baseline's one-module shape: ``Rib`` and the types it takes
rib_now = ModuleType("rib_now")
rib_now.__dict__.update(vars(ribtypes), Rib=rib_mod.Rib)

A = ipaddress.ip_address
LOCAL_AS = 65100
#: ``leaf``: a load-balancer leaf (AS 65001) under 64 spines of one AS (65100): nothing is
#: re-advertised. ``mesh``: a helper+load-balancer whose peers each have
#: their own AS, so every multipath change is re-advertised with a new NNHN to the others.
SCENARIO = {"name": "mesh"}


def peer_as(i: int) -> int:
    return 65100 if SCENARIO["name"] == "leaf" else 65000 + i


def load_baseline(ref: str, relpath: str) -> ModuleType | None:
    return module_at(ref, relpath, "rib_baseline")


def peer_addr(i: int) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(f"172.16.{i // 64}.{(i % 64) * 4 + 1}")


def make_rib(mod: Any, peers: int, coalesce_s: float | None = None, delay_s: float = 0.0) -> Any:
    neighbors = tuple(
        mod.NeighborParams(peer_addr(i), peer_as(i), peer_addr(i) + 1, interface=f"eth{i}")
        for i in range(peers)
    )
    kw: dict[str, Any] = {}
    if coalesce_s is not None and "update_coalesce_s" in mod.RibParams.__dataclass_fields__:
        kw["update_coalesce_s"] = coalesce_s
    if delay_s and "update_delay_s" in mod.RibParams.__dataclass_fields__:
        kw["update_delay_s"] = delay_s
    params = mod.RibParams(
        router_id=ipaddress.IPv4Address("10.0.0.1"),
        local_as=65001 if SCENARIO["name"] == "leaf" else LOCAL_AS,
        role=mod.Role.LOAD_BALANCER if SCENARIO["name"] == "leaf" else mod.Role.BOTH,
        neighbors=neighbors,
        **kw,
    )
    rib = mod.Rib(params)
    rib.initial_decisions()
    for i in range(peers):
        rib.on_open(peer_addr(i), ipaddress.IPv4Address(f"10.1.{i // 256}.{i % 256}"))
        rib.on_state(peer_addr(i), "up", time.process_time())
    return rib


def updates(peers: int, prefixes: int, per_update: int) -> list[list[str]]:
    """Prefix strings per UPDATE (the events themselves are built while feeding, as the API
    parser builds them: fresh objects per UPDATE)."""
    names = [f"10.{100 + i // 256}.{i % 256}.0/24" for i in range(prefixes)]
    return [names[j : j + per_update] for j in range(0, prefixes, per_update)]


def event(i: int, chunk: list[str]) -> api.UpdateEvent:
    peer = peer_addr(i)
    bid = ipaddress.IPv4Address(f"10.1.{i // 256}.{i % 256}")
    nhc = nhcmod.Nhc.for_next_hop(
        peer, nnhn=nhcmod.Nnhn(bid, (ipaddress.IPv4Address("10.2.0.1"),))
    ).encode_value()
    attrs = api.PathAttributes(
        origin="igp",
        as_path=(peer_as(i), 65200),
        as_path_length=2,
        communities=(),
        nhc=nhc,
    )
    nh = A(str(peer))
    return api.UpdateEvent(
        peer=peer,
        local=peer + 1,
        peer_as=peer_as(i),
        local_as=LOCAL_AS,
        direction="receive",
        attributes=attrs,
        announced=tuple(
            api.RouteAnnounced("ipv4 unicast", nh, ipaddress.ip_network(p)) for p in chunk
        ),
    )


def eor(i: int) -> api.UpdateEvent:
    peer = peer_addr(i)
    return api.UpdateEvent(
        peer=peer,
        local=peer + 1,
        peer_as=peer_as(i),
        local_as=LOCAL_AS,
        direction="receive",
        eor="ipv4 unicast",
    )


def order(peers: int, n_chunks: int, how: str) -> list[tuple[int, int]]:
    """(peer, chunk) in arrival order: ``peer`` = each peer's whole table in turn (sessions
    coming up one after another), ``interleaved`` = every peer's first UPDATE, then every
    peer's second... (sessions coming up together)."""
    if how == "peer":
        return [(i, c) for i in range(peers) for c in range(n_chunks)]
    return [(i, c) for c in range(n_chunks) for i in range(peers)]


def fill(rib: Any, seq: list[tuple[int, int]], chunks: list[list[str]]) -> tuple[float, int, int]:
    """Feed the UPDATEs back to back, the RIB's clock being the CPU time spent (a daemon busy
    with a burst), running ``on_timer`` whenever a deadline is due. Returns CPU seconds
    (event construction excluded), NextHopsChanged events, next hops carried by them (the
    work handed to the path table and the FIB)."""
    events = carried = 0
    t_build = 0.0
    t0 = time.process_time()

    def count(effects: list[Any]) -> None:
        nonlocal events, carried
        for e in effects:
            if type(e).__name__ == "NextHopsChanged":
                events += 1
                carried += len(e.next_hops)

    last = {i: c for i, c in seq}
    for i, c in seq:
        tb = time.process_time()
        ev = event(i, chunks[c])
        t_build += time.process_time() - tb
        now = time.process_time()
        count(rib.on_update(ev, now))
        if c == last[i]:  # the peer's table is complete: its End-of-RIB
            count(rib.on_update(eor(i), time.process_time()))
        d = rib.next_deadline()
        while d is not None and d <= time.process_time():
            count(rib.on_timer(time.process_time()))
            d = rib.next_deadline()
    while (d := rib.next_deadline()) is not None:  # the last window
        count(rib.on_timer(max(d, time.process_time())))
    return time.process_time() - t0 - t_build, events, carried


def peer_restart(rib: Any, n_chunks: int, chunks: list[list[str]]) -> float:
    """Once converged, peer 0's session drops (no graceful restart: its paths go) and comes
    back with its whole table and End-of-RIB: the CPU seconds of that withdraw + re-learn."""
    t0 = time.process_time()
    rib.on_state(peer_addr(0), "down", time.process_time(), "peer reset")
    while (d := rib.next_deadline()) is not None:
        rib.on_timer(max(d, time.process_time()))
    rib.on_open(peer_addr(0), ipaddress.IPv4Address("10.1.0.0"))
    rib.on_state(peer_addr(0), "up", time.process_time())
    before_fill = time.process_time() - t0
    dt, _events, _carried = fill(rib, [(0, c) for c in range(n_chunks)], chunks)
    return before_fill + dt


def run(
    mod: Any,
    peers: int,
    prefixes: int,
    per_update: int,
    how: str,
    coalesce_s: float | None,
    delay_s: float = 0.0,
    memory: bool = True,
) -> dict[str, float]:
    chunks = updates(peers, prefixes, per_update)
    seq = order(peers, len(chunks), how)
    paths = peers * prefixes
    if not memory:
        rib = make_rib(mod, peers, coalesce_s, delay_s)
        dt, events, carried = fill(rib, seq, chunks)
        fwd = rib.forwarding()
        width = {len(v) for v in fwd.values()}
        stats = getattr(rib, "stats", None)
        selections = stats.selections if stats else float("nan")
        walks = stats.adj_out_walks if stats else float("nan")
        restart = peer_restart(rib, len(chunks), chunks)
        return {
            "restart_s": restart,
            "selections": selections,
            "walks": walks,
            "paths_per_s": paths / dt,
            "cpu_s": dt,
            "bytes_per_path": float("nan"),
            "mem_mb": float("nan"),
            "events": events,
            "carried": carried,
            "prefixes_fwd": len(fwd),
            "mp_width": max(width) if width else 0,
        }
    gc.collect()
    tracemalloc.start()
    rib = make_rib(mod, peers, coalesce_s, delay_s)
    gc.collect()
    base_mem = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del rib
    gc.collect()

    # speed, without tracemalloc (it slows allocation several-fold)
    rib = make_rib(mod, peers, coalesce_s, delay_s)
    dt, events, carried = fill(rib, seq, chunks)
    n_fwd = len(rib.forwarding())
    width = {len(v) for v in rib.forwarding().values()}
    del rib
    gc.collect()

    # memory held after the fill
    tracemalloc.start()
    rib = make_rib(mod, peers, coalesce_s, delay_s)
    fill(rib, seq, chunks)
    gc.collect()
    mem = tracemalloc.get_traced_memory()[0] - base_mem
    tracemalloc.stop()
    del rib
    gc.collect()
    return {
        "restart_s": float("nan"),
        "selections": float("nan"),
        "walks": float("nan"),
        "paths_per_s": paths / dt,
        "cpu_s": dt,
        "bytes_per_path": mem / paths,
        "mem_mb": mem / 1e6,
        "events": events,
        "carried": carried,
        "prefixes_fwd": n_fwd,
        "mp_width": max(width) if width else 0,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peers", type=int, default=64)
    ap.add_argument("--prefixes", type=int, default=1000)
    ap.add_argument("--per-update", type=int, default=312)  # 10k prefixes / 32 UPDATEs
    ap.add_argument("--order", choices=("peer", "interleaved"), default="peer")
    ap.add_argument("--scenario", choices=("mesh", "leaf"), default="mesh")
    ap.add_argument("--baseline-ref", default="e3b5a1b")
    ap.add_argument(
        "--baseline-path",
        default="glbd/rib.py",
        help="the RIB module's path at --baseline-ref (glbd/bgp/rib.py since the layer split)",
    )
    ap.add_argument("--coalesce-ms", type=float, default=50.0)
    ap.add_argument(
        "--runs",
        default="baseline,eager,coalesce",
        help="comma-separated subset of baseline, eager, coalesce, delay",
    )
    ap.add_argument(
        "--update-delay-s",
        type=float,
        default=120.0,
        help="the delay run's update_delay_s (every peer sends End-of-RIB after its table)",
    )
    ap.add_argument(
        "--no-memory", action="store_true", help="one fill per run, no tracemalloc fills"
    )
    args = ap.parse_args()
    which = set(args.runs.split(","))
    SCENARIO["name"] = args.scenario
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    print(
        f"{args.peers} peers x {args.prefixes} prefixes, {args.per_update} prefixes/UPDATE, "
        f"arrival order: {args.order}, scenario: {args.scenario}"
    )
    runs: list[tuple[str, ModuleType | None, float | None, float]] = []
    if args.baseline_ref and "baseline" in which:
        base_mod = load_baseline(args.baseline_ref, args.baseline_path)
        runs.append((f"baseline {args.baseline_ref}", base_mod, args.coalesce_ms / 1e3, 0.0))
    if "eager" in which:
        runs.append(("current, eager", rib_now, 0.0, 0.0))
    if "coalesce" in which:
        runs.append((f"current, {args.coalesce_ms:g} ms", rib_now, args.coalesce_ms / 1e3, 0.0))
    if "delay" in which:
        runs.append(
            (
                f"current, {args.coalesce_ms:g} ms, delay",
                rib_now,
                args.coalesce_ms / 1e3,
                args.update_delay_s,
            )
        )
    results: dict[str, dict[str, float]] = {}
    for name, mod, coalesce, delay in runs:
        if mod is None:
            continue
        r = run(
            mod,
            args.peers,
            args.prefixes,
            args.per_update,
            args.order,
            coalesce,
            delay,
            memory=not args.no_memory,
        )
        results[name] = r
        print(
            f"{name:>22}: {r['paths_per_s']:9.0f} paths/s ({r['cpu_s']:7.2f} s CPU), "
            f"{r['bytes_per_path']:5.0f} B/path ({r['mem_mb']:6.1f} MB), "
            f"{int(r['events']):8d} NextHopsChanged carrying {int(r['carried']):9d} next hops, "
            f"{int(r['prefixes_fwd'])} prefixes x {int(r['mp_width'])}, "
            f"{r['selections']:g} selections, {r['walks']:g} Adj-RIB-Out walks; "
            f"then one peer's restart (withdraw + re-learn its table): {r['restart_s']:.2f} s CPU"
        )
    base = next(iter(results.values()))
    for name, r in list(results.items())[1:]:
        print(
            f"{name + ' / ' + next(iter(results)):>22}: "
            f"paths/s x{r['paths_per_s'] / base['paths_per_s']:.1f}, "
            f"bytes/path x{r['bytes_per_path'] / base['bytes_per_path']:.2f}, "
            f"next hops handed on x{r['carried'] / max(base['carried'], 1):.3f}"
        )


if __name__ == "__main__":
    main()
