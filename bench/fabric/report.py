"""The fabric benchmark's report: per profile and case a table of every contender, then the
verdict lines of glbd as shipped (``glb``) against the targets of the GLB default."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench.fabric import model
from bench.fabric.run import CONTENDERS, EXTRA_CONTENDERS, LABELS, PROFILES, Exchange, Params

TITLES = {
    "none": "no hotspot",
    "before": "hotspot before the exchange",
    "during": "hotspot starts mid-exchange",
    "fail": "one spine fails mid-exchange",
}
#: the targets of glbd's default (``glb``), per profile
T_SPEEDUP = 2.0  # hotspot before/during: at least this much faster than ECMP and FRR
T_NOHOT = 1.02  # no hotspot: at most this x ECMP's time
T_REORDER = 2  # at most ECMP's reorder events + this, every case
T_BOUND = 1.4  # at most this x the corrected fluid bound, every case
GOAL_BOUND = 1.25
T_CHANGED = 0.30  # fail: at most this share of the running flows change spine


def _med(vals: Sequence[float]) -> model.Summary:
    return model.summarize(list(vals))


def report(p: Params, results: list[Exchange], meta: dict[str, Any]) -> str:
    lines = [
        f"# Fabric benchmark {meta['date']} at {meta.get('commit', '?')}",
        "",
        f"command: `{meta['command']}`",
        f"machine: {meta['machine']}; load average at start {meta['load_start']}, "
        f"at end {meta.get('load_end', '?')}",
        f"CPUs: {meta.get('cpus', 'not recorded')}",
        f"fabric: {p.spines} spines x {p.leaves} leaves, every link tbf {p.rate:g} Mbit/s "
        f"(burst {p.burst}); all-to-all {p.mbytes:g} MB per ordered host pair "
        f"(flows per pair: the profile's); hotspot {p.hot_mbps:g} "
        f"Mbit/s UDP {p.hot_spine}->{p.hot_leaf} (before: {p.settle:g} s ahead; during: from "
        f"t={p.hot_at:g} s); fail: {p.fail_spine}'s ports down at t={p.fail_at:g} s; "
        f"runs: {p.runs}, contenders interleaved",
        "",
        "Bound: the fluid model of each exchange from what happened in it (the background's "
        "wire rate from the instant it started, the spine's failure from the instant its ports "
        "went down); 'x bound' is the median of the per-run ratios.",
        "",
    ]
    verdicts: list[str] = []
    for prof in p.profiles:
        rows = [e for e in results if e.profile == prof]
        if not rows:
            continue
        lines += _profile(p, prof, rows)
        verdicts += _verdicts(prof, rows)
    if verdicts:
        met = sum(1 for v in verdicts if v.endswith(": met"))
        lines += ["## Verdicts: glbd as shipped (`glb`)", "", *verdicts, ""]
        lines.append(f"glb: {met} of {len(verdicts)} targets met")
    return "\n".join(lines)


def _keys(rows: list[Exchange]) -> list[str]:
    return [k for k in CONTENDERS + EXTRA_CONTENDERS if any(e.contender == k for e in rows)]


def _profile(p: Params, prof: str, rows: list[Exchange]) -> list[str]:
    pr = PROFILES[prof]
    lines = [f"## Profile `{prof}`: {pr.note}", ""]
    keys = _keys(rows)
    for case in p.cases:
        by = {k: [e for e in rows if e.case == case and e.contender == k] for k in keys}
        if not any(by.values()):
            continue
        bound = _med([e.bound_s for v in by.values() for e in v])
        ecmp = _med([e.completion_s for e in by.get("ecmp", []) if e.ok])
        lines += [
            f"### {TITLES[case]} (fluid bound {bound.fmt()} s)",
            "",
            "| contender | completion s, median [min-max] | x bound | speed-up vs ECMP "
            "| reorder | retrans "
            + ("| CE received " if pr.ecn else "")
            + "| routers' CPU, % of a core per router | traffic CPU idle % "
            + ("| flows that changed spine " if case == "fail" else "")
            + "| ok |",
            "|---|---|---|---|---|---|---|---|"
            + ("---|" if pr.ecn else "")
            + ("---|" if case == "fail" else "")
            + "---|",
        ]
        for k in keys:
            ex = by[k]
            if not ex:
                continue
            t = _med([e.completion_s for e in ex if e.ok])
            xb = _med([e.completion_s / e.bound_s for e in ex if e.ok and e.bound_s > 0])
            vs = f"{ecmp.median / t.median:.2f}x" if ecmp.n and t.n else "-"
            ro = _med([float(e.reorder) for e in ex])
            rt = _med([float(e.retrans) for e in ex])
            ce = f"| {_med([float(e.ce) for e in ex]).median:.0f} " if pr.ecn else ""
            cp = _med([e.cp_cpu_pct for e in ex])
            idle = _med([e.cpu_idle_pct for e in ex])
            fail = ""
            if case == "fail":
                ch = _med([e.changed_share for e in ex])
                fail = (
                    f"| {100 * ch.median:.0f} % [{100 * ch.lo:.0f}-{100 * ch.hi:.0f}] "
                    if ch.n
                    else "| - "
                )
            okn = sum(1 for e in ex if e.ok)
            lines.append(
                f"| {LABELS[k]} | {t.fmt()} | {xb.median:.2f} | {vs} | {ro.median:.0f} "
                f"| {rt.median:.0f} {ce}| {cp.median:.1f} | {idle.median:.0f} {fail}"
                f"| {okn}/{len(ex)} |"
            )
        lines.append("")
    lines += _headroom(rows)
    pp = p.for_profile(prof)
    hs = model.hash_spread(pp.spines, pp.leaves, pp.flows)
    lines += [
        f"A flow hash that never moves a flow ({pp.flows} per host pair, placed at random): "
        f"its busiest link carries {hs.median:.2f}x its balanced share (10th-90th percentile "
        f"{hs.lo:.2f}-{hs.hi:.2f}, {hs.n} placements), so it takes at least that many times "
        f"the no-hotspot bound (target: {T_BOUND:g}x)",
        "",
    ]
    rx = {k: _med([e.router_rx_pct for e in rows if e.contender == k]) for k in keys}
    if any(r.n for r in rx.values()):
        lines += [
            "Packets received on the router CPUs (% of the machine's, median per exchange; 0 "
            "when isolation holds): "
            + ", ".join(f"{k} {r.median:.1f}" for k, r in rx.items() if r.n),
            "",
        ]
    return lines


def _headroom(rows: list[Exchange]) -> list[str]:
    """What the 2x target of each hotspot case asks of ``glb``, next to ``glb``'s own time with
    no hotspot: a hotspot only takes capacity away, so a target below that time asks for the
    leaves' own flows to be spread better, not only for the hot link to be avoided."""

    def med(case: str, k: str) -> float | None:
        s = _med([e.completion_s for e in rows if e.case == case and e.contender == k and e.ok])
        return s.median if s.n else None

    none = med("none", "glb")
    out = []
    for case in ("before", "during"):
        t, te = med(case, "glb"), med(case, "ecmp")
        if t is None or te is None or none is None:
            continue
        need = te / T_SPEEDUP
        out.append(
            f"{TITLES[case]}: {T_SPEEDUP:g}x ECMP needs `glb` <= {need:.2f} s; it took "
            f"{t:.2f} s, and {none:.2f} s with no hotspot"
            + (" (the target is below its own time with no hotspot)" if need < none else "")
        )
    return [*out, ""] if out else []


