"""ExaBGP API process: a byte pipe between ExaBGP (stdin/stdout) and glbd (a Unix socket).

ExaBGP runs this as its ``process`` (``run <python> -m glbd.bgp.exabgp_bridge SOCKET;``). Lines
ExaBGP writes to our stdin go to the socket unchanged; lines glbd writes to the socket go to
our stdout (ExaBGP's command channel) unchanged. No parsing here: the codec lives in
:mod:`glbd.bgp.exabgp_api`, on glbd's side.

The bridge exits when either side closes; glbd treats that as a failure of the ExaBGP instance
and restarts it. Reads use ``connect_read_pipe`` (a ``select`` + ``readline`` loop on
``sys.stdin`` leaves lines stuck in Python's buffer: ``select`` sees an empty pipe while
the text buffer still holds them).
"""

from __future__ import annotations

import asyncio
import os
import sys


async def _pump_stdin(writer: asyncio.StreamWriter) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 24)
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(0, "rb", buffering=0)
    )
    while True:
        chunk = await reader.read(1 << 16)
        if not chunk:
            return
        writer.write(chunk)
        await writer.drain()


async def _pump_socket(reader: asyncio.StreamReader) -> None:
    while True:
        chunk = await reader.read(1 << 16)
        if not chunk:
            return
        # blocking write: if ExaBGP stops reading, we stop reading the socket, which is the
        # backpressure glbd sees
        await asyncio.to_thread(_write_all, chunk)


def _write_all(chunk: bytes) -> None:
    view = memoryview(chunk)
    while view:
        n = os.write(1, view)
        view = view[n:]


async def main_async(path: str) -> int:
    reader, writer = await asyncio.open_unix_connection(path, limit=1 << 24)
    tasks = [
        asyncio.create_task(_pump_stdin(writer)),
        asyncio.create_task(_pump_socket(reader)),
    ]
    _done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for t in pending:
        t.cancel()
    writer.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m glbd.bgp.exabgp_bridge SOCKET", file=sys.stderr)
        return 2
    try:
        return asyncio.run(main_async(args[0]))
    except (ConnectionError, FileNotFoundError, OSError) as exc:
        print(f"glbd.bgp.exabgp_bridge: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
