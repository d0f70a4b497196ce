"""Control-socket wire format (pure codec).

One JSON object per line, UTF-8, at most :data:`MAX_LINE` bytes including the newline.

Request::

    {"v": 1, "id": 7, "cmd": "status", "args": {}}

Response (``result`` on success, ``error`` otherwise)::

    {"v": 1, "id": 7, "ok": true, "result": {...}}
    {"v": 1, "id": 7, "ok": false, "error": {"reason": "unknown_command", "message": "..."}}

``v`` is the protocol version; a peer answers a request of another version with the error
reason ``unsupported_version``. Keys are snake_case and frozen (``tests/test_control.py`` pins
them for every command).

A result too big for one line is streamed (requests stay limited to one line: a local user must
not make the daemon buffer without bound). Rows of a list go ahead in part lines, ``at`` naming
the list (``""`` the result itself, else a top-level key of an object result); the last line
carries the rest and the client appends each list's parts before it::

    {"v": 1, "id": 7, "ok": true, "more": true, "at": "", "rows": [{...}, ...]}
    {"v": 1, "id": 7, "ok": true, "result": [{...}]}
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

VERSION = 1
MAX_LINE = 1 << 20
#: a streamed part is cut once its rows reach this many bytes (the loop runs between parts)
PART_BYTES = 256 << 10

#: read-only queries; each returns one JSON document
QUERIES = (
    "status",
    "neighbors",
    "bfd",
    "links",
    "heartbeats",
    "quality",
    "profiles",
    "routes",
    "counters",
    "config",
    "flowlet",
    "colours",
)
#: queries about one thing their arguments name (``neighbor PEER``): not answerable bare
DETAILS = ("neighbor",)
#: commands that change the daemon's state
ACTIONS = (
    "reload",
    "drain",
    "undrain",
    "graceful-restart",
    "log-level",
    "neighbor-shutdown",
    "neighbor-enable",
    "neighbor-reset",
)
COMMANDS = (*QUERIES, *DETAILS, *ACTIONS)

#: ``neighbor``'s views: the session in detail, its Adj-RIB-In, its Adj-RIB-Out
NEIGHBOR_VIEWS = ("detail", "received", "advertised")
#: the levels ``log-level`` takes (those of ``[logging] level``)
LOG_LEVELS = ("debug", "info", "warning", "error")
#: the row filters of ``bfd``, ``links``, ``heartbeats`` and ``quality``
ROW_FILTERS: dict[str, type] = {"neighbor": str, "interface": str, "state": str}

#: the arguments each command takes (the daemon filters before it builds and sends the rows)
ARGS: dict[str, dict[str, type]] = {
    "routes": {"prefix": str},  # a prefix: it and the prefixes inside it; an address: covering
    "neighbors": {"peer": str},  # a peer's address, BGP identifier or interface
    "profiles": {"changed": bool},  # only profiles glbd acts on (see glbd.control.views)
    "bfd": ROW_FILTERS,
    "links": ROW_FILTERS,
    "heartbeats": {"neighbor": str, "interface": str},  # no per-row state to select on
    "quality": ROW_FILTERS,
    # a peer (address, BGP identifier or interface), one of NEIGHBOR_VIEWS, and for
    # "received" the routes before the import policy
    "neighbor": {"peer": str, "view": str, "pre_policy": bool},
    "log-level": {"level": str},  # one of LOG_LEVELS
    # drain or undrain one neighbor only (none: the whole router)
    "drain": {"peer": str},
    "undrain": {"peer": str},
    # disarm instead
    "graceful-restart": {"cancel": bool},
    "neighbor-shutdown": {"peer": str},
    "neighbor-enable": {"peer": str},
    "neighbor-reset": {"peer": str, "soft": bool},  # soft: route refresh + Adj-RIB-Out again
}
#: the argument a command cannot do without
REQUIRED = {
    "neighbor": "peer",
    "log-level": "level",
    "neighbor-shutdown": "peer",
    "neighbor-enable": "peer",
    "neighbor-reset": "peer",
}
MAX_ARG = 128


class ReloadOutcome(StrEnum):
    """What a reload did: ``outcome`` of its result (glbctl's exit code follows it)."""

    #: every change applied (or there was none)
    APPLIED = "applied"
    #: the file does not validate: nothing applied, the old config runs
    REJECTED = "rejected"
    #: a changed key takes effect only at start: nothing applied, the old config runs
    NEEDS_RESTART = "needs_restart"
    #: a part failed to apply the new config; the others did
    FAILED = "failed"


class DecodeError(ValueError):
    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}" if detail else reason)


