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

This module is the client (requests, ``--json`` output, decode, watch) and the entry point; the
subcommands' arguments are built in :mod:`glbd.cli.glbctl_args`, the tables printed without
``--json`` in :mod:`glbd.cli.glbctl_render`.
"""

from __future__ import annotations

import argparse
import contextlib
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
from glbd.cli import glbctl_args
from glbd.cli.glbctl_render import COLUMNS, print_route_detail, print_routes, render
from glbd.control import protocol as proto

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
    "nhc": ("glbd.bgp.nhc", "decode"),  # whole path attribute or bare value
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
# command line


def build_parser(json_errors: bool = False) -> argparse.ArgumentParser:
    """glbctl's command line; ``json_errors``: usage errors as JSON on stderr. The top level is
    here, the subcommands come from :mod:`glbd.cli.glbctl_args` group by group, in the order
    ``--help`` and glbctl(8) list them."""
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
    glbctl_args.add_queries(sub, common)
    # its help names exit codes, which are defined here
    sub.add_parser(
        "reload",
        parents=[common],
        help=f"re-read the config file; a rejected file or a key that needs a restart exits "
        f"{EXIT_REJECTED}, a part that failed to apply it {EXIT_FAILED}, with the reason",
    )
    glbctl_args.add_drain(sub, common)
    glbctl_args.add_neighbor_control(sub, common)
    glbctl_args.add_neighbor_view(sub, common)
    glbctl_args.add_log_level(sub, common)
    glbctl_args.add_watch(sub, common)
    glbctl_args.add_decode(sub)
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
    if args.cmd in (*glbctl_args.STATES, "heartbeats", "watch"):
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
    p = build_parser(json_errors="--json" in words[: words.index("--") if "--" in words else None])
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