def _verdicts(prof: str, rows: list[Exchange]) -> list[str]:
    """The targets of issue 'GLB that pays off in its default configuration' for ``glb``."""
    if not any(e.contender == "glb" for e in rows):
        return []

    def ex(case: str, k: str) -> list[Exchange]:
        return [e for e in rows if e.case == case and e.contender == k]

    def med_t(case: str, k: str) -> float | None:
        s = _med([e.completion_s for e in ex(case, k) if e.ok])
        return s.median if s.n else None

    def v(what: str, value: str, target: str, ok: bool) -> str:
        return (
            f"- VERDICT {prof} glb {what}: {value} (target {target}): {'met' if ok else 'NOT met'}"
        )

    out: list[str] = []
    cases = [c for c in TITLES if ex(c, "glb")]
    for case in ("before", "during"):
        t = med_t(case, "glb")
        if t is None:
            continue
        for base in ("ecmp", "frr"):
            tb = med_t(case, base)
            if tb:
                out.append(v(f"hotspot {case}, speed-up vs {base}", f"{tb / t:.2f}x",
                             f">= {T_SPEEDUP:g}x", tb / t >= T_SPEEDUP))  # fmt: skip
    t, te = med_t("none", "glb"), med_t("none", "ecmp")
    if t and te:
        out.append(
            v("no hotspot, time vs ECMP", f"{t / te:.3f}", f"<= {T_NOHOT}", t / te <= T_NOHOT)
        )
    for case in cases:
        rg = _med([float(e.reorder) for e in ex(case, "glb")])
        re = _med([float(e.reorder) for e in ex(case, "ecmp")])
        if rg.n and re.n:
            out.append(v(f"{case}, reorder events", f"{rg.median:g} (ECMP {re.median:g})",
                         f"<= ECMP + {T_REORDER}", rg.median <= re.median + T_REORDER))  # fmt: skip
    for case in cases:
        xb = _med([e.completion_s / e.bound_s for e in ex(case, "glb") if e.ok and e.bound_s > 0])
        if xb.n:
            goal = "goal 1.25 met" if xb.median <= GOAL_BOUND else (
                f"{100 * (xb.median / GOAL_BOUND - 1):.0f} % above the goal 1.25")  # fmt: skip
            out.append(v(f"{case}, time / fluid bound", f"{xb.median:.2f} ({goal})",
                         f"<= {T_BOUND}", xb.median <= T_BOUND))  # fmt: skip
    ch = _med([e.changed_share for e in ex("fail", "glb")])
    if ch.n:
        t, te = med_t("fail", "glb"), med_t("fail", "ecmp")
        vs = f"; exchange {t:.2f} s vs ECMP {te:.2f} s" if t and te else ""
        out.append(v("fail, running flows that changed spine", f"{100 * ch.median:.0f} %{vs}",
                     f"<= {100 * T_CHANGED:.0f} %", ch.median <= T_CHANGED))  # fmt: skip
    return out
