"""The parts' metrics (BFD, links and heartbeats, the node's counters, FIB, BGP, flowlets) as
tables over the parts' snapshots, and the snapshot shapes they read.

The snapshots are the ones ``glbctl`` shows (:mod:`glbd.control.views`); the metric names, types,
help texts and labels are a public contract of their own (``docs/metrics.md``, the alert
rules, ``tests/vectors/glbctl_contract.json``), kept here as data, one entry a family, walked
by :func:`glbd.control.metrics_table.walk`. The daemon's own metrics are in
:mod:`glbd.control.metrics_daemon`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TypedDict

from glbd.base.reasons import NHC_DISREGARDED, NhcDiscard, ProfileFallback, RouteRejected
from glbd.colours.colours import ColourState
from glbd.control.metrics import Sample
from glbd.control.metrics_table import (
    Each,
    Entry,
    One,
    Rows,
    by_reason,
    equals,
    flag,
    is_set,
    items,
    num,
    part,
    prefixed,
    present,
    rows,
    text,
    walk,
    where,
)

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
    foreign_mbps: float | None
    capacity_mbps: float


class HeartbeatRow(TypedDict, total=False):
    receiver: dict[str, Any]
    sender: dict[str, Any]


class QualityView(TypedDict, total=False):
    links: list[LinkRow]
    foreign: dict[str, Any] | None
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
    colours: dict[str, Any] | None
    routes: list[dict[str, Any]]


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
    layouts: int
    layouts_left_out: int
    move: str
    move_chance: float
    move_gate: dict[str, Any] | None


# ---- BFD --------------------------------------------------------------------------------------

BFD_METRICS: tuple[Entry, ...] = (
    Rows(
        rows("sessions"),
        (
            One(
                "glbd_bfd_up",
                "gauge",
                "BFD session state is Up (1) or not (0)",
                equals("state", "up"),
            ),
            One("glbd_bfd_flaps_total", "counter", "BFD Up->Down transitions", num("flaps")),
            One(
                "glbd_bfd_detect_time_seconds",
                "gauge",
                "negotiated BFD detection time",
                num("detect_time_ms", 1e3, null=True),
            ),
            Each(
                "glbd_bfd_drops_total", "counter", "BFD packets dropped, by reason", items("drops")
            ),
        ),
        labels={"peer": text("peer"), "interface": text("interface")},
    ),
    Rows(
        part("counters", null=True),
        (
            # drops before any session matched: their own metric, labelled by reason only, since
            # there is no peer to attribute them to (the source address is the sender's to
            # choose), and glbd_bfd_drops_total keeps one label set (peer, interface, reason)
            Each(
                "glbd_bfd_unmatched_drops_total",
                "counter",
                "BFD packets dropped before any session matched them, by reason",
                items("unmatched_drops"),
            ),
            # the BFD engine's own counters
            Rows(
                where(bool),
                (
                    One(
                        "glbd_bfd_truncated_datagrams_total",
                        "counter",
                        "BFD datagrams longer than a control packet can be (read up to 256 "
                        "bytes, processed)",
                        num("truncated_datagrams"),
                    ),
                    One(
                        "glbd_bfd_packets_in_total",
                        "counter",
                        "BFD packets received, however they were taken",
                        num("packets_in"),
                    ),
                    One(
                        "glbd_bfd_kernel_packets_in_total",
                        "counter",
                        "BFD packets the kernel receive path took: repeats of a session's steady "
                        "state, never read from the socket",
                        num("kernel_packets_in"),
                    ),
                ),
            ),
        ),
    ),
    Rows(
        present("engine"),
        (
            One(
                "glbd_bfd_kernel_rx",
                "gauge",
                "1 if the BFD engine's kernel receive path (BPF, tc ingress) is loaded",
                flag("kernel_rx.enabled"),
            ),
            One(
                "glbd_bfd_timer_lag_max_seconds",
                "gauge",
                "max lateness of a BFD transmit/expiry timer",
                num("timer_lag_max_ms", 1e3),
            ),
        ),
    ),
)


def bfd_samples(snap: BfdView) -> Iterable[Sample]:
    """The BFD part's metrics (:data:`BFD_METRICS`) from its snapshot."""
    return walk(BFD_METRICS, snap)


