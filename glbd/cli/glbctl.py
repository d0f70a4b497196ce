"""``glbctl``: status CLI for a running glbd, plus an offline packet decoder.

    glbctl [--socket PATH] [--json] status|neighbors [PEER]|bfd|links|heartbeats|quality|
                                    profiles [--changed]|routes [PREFIX]|counters|config
    glbctl bfd|links|heartbeats|quality [--neighbor N] [--interface IF] [--state S]
    glbctl neighbor PEER [detail|received [--pre-policy]|advertised]
    glbctl reload                      re-read the config file (like SIGHUP)
    glbctl drain | undrain             take the router out of the fabric (graceful shutdown,
                                       band 0 in heartbeats; sessions stay up) / put it back
    glbctl graceful-restart [--cancel] the next stop (within 60 s) keeps glbd's routes at
                                       peers that negotiated graceful restart (upgrades)
    glbctl log-level LEVEL             change the log level of the running daemon
    glbctl watch [--interval S] [--json] [filters]   live view of weights and qualities
    glbctl decode {nhc,bfd,heartbeat} HEX [--json]

Without ``--json`` results are readable tables; with it, the daemon's JSON result is printed as
is (snake_case keys, pinned by a contract test), and an error is one JSON object on stderr
(``{"error": {"reason": ..., "message": ...}, "exit": N}``). ``--json`` goes before or after
the command. Exit codes: see :data:`EXIT_CODES` (the ``--help`` epilog prints them).
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import itertools
import json
import os
import re
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any, NoReturn

from glbd import __version__
from glbd.codec import control as proto

DEFAULT_SOCKET = "/run/glbd/glbd.sock"
EXIT_DAEMON = 1
EXIT_USAGE = 2
EXIT_DECODE = 2
EXIT_REJECTED = 3
EXIT_FAILED = 4
EXIT_INTERRUPTED = 130
EXIT_CODES = f"""exit codes:
  0    ok
  {EXIT_DAEMON}    glbd unreachable, or it answered with an error
  {EXIT_USAGE}    usage error, bad argument, or (decode) bytes that do not decode
  {EXIT_REJECTED}    reload: the new config file was rejected, or changes a key that needs a
       restart (nothing applied: the old one keeps running)
  {EXIT_FAILED}    reload: a part failed to apply the new config (the message names it)
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C)"""

QUERIES = proto.QUERIES


def fail(code: int, reason: str, message: str, as_json: bool) -> int:
    """Report an error on stderr and return its exit code: ``glbctl: message``, or under
    ``--json`` one JSON object a script can parse (reason, message, exit code)."""
    if as_json:
        err = {"error": {"reason": reason, "message": message}, "exit": code}
        print(json.dumps(err), file=sys.stderr)
    else:
        print(message if message.startswith("glbctl") else f"glbctl: {message}", file=sys.stderr)
    return code


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are JSON on stderr when the command line has ``--json``
    (exit code 2 either way)."""

    json_errors = False

    def error(self, message: str) -> NoReturn:
        if self.json_errors:
            fail(EXIT_USAGE, "usage", f"{self.prog}: {message}", True)
            sys.exit(EXIT_USAGE)
        super().error(message)


