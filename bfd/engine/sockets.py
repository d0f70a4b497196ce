"""The loop's per-session record and the sockets it owns.

* :class:`RxSock`: one port-3784 receive socket per (interface, family), shared by the sessions
  on it, with the drops counted before any session matched.
* :class:`Entry`: one session, its connected transmit socket and its counters.
* :class:`SocketTable`: opens and releases both kinds (epoll registration included); a socket
  that cannot be opened yet is retried by the loop's housekeeping.
* :class:`FailoverPort`: the rtnetlink socket for armed failovers and its counters.

Everything here runs on the engine loop's thread.
"""

from __future__ import annotations

import contextlib
import logging
import random
import select
import socket
import struct
from typing import Any

from .. import failover as _fo
from ..packet import ControlPacket
from ..reasons import DropReason
from ..session import Session
from ..transport import open_rx_socket, open_tx_socket, peer_sockaddr
from .kernel_rx import KernelRx, Slot
from .model import EngineError, SessionConfig
from .wirefilter import fold, wire_only

__all__ = ["Entry", "FailoverPort", "RxSock", "SocketTable"]

log = logging.getLogger(__name__)

_TTL255 = struct.pack("=i", 255)


class RxSock:
    __slots__ = (
        "drops",
        "family",
        "ifname",
        "kernel",
        "packets",
        "refs",
        "sock",
        "totals",
        "ttl255",
    )

    def __init__(
        self,
        sock: socket.socket,
        ifname: str,
        family: int,
        totals: dict[DropReason | str, int] | None = None,
    ) -> None:
        self.sock = sock
        self.ifname = ifname
        self.family = family
        #: the ancillary item of a datagram that arrived with hop limit 255 (a native int)
        self.ttl255 = (
            (socket.IPPROTO_IPV6, socket.IPV6_HOPLIMIT, _TTL255)
            if family == socket.AF_INET6
            else (socket.IPPROTO_IP, socket.IP_TTL, _TTL255)
        )
        self.packets = 0
        self.refs = 0
        #: the interface's index if the kernel path runs on it (its repeats may never reach
        #: the socket), else 0
        self.kernel = 0
        self.drops: dict[DropReason | str, int] = {}
        #: the engine-wide counters of drops before any session, which outlive this socket
        self.totals = totals if totals is not None else {}

    def drop(self, reason: DropReason | str) -> None:
        self.drops[reason] = self.drops.get(reason, 0) + 1
        self.totals[reason] = self.totals.get(reason, 0) + 1


class Entry:
    """One session as the loop holds it: the core, its sockets, its place in the timer heap."""

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
        "kx",
        "local_ip",
        "peer",
        "port",
        "removed",
        "rx",
        "rx_bytes",
        "rx_host",
        "rx_pkt",
        "rx_port",
        "sess",
        "slot",
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
        self.rx: RxSock | None = None
        #: the last accepted packet, raw and decoded: the steady state skips the decode
        self.rx_bytes = b""
        self.rx_pkt: ControlPacket | None = None
        #: its source address exactly as read (with any ``%scope``) and port; the port is the
        #: one the session learned (while Up, another one is dropped: RFC 5881 §4)
        self.rx_host = ""
        self.rx_port = 0
        #: the session's slot in the kernel path (None: every packet is read) and what the
        #: kernel is told to take: (packet, interface index, source port, local address)
        self.slot: Slot | None = None
        self.kx: tuple[ControlPacket, int, int, str] | None = None
        self.tx: socket.socket | None = None
        #: the address the transmit socket sends from (no ``%scope``): the peer's packets are
        #: addressed to it ("" while there is no transmit socket)
        self.local_ip = ""
        self.port = 0
        self.dst: Any = None
        #: the deadline pushed on the heap for this session (None: none pending) and its
        #: generation: a heap item whose generation is not the current one is stale
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