# ---- links, heartbeats and the node's counters (quality part) ---------------------------------

#: Mb/s (what the link monitor and the heartbeats carry) to bytes/s: Prometheus's base unit for
#: data is the byte, and node_exporter's interface counters are bytes too
_MBPS_TO_BYTES = 1e6 / 8


def _reported_capacity(q: Mapping[str, Any]) -> float:
    """What the heartbeats report of a link, bytes/s: its residual capacity where it has one."""
    res, cap = q.get("residual_mbps"), q.get("capacity_mbps", 0)
    return float(cap if res is None else res) * _MBPS_TO_BYTES


def _fabric_ports(rx: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The receiver's fabric ports, each with ``sender_live``: the BGP neighbour behind it
    has live heartbeats (the receiver forgets an expired sender, the port stays)."""
    live = {str(sd.get("node_id")) for sd in rx.get("senders") or []}
    for port in rx.get("interfaces") or []:
        yield {**port, "sender_live": str(port.get("neighbor_id")) in live}


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

_HEARTBEAT_RECEIVER: tuple[Entry, ...] = (
    One("glbd_heartbeats_accepted_total", "counter", "heartbeats accepted", num("accepted")),
    Each("glbd_heartbeat_drops_total", "counter", "heartbeats dropped, by reason", items("drops")),
    One(
        "glbd_heartbeat_sequence_jumps_total",
        "counter",
        "heartbeat receiver: sequence jumps",
        num("sequence_jumps"),
    ),
    One(
        "glbd_heartbeat_sequence_recoveries_total",
        "counter",
        "heartbeat receiver: sequence recoveries",
        num("sequence_recoveries"),
    ),
    One(
        "glbd_heartbeat_parallel_copies_total",
        "counter",
        "heartbeat receiver: parallel copies",
        num("parallel_copies"),
    ),
    One(
        "glbd_heartbeat_expirations_total",
        "counter",
        "heartbeat receiver: expirations",
        num("expirations"),
    ),
    Rows(
        rows("senders"),
        (
            One(
                "glbd_heartbeat_age_seconds",
                "gauge",
                "age of the last heartbeat from a live sender (gone once it expires)",
                num("age_ms", 1e3, null=True),
            ),
        ),
        labels={"sender": text("node_id")},
    ),
    # per BGP neighbour on a fabric port, kept while the session is: the receiver forgets an
    # expired sender, so these are what a staleness alert can see
    Rows(
        _fabric_ports,
        (
            One(
                "glbd_heartbeat_sender_up",
                "gauge",
                "the BGP neighbour on this port has live heartbeats (1), or none yet or they "
                "expired (0)",
                flag("sender_live"),
            ),
            One(
                "glbd_heartbeat_port_age_seconds",
                "gauge",
                "time since the last heartbeat accepted on this port (keeps growing after the "
                "sender expires)",
                num("last_rx_ago_ms", 1e3),
                when=is_set("last_rx_ago_ms"),
            ),
        ),
        labels={"neighbor": text("neighbor_id"), "interface": text("ifname")},
    ),
)

QUALITY_METRICS: tuple[Entry, ...] = (
    Rows(
        rows("links"),
        (
            One("glbd_link_band", "gauge", "link quality band 0..7", num("band")),
            One("glbd_link_down", "gauge", "link down flag", flag("down")),
            One(
                "glbd_link_load_ratio",
                "gauge",
                "EWMA egress load as a fraction of capacity (0-1)",
                num("load_pct", 100.0),
            ),
            One("glbd_link_queue_bytes", "gauge", "EWMA qdisc backlog", num("queue_bytes")),
            One(
                "glbd_link_reported_capacity_bytes_per_second",
                "gauge",
                "capacity the heartbeats report, bytes/s: the residual where foreign load is "
                "counted",
                _reported_capacity,
            ),
            One(
                "glbd_link_foreign_bytes_per_second",
                "gauge",
                "egress load no load balancer steers (EWMA), bytes/s: 0 where none is counted",
                num("foreign_mbps", 8e-6, null=True),
            ),
        ),
        labels={"ifname": text("ifname")},
    ),
    Rows(
        present("foreign"),
        (
            One(
                "glbd_foreign_counter_up",
                "gauge",
                "1 while glbd's ingress counter counts the foreign load, 0 while it cannot "
                "(bands then come from all traffic; see the log and glbctl status)",
                flag("counting"),
            ),
        ),
    ),
    Rows(
        rows("heartbeats"),
        (
            Rows(part("receiver", null=True), _HEARTBEAT_RECEIVER),
            Rows(
                present("sender"),
                (One("glbd_heartbeats_sent_total", "counter", "heartbeats sent", num("sent")),),
            ),
        ),
    ),
)

#: over the node's counters, after them
PROFILE_FALLBACK_METRICS: tuple[Entry, ...] = (
    Each(
        "glbd_profile_fallbacks_total",
        "counter",
        "prefixes routed over plain ECMP of their next hops instead of a profile of their own, "
        "by reason",
        by_reason(ProfileFallback),
    ),
    One(
        "glbd_profile_fallback_prefixes",
        "gauge",
        "prefixes routed over plain ECMP now because the profile cap keeps their profile out",
        num("profile_fallback_prefixes"),
    ),
)


def quality_samples(snap: QualityView) -> Iterable[Sample]:
    """The quality part's metrics (:data:`QUALITY_METRICS`, the node's counters by
    :data:`NODE_COUNTERS`, :data:`PROFILE_FALLBACK_METRICS`) from its snapshot."""
    yield from walk(QUALITY_METRICS, snap)
    counters = snap.get("counters", {})
    for k, v in counters.items():
        named = NODE_COUNTERS.get(k)
        if named is not None:  # a counter without a name and help is not exported
            yield Sample(named[0], float(v), help=named[1], kind="counter")
    yield from walk(PROFILE_FALLBACK_METRICS, counters)


# ---- FIB --------------------------------------------------------------------------------------

FIB_METRICS: tuple[Entry, ...] = (
    Rows(
        rows("profiles", null=True),
        (
            Rows(
                rows("weights"),
                (
                    One(
                        "glbd_weight",
                        "gauge",
                        "desired ECMP weight per profile",
                        num("value"),
                        labels={"source": text("source")},
                    ),
                    One(
                        "glbd_weight_installed",
                        "gauge",
                        "weight in the kernel's nexthop group",
                        num("installed"),
                    ),
                ),
                labels={"next_hop": text("next_hop")},
            ),
            One(
                "glbd_profile_fib_diff",
                "gauge",
                "kernel group differs from what glbd programs (1) or not (0)",
                flag("diff"),
            ),
        ),
        labels={"profile": text("key")},
    ),
    Rows(
        part("fib", null=True),
        (
            One(
                "glbd_fib_foreign_routes",
                "gauge",
                "prefixes glbd wants that another protocol's route holds (left alone)",
                lambda fib: float(len(fib.get("foreign_routes") or [])),
            ),
            One(
                "glbd_fib_bucket_migrations_total",
                "counter",
                "resilient group replaces that moved the busy buckets of a next hop whose share "
                "fell at once (fib.resilient_migrate_share)",
                lambda fib: float((fib.get("counters") or {}).get("migrations", 0)),
            ),
            Each(
                "glbd_fib_conflicts_total",
                "counter",
                "FIB writes left out because the object is not glbd's, by reason",
                items("conflicts"),
            ),
            Each(
                "glbd_fib_stale_held",
                "gauge",
                "adopted objects not re-learned since the restart, kept by the stale timer",
                items("stale_held"),
                label="kind",
            ),
        ),
    ),
)


def fib_samples(snap: FibView) -> Iterable[Sample]:
    """The FIB part's metrics (:data:`FIB_METRICS`) from its snapshot."""
    return walk(FIB_METRICS, snap)