class DaemonError(Exception):
    """The daemon could not be reached or answered with an error (``reason`` if it did)."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason


def responses(
    path: str, cmd: str, args: dict[str, Any] | None = None, timeout: float = 5.0
) -> Iterator[proto.Response]:
    """The lines answering one request, as they arrive: the parts of a streamed result, then
    the last line (raises DaemonError; ``timeout`` applies to each read)."""
    req = proto.Request(id=os.getpid() & 0x7FFFFFFF, cmd=cmd, args=args or {})
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(path)
            s.sendall(req.encode())
            with s.makefile("rb") as f:
                while True:
                    resp = _read_response(f, cmd)
                    yield resp
                    if not resp.more:
                        return
    except FileNotFoundError:
        raise DaemonError(f"glbd is not running (no control socket at {path})") from None
    except ConnectionRefusedError:
        raise DaemonError(f"glbd is not running (nobody listens on {path})") from None
    except PermissionError:
        raise DaemonError(f"permission denied on {path}: run as root or in group glbd") from None
    except TimeoutError:
        raise DaemonError(f"glbd did not answer within {timeout:g} s on {path}") from None
    except OSError as e:
        raise DaemonError(f"cannot talk to glbd on {path}: {e.strerror or e}") from None


def _read_response(f: IO[bytes], cmd: str) -> proto.Response:
    # every line, part or last, is bounded: a stuck or hostile peer cannot make us buffer more
    line = f.readline(proto.MAX_LINE + 1)
    if not line.endswith(b"\n"):
        if len(line) > proto.MAX_LINE:
            raise DaemonError("unreadable answer from glbd: line too long")
        raise DaemonError("glbd closed the connection before answering")
    try:
        resp = proto.decode_response(line)
    except proto.DecodeError as e:
        raise DaemonError(f"unreadable answer from glbd: {e}") from None
    if not resp.ok:
        raise DaemonError(f"{cmd}: {resp.error_reason}: {resp.error_message}", resp.error_reason)
    return resp


def request(path: str, cmd: str, args: dict[str, Any] | None = None, timeout: float = 5.0) -> Any:
    """Send one request to the daemon and return its whole result (raises DaemonError)."""
    asm = proto.Assembler()
    for resp in responses(path, cmd, args, timeout):
        asm.feed(resp)
    try:
        return asm.result()
    except proto.DecodeError as e:
        raise DaemonError(f"unreadable answer from glbd: {e}") from None


def print_json(resps: Iterator[proto.Response], out: IO[str]) -> None:
    """``--json``: what ``json.dumps(result, indent=2)`` prints, but a streamed list is written
    row by row as it arrives, so a big ``routes`` never sits whole in glbctl's memory."""
    asm = proto.Assembler()
    streaming = False
    for resp in resps:
        if resp.more and resp.at == "":
            for row in resp.result:
                out.write(("[\n" if not streaming else ",\n") + _indented(row))
                streaming = True
            continue
        asm.feed(resp)
    result = asm.result()
    if not streaming:
        out.write(json.dumps(result, indent=2) + "\n")
        return
    for row in result:
        out.write(",\n" + _indented(row))
    out.write("\n]\n")


def _indented(row: Any) -> str:
    return "\n".join("  " + ln for ln in json.dumps(row, indent=2).split("\n"))


# --------------------------------------------------------------------------------------------
# rendering


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


# --------------------------------------------------------------------------------------------
# decode

_HEX_NOISE = re.compile(r"[\s:,_-]+")


def parse_hex(text: str) -> bytes:
    """Hex as people paste it: spaces, colons, newlines, ``0x`` prefixes (whole or per byte)."""
    t = text.strip()
    t = re.sub(r"0[xX]", "", t)
    t = _HEX_NOISE.sub("", t)
    if not t:
        raise ValueError("no hex digits")
    if len(t) % 2:
        raise ValueError("odd number of hex digits")
    try:
        return bytes.fromhex(t)
    except ValueError:
        bad = next((c for c in t if c not in "0123456789abcdefABCDEF"), "?")
        raise ValueError(f"not hex: {bad!r}") from None


#: decode kind -> (module, function); imported on use so each codec stands alone
DECODERS = {
    "nhc": ("glbd.codec.nhc", "decode"),  # whole path attribute or bare value
    "bfd": ("bfd.packet", "decode"),  # UDP payload
    "heartbeat": ("heartbeat.wire", "decode"),  # UDP payload
}


def _decoder(kind: str) -> Callable[[bytes], Any]:
    import importlib

    module, func = DECODERS[kind]
    fn: Callable[[bytes], Any] = getattr(importlib.import_module(module), func)
    return fn


def decode_cmd(kind: str, text: str, as_json: bool) -> int:
    try:
        data = parse_hex(text)
    except ValueError as e:
        return fail(EXIT_DECODE, "bad_hex", f"glbctl decode {kind}: bad hex: {e}", as_json)
    decoder = _decoder(kind)
    try:
        msg = decoder(data)
    except ValueError as e:  # every codec's DecodeError is a ValueError with .reason
        reason = getattr(e, "reason", "malformed")
        detail = getattr(e, "detail", "")
        text = f"glbctl decode {kind}: {reason}" + (f": {detail}" if detail else "")
        return fail(EXIT_DECODE, str(reason), text, as_json)
    d = msg.to_dict()
    if as_json:
        print(json.dumps(d, indent=2, sort_keys=False))
    else:
        render(f"{kind} ({len(data)} bytes)", d)
    return 0


# --------------------------------------------------------------------------------------------
# watch


