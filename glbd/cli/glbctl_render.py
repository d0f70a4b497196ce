"""glbctl's text output: the tables printed without ``--json`` (``render`` with the per-command
``COLUMNS``) and the ``routes`` lines written as the answer streams in.

Separate from ``glbctl`` (the client, its command line and entry point) because it is only
presentation: it takes a daemon result, or the stream of its parts, and writes text; it never
talks to the daemon and does not change the ``--json`` output, which ``glbctl`` prints as is.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any

from glbd.control import protocol as proto


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}".rstrip("0").rstrip(".") if v == v else "nan"
    if isinstance(v, list | tuple):
        return ", ".join(_cell(x) for x in v) if v else "-"
    if isinstance(v, dict):
        return " ".join(f"{k}={_cell(x)}" for k, x in v.items()) if v else "-"
    return str(v)


def print_routes(resps: Iterator[proto.Response], out: IO[str]) -> int:
    """``glbctl routes`` as a table written part by part as the answer streams in (a rich table
    measures every cell first: minutes at 10k prefixes x 64 next hops). One line per prefix;
    a next hop is ``address%interface [next-next hops]``, ``=weight`` once installed."""
    out.write(f"{'prefix':<18} {'paths':>5} {'nhid':>6} {'profile':<11} {'fib':<4} next hops\n")
    n = 0
    for resp in resps:
        rows = resp.result if isinstance(resp.result, list) else []
        out.writelines(_route_line(r) for r in rows if isinstance(r, dict))
        n += len(rows)
    if not n:
        out.write("(none)\n")
    return n


def _route_line(r: dict[str, Any]) -> str:
    installed = {w.get("next_hop"): w.get("installed") for w in r.get("weights") or []}
    hops = []
    for nh in r.get("next_hops") or []:
        addr = nh.get("next_hop")
        via = f"{addr}%{nh['interface']}" if nh.get("interface") else str(addr)
        if nh.get("nnh"):
            via += f" [{','.join(str(x) for x in nh['nnh'])}]"
        if installed.get(addr):
            via += f"={installed[addr]}"
        hops.append(via)
    origin = r.get("origin")
    if isinstance(origin, dict):  # originated here, or a candidate withdrawn: why
        state = "originated" if origin.get("state") == "announced" else "withdrawn"
        where = f" {origin['interface']}" if origin.get("interface") else ""
        hops.insert(0, f"{state}: {origin.get('reason')}{where}")
    fib = "diff" if r.get("fib_diff") else "ok"
    return (
        f"{r.get('prefix')!s:<18} {_cell(r.get('paths')):>5} {_cell(r.get('nhid')):>6} "
        f"{_cell(r.get('profile')):<11} {fib:<4} {', '.join(hops) or '-'}\n"
    )


def print_route_detail(resps: Iterator[proto.Response], quality: Any, out: IO[str]) -> int:
    """``glbctl routes PREFIX``: each route as a head line, then one line per next hop
    (spine, weight glbd wants, weight installed, quality, source, next-next hops): readable at
    64 next hops, where one line per prefix is not. ``quality`` is ``glbctl quality``'s
    result: the weights and qualities by profile and next hop."""
    weights: dict[tuple[Any, Any, Any], dict[str, Any]] = {}
    for p in (quality.get("profiles") or []) if isinstance(quality, dict) else []:
        for nh in p.get("next_hops") or []:
            weights[(p.get("key"), nh.get("address"), nh.get("ifname"))] = nh
    n = 0
    for resp in resps:
        for r in resp.result if isinstance(resp.result, list) else []:
            if isinstance(r, dict):
                out.write(_route_detail(r, weights))
                n += 1
    if not n:
        out.write("(none)\n")
    return n


def _route_detail(r: dict[str, Any], weights: dict[tuple[Any, Any, Any], dict[str, Any]]) -> str:
    fib = "diff" if r.get("fib_diff") else "ok"
    lines = [
        f"{r.get('prefix')}  paths {_cell(r.get('paths'))}  nhid {_cell(r.get('nhid'))}  "
        f"profile {_cell(r.get('profile'))}  fib {fib}  as_path {_cell(r.get('as_path'))}\n"
    ]
    origin = r.get("origin")
    if isinstance(origin, dict):
        state = "originated" if origin.get("state") == "announced" else "withdrawn"
        lines.append(f"  {state}: {origin.get('reason')} {origin.get('interface') or ''}\n")
    hops = r.get("next_hops") or []
    if hops:
        lines.append(
            f"  {'spine':<16} {'next hop':<26} {'bgp id':<15} {'weight':>6} {'installed':>9} "
            f"{'quality':>7} {'source':<8} next-next hops\n"
        )
    installed = {
        (w.get("next_hop"), w.get("ifname")): w.get("installed") for w in r.get("weights") or []
    }
    for nh in hops:
        addr, ifname = nh.get("next_hop"), nh.get("interface")
        q = weights.get((r.get("profile"), addr, ifname)) or {}
        w = q.get("weight") or {}
        lines.append(
            f"  {_cell(ifname):<16} {_cell(addr):<26} {_cell(nh.get('peer_bgp_id')):<15} "
            f"{_cell(w.get('value')):>6} {_cell(installed.get((addr, ifname))):>9} "
            f"{_cell((w.get('inputs') or {}).get('quality')):>7} {_cell(w.get('source')):<8} "
            f"{_cell(nh.get('nnh'))} ({nh.get('nnhn_status')})\n"
        )
    return "".join(lines)


def _policy_cell(r: dict[str, Any]) -> str:
    """A neighbor's RFC 8212 state: the sides refused for want of an import/export list."""
    missing = r.get("policy_missing")
    if missing is None:
        return "-"
    return f"missing {'/'.join(missing)} (RFC 8212)" if missing else "ok"


