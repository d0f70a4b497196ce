"""The engine loop: every session, their sockets and one timer heap, on one thread.

A plain ``select.epoll`` loop with one ``heapq`` of deadlines for all sessions and the
once-a-second housekeeping (no asyncio: no per-packet callbacks, handles or futures). The heap
is lazy: a session pushes a deadline only when its next one moved earlier, and an item whose
generation is not the session's current one is skipped when popped.

Hot path per received packet: ``recvmsg`` (batched until EAGAIN), TTL check, dict lookup by
Your Discriminator, :func:`decode` unless the bytes equal the session's last accepted packet
(the steady state), :meth:`Session.on_packet`, and at most one ``heappush``. Periodic
transmissions reuse the session's cached packet bytes.

Demultiplexing (RFC 5880 §6.8.6, RFC 5881 §3): by Your Discriminator; when it is 0 (only legal
in Down/AdminDown, checked by the codec) by (interface, source address). Drops are counted by
name, per receive socket (before a session is known) and per session (after).

A failed session's armed failover requests go to the kernel before its event is emitted (see
:mod:`bfd.failover`). Every method runs on the loop's own thread; :meth:`Loop.call` is the one
entry for control operations.
"""

from __future__ import annotations

import errno
import heapq
import itertools
import logging
import os
import random
import select
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

from ..packet import DecodeError, State, decode
from ..reasons import DropReason
from ..session import Effect, Session, StateChange, Transmit
from ..transport import RX_BUFSIZE, RX_CMSG_SPACE, SO_TIMESTAMPNS, parse_ancillary
from .kernel_rx import KernelRx, KernelRxError, open_kernel_rx
from .model import (
    RX_STAMP_MAX_AGE,
    EngineError,
    EventWire,
    SessionConfig,
    arrival_time,
    norm_ip,
)
from .sockets import Entry, FailoverPort, RxSock, SocketTable

__all__ = ["RX_COALESCE_S", "LagStats", "Loop"]

log = logging.getLogger(__name__)

#: sockets that could not be opened are retried this often
_HOUSEKEEPING_S = 1.0
#: the furthest ahead a wakeup looks for periodic packets that may leave early
#: (Session.tx_early: 5 % of a 50 ms interval)
_TX_EARLY_MAX_S = 0.0025
_LAG_BUCKET_S = 0.0001  # 0.1 ms
_LAG_BUCKETS = 1001  # the last one is ">= 100 ms"
_U32 = struct.Struct("!I")
#: the shortest time between two reads of the receive sockets while datagrams keep coming
RX_COALESCE_S = 0.0005
#: datagrams read from one receive socket per wakeup at most (then timers get their turn)
_RX_BATCH = 256
#: datagrams read at most before a detection timeout (more than a 4 MB buffer holds)
_RX_DRAIN_MAX = 8192
_TIMESPEC = struct.Struct("@ll")
_MSG_TRUNC = int(socket.MSG_TRUNC)  # an IntFlag: & on it would run Python code
#: (deadline, tie-breaker, session or None for housekeeping, the session's generation)
_HeapItem = tuple[float, int, "Entry | None", int]
_OPS = frozenset({"add", "update", "remove", "admin", "failover", "snapshot", "reset_lag"})


