"""The BFD engine: all sessions, their sockets and one timer heap, in a loop of their own.

Isolation (issue 9 item 3) -- why a separate *process* is the default
--------------------------------------------------------------------
The engine loop is a plain ``select.epoll`` loop with one ``heapq`` of deadlines for all
sessions (no asyncio: no per-packet callbacks, handles or futures). It can run in two places,
with the same control API (:class:`BfdEngine`):

* ``mode="process"`` (default): a child interpreter (``python -m bfd.engine``) that owns the
  loop; commands and events travel over a socketpair as pickles. It has its own GIL, so glbd's
  main loop (RIB, FIB, ExaBGP JSON) cannot delay a transmit or an expiry check; the child may
  also run SCHED_FIFO (``rt_priority``) so that a busy core does not delay it either.
* ``mode="thread"``: the same loop on a thread of the daemon's process. Cheaper to start, but it
  shares the GIL: while the main thread computes, each GIL hand-over waits for the switch
  interval (5 ms), and every syscall on the BFD thread gives the GIL away again.

Measured with ``bench/bfd_bench.py --isolation --no-load --duration 10`` (2-core VM shared with
other people's tests, load average 10-12; two engines, 64 sessions at 3 x 10 ms, the bench's
main thread spinning in pure Python like a busy glbd main loop; in thread mode both engines
share the bench's GIL; 2026-11-22):

==================  =====  =============  ============  ==========================
engine              flaps  timer lag p99  lag max       detection p50 / p99
==================  =====  =============  ============  ==========================
thread              5153   > 100 ms       315 ms        132 / 151 ms (theory 30)
thread + FIFO 10    4754   > 100 ms       389 ms        85 / 85 ms
process             6214   > 100 ms       199 ms        42 / 236 ms
process + FIFO 10   0      1.1 ms         7.9 ms        30.8 / 31.0 ms
==================  =====  =============  ============  ==========================

(An earlier run at load average ~2.5 gave the same picture: only process + FIFO held.)

A real-time priority cannot help a thread that waits for the GIL; a separate process can use
it. Hence process mode by default, and daemons running as root should pass ``rt_priority``
(SCHED_FIFO; Linux's RT throttling still leaves 5 % of each CPU to normal tasks). Thread mode
stays for tests and for callers whose main loop is otherwise idle.

Hot path per received packet: ``recvmsg`` (batched until EAGAIN), TTL check, dict lookup by
Your Discriminator, :func:`decode` unless the bytes equal the session's last accepted packet
(the steady state), :meth:`Session.on_packet`, and at most one ``heappush`` when
the session's next deadline moved earlier (the heap is lazy: stale entries are skipped by
generation number). Periodic transmissions reuse the session's cached packet bytes.

Demultiplexing (RFC 5880 §6.8.6, RFC 5881 §3): by Your Discriminator; when it is 0 (only legal
in Down/AdminDown, checked by the codec) by (interface, source address). Drops are counted by
name, per receive socket (before a session is known) and per session (after).

Events: every session state change becomes a :class:`BfdEvent` passed to the ``on_event``
callback, called from the engine's thread (thread mode) or from the reader thread that receives
the child's messages (process mode) -- never from the caller's event loop. An asyncio daemon
wraps it::

    loop = asyncio.get_running_loop()
    engine = BfdEngine(lambda ev: loop.call_soon_threadsafe(on_bfd_event, ev), rt_priority=10)
    engine.start()
    engine.add_session(SessionConfig(peer="198.18.0.2", interface="eth1",
                                     params=SessionParams(desired_min_tx=50_000,
                                                          required_min_rx=50_000)))
    ...
    engine.snapshot()["sessions"]        # per-session dicts for `glbctl bfd`
    engine.stop()

Kernel failover (:mod:`bfd.failover`): a session may carry armed rtnetlink requests
(:meth:`BfdEngine.set_failover`). When it fails, the loop sends them in one datagram *before*
it emits the event, so the FIB change does not wait for the event's trip through the
socketpair, the reader thread and the daemon's loop (0.4-0.7 ms normally, 2-11 ms when that
loop is busy). The event then says ``failover_sent``; the kernel's answers are read by the loop
and counted (``engine.failover`` in the snapshot).

The control calls are synchronous and thread-safe; each is one round trip to the engine loop
(tens of µs in thread mode, well under a millisecond in process mode).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import errno
import gc
import heapq
import ipaddress
import itertools
import logging
import os
import pickle
import queue
import random
import resource
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Literal

from . import failover as _fo
from .packet import ControlPacket, DecodeError, Diag, State, decode
from .session import Effect, Session, SessionParams, StateChange, Transmit
from .transport import Datagram, open_rx_socket, open_tx_socket, peer_sockaddr, recv_batch

__all__ = [
    "RX_STAMP_MAX_AGE",
    "BfdEngine",
    "BfdEvent",
    "EngineError",
    "SessionConfig",
    "arrival_time",
]

log = logging.getLogger(__name__)

_CLONE_NEWNET = 0x40000000
_PR_SET_PDEATHSIG = 1
_HOUSEKEEPING_S = 1.0
_LAG_BUCKET_S = 0.0001  # 0.1 ms
_LAG_BUCKETS = 1001  # the last one is ">= 100 ms"
_U32 = struct.Struct("!I")
#: a kernel receive stamp older than this (seconds) is not trusted (a wall clock step, or an
#: engine stalled that long, which then counts from the read as before)
RX_STAMP_MAX_AGE = 0.05


def arrival_time(now: float, wall: float, stamp: float) -> float:
    """When a packet read at ``now`` (monotonic) arrived, for RFC 5880 6.8.4 detection.

    ``wall`` is the wall clock at the read and ``stamp`` the kernel's arrival stamp (wall clock,
    0.0 if absent). Only an age in (0, RX_STAMP_MAX_AGE) is used, so a wall clock step never
    pushes a deadline later or far earlier. Until the kernel's receive stamps are live (the
    first timestamping socket on the machine enables them from a deferred work item) the stamp
    is the read time: detection then counts from the read, never from before the arrival.
    """
    age = wall - stamp
    return now - age if 0.0 < age < RX_STAMP_MAX_AGE else now


class EngineError(RuntimeError):
    """A control call failed (bad arguments, unknown session, engine not running)."""


@dataclass(frozen=True, slots=True)
class SessionConfig:
    """One single-hop session: one per (interface, peer address) (RFC 5881 §3)."""

    peer: str
    interface: str
    #: source address for our packets (None: the kernel chooses)
    local: str | None = None
    params: SessionParams = field(default_factory=SessionParams)

    @property
    def key(self) -> tuple[str, str]:
        return (self.interface, _norm_ip(self.peer))


@dataclass(frozen=True, slots=True)
class BfdEvent:
    """A session changed state (see :class:`bfd.session.StateChange`)."""

    interface: str
    peer: str
    old: State
    new: State
    #: our diag (why *we* changed state)
    diag: Diag
    #: detection_timeout | neighbor_down | neighbor_admin_down | admin_down | admin_up |
    #: neighbor_signal
    reason: str
    #: an Up session lost (detection timeout or the peer signalling Down); False for a peer's
    #: AdminDown and for our own admin actions (RFC 5882 §3.2)
    failure: bool
    #: the peer's C bit (RFC 5882 §4.3: with C = 0 a Down during the peer's graceful restart
    #: may be ignored)
    remote_cpi: bool
    remote_diag: int
    local_discriminator: int
    #: time.monotonic() in the engine (CLOCK_MONOTONIC is system-wide)
    at: float
    #: when the last packet from the peer was accepted (same clock; None: never heard).
    #: For a detection timeout, ``at - last_rx`` is the detection latency.
    last_rx: float | None = None
    #: the engine sent the session's armed failover requests (:meth:`BfdEngine.set_failover`)
    #: to the kernel before it emitted this event; their answers are counted in the snapshot
    failover_sent: bool = False

    @classmethod
    def from_wire(cls, w: _EventWire) -> BfdEvent:
        return cls(
            w[0],
            w[1],
            State(w[2]),
            State(w[3]),
            Diag(w[4]),
            w[5],
            w[6],
            w[7],
            w[8],
            w[9],
            w[10],
            w[11],
            w[12],
        )


#: a BfdEvent as the engine loop emits it: (interface, peer, old, new, diag, reason, failure,
#: remote_cpi, remote_diag, local_discriminator, at, last_rx, failover_sent), enums as ints
_EventWire = tuple[str, str, int, int, int, str, bool, bool, int, int, float, float | None, bool]


def _norm_ip(addr: str) -> str:
    return ipaddress.ip_address(addr.split("%", 1)[0]).compressed


# =============================================================================== the loop


class _RxSock:
    __slots__ = ("drops", "family", "ifname", "packets", "refs", "sock", "totals")

    def __init__(
        self,
        sock: socket.socket,
        ifname: str,
        family: int,
        totals: dict[str, int] | None = None,
    ) -> None:
        self.sock = sock
        self.ifname = ifname
        self.family = family
        self.packets = 0
        self.refs = 0
        self.drops: dict[str, int] = {}
        #: the engine-wide counters of drops before any session, which outlive this socket
        self.totals = totals if totals is not None else {}

    def drop(self, reason: str) -> None:
        self.drops[reason] = self.drops.get(reason, 0) + 1
        self.totals[reason] = self.totals.get(reason, 0) + 1


class _Entry:
    __slots__ = (
        "armed",
        "cfg",
        "detect_lag_max",
        "dst",
        "failover",
        "failover_requests",
        "failovers",
        "family",
        "gen",
        "key",
        "peer",
        "port",
        "removed",
        "rx",
        "rx_bytes",
        "rx_pkt",
        "sess",
        "socket_error",
        "tx",
        "tx_lag_max",
    )

    def __init__(self, cfg: SessionConfig, sess: Session) -> None:
        self.cfg = cfg
        self.key = cfg.key
        self.peer = self.key[1]
        self.family = socket.AF_INET6 if ":" in self.peer else socket.AF_INET
        self.sess = sess
        self.rx: _RxSock | None = None
        self.rx_bytes = b""
        self.rx_pkt: ControlPacket | None = None
        self.tx: socket.socket | None = None
        self.port = 0
        self.dst: Any = None
        self.armed: float | None = None
        self.gen = 0
        self.removed = False
        self.socket_error = ""
        self.tx_lag_max = 0.0
        self.detect_lag_max = 0.0
        #: armed rtnetlink requests, sent when the session fails (b"": none)
        self.failover = b""
        self.failover_requests = 0
        self.failovers = 0


_HeapItem = tuple[float, int, "_Entry | None", int]


class _Loop:
    """Sessions, sockets, timers. Every method runs on the loop's own thread."""

    def __init__(
        self,
        emit: Callable[[_EventWire], None],
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.emit = emit
        #: called at the end of every loop iteration (the engine process flushes events)
        self.after: Callable[[], None] | None = None
        self.clock = clock
        self.rng = rng or random.Random()
        self.ep = select.epoll()
        self.heap: list[_HeapItem] = []
        self.seq = itertools.count()
        self.by_key: dict[tuple[str, str], _Entry] = {}
        self.by_discr: dict[int, _Entry] = {}
        self.rx_by_fd: dict[int, _RxSock] = {}
        self.rx_by_key: dict[tuple[str, int], _RxSock] = {}
        self.used_ports: set[int] = set()
        self.norm: dict[str, str] = {}
        self.buf: list[Datagram] = []
        self.lag_hist = [0] * _LAG_BUCKETS
        self.lag_max = 0.0
        self.timers_fired = 0
        self.rx_packets = 0
        #: drops before any session matched (version, length, discriminator, TTL, ...), by
        #: reason, over every receive socket the engine ever had: no peer to attribute them to
        self.unmatched_drops: dict[str, int] = {}
        #: receive-side notes that are not drops (``truncated_datagram``: processed, counted)
        self.rx_counts: dict[str, int] = {}
        self.iterations = 0
        self.started = clock()
        #: the rtnetlink socket for armed failovers, opened with the first armed session
        self.fo: _fo.FailoverSocket | None = None
        self.fo_fd = -1
        self.fo_stats = {
            "sent": 0,
            "send_errors": 0,
            "acks_ok": 0,
            "refused": 0,
            "unreadable": 0,
        }
        self.fo_last_error = ""
        heapq.heappush(self.heap, (self.started + _HOUSEKEEPING_S, next(self.seq), None, 0))

    # ------------------------------------------------------------------ run

    def run(self, ctl_fd: int, on_ctl: Callable[[int], bool]) -> None:
        """Serve until ``on_ctl(epoll_events)``, called when ``ctl_fd`` is ready, returns
        False. ``ctl_fd`` is registered for EPOLLIN; its owner may ``modify`` that."""
        ep, heap, clock = self.ep, self.heap, self.clock
        ep.register(ctl_fd, select.EPOLLIN)
        rx_by_fd = self.rx_by_fd
        try:
            while True:
                self.iterations += 1
                timeout = max(0.0, heap[0][0] - clock()) if heap else 1.0
                try:
                    events = ep.poll(timeout, 128)
                except InterruptedError:
                    continue
                now = clock()
                for fd, mask in events:
                    rx = rx_by_fd.get(fd)
                    if rx is not None:
                        self._read(rx, now)
                    elif fd == ctl_fd:
                        if not on_ctl(mask):
                            return
                    elif fd == self.fo_fd:
                        self._fo_answers()
                self._run_timers(clock())
                if self.after is not None:
                    self.after()
        finally:
            self.close()

    def close(self) -> None:
        for ent in list(self.by_key.values()):
            self._close_entry(ent)
        if self.fo is not None:
            self.fo.close()
            self.fo = None
            self.fo_fd = -1
        self.ep.close()

    # ------------------------------------------------------------------ receive

    def _read(self, rx: _RxSock, now: float) -> None:
        buf = self.buf
        buf.clear()
        err = recv_batch(rx.sock, buf, counts=self.rx_counts)
        if err is not None:
            rx.drop(err)
        wall = time.time()
        for data, host, ttl, ts in buf:
            rx.packets += 1
            t = arrival_time(now, wall, ts)
            try:
                self._rx_one(rx, data, host, ttl, t)
            except Exception:  # a bug must not end the engine
                log.exception("bfd: internal error on a packet from %s", host)
                rx.drop("internal_error")
        self.rx_packets += len(buf)

    def _rx_one(self, rx: _RxSock, data: bytes, host: str, ttl: int, now: float) -> None:
        if ttl != 255:  # RFC 5881 §5 (GTSM); Linux IP_MINTTL does not filter UDP
            rx.drop("bad_ttl" if ttl >= 0 else "no_ttl")
            return
        # Steady state: the peer sends the same bytes every time. A packet equal to the last
        # one accepted for the session its Your Discriminator names reuses that decode.
        ent = self.by_discr.get(_U32.unpack_from(data, 8)[0]) if len(data) >= 24 else None
        cached = ent.rx_pkt if ent is not None and data == ent.rx_bytes else None
        if cached is not None:
            pkt = cached
        else:
            ent = None
            try:
                pkt = decode(data)
            except DecodeError as exc:
                rx.drop(exc.reason)
                return
        peer = self.norm.get(host)
        if peer is None:
            if len(self.norm) > 4096:
                self.norm.clear()
            peer = self.norm[host] = _norm_ip(host)
        your = pkt.your_discriminator
        if your:
            if ent is None:
                ent = self.by_discr.get(your)
                if ent is None:
                    rx.drop("unknown_discriminator")
                    return
            if ent.rx is not rx:
                ent.sess.drop("wrong_interface")
                return
            if ent.peer != peer:
                ent.sess.drop("wrong_peer")
                return
        else:
            ent = self.by_key.get((rx.ifname, peer))
            if ent is None:
                rx.drop("no_session")
                return
        ent.rx_bytes = data
        ent.rx_pkt = pkt
        effects = ent.sess.on_packet(pkt, now)
        if effects:
            self._apply(ent, effects, now)
        self._arm(ent)

    # ------------------------------------------------------------------ timers

    def _arm(self, ent: _Entry) -> None:
        d = ent.sess.next_deadline()
        if d is not None and (ent.armed is None or d < ent.armed):
            ent.gen += 1
            ent.armed = d
            heapq.heappush(self.heap, (d, next(self.seq), ent, ent.gen))

    def _run_timers(self, now: float) -> None:
        heap = self.heap
        pop = heapq.heappop
        while heap and heap[0][0] <= now:
            _, _, ent, gen = pop(heap)
            if ent is None:
                self._housekeeping(now)
                heapq.heappush(heap, (now + _HOUSEKEEPING_S, next(self.seq), None, 0))
                continue
            if gen != ent.gen or ent.removed:
                continue
            ent.armed = None
            sess = ent.sess
            d = sess.next_deadline()
            if d is None:
                continue
            if d > now:
                self._arm(ent)
                continue
            det = sess.detect_at
            if det is not None and det <= now:
                lag = now - det
                ent.detect_lag_max = max(ent.detect_lag_max, lag)
                self._lag(lag)
            ntx = sess.next_tx_at
            if ntx is not None and ntx <= now:
                lag = now - ntx
                ent.tx_lag_max = max(ent.tx_lag_max, lag)
                self._lag(lag)
            try:
                effects = sess.on_timer(now)
            except Exception:
                log.exception("bfd: internal error in the timer of %s", ent.key)
                effects = []
            if effects:
                self._apply(ent, effects, now)
            self._arm(ent)

    def _lag(self, lag: float) -> None:
        self.timers_fired += 1
        if lag > self.lag_max:
            self.lag_max = lag
        i = int(lag / _LAG_BUCKET_S)
        self.lag_hist[i if i < _LAG_BUCKETS else _LAG_BUCKETS - 1] += 1

    def _housekeeping(self, now: float) -> None:
        for ent in self.by_key.values():
            if ent.tx is None or ent.rx is None:
                self._open_sockets(ent)

    # ------------------------------------------------------------------ effects

    def _apply(self, ent: _Entry, effects: list[Effect], now: float) -> None:
        for e in effects:
            if type(e) is Transmit:
                tx = ent.tx
                if tx is None:
                    ent.sess.drop("tx_no_socket")
                    continue
                try:
                    tx.send(e.data)
                except OSError as exc:
                    ent.sess.drop("tx_" + errno.errorcode.get(exc.errno or 0, "error").lower())
                    if exc.errno in (errno.ENODEV, errno.ENXIO):  # interface gone: reopen later
                        self._release_sockets(ent, stale=True)
                        ent.socket_error = exc.strerror or "interface gone"
            elif isinstance(e, StateChange):
                s = ent.sess
                # the failover goes to the kernel first: the event and the log line can wait
                sent = bool(e.failure and ent.failover) and self._fo_send(ent)
                # a plain tuple (see BfdEvent.from_wire): cheap to pickle across the process
                wire: _EventWire = (
                    ent.key[0],
                    ent.peer,
                    int(e.old),
                    int(e.new),
                    int(e.diag),
                    e.reason,
                    e.failure,
                    s.remote_cpi,
                    s.remote_diag,
                    s.local_discr,
                    now,
                    s.last_rx,
                    sent,
                )
                if log.isEnabledFor(logging.INFO):
                    log.info(
                        "bfd %s %s: %s -> %s (%s)",
                        ent.key[0],
                        ent.peer,
                        e.old.name,
                        e.new.name,
                        e.reason,
                    )
                try:
                    self.emit(wire)
                except Exception:
                    log.exception("bfd: the event callback raised")

    # ------------------------------------------------------------------ failover

    def _fo_send(self, ent: _Entry) -> bool:
        fo = self.fo
        if fo is None:
            return False
        try:
            fo.send(ent.failover)
        except OSError as exc:
            self.fo_stats["send_errors"] += 1
            self.fo_last_error = f"send for {ent.peer} on {ent.key[0]}: {exc}"
            log.warning("bfd: failover %s", self.fo_last_error)
            return False
        self.fo_stats["sent"] += 1
        ent.failovers += 1
        return True

    def _fo_answers(self) -> None:
        if self.fo is None:
            return
        acks, bad = self.fo.drain()
        self.fo_stats["unreadable"] += bad
        for a in acks:
            if a.ok:
                self.fo_stats["acks_ok"] += 1
            else:
                self.fo_stats["refused"] += 1
                self.fo_last_error = "kernel refused " + a.describe()
                log.warning("bfd: failover request refused: %s", a.describe())

    # ------------------------------------------------------------------ sockets

    def _open_sockets(self, ent: _Entry) -> None:
        ifname = ent.key[0]
        try:
            if ent.rx is None:
                rkey = (ifname, ent.family)
                rx = self.rx_by_key.get(rkey)
                if rx is None:
                    sock = open_rx_socket(ifname, ent.family)
                    rx = _RxSock(sock, ifname, ent.family, self.unmatched_drops)
                    self.rx_by_key[rkey] = rx
                    self.rx_by_fd[rx.sock.fileno()] = rx
                    self.ep.register(rx.sock.fileno(), select.EPOLLIN)
                rx.refs += 1
                ent.rx = rx
            if ent.tx is None:
                ent.dst = peer_sockaddr(ent.peer, ifname)
                tx, port = open_tx_socket(
                    ifname, ent.family, ent.cfg.local, self.used_ports, self.rng
                )
                try:  # connected: no address parsing or route lookup per packet
                    tx.connect(ent.dst)
                except OSError:
                    tx.close()
                    self.used_ports.discard(port)
                    raise
                ent.tx, ent.port = tx, port
            ent.socket_error = ""
        except OSError as exc:
            msg = f"{exc.strerror or exc}"
            if msg != ent.socket_error:
                log.warning("bfd %s %s: socket: %s (retrying)", ifname, ent.peer, msg)
            ent.socket_error = msg

    def _release_sockets(self, ent: _Entry, stale: bool = False) -> None:
        """Close the session's transmit socket and drop its reference to the receive socket.
        ``stale``: the interface went away, so no new session may attach to that receive
        socket; housekeeping opens fresh ones once the interface is back."""
        if ent.tx is not None:
            ent.tx.close()
            ent.tx = None
            self.used_ports.discard(ent.port)
        rx = ent.rx
        if rx is None:
            return
        ent.rx = None
        rx.refs -= 1
        rkey = (rx.ifname, rx.family)
        if stale and self.rx_by_key.get(rkey) is rx:
            del self.rx_by_key[rkey]
        if rx.refs <= 0:
            fd = rx.sock.fileno()
            with contextlib.suppress(OSError, ValueError):
                self.ep.unregister(fd)
            self.rx_by_fd.pop(fd, None)
            if self.rx_by_key.get(rkey) is rx:
                del self.rx_by_key[rkey]
            rx.sock.close()

    def _close_entry(self, ent: _Entry) -> None:
        ent.removed = True
        self._release_sockets(ent)
        self.by_key.pop(ent.key, None)
        self.by_discr.pop(ent.sess.local_discr, None)

    # ------------------------------------------------------------------ control

    def _get(self, interface: str, peer: str) -> _Entry:
        ent = self.by_key.get((interface, _norm_ip(peer)))
        if ent is None:
            raise EngineError(f"no BFD session for {peer} on {interface}")
        return ent

    def add(self, cfg: SessionConfig) -> int:
        key = cfg.key
        if key in self.by_key:
            raise EngineError(f"BFD session for {key[1]} on {key[0]} exists")
        now = self.clock()
        while True:
            discr = self.rng.randrange(1, 2**32)
            if discr not in self.by_discr:
                break
        ent = _Entry(cfg, Session(discr, cfg.params, self.rng, now))
        self.by_key[key] = ent
        self.by_discr[discr] = ent
        self._open_sockets(ent)
        self._arm(ent)
        return discr

    def update(self, cfg: SessionConfig) -> None:
        ent = self._get(cfg.interface, cfg.peer)
        if cfg.local != ent.cfg.local:
            self.remove(cfg.interface, cfg.peer)
            self.add(cfg)
            return
        ent.cfg = cfg
        now = self.clock()
        self._apply(ent, ent.sess.update(cfg.params, now), now)
        self._arm(ent)

    def remove(self, interface: str, peer: str) -> None:
        ent = self._get(interface, peer)
        now = self.clock()
        # one AdminDown packet so the peer does not count a failure (§6.8.16); no event
        tx = [e for e in ent.sess.admin_down(now) if isinstance(e, Transmit)]
        self._apply(ent, list(tx), now)
        self._close_entry(ent)

    def failover(self, interface: str, peer: str, data: bytes) -> int:
        """Arm (or with ``b""`` disarm) the session's failover requests; returns how many."""
        ent = self._get(interface, peer)
        try:
            reqs = _fo.split_requests(data)
        except _fo.DecodeError as exc:
            raise EngineError(f"bad failover requests for {peer} on {interface}: {exc}") from None
        if reqs and self.fo is None:
            try:
                self.fo = _fo.FailoverSocket()
            except OSError as exc:
                raise EngineError(f"cannot open the failover netlink socket: {exc}") from None
            self.fo_fd = self.fo.fileno()
            self.ep.register(self.fo_fd, select.EPOLLIN)
        ent.failover = bytes(data) if reqs else b""
        ent.failover_requests = len(reqs)
        return len(reqs)

    def admin(self, interface: str, peer: str, down: bool) -> None:
        ent = self._get(interface, peer)
        now = self.clock()
        effects = ent.sess.admin_down(now) if down else ent.sess.admin_up(now)
        self._apply(ent, effects, now)
        self._arm(ent)

    def snapshot(self) -> dict[str, Any]:
        now = self.clock()
        sessions = []
        for ent in self.by_key.values():
            d: dict[str, Any] = {
                "interface": ent.key[0],
                "peer": ent.peer,
                "local": ent.cfg.local,
                "source_port": ent.port,
            }
            d.update(ent.sess.snapshot(now))
            d["tx_lag_max_ms"] = ent.tx_lag_max * 1e3
            d["detect_lag_max_ms"] = ent.detect_lag_max * 1e3
            d["socket_error"] = ent.socket_error
            d["failover_requests"] = ent.failover_requests
            d["failovers"] = ent.failovers
            sessions.append(d)
        session_drops: dict[str, int] = {}
        for d in sessions:
            for reason, n in d["drops"].items():
                session_drops[reason] = session_drops.get(reason, 0) + n
        sockets = [
            {
                "interface": rx.ifname,
                "family": "ipv6" if rx.family == socket.AF_INET6 else "ipv4",
                "packets_in": rx.packets,
                "sessions": rx.refs,
                "drops": dict(rx.drops),
            }
            for rx in self.rx_by_key.values()
        ]
        return {
            "engine": {
                "pid": os.getpid(),
                "uptime_s": now - self.started,
                "sessions": len(self.by_key),
                "packets_in": self.rx_packets,
                "loop_iterations": self.iterations,
                "timers_fired": self.timers_fired,
                "timer_lag_max_ms": self.lag_max * 1e3,
                "timer_lag_p50_ms": self._pct(0.50),
                "timer_lag_p99_ms": self._pct(0.99),
                "timer_lag_p999_ms": self._pct(0.999),
                "timers_late_1ms": sum(self.lag_hist[10:]),
                "timers_late_5ms": sum(self.lag_hist[50:]),
                "failover": dict(self.fo_stats, last_error=self.fo_last_error),
            },
            "sockets": sockets,
            "sessions": sessions,
            # what `glbctl counters` shows for BFD
            "counters": {
                "packets_in": self.rx_packets,
                "unmatched_drops": dict(self.unmatched_drops),
                "session_drops": session_drops,
                "truncated_datagrams": self.rx_counts.get("truncated_datagram", 0),
            },
        }

    def reset_lag(self) -> None:
        """Forget the lag statistics (benchmarks call this after the warm-up)."""
        self.lag_hist = [0] * _LAG_BUCKETS
        self.lag_max = 0.0
        self.timers_fired = 0
        for ent in self.by_key.values():
            ent.tx_lag_max = ent.detect_lag_max = 0.0

    def _pct(self, q: float) -> float:
        total = sum(self.lag_hist)
        if not total:
            return 0.0
        want = q * total
        acc = 0
        for i, n in enumerate(self.lag_hist):
            acc += n
            if acc >= want:
                return (i + 1) * _LAG_BUCKET_S * 1e3  # upper edge of the bucket
        return self.lag_max * 1e3

    def call(self, op: str, args: tuple[Any, ...]) -> Any:
        if op not in _OPS:
            raise EngineError(f"unknown engine operation {op!r}")
        return getattr(self, op)(*args)


_OPS = frozenset({"add", "update", "remove", "admin", "failover", "snapshot", "reset_lag"})


# =============================================================================== helpers


def _enter_netns(name: str) -> None:
    """Move the calling thread into /run/netns/NAME (sockets it creates stay there)."""
    path = name if name.startswith("/") else f"/run/netns/{name}"
    fd = os.open(path, os.O_RDONLY)
    try:
        if hasattr(os, "setns"):  # Python 3.12+
            os.setns(fd, _CLONE_NEWNET)
            return
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"setns {path}: {os.strerror(e)}")
    finally:
        os.close(fd)