class SocketTable:
    """Receive sockets shared per (interface, family) and each session's transmit socket."""

    def __init__(self, ep: select.epoll, rng: random.Random, krx: KernelRx | None = None) -> None:
        self.ep = ep
        self.rng = rng
        self.krx = krx
        #: interfaces the kernel path could not attach to, and why
        self.kernel_errors: dict[str, str] = {}
        self.by_fd: dict[int, RxSock] = {}
        self.by_key: dict[tuple[str, int], RxSock] = {}
        self.used_ports: set[int] = set()
        #: drops before any session matched (version, length, discriminator, TTL, ...), by
        #: reason, over every receive socket the engine ever had: no peer to attribute them to
        self.unmatched_drops: dict[DropReason | str, int] = {}

    def open(self, ent: Entry) -> None:
        """Give ``ent`` whatever socket it lacks; a failure is noted in ``socket_error``."""
        ifname = ent.key[0]
        try:
            if ent.rx is None:
                ent.rx = self._rx_for(ifname, ent.family)
                ent.rx.refs += 1
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
                ent.local_ip = str(tx.getsockname()[0]).split("%", 1)[0]
            ent.socket_error = ""
        except OSError as exc:
            msg = f"{exc.strerror or exc}"
            if msg != ent.socket_error:
                log.warning("bfd %s %s: socket: %s (retrying)", ifname, ent.peer, msg)
            ent.socket_error = msg

    def _rx_for(self, ifname: str, family: int) -> RxSock:
        rkey = (ifname, family)
        rx = self.by_key.get(rkey)
        if rx is None:
            sock = open_rx_socket(ifname, family)
            rx = RxSock(sock, ifname, family, self.unmatched_drops)
            wire_only(rx, ifname)  # a kernel filter: nothing a local process sends gets in
            if self.krx is not None:
                try:
                    rx.kernel = self.krx.attach(ifname)
                    self.kernel_errors.pop(ifname, None)
                except OSError as exc:  # KernelRxError too
                    why = f"{exc.strerror or exc}"
                    if self.kernel_errors.get(ifname) != why:
                        log.warning("bfd %s: kernel receive path: %s", ifname, why)
                    self.kernel_errors[ifname] = why
            self.by_key[rkey] = rx
            self.by_fd[sock.fileno()] = rx
            self.ep.register(sock.fileno(), select.EPOLLIN)
        return rx

    def release(self, ent: Entry, stale: bool = False) -> None:
        """Close the session's transmit socket and drop its reference to the receive socket.
        ``stale``: the interface went away, so no new session may attach to that receive
        socket; housekeeping opens fresh ones once the interface is back."""
        if ent.tx is not None:
            ent.tx.close()
            ent.tx = None
            ent.local_ip = ""
            self.used_ports.discard(ent.port)
        rx = ent.rx
        if rx is None:
            return
        ent.rx = None
        rx.refs -= 1
        rkey = (rx.ifname, rx.family)
        if stale and self.by_key.get(rkey) is rx:
            del self.by_key[rkey]
        if rx.refs <= 0:
            fd = rx.sock.fileno()
            with contextlib.suppress(OSError, ValueError):
                self.ep.unregister(fd)
            self.by_fd.pop(fd, None)
            if self.by_key.get(rkey) is rx:
                del self.by_key[rkey]
            if rx.kernel and self.krx is not None:
                self.krx.detach(rx.kernel)
                rx.kernel = 0
            fold(rx)  # the kernel filter's last drops
            rx.sock.close()

    def snapshot(self) -> list[dict[str, Any]]:
        for rx in self.by_fd.values():  # the kernel filter's drops, counted when read
            fold(rx)
        return [
            {
                "interface": rx.ifname,
                "family": "ipv6" if rx.family == socket.AF_INET6 else "ipv4",
                "packets_in": rx.packets,
                "sessions": rx.refs,
                "kernel_path": bool(rx.kernel),
                "drops": dict(rx.drops),
            }
            for rx in self.by_key.values()
        ]


class FailoverPort:
    """The rtnetlink socket for armed failovers (opened with the first armed session), the
    sends and the kernel's answers counted."""

    def __init__(self, ep: select.epoll) -> None:
        self.ep = ep
        self.sock: _fo.FailoverSocket | None = None
        #: the socket's fd while open (the loop dispatches on it), else -1
        self.fd = -1
        self.stats = {"sent": 0, "send_errors": 0, "acks_ok": 0, "refused": 0, "unreadable": 0}
        self.last_error = ""

    def check(self, interface: str, peer: str, data: bytes) -> list[bytes]:
        """The requests in ``data`` (framing checked); opens the socket for the first ones."""
        try:
            reqs = _fo.split_requests(data)
        except _fo.DecodeError as exc:
            raise EngineError(f"bad failover requests for {peer} on {interface}: {exc}") from None
        if reqs and self.sock is None:
            try:
                self.sock = _fo.FailoverSocket()
            except OSError as exc:
                raise EngineError(f"cannot open the failover netlink socket: {exc}") from None
            self.fd = self.sock.fileno()
            self.ep.register(self.fd, select.EPOLLIN)
        return reqs

    def send(self, ent: Entry) -> bool:
        """Send the session's armed requests in one datagram; True if the kernel took it."""
        if self.sock is None:
            return False
        try:
            self.sock.send(ent.failover)
        except OSError as exc:
            self.stats["send_errors"] += 1
            self.last_error = f"send for {ent.peer} on {ent.key[0]}: {exc}"
            log.warning("bfd: failover %s", self.last_error)
            return False
        self.stats["sent"] += 1
        ent.failovers += 1
        return True

    def answers(self) -> None:
        """Read and count the kernel's answers (the socket is readable)."""
        if self.sock is None:
            return
        acks, bad = self.sock.drain()
        self.stats["unreadable"] += bad
        for a in acks:
            if a.ok:
                self.stats["acks_ok"] += 1
            else:
                self.stats["refused"] += 1
                self.last_error = "kernel refused " + a.describe()
                log.warning("bfd: failover request refused: %s", a.describe())

    def snapshot(self) -> dict[str, Any]:
        return dict(self.stats, last_error=self.last_error)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
            self.fd = -1
