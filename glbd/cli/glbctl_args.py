"""glbctl's subcommands and their arguments, built per group by small functions (queries,
drain and graceful restart, neighbor control, the neighbor views, log level, watch, decode).

Separate from ``glbctl`` (the client and its entry point) so that the command line, from which
glbctl(8) is generated (``glbd.cli.manpages``), reads in one place. ``glbctl.build_parser`` makes
the top level (global options, the exit codes epilog, ``reload``, JSON usage errors) and calls these
builders in the order ``--help`` and the man page list the commands.
"""

from __future__ import annotations

import argparse
import ipaddress
from typing import Any, TypeAlias

from glbd.control import protocol as proto

#: the subcommands' action (their parsers are glbctl's own parser class: JSON usage errors)
Subcommands: TypeAlias = "argparse._SubParsersAction[Any]"

QUERIES = proto.QUERIES

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
    "colours": "fabric colour paths: preferred spine, state (primary/fallback), members and "
    "weights, standby, reasons, hold-down",
}


#: what ``--state`` matches per command
STATES = {
    "bfd": "the session's state (up, down, init, admin_down, waiting_for_interface, ...)",
    "links": "up or down",
    "quality": "up or down (the next hop's local or remote link), or its weight's source "
    "(glb, dlb, ...)",
}


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


def add_queries(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    """The read-only queries (status, neighbors, routes, ...) and their filters."""
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


def add_drain(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    """drain, undrain and graceful-restart: taking the router out of the fabric."""
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


def add_neighbor_control(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    """neighbor-shutdown, neighbor-enable and neighbor-reset: one BGP session at a time."""
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


def add_neighbor_view(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    """neighbor PEER [detail|received|advertised]: one session, its Adj-RIB-In or -Out."""
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


def add_log_level(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    """log-level LEVEL: the running daemon's, not the config file's."""
    ll = sub.add_parser(
        "log-level",
        parents=[common],
        help="set the daemon's log level now, until a reload that changes [logging] level or "
        "a restart (the config file is not changed)",
    )
    ll.add_argument("level", choices=proto.LOG_LEVELS, help="the least level logged")


def add_watch(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    """watch: a live view with the filters of ``quality``."""
    w = sub.add_parser(
        "watch",
        parents=[common],
        help="live view of weights and qualities (--json: one JSON object per line and refresh)",
    )
    w.add_argument("--interval", type=_positive, default=1.0, help="seconds (> 0; default 1)")
    w.add_argument("--count", type=int, default=None, help="stop after N refreshes")
    _filters(w, "quality")


def add_decode(sub: Subcommands) -> None:
    """decode KIND HEX: offline, no daemon; its own ``--json`` (no common parent)."""
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
