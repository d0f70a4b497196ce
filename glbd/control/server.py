"""Asyncio Unix-socket server for the control protocol.

The socket is created mode 0660, owner root, group ``glbd`` when that group exists, so members of
``glbd`` may run glbctl without root. Its directory must be one only root (or glbd's user) can
change, else :class:`glbd.daemon.paths.UnsafePathError` (missing directories are created 0750).

A handler's exception becomes an error response for that request only; a misbehaving client is
disconnected; neither affects the daemon. A big result (a list, or a generator of rows) is
streamed in parts of at most :data:`~glbd.control.protocol.PART_BYTES`, and the loop runs other
work between parts; requests stay limited to one line of :data:`~glbd.control.protocol.MAX_LINE`.
At most :data:`MAX_ANSWERS` answers are written at once and a client that stops reading one is
dropped after :data:`STALL_TIMEOUT_S` (counted as ``stalled_clients``).
"""

from __future__ import annotations

import asyncio
import contextlib
import grp
import inspect
import os
from collections.abc import AsyncGenerator, Awaitable, Callable
from pathlib import Path
from typing import Any

import structlog

from glbd.control import protocol as proto
from glbd.daemon.paths import ensure_dir

log = structlog.get_logger(__name__)

Handler = Callable[[dict[str, Any]], Any | Awaitable[Any]]


#: a client that does not take a part of an answer within this many seconds is disconnected
STALL_TIMEOUT_S = 10.0
#: answers being written at once; more wait (each may hold a snapshot while its client reads)
MAX_ANSWERS = 4


class ControlServer:
    def __init__(
        self,
        path: Path,
        handlers: dict[str, Handler],
        group: str = "glbd",
        stall_timeout: float = STALL_TIMEOUT_S,
        max_answers: int = MAX_ANSWERS,
    ) -> None:
        self.path = Path(path)
        self.handlers = handlers
        self.group = group
        self.stall_timeout = stall_timeout
        self.counters: dict[str, int] = {
            "requests": 0,
            "errors": 0,
            "decode_errors": 0,
            "stalled_clients": 0,
        }
        self._server: asyncio.AbstractServer | None = None
        # a client that stops reading must not pile up snapshots in the daemon: few answers at
        # a time, each client dropped once it stalls
        self._answering = asyncio.Semaphore(max_answers)

    async def start(self) -> None:
        # whoever can change the socket's directory can put a fake glbd in glbctl's way, or
        # (ExaBGP's directory sits beside it) root's ExaBGP config: only root or us
        ensure_dir(self.path.parent, "control socket directory")
        with contextlib.suppress(FileNotFoundError):
            if self.path.is_socket():
                self.path.unlink()
        self._server = await asyncio.start_unix_server(
            self._client, path=str(self.path), limit=proto.MAX_LINE
        )
        os.chmod(self.path, 0o660)
        try:
            gid = grp.getgrnam(self.group).gr_gid
        except KeyError:
            gid = -1
        if gid >= 0:
            with contextlib.suppress(PermissionError):
                os.chown(self.path, 0, gid)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    line = await reader.readline()
                except (ValueError, asyncio.LimitOverrunError):
                    self._count_decode_error("too_long")
                    writer.write(proto.Response.failure(0, "too_long", "line too long").encode())
                    break
                if not line:
                    break
                async with self._answering, contextlib.aclosing(self.answer(line)) as lines:
                    async for out in lines:
                        writer.write(out)
                        await asyncio.wait_for(writer.drain(), self.stall_timeout)
        except TimeoutError:
            self.counters["stalled_clients"] += 1
            log.warning("control_client_stalled", timeout_s=self.stall_timeout)
            writer.transport.abort()  # drop what it did not read
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    def _count_decode_error(self, reason: str) -> None:
        """The total plus one counter per reason (``decode_error_<reason>``), for glbctl."""
        self.counters["decode_errors"] += 1
        key = f"decode_error_{reason}"
        self.counters[key] = self.counters.get(key, 0) + 1

    async def answer(self, line: bytes) -> AsyncGenerator[bytes, None]:
        """The lines answering one request line; never raises."""
        try:
            req = proto.decode_request(line)
        except proto.DecodeError as e:
            self._count_decode_error(e.reason)
            yield proto.Response.failure(0, e.reason, e.detail).encode()
            return
        except Exception as e:  # a codec bug must answer this line, not end the connection
            self._count_decode_error("bad_request")
            log.warning("control_decode_failed", error=repr(e))
            yield proto.Response.failure(0, "bad_request", type(e).__name__).encode()
            return
        self.counters["requests"] += 1
        handler = self.handlers.get(req.cmd)
        if handler is None:
            self.counters["errors"] += 1
            known = ", ".join(sorted(self.handlers))
            yield proto.Response.failure(
                req.id, "unknown_command", f"{req.cmd!r}; known: {known}"
            ).encode()
            return
        try:
            result = handler(proto.check_args(req.cmd, req.args))
            if inspect.isawaitable(result):
                result = await result
            for out in proto.encode_result(req.id, result):
                yield out
                await asyncio.sleep(0)  # a big answer must not hold up BGP, BFD events, timers
        except proto.ArgsError as e:
            self.counters["errors"] += 1
            yield proto.Response.failure(req.id, "bad_args", str(e)).encode()
        except Exception as e:  # a handler bug answers this request, never kills the daemon
            self.counters["errors"] += 1
            log.warning("control_handler_failed", cmd=req.cmd, error=repr(e))
            yield proto.Response.failure(req.id, "handler_failed", str(e) or repr(e)).encode()
