"""What ``glbctl`` and the metrics show: snapshots built from the parts, and the Prometheus
samples derived from those same snapshots (metric names and labels are a public contract, see
``tests/vectors/glbctl_contract.json``)."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict, cast

from glbd.core.pathtable import PathTable
from glbd.core.reasons import (
    NHC_DISREGARDED,
    MetricsDrop,
    NhcDiscard,
    ProfileFallback,
    RouteRejected,
)
from glbd.io.metrics import LATENCY_BUCKETS, Metric, Sample, histogram

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
    packets_in: int
    kernel_packets_in: int


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
    exabgp: dict[str, Any]
    drained: bool
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
        for kind in ("sequence_jumps", "sequence_recoveries", "parallel_copies", "expirations"):
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


def iter_routes(
    rows: Iterable[dict[str, Any]],
    fib_route: Callable[[str], Mapping[str, Any] | None],
    table: PathTable | None,
) -> Iterator[dict[str, Any]]:
    """``glbctl routes``: the RIB's per-prefix next hops / next-next hops, plus the kernel
    group each prefix points at and whether it matches what glbd wants, one row at a time
    (``fib_route(prefix)``: that prefix's FIB row), for an answer streamed as it is built."""
    for r in rows:
        yield route_row(r, fib_route(r["prefix"]), table)


def route_row(
    r: dict[str, Any], fr: Mapping[str, Any] | None, table: PathTable | None
) -> dict[str, Any]:
    """One RIB row joined with its FIB row ``fr`` (``None``: glbd programs no route)."""
    r["profile"] = table.profile_of(r["prefix"]) if table else None
    r["nhid"] = fr.get("installed_nhid") if fr else None
    r["weights"] = [
        {"next_hop": lab.split("@")[0], "ifname": lab.partition("@")[2], "installed": w}
        for lab, w in sorted((fr or {}).get("installed", {}).items())
    ]
    r["fib_diff"] = (
        bool(fr.get("diff")) if fr else (not r.get("originated") and bool(r.get("next_hops")))
    )
    return r


def route_filter(prefix: str | None) -> Callable[[Any], bool] | None:
    """``glbctl routes PREFIX`` as a test on a RIB prefix: ``prefix`` and the prefixes inside
    it; a host prefix (an address) also selects the routes that contain it."""
    if not prefix:
        return None
    want = ipaddress.ip_network(prefix, strict=False)
    host = want.prefixlen == want.max_prefixlen

    def hit(text: Any) -> bool:
        try:
            net = ipaddress.ip_network(str(text))
        except ValueError:
            return False
        if net.version != want.version:
            return False
        return net.subnet_of(want) or (host and want.subnet_of(net))  # type: ignore[arg-type]

    return hit


def select_routes(rows: list[dict[str, Any]], prefix: str | None) -> list[dict[str, Any]]:
    """``glbctl routes PREFIX`` over built rows (see :func:`route_filter`)."""
    hit = route_filter(prefix)
    return rows if hit is None else [r for r in rows if hit(r.get("prefix"))]


def select_neighbors(rows: list[dict[str, Any]], peer: str | None) -> list[dict[str, Any]]:
    """``glbctl neighbors PEER``: the peer by address, BGP identifier or interface."""
    if not peer:
        return rows
    return [r for r in rows if peer in (str(r.get(k)) for k in ("peer", "bgp_id", "interface"))]


def profile_changed(row: Mapping[str, Any]) -> bool:
    """``glbctl profiles --changed``: glbd acts on this profile, i.e. its desired weights are
    not all equal (traffic steered off plain ECMP), a next hop is left out of the kernel group
    (``excluded``), or the kernel group differs from what glbd programs (``diff``)."""
    values = {w.get("value") for w in row.get("weights") or []}
    return len(values) > 1 or bool(row.get("excluded")) or bool(row.get("diff"))


# ---- row filters: glbctl bfd|links|heartbeats|quality --neighbor/--interface/--state -----------


@dataclass(frozen=True)
class RowFilter:
    """What ``--neighbor``, ``--interface`` and ``--state`` select. A neighbor is named by
    address, BGP identifier or interface; :func:`row_filter` resolves it into both the
    identifiers (for rows naming a peer) and the interfaces (for rows naming only a port)."""

    neighbor_ids: frozenset[str] | None = None
    neighbor_ifs: frozenset[str] | None = None
    interface: str | None = None
    state: str | None = None

    @property
    def empty(self) -> bool:
        return self.neighbor_ids is None and self.interface is None and self.state is None

    def peer(self, *ids: Any) -> bool:
        return self.neighbor_ids is None or any(str(i) in self.neighbor_ids for i in ids)

    def port(self, ifname: Any, via_neighbor: bool = False) -> bool:
        """``ifname`` passes ``--interface`` (and, for rows without a peer, ``--neighbor``)."""
        if self.interface is not None and str(ifname) != self.interface:
            return False
        return not via_neighbor or self.neighbor_ifs is None or str(ifname) in self.neighbor_ifs

    def in_state(self, *states: Any) -> bool:
        return self.state is None or self.state.lower() in {str(s).lower() for s in states}


def row_filter(args: Mapping[str, Any], neighbors: Iterable[Mapping[str, Any]]) -> RowFilter:
    """The filter ``args`` ask for; ``neighbors``: the BGP neighbor rows (and config) that
    resolve a ``--neighbor`` name to its addresses, BGP identifier and interface."""
    ids: frozenset[str] | None = None
    ifs: frozenset[str] | None = None
    name = args.get("neighbor")
    if name:
        rows = select_neighbors([dict(r) for r in neighbors], name)
        ids = frozenset({name} | {str(r[k]) for r in rows for k in ("peer", "bgp_id") if r.get(k)})
        ifs = frozenset({name} | {str(r["interface"]) for r in rows if r.get("interface")})
    return RowFilter(ids, ifs, args.get("interface") or None, args.get("state") or None)


def filter_section(cmd: str, result: Any, f: RowFilter) -> Any:
    """``result`` of ``glbctl cmd`` cut to the rows ``f`` selects (a result of another shape,
    e.g. a note that the part is not running, is returned as it is)."""
    if f.empty:
        return result
    if cmd == "bfd" and isinstance(result, list):
        return [
            r
            for r in result
            if f.peer(r.get("peer")) and f.port(r.get("interface")) and f.in_state(r.get("state"))
        ]
    if cmd == "links" and isinstance(result, list):
        return [
            r
            for r in result
            if f.port(r.get("ifname"), via_neighbor=True)
            and f.in_state("down" if r.get("down") else "up")
        ]
    if cmd == "heartbeats" and isinstance(result, list):
        return [_heartbeat_rows(r, f) for r in result]
    if cmd == "quality" and isinstance(result, dict):
        return _quality_rows(result, f)
    return result


def _heartbeat_rows(row: Mapping[str, Any], f: RowFilter) -> dict[str, Any]:
    """An endpoint's receiver cut to the fabric interfaces and senders ``f`` selects."""
    rx = row.get("receiver")
    if not isinstance(rx, dict):
        return dict(row)
    ports = [
        p
        for p in rx.get("interfaces") or []
        if f.peer(p.get("neighbor_address"), p.get("neighbor_id")) and f.port(p.get("ifname"))
    ]
    # a sender is a spine's node id: the one behind a selected port, or the neighbor named
    behind = {str(p.get("neighbor_id")) for p in ports}
    senders = [
        s
        for s in rx.get("senders") or []
        if f.peer(s.get("node_id")) and (f.interface is None or str(s.get("node_id")) in behind)
    ]
    return {**row, "receiver": {**rx, "interfaces": ports, "senders": senders}}


def _quality_rows(q: Mapping[str, Any], f: RowFilter) -> dict[str, Any]:
    """The path table cut to the next hops ``f`` selects; a profile left without one goes.
    A next hop's state is ``down`` (its local or remote link is) or ``up``, or its weight's
    source (``glb``, ``dlb``, ...)."""
    if not isinstance(q.get("profiles"), list):  # no path table (the part is not running)
        return dict(q)
    profiles = []
    for p in q.get("profiles") or []:
        hops = []
        for nh in p.get("next_hops") or []:
            w = nh.get("weight") or {}
            i = w.get("inputs") or {}
            down = bool(i.get("local_down") or i.get("remote_down"))
            if (
                f.peer(nh.get("address"), nh.get("bgp_id"))
                and f.port(nh.get("ifname"))
                and f.in_state("down" if down else "up", w.get("source"))
            ):
                hops.append(nh)
        if hops:
            profiles.append({**p, "next_hops": hops})
    out = {**q, "profiles": profiles}
    ports = {str(nh.get("ifname")) for p in profiles for nh in p["next_hops"]}
    ids = {str(nh.get("bgp_id")) for p in profiles for nh in p["next_hops"]}
    if isinstance(q.get("local"), dict):
        out["local"] = {k: v for k, v in q["local"].items() if k in ports}
    if isinstance(q.get("remote"), dict):
        out["remote"] = {k: v for k, v in q["remote"].items() if k in ids}
    return out


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
        for name, key, text in _BFD_COUNTERS:
            n = cast(int, counters.get(key, 0))  # a key of BfdCounters, as _BFD_COUNTERS lists
            yield Sample(name, float(n), help=text, kind="counter")
    eng = snap.get("engine", {})
    if eng:
        yield Sample(
            "glbd_bfd_kernel_rx",
            1.0 if (eng.get("kernel_rx") or {}).get("enabled") else 0.0,
            help="1 if the BFD engine's kernel receive path (BPF, tc ingress) is loaded",
        )
        yield Sample(
            "glbd_bfd_timer_lag_max_seconds",
            float(eng.get("timer_lag_max_ms", 0)) / 1e3,
            help="max lateness of a BFD transmit/expiry timer",
        )


#: the BFD engine's own counters: (metric, key in its ``counters`` section, help)
_BFD_COUNTERS = (
    (
        "glbd_bfd_truncated_datagrams_total",
        "truncated_datagrams",
        "BFD datagrams longer than a control packet can be (read up to 256 bytes, processed)",
    ),
    ("glbd_bfd_packets_in_total", "packets_in", "BFD packets received, however they were taken"),
    (
        "glbd_bfd_kernel_packets_in_total",
        "kernel_packets_in",
        "BFD packets the kernel receive path took: repeats of a session's steady state, never "
        "read from the socket",
    ),
)

#: Mb/s (what the link monitor and the heartbeats carry) to bytes/s: Prometheus's base unit for
#: data is the byte, and node_exporter's interface counters are bytes too
_MBPS_TO_BYTES = 1e6 / 8

#: the node's counters (``glbctl counters``, quality part) as metrics: name and help
NODE_COUNTERS: dict[str, tuple[str, str]] = {
    "fib_syncs": ("glbd_fib_syncs_total", "FIB sync steps applied (full or incremental)"),
    "fib_sync_errors": (
        "glbd_fib_sync_errors_total",
        "FIB sync steps the kernel refused (the next sync is full)",
    ),
    "fib_fast_weights": (
        "glbd_fib_fast_weights_total",
        "weight changes written at once on the FIB's fast lane, not queued behind a sync step",
    ),
    "fib_fast_failovers": (
        "glbd_fib_fast_failovers_total",
        "BFD failures that took a next hop out of the kernel groups before BGP reacted",
    ),
    "bfd_engine_failovers": (
        "glbd_bfd_engine_failovers_total",
        "fast failovers the BFD engine had already written to the kernel",
    ),
    "bfd_engine_exits": (
        "glbd_bfd_engine_exits_total",
        "times the BFD engine process died (restarted at once, then with backoff; fast failover "
        "is off until it is back)",
    ),
    "bfd_engine_restarts": (
        "glbd_bfd_engine_restarts_total",
        "times the BFD engine was started again with every session",
    ),
    "bfd_engine_unconfirmed": (
        "glbd_bfd_engine_unconfirmed_total",
        "sessions Up before the engine died and not Up again within 3 s of its restart: taken "
        "as Down",
    ),
    "bfd_failover_arms": (
        "glbd_bfd_failover_arms_total",
        "failover maps handed to the BFD engine",
    ),
    "bfd_failover_arm_errors": (
        "glbd_bfd_failover_arm_errors_total",
        "failover maps the BFD engine did not take",
    ),
    "bfd_events": ("glbd_bfd_events_total", "BFD session state changes handled"),
    "bgp_events": ("glbd_bgp_events_total", "BGP speaker events handled"),
    "remote_updates": (
        "glbd_heartbeat_remote_updates_total",
        "heartbeat path-quality updates handed to the path table",
    ),
    "local_changes": (
        "glbd_link_band_changes_total",
        "local link-quality band changes handed to the path table",
    ),
    "graceful_restart_arms": (
        "glbd_graceful_restart_arms_total",
        "times glbctl graceful-restart armed the next stop as a graceful restart",
    ),
}


def quality_samples(snap: QualityView) -> Iterable[Sample]:
    for q in snap.get("links", []):
        lab = {"ifname": str(q.get("ifname"))}
        yield Sample("glbd_link_band", float(q.get("band", 0)), lab, "link quality band 0..7")
        yield Sample("glbd_link_down", 1.0 if q.get("down") else 0.0, lab, "link down flag")
        yield Sample(
            "glbd_link_load_ratio",
            float(q.get("load_pct", 0)) / 100.0,
            lab,
            "EWMA egress load as a fraction of capacity (0-1)",
        )
        yield Sample(
            "glbd_link_queue_bytes", float(q.get("queue_bytes", 0)), lab, "EWMA qdisc backlog"
        )
        res, cap = q.get("residual_mbps"), q.get("capacity_mbps", 0)
        yield Sample(
            "glbd_link_reported_capacity_bytes_per_second",
            float(cap if res is None else res) * _MBPS_TO_BYTES,
            lab,
            "capacity the heartbeats report, bytes/s: the residual when foreign_classes are set",
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
        for kind in ("sequence_jumps", "sequence_recoveries", "parallel_copies", "expirations"):
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
                "age of the last heartbeat from a live sender (gone once it expires)",
            )
        # per BGP neighbour on a fabric port, kept while the session is: the receiver forgets an
        # expired sender, so these are what a staleness alert can see
        live = {str(sd.get("node_id")) for sd in rx.get("senders") or []}
        for port in rx.get("interfaces") or []:
            nid = str(port.get("neighbor_id"))
            lab = {"neighbor": nid, "interface": str(port.get("ifname"))}
            yield Sample(
                "glbd_heartbeat_sender_up",
                1.0 if nid in live else 0.0,
                lab,
                "the BGP neighbour on this port has live heartbeats (1), or none yet or they "
                "expired (0)",
            )
            ago = port.get("last_rx_ago_ms")
            if ago is not None:
                yield Sample(
                    "glbd_heartbeat_port_age_seconds",
                    float(ago) / 1e3,
                    lab,
                    "time since the last heartbeat accepted on this port (keeps growing after "
                    "the sender expires)",
                )
        tx = hb.get("sender") or {}
        if tx:
            yield Sample(
                "glbd_heartbeats_sent_total",
                float(tx.get("sent", 0)),
                help="heartbeats sent",
                kind="counter",
            )
    counters = snap.get("counters", {})
    for k, v in counters.items():
        named = NODE_COUNTERS.get(k)
        if named is not None:  # a counter without a name and help is not exported
            yield Sample(named[0], float(v), help=named[1], kind="counter")
    for why in ProfileFallback:
        yield Sample(
            "glbd_profile_fallbacks_total",
            float(counters.get(why.counter, 0)),
            {"reason": str(why)},
            "prefixes routed over plain ECMP of their next hops instead of a profile of their "
            "own, by reason",
            kind="counter",
        )
    yield Sample(
        "glbd_profile_fallback_prefixes",
        float(counters.get("profile_fallback_prefixes", 0)),
        help="prefixes routed over plain ECMP now because the profile cap keeps their profile out",
    )


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
    if "drained" in snap:
        yield Sample(
            "glbd_drained",
            1.0 if snap["drained"] else 0.0,
            help="the router is drained: graceful shutdown toward its BGP peers, band 0 in "
            "its heartbeats (glbctl drain or [bgp] drain)",
        )
    for n in snap.get("neighbors", []):
        # the interface tells apart unnumbered neighbours (a link-local peer on each port)
        lab = {"peer": str(n.get("peer")), "interface": str(n.get("interface") or "")}
        yield Sample(
            "glbd_bgp_peer_up",
            1.0 if n.get("state") == "up" else 0.0,
            lab,
            "BGP session established",
        )
        yield Sample(
            "glbd_bgp_uptime_seconds",
            float(n.get("uptime_s") or 0),
            lab,
            "time since the BGP session was established (0 while it is not)",
        )
        yield Sample(
            "glbd_bgp_prefixes_in", float(n.get("prefixes_in", 0)), lab, "prefixes received"
        )
        yield Sample(
            "glbd_bgp_prefixes_out",
            float(n.get("prefixes_out", 0)),
            lab,
            "prefixes advertised to the neighbour",
        )
        peer_counters = n.get("counters") or {}
        yield Sample(
            "glbd_bgp_established_total",
            float(peer_counters.get("established", 0)),
            lab,
            "times the BGP session reached Established (each flap adds one)",
            kind="counter",
        )
        yield Sample(
            "glbd_bgp_max_prefixes_exceeded_total",
            float(peer_counters.get("max_prefixes_exceeded", 0)),
            lab,
            "times the neighbour's prefix count crossed its max_prefixes",
            kind="counter",
        )
    exa = snap.get("exabgp")
    if exa is not None:
        yield Sample(
            "glbd_exabgp_restarts_total",
            float(exa.get("deaths", 0)),
            help="times ExaBGP died (or its API pipe broke) and glbd started it again",
            kind="counter",
        )
    counters = snap.get("counters", {})
    for why in RouteRejected:
        yield Sample(
            "glbd_bgp_routes_rejected_total",
            float(counters.get(why.counter, 0)),
            {"reason": str(why)},
            "received routes not taken (AS loop, import filter, inactive family, max prefixes, "
            "unusable next hop), by reason",
            kind="counter",
        )
    for status in sorted(NHC_DISREGARDED):
        yield Sample(
            "glbd_nhc_disregarded_total",
            float(counters.get(status, 0)),
            {"reason": str(status)},
            "received routes whose NHC was disregarded (the route is kept), by reason",
            kind="counter",
        )
    for discard in NhcDiscard:
        yield Sample(
            "glbd_nhc_characteristics_discarded_total",
            float(counters.get(discard.counter, 0)),
            {"reason": str(discard)},
            "NHC characteristics dropped on their own (malformed or repeated), by reason",
            kind="counter",
        )
    for reason, n in (counters.get("api_dropped") or {}).items():
        yield Sample(
            "glbd_exabgp_api_drops_total",
            float(n),
            {"reason": str(reason)},
            "malformed ExaBGP API lines",
            kind="counter",
        )


class FlowletView(TypedDict, total=False):
    enabled: bool
    error: str | None
    timeout_us: float | None
    table_size: int
    attached: list[str]
    interfaces: list[dict[str, Any]]
    events: dict[str, int]
    timeout_source: str
    skew: dict[str, Any] | None
    table_entries: int
    evictions: int
    move: str
    move_chance: float
    move_gate: dict[str, Any] | None


#: per-interface flowlet counters exported as their own metric (the skip_* ones are a reason)
_FLOWLET_COUNTERS = {
    "packets": "packets whose hash the flowlet program set",
    "flowlets": "flowlets started (a new hash: new flows, moved and aged)",
    "moved": "flows given a new hash after an idle gap longer than the timeout",
    "kept": "idle gaps longer than the timeout that kept the flow's hash (flowlet.move)",
    "new_flows": "flows inserted into the flowlet table",
    "aged": "flows back after an idle time longer than flowlet.aging_s",
}


def flowlet_samples(snap: FlowletView) -> Iterable[Sample]:
    yield Sample(
        "glbd_flowlet_enabled", 1.0 if snap.get("enabled") else 0.0, help="[flowlet] enabled"
    )
    yield Sample(
        "glbd_flowlet_error",
        1.0 if snap.get("error") else 0.0,
        help="the flowlet program could not be loaded or attached (glbctl flowlet says why)",
    )
    if snap.get("timeout_us") is not None:
        yield Sample(
            "glbd_flowlet_timeout_seconds",
            float(snap.get("timeout_us") or 0) / 1e6,
            help="idle gap after which a flow may move to another next hop",
        )
        skew = snap.get("skew")
        if skew is not None:
            yield Sample(
                "glbd_flowlet_skew_seconds",
                float(skew.get("skew_us", 0)) / 1e6,
                help='path delay skew the "auto" timeout covers: the peak queueing delay of the '
                "local and the remote hop over the window",
            )
        if snap.get("move_chance") is not None:
            yield Sample(
                "glbd_flowlet_move_chance",
                float(snap.get("move_chance") or 0.0),
                help="chance that an idle gap now moves its flow (flowlet.move: 1 while the "
                "weights shift, falling to 0 as they settle)",
            )
        gate = snap.get("move_gate")
        if gate is not None:
            yield Sample(
                "glbd_flowlet_move_gate_opened_total",
                float(gate.get("opened", 0)),
                help="weight shifts of flowlet.move_threshold or more that let gaps move flows",
                kind="counter",
            )
        yield Sample(
            "glbd_flowlet_table_size",
            float(snap.get("table_size", 0)),
            help="flows the flowlet table tracks at most",
        )
        yield Sample(
            "glbd_flowlet_table_entries",
            float(snap.get("table_entries", 0)),
            help="flows in the flowlet table (inserted, up to its size: nothing else deletes)",
        )
        yield Sample(
            "glbd_flowlet_evictions_total",
            float(snap.get("evictions", 0)),
            help="flows the full flowlet table pushed out (least recently seen first)",
            kind="counter",
        )
    for c in snap.get("interfaces") or []:
        lab = {"interface": str(c.get("interface"))}
        yield Sample(
            "glbd_flowlet_attached",
            1.0 if c.get("attached") else 0.0,
            lab,
            "the flowlet program runs on this interface",
        )
        for key, doc in _FLOWLET_COUNTERS.items():
            yield Sample(f"glbd_flowlet_{key}_total", float(c.get(key, 0)), lab, doc, "counter")
        for key, n in c.items():
            if key.startswith("skip_"):
                yield Sample(
                    "glbd_flowlet_skipped_total",
                    float(n),
                    {**lab, "reason": key.removeprefix("skip_")},
                    "packets the flowlet program left untouched, by reason",
                    "counter",
                )
    for event, n in sorted((snap.get("events") or {}).items()):
        yield Sample(
            "glbd_flowlet_events_total",
            float(n),
            {"event": event},
            "flowlet program lifecycle: loaded, adopted, repinned, (re)attached, detached, errors",
            "counter",
        )


class Latencies:
    """The node's latency histograms, shown with the FIB part's metrics."""

    def __init__(self) -> None:
        self.heartbeat_to_fib = histogram(
            "glbd_heartbeat_to_fib_seconds",
            "a heartbeat that changed a path weight -> the FIB sync that programmed it",
            LATENCY_BUCKETS,
        )
        self.fib_sync = histogram(
            "glbd_fib_sync_duration_seconds",
            "one FIB sync step: plan and netlink writes until the kernel acknowledged",
            LATENCY_BUCKETS,
        )

    def synced(self, took: float, since: float | None, now: float) -> None:
        """A FIB sync step took ``took`` seconds; ``since``: the first heartbeat it carries."""
        self.fib_sync.observe(took)
        self.sent_now(since, now)

    def sent_now(self, since: float | None, now: float) -> None:
        """Weights reached the kernel (a sync step, or the fast lane with no step);
        ``since``: the first heartbeat they carry."""
        if since is not None:
            self.heartbeat_to_fib.observe(max(0.0, now - since))

    def families(self) -> list[Metric]:
        return [*self.heartbeat_to_fib.collect(), *self.fib_sync.collect()]


def daemon_samples(
    version: str,
    reload_ok: bool,
    loaded_at: float,
    lag: Mapping[str, Any],
    control: Mapping[str, int],
    gc_pauses: Mapping[str, Any] | None = None,
    scheduling: Mapping[str, Any] | None = None,
    metrics: Mapping[str, int] | None = None,
) -> Iterable[Sample]:
    """The daemon's own rows: build info, reload status (``reload_ok``: the last reload was
    applied, True before any; ``loaded_at``: unix time the config in force was loaded), the
    event loop's lag (``LoopLag.to_dict()``), the control socket's counters, the garbage
    collector's pauses (``GcPauses.to_dict()``), the loop's scheduling
    (``LoopPriority.to_dict()``) and the metrics endpoint's counters (``MetricsServer``)."""
    yield Sample("glbd_build_info", 1, {"version": version}, "glbd's version (always 1)")
    yield Sample(
        "glbd_up",
        1,
        help="the daemon is running (always 1; Prometheus's up says whether it answered)",
    )
    yield Sample(
        "glbd_config_last_reload_successful",
        1.0 if reload_ok else 0.0,
        help="the last config reload was applied (1) or rejected, old config kept (0)",
    )
    yield Sample(
        "glbd_config_last_reload_success_timestamp_seconds",
        loaded_at,
        help="unix time the config in force was loaded (start or last applied reload)",
    )
    yield Sample(
        "glbd_loop_lag_seconds",
        float(lag.get("last_ms", 0)) / 1e3,
        help="how late the last 100 ms event-loop tick ran",
    )
    yield Sample(
        "glbd_loop_lag_max_seconds",
        float(lag.get("max_ms", 0)) / 1e3,
        help="the latest an event-loop tick has run since start",
    )
    if gc_pauses:
        for gen, (n, ms) in enumerate(
            zip(gc_pauses.get("collections", ()), gc_pauses.get("total_ms", ()), strict=False)
        ):
            labels = {"generation": str(gen)}
            yield Sample(
                "glbd_gc_collections_total",
                float(n),
                labels,
                help="cyclic garbage collections by generation",
                kind="counter",
            )
            yield Sample(
                "glbd_gc_pause_seconds_total",
                float(ms) / 1e3,
                labels,
                help="time the event loop spent in cyclic garbage collections, by generation",
                kind="counter",
            )
    if scheduling:
        yield Sample(
            "glbd_loop_realtime",
            1.0 if scheduling.get("policy") == "realtime" else 0.0,
            help="the event loop runs at real-time priority now (0: normal, bulk work or off)",
        )
        yield Sample(
            "glbd_loop_realtime_demotions_total",
            float(scheduling.get("demotions", 0)),
            help="times the event loop gave up real time for bulk work",
            kind="counter",
        )
    yield Sample(
        "glbd_control_requests_total",
        float(control.get("requests", 0)),
        help="control socket requests",
        kind="counter",
    )
    yield Sample(
        "glbd_control_errors_total",
        float(control.get("errors", 0)),
        help="control requests answered with an error (unknown command, bad arguments, failed)",
        kind="counter",
    )
    yield Sample(
        "glbd_control_stalled_clients_total",
        float(control.get("stalled_clients", 0)),
        help="control clients dropped for not reading an answer within the stall timeout",
        kind="counter",
    )
    for key, n in control.items():
        if key.startswith("decode_error_"):
            yield Sample(
                "glbd_control_decode_errors_total",
                float(n),
                {"reason": key.removeprefix("decode_error_")},
                "control requests that did not decode, by reason",
                kind="counter",
            )
    if metrics is not None:
        for reason in MetricsDrop:
            yield Sample(
                "glbd_metrics_connections_dropped_total",
                float(metrics.get(reason.counter, 0)),
                {"reason": reason.value},
                "metrics endpoint connections closed unanswered: over the cap, or too slow",
                kind="counter",
            )