def _raise_nofile() -> None:
    """One socket per session: lift the soft fd limit to the hard one (1024 by default)."""
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = hard if hard != resource.RLIM_INFINITY else 1 << 20
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def _set_rt(priority: int | None) -> None:
    if not priority:
        return
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except OSError as exc:
        log.warning("bfd: SCHED_FIFO %d not available: %s", priority, exc)


# =============================================================================== public API


class BfdEngine:
    """The engine and its thread-safe control API (see the module docstring).

    ``on_event`` receives every :class:`BfdEvent` (from a non-asyncio thread).
    ``mode``: "process" (default, isolated) or "thread". ``netns``: a name under /run/netns (or a
    path) the engine's sockets live in. ``rt_priority``: run the engine SCHED_FIFO at this
    priority (root). ``seed``: make discriminators, ports and jitter reproducible.
    ``on_exit``: called (from the reader thread) if the engine process dies unexpectedly.
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
        self._lock = threading.Lock()
        self._running = False
        self._stopping = False
        # thread mode
        self._thread: threading.Thread | None = None
        self._q: queue.SimpleQueue[tuple[str, tuple[Any, ...], Future[Any]] | None] = (
            queue.SimpleQueue()
        )
        self._efd = -1
        # process mode
        self._proc: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self._reader: threading.Thread | None = None
        self._pending: dict[int, Future[Any]] = {}
        self._ids = itertools.count(1)

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
        if self.mode == "thread":
            self._q.put(None)
            os.eventfd_write(self._efd, 1)
            if self._thread is not None:
                self._thread.join(timeout)
            os.close(self._efd)
            self._efd = -1
        else:
            assert self._proc is not None and self._conn is not None
            with contextlib.suppress(OSError, ValueError):
                self._conn.send(("stop",))
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout)
            with contextlib.suppress(OSError):
                self._conn.close()
            if self._reader is not None:
                self._reader.join(timeout)

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

    def snapshot(self) -> dict[str, Any]:
        """``{"engine": {...}, "sockets": [...], "sessions": [...], "counters": {...}}``,
        JSON-safe. ``counters`` has the engine-wide ``unmatched_drops`` (before any session,
        by reason), the per-reason sum of the sessions' drops and ``truncated_datagrams``."""
        result: dict[str, Any] = self._call("snapshot", ())
        result["engine"]["mode"] = self.mode
        return result

    def reset_lag_stats(self) -> None:
        self._call("reset_lag", ())

    def _call(self, op: str, args: tuple[Any, ...]) -> Any:
        if not self._running:
            raise EngineError("the BFD engine is not running")
        fut: Future[Any] = Future()
        if self.mode == "thread":
            self._q.put((op, args, fut))
            os.eventfd_write(self._efd, 1)
        else:
            assert self._conn is not None
            with self._lock:
                rid = next(self._ids)
                self._pending[rid] = fut
                try:
                    self._conn.send(("call", rid, op, args))
                except (OSError, ValueError) as exc:
                    self._pending.pop(rid, None)
                    raise EngineError(f"the BFD engine is gone: {exc}") from exc
        try:
            return fut.result(self._timeout)
        except TimeoutError as exc:
            raise EngineError(f"the BFD engine did not answer {op} in {self._timeout}s") from exc

    # ------------------------------------------------------------------ thread mode

    def _start_thread(self) -> None:
        self._efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        ready: Future[None] = Future()
        self._thread = threading.Thread(
            target=self._thread_main, args=(ready,), name="bfd-engine", daemon=True
        )
        self._thread.start()
        ready.result(self._timeout)

    def _thread_main(self, ready: Future[None]) -> None:
        try:
            if self.netns:
                _enter_netns(self.netns)
            _set_rt(self.rt_priority)
            _raise_nofile()
            rng = random.Random(self.seed)
            on_event = self._on_event
            loop = _Loop(lambda w: on_event(BfdEvent.from_wire(w)), rng=rng)
        except BaseException as exc:
            ready.set_exception(exc)
            return
        ready.set_result(None)
        efd, q = self._efd, self._q

        def on_ctl(mask: int) -> bool:
            with contextlib.suppress(BlockingIOError):
                os.eventfd_read(efd)
            while True:
                try:
                    item = q.get_nowait()
                except queue.Empty:
                    return True
                if item is None:
                    return False
                op, args, fut = item
                try:
                    fut.set_result(loop.call(op, args))
                except Exception as exc:
                    fut.set_exception(exc)

        loop.run(efd, on_ctl)

    # ------------------------------------------------------------------ process mode

    def _start_process(self) -> None:
        parent, child = socket.socketpair()
        pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ)
        env["PYTHONPATH"] = pkg_root + (
            os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
        )
        argv = [sys.executable, "-m", "bfd.engine", "--fd", str(child.fileno())]
        if self.netns:
            argv += ["--netns", self.netns]
        if self.rt_priority:
            argv += ["--rt-priority", str(self.rt_priority)]
        if self.seed is not None:
            argv += ["--seed", str(self.seed)]
        try:
            self._proc = subprocess.Popen(argv, pass_fds=(child.fileno(),), env=env)
        finally:
            child.close()
        self._conn = Connection(parent.detach())
        self._reader = threading.Thread(target=self._reader_main, name="bfd-events", daemon=True)
        self._reader.start()

    def _reader_main(self) -> None:
        conn = self._conn
        assert conn is not None
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                break
            except Exception:
                log.exception("bfd: bad message from the engine")
                continue
            kind = msg[0]
            if kind == "events":
                try:
                    for w in msg[1]:
                        self._on_event(BfdEvent.from_wire(w))
                except Exception:
                    log.exception("bfd: the event callback raised")
            elif kind == "reply":
                _, rid, ok, value = msg
                with self._lock:
                    fut = self._pending.pop(rid, None)
                if fut is not None:
                    if ok:
                        fut.set_result(value)
                    else:
                        fut.set_exception(value)
        with self._lock:
            pending, self._pending = self._pending, {}
        for fut in pending.values():
            fut.set_exception(EngineError("the BFD engine exited"))
        if not self._stopping:
            self._running = False
            rc = self._proc.poll() if self._proc is not None else None
            log.error("bfd: the engine process exited (rc %s)", rc)
            if self._on_exit is not None:
                self._on_exit(rc)


