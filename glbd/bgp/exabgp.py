"""Runs ExaBGP 5.0.x as a supervised child and moves API lines between it and glbd.

* ``render_config`` writes ExaBGP's config from glbd's neighbor list (both families, hold
  time, ``listen 179`` so the peer may open the TCP session, ``group-updates false`` so every
  prefix travels in its own UPDATE with its own NHC, ``adj-rib-in false`` (glbd keeps the
  received paths itself; ExaBGP's copy held 389 MB for 64 x 10k paths), AIGP enabled
  (``capability { aigp enable; }``: glbd decides per session colour which sessions carry it,
  docs/colours.md), and the API block:
  ``receive { packets; update; open; notification; } neighbor-changes;``: each received
  message reaches glbd raw, as hex, and ``glbd.bgp.bgpmsg`` reads it (ExaBGP's JSON of a
  full table, per prefix, cost both processes more than the routes themselves); without
  ``raw_messages``, ``parsed`` instead of ``packets``). A ``passive``
  neighbor is only accepted, never connected to: two ExaBGPs that both connect collide, and
  after collision handling ExaBGP 5.0.15 sometimes services the surviving session only on its
  idle tick (~75 UPDATEs/s instead of ~600/s, observed in bench/bgp_burst.py).
* A neighbor's TCP MD5 key (RFC 2385) is written into that config (``md5-password``, base64),
  so the config file is 0600 in a 0700 directory of ours and removed at stop; ExaBGP's
  ``configuration`` log category, which would echo it at DEBUG, is off.
* ExaBGP runs in the foreground as root without named pipes (``exabgp.daemon.user=root``,
  ``exabgp.api.cli=false``, ``exabgp.daemon.daemonize=false``), with systemd's
  NOTIFY_SOCKET/WATCHDOG_*/LISTEN_* removed from its environment, optionally inside a network
  namespace (``ip netns exec NS``; production: ``netns=None``). Its log (rotated by ExaBGP at
  1 MB, 3 kept) and its stdout/stderr (``exabgp.stdout``, where a crash's traceback lands) go
  to ``log_dir``: by default systemd's ``LogsDirectory=`` (``$LOGS_DIRECTORY``, e.g.
  /var/log/glbd), which outlives the process, else the runtime directory. When ExaBGP dies,
  ``exabgp_lost`` carries the last lines of both.
* Its API process is :mod:`glbd.bgp.exabgp_bridge`, which connects back to a Unix socket served
  here with asyncio streams.
* Commands are queued, coalesced per (neighbor, prefix) so a burst collapses to the last word,
  and written with at most ``window`` commands awaiting their ``done``/``error`` ack: the
  window is the backpressure; ExaBGP's API stalls on unbounded bursts.
* If ExaBGP (or the bridge) dies, ``on_lost`` is called, ExaBGP is restarted with exponential
  backoff and ``on_ready`` is called once the bridge is connected again (the owner re-queues
  its Adj-RIB-Out there).
* A command ExaBGP answers ``error`` is handed to ``on_error``: one for a neighbor ExaBGP does
  not know yet (its reload has not been taken) is lost unless the owner sends it again.
* ``stop()`` drains the queue (the owner queues its withdrawals first), then SIGTERM (ExaBGP
  sends Cease to every peer; to a peer of a graceful restart capability it announced, it closes
  the session without one: ``reactor/peer.py``), then SIGKILL after a grace period;
  ``stop(kill=True)`` (glbd's graceful restart) SIGKILLs at once. Processes are stopped by PID.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ctypes
import importlib.util
import os
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from glbd.bgp import exabgp_api as api
from glbd.daemon.paths import UnsafePathError, check_dir, private_dir, write_private
from glbd.daemon.systemd import child_env

__all__ = ["ExabgpParams", "ExabgpSupervisor", "exabgp_env", "render_config"]

log = structlog.get_logger(__name__)


#: the API reader gives the event loop a turn after this much consecutive work
YIELD_AFTER_S = 0.002


@dataclass(frozen=True)
class ExabgpNeighbor:
    address: str
    local_address: str
    #: None: any AS (``peer-as auto``; glbd checks the OPEN's AS itself)
    remote_as: int | None
    hold_time: int = 9
    #: only accept the TCP session, never open it (see ``render_config``)
    passive: bool = False
    #: TCP MD5 signature key (RFC 2385); never in a repr
    md5: bytes | None = field(default=None, repr=False)
    #: graceful restart (RFC 4724): the restart time advertised; None: no capability
    restart_time: int | None = None
    #: an unnumbered neighbor: the session runs between link-local addresses on this port
    #: (``source-interface``) and IPv4 routes carry an IPv6 next hop (RFC 8950)
    interface: str | None = None
    #: the unicast families activated for the session (multiprotocol capability, RFC 4760)
    families: tuple[str, ...] = ("ipv4", "ipv6")


@dataclass(frozen=True)
class ExabgpParams:
    router_id: str
    local_as: int
    neighbors: tuple[ExabgpNeighbor, ...]
    #: how to start ExaBGP (default: :func:`default_exabgp`)
    exabgp: tuple[str, ...] = ()
    #: where config, socket and log live (default: a fresh temporary directory). Made 0700 at
    #: start; if the name is taken by anything but our own 0700 directory, a fresh random
    #: directory beside it is used instead (``ExabgpSupervisor.dir`` says which)
    runtime_dir: Path | None = None
    window: int = 64
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0
    #: a run that lasted this long resets the backoff
    backoff_reset_s: float = 60.0
    connect_timeout_s: float = 30.0
    stop_grace_s: float = 5.0
    drain_timeout_s: float = 5.0
    #: ExaBGP's own log level (INFO logs a line per route: too much for a tmpfs runtime dir)
    log_level: str = "WARNING"
    #: where exabgp.log and exabgp.stdout go (default: $LOGS_DIRECTORY, else the runtime dir)
    log_dir: Path | None = None
    #: listen on [::]:179 for every IPv6 neighbor (``exabgp.tcp.bind``) instead of on each
    #: one's own address: a link-local address cannot be listened on alone (see
    #: ``_unnumbered_lines``); read by ExaBGP at start only
    listen_any6: bool = False
    #: received messages reach glbd raw (``receive { packets; }``, read by
    #: ``glbd.bgp.bgpmsg``) instead of as ExaBGP's JSON: no per-prefix JSON on either side
    #: (64 x 10k paths converged in 1.17x FRR's time instead of 1.5x)
    raw_messages: bool = True


#: lines of ExaBGP's log and stdout quoted in the ``exabgp_lost`` record
LOST_TAIL_LINES = 10
#: exabgp.stdout is moved to exabgp.stdout.1 at a spawn once it is this big
STDOUT_MAX_BYTES = 1 << 20
#: a reload's SIGUSR1 is sent again this long after the first (s): ExaBGP may have dropped it
RELOAD_RESENDS = (0.5, 1.5, 3.5, 7.5)
#: written to ExaBGP's API after each reload signal: its poll, which a signal does not end
#: (the interpreter retries it), returns at once and the loop takes the signal. A ``debug``
#: line is only logged (at warning) and never answered, so it takes no room in the window
RELOAD_WAKE = b"debug glbd: reload signalled\n"


def logs_directory() -> Path | None:
    """systemd's ``LogsDirectory=`` for this service, if it is one only root or we can change."""
    first = os.environ.get("LOGS_DIRECTORY", "").split(":")[0]
    if not first:
        return None
    try:
        check_dir(Path(first), "logs directory")
    except (UnsafePathError, OSError) as e:
        log.warning("exabgp_logs_directory_unusable", error=str(e))
        return None
    return Path(first)


