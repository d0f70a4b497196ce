"""The FIB programmer's snapshot for ``glbctl routes`` / ``glbctl profiles`` (pure): desired
weights beside what glbd programs and what the kernel has, built from a :class:`FibCache`.
Its keys are an API (``tests/vectors/glbctl_contract.json``)."""

from __future__ import annotations

from ipaddress import ip_network
from typing import Any

from glbd.fib.fibcache import CONFLICT_REASONS, FibCache, route_sort_key
from glbd.fib.fibmodel import Desired, GroupSpec, IPNetwork
from glbd.fib.fibplan import (
    PlanParams,
    programmed_weights,
    route_metric,
    standby_metric,
    standby_note,
)

__all__ = ["RouteLookup", "exclusions", "snapshot"]


def exclusions(fc: FibCache, spec: GroupSpec) -> dict[str, str]:
    out: dict[str, str] = {}
    for m, w in spec.weights.items():
        if w <= 0:
            out[m.label] = "weight_zero"
        elif m in fc.held_until:
            out[m.label] = "deleted_elsewhere"
        elif m in fc.excluded:
            out[m.label] = "removed"
        else:
            lk = fc.obs.links.get(m.ifname)
            if lk is None:
                out[m.label] = "no_link"
            elif not lk.admin_up:
                out[m.label] = "admin_down"
            elif not lk.carrier:
                out[m.label] = "no_carrier"
    return out


def snapshot(
    fc: FibCache, now: float, weight_bits: int | None, *, routes: bool = True
) -> dict[str, Any]:
    """Desired vs installed state (JSON-safe): ``stale_remaining_s``, ``stale_held``
    (adopted objects the stale timer still keeps), ``foreign_routes`` (rows ``prefix``,
    ``group``, ``metric``: wanted prefixes that another protocol's route holds),
    ``conflicts`` (writes left out because the object is someone else's, by reason: every
    reason, 0 included), ``excluded`` (failed-over members), ``groups``, ``routes``,
    ``kernel`` (counts of glbd objects in the kernel), ``counters``, ``last_errors``.
    ``groups[key]``: ``nhid``, ``type``, ``desired`` (weights asked for, by member label),
    ``programmed`` (what glbd writes now: usable members only, scaled), ``installed``
    (kernel), ``excluded`` (member -> reason), ``routes`` (count), ``diff``
    (programmed != installed), ``note``. ``routes[prefix]``: ``group``, ``nhid``,
    ``installed_nhid``, ``desired``/``installed`` weights, ``diff``, ``note``, and for a
    prefix with a standby route ``standby`` (the same keys for that route, plus its
    ``metric``; ``diff`` of the row covers both routes; a prefix with a standby route alone
    has ``group`` None); left out with ``routes=False`` (one row per prefix: costly on a big
    RIB, and profiles do not need it). A foreign route at the standby metric is listed in
    ``foreign_routes`` with the standby group and that metric."""
    d = fc.desired or Desired()
    o = fc.obs
    held = fc.stale_kept(now)
    groups = _groups(fc, d, fc.params(now, weight_bits))
    foreign: list[dict[str, Any]] = []
    for pfx, metric in sorted(o.foreign_routes, key=route_sort_key):
        fkey = d.routes.get(pfx)
        if fkey is not None and metric == route_metric(pfx, fc.metric):
            foreign.append({"prefix": str(pfx), "group": fkey, "metric": metric})
        skey = d.standby.get(pfx)
        if skey is not None and metric == standby_metric(pfx, fc.metric):
            foreign.append({"prefix": str(pfx), "group": skey, "metric": metric})
    st = fc.stats
    snap: dict[str, Any] = {
        "stale_remaining_s": max(0.0, fc.stale_until - now),
        "stale_held": {
            "routes": len(held.routes) if held else 0,
            "groups": len(held.groups) if held else 0,
            "nexthops": len(held.nexthops) if held else 0,
        },
        "foreign_routes": foreign,
        "conflicts": {r: st.conflicts.get(r, 0) for r in CONFLICT_REASONS},
        "excluded": sorted(m.label for m in fc.excluded),
        "groups": groups,
        "kernel": {
            "nexthops": len(o.nexthops),
            "groups": len(o.groups),
            "routes": len(o.routes),
        },
        "counters": {
            k: getattr(st, k)
            for k in (
                "applies",
                "reconciles",
                "reconciles_unchanged",
                "full_reconciles",
                "lane_writes",
                "lane_errors",
                "ops",
                "op_errors",
                "failovers",
                "migrations",
                "engine_failovers",
                "foreign_deletes",
                "link_events",
                "nexthop_events",
                "overruns",
                "route_events",
            )
        },
        "last_errors": list(st.last_errors),
    }
    if routes:
        snap["routes"] = _routes(fc, d, groups)
    return snap