def _child_main(argv: list[str] | None = None) -> int:
    """Entry point of the engine process: ``python -m bfd.engine --fd N [...]``."""
    ap = argparse.ArgumentParser(prog="bfd.engine", description="glbd BFD engine process")
    ap.add_argument("--fd", type=int, required=True)
    ap.add_argument("--netns")
    ap.add_argument("--rt-priority", type=int)
    ap.add_argument("--seed", type=int)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="bfd-engine: %(levelname)s %(message)s")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the daemon's to handle
    with contextlib.suppress(Exception):  # die with the daemon
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, 15)
    chan = _Channel(socket.socket(fileno=args.fd))
    if args.netns:
        _enter_netns(args.netns)
    _set_rt(args.rt_priority)
    _raise_nofile()
    loop = _Loop(chan.send_event, rng=random.Random(args.seed))
    loop.after = chan.flush_events  # one message per loop iteration, however many events
    chan.ep = loop.ep

    def on_ctl(mask: int) -> bool:
        if mask & select.EPOLLOUT:
            chan.flush()
        if not mask & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR):
            return True
        for msg in chan.receive():
            if msg is None or msg[0] == "stop":
                return False
            _, rid, op, cargs = msg
            try:
                result = ("reply", rid, True, loop.call(op, cargs))
            except Exception as exc:
                result = ("reply", rid, False, exc)
            chan.flush_events()  # what the call caused goes out before its reply
            chan.send(result)
        return not chan.closed

    gc.freeze()
    loop.run(chan.fd, on_ctl)
    return 0