class LagStats:
    """How late timers fired (0.1 ms buckets up to 100 ms), for the snapshot and benchmarks."""

    def __init__(self) -> None:
        self.hist = [0] * _LAG_BUCKETS
        self.max = 0.0

    @property
    def fired(self) -> int:
        return sum(self.hist)

    def record(self, lag: float) -> None:
        if lag > self.max:
            self.max = lag
        i = int(lag / _LAG_BUCKET_S)
        self.hist[i if i < _LAG_BUCKETS else _LAG_BUCKETS - 1] += 1

    def pct_ms(self, q: float) -> float:
        """The ``q`` quantile in ms (upper edge of its bucket)."""
        total = sum(self.hist)
        if not total:
            return 0.0
        want = q * total
        acc = 0
        for i, n in enumerate(self.hist):
            acc += n
            if acc >= want:
                return (i + 1) * _LAG_BUCKET_S * 1e3
        return self.max * 1e3

    def snapshot(self) -> dict[str, Any]:
        return {
            "timers_fired": self.fired,
            "timer_lag_max_ms": self.max * 1e3,
            "timer_lag_p50_ms": self.pct_ms(0.50),
            "timer_lag_p99_ms": self.pct_ms(0.99),
            "timer_lag_p999_ms": self.pct_ms(0.999),
            "timers_late_1ms": sum(self.hist[10:]),
            "timers_late_5ms": sum(self.hist[50:]),
        }