def _groups(fc: FibCache, d: Desired, p: PlanParams) -> dict[str, Any]:
    o = fc.obs
    labels = {i: m.label for m, i in fc.ids.members.items()}
    for nh in o.nexthops.values():
        labels.setdefault(nh.id, f"{nh.gateway}@if{nh.ifindex}")
    counts: dict[str, int] = {}
    for routes in (d.routes, d.standby):  # a standby route counts as a route of its group
        for key in routes.values():
            counts[key] = counts.get(key, 0) + 1
    groups: dict[str, Any] = {}
    for key, spec in sorted(d.groups.items()):
        gid = fc.ids.groups.get(key)
        kg = o.groups.get(gid) if gid is not None else None
        prog = {m.label: w for m, w in programmed_weights(spec, o, p).items()}
        inst = {labels.get(i, str(i)): w for i, w in kg.entries} if kg else {}
        groups[key] = {
            "nhid": gid,
            "type": spec.type.value,
            "desired": {m.label: w for m, w in sorted(spec.weights.items())},
            "programmed": prog,
            "installed": inst,
            "excluded": exclusions(fc, spec),
            "routes": counts.get(key, 0),
            "diff": prog != inst,
            "note": fc.notes.get(key, ""),
        }
    return groups


def _routes(fc: FibCache, d: Desired, groups: dict[str, Any]) -> dict[str, Any]:
    look = RouteLookup(fc, groups)
    prefixes = d.routes.keys() | d.standby.keys() if d.standby else d.routes.keys()
    return {
        str(prefix): look.row(prefix, d.routes.get(prefix))
        for prefix in sorted(prefixes, key=lambda p: (p.version, p))
    }


class RouteLookup:
    """One prefix's ``routes`` row at a time (the shape of ``snapshot()["routes"][prefix]``),
    for a listing streamed row by row: the groups are built once, each route is read from the
    cache when asked (``None`` when glbd wants no route for it)."""

    def __init__(self, fc: FibCache, groups: dict[str, Any]) -> None:
        self._fc = fc
        self._groups = groups

    @classmethod
    def of(cls, fc: FibCache, now: float, weight_bits: int | None) -> RouteLookup:
        return cls(fc, _groups(fc, fc.desired or Desired(), fc.params(now, weight_bits)))

    def get(self, prefix: str) -> dict[str, Any] | None:
        d = self._fc.desired
        if d is None:
            return None
        try:
            net = ip_network(prefix)
        except ValueError:
            return None
        key = d.routes.get(net)
        if key is None and net not in d.standby:
            return None
        return self.row(net, key)

    def row(self, prefix: IPNetwork, key: str | None) -> dict[str, Any]:
        """The prefix's row: its primary route (group ``key``; None: a standby route alone)
        and, if it has one, its standby route under ``standby``."""
        fc = self._fc
        if key is None:
            out: dict[str, Any] = {
                "group": None,
                "nhid": None,
                "installed_nhid": None,
                "desired": {},
                "installed": {},
                "diff": False,
                "note": "",
            }
        else:
            out = self._route(prefix, key, route_metric(prefix, fc.metric), str(prefix))
        d = fc.desired
        skey = d.standby.get(prefix) if d is not None and d.standby else None
        if skey is not None:
            metric = standby_metric(prefix, fc.metric)
            sb = self._route(prefix, skey, metric, standby_note(prefix))
            out["standby"] = {**sb, "metric": metric}
            out["diff"] = out["diff"] or sb["diff"]
        return out

    def _route(self, prefix: IPNetwork, key: str, metric: int, note: str) -> dict[str, Any]:
        """One route of ``prefix``: at ``metric`` through group ``key``, notes under ``note``."""
        fc = self._fc
        kr = fc.obs.routes.get((prefix, metric))
        g = self._groups.get(key, {})
        gid = fc.ids.groups.get(key)
        installed = kr.nhid if kr else None
        return {
            "group": key,
            "nhid": gid,
            "installed_nhid": installed,
            "desired": g.get("programmed", {}),
            "installed": g.get("installed", {}) if installed == gid else {},
            "diff": installed != gid or bool(g.get("diff", True)),
            "note": fc.notes.get(note, ""),
        }
