"""What ``glbctl`` and the metrics show: snapshots built from the parts, and the Prometheus
samples derived from those same snapshots (metric names and labels are a public contract, see
``tests/vectors/glbctl_contract.json``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypedDict

from glbd.core.pathtable import PathTable
from glbd.io.metrics import Sample

# ---- snapshot shapes the samplers read (the keys they use; snapshots carry more) --------------


class BfdSessionRow(TypedDict, total=False):
    peer: str
    interface: str
    state: str
    flaps: int
    detect_time_ms: float | None
    drops: dict[str, int]


class BfdCounters(TypedDict, total=False):
    unmatched_drops: dict[str, int]
    truncated_datagrams: int


class BfdView(TypedDict, total=False):
    sessions: list[BfdSessionRow]
    counters: BfdCounters
    engine: dict[str, Any]


class LinkRow(TypedDict, total=False):
    ifname: str
    band: int
    down: bool
    load_pct: float
    queue_bytes: float
    residual_mbps: float | None
    capacity_mbps: float


class HeartbeatRow(TypedDict, total=False):
    receiver: dict[str, Any]
    sender: dict[str, Any]


class QualityView(TypedDict, total=False):
    links: list[LinkRow]
    heartbeats: list[HeartbeatRow]
    quality: dict[str, Any]
    counters: dict[str, int]


class FibView(TypedDict, total=False):
    profiles: list[dict[str, Any]]
    fib: dict[str, Any]
    last_sync: dict[str, Any] | None
    counters: dict[str, Any]


class BgpView(TypedDict, total=False):
    neighbors: list[dict[str, Any]]
    counters: dict[str, Any]
    routes: list[dict[str, Any]]


# ---- snapshots --------------------------------------------------------------------------------


def quality_counters(
    counters: Mapping[str, int], heartbeats: Mapping[str, Any] | None
) -> dict[str, Any]:
    """``glbctl counters`` for the quality part: the node's counters and the heartbeat
    receiver's, every drop by reason."""
    out: dict[str, Any] = dict(counters)
    rx = (heartbeats or {}).get("receiver") or {}
    if rx:
        out["heartbeats_accepted"] = rx.get("accepted", 0)
        for kind in ("sequence_jumps", "sequence_recoveries", "parallel_copies"):
            out[f"heartbeat_{kind}"] = rx.get(kind, 0)
        out["heartbeat_drops"] = dict(rx.get("drops") or {})
    tx = (heartbeats or {}).get("sender") or {}
    if tx:
        out["heartbeats_sent"] = tx.get("sent", 0)
    return out


def quality_snapshot(
    links: Iterable[Mapping[str, Any]],
    heartbeats: Mapping[str, Any] | None,
    table: PathTable | None,
    counters: Mapping[str, int],
) -> dict[str, Any]:
    """``glbctl links/heartbeats/quality``: link qualities, the heartbeat endpoint, the path
    table and the node's counters."""
    return {
        "links": [dict(q) for q in links],
        "heartbeats": [dict(heartbeats)] if heartbeats else [],
        "quality": table.to_dict() if table else {},
        "counters": dict(counters),
    }


_FIB_SUMMARY = (
    "protocol",
    "table",
    "weight_bits",
    "compat_mode",
    "stale_remaining_s",
    "stale_held",
    "foreign_routes",
    "conflicts",
    "kernel",
    "last_errors",
)


def fib_snapshot(
    fib: Mapping[str, Any], table: PathTable | None, last_sync: Mapping[str, Any] | None
) -> dict[str, Any]:
    """``glbctl profiles``: each profile's desired weights (path table) beside what the FIB
    programs and what the kernel has, with a ``diff`` flag per profile."""
    groups = fib.get("groups", {})
    prof = table.profiles_dict() if table else {"profiles": []}
    rows = []
    for p in prof.get("profiles", []):
        g = groups.get(p["key"], {})
        installed = {lab.split("@")[0]: w for lab, w in g.get("installed", {}).items()}
        programmed = {lab.split("@")[0]: w for lab, w in g.get("programmed", {}).items()}
        weights = [
            {
                **w,
                "programmed": programmed.get(w["next_hop"], 0),
                "installed": installed.get(w["next_hop"], 0),
            }
            for w in p["weights"]
        ]
        rows.append(
            {
                **p,
                "weights": weights,
                "nhid": g.get("nhid"),
                "excluded": g.get("excluded", {}),
                "diff": bool(g.get("diff", True)) if g else True,
                "note": g.get("note", ""),
            }
        )
    return {
        "profiles": rows,
        "fib": {k: fib.get(k) for k in _FIB_SUMMARY},
        "last_sync": dict(last_sync) if last_sync else None,  # null until the first sync
        "counters": fib.get("counters", {}),
    }