class ArgsError(ValueError):
    """A handler's answer to arguments it cannot use (reason ``bad_args``)."""


@dataclass(frozen=True)
class Request:
    id: int
    cmd: str
    args: dict[str, Any] = field(default_factory=dict)
    v: int = VERSION

    def encode(self) -> bytes:
        return _line({"v": self.v, "id": self.id, "cmd": self.cmd, "args": self.args})

    def to_dict(self) -> dict[str, Any]:
        return {"v": self.v, "id": self.id, "cmd": self.cmd, "args": self.args}


@dataclass(frozen=True)
class Response:
    id: int
    ok: bool
    result: Any = None
    error_reason: str = ""
    error_message: str = ""
    v: int = VERSION
    #: a part of a streamed result: ``result`` holds rows of the list named by ``at``
    more: bool = False
    at: str = ""

    def encode(self) -> bytes:
        d: dict[str, Any] = {"v": self.v, "id": self.id, "ok": self.ok}
        if self.more:
            d.update(more=True, at=self.at, rows=self.result)
        elif self.ok:
            d["result"] = self.result
        else:
            d["error"] = {"reason": self.error_reason, "message": self.error_message}
        return _line(d)

    @classmethod
    def failure(cls, id: int, reason: str, message: str) -> Response:
        return cls(id=id, ok=False, error_reason=reason, error_message=message)


def _line(d: dict[str, Any], max_line: int = MAX_LINE) -> bytes:
    data = _try_line(d, max_line)
    if data is None:
        raise ValueError(f"message exceeds {max_line} bytes")
    return data


def _obj(line: bytes) -> dict[str, Any]:
    if len(line) > MAX_LINE:
        raise DecodeError("too_long", f"{len(line)} bytes")
    try:
        d = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError:
        raise DecodeError("not_utf8") from None
    except RecursionError:  # deeply nested arrays/objects exhaust the decoder's stack
        raise DecodeError("too_deep", "JSON nested too deeply") from None
    except ValueError as e:
        raise DecodeError("bad_json", str(e)) from None
    if not isinstance(d, dict):
        raise DecodeError("not_an_object")
    v = d.get("v")
    if not isinstance(v, int) or isinstance(v, bool):
        raise DecodeError("missing_version")
    if v != VERSION:
        raise DecodeError("unsupported_version", f"got {v}, speak {VERSION}")
    i = d.get("id")
    if not isinstance(i, int) or isinstance(i, bool):
        raise DecodeError("missing_id")
    return d


def check_args(cmd: str, args: dict[str, Any]) -> dict[str, Any]:
    """``args`` of a known command, checked (:class:`ArgsError` names the problem); a prefix
    comes back normalised (``10.1.2.0/24``, host bits cleared)."""
    if cmd not in COMMANDS:
        return args
    want = ARGS.get(cmd, {})
    out: dict[str, Any] = {}
    for key, value in args.items():
        kind = want.get(key)
        if kind is None:
            raise ArgsError(f"{cmd} takes no argument {key!r}")
        if value is None:
            continue
        if not isinstance(value, kind) or (isinstance(value, str) and len(value) > MAX_ARG):
            raise ArgsError(f"{cmd}: {key} must be a {kind.__name__} (up to {MAX_ARG} chars)")
        out[key] = value
    for key, allowed in (("view", NEIGHBOR_VIEWS), ("level", LOG_LEVELS)):
        if key in out and out[key] not in allowed:
            raise ArgsError(f"{cmd}: {key} must be one of {', '.join(allowed)}")
    need = REQUIRED.get(cmd)
    if need is not None and not out.get(need):
        raise ArgsError(f"{cmd} needs a {need}")
    if "prefix" in out:
        try:
            out["prefix"] = str(ipaddress.ip_network(out["prefix"], strict=False))
        except ValueError:
            raise ArgsError(f"not a prefix or address: {out['prefix']!r}") from None
    return out


def decode_request(line: bytes) -> Request:
    d = _obj(line)
    cmd = d.get("cmd")
    if not isinstance(cmd, str) or not cmd:
        raise DecodeError("missing_cmd")
    args = d.get("args", {})
    if not isinstance(args, dict):
        raise DecodeError("bad_args", "args must be an object")
    extra = set(d) - {"v", "id", "cmd", "args"}
    if extra:
        raise DecodeError("unknown_key", ", ".join(sorted(extra)))
    return Request(id=d["id"], cmd=cmd, args=args)


