"""What ``glbctl`` shows: snapshots built from the parts, the routes, neighbors and profiles it
selects, and the row filters of its --neighbor/--interface/--state options. The Prometheus
metrics derived from those same snapshots are tables in :mod:`glbd.control.metrics_parts` and
:mod:`glbd.control.metrics_daemon` (metric names and labels are a public contract, see
``tests/vectors/glbctl_contract.json``)."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from glbd.quality.pathtable import PathTable

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
    foreign: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``glbctl links/heartbeats/quality``: link qualities, the heartbeat endpoint, the path
    table, the node's counters and the foreign load's ingress counter (None: not used)."""
    return {
        "links": [dict(q) for q in links],
        "heartbeats": [dict(heartbeats)] if heartbeats else [],
        "quality": table.to_dict() if table else {},
        "counters": dict(counters),
        "foreign": None if foreign is None else dict(foreign),
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