def routes_snapshot(
    rows: list[dict[str, Any]], fib_routes: Mapping[str, Any], table: PathTable | None
) -> list[dict[str, Any]]:
    """``glbctl routes``: the RIB's per-prefix next hops / next-next hops, plus the kernel
    group each prefix points at and whether it matches what glbd wants."""
    for r in rows:
        fr = fib_routes.get(r.get("prefix"))  # type: ignore[arg-type]
        r["profile"] = table.profile_of(r["prefix"]) if table else None
        r["nhid"] = fr.get("installed_nhid") if fr else None
        r["weights"] = [
            {"next_hop": lab.split("@")[0], "ifname": lab.partition("@")[2], "installed": w}
            for lab, w in sorted((fr or {}).get("installed", {}).items())
        ]
        r["fib_diff"] = (
            bool(fr.get("diff")) if fr else (not r.get("originated") and bool(r.get("next_hops")))
        )
    return rows


def plain(v: Any) -> Any:
    """``v`` as JSON-safe data (dataclasses as dicts, sets as lists, the rest as strings)."""
    if hasattr(v, "__dataclass_fields__"):
        return {k: plain(getattr(v, k)) for k in v.__dataclass_fields__}
    if isinstance(v, dict):
        return {str(k): plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple | set | frozenset):
        return [plain(x) for x in v]
    if isinstance(v, int | float | str | bool) or v is None:
        return v
    return str(v)


# ---- Prometheus samples -----------------------------------------------------------------------


def bfd_samples(snap: BfdView) -> Iterable[Sample]:
    for s in snap.get("sessions", []):
        lab = {"peer": str(s.get("peer")), "interface": str(s.get("interface"))}
        yield Sample(
            "glbd_bfd_up",
            1.0 if s.get("state") == "up" else 0.0,
            lab,
            "BFD session state is Up (1) or not (0)",
        )
        yield Sample(
            "glbd_bfd_flaps_total",
            float(s.get("flaps", 0)),
            lab,
            "BFD Up->Down transitions",
            kind="counter",
        )
        yield Sample(
            "glbd_bfd_detect_time_seconds",
            float(s.get("detect_time_ms") or 0) / 1e3,
            lab,
            "negotiated BFD detection time",
        )
        for reason, n in (s.get("drops") or {}).items():
            yield Sample(
                "glbd_bfd_drops_total",
                float(n),
                {**lab, "reason": str(reason)},
                "BFD packets dropped, by reason",
                kind="counter",
            )
    # drops before any session matched: their own metric, labelled by reason only, since there
    # is no peer to attribute them to (the source address is the sender's to choose), and
    # glbd_bfd_drops_total keeps one label set (peer, interface, reason)
    counters = snap.get("counters") or {}
    for reason, n in (counters.get("unmatched_drops") or {}).items():
        yield Sample(
            "glbd_bfd_unmatched_drops_total",
            float(n),
            {"reason": str(reason)},
            "BFD packets dropped before any session matched them, by reason",
            kind="counter",
        )
    if counters:
        yield Sample(
            "glbd_bfd_truncated_datagrams_total",
            float(counters.get("truncated_datagrams", 0)),
            help="BFD datagrams longer than a control packet can be (read up to 256 bytes, "
            "processed)",
            kind="counter",
        )
    eng = snap.get("engine", {})
    if eng:
        yield Sample(
            "glbd_bfd_timer_lag_max_seconds",
            float(eng.get("timer_lag_max_ms", 0)) / 1e3,
            help="max lateness of a BFD transmit/expiry timer",
        )


