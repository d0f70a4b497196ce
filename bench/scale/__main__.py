"""Scale simulation: the real pure cores of a 128-leaf x 64-spine 3-stage Clos and of a
5-stage Clos (pods + super-spines) in one process, virtual links, virtual time.

Run from the repository root::

    .venv/bin/python -m bench.scale            # full: 128 x 64 3-stage + 128-leaf 5-stage
    .venv/bin/python -m bench.scale --quick    # smaller fabrics, shorter windows (~75 s CPU)

What is real and what is synthesized: see ``bench/scale/sim.py`` (module docstring) and
bench/scale/README.md. Exit status 1 when a settle or correctness check fails.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
from dataclasses import asdict, replace
from typing import Any

from .scenario import Result, run
from .sim import SimConfig

CPU_TARGET_PCT = 15.0


def _configs(a: argparse.Namespace) -> list[SimConfig]:
    base = SimConfig(
        interval_s=a.interval_ms / 1e3,
        delay_s=a.delay_ms / 1e3,
        jitter_s=a.jitter_ms / 1e3,
        hmac=not a.no_hmac,
        steady_s=a.steady_s if a.steady_s is not None else (0.25 if a.quick else 1.0),
        churn_per_spine_s=a.churn,
        prefixes_per_leaf=a.prefixes_per_leaf,
        rib_sample=a.rib_sample,
        seed=a.seed,
    )
    out = []
    if a.stages in ("3", "both"):
        leaves, spines = (64, 32) if a.quick else (128, 64)
        out.append(
            replace(
                base,
                stages=3,
                leaves=a.leaves or leaves,
                spines=a.spines or spines,
                rib=a.rib3 or "sample",
            )
        )
    if a.stages in ("5", "both"):
        dims = (4, 16, 4, 4) if a.quick else (8, 16, 8, 8)
        out.append(
            replace(
                base,
                stages=5,
                pods=a.pods or dims[0],
                leaves_per_pod=a.leaves_per_pod or dims[1],
                spines_per_pod=a.spines_per_pod or dims[2],
                supers_per_plane=a.supers_per_plane or dims[3],
                rib=a.rib5 or "full",
            )
        )
    return out


def _title(cfg: SimConfig) -> str:
    if cfg.stages == 3:
        return f"3-stage Clos, {cfg.leaves} leaves x {cfg.spines} spines"
    return (
        f"5-stage Clos, {cfg.pods} pods x ({cfg.leaves_per_pod} leaves, {cfg.spines_per_pod}"
        f" spines), {cfg.spines_per_pod} planes x {cfg.supers_per_plane} super-spines"
    )


def _kib(n: Any) -> str:
    return "-" if n is None else f"{n / 1024:.1f} KiB"


def _print(res: Result) -> None:
    c, n = res.cfg, res.numbers
    iv_ms = c.interval_s * 1e3
    print(f"\n== {_title(c)} ==")
    print(
        f"heartbeats every {iv_ms:g} ms, on-change spacing {c.min_spacing_s * 1e3:g} ms,"
        f" link delay {c.delay_s * 1e3:g} ms + U(0, {c.jitter_s * 1e3:g}) ms,"
        f" HMAC {'on' if c.hmac else 'off'},"
        f" {c.prefixes_per_leaf} prefix(es) per leaf, churn {c.churn_per_spine_s:g} band"
        f" change(s)/spine/s in the steady window"
    )
    print(
        f"BGP: {n['rib_mode']} RIB mesh, {n['rib_real_leaves']}/{n['leaves']} leaves with a real"
        f" Rib fed by UPDATEs ({n['rib_checks']} cross-checked against the derivation),"
        f" {n['bgp_messages']} UPDATEs, built in {n['bgp_build_s']} s wall;"
        f" per leaf {n['prefixes_per_leaf_table']} prefixes, {n['profiles_per_leaf']} profiles,"
        f" up to {n['next_hops_per_profile']} next hops per profile"
    )
    rows: list[tuple[str, str, str]] = []
    if "leaf_pct_core_replay" in n:
        ok = n["leaf_pct_core_replay"] < CPU_TARGET_PCT
        rows += [
            (
                f"leaf receiver+table CPU ({n['leaf_datagrams_per_s']} datagrams/s, process CPU,"
                " replay)",
                f"{n['leaf_pct_core_replay']:.2f} % of a core",
                f"< {CPU_TARGET_PCT:g} %: {'met' if ok else 'NOT met'}",
            ),
            (
                "  baseline: wire.decode alone of the same datagrams",
                f"{n['leaf_decode_only_pct_core']:.2f} % of a core",
                f"ratio {n['leaf_ratio_to_decode']}x",
            ),
            (
                "  in-simulation wall time per leaf (median / max over leaves)",
                f"{n['leaf_pct_core_insim_median']:.2f} / {n['leaf_pct_core_insim_max']:.2f} %",
                "inflated by machine load",
            ),
            (
                "leaf: one spine's snapshot expires / appears (every profile recomputed)",
                f"{n['leaf_spine_expiry_ms']} / {n['leaf_spine_new_ms']} ms CPU",
                "one-off, per spine",
            ),
            (
                f"spine sender CPU ({n['spine_entries']} entries, {n['spine_datagram_bytes']} B"
                " datagram, process CPU, replay)",
                f"{n['spine_pct_core_replay']:.3f} % of a core",
                "",
            ),
            (
                "  in-simulation wall time per spine (median / max)",
                f"{n['spine_pct_core_insim_median']:.3f} / {n['spine_pct_core_insim_max']:.3f} %",
                "incl. on-change sends",
            ),
            (
                "whole simulation per simulated second (wall / process CPU)",
                f"{n['sim_wall_per_sim_s']} s / {n['sim_cpu_per_sim_s']} s",
                "",
            ),
        ]
    if "leaf_bytes" in n:
        rows += [
            (
                "memory per leaf: Receiver + PathTable + Rib (Receiver + PathTable)",
                f"{_kib(n['leaf_bytes'])} ({_kib(n['leaf_bytes_hb_table'])})",
                "deep size",
            ),
            (
                "memory per spine: Sender + entries + Rib (Sender + entries)",
                f"{_kib(n['spine_bytes'])} ({_kib(n['spine_bytes_sender'])})",
                "deep size",
            ),
        ]
        if "super_bytes" in n:
            rows.append(("memory per super-spine: Rib", _kib(n["super_bytes"]), "deep size"))
        rows.append(("process RSS growth for the whole fabric", f"{n['rss_total_mb']} MiB", ""))
    for d in res.degradations:
        settle = "-" if d.settle_s is None else f"{d.settle_s * 1e3:.2f} ms"
        rows.append(
            (
                f"settle after {d.name} degrades to band {c.degrade_band}, on-change"
                f" {'on' if d.on_change else 'off'} ({d.leaves_changed} leaves,"
                f" {len(d.changed)} prefix weights changed, degraded/other <= {d.min_ratio})",
                settle + f" ({(d.settle_s or 0) / c.interval_s:.2f} intervals)",
                ("<= 2 intervals, weights correct: met" if d.ok else f"NOT met: {d.detail}"),
            )
        )
    w = max(len(r[0]) for r in rows)
    w2 = max(len(r[1]) for r in rows)
    for a, b, t in rows:
        print(f"  {a:<{w}}  {b:>{w2}}  {t}")
    print(
        f"  ({n['wall_s']} s wall, {n['cpu_s']} s CPU for this fabric; load average {n['loadavg']})"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller fabrics, 0.25 s windows")
    ap.add_argument("--stages", choices=("3", "5", "both"), default="both")
    ap.add_argument("--leaves", type=int, default=0)
    ap.add_argument("--spines", type=int, default=0)
    ap.add_argument("--pods", type=int, default=0)
    ap.add_argument("--leaves-per-pod", type=int, default=0)
    ap.add_argument("--spines-per-pod", type=int, default=0)
    ap.add_argument("--supers-per-plane", type=int, default=0)
    ap.add_argument("--interval-ms", type=float, default=20.0)
    ap.add_argument("--delay-ms", type=float, default=1.0, help="one-way virtual link delay")
    ap.add_argument("--jitter-ms", type=float, default=0.5, help="extra per-link U(0, x) delay")
    ap.add_argument("--no-hmac", action="store_true")
    ap.add_argument("--steady-s", type=float, default=None, help="steady window (simulated)")
    ap.add_argument("--churn", type=float, default=1.0, help="band changes per spine per s")
    ap.add_argument("--prefixes-per-leaf", type=int, default=1)
    ap.add_argument("--rib3", choices=("full", "sample"), default=None)
    ap.add_argument("--rib5", choices=("full", "sample"), default=None)
    ap.add_argument("--rib-sample", type=int, default=4, help="leaves with a real Rib (sample)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", metavar="FILE", help="also write the numbers as JSON")
    a = ap.parse_args(argv)

    load0 = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"glbd scale simulation - {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M UTC},"
        f" {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()},"
        f" load average {load0}"
    )
    print(
        "command: "
        + " ".join(
            [
                os.path.basename(sys.executable),
                "-m",
                "bench.scale",
                *(argv if argv is not None else sys.argv[1:]),
            ]
        )
    )
    results = []
    for cfg in _configs(a):
        print(f"\n{_title(cfg)}: building...", flush=True)
        res = run(cfg, log=lambda m: print(m, flush=True))
        _print(res)
        results.append(res)
    ok = all(r.ok for r in results)
    print(
        f"\nsettle and weight checks: {'all met' if ok else 'FAILED'}; load average now "
        + " ".join(f"{x:.2f}" for x in os.getloadavg())
    )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(
                [
                    {
                        "config": asdict(r.cfg),
                        "numbers": r.numbers,
                        "degradations": [
                            {
                                "name": d.name,
                                "on_change": d.on_change,
                                "settle_ms": None if d.settle_s is None else d.settle_s * 1e3,
                                "leaves_changed": d.leaves_changed,
                                "weights_changed": len(d.changed),
                                "ok": d.ok,
                                "detail": d.detail,
                            }
                            for d in r.degradations
                        ],
                    }
                    for r in results
                ],
                f,
                indent=2,
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