def watch(
    path: str,
    interval: float,
    count: int | None,
    filters: dict[str, Any] | None = None,
    as_json: bool = False,
) -> int:
    """Refresh quality and profiles every ``interval`` s; ``filters`` (``--neighbor``,
    ``--interface``, ``--state``) cut both to the next hops selected. With ``as_json`` each
    refresh is one JSON object on one line (``time``, ``quality``, ``profiles``)."""
    from rich.console import Console

    console = Console()
    n = 0
    while count is None or n < count:
        n += 1
        try:
            quality = request(path, "quality", filters)
            profiles = request(path, "profiles")
        except DaemonError as e:
            return fail(EXIT_DAEMON, e.reason or "unreachable", str(e), as_json)
        if filters:
            profiles = watch_profiles(profiles, quality)
        if as_json:
            line = {"time": round(time.time(), 3), "quality": quality, "profiles": profiles}
            sys.stdout.write(json.dumps(line, separators=(",", ":")) + "\n")
            sys.stdout.flush()  # a reader (jq, a pipe) sees each refresh as it comes
        else:
            if console.is_terminal:
                console.clear()
            console.print(
                f"[bold]glbd watch[/bold]  {time.strftime('%H:%M:%S')}  every {interval:g}s"
            )
            render("quality", quality)
            render("profiles", profiles)
        if count is None or n < count:
            time.sleep(interval)
    return 0


def watch_profiles(profiles: Any, quality: Any) -> Any:
    """``profiles`` cut to what a filtered ``quality`` kept: its profiles, and in each the
    weights of its next hops (the daemon filters ``quality``; ``profiles`` has no filter)."""
    if not isinstance(profiles, dict) or not isinstance(quality, dict):
        return profiles
    kept = {
        p.get("key"): {(nh.get("address"), nh.get("ifname")) for nh in p.get("next_hops") or []}
        for p in quality.get("profiles") or []
    }
    rows = [
        {
            **p,
            "weights": [
                w
                for w in p.get("weights") or []
                if (w.get("next_hop"), w.get("ifname")) in kept[p.get("key")]
            ],
        }
        for p in profiles.get("profiles") or []
        if p.get("key") in kept
    ]
    return {**profiles, "profiles": rows}


# --------------------------------------------------------------------------------------------


