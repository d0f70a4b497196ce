""":class:`BfdEngine`: the engine's thread-safe control API, the same in both modes.

Each control call is one round trip to the engine loop (tens of µs in thread mode, well under
a millisecond in process mode) and raises :class:`EngineError` on failure.
"""

from __future__ import annotations

import logging
import os
import random
import subprocess
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Literal

from .channel import DaemonEnd, LocalChannel
from .loop import Loop
from .model import BfdEvent, EngineError, SessionConfig
from .process import prepare, spawn

__all__ = ["BfdEngine"]

log = logging.getLogger(__name__)


class BfdEngine:
    """The engine and its thread-safe control API (see :mod:`bfd.engine`).

    ``on_event`` receives every :class:`BfdEvent` (from a non-asyncio thread).
    ``mode``: "process" (default, isolated) or "thread". ``netns``: a name under /run/netns (or a
    path) the engine's sockets live in. ``rt_priority``: run the engine SCHED_FIFO at this
    priority (root). ``seed``: make discriminators, ports and jitter reproducible.
    ``on_exit``: called (from the reader thread) if the engine process dies unexpectedly.
    ``log_priority``: the engine process starts its stderr lines with their syslog priority
    (``<3>``), as the daemon does when its stderr is the journal (thread mode logs through the
    daemon's own handlers). ``kernel_rx``: let a BPF program take the steady state's repeated
    packets in the kernel (:mod:`.kernel_rx`); where it cannot load, every packet is read.
    """

    def __init__(
        self,
        on_event: Callable[[BfdEvent], None],
        *,
        mode: Literal["process", "thread"] = "process",
        netns: str | None = None,
        rt_priority: int | None = None,
        seed: int | None = None,
        on_exit: Callable[[int | None], None] | None = None,
        call_timeout: float = 5.0,
        log_priority: bool = False,
        kernel_rx: bool = True,
    ) -> None:
        if mode not in ("process", "thread"):
            raise ValueError("mode must be 'process' or 'thread'")
        self.mode = mode
        self.netns = netns
        self.rt_priority = rt_priority
        self.seed = seed
        self._on_event = on_event
        self._on_exit = on_exit
        self._timeout = call_timeout
        self.log_priority = log_priority
        self.kernel_rx = kernel_rx
        self._running = False
        self._stopping = False
        # thread mode
        self._thread: threading.Thread | None = None
        self._local: LocalChannel | None = None
        # process mode
        self._proc: subprocess.Popen[bytes] | None = None
        self._remote: DaemonEnd | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def pid(self) -> int:
        """The engine's process id (the daemon's own pid in thread mode)."""
        return self._proc.pid if self._proc is not None else os.getpid()

    @property
    def running(self) -> bool:
        return self._running

    def start(self) -> None:
        if self._running:
            return
        if self.mode == "thread":
            self._start_thread()
        else:
            self._start_process()
        self._running = True
        self._call("snapshot", ())  # ready when it answers

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the engine (idempotent). Sessions are dropped without further packets."""
        if not self._running:
            return
        self._stopping = True
        self._running = False
        if self._local is not None:
            self._local.stop()
            if self._thread is not None:
                self._thread.join(timeout)
            self._local.close()
            self._local = None
        if self._remote is not None:
            assert self._proc is not None
            self._remote.request_stop()
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout)
            self._remote.join(timeout)

    def __enter__(self) -> BfdEngine:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ control API

    def add_session(self, cfg: SessionConfig) -> int:
        """Create a session; returns its local discriminator. Sockets that cannot be opened
        yet (interface missing) are retried every second (``socket_error`` in the snapshot)."""
        return int(self._call("add", (cfg,)))

    def update_session(self, cfg: SessionConfig) -> None:
        """New parameters for the session (interface, peer); timer changes run a Poll."""
        self._call("update", (cfg,))

    def remove_session(self, interface: str, peer: str) -> None:
        """Delete the session (one AdminDown packet goes out first; no event)."""
        self._call("remove", (interface, peer))

    def set_failover(self, interface: str, peer: str, data: bytes) -> int:
        """Arm the session's kernel failover: rtnetlink requests (complete ``nlmsghdr``
        messages, see :mod:`bfd.failover`) that the engine sends, in one datagram, the moment
        the session fails (an Up session lost: detection timeout or the peer signalling Down),
        before it reports the event (which then has ``failover_sent``). ``b""`` disarms. The
        engine keeps them until replaced; the kernel's refusals are counted in the snapshot
        (``engine.failover``). Returns the number of requests armed."""
        return int(self._call("failover", (interface, peer, bytes(data))))

    def admin_down(self, interface: str, peer: str) -> None:
        self._call("admin", (interface, peer, True))

    def admin_up(self, interface: str, peer: str) -> None:
        self._call("admin", (interface, peer, False))

    def snapshot(self, sessions: bool = True) -> dict[str, Any]:
        """``{"engine": {...}, "sockets": [...], "sessions": [...], "counters": {...}}``,
        JSON-safe. ``counters`` has the engine-wide ``unmatched_drops`` (before any session,
        by reason), the per-reason sum of the sessions' drops and ``truncated_datagrams``.
        ``sessions=False`` leaves the session rows out (``[]``): with hundreds of sessions
        building them holds the engine loop for milliseconds."""
        result: dict[str, Any] = self._call("snapshot", (sessions,))
        result["engine"]["mode"] = self.mode
        return result

    def reset_lag_stats(self) -> None:
        self._call("reset_lag", ())

    def _call(self, op: str, args: tuple[Any, ...]) -> Any:
        if not self._running:
            raise EngineError("the BFD engine is not running")
        chan = self._local or self._remote
        assert chan is not None
        fut = chan.call(op, args)
        try:
            return fut.result(self._timeout)
        except TimeoutError as exc:
            raise EngineError(f"the BFD engine did not answer {op} in {self._timeout}s") from exc

    # ------------------------------------------------------------------ thread mode

    def _start_thread(self) -> None:
        self._local = LocalChannel()
        ready: Future[None] = Future()
        self._thread = threading.Thread(
            target=self._thread_main, args=(self._local, ready), name="bfd-engine", daemon=True
        )
        self._thread.start()
        ready.result(self._timeout)

    def _thread_main(self, chan: LocalChannel, ready: Future[None]) -> None:
        try:
            prepare(self.netns, self.rt_priority)
            on_event = self._on_event
            loop = Loop(
                lambda w: on_event(BfdEvent.from_wire(w)),
                rng=random.Random(self.seed),
                kernel_rx=self.kernel_rx,
            )
        except BaseException as exc:
            ready.set_exception(exc)
            return
        ready.set_result(None)
        loop.run(chan.efd, chan.serve(loop.call))

    # ------------------------------------------------------------------ process mode

    def _start_process(self) -> None:
        self._proc, conn = spawn(
            self.netns, self.rt_priority, self.seed, self.log_priority, self.kernel_rx
        )
        self._remote = DaemonEnd(conn, self._on_event, self._engine_closed)
        self._remote.start()

    def _engine_closed(self) -> None:
        """The engine's end of the socket closed (reader thread): unexpected unless stopping."""
        if self._stopping:
            return
        self._running = False
        rc = self._proc.poll() if self._proc is not None else None
        log.error("bfd: the engine process exited (rc %s)", rc)
        if self._on_exit is not None:
            self._on_exit(rc)
