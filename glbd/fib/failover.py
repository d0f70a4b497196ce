"""The BFD engine's armed kernel failover: per session (interface, peer), the RTM_DELNEXTHOP
batch the engine sends itself when the session fails, kept equal to the FIB's member nexthop
ids (``FibProgrammer.on_failover_map``) and to ``bfd.kernel_failover``."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from collections.abc import Callable

import structlog

from bfd.engine import BfdEngine, EngineError
from glbd.config import config as cfgmod
from glbd.config import params
from glbd.fib.fibmsg import failover_wire

log = structlog.get_logger(__name__)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class FailoverArming:
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        engine: Callable[[], BfdEngine | None],
        cfg: Callable[[], cfgmod.Config],
        counters: dict[str, int],
    ) -> None:
        self._loop = loop
        self._engine = engine
        self._cfg = cfg
        self._counters = counters
        self._want: dict[tuple[str, str], bytes] = {}  # what the FIB wants armed
        self._armed: dict[tuple[str, str], bytes] = {}  # what the engine has
        self._task: asyncio.Task[None] | None = None

    def map_changed(self, fm: dict[tuple[IPAddress, str], tuple[int, ...]]) -> None:
        """The FIB's member nexthop ids changed: re-arm the sessions whose ids changed."""
        self._want = {(ifname, str(gw)): failover_wire(ids) for (gw, ifname), ids in fm.items()}
        self.rearm()

    def rearm(self, *, all_sessions: bool = False) -> None:
        """Bring the engine to what the FIB and the config want (a task). ``all_sessions``:
        the engine's sessions are new or re-created, so nothing is armed."""
        if all_sessions:
            self._armed.clear()
        if self._engine() is None:
            return
        if self._task is None or self._task.done():
            self._task = self._loop.create_task(self._push())

    async def settled(self) -> bool:
        """Wait for the arming task; False if none was started."""
        if self._task is None:
            return False
        await self._task
        return True

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def _push(self) -> None:
        """One control call per session that differs (all disarmed when
        ``bfd.kernel_failover`` is off). Repeats until nothing changed meanwhile; a session
        the engine does not know is skipped."""
        while (eng := self._engine()) is not None and eng.running:
            cfg = self._cfg()
            enabled = cfg.bfd.kernel_failover
            sessions = params.bfd_session_keys(cfg)
            todo = {
                k: (self._want.get(k, b"") if enabled else b"")
                for k in sessions
                if self._armed.get(k, b"") != (self._want.get(k, b"") if enabled else b"")
            }
            self._armed = {k: v for k, v in self._armed.items() if k in sessions}
            if not todo:
                return
            for (ifname, peer), data in sorted(todo.items()):
                try:
                    await asyncio.to_thread(eng.set_failover, ifname, peer, data)
                except EngineError as e:
                    self._counters["bfd_failover_arm_errors"] += 1
                    log.warning(
                        "bfd_failover_arm_failed", peer=peer, interface=ifname, error=str(e)
                    )
                    self._armed[(ifname, peer)] = data  # do not retry in a loop
                    continue
                self._counters["bfd_failover_arms"] += 1
                self._armed[(ifname, peer)] = data