def _positive(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return v


def _network(text: str) -> str:
    try:
        return str(ipaddress.ip_network(text, strict=False))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a prefix or address: {text!r}") from None


HELPS = {
    "status": "daemon state, roles, versions, loop lag, last reload result",
    "neighbors": "BGP peers: BGP id, state, uptime, prefixes in/out",
    "bfd": "BFD sessions: state, diag, discriminators, timers, flaps, drops "
    "(drops before any session: counters)",
    "links": "local fabric links: load, queue, quality band",
    "heartbeats": "heartbeat senders/receivers: sequence, age, drops by reason",
    "quality": "next hop x next-next hop quality",
    "profiles": "path-quality profiles and their per-next-hop weights (desired vs kernel)",
    "routes": "per-prefix next hops, next-next hops and installed group",
    "counters": "all counters, drops by reason",
    "config": "the running config (secrets removed)",
    "flowlet": "flowlet switching: where the program runs, its timeout, counters per interface",
}


#: what ``--state`` matches per command
STATES = {
    "bfd": "the session's state (up, down, init, admin_down, waiting_for_interface, ...)",
    "links": "up or down",
    "quality": "up or down (the next hop's local or remote link), or its weight's source "
    "(glb, dlb, ...)",
}


def _filters(sp: argparse.ArgumentParser, cmd: str) -> None:
    """``--neighbor``, ``--interface`` and (where rows have one) ``--state``."""
    sp.add_argument(
        "--neighbor",
        metavar="PEER",
        help="only rows of this neighbor (its address, BGP id or interface)",
    )
    sp.add_argument("--interface", metavar="IF", help="only rows on this interface")
    if cmd in STATES:
        sp.add_argument("--state", help=f"only rows in this state: {STATES[cmd]}")


def _parser(json_errors: bool = False) -> argparse.ArgumentParser:
    """glbctl's command line; ``json_errors``: usage errors as JSON on stderr."""
    p = _Parser(
        prog="glbctl",
        description="Query and control a running glbd.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"glbctl {__version__}")
    p.add_argument(
        "--socket",
        default=os.environ.get("GLBD_SOCKET", DEFAULT_SOCKET),
        help=f"control socket (default {DEFAULT_SOCKET}, or $GLBD_SOCKET)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    # --json after the command too; SUPPRESS keeps the value given before it
    common = _Parser(add_help=False)
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print JSON, not tables"
    )
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")
    cmds = {name: sub.add_parser(name, help=HELPS[name], parents=[common]) for name in QUERIES}
    cmds["routes"].add_argument(
        "prefix",
        nargs="?",
        type=_network,
        help="only this prefix and the prefixes inside it; an address without a length: the "
        "routes that contain it",
    )
    cmds["neighbors"].add_argument(
        "peer", nargs="?", help="only this peer (its address, BGP id or interface)"
    )
    for name in ("bfd", "links", "heartbeats", "quality"):
        _filters(cmds[name], name)
    cmds["profiles"].add_argument(
        "--changed",
        action="store_true",
        help="only profiles glbd is acting on: desired weights not all equal, or the kernel "
        "group differs from what glbd programs",
    )
    sub.add_parser(
        "reload",
        parents=[common],
        help=f"re-read the config file; a rejected file or a key that needs a restart exits "
        f"{EXIT_REJECTED}, a part that failed to apply it {EXIT_FAILED}, with the reason",
    )
    dr = sub.add_parser(
        "drain",
        parents=[common],
        help="take this router out of the fabric without loss: its routes go out with the "
        "GRACEFUL_SHUTDOWN community and prepends, its heartbeats at band 0; sessions stay up "
        "(until undrain or a restart: [bgp] drain = true keeps it drained)",
    )
    dr.add_argument(
        "peer",
        nargs="?",
        help="drain toward this neighbor only (address, BGP id or interface): what it is sent "
        "carries GRACEFUL_SHUTDOWN and the prepends; the others are unchanged",
    )
    ud = sub.add_parser("undrain", parents=[common], help="undo drain: normal advertisements again")
    ud.add_argument("peer", nargs="?", help="undo a drain toward this neighbor only")
    gr = sub.add_parser(
        "graceful-restart",
        parents=[common],
        help="arm the next stop, for 60 s, as a graceful restart: BFD AdminDown, the BGP "
        "sessions closed without a NOTIFICATION and nothing withdrawn toward the peers that "
        'negotiated graceful restart ([bgp] graceful_restart = "full"), the FIB kept; they '
        "keep forwarding on glbd's routes until the next glbd's End-of-RIB. Toward the other "
        "peers the stop withdraws first, as always (the package's upgrade runs this before "
        "it restarts glbd)",
    )
    gr.add_argument("--cancel", action="store_true", help="disarm: the next stop withdraws")
    for name, text in (
        ("neighbor-shutdown", "close this neighbor's BGP session and keep it closed (its routes "
         "go now) until neighbor-enable or a restart"),
        ("neighbor-enable", "undo neighbor-shutdown: the session may open again"),
        ("neighbor-reset", "close this neighbor's BGP session (Cease, Administrative Reset); "
         "it opens again"),
    ):  # fmt: skip
        sp = sub.add_parser(name, parents=[common], help=text)
        sp.add_argument("peer", help="the neighbor: its address, BGP id or interface")
    sub.choices["neighbor-reset"].add_argument(
        "--soft",
        action="store_true",
        help="keep the session: ask the neighbor for its routes again (route refresh; they "
        "pass the import policy in force) and send it glbd's again",
    )
    nb = sub.add_parser(
        "neighbor",
        parents=[common],
        help="one BGP neighbor: its session in detail, or the routes received from it "
        "(Adj-RIB-In) or advertised to it (Adj-RIB-Out)",
    )
    nb.add_argument("peer", help="the neighbor: its address, BGP id or interface")
    nb.add_argument(
        "view",
        nargs="?",
        default="detail",
        choices=proto.NEIGHBOR_VIEWS,
        help="detail (default): session, config, counters and BFD; received: its routes after "
        "the import policy, and whether each is used; advertised: what glbd sends it",
    )
    nb.add_argument(
        "--pre-policy",
        action="store_true",
        help="with received: the routes before the import policy, the refused ones too, each "
        "with why (up to 4096 refused routes per neighbor are kept, the rest counted)",
    )
    ll = sub.add_parser(
        "log-level",
        parents=[common],
        help="set the daemon's log level now, until a reload that changes [logging] level or "
        "a restart (the config file is not changed)",
    )
    ll.add_argument("level", choices=proto.LOG_LEVELS, help="the least level logged")
    w = sub.add_parser(
        "watch",
        parents=[common],
        help="live view of weights and qualities (--json: one JSON object per line and refresh)",
    )
    w.add_argument("--interval", type=_positive, default=1.0, help="seconds (> 0; default 1)")
    w.add_argument("--count", type=int, default=None, help="stop after N refreshes")
    _filters(w, "quality")
    d = sub.add_parser("decode", help="decode a packet from hex (tcpdump or ExaBGP JSON)")
    d.add_argument(
        "kind",
        choices=["nhc", "bfd", "heartbeat"],
        help="what the bytes are: an NHC attribute, a BFD control packet or a heartbeat",
    )
    d.add_argument("hex", nargs="+", help="hex bytes; spaces, colons and 0x are accepted")
    d.add_argument(
        "--json", action="store_true", dest="decode_json", help="print the fields as JSON"
    )
    p.json_errors = json_errors
    for sp in sub.choices.values():
        if isinstance(sp, _Parser):
            sp.json_errors = json_errors
    return p


def request_args(args: argparse.Namespace) -> dict[str, Any]:
    """The filters the daemon applies (it then builds and sends only what matches)."""
    if args.cmd == "routes" and args.prefix:
        return {"prefix": args.prefix}
    if args.cmd == "neighbors" and args.peer:
        return {"peer": args.peer}
    if args.cmd == "profiles" and args.changed:
        return {"changed": True}
    if args.cmd == "neighbor":
        out: dict[str, Any] = {"peer": args.peer, "view": args.view}
        return out | ({"pre_policy": True} if args.pre_policy else {})
    if args.cmd == "log-level":
        return {"level": args.level}
    if args.cmd in ("drain", "undrain") and args.peer:
        return {"peer": args.peer}
    if args.cmd == "graceful-restart" and args.cancel:
        return {"cancel": True}
    if args.cmd in ("neighbor-shutdown", "neighbor-enable"):
        return {"peer": args.peer}
    if args.cmd == "neighbor-reset":
        return {"peer": args.peer} | ({"soft": True} if args.soft else {})
    if args.cmd in (*STATES, "heartbeats", "watch"):
        keys = ("neighbor", "interface", "state")
        return {k: getattr(args, k) for k in keys if getattr(args, k, None)}
    return {}


def heartbeat_auth(heartbeats: Any) -> str:
    """One line for ``glbctl status``: are heartbeats authenticated (from ``heartbeats``)."""
    if isinstance(heartbeats, dict):  # the quality component is not running
        heartbeats = heartbeats.get("heartbeats")
    if not heartbeats or not isinstance(heartbeats, list):
        return "n/a (heartbeats disabled)"
    a = heartbeats[0].get("auth") or {}
    if not a.get("enabled"):
        return "off: anyone on a fabric link can forge or replay link qualities"
    parts = []
    if a.get("sign_key_id") is not None:
        parts.append(f"signs with key {a['sign_key_id']}")
    if a.get("accept_key_ids"):
        parts.append("accepts key " + ", ".join(str(k) for k in a["accept_key_ids"]))
    return "on: " + "; ".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # Ctrl-C anywhere: the conventional 128 + SIGINT, no traceback
        print(file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # glbctl routes | head: the reader left; say nothing more
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE


def _main(argv: Sequence[str] | None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    # usage errors are JSON too when --json is anywhere on the line (before "--")
    p = _parser(json_errors="--json" in words[: words.index("--") if "--" in words else None])
    args = p.parse_args(words)
    if args.cmd is None:
        p.print_help()
        return EXIT_USAGE
    if args.cmd == "decode":
        return decode_cmd(args.kind, " ".join(args.hex), args.json or args.decode_json)
    if args.cmd == "neighbor" and args.pre_policy and args.view != "received":
        p.error("--pre-policy goes with the received view: glbctl neighbor PEER received")
    if args.cmd == "watch":
        return watch(args.socket, args.interval, args.count, request_args(args), args.json)
    try:
        if args.json and args.cmd not in ("status", *proto.ACTIONS):
            print_json(responses(args.socket, args.cmd, request_args(args)), sys.stdout)
            return 0
        if args.cmd == "routes" and args.prefix:  # one line per next hop, with its weights
            quality = request(args.socket, "quality")
            resps = responses(args.socket, args.cmd, request_args(args))
            print_route_detail(resps, quality, sys.stdout)
            return 0
        if args.cmd == "routes":
            print_routes(responses(args.socket, args.cmd, request_args(args)), sys.stdout)
            return 0
        result = request(args.socket, args.cmd, request_args(args))
    except DaemonError as e:
        code = EXIT_USAGE if e.reason == "bad_args" else EXIT_DAEMON
        return fail(code, e.reason or "unreachable", str(e), args.json)
    if args.cmd == "status" and isinstance(result, dict) and "heartbeat_auth" not in result:
        # unauthenticated heartbeats are a choice an operator should see at a glance
        with contextlib.suppress(DaemonError):
            result["heartbeat_auth"] = heartbeat_auth(request(args.socket, "heartbeats"))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        render(args.cmd, result, COLUMNS.get(args.cmd))
    if args.cmd == "reload" and isinstance(result, dict) and not result.get("ok", True):
        failed = result.get("outcome") == proto.ReloadOutcome.FAILED
        return fail(
            EXIT_FAILED if failed else EXIT_REJECTED,
            str(result.get("outcome") or "rejected"),
            f"glbctl reload: {result.get('message', 'rejected')}",
            args.json,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