def quality_samples(snap: QualityView) -> Iterable[Sample]:
    for q in snap.get("links", []):
        lab = {"ifname": str(q.get("ifname"))}
        yield Sample("glbd_link_band", float(q.get("band", 0)), lab, "link quality band 0..7")
        yield Sample("glbd_link_down", 1.0 if q.get("down") else 0.0, lab, "link down flag")
        yield Sample(
            "glbd_link_load_percent",
            float(q.get("load_pct", 0)),
            lab,
            "EWMA egress load, percent of capacity",
        )
        yield Sample(
            "glbd_link_queue_bytes", float(q.get("queue_bytes", 0)), lab, "EWMA qdisc backlog"
        )
        res, cap = q.get("residual_mbps"), q.get("capacity_mbps", 0)
        yield Sample(
            "glbd_link_reported_capacity_mbps",
            float(cap if res is None else res),
            lab,
            "capacity the heartbeats report: the residual when foreign_classes are set",
        )
    for hb in snap.get("heartbeats", []):
        rx = hb.get("receiver") or {}
        yield Sample(
            "glbd_heartbeats_accepted_total",
            float(rx.get("accepted", 0)),
            help="heartbeats accepted",
            kind="counter",
        )
        for reason, n in (rx.get("drops") or {}).items():
            yield Sample(
                "glbd_heartbeat_drops_total",
                float(n),
                {"reason": str(reason)},
                "heartbeats dropped, by reason",
                kind="counter",
            )
        for kind in ("sequence_jumps", "sequence_recoveries", "parallel_copies"):
            yield Sample(
                f"glbd_heartbeat_{kind}_total",
                float(rx.get(kind, 0)),
                help=f"heartbeat receiver: {kind.replace('_', ' ')}",
                kind="counter",
            )
        for sd in rx.get("senders", []):
            yield Sample(
                "glbd_heartbeat_age_seconds",
                float(sd.get("age_ms") or 0) / 1e3,
                {"sender": str(sd.get("node_id"))},
                "age of the last heartbeat",
            )
        tx = hb.get("sender") or {}
        if tx:
            yield Sample(
                "glbd_heartbeats_sent_total",
                float(tx.get("sent", 0)),
                help="heartbeats sent",
                kind="counter",
            )
    for k, v in snap.get("counters", {}).items():
        yield Sample(f"glbd_{k}_total", float(v), help=f"glbd {k}", kind="counter")


def fib_samples(snap: FibView) -> Iterable[Sample]:
    for p in snap.get("profiles") or []:
        for w in p.get("weights", []):
            yield Sample(
                "glbd_weight",
                float(w.get("value", 0)),
                {
                    "profile": str(p.get("key")),
                    "next_hop": str(w.get("next_hop")),
                    "source": str(w.get("source")),
                },
                "desired ECMP weight per profile",
            )
            yield Sample(
                "glbd_weight_installed",
                float(w.get("installed", 0)),
                {"profile": str(p.get("key")), "next_hop": str(w.get("next_hop"))},
                "weight in the kernel's nexthop group",
            )
        yield Sample(
            "glbd_profile_fib_diff",
            1.0 if p.get("diff") else 0.0,
            {"profile": str(p.get("key"))},
            "kernel group differs from what glbd programs (1) or not (0)",
        )
    fib = snap.get("fib") or {}
    yield Sample(
        "glbd_fib_foreign_routes",
        float(len(fib.get("foreign_routes") or [])),
        help="prefixes glbd wants that another protocol's route holds (left alone)",
    )
    for reason, n in (fib.get("conflicts") or {}).items():
        yield Sample(
            "glbd_fib_conflicts_total",
            float(n),
            {"reason": str(reason)},
            "FIB writes left out because the object is not glbd's, by reason",
            kind="counter",
        )
    for kind, n in (fib.get("stale_held") or {}).items():
        yield Sample(
            "glbd_fib_stale_held",
            float(n),
            {"kind": str(kind)},
            "adopted objects not re-learned since the restart, kept by the stale timer",
        )


def bgp_samples(snap: BgpView) -> Iterable[Sample]:
    for n in snap.get("neighbors", []):
        lab = {"peer": str(n.get("peer"))}
        yield Sample(
            "glbd_bgp_peer_up",
            1.0 if n.get("state") == "up" else 0.0,
            lab,
            "BGP session established",
        )
        yield Sample(
            "glbd_bgp_prefixes_in", float(n.get("prefixes_in", 0)), lab, "prefixes received"
        )
    for reason, n in (snap.get("counters", {}).get("api_dropped") or {}).items():
        yield Sample(
            "glbd_exabgp_api_drops_total",
            float(n),
            {"reason": str(reason)},
            "malformed ExaBGP API lines",
            kind="counter",
        )
