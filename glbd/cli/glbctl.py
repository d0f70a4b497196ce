"""``glbctl``: status CLI for a running glbd, plus an offline packet decoder.

    glbctl [--socket PATH] [--json] status|neighbors|bfd|links|heartbeats|quality|profiles|
                                    routes|counters|config
    glbctl reload                      re-read the config file (like SIGHUP)
    glbctl watch [--interval S]        live view of weights and qualities
    glbctl decode {nhc,bfd,heartbeat} HEX [--json]

Without ``--json`` results are readable tables; with it, the daemon's JSON result is printed as
is (snake_case keys, pinned by a contract test). A stopped daemon is one line on stderr and exit
code 1, never a traceback. ``decode`` exits 2 with the codec's named reason on bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import re
import socket
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from glbd.codec import control as proto

DEFAULT_SOCKET = "/run/glbd/glbd.sock"
EXIT_DAEMON = 1
EXIT_DECODE = 2

QUERIES = proto.QUERIES


class DaemonError(Exception):
    """The daemon could not be reached or answered with an error."""


def request(path: str, cmd: str, args: dict[str, Any] | None = None, timeout: float = 5.0) -> Any:
    """Send one request to the daemon and return its result (raises DaemonError)."""
    req = proto.Request(id=os.getpid() & 0x7FFFFFFF, cmd=cmd, args=args or {})
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(path)
            s.sendall(req.encode())
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
                if len(buf) > proto.MAX_LINE:
                    raise DaemonError("answer too long")
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
    try:
        resp = proto.decode_response(buf)
    except proto.DecodeError as e:
        raise DaemonError(f"unreadable answer from glbd: {e}") from None
    if not resp.ok:
        raise DaemonError(f"{cmd}: {resp.error_reason}: {resp.error_message}")
    return resp.result


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


def render(title: str, result: Any) -> None:
    """Readable tables: scalars as a key/value table, lists of objects as one table each."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not isinstance(result, dict):
        console.print(json.dumps(result, indent=2))
        return
    scalars = _flatten({k: v for k, v in result.items() if not _is_rows(v)})
    if scalars:
        t = Table(title=title, show_header=False, title_justify="left")
        t.add_column("key", style="bold")
        t.add_column("value")
        for k, v in scalars.items():
            t.add_row(k, _cell(v))
        console.print(t)
    for k, v in result.items():
        if not _is_rows(v):
            continue
        rows: list[dict[str, Any]] = v
        cols = list(dict.fromkeys(itertools.chain.from_iterable(r.keys() for r in rows)))
        t = Table(
            title=f"{title}: {k}" if scalars or len(result) > 1 else title, title_justify="left"
        )
        for c in cols:
            t.add_column(c)
        for r in rows:
            t.add_row(*(_cell(r.get(c)) for c in cols))
        if not rows:
            t.add_row(*(["(none)"] + [""] * (len(cols) - 1))) if cols else None
            if not cols:
                console.print(f"{title}: {k}: (none)")
                continue
        console.print(t)


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
        print(f"glbctl decode {kind}: bad hex: {e}", file=sys.stderr)
        return EXIT_DECODE
    decoder = _decoder(kind)
    try:
        msg = decoder(data)
    except ValueError as e:  # every codec's DecodeError is a ValueError with .reason
        reason = getattr(e, "reason", "malformed")
        detail = getattr(e, "detail", "")
        print(
            f"glbctl decode {kind}: {reason}" + (f": {detail}" if detail else ""), file=sys.stderr
        )
        return EXIT_DECODE
    d = msg.to_dict()
    if as_json:
        print(json.dumps(d, indent=2, sort_keys=False))
    else:
        render(f"{kind} ({len(data)} bytes)", d)
    return 0


# --------------------------------------------------------------------------------------------
# watch


def watch(path: str, interval: float, count: int | None) -> int:
    from rich.console import Console

    console = Console()
    n = 0
    while count is None or n < count:
        n += 1
        try:
            quality = request(path, "quality")
            profiles = request(path, "profiles")
        except DaemonError as e:
            print(f"glbctl: {e}", file=sys.stderr)
            return EXIT_DAEMON
        if console.is_terminal:
            console.clear()
        console.print(f"[bold]glbd watch[/bold]  {time.strftime('%H:%M:%S')}  every {interval:g}s")
        render("quality", quality)
        render("profiles", profiles)
        if count is None or n < count:
            time.sleep(interval)
    return 0


# --------------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="glbctl", description="Query and control a running glbd.")
    p.add_argument(
        "--socket",
        default=os.environ.get("GLBD_SOCKET", DEFAULT_SOCKET),
        help=f"control socket (default {DEFAULT_SOCKET}, or $GLBD_SOCKET)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")
    helps = {
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
    }
    for name in QUERIES:
        sub.add_parser(name, help=helps[name])
    sub.add_parser("reload", help="re-read the config file; a bad file is rejected and kept out")
    w = sub.add_parser("watch", help="live view of weights and qualities")
    w.add_argument("--interval", type=float, default=1.0)
    w.add_argument("--count", type=int, default=None, help="stop after N refreshes")
    d = sub.add_parser("decode", help="decode a packet from hex (tcpdump or ExaBGP JSON)")
    d.add_argument("kind", choices=["nhc", "bfd", "heartbeat"])
    d.add_argument("hex", nargs="+", help="hex bytes; spaces, colons and 0x are accepted")
    d.add_argument("--json", action="store_true", dest="decode_json")
    return p


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
    p = _parser()
    args = p.parse_args(argv)
    if args.cmd is None:
        p.print_help()
        return 2
    if args.cmd == "decode":
        return decode_cmd(args.kind, " ".join(args.hex), args.json or args.decode_json)
    if args.cmd == "watch":
        return watch(args.socket, args.interval, args.count)
    try:
        result = request(args.socket, args.cmd)
    except DaemonError as e:
        print(f"glbctl: {e}", file=sys.stderr)
        return EXIT_DAEMON
    if args.cmd == "status" and isinstance(result, dict) and "heartbeat_auth" not in result:
        # unauthenticated heartbeats are a choice an operator should see at a glance
        with contextlib.suppress(DaemonError):
            result["heartbeat_auth"] = heartbeat_auth(request(args.socket, "heartbeats"))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        render(args.cmd, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