# ---- BGP --------------------------------------------------------------------------------------

BGP_METRICS: tuple[Entry, ...] = (
    One(
        "glbd_drained",
        "gauge",
        "the router is drained: graceful shutdown toward its BGP peers, band 0 in its heartbeats "
        "(glbctl drain or [bgp] drain)",
        flag("drained"),
        when=lambda snap: "drained" in snap,
    ),
    Rows(
        rows("neighbors"),
        (
            One("glbd_bgp_peer_up", "gauge", "BGP session established", equals("state", "up")),
            One(
                "glbd_bgp_uptime_seconds",
                "gauge",
                "time since the BGP session was established (0 while it is not)",
                num("uptime_s", null=True),
            ),
            One("glbd_bgp_prefixes_in", "gauge", "prefixes received", num("prefixes_in")),
            One(
                "glbd_bgp_prefixes_out",
                "gauge",
                "prefixes advertised to the neighbour",
                num("prefixes_out"),
            ),
            One(
                "glbd_bgp_established_total",
                "counter",
                "times the BGP session reached Established (each flap adds one)",
                num("counters.established"),
            ),
            One(
                "glbd_bgp_max_prefixes_exceeded_total",
                "counter",
                "times the neighbour's prefix count crossed its max_prefixes",
                num("counters.max_prefixes_exceeded"),
            ),
        ),
        # the interface tells apart unnumbered neighbours (a link-local peer on each port)
        labels={"peer": text("peer"), "interface": lambda n: str(n.get("interface") or "")},
    ),
    Rows(
        present("exabgp", empty=True),
        (
            One(
                "glbd_exabgp_restarts_total",
                "counter",
                "times ExaBGP died (or its API pipe broke) and glbd started it again",
                num("deaths"),
            ),
        ),
    ),
    Rows(
        part("counters"),
        (
            Each(
                "glbd_bgp_routes_rejected_total",
                "counter",
                "received routes not taken (AS loop, import filter, inactive family, max "
                "prefixes, unusable next hop), by reason",
                by_reason(RouteRejected),
            ),
            Each(
                "glbd_nhc_disregarded_total",
                "counter",
                "received routes whose NHC was disregarded (the route is kept), by reason",
                lambda c: ((s, c.get(s, 0)) for s in sorted(NHC_DISREGARDED)),
            ),
            Each(
                "glbd_nhc_characteristics_discarded_total",
                "counter",
                "NHC characteristics dropped on their own (malformed or repeated), by reason",
                by_reason(NhcDiscard),
            ),
            Each(
                "glbd_exabgp_api_drops_total",
                "counter",
                "malformed ExaBGP API lines",
                items("api_dropped"),
            ),
        ),
    ),
)