class _Channel:
    """The engine process's end of the control socket: non-blocking both ways, so a daemon
    that is slow to read events can never stall the BFD loop (events queue up here instead).
    Frames are those of ``multiprocessing.connection.Connection`` (4-byte big-endian length,
    pickle), which the daemon's side uses."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        sock.setblocking(False)
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        self.inbuf = bytearray()
        self.outbuf = bytearray()
        self.ep: select.epoll | None = None
        self.want_out = False
        self.closed = False
        self.events: list[_EventWire] = []

    def send_event(self, wire: _EventWire) -> None:
        """Queue one event; :meth:`flush_events` sends the queue as one message."""
        self.events.append(wire)

    def flush_events(self) -> None:
        if self.events:
            batch, self.events = self.events, []
            self.send(("events", batch))

    def send(self, msg: Any) -> None:
        try:
            data = pickle.dumps(msg, pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # e.g. an exception that cannot be pickled
            data = pickle.dumps(("reply", msg[1], False, EngineError(str(exc))))
        self.outbuf += _LEN.pack(len(data)) + data
        self.flush()

    def flush(self) -> None:
        while self.outbuf:
            try:
                n = self.sock.send(self.outbuf)
            except BlockingIOError:
                break
            except OSError:
                self.outbuf.clear()
                self.closed = True
                break
            del self.outbuf[:n]
        want = bool(self.outbuf)
        if want != self.want_out and self.ep is not None and not self.closed:
            self.want_out = want
            self.ep.modify(self.fd, select.EPOLLIN | (select.EPOLLOUT if want else 0))

    def receive(self) -> list[Any]:
        """Complete messages read so far; a final ``None`` means the daemon hung up."""
        hung_up = False
        while True:
            try:
                chunk = self.sock.recv(1 << 16)
            except BlockingIOError:
                break
            except OSError:
                chunk = b""
            if not chunk:
                hung_up = self.closed = True
                break
            self.inbuf += chunk
        out: list[Any] = []
        while len(self.inbuf) >= 4:
            (size,) = _LEN.unpack_from(self.inbuf)
            if len(self.inbuf) < 4 + size:
                break
            out.append(pickle.loads(bytes(self.inbuf[4 : 4 + size])))
            del self.inbuf[: 4 + size]
        if hung_up:
            out.append(None)
        return out


_LEN = struct.Struct("!i")


if __name__ == "__main__":
    # run the copy imported as bfd.engine, so pickled classes are bfd.engine.X, not __main__.X
    from bfd.engine import _child_main as _main

    sys.exit(_main())
