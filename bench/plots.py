"""Pictures from saved benchmark results (PNG, for docs/img and the operator guide).

* ``fabric``: the fabric benchmark's completion time per contender and case (every run as a
  dot, the median as a bar), with the fluid-model bound of each case as a line
  (:class:`bench.fabric.model.Bound`: no hotspot, ECMP under the hotspot, the optimum).
* ``latency``: the GLB loop's latency distribution from ``bench/glb_latency.py --json``, one
  CDF per event kind, several runs (e.g. before and after a change) overlaid. Files that
  carry ``samples_ms`` give the empirical CDF; older files carry only min/p50/p99/max, drawn
  as those four points joined (a coarse CDF, marked as such in the legend).

Usage::

    python -m bench.plots fabric bench/fabric/results/2026-11-24-residual.json \\
        --out docs/img/fabric-completion.png
    python -m bench.plots latency before.json=before after.json=after \\
        --out docs/img/glb-latency-cdf.png
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.fabric.model import Bound

#: contender key -> label, in drawing order (unknown keys follow, with their key as label)
CONTENDERS = {
    "glb": "glbd as shipped",
    "glb-fl": "glbd as shipped + flowlets",
    "glb-nomig": "glbd, busy buckets wait",
    "glb-all": "glbd, bands from all traffic",
    "ecmp": "ECMP",
    "frr": "FRR 10.7 NNHN count",
    "dlb": "glbd DLB only",
    "glb-ht": "glbd GLB (hash-threshold)",
    "glb-res": "glbd GLB (resilient)",
    "optimum": "offline optimum",
}
CASES = {
    "none": "no hotspot",
    "before": "hotspot before the exchange",
    "during": "hotspot starts mid-exchange",
    "fail": "one spine fails mid-exchange",
}
#: the latency series drawn, in order: the wire-to-kernel rows of glb_latency's report
LATENCY_SERIES = ("band, from the wire", "cut, from the wire", "restore, from the wire")
BFD_SERIES = "bfd failover"


def _pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def bounds(params: dict[str, Any]) -> dict[str, list[tuple[str, float]]]:
    """Per case, the fluid-model lines worth drawing: (label, seconds)."""
    rate = float(params["rate"])
    b = Bound(
        int(params["spines"]),
        int(params["leaves"]),
        rate,
        rate * float(params["hot"]),
        int(float(params["mbytes"]) * 1e6),
    )
    hot = [("fluid bound, ECMP", b.t_ecmp), ("fluid bound, optimum", b.t_opt)]
    return {"none": [("fluid bound", b.t_nohot)], "before": hot, "during": hot, "fail": []}


def plot_fabric(path: Path, out: Path, title: str = "", profile: str | None = None) -> Path:
    """Completion time of the all-to-all exchange per contender and case, with the bound (of
    one traffic ``profile`` for files that carry several)."""
    data = json.loads(path.read_text())
    rows = [r for r in data["results"] if r.get("ok")]
    if profile is not None:
        rows = [r for r in rows if r.get("profile", "deep") == profile]
    cases = [c for c in data["params"]["cases"] if any(r["case"] == c for r in rows)]
    present = {r["contender"] for r in rows}
    keys = [k for k in CONTENDERS if k in present] + sorted(present - CONTENDERS.keys())
    lines = bounds(data["params"])
    for case in cases:  # files with a bound per exchange: the median of the case's bounds
        per = [float(r["bound_s"]) for r in rows if r["case"] == case and r.get("bound_s")]
        if per:
            lines[case] = [("fluid bound (median)", statistics.median(per))]
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(cases), figsize=(4.2 * len(cases), 4.2), sharey=True)
    axes = [axes] if len(cases) == 1 else list(axes)
    colors = plt.get_cmap("tab10")
    for ax, case in zip(axes, cases, strict=True):
        for i, key in enumerate(keys):
            times = [r["completion_s"] for r in rows if r["case"] == case and r["contender"] == key]
            if not times:
                continue
            ax.bar(i, statistics.median(times), color=colors(i), alpha=0.55, width=0.7)
            ax.plot([i] * len(times), times, "o", color=colors(i), markersize=4)
        for j, (label, t) in enumerate(lines[case]):
            ax.axhline(t, color="black", linestyle=("--", ":")[j % 2], linewidth=1, label=label)
        ax.set_xticks(range(len(keys)), [CONTENDERS.get(k, k) for k in keys], rotation=35)
        ax.tick_params(axis="x", labelsize=8)
        for lbl in ax.get_xticklabels():
            lbl.set_horizontalalignment("right")
        ax.set_title(CASES.get(case, case), fontsize=10)
        ax.legend(fontsize=7, loc="upper right")
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("completion time, s (bar: median; dots: runs)")
    meta = data.get("meta", {})
    what = f"fabric benchmark, {meta.get('date', path.name)}"
    if profile is not None:
        what += f", profile {profile}"
    fig.suptitle(title or what, fontsize=11)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def cdf(series: dict[str, Any]) -> tuple[list[float], list[float], bool]:
    """(x ms, cumulative share, exact): the empirical CDF, or the four saved quantiles."""
    samples = series.get("samples_ms")
    if samples:
        xs = sorted(float(v) for v in samples)
        return xs, [(i + 1) / len(xs) for i in range(len(xs))], True
    keys = (("min_ms", 0.0), ("p50_ms", 0.5), ("p99_ms", 0.99), ("max_ms", 1.0))
    pts = [(float(series[k]), q) for k, q in keys if series.get(k) is not None]
    return [x for x, _ in pts], [q for _, q in pts], False


def plot_latency(runs: Sequence[tuple[Path, str]], out: Path, title: str = "") -> Path:
    """One panel of GLB-loop CDFs (band, cut, restore) and one of BFD failover, per run."""
    loaded = [(json.loads(p.read_text()), label) for p, label in runs]
    plt = _pyplot()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 4.2))
    colors = plt.get_cmap("tab10")
    styles = ("-", "--", ":", "-.")
    for r, (data, label) in enumerate(loaded):
        by_name = {s["name"]: s for s in data["series"] if s.get("n")}
        for i, name in enumerate((*LATENCY_SERIES, BFD_SERIES)):
            if name not in by_name:
                continue
            xs, ys, exact = cdf(by_name[name])
            target = bx if name == BFD_SERIES else ax
            kind = name.split(",")[0]
            tag = f"{kind} ({label})" + ("" if exact else ", quantiles only")
            target.plot(
                xs,
                ys,
                styles[r % len(styles)],
                color=colors(i),
                marker=None if exact else "o",
                markersize=4,
                drawstyle="steps-post" if exact else "default",
                label=tag,
            )
    ax.set_title("heartbeat on the wire -> kernel nexthop group", fontsize=10)
    bx.set_title("BFD failover: last packet -> next hop out of the group", fontsize=10)
    for a in (ax, bx):
        a.set_xlabel("ms")
        a.set_ylabel("share of events")
        a.set_ylim(0, 1.02)
        a.grid(alpha=0.3)
        if a.get_legend_handles_labels()[0]:
            a.legend(fontsize=7, loc="lower right")
    fig.suptitle(title or "GLB loop latency (bench/glb_latency.py)", fontsize=11)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _run_arg(text: str) -> tuple[Path, str]:
    """``FILE`` or ``FILE=LABEL`` (the label defaults to the file's date)."""
    path, _, label = text.partition("=")
    if not label:
        label = json.loads(Path(path).read_text()).get("date", Path(path).stem)
    return Path(path), label


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    fa = sub.add_parser("fabric", help="completion times of a bench.fabric results file")
    fa.add_argument("results", type=Path)
    fa.add_argument("--out", type=Path, required=True, help="PNG to write")
    fa.add_argument("--title", default="")
    la = sub.add_parser("latency", help="CDFs of bench/glb_latency.py --json files")
    la.add_argument("runs", nargs="+", metavar="FILE[=LABEL]")
    la.add_argument("--out", type=Path, required=True, help="PNG to write")
    la.add_argument("--title", default="")
    a = ap.parse_args(argv)
    if a.what == "fabric":
        print(plot_fabric(a.results, a.out, a.title))
    else:
        print(plot_latency([_run_arg(r) for r in a.runs], a.out, a.title))
    return 0


if __name__ == "__main__":
    sys.exit(main())