class Loop:
    """Sessions, sockets, timers. Every method runs on the loop's own thread."""

    def __init__(
        self,
        emit: Callable[[EventWire], None],
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        rx_coalesce: float = RX_COALESCE_S,
        sleep: Callable[[float], None] = time.sleep,
        kernel_rx: bool = False,
    ) -> None:
        self.emit = emit
        #: after a wakeup that read datagrams, the next read waits until this long after it
        self.rx_coalesce = rx_coalesce
        self.sleep = sleep
        #: called at the end of every loop iteration (the engine process flushes events)
        self.after: Callable[[], None] | None = None
        self.clock = clock
        self.rng = rng or random.Random()
        self.ep = select.epoll()
        self.heap: list[_HeapItem] = []
        self.seq = itertools.count()
        self.by_key: dict[tuple[str, str], Entry] = {}
        self.by_discr: dict[int, Entry] = {}
        #: the steady-state receive path in the kernel (:mod:`.kernel_rx`; it stamps with
        #: CLOCK_MONOTONIC, so only with the real clock) and why it is off
        self.krx: KernelRx | None = None
        self.krx_why = "off" if not kernel_rx else ""
        if kernel_rx:
            self.krx, self.krx_why = open_kernel_rx()
            if self.krx is None:
                log.warning("bfd: kernel receive path unavailable: %s", self.krx_why)
        #: packets the kernel path took (counted in packets_in too)
        self.kernel_packets = 0
        self.sockets = SocketTable(self.ep, self.rng, self.krx)
        self.fo = FailoverPort(self.ep)
        #: source address as read -> normalised form (bounded: cleared past 4096 entries)
        self.norm: dict[str, str] = {}
        self.lag = LagStats()
        self.rx_packets = 0
        #: receive-side notes that are not drops (``truncated_datagram``: processed, counted)
        self.rx_counts: dict[str, int] = {}
        self.iterations = 0
        self.started = clock()
        self._push(self.started + _HOUSEKEEPING_S, None)

    # ------------------------------------------------------------------ run

    def run(self, ctl_fd: int, on_ctl: Callable[[int], bool]) -> None:
        """Serve until ``on_ctl(epoll_events)``, called when ``ctl_fd`` is ready, returns
        False. ``ctl_fd`` is registered for EPOLLIN; its owner may ``modify`` that."""
        ep, heap, clock, sleep = self.ep, self.heap, self.clock, self.sleep
        ep.register(ctl_fd, select.EPOLLIN)
        rx_by_fd = self.sockets.by_fd
        woke = clock()
        read = 0
        try:
            while True:
                self.iterations += 1
                if read:
                    # Datagrams came in: let the next ones gather for a moment rather than
                    # waking for each (two engines at FIFO would otherwise trade one wakeup
                    # per packet). Detection counts from the kernel's arrival stamps, and
                    # timers due meanwhile fire together at most rx_coalesce late.
                    rest = woke + self.rx_coalesce - clock()
                    if rest > 0:
                        sleep(rest)
                timeout = max(0.0, heap[0][0] - clock()) if heap else 1.0
                try:
                    events = ep.poll(timeout, 128)
                except InterruptedError:
                    continue
                now = woke = clock()
                read = 0
                for fd, mask in events:
                    rx = rx_by_fd.get(fd)
                    if rx is not None:
                        read += self._read(rx, now)
                    elif fd == ctl_fd:
                        if not on_ctl(mask):
                            return
                    elif fd == self.fo.fd:
                        self.fo.answers()
                self._run_timers(clock())
                if self.after is not None:
                    self.after()
        finally:
            self.close()

    def close(self) -> None:
        for ent in list(self.by_key.values()):
            self._close_entry(ent)
        self.fo.close()
        self.ep.close()
        if self.krx is not None:
            self.krx.close()
            self.krx = None

    # ------------------------------------------------------------------ receive

    def _read(self, rx: RxSock, now: float, until: float | None = None) -> int:
        """Drain ``rx`` (up to ``_RX_BATCH`` datagrams; with ``until``, up to the first one
        that arrived after it). The steady state -- the bytes last accepted for the session
        their Your Discriminator names, from the same source and port, hop limit 255, the usual
        ancillary layout -- only restarts the session's detection timer
        (:meth:`Session.rx_repeat`); everything else takes the general path (:meth:`_rx_one`).
        Returns how many datagrams were read."""
        recvmsg = rx.sock.recvmsg
        by_discr = self.by_discr
        unpack = _U32.unpack_from
        ts_unpack = _TIMESPEC.unpack
        ttl255 = rx.ttl255
        wall = time.time()
        n = 0
        for _ in range(_RX_BATCH if until is None else _RX_DRAIN_MAX):
            try:
                data, anc, flags, addr = recvmsg(RX_BUFSIZE, RX_CMSG_SPACE)
            except BlockingIOError:
                break
            except InterruptedError:
                continue
            except OSError as exc:
                rx.drop(f"recv_{errno.errorcode.get(exc.errno or 0, 'error').lower()}")
                break
            n += 1
            host: str = addr[0]
            try:
                if flags:  # MSG_TRUNC (counted) or MSG_CTRUNC: the general path
                    if flags & _MSG_TRUNC:
                        self.rx_counts["truncated_datagram"] = (
                            self.rx_counts.get("truncated_datagram", 0) + 1
                        )
                elif len(anc) == 2 and anc[1] == ttl255 and len(data) >= 24:
                    # [arrival stamp, hop limit 255]: the socket asks for nothing else
                    ent = by_discr.get(unpack(data, 8)[0])
                    if (
                        ent is not None
                        and data == ent.rx_bytes
                        and host == ent.rx_host
                        and addr[1] == ent.rx_port
                        and ent.rx is rx
                    ):
                        _, kind, stamp = anc[0]
                        if kind == SO_TIMESTAMPNS and len(stamp) == _TIMESPEC.size:
                            sec, nsec = ts_unpack(stamp)
                            age = wall - (sec + nsec * 1e-9)  # as arrival_time
                            t = now - age if 0.0 < age < RX_STAMP_MAX_AGE else now
                            if ent.sess.rx_repeat(ent.rx_pkt, t):  # type: ignore[arg-type]
                                if until is not None and now - age > until:
                                    break
                                continue
                ttl, ts = parse_ancillary(anc)
                self._rx_one(rx, data, host, addr[1], ttl, arrival_time(now, wall, ts))
                # (the stamp as it is, however old: only what arrived after ``until`` stops)
                if until is not None and (now - (wall - ts) if ts else now) > until:
                    break
            except Exception:  # a bug must not end the engine
                log.exception("bfd: internal error on a packet from %s", addr)
                rx.drop(DropReason.INTERNAL_ERROR)
        rx.packets += n
        self.rx_packets += n
        return n

    def _rx_one(
        self, rx: RxSock, data: bytes, raw_host: str, port: int, ttl: int, now: float
    ) -> None:
        """One datagram, the general path: ``raw_host`` is its source as read (a link-local
        IPv6 source carries ``%scope``), ``port`` its source port."""
        host = raw_host.split("%", 1)[0] if "%" in raw_host else raw_host
        if ttl != 255:  # RFC 5881 §5 (GTSM); Linux IP_MINTTL does not filter UDP
            rx.drop(DropReason.BAD_TTL if ttl >= 0 else DropReason.NO_TTL)
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
            peer = self.norm[host] = norm_ip(host)
        your = pkt.your_discriminator
        if your:
            if ent is None:
                ent = self.by_discr.get(your)
                if ent is None:
                    rx.drop(DropReason.UNKNOWN_DISCRIMINATOR)
                    return
            if ent.rx is not rx:
                ent.sess.drop(DropReason.WRONG_INTERFACE)
                return
            if ent.peer != peer:
                ent.sess.drop(DropReason.WRONG_PEER)
                return
        else:
            ent = self.by_key.get((rx.ifname, peer))
            if ent is None:
                rx.drop(DropReason.NO_SESSION)
                return
        sess = ent.sess
        if (
            port != ent.rx_port
            and sess.state == State.UP
            and pkt.my_discriminator == sess.remote_discr
        ):
            # RFC 5881 §4: one source port per session. Only while Up and from the same remote
            # session: a peer that restarts (a new discriminator) or one we lost is heard.
            sess.drop(DropReason.WRONG_SOURCE_PORT)
            return
        if ent.slot is not None:
            self._ksync(ent, now)
        ent.rx_bytes = data
        ent.rx_pkt = pkt
        ent.rx_host = raw_host
        ent.rx_port = port
        effects = ent.sess.on_packet(pkt, now)
        if effects:
            self._apply(ent, effects, now)
        self._arm(ent)
        if ent.slot is not None:
            self._kexpect(ent)

    # ------------------------------------------------------------------ kernel path

    def _kexpect(self, ent: Entry) -> None:
        """Tell the kernel path which packet of the session it may take: the one last
        accepted while the session takes its repeats (:attr:`Session.repeat_of`), else none."""
        krx, slot, rx, want = self.krx, ent.slot, ent.rx, ent.sess.repeat_of
        if krx is None or slot is None:
            return
        if want is None or want is not ent.rx_pkt or rx is None or not rx.kernel:
            if ent.kx is not None:
                krx.clear(slot)
                ent.kx = None
            return
        kx = ent.kx
        if kx is not None and kx[0] is want and kx[1:] == (rx.kernel, ent.rx_port, ent.local_ip):
            return  # the kernel has it already
        if not ent.local_ip:  # no transmit socket yet: no address to match
            krx.clear(slot)
            ent.kx = None
            return
        host = ent.rx_host.split("%", 1)[0]
        krx.expect(slot, rx.kernel, ent.family, host, ent.rx_port, ent.local_ip, ent.rx_bytes)
        ent.kx = (want, rx.kernel, ent.rx_port, ent.local_ip)

    def _ksync(self, ent: Entry, now: float) -> None:
        """Apply what the kernel path took for the session since the last look: the repeats
        of its last accepted packet, the latest at the kernel's stamp."""
        slot, krx = ent.slot, self.krx
        if slot is None or krx is None:
            return
        i = slot.index * 12
        count = krx.words[i + 1]
        n = count - slot.count
        if not n:
            return
        slot.count = count
        t = krx.words[i] * 1e-9
        if t > now:
            t = now
        self.kernel_packets += n
        self.rx_packets += n  # (a receive socket's packets_in counts what was read from it)
        pkt = ent.rx_pkt
        sess = ent.sess
        if pkt is None or sess.rx_repeat(pkt, t, n):
            return
        # no longer a plain repeat (the session moved on since): as if it had been read
        sess.packets_in += n - 1
        effects = sess.on_packet(pkt, t)
        if effects:
            self._apply(ent, effects, t)
        self._kexpect(ent)

    # ------------------------------------------------------------------ timers

    def _push(self, when: float, ent: Entry | None) -> None:
        heapq.heappush(self.heap, (when, next(self.seq), ent, ent.gen if ent else 0))

    def _arm(self, ent: Entry) -> None:
        """Push the session's next deadline if it is earlier than the one already pushed."""
        d = ent.sess.next_deadline()
        if d is not None and (ent.armed is None or d < ent.armed):
            ent.gen += 1
            ent.armed = d
            self._push(d, ent)

    def _run_timers(self, now: float) -> None:
        """Fire every deadline that is due. The steady state -- a periodic packet equal to the
        previous one (:meth:`Session.tx_periodic`) -- is sent here; the rest goes through
        :meth:`_fire`."""
        heap = self.heap
        pop = heapq.heappop
        push = heapq.heappush
        seq = self.seq
        lag = self.lag
        hist = lag.hist
        #: sessions whose detection time expired: decided after every transmission is out
        expired: list[Entry] = []
        #: deadlines popped early that may not go early: pushed back after the loop
        later: list[tuple[float, int, Entry | None, int]] = []
        horizon = now + _TX_EARLY_MAX_S
        while heap and heap[0][0] <= horizon:
            item = pop(heap)
            d, _, ent, gen = item
            if d > now:
                # Not due yet: only a steady-state packet within its session's early margin
                # leaves now, sharing this wakeup; everything else keeps its deadline.
                if ent is not None and gen == ent.gen and not ent.removed:
                    if ent.tx is not None and d - now <= ent.sess.tx_early:
                        if ent.slot is not None:
                            self._ksync(ent, now)
                        data = ent.sess.tx_periodic(d)
                        if data is not None:
                            try:
                                ent.tx.send(data)
                            except OSError as exc:
                                self._tx_failed(ent, exc)
                            d = ent.sess.tx_deadline
                            ent.gen += 1
                            ent.armed = d
                            push(heap, (d, next(seq), ent, ent.gen))
                            continue
                    later.append(item)
                elif ent is None:
                    later.append(item)
                continue
            if ent is None:
                self._housekeeping()
                self._push(now + _HOUSEKEEPING_S, None)
            elif gen == ent.gen and not ent.removed:
                ent.armed = None
                if ent.slot is not None:
                    self._ksync(ent, now)
                sess = ent.sess
                tx = ent.tx
                data = sess.tx_periodic(now) if tx is not None else None
                if data is None:
                    det = sess.detect_at
                    if det is not None and det <= now and ent.rx is not None:
                        expired.append(ent)
                    else:
                        self._fire(ent, now)
                    continue
                late = sess.tx_late
                if late > ent.tx_lag_max:
                    ent.tx_lag_max = late
                if late > lag.max:  # LagStats.record, inline
                    lag.max = late
                i = int(late / _LAG_BUCKET_S)
                hist[i if i < _LAG_BUCKETS else _LAG_BUCKETS - 1] += 1
                try:
                    tx.send(data)  # type: ignore[union-attr]
                except OSError as exc:
                    self._tx_failed(ent, exc)
                d = sess.tx_deadline
                ent.gen += 1
                ent.armed = d
                push(heap, (d, next(seq), ent, ent.gen))
        for item in later:
            push(heap, item)
        if expired:
            self._expire(expired, now)

    def _expire(self, expired: list[Entry], now: float) -> None:
        """Decide the sessions whose detection time expired in this wakeup. A wakeup reads at
        most _RX_BATCH datagrams: the peers' packets may still wait behind others. Read what
        arrived before the last of these deadlines (not what keeps arriving: a loop behind
        its traffic would never get out), then decide."""
        until: dict[RxSock, float] = {}
        for ent in expired:
            rx, det = ent.rx, ent.sess.detect_at
            if rx is not None and det is not None and det > until.get(rx, det - 1.0):
                until[rx] = det
        for rx, det in until.items():
            self._read(rx, self.clock(), until=det)
        for ent in expired:
            if not ent.removed:
                self._fire(ent, now, drained=True)

    def _fire(self, ent: Entry, now: float, drained: bool = False) -> None:
        """The session's due timers. ``drained``: its receive socket was just read up to its
        detection deadline (the batch of expiries did it), so that read is not repeated."""
        sess = ent.sess
        if ent.slot is not None:
            self._ksync(ent, now)
        d = sess.next_deadline()
        if d is None:
            return
        if d > now:
            self._arm(ent)
            return
        det = sess.detect_at
        if det is not None and det <= now and ent.rx is not None:
            # A wakeup reads at most _RX_BATCH datagrams: the peer's packet may still wait in
            # the socket behind others. Read what arrived before the deadline (not what keeps
            # arriving: a loop behind its traffic would never get out) before deciding.
            if not drained:
                self._read(ent.rx, self.clock(), until=det)
            while (
                (det2 := sess.detect_at) is not None
                and det < det2 <= now
                and ent.rx is not None
                and self._read(ent.rx, self.clock(), until=det2)
            ):
                det = det2
            d = sess.next_deadline()
            if d is None:
                return
            if d > now:
                self._arm(ent)
                return
            det = sess.detect_at
        if det is not None and det <= now:
            ent.detect_lag_max = max(ent.detect_lag_max, now - det)
            self.lag.record(now - det)
        ntx = sess.next_tx_at
        if ntx is not None and ntx <= now:
            ent.tx_lag_max = max(ent.tx_lag_max, now - ntx)
            self.lag.record(now - ntx)
        try:
            effects = sess.on_timer(now)
        except Exception:
            log.exception("bfd: internal error in the timer of %s", ent.key)
            effects = []
        if effects:
            self._apply(ent, effects, now)
        self._arm(ent)
        if ent.slot is not None:
            self._kexpect(ent)

    def _housekeeping(self) -> None:
        for ent in self.by_key.values():
            if ent.tx is None or ent.rx is None:
                self.sockets.open(ent)

    # ------------------------------------------------------------------ effects

    def _apply(self, ent: Entry, effects: list[Effect], now: float) -> None:
        for e in effects:
            if type(e) is Transmit:
                tx = ent.tx
                if tx is None:
                    ent.sess.drop(DropReason.TX_NO_SOCKET)
                    continue
                try:
                    tx.send(e.data)
                except OSError as exc:
                    self._tx_failed(ent, exc)
            elif isinstance(e, StateChange):
                self._state_change(ent, e, now)

    def _tx_failed(self, ent: Entry, exc: OSError) -> None:
        ent.sess.drop("tx_" + errno.errorcode.get(exc.errno or 0, "error").lower())
        if exc.errno in (errno.ENODEV, errno.ENXIO):  # interface gone: reopen later
            self.sockets.release(ent, stale=True)
            ent.socket_error = exc.strerror or "interface gone"

    def _state_change(self, ent: Entry, e: StateChange, now: float) -> None:
        s = ent.sess
        # the failover goes to the kernel first: the event and the log line can wait
        sent = bool(e.failure and ent.failover) and self.fo.send(ent)
        # a plain tuple (see BfdEvent.from_wire): cheap to pickle across the process
        wire: EventWire = (
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
                "bfd %s %s: %s -> %s (%s)", ent.key[0], ent.peer, e.old.name, e.new.name, e.reason
            )
        try:
            self.emit(wire)
        except Exception:
            log.exception("bfd: the event callback raised")

    # ------------------------------------------------------------------ control

    def call(self, op: str, args: tuple[Any, ...]) -> Any:
        """Run one control operation (one of ``_OPS``) and return its result."""
        if op not in _OPS:
            raise EngineError(f"unknown engine operation {op!r}")
        return getattr(self, op)(*args)

    def _get(self, interface: str, peer: str) -> Entry:
        ent = self.by_key.get((interface, norm_ip(peer)))
        if ent is None:
            raise EngineError(f"no BFD session for {peer} on {interface}")
        return ent

    def _close_entry(self, ent: Entry) -> None:
        ent.removed = True
        if ent.slot is not None and self.krx is not None:
            self.krx.release(ent.sess.local_discr, ent.slot)
            ent.slot = None
        self.sockets.release(ent)
        self.by_key.pop(ent.key, None)
        self.by_discr.pop(ent.sess.local_discr, None)

    def add(self, cfg: SessionConfig) -> int:
        key = cfg.key
        if key in self.by_key:
            raise EngineError(f"BFD session for {key[1]} on {key[0]} exists")
        now = self.clock()
        while True:
            discr = self.rng.randrange(1, 2**32)
            if discr not in self.by_discr:
                break
        ent = Entry(cfg, Session(discr, cfg.params, self.rng, now))
        self.by_key[key] = ent
        self.by_discr[discr] = ent
        if self.krx is not None:
            try:
                ent.slot = self.krx.claim(discr)
            except KernelRxError as exc:
                log.warning("bfd %s %s: kernel receive path: %s", key[0], key[1], exc.strerror)
        self.sockets.open(ent)
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
        if ent.slot is not None:
            self._kexpect(ent)

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
        reqs = self.fo.check(interface, peer, data)
        ent.failover = bytes(data) if reqs else b""
        ent.failover_requests = len(reqs)
        return len(reqs)

    def admin(self, interface: str, peer: str, down: bool) -> None:
        ent = self._get(interface, peer)
        now = self.clock()
        effects = ent.sess.admin_down(now) if down else ent.sess.admin_up(now)
        self._apply(ent, effects, now)
        self._arm(ent)
        if ent.slot is not None:
            self._kexpect(ent)

    def reset_lag(self) -> None:
        """Forget the lag statistics (benchmarks call this after the warm-up)."""
        self.lag = LagStats()
        for ent in self.by_key.values():
            ent.tx_lag_max = ent.detect_lag_max = 0.0

    def snapshot(self, sessions: bool = True) -> dict[str, Any]:
        now = self.clock()
        rows = [self._session_row(ent, now) for ent in self.by_key.values()] if sessions else []
        session_drops: dict[str, int] = {}
        for ent in self.by_key.values():
            for reason, n in ent.sess.drops.items():
                session_drops[reason] = session_drops.get(reason, 0) + n
        return {
            "engine": {
                "pid": os.getpid(),
                "uptime_s": now - self.started,
                "sessions": len(self.by_key),
                "packets_in": self.rx_packets,
                "loop_iterations": self.iterations,
                **self.lag.snapshot(),
                "failover": self.fo.snapshot(),
                "kernel_rx": {
                    "enabled": self.krx is not None,
                    "error": self.krx_why,
                    "interfaces": len(self.krx.links) if self.krx is not None else 0,
                    "interface_errors": dict(self.sockets.kernel_errors),
                    "packets": self.kernel_packets,
                },
            },
            "sockets": self.sockets.snapshot(),
            "sessions": rows,
            # what `glbctl counters` shows for BFD
            "counters": {
                "packets_in": self.rx_packets,
                "unmatched_drops": dict(self.sockets.unmatched_drops),
                "session_drops": session_drops,
                "truncated_datagrams": self.rx_counts.get("truncated_datagram", 0),
                "kernel_packets_in": self.kernel_packets,
            },
        }

    def _session_row(self, ent: Entry, now: float) -> dict[str, Any]:
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
        # the kernel takes this session's repeats now (bfd/engine/kernel_rx.py)
        d["kernel_rx"] = ent.kx is not None
        d["failover_requests"] = ent.failover_requests
        d["failovers"] = ent.failovers
        return d