#: the leaf's colour paths (docs/colours.md); a path is a colour and a destination
COLOUR_METRICS: tuple[Entry, ...] = (
    Rows(
        present("colours"),
        (
            Rows(
                rows("paths"),
                (
                    Each(
                        "glbd_colour_path_state",
                        "gauge",
                        "1 for the state a colour path is in, 0 for the others (primary: its "
                        "preferred spine; fallback: the backups weighted by GLB; no_path: none)",
                        lambda r: ((str(s), 1 if r.get("state") == s else 0) for s in ColourState),
                        label="state",
                    ),
                    One(
                        "glbd_colour_path_fallbacks_total",
                        "counter",
                        "times the colour path left its preferred spine",
                        num("fallbacks"),
                    ),
                    One(
                        "glbd_colour_path_hold_restarts_total",
                        "counter",
                        "times a preferred spine failed again during its return hold-down",
                        num("hold_restarts"),
                    ),
                ),
                labels={"colour": text("colour"), "dest": text("dest")},
            ),
        ),
    ),
)


def bgp_samples(snap: BgpView) -> Iterable[Sample]:
    """The BGP part's metrics (:data:`BGP_METRICS`, :data:`COLOUR_METRICS`) from its
    snapshot."""
    return [*walk(BGP_METRICS, snap), *walk(COLOUR_METRICS, snap)]


# ---- flowlets ---------------------------------------------------------------------------------