def tail_lines(path: Path, n: int = LOST_TAIL_LINES, max_bytes: int = 8192) -> list[str]:
    """The last ``n`` lines of ``path`` (at most its last ``max_bytes``), [] if unreadable."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return []
    lines = data.decode(errors="replace").splitlines()
    return lines[1:][-n:] if size > max_bytes else lines[-n:]


def default_exabgp() -> tuple[str, ...]:
    """How to start ExaBGP: through :mod:`glbd.bgp.exabgp_launch` with this Python when it can
    import ExaBGP (glbd's venv, the package), else the ``exabgp`` script beside this Python or
    on PATH, which runs without the launcher's reload fix and speed-ups."""
    if importlib.util.find_spec("exabgp") is not None:
        return (sys.executable, "-m", "glbd.bgp.exabgp_launch")
    here = Path(sys.executable).parent / "exabgp"
    if here.exists():
        return (str(here),)
    found = shutil.which("exabgp")
    return (found or "exabgp",)


#: longest ExaBGP API line accepted (bytes)
API_LINE_LIMIT = 1 << 21


def render_config(params: ExabgpParams, bridge_cmd: Sequence[str]) -> str:
    run = " ".join(bridge_cmd)
    lines = [
        "process glbd {",
        f"    run {run};",
        "    encoder json;",
        "}",
        "",
    ]
    for n in params.neighbors:
        lines += [
            f"neighbor {n.address} {{",
            f"    router-id {params.router_id};",
            f"    local-address {n.local_address};",
            f"    local-as {params.local_as};",
            f"    peer-as {'auto' if n.remote_as is None else n.remote_as};",
            f"    hold-time {n.hold_time};",
            *(_unnumbered_lines(n.interface) if n.interface else []),
            *(["    listen 179;"] if _own_listener(params, n) else []),
            # a link-local neighbor with no [::]:179 to accept it on must connect itself
            *(
                ["    passive true;"]
                if n.passive and (params.listen_any6 or not n.interface)
                else []
            ),
            *_md5_lines(n.md5),
            *_capability_lines(n.restart_time),
            "    group-updates false;",
            # glbd holds the Adj-RIB-In; ExaBGP's own copy would cost ~600 B per path
            "    adj-rib-in false;",
            "    family {",
            *(f"        {f} unicast;" for f in _session_families(n)),
            "    }",
            "    api {",
            "        processes [ glbd ];",
            "        neighbor-changes;",
            "        receive {",
            "            packets;" if params.raw_messages else "            parsed;",
            "            update;",
            "            open;",
            "            notification;",
            "        }",
            "    }",
            "}",
            "",
        ]
    return "\n".join(lines)


def _session_families(n: ExabgpNeighbor) -> tuple[str, ...]:
    """``n``'s families; an unnumbered session with IPv4 also negotiates IPv6 unicast: ExaBGP
    5.0 only enables the extended next hop (IPv4 over an IPv6 next hop) with both (the RIB
    still ignores the IPv6 routes of a neighbor whose families leave IPv6 out)."""
    if n.interface and "ipv4" in n.families and "ipv6" not in n.families:
        return (*n.families, "ipv6")
    return n.families


def _own_listener(params: ExabgpParams, n: ExabgpNeighbor) -> bool:
    """Whether ``n`` gets ``listen 179`` on its local address: not when [::]:179 listens for
    every IPv6 neighbor (the two sockets would clash), never for a link-local one."""
    if n.interface:
        return False
    return not (params.listen_any6 and ":" in n.local_address)


def _unnumbered_lines(interface: str) -> list[str]:
    """A link-local session: ExaBGP 5.0 connects from the port (SO_BINDTODEVICE gives the
    link-local addresses their scope) but cannot listen on a link-local address alone (its
    bind has no scope id: EINVAL); it accepts one on a [::]:179 listener (``listen_any6``).
    RFC 8950: IPv4 unicast may carry an IPv6 next hop (the ``nexthop`` block alone enables
    the capability)."""
    return [
        f"    source-interface {interface};",
        "    nexthop {",
        "        ipv4 unicast ipv6;",
        "    }",
    ]


def _capability_lines(restart_time: int | None) -> list[str]:
    """ExaBGP 5.0's ``capability`` block (``configuration/capability.py``).

    AIGP (RFC 7311) enabled on every session: ExaBGP then packs the AIGP glbd announces and
    parses a received one (no OPEN capability: a setting of the session). Which sessions carry
    it is glbd's decision, per session colour (:mod:`glbd.bgp.ribcolour`), so a reload that
    colours a session does not change its ExaBGP definition (which would reset it).

    Graceful restart: the restart time, the Restart State bit on the first OPEN of each ExaBGP
    process (a glbd or ExaBGP restart) and the Forwarding State bit on every family it sends
    (glbd keeps its FIB across both). When glbd is killed, ExaBGP then closes its sessions
    without a NOTIFICATION, so its peers keep glbd's routes while it comes back."""
    aigp = ["        aigp enable;"]
    if restart_time is None:
        return ["    capability {", *aigp, "    }"]
    return [
        "    capability {",
        *aigp,
        f"        graceful-restart {restart_time};",
        "    }",
        # ExaBGP would send End-of-RIB as soon as its queue is empty after the OPEN, which
        # can be before glbd replayed its routes: the peer would sweep them. glbd sends it.
        "    manual-eor true;",
    ]


def _md5_lines(key: bytes | None) -> list[str]:
    """ExaBGP 5.0's per-neighbor TCP MD5 key. Given as base64 with ``md5-base64 true``, so any
    byte of the key (quotes, spaces, ``;``) survives ExaBGP's config tokenizer, and a key that
    looks like hex is never re-read as base64 (ExaBGP's "auto" mode would)."""
    if key is None:
        return []
    return [
        f'    md5-password "{base64.b64encode(key).decode()}";',
        "    md5-base64 true;",
    ]


#: ``exabgp.reactor.speed``: its idle poll timeout is a hundredth of it (here 200 ms)
REACTOR_SPEED = "20"


def exabgp_env(
    base: dict[str, str], log_file: Path, log_level: str = "WARNING", bind: str = ""
) -> dict[str, str]:
    env = child_env(base)
    env.update(
        {
            "exabgp.daemon.user": "root",
            "exabgp.daemon.daemonize": "false",
            "exabgp.daemon.drop": "false",
            "exabgp.api.cli": "false",
            "exabgp.api.ack": "true",
            "exabgp.api.encoder": "json",
            # a received prefix as a bare string, not {"nlri": ...}: a third less JSON for
            # ExaBGP to write and glbd to read, per prefix
            "exabgp.api.compact": "true",
            "exabgp.log.destination": str(log_file),
            "exabgp.log.level": log_level,
            # the configuration category echoes every token of the config at DEBUG, TCP MD5
            # keys included; glbd writes that config itself and never needs it echoed
            "exabgp.log.all": "false",
            "exabgp.log.configuration": "false",
            "exabgp.daemon.pid": "",
            # the reactor's poll timeout is speed / 100 s: with nothing to read it wakes that
            # often to run every peer's timers. ExaBGP's 1.0 (10 ms, 100 idle turns a second)
            # cost 2 % of a core per router, 10 (100 ms) 0.25 %; a peer's socket and glbd's
            # commands wake it at once whatever the timeout, and BGP's timers are in seconds
            # (a reload signal is followed by RELOAD_WAKE)
            "exabgp.reactor.speed": REACTOR_SPEED,
        }
    )
    if bind:  # else each neighbor's ``listen`` only
        env["exabgp.tcp.bind"] = bind
    return env


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when glbd dies, so no orphaned ExaBGP keeps port 179
    (PR_SET_PDEATHSIG survives the exec of ``ip netns exec`` and of ExaBGP)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


def _key(cmd: api.Command) -> tuple[str, str, str]:
    if isinstance(cmd, api.Teardown):
        return ("teardown", str(cmd.neighbor), str(cmd.subcode))
    if isinstance(cmd, api.EndOfRib):
        return ("eor", str(cmd.neighbor), cmd.family)
    if isinstance(cmd, api.RouteRefresh):
        return ("refresh", str(cmd.neighbor), cmd.family)
    if isinstance(cmd, api.FlushAdjRibOut):
        return ("flush", str(cmd.neighbor), "")
    return ("route", str(cmd.neighbor), str(cmd.prefix))


@dataclass
class _Stats:
    sent: int = 0
    acked_ok: int = 0
    acked_error: int = 0
    coalesced: int = 0
    starts: int = 0
    deaths: int = 0
    reload_signals: int = 0
    errors: Counter[str] = field(default_factory=Counter)


class ExabgpSupervisor:
    """One supervised ExaBGP. Callbacks run on the event loop and must not block."""

    def __init__(
        self,
        params: ExabgpParams,
        *,
        netns: str | None,
        on_line: Callable[[str], None],
        on_lost: Callable[[], None],
        on_ready: Callable[[], None],
        on_error: Callable[[api.Command], None] | None = None,
    ) -> None:
        self.params = params
        self.netns = netns
        self._on_line = on_line
        self._on_lost = on_lost
        self._on_ready = on_ready
        self._on_error = on_error or (lambda cmd: None)
        self._own_dir = params.runtime_dir is None
        self.dir = params.runtime_dir or Path(tempfile.mkdtemp(prefix="glbd-exabgp-"))
        self._log_dir = params.log_dir or logs_directory()
        self.stats = _Stats()
        self._pending: OrderedDict[tuple[str, str, str], api.Command] = OrderedDict()
        self._inflight: deque[api.Command] = deque()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._server: asyncio.base_events.Server | None = None
        self._conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._connected = asyncio.Event()
        self._proc: asyncio.subprocess.Process | None = None
        self._reload_resends: list[asyncio.TimerHandle] = []
        self._main: asyncio.Task[None] | None = None
        self._stopping = False
        self.started_at: float | None = None
        self.generation = 0

    # ---- public --------------------------------------------------------------------------

    @property
    def socket_path(self) -> Path:
        return self.dir / "api.sock"

    @property
    def config_path(self) -> Path:
        return self.dir / "exabgp.conf"

    @property
    def log_path(self) -> Path:
        return (self._log_dir or self.dir) / "exabgp.log"

    @property
    def stdout_path(self) -> Path:
        return (self._log_dir or self.dir) / "exabgp.stdout"

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def exited(self) -> bool:
        """No ExaBGP runs: never started, or its process has ended."""
        return self._proc is None or self._proc.returncode is not None

    @property
    def connected(self) -> bool:
        return self._conn is not None

    def queued(self) -> list[api.Command]:
        """The commands not yet written to ExaBGP, in the order they will go."""
        return list(self._pending.values())

    def send(self, cmd: api.Command) -> None:
        """Queue a command; a newer command for the same (neighbor, prefix) replaces it."""
        key = _key(cmd)
        if key in self._pending:
            self.stats.coalesced += 1
            del self._pending[key]
        self._pending[key] = cmd
        self._idle.clear()
        self._wake.set()

    async def start(self) -> None:
        if not self._own_dir:
            # the config names the command ExaBGP runs as root: only a 0700 directory of ours
            self.dir = private_dir(self.dir, "ExaBGP runtime directory")
            self._own_dir = True
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        # limit = the longest API line (a 64 KB UPDATE of ~16k prefixes is ~1 MB of JSON);
        # asyncio also stops reading ahead at 2 x limit, which bounds what a burst that glbd
        # has not processed yet can hold in glbd's memory (it was 16 MB -> 22 MB seen buffered)
        self._server = await asyncio.start_unix_server(
            self._accept, path=str(self.socket_path), limit=API_LINE_LIMIT
        )
        os.chmod(self.socket_path, 0o600)
        bridge = [sys.executable, "-m", "glbd.bgp.exabgp_bridge", str(self.socket_path)]
        write_private(self.config_path, render_config(self.params, bridge))
        await self._spawn()
        self._main = asyncio.create_task(self._run(), name="exabgp-supervisor")
        try:
            await asyncio.wait_for(self._connected.wait(), self.params.connect_timeout_s)
        except TimeoutError:
            log.warning("exabgp_bridge_not_connected", timeout=self.params.connect_timeout_s)

    def reload(self, params: ExabgpParams) -> None:
        """Rewrite the config and make ExaBGP reload it (SIGUSR1): new neighbors are added,
        removed ones closed, redefined ones re-established; routes announced over the API to
        unchanged neighbors stay (ExaBGP only replaces routes that came from its config).

        ExaBGP 5.0.15 drops a SIGUSR1 that arrives while it still has routes to send to a
        peer (its loop clears the signal, then skips the reload), and says nothing: the
        signal is sent again :data:`RELOAD_RESENDS` later. Reloading an unchanged config
        changes nothing, so the repeats are harmless once one has taken."""
        self.write_config(params)
        self._signal_reload()
        loop = asyncio.get_running_loop()
        self._reload_resends = [loop.call_later(d, self._signal_reload) for d in RELOAD_RESENDS]

    def write_config(self, params: ExabgpParams) -> None:
        """Rewrite the config without a reload signal: the next reload ExaBGP takes reads it.
        The pending repeats of an earlier reload's signal are cancelled: glbd signals none
        before the caller's own (:meth:`reload`)."""
        self.params = params
        bridge = [sys.executable, "-m", "glbd.bgp.exabgp_bridge", str(self.socket_path)]
        write_private(self.config_path, render_config(params, bridge))
        for h in self._reload_resends:
            h.cancel()
        self._reload_resends = []

    def _signal_reload(self) -> None:
        if self._proc is not None and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.send_signal(signal.SIGUSR1)
                self.stats.reload_signals += 1
            if self._conn is not None:
                self._conn[1].write(RELOAD_WAKE)

    async def drain(self, timeout: float | None = None) -> bool:
        """Wait until every queued command was acknowledged. False on timeout."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        except TimeoutError:
            return False

    async def stop(self, kill: bool = False) -> None:
        """Drain the queue, then end ExaBGP: SIGTERM (a Cease to every peer, or a close
        without one where graceful restart was negotiated), or with ``kill`` SIGKILL (no
        message at all: its kernel closes the sessions)."""
        for h in self._reload_resends:
            h.cancel()
        if self._conn is not None:
            await self.drain(self.params.drain_timeout_s)
        self._stopping = True
        if self._main is not None:
            self._main.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._main
        await self._terminate(kill)
        if self._conn is not None:
            self._conn[1].close()
            self._conn = None
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        if self._own_dir:  # never a directory start() refused or did not make private
            shutil.rmtree(self.dir, ignore_errors=True)

    def snapshot(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "generation": self.generation,
            "connected": self.connected,
            "queued": len(self._pending),
            "in_flight": len(self._inflight),
            "sent": self.stats.sent,
            "acked_ok": self.stats.acked_ok,
            "acked_error": self.stats.acked_error,
            "coalesced": self.stats.coalesced,
            "starts": self.stats.starts,
            "deaths": self.stats.deaths,
            "reload_signals": self.stats.reload_signals,
            "log": str(self.log_path),
        }

    # ---- process ---------------------------------------------------------------------------

    async def _spawn(self) -> None:
        exe = list(self.params.exabgp or default_exabgp())
        argv = [*exe, "server", str(self.config_path)]
        if self.netns is not None:
            argv = ["ip", "netns", "exec", self.netns, *argv]
        bind = "::" if self.params.listen_any6 else ""
        env = exabgp_env(dict(os.environ), self.log_path, self.params.log_level, bind)
        with contextlib.suppress(OSError):  # bounded: one old file kept
            if os.lstat(self.stdout_path).st_size > STDOUT_MAX_BYTES:
                os.replace(self.stdout_path, self.stdout_path.with_suffix(".stdout.1"))
        # never through a symlink at that name; handed to the child
        fd = os.open(
            self.stdout_path,
            os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
        )
        out = os.fdopen(fd, "ab")
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *argv,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                cwd=str(self.dir),
                start_new_session=True,  # a terminal's Ctrl-C reaches glbd only: it withdraws first
                preexec_fn=_die_with_parent,
            )
        finally:
            out.close()
        self.generation += 1
        self.stats.starts += 1
        self.started_at = time.monotonic()
        log.info("exabgp_started", pid=self._proc.pid, netns=self.netns, gen=self.generation)

    async def _terminate(self, kill: bool = False) -> None:
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), self.params.stop_grace_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
        log.info("exabgp_stopped", pid=proc.pid, rc=proc.returncode)

    async def _run(self) -> None:
        backoff = self.params.backoff_initial_s
        while not self._stopping:
            proc = self._proc
            assert proc is not None
            writer = asyncio.create_task(self._writer())
            died = asyncio.create_task(proc.wait())
            lost_bridge = asyncio.create_task(self._reader())
            try:
                await asyncio.wait({died, lost_bridge}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                writer.cancel()
                lost_bridge.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await writer
            if self._stopping:
                return
            self.stats.deaths += 1
            ran = time.monotonic() - (self.started_at or time.monotonic())
            await self._terminate()
            log.warning(
                "exabgp_lost",
                pid=proc.pid,
                rc=proc.returncode,
                ran_s=round(ran, 3),
                log=str(self.log_path),
                log_tail=tail_lines(self.log_path),
                stdout_tail=tail_lines(self.stdout_path),
            )
            died.cancel()
            self._drop_connection()
            try:
                self._on_lost()
            except Exception:  # a callback's fault must not stop supervision
                log.exception("exabgp_on_lost_failed")
            if ran >= self.params.backoff_reset_s:
                backoff = self.params.backoff_initial_s
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self.params.backoff_max_s)
            await self._spawn()

    async def _reader(self) -> None:
        await self._connected.wait()
        assert self._conn is not None
        await self.read_lines(self._conn[0])

    async def read_lines(self, reader: asyncio.StreamReader) -> None:
        """Handle what the bridge writes (acks and API lines) until EOF or a read error."""
        loop = asyncio.get_running_loop()
        slice_start = loop.time()
        while True:
            # readline() does not suspend while lines are buffered: during a burst of updates
            # this loop would starve heartbeats, BFD events, FIB syncs and glbctl. Yield to
            # the loop after ~2 ms of consecutive work.
            if loop.time() - slice_start > YIELD_AFTER_S:
                await asyncio.sleep(0)
                slice_start = loop.time()
            try:
                raw = await reader.readline()
            except (ConnectionError, ValueError) as exc:  # ValueError: line over the limit
                self.stats.errors[type(exc).__name__] += 1
                return
            if not raw:
                return
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if line in ("done", "error"):
                self._ack(line == "done")
                continue
            if line == "shutdown":  # ExaBGP's answer while it is shutting down
                continue
            try:
                self._on_line(line)
            except Exception:
                self.stats.errors["on_line"] += 1
                log.exception("exabgp_line_handler_failed")

    def _ack(self, ok: bool) -> None:
        if not self._inflight:
            self.stats.errors["unexpected_ack"] += 1
            return
        cmd = self._inflight.popleft()
        if ok:
            self.stats.acked_ok += 1
        else:
            self.stats.acked_error += 1
            log.warning("exabgp_command_error", command=cmd.encode())
            try:
                self._on_error(cmd)
            except Exception:
                log.exception("exabgp_on_error_failed")
        self._wake.set()
        if not self._inflight and not self._pending:
            self._idle.set()

    async def _writer(self) -> None:
        await self._connected.wait()
        assert self._conn is not None
        w = self._conn[1]
        try:
            self._on_ready()
        except Exception:
            log.exception("exabgp_on_ready_failed")
        while True:
            await self._wake.wait()
            self._wake.clear()
            room = self.params.window - len(self._inflight)
            if room <= 0 or not self._pending:
                if not self._pending and not self._inflight:
                    self._idle.set()
                continue
            batch: list[str] = []
            while room > 0 and self._pending:
                _, cmd = self._pending.popitem(last=False)
                self._inflight.append(cmd)
                batch.append(api.encode_command(cmd))
                room -= 1
            w.write(("\n".join(batch) + "\n").encode())
            self.stats.sent += len(batch)
            await w.drain()

    def _drop_connection(self) -> None:
        if self._conn is not None:
            self._conn[1].close()
        self._conn = None
        self._connected.clear()
        # unacknowledged commands are lost with the process: the owner replays its
        # Adj-RIB-Out on ready, which supersedes them
        self._inflight.clear()
        self._pending.clear()
        self._idle.set()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._conn is not None:  # a second bridge (ExaBGP respawned it): replace
            self._conn[1].close()
        self._conn = (reader, writer)
        self._connected.set()
        self._wake.set()
