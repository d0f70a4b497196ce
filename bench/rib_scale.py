"""RIB scale: N peers each announcing the same P prefixes (the "64 neighbors x 10k prefixes"
run of docs/benchmarks-e2e.md, without ExaBGP), fed through ``Rib.on_update`` as parsed
UpdateEvents the way ``glbd.bgp.BgpSpeaker`` does (one event per UPDATE, ``--per-update``
prefixes each, fresh prefix/attribute objects per event as the API parser makes them).

Run: ``.venv/bin/python bench/rib_scale.py [--peers 64] [--prefixes 1000] [--baseline-ref REF]``

Prints paths/s (CPU time) and tracemalloc bytes per path held after the fill, for the current
``glbd/rib.py`` and for the baseline ``glbd/rib.py`` of git REF (default e3b5a1b, before the
scaling changes), loaded from ``git show`` into a private module in the same run, and the ratios.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import ipaddress
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import logging  # noqa: E402

import structlog  # noqa: E402

from glbd import nhc as nhcmod  # noqa: E402
from glbd import rib as rib_now  # noqa: E402
from glbd.exabgp import api  # noqa: E402

A = ipaddress.ip_address
LOCAL_AS = 65100


def load_baseline(ref: str) -> ModuleType | None:
    try:
        src = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{ref}:glbd/rib.py"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"baseline {ref}: not available ({exc})")
        return None
    path = Path(tempfile.mkdtemp()) / "rib_baseline.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("glbd._rib_baseline", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def peer_addr(i: int) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(f"172.16.{i // 64}.{(i % 64) * 4 + 1}")


def make_rib(mod: Any, peers: int) -> Any:
    neighbors = tuple(
        mod.NeighborParams(peer_addr(i), 65000 + i, peer_addr(i) + 1, interface=f"eth{i}")
        for i in range(peers)
    )
    params = mod.RibParams(
        router_id=ipaddress.IPv4Address("10.0.0.1"),
        local_as=LOCAL_AS,
        role=mod.Role.BOTH,
        neighbors=neighbors,
    )
    rib = mod.Rib(params)
    rib.initial_commands()
    for i in range(peers):
        rib.on_open(peer_addr(i), ipaddress.IPv4Address(f"10.1.{i // 256}.{i % 256}"))
        rib.on_state(peer_addr(i), "up", 0.0)
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
        as_path=(65000 + i, 65200),
        as_path_length=2,
        communities=(),
        nhc=nhc,
    )
    nh = A(str(peer))
    return api.UpdateEvent(
        peer=peer,
        local=peer + 1,
        peer_as=65000 + i,
        local_as=LOCAL_AS,
        direction="receive",
        attributes=attrs,
        announced=tuple(
            api.RouteAnnounced("ipv4 unicast", nh, ipaddress.ip_network(p)) for p in chunk
        ),
    )


def run(mod: Any, peers: int, prefixes: int, per_update: int) -> dict[str, float]:
    chunks = updates(peers, prefixes, per_update)
    gc.collect()
    tracemalloc.start()
    rib = make_rib(mod, peers)
    gc.collect()
    base_mem = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del rib
    gc.collect()

    # speed, without tracemalloc (it slows allocation several-fold)
    rib = make_rib(mod, peers)
    n_events = 0
    t_build = 0.0
    t0 = time.process_time()
    for i in range(peers):  # peer by peer, as sessions come up and send their table
        for chunk in chunks:
            tb = time.process_time()
            ev = event(i, chunk)
            t_build += time.process_time() - tb
            n_events += len(rib.on_update(ev, 1.0))
    dt = time.process_time() - t0 - t_build
    n_fwd = len(rib.forwarding())
    width = {len(v) for v in rib.forwarding().values()}
    del rib
    gc.collect()

    # memory held after the fill
    tracemalloc.start()
    rib = make_rib(mod, peers)
    for i in range(peers):
        for chunk in chunks:
            rib.on_update(event(i, chunk), 1.0)
    gc.collect()
    mem = tracemalloc.get_traced_memory()[0] - base_mem
    tracemalloc.stop()
    del rib
    gc.collect()
    paths = peers * prefixes
    return {
        "paths_per_s": paths / dt,
        "cpu_s": dt,
        "bytes_per_path": mem / paths,
        "mem_mb": mem / 1e6,
        "effects": n_events,
        "prefixes_fwd": n_fwd,
        "mp_width": max(width) if width else 0,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peers", type=int, default=64)
    ap.add_argument("--prefixes", type=int, default=1000)
    ap.add_argument("--per-update", type=int, default=312)  # 10k prefixes / 32 UPDATEs
    ap.add_argument("--baseline-ref", default="e3b5a1b")
    args = ap.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    print(f"{args.peers} peers x {args.prefixes} prefixes, {args.per_update} prefixes/UPDATE")
    results: dict[str, dict[str, float]] = {}
    base = load_baseline(args.baseline_ref) if args.baseline_ref else None
    for name, mod in (("baseline " + args.baseline_ref, base), ("current", rib_now)):
        if mod is None:
            continue
        r = run(mod, args.peers, args.prefixes, args.per_update)
        results[name] = r
        print(
            f"{name:>18}: {r['paths_per_s']:10.0f} paths/s ({r['cpu_s']:.2f} s CPU), "
            f"{r['bytes_per_path']:6.0f} B/path ({r['mem_mb']:.1f} MB), "
            f"{int(r['effects'])} effects, {int(r['prefixes_fwd'])} prefixes x "
            f"{int(r['mp_width'])} next hops"
        )
    if len(results) == 2:
        b, c = results.values()
        print(
            f"{'current/baseline':>18}: paths/s x{c['paths_per_s'] / b['paths_per_s']:.1f}, "
            f"bytes/path x{c['bytes_per_path'] / b['bytes_per_path']:.2f}"
        )


if __name__ == "__main__":
    main()
