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
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

VERSION = 1
MAX_LINE = 1 << 20

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
)
COMMANDS = (*QUERIES, "reload")


class DecodeError(ValueError):
    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}" if detail else reason)


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

    def encode(self) -> bytes:
        d: dict[str, Any] = {"v": self.v, "id": self.id, "ok": self.ok}
        if self.ok:
            d["result"] = self.result
        else:
            d["error"] = {"reason": self.error_reason, "message": self.error_message}
        return _line(d)

    @classmethod
    def failure(cls, id: int, reason: str, message: str) -> Response:
        return cls(id=id, ok=False, error_reason=reason, error_message=message)


def _line(d: dict[str, Any]) -> bytes:
    data = json.dumps(d, separators=(",", ":"), default=str).encode() + b"\n"
    if len(data) > MAX_LINE:
        raise ValueError(f"message of {len(data)} bytes exceeds {MAX_LINE}")
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
    if ok:
        return Response(id=d["id"], ok=True, result=d.get("result"))
    err = d.get("error")
    if not isinstance(err, dict):
        raise DecodeError("missing_error")
    return Response.failure(d["id"], str(err.get("reason", "")), str(err.get("message", "")))