def decode_response(line: bytes) -> Response:
    d = _obj(line)
    ok = d.get("ok")
    if not isinstance(ok, bool):
        raise DecodeError("missing_ok")
    if ok and d.get("more") is True:
        rows, at = d.get("rows"), d.get("at")
        if not isinstance(rows, list) or not isinstance(at, str):
            raise DecodeError("bad_part", "a part needs rows (a list) and at (a string)")
        return Response(id=d["id"], ok=True, result=rows, more=True, at=at)
    if ok:
        return Response(id=d["id"], ok=True, result=d.get("result"))
    err = d.get("error")
    if not isinstance(err, dict):
        raise DecodeError("missing_error")
    return Response.failure(d["id"], str(err.get("reason", "")), str(err.get("message", "")))


# ---- streaming ------------------------------------------------------------------------------


def encode_result(id: int, result: Any, max_line: int = MAX_LINE) -> Iterator[bytes]:
    """The lines answering request ``id`` with ``result``: one line when it fits, else parts.

    A list or any other iterable of rows (a generator keeps the daemon's memory flat) is
    encoded row by row; an object too big for one line has its list values streamed. A single
    row over ``max_line`` raises ``ValueError`` (the caller answers ``handler_failed``)."""
    if isinstance(result, dict):
        line = _try_line({"v": VERSION, "id": id, "ok": True, "result": result}, max_line)
        if line is not None:
            yield line
            return
        rest = dict(result)
        for key, value in result.items():
            if isinstance(value, list):
                rest[key] = yield from _parts(id, key, value, max_line)
        yield _line({"v": VERSION, "id": id, "ok": True, "result": rest}, max_line)
        return
    if isinstance(result, Iterable) and not isinstance(result, str | bytes):
        tail = yield from _parts(id, "", result, max_line)
        yield _line({"v": VERSION, "id": id, "ok": True, "result": tail}, max_line)
        return
    yield _line({"v": VERSION, "id": id, "ok": True, "result": result}, max_line)


def _parts(
    id: int, at: str, rows: Iterable[Any], max_line: int
) -> Generator[bytes, None, list[Any]]:
    """Part lines for ``rows``; returns the last rows, for the final line to carry."""
    head = b'{"v":%d,"id":%d,"ok":true,"more":true,"at":%s,"rows":[' % (
        VERSION,
        id,
        json.dumps(at).encode(),
    )
    room = min(max_line // 2, PART_BYTES)  # the final line must still fit its own keys
    batch: list[bytes] = []
    kept: list[Any] = []
    size = 0
    for row in rows:
        enc = json.dumps(row, separators=(",", ":"), default=str).encode()
        if len(enc) > room:
            raise ValueError(f"one row of {len(enc)} bytes exceeds {room}")
        if batch and size + len(enc) > room:
            yield head + b",".join(batch) + b"]}\n"
            batch, kept, size = [], [], 0
        batch.append(enc)
        kept.append(row)
        size += len(enc) + 1
    return kept


class Assembler:
    """Client side of :func:`encode_result`: feed each decoded line; ``done`` after the last."""

    def __init__(self) -> None:
        self.parts: dict[str, list[Any]] = {}
        self.final: Response | None = None

    def feed(self, resp: Response) -> bool:
        if resp.more:
            self.parts.setdefault(resp.at, []).extend(resp.result)
            return False
        self.final = resp
        return True

    def result(self) -> Any:
        assert self.final is not None, "no final line yet"
        res = self.final.result
        if not self.parts:
            return res
        if isinstance(res, list):
            return self.parts.pop("", []) + res
        if not isinstance(res, dict) or "" in self.parts:
            raise DecodeError("bad_part", "parts for a result that is not a list or an object")
        out = dict(res)
        for key, rows in self.parts.items():
            tail = out.get(key, [])
            if not isinstance(tail, list):
                raise DecodeError("bad_part", f"parts for {key!r}, which is not a list")
            out[key] = rows + tail
        return out


def _try_line(d: dict[str, Any], max_line: int) -> bytes | None:
    data = json.dumps(d, separators=(",", ":"), default=str).encode() + b"\n"
    return data if len(data) <= max_line else None
