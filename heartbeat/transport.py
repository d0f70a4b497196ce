"""asyncio transport for heartbeats: moves bytes between sockets and the pure cores.

**One socket per fabric interface** (not one socket with IP_PKTINFO). Each socket is
``SO_BINDTODEVICE``-bound to its interface, bound to ``(group, port)``, joined to the group on
that interface only, sends with ``IP_MULTICAST_IF`` = the interface and ``IP_MULTICAST_TTL`` 255,
has ``IP_MULTICAST_LOOP`` and ``IP_MULTICAST_ALL`` off and reads the TTL with ``IP_RECVTTL``.
Why: the kernel, not our code, decides which interface a datagram belongs to (a heartbeat
received on eth1 can never be attributed to eth2, even across ifindex reuse after a flap), a send
can only leave through its own interface, and adding, removing or flapping one interface touches
one socket and nothing else. The cost, one fd and one reader per interface, is nothing at
fabric sizes (<= a few hundred ports) and the receive path is still one ``recvmsg`` per datagram.

Python 3.11 lacks ``socket.IP_RECVTTL``/``IP_PKTINFO``: the Linux values are used.

:class:`HeartbeatEndpoint` is the whole glue: it feeds datagrams to a :class:`Receiver`, link
snapshots to a :class:`Sender`, transmits the sender's effects, hands the receiver's effects to a
callback, and keeps exactly one ``loop.call_at`` timer armed at the earliest core deadline.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import socket
import struct
from collections.abc import Callable, Iterable
from typing import Any

from . import wire
from .receiver import Neighbor, Receiver, RemoteUpdate
from .sender import Sender, Transmit

__all__ = ["DEFAULT_GROUP", "DEFAULT_PORT", "HeartbeatEndpoint", "McastTransport", "open_socket"]

log = logging.getLogger(__name__)

DEFAULT_GROUP = "224.0.0.149"
DEFAULT_PORT = 6149
TTL = 255
TOS_CS6 = 0xC0
IP_RECVTTL = getattr(socket, "IP_RECVTTL", 12)
IP_TTL = getattr(socket, "IP_TTL", 2)
IP_MULTICAST_ALL = getattr(socket, "IP_MULTICAST_ALL", 49)
IPV6_MULTICAST_ALL = 29
RECV_BUF = 65536
CMSG_SPACE = 64


def _ifindex(ifname: str) -> int:
    return socket.if_nametoindex(ifname)


def open_socket(ifname: str, group: str = DEFAULT_GROUP, port: int = DEFAULT_PORT) -> socket.socket:
    """A non-blocking UDP socket that receives ``group:port`` on ``ifname`` only and sends
    there with TTL (hop limit) 255."""
    ga = ipaddress.ip_address(group)
    idx = _ifindex(ifname)
    fam = socket.AF_INET if ga.version == 4 else socket.AF_INET6
    s = socket.socket(fam, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, ifname.encode())
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        if fam == socket.AF_INET:
            mreqn = struct.pack("4s4si", ga.packed, b"\0" * 4, idx)
            s.setsockopt(socket.IPPROTO_IP, IP_MULTICAST_ALL, 0)
            s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreqn)
            s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, mreqn)
            s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, TTL)
            s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 0)
            s.setsockopt(socket.IPPROTO_IP, IP_RECVTTL, 1)
            s.bind((group, port))
        else:
            s.setsockopt(socket.IPPROTO_IPV6, IPV6_MULTICAST_ALL, 0)
            s.setsockopt(
                socket.IPPROTO_IPV6, socket.IPV6_JOIN_GROUP, ga.packed + struct.pack("@I", idx)
            )
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, idx)
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, TTL)
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_LOOP, 0)
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVHOPLIMIT, 1)
            s.bind((group, port, 0, idx))
        # network control, like BFD: DSCP CS6 and skb priority 7 (6 without CAP_NET_ADMIN), so a
        # heartbeat is not queued behind the data whose congestion it reports
        if fam == socket.AF_INET:
            s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, TOS_CS6)
        else:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, TOS_CS6)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY, 7)
        except PermissionError:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY, 6)
        s.setblocking(False)
    except BaseException:
        s.close()
        raise
    return s


def _ttl_of(ancdata: list[tuple[int, int, bytes]]) -> int | None:
    for level, typ, val in ancdata:
        if (level == socket.IPPROTO_IP and typ == IP_TTL) or (
            level == socket.IPPROTO_IPV6 and typ == socket.IPV6_HOPLIMIT
        ):
            if len(val) >= 4:
                ttl: int = struct.unpack("@i", val[:4])[0]
                return ttl
            if len(val) == 1:
                return val[0]
    return None


DatagramHandler = Callable[[bytes, str, str, "int | None", float], None]


class McastTransport:
    """Per-interface heartbeat sockets on one event loop.

    ``on_datagram(data, ifname, src_address, ttl, now)`` is called for every datagram read;
    ``now`` is ``loop.time()``."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        on_datagram: DatagramHandler,
        *,
        group: str = DEFAULT_GROUP,
        port: int = DEFAULT_PORT,
    ) -> None:
        self._loop = loop
        self._on = on_datagram
        self.group = group
        self.port = port
        self._socks: dict[str, socket.socket] = {}
        self.errors: dict[str, int] = {}

    @property
    def interfaces(self) -> list[str]:
        return sorted(self._socks)

    def open(self, ifname: str) -> None:
        if ifname in self._socks:
            return
        s = open_socket(ifname, self.group, self.port)
        self._socks[ifname] = s
        self._loop.add_reader(s.fileno(), self._readable, ifname, s)

    def close_interface(self, ifname: str) -> None:
        s = self._socks.pop(ifname, None)
        if s is not None:
            self._loop.remove_reader(s.fileno())
            s.close()

    def set_interfaces(self, ifnames: Iterable[str]) -> None:
        """Open sockets for ``ifnames`` and close the others. An interface that cannot be
        opened (gone, no address family) is logged and counted, never raised."""
        want = set(ifnames)
        for ifn in list(self._socks):
            if ifn not in want:
                self.close_interface(ifn)
        for ifn in sorted(want):
            try:
                self.open(ifn)
            except OSError as e:
                self._count("open_failed")
                log.warning("heartbeat socket on %s: %s", ifn, e)

    def close(self) -> None:
        for ifn in list(self._socks):
            self.close_interface(ifn)

    def send(self, ifname: str, data: bytes) -> bool:
        s = self._socks.get(ifname)
        if s is None:
            self._count("send_no_socket")
            return False
        try:
            s.sendto(data, (self.group, self.port))
        except OSError as e:
            # ENOBUFS/EAGAIN (queue full) and ENETDOWN (link flapping) are expected: a heartbeat
            # is periodic, the next one replaces it.
            self._count("send_" + (errno.errorcode.get(e.errno or 0, "error").lower()))
            return False
        return True

    def _count(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1

    def _readable(self, ifname: str, s: socket.socket) -> None:
        on = self._on
        now = self._loop.time()
        for _ in range(64):  # drain, but keep the loop fair
            try:
                data, anc, _flags, addr = s.recvmsg(RECV_BUF, CMSG_SPACE)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                self._count("recv_" + (errno.errorcode.get(e.errno or 0, "error").lower()))
                return
            src = addr[0]
            if "%" in src:  # IPv6 link-local with scope: the socket already fixes the interface
                src = src.split("%", 1)[0]
            try:
                on(data, ifname, src, _ttl_of(anc), now)
            except Exception:  # a bug in a callback must not kill the reader
                self._count("handler_exception")
                log.exception("heartbeat handler failed")


class HeartbeatEndpoint:
    """Binds a :class:`Sender` (helper role) and/or a :class:`Receiver` (load-balancer role) to
    a :class:`McastTransport` and one timer. Roles: pass only the core(s) the role needs.

    ``on_remote`` receives every :class:`RemoteUpdate` (feed it to the path table)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        sender: Sender | None,
        receiver: Receiver | None,
        on_remote: Callable[[list[RemoteUpdate]], None] = lambda _u: None,
        group: str = DEFAULT_GROUP,
        port: int = DEFAULT_PORT,
    ) -> None:
        self._loop = loop
        self.sender = sender
        self.receiver = receiver
        self._on_remote = on_remote
        self.transport = McastTransport(loop, self._datagram, group=group, port=port)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._neighbors: dict[str, Neighbor] = {}

    # --- inputs from the daemon ----------------------------------------------------------

    def set_neighbors(self, neighbors: Iterable[Neighbor]) -> None:
        """The BGP neighbours that are up, one per fabric interface."""
        now = self._loop.time()
        new = {n.ifname: n for n in neighbors}
        self.transport.set_interfaces(new)
        updates: list[RemoteUpdate] = []
        if self.receiver is not None:
            for ifn in set(self._neighbors) - set(new):
                updates += self.receiver.remove_neighbor(ifn)
            for n in new.values():
                updates += self.receiver.set_neighbor(n)
        self._neighbors = new
        if self.sender is not None:
            self._transmit(self.sender.set_interfaces(self.transport.interfaces, now))
        if updates:
            self._on_remote(updates)
        self._rearm()

    def update_links(self, entries: Iterable[wire.Entry]) -> None:
        """A new snapshot of this node's monitored links (helper role)."""
        if self.sender is None:
            return
        self._transmit(self.sender.update(entries, self._loop.time()))
        self._rearm()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.transport.close()

    # --- plumbing ------------------------------------------------------------------------

    def _datagram(self, data: bytes, ifname: str, src: str, ttl: int | None, now: float) -> None:
        if self.receiver is None:
            return
        ups = self.receiver.on_datagram(data, ifname=ifname, src=src, ttl=ttl, now=now)
        if ups:
            self._on_remote(ups)
            self._rearm()
        elif self._timer is None:
            self._rearm()

    def _transmit(self, effects: list[Transmit]) -> None:
        for t in effects:
            self.transport.send(t.ifname, t.data)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        now = self._loop.time()
        if self.sender is not None:
            self._transmit(self.sender.on_timer(now))
        if self.receiver is not None:
            ups = self.receiver.on_timer(now)
            if ups:
                self._on_remote(ups)
        self._rearm()

    def _rearm(self) -> None:
        ds = [
            d
            for d in (
                self.sender.next_deadline() if self.sender else None,
                self.receiver.next_deadline() if self.receiver else None,
            )
            if d is not None
        ]
        at = min(ds) if ds else None
        if self._timer is not None and self._timer_at != at:
            self._timer.cancel()
            self._timer = None
        if self._timer is None and at is not None:
            self._timer = self._loop.call_at(at, self._on_timer)
        self._timer_at = at

    def to_dict(self) -> dict[str, Any]:
        now = self._loop.time()
        return {
            "group": self.transport.group,
            "port": self.transport.port,
            "sockets": self.transport.interfaces,
            "transport_errors": dict(sorted(self.transport.errors.items())),
            "sender": None if self.sender is None else self.sender.to_dict(now),
            "receiver": None if self.receiver is None else self.receiver.to_dict(now),
        }