#: per-command table columns (wide rows keep their key columns; --json has everything);
#: a column is a key, or (header, function of the row)
Column = str | tuple[str, Callable[[dict[str, Any]], Any]]
COLUMNS: dict[str, tuple[Column, ...]] = {
    "neighbors": (
        "peer", "interface", "remote_as", "bgp_id", "state", "uptime_s", "prefixes_in",
        "prefixes_out", "bfd_down", "update_delay", "last_down_reason",
        ("policy", _policy_cell),
    ),
    "bfd": (
        "peer", "interface", "state", "remote_state", "diag_name", "detect_time_ms",
        "tx_interval_ms", "flaps", "uptime_s", "last_down_reason", "drops",
    ),
    "profiles.profiles": (
        "key", "nhid", "diff",
        ("weights (desired/programmed/installed)", lambda r: "\n".join(
            f"{w.get('next_hop')}%{w.get('ifname')}: {w.get('value')}/{w.get('programmed')}/"
            f"{w.get('installed')} {w.get('source')}" for w in r.get("weights") or []) or "-"),
        ("prefixes", lambda r: len(r.get("prefixes") or [])),
        "note",
    ),
    # glbctl neighbor PEER received|advertised (--json has every key, e.g. nhc, stale)
    "neighbor.routes": (
        "prefix", "next_hop", "as_path", "communities", "nnh", "used", "refused",
    ),
    "quality.profiles": (
        "key", "prefixes", "recomputes",
        ("next hops: weight (source)", lambda r: "\n".join(
            f"{n.get('address')}%{n.get('ifname')}: {(n.get('weight') or {}).get('value')} "
            f"({(n.get('weight') or {}).get('source')})" for n in r.get("next_hops") or []) or "-"),
    ),
    # glbctl colours: a path is a colour and a destination (the remote leaf)
    "colours.paths": (
        "colour", "dest", "state", "preferred",
        ("members: weight", lambda r: "\n".join(f"{h}: {w}" for h, w in r.get("active") or [])
         or "-"),
        ("standby", lambda r: "\n".join(f"{h}: {w}" for h, w in r.get("standby") or []) or "-"),
        "reasons", "state_for_s", "hold_left_s", "fallbacks", "hold_restarts",
        ("prefixes", lambda r: len(r.get("prefixes") or [])),
    ),
}  # fmt: skip


def render(title: str, result: Any, columns: Sequence[Column] | None = None) -> None:
    """Readable tables: an object's scalars as a key/value table, lists of objects as one table
    each (``columns`` picks and orders the columns of ``title``'s rows)."""
    from rich.console import Console

    console = Console()
    if isinstance(result, dict):
        _render_object(console, title, result)
    elif _is_rows(result):
        rows: list[dict[str, Any]] = result
        if len(rows) == 1 and columns is None and any(_nested(v) for v in rows[0].values()):
            _render_object(console, title, rows[0])  # one endpoint (heartbeats): key/values
        else:
            console.print(_table(title, rows, columns))
    else:
        console.print(json.dumps(result, indent=2))


def _render_object(console: Any, title: str, result: dict[str, Any]) -> None:
    from rich.table import Table

    scalars = _flatten({k: v for k, v in result.items() if not _is_rows(v)})
    if scalars:
        t = Table(title=title, show_header=False, title_justify="left")
        t.add_column("key", style="bold")
        t.add_column("value")
        for k, v in scalars.items():
            if _is_rows(v) and v:  # rows nested below the top: a table of their own
                continue
            t.add_row(k, _cell(v))
        console.print(t)
    nested = {k: v for k, v in scalars.items() if _is_rows(v) and v}
    for k, v in itertools.chain(((k, v) for k, v in result.items() if _is_rows(v)), nested.items()):
        sub = f"{title}: {k}" if scalars or len(result) > 1 else title
        if not v:
            console.print(f"{sub}: (none)")
            continue
        console.print(_table(sub, v, COLUMNS.get(f"{title}.{k}")))


def _table(title: str, rows: list[dict[str, Any]], columns: Sequence[Column] | None) -> Any:
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    if columns is None:
        columns = list(dict.fromkeys(itertools.chain.from_iterable(r.keys() for r in rows)))
    for c in columns:
        t.add_column(c if isinstance(c, str) else c[0])
    for r in rows:
        t.add_row(*(_cell(r.get(c) if isinstance(c, str) else c[1](r)) for c in columns))
    if not rows:
        t.add_row("(none)", *[""] * (len(columns) - 1))
    return t


def _nested(v: Any) -> bool:
    return (
        isinstance(v, dict | list)
        and bool(v)
        and not all(
            isinstance(x, str | int | float) for x in (v.values() if isinstance(v, dict) else v)
        )
    )


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested objects become dotted keys (``value.nnhn.nh_bgp_id``) so a table stays flat."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _is_rows(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, dict) for x in v)