FLOWLET_METRICS: tuple[Entry, ...] = (
    One("glbd_flowlet_enabled", "gauge", "[flowlet] enabled on a load balancer", flag("enabled")),
    One(
        "glbd_flowlet_error",
        "gauge",
        "the flowlet program could not be loaded or attached (glbctl flowlet says why)",
        flag("error"),
    ),
    Rows(
        where(is_set("timeout_us")),
        (
            One(
                "glbd_flowlet_timeout_seconds",
                "gauge",
                "idle gap after which a flow may move to another next hop",
                num("timeout_us", 1e6, null=True),
            ),
            One(
                "glbd_flowlet_skew_seconds",
                "gauge",
                'path delay skew the "auto" timeout covers: the peak queueing delay of the local '
                "and the remote hop over the window",
                num("skew.skew_us", 1e6),
                when=is_set("skew"),
            ),
            One(
                "glbd_flowlet_move_chance",
                "gauge",
                "chance that an idle gap now moves its flow (flowlet.move: 1 while the weights "
                "shift, falling to 0 as they settle)",
                num("move_chance", null=True),
                when=is_set("move_chance"),
            ),
            One(
                "glbd_flowlet_move_gate_opened_total",
                "counter",
                "weight shifts of flowlet.move_threshold or more that let gaps move flows",
                num("move_gate.opened"),
                when=is_set("move_gate"),
            ),
            One(
                "glbd_flowlet_table_size",
                "gauge",
                "flows the flowlet table tracks at most",
                num("table_size"),
            ),
            One(
                "glbd_flowlet_table_entries",
                "gauge",
                "flows in the flowlet table (inserted, up to its size: nothing else deletes)",
                num("table_entries"),
            ),
            One(
                "glbd_flowlet_evictions_total",
                "counter",
                "flows the full flowlet table pushed out (least recently seen first)",
                num("evictions"),
            ),
            One(
                "glbd_flowlet_layouts",
                "gauge",
                "destination prefixes whose new flowlets aim at their resilient group's "
                "buckets member by member (spread placement)",
                num("layouts"),
                when=is_set("layouts"),
            ),
            One(
                "glbd_flowlet_layouts_left_out",
                "gauge",
                "destination prefixes over glbd's resilient groups whose flowlets aim without "
                "a bucket order (not read yet, a group over 1,024 buckets, or beyond the "
                "program's 1,024 groups or 65,536 prefixes)",
                num("layouts_left_out"),
                when=is_set("layouts_left_out"),
            ),
        ),
    ),
    Rows(
        rows("interfaces", null=True),
        (
            One(
                "glbd_flowlet_attached",
                "gauge",
                "the flowlet program runs on this interface",
                flag("attached"),
            ),
            One(
                "glbd_flowlet_packets_total",
                "counter",
                "packets whose hash the flowlet program set",
                num("packets"),
            ),
            One(
                "glbd_flowlet_flowlets_total",
                "counter",
                "flowlets started (a new hash: new flows, moved and aged)",
                num("flowlets"),
            ),
            One(
                "glbd_flowlet_moved_total",
                "counter",
                "flows given a new hash after an idle gap longer than the timeout",
                num("moved"),
            ),
            One(
                "glbd_flowlet_kept_total",
                "counter",
                "idle gaps longer than the timeout that kept the flow's hash (flowlet.move)",
                num("kept"),
            ),
            One(
                "glbd_flowlet_new_flows_total",
                "counter",
                "flows inserted into the flowlet table",
                num("new_flows"),
            ),
            One(
                "glbd_flowlet_aged_total",
                "counter",
                "flows back after an idle time longer than flowlet.aging_s",
                num("aged"),
            ),
            Each(
                "glbd_flowlet_skipped_total",
                "counter",
                "packets the flowlet program left untouched, by reason",
                prefixed("skip_"),
            ),
        ),
        labels={"interface": text("interface")},
    ),
    Each(
        "glbd_flowlet_events_total",
        "counter",
        "flowlet program lifecycle: loaded, adopted, repinned, (re)attached, detached, errors",
        lambda snap: sorted((snap.get("events") or {}).items()),
        label="event",
    ),
)


def flowlet_samples(snap: FlowletView) -> Iterable[Sample]:
    """The flowlet part's metrics (:data:`FLOWLET_METRICS`) from its snapshot."""
    return walk(FLOWLET_METRICS, snap)
