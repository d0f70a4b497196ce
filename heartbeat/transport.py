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

**Address family per interface**: the family of the BGP neighbour on it (docs/heartbeat.md §1).
An IPv4 neighbour gets IPv4 heartbeats to ``group`` (224.0.0.149); an IPv6 neighbour (an
unnumbered fabric link with a link-local session, or a numbered IPv6 link) gets IPv6 heartbeats
to ``group6`` (ff12::149, link scope) with hop limit 255 (``IPV6_MULTICAST_HOPS``, read back with
``IPV6_RECVHOPLIMIT``). An interface with neighbours of both families uses IPv4. An IPv6 socket
sends from a pinned source (``IPV6_PKTINFO`` per ``sendmsg``: our BGP session address on that
link), so the receiver's "source = BGP neighbour" check also holds when the session runs over a
global address, which the kernel would not pick as the source for a link-scope destination.

Python 3.11 lacks ``socket.IP_RECVTTL``/``IP_PKTINFO``: the Linux values are used.

:class:`HeartbeatEndpoint` is the whole glue: it feeds datagrams to a :class:`Receiver`, link
snapshots to a :class:`Sender`, transmits the sender's effects, hands the receiver's effects to a
callback, and keeps exactly one ``loop.call_at`` timer armed at the earliest core deadline.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import ipaddress
import logging
import socket
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from . import wire
from .reasons import DropReason, UpdateReason
from .receiver import Neighbor, Receiver, RemoteUpdate
from .sender import Sender, Transmit

__all__ = [
    "DEFAULT_GROUP",
    "DEFAULT_GROUP6",
    "DEFAULT_PORT",
    "HeartbeatEndpoint",
    "IfSpec",
    "McastTransport",
    "check_groups",
    "family_of",
    "if_spec",
    "open_socket",
    "pick_neighbors",
    "pktinfo6",
]

log = logging.getLogger(__name__)

DEFAULT_GROUP = "224.0.0.149"
#: glbd's choice (no IANA assignment): link scope (never forwarded), transient (T flag: not from
#: IANA's permanent registry, where ff0x::149 is EPSON-disc-set), .149 as in 224.0.0.149
DEFAULT_GROUP6 = "ff12::149"
DEFAULT_PORT = 6149
TTL = 255
TOS_CS6 = 0xC0
IP_RECVTTL = getattr(socket, "IP_RECVTTL", 12)
IP_TTL = getattr(socket, "IP_TTL", 2)
IP_MULTICAST_ALL = getattr(socket, "IP_MULTICAST_ALL", 49)
IPV6_MULTICAST_ALL = 29
IPV6_PKTINFO = getattr(socket, "IPV6_PKTINFO", 50)
RECV_BUF = 65536
CMSG_SPACE = 64
#: a socket that failed to open (out of descriptors, interface not there yet) is tried again
#: after this many seconds, the wait doubling up to :data:`OPEN_RETRY_MAX_S`
OPEN_RETRY_S = 1.0
OPEN_RETRY_MAX_S = 30.0


def _ifindex(ifname: str) -> int:
    return socket.if_nametoindex(ifname)


def _unscoped(addr: str) -> str:
    return addr.split("%", 1)[0]


def check_groups(group: str, group6: str) -> None:
    """Raise ``ValueError`` unless ``group`` is IPv4 multicast and ``group6`` IPv6 multicast of
    link-local scope (the transport joins it per interface; it must never be forwarded)."""
    g4 = ipaddress.ip_address(group)
    if g4.version != 4 or not g4.is_multicast:
        raise ValueError(f"group {group!r}: need an IPv4 multicast address")
    g6 = ipaddress.ip_address(group6)
    if not isinstance(g6, ipaddress.IPv6Address) or not g6.is_multicast:
        raise ValueError(f"group6 {group6!r}: need an IPv6 multicast address")
    if (int(g6) >> 112) & 0xF != 2:
        raise ValueError(f"group6 {group6!r}: need link-local scope (ff02::/16)")


def family_of(address: str | None) -> int | None:
    """4 or 6 for an address string (an IPv6 zone ``%eth0`` allowed), None for None."""
    if address is None:
        return None
    return ipaddress.ip_address(_unscoped(address)).version


@dataclass(frozen=True, slots=True)
class IfSpec:
    """How one interface's heartbeat socket is opened: address family (4 or 6) and, for IPv6,
    the source address its heartbeats leave from (None = the kernel's choice)."""

    family: int = 4
    source: str | None = None

    def __post_init__(self) -> None:
        if self.family not in (4, 6):
            raise ValueError("family must be 4 or 6")
        if self.source is not None and (self.family != 6 or family_of(self.source) != 6):
            raise ValueError(f"source {self.source}: only an IPv6 socket pins its source")


def pktinfo6(source: str, ifindex: int) -> list[tuple[int, int, bytes]]:
    """The ``sendmsg`` ancillary data that sends from ``source`` out of ``ifindex``
    (``IPV6_PKTINFO``; Linux ignores the address of the sticky socket option for UDP)."""
    src = ipaddress.IPv6Address(_unscoped(source))
    return [(socket.IPPROTO_IPV6, IPV6_PKTINFO, src.packed + struct.pack("@I", ifindex))]


#: classic BPF: keep a datagram only if it arrived on the port (skb->dev->ifindex, patched in)
#: as host, broadcast or multicast. A local sender's multicast copy is looped back on the port
#: as PACKET_LOOPBACK (5); its unicast arrives on lo. Same program as bfd/engine/wirefilter.py.
_WIRE_ONLY = ((0x20, 0, 0, -0x1000 + 8), (0x15, 0, 3, 0), (0x20, 0, 0, -0x1000 + 4),
              (0x25, 1, 0, 2), (0x06, 0, 0, 0xFFFFFFFF), (0x06, 0, 0, 0))  # fmt: skip


def _wire_only(s: socket.socket, ifindex: int) -> None:
    """Attach :data:`_WIRE_ONLY` for ``ifindex`` (``SO_ATTACH_FILTER``, no privilege needed)."""
    code = b"".join(
        struct.pack("=HBBI", c, jt, jf, (ifindex if i == 1 else k) & 0xFFFFFFFF)
        for i, (c, jt, jf, k) in enumerate(_WIRE_ONLY)
    )
    buf = ctypes.create_string_buffer(code, len(code))
    s.setsockopt(socket.SOL_SOCKET, 26, struct.pack("@HP", len(_WIRE_ONLY), ctypes.addressof(buf)))


def _kernel_drops(s: socket.socket) -> int:
    """The socket's kernel drop counter (``SO_MEMINFO``'s ``SK_MEMINFO_DROPS``, a u32): every
    datagram the filter dropped, and any lost to a full buffer or a bad checksum."""
    return int(struct.unpack_from("=I", s.getsockopt(socket.SOL_SOCKET, 55, 36), 32)[0])


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
        _wire_only(s, idx)  # before the bind: nothing a local process sends is ever queued
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


@dataclass(slots=True)
class _Sock:
    sock: socket.socket
    spec: IfSpec
    dest: tuple[Any, ...]
    #: IPV6_PKTINFO pinning the source (IPv6 with a source only)
    anc: list[tuple[int, int, bytes]] | None = None
    #: the socket's kernel drop count already taken (:meth:`McastTransport.take_local_origin`)
    kdrops: int = 0


@dataclass(slots=True)
class _Retry:
    spec: IfSpec
    delay: float
    handle: asyncio.TimerHandle


class McastTransport:
    """Per-interface heartbeat sockets on one event loop.

    ``on_datagram(data, ifname, src_address, ttl, now)`` is called for every datagram read;
    ``src_address`` has no IPv6 zone (the socket already fixes the interface); ``now`` is
    ``loop.time()``. Each interface is IPv4 (``group``) or IPv6 (``group6``) per its
    :class:`IfSpec`. A socket that fails to open is retried with backoff; ``on_opened(ifname)``
    is called when a retry opens it."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        on_datagram: DatagramHandler,
        *,
        group: str = DEFAULT_GROUP,
        group6: str = DEFAULT_GROUP6,
        port: int = DEFAULT_PORT,
        on_opened: Callable[[str], None] = lambda _ifn: None,
    ) -> None:
        check_groups(group, group6)
        self._loop = loop
        self._on = on_datagram
        self.on_opened = on_opened
        self.group = group
        self.group6 = group6
        self.port = port
        self._socks: dict[str, _Sock] = {}
        self._retry: dict[str, _Retry] = {}
        self.errors: dict[str, int] = {}
        #: filter drops of sockets closed since the last take_local_origin
        self._closed_drops = 0

    @property
    def interfaces(self) -> list[str]:
        return sorted(self._socks)

    def families(self) -> dict[str, int]:
        """Interface -> address family (4 or 6) of its open socket."""
        return {ifn: s.spec.family for ifn, s in sorted(self._socks.items())}

    def open(self, ifname: str, spec: IfSpec | None = None) -> None:
        """Open (or, if its family or source changed, reopen) the socket of ``ifname``."""
        spec = spec or IfSpec()
        cur = self._socks.get(ifname)
        if cur is not None:
            if cur.spec == spec:
                return
            self.close_interface(ifname)
        group = self.group if spec.family == 4 else self.group6
        dest: tuple[Any, ...] = (group, self.port)
        anc = None
        if spec.family == 6:  # before the socket: a failure here must not leave it open
            idx = _ifindex(ifname)
            dest = (group, self.port, 0, idx)
            anc = None if spec.source is None else pktinfo6(spec.source, idx)
        s = open_socket(ifname, group, self.port)
        self._socks[ifname] = _Sock(s, spec, dest, anc)
        self._loop.add_reader(s.fileno(), self._readable, ifname, s)

    def close_interface(self, ifname: str) -> None:
        s = self._socks.pop(ifname, None)
        if s is not None:
            self._loop.remove_reader(s.sock.fileno())
            self._closed_drops += _take_drops(s)
            s.sock.close()

    def take_local_origin(self) -> int:
        """How many datagrams the sockets' kernel filter dropped (not from the wire) since the
        last call."""
        n, self._closed_drops = self._closed_drops, 0
        return n + sum(_take_drops(s) for s in self._socks.values())

    def set_interfaces(self, ifnames: Iterable[str] | Mapping[str, IfSpec]) -> None:
        """Open sockets for ``ifnames`` (names: IPv4; a mapping: per :class:`IfSpec`) and close
        the others. An interface that cannot be opened (gone, no address of that family, a
        source that is not ours, no descriptor left) is logged, counted and retried, never
        raised."""
        want: dict[str, IfSpec] = (
            dict(ifnames) if isinstance(ifnames, Mapping) else dict.fromkeys(ifnames, IfSpec())
        )
        for ifn in list(self._socks):
            if ifn not in want:
                self.close_interface(ifn)
        for ifn in list(self._retry):
            if ifn not in want:
                self._retry.pop(ifn).handle.cancel()
        for ifn in sorted(want):
            try:
                self.open(ifn, want[ifn])
            except OSError as e:
                self._open_failed(ifn, want[ifn], e, OPEN_RETRY_S)
            else:
                r = self._retry.pop(ifn, None)
                if r is not None:
                    r.handle.cancel()

    def _open_failed(self, ifname: str, spec: IfSpec, e: OSError, delay: float) -> None:
        """Count and log a failed open; its retry keeps its time if one is due for ``spec``."""
        self._count("open_failed")
        r = self._retry.get(ifname)
        if r is None or r.spec != spec:
            if r is not None:
                r.handle.cancel()
            r = _Retry(spec, delay, self._loop.call_later(delay, self._retry_open, ifname))
            self._retry[ifname] = r
        wait = r.handle.when() - self._loop.time()
        log.warning("heartbeat socket on %s: %s (next try in %.0f s)", ifname, e, wait)

    def _retry_open(self, ifname: str) -> None:
        r = self._retry.pop(ifname)
        try:
            self.open(ifname, r.spec)
        except OSError as e:
            self._open_failed(ifname, r.spec, e, min(2 * r.delay, OPEN_RETRY_MAX_S))
            return
        log.info("heartbeat socket on %s open on retry", ifname)
        self.on_opened(ifname)

    def set_groups(self, group: str, group6: str, port: int) -> bool:
        """New groups/port (a config reload): reopen every socket whose destination changes.
        Returns whether anything changed."""
        check_groups(group, group6)
        if (group, group6, port) == (self.group, self.group6, self.port):
            return False
        specs = {ifn: r.spec for ifn, r in self._retry.items()}
        specs |= {ifn: s.spec for ifn, s in self._socks.items()}
        self.close()
        self.group, self.group6, self.port = group, group6, port
        self.set_interfaces(specs)
        return True

    def close(self) -> None:
        for r in self._retry.values():
            r.handle.cancel()
        self._retry.clear()
        for ifn in list(self._socks):
            self.close_interface(ifn)

    def send(self, ifname: str, data: bytes) -> bool:
        s = self._socks.get(ifname)
        if s is None:
            self._count("send_no_socket")
            return False
        try:
            if s.anc is None:
                s.sock.sendto(data, s.dest)
            else:
                s.sock.sendmsg([data], s.anc, 0, s.dest)
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


def _take_drops(s: _Sock) -> int:
    if not isinstance(s.sock, socket.socket):  # a stand-in (tests): no kernel, no filter
        return 0
    now = _kernel_drops(s.sock)
    n, s.kdrops = (now - s.kdrops) & 0xFFFFFFFF, now
    return n


def _family(n: Neighbor) -> int:
    return family_of(n.address) or family_of(n.local) or 4


def pick_neighbors(neighbors: Iterable[Neighbor]) -> dict[str, Neighbor]:
    """One neighbour per interface: the heartbeat stream of a link follows its BGP session. A
    link with sessions of both families (dual stack) uses the IPv4 one, so adding an IPv6
    session to an IPv4 fabric changes nothing; among equals the first listed wins."""
    out: dict[str, Neighbor] = {}
    for n in neighbors:
        cur = out.get(n.ifname)
        if cur is None or (_family(cur) == 6 and _family(n) == 4):
            out[n.ifname] = n
    return out


def if_spec(n: Neighbor) -> IfSpec:
    """The socket an interface needs for neighbour ``n``: its family and, for IPv6, our source."""
    fam = _family(n)
    return IfSpec(fam, n.local if fam == 6 and family_of(n.local) == 6 else None)


class HeartbeatEndpoint:
    """Binds a :class:`Sender` (helper role) and/or a :class:`Receiver` (load-balancer role) to
    a :class:`McastTransport` and one timer. Roles: pass only the core(s) the role needs.

    ``on_remote`` receives every :class:`RemoteUpdate` (feed it to the path table); it is a
    public attribute, so a caller may route the updates elsewhere after construction. The
    first change of a known helper in an event-loop turn goes to it at once, from the socket's
    reader: a band change does not wait for the rest of the turn's callbacks. Every other
    update of that turn (new helpers, the turn's further changes) comes in one call right after
    the turn, in arrival order: a burst of heartbeats from many helpers costs the consumer two
    recomputes, not one per helper, and a helper flooding changes gets one at once per turn."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        sender: Sender | None,
        receiver: Receiver | None,
        on_remote: Callable[[list[RemoteUpdate]], None] = lambda _u: None,
        group: str = DEFAULT_GROUP,
        group6: str = DEFAULT_GROUP6,
        port: int = DEFAULT_PORT,
    ) -> None:
        self._loop = loop
        self.sender = sender
        self.receiver = receiver
        self.on_remote = on_remote
        self.transport = McastTransport(
            loop, self._datagram, group=group, group6=group6, port=port, on_opened=self._opened
        )
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._neighbors: dict[str, Neighbor] = {}
        #: updates read this loop turn, delivered together by ``_flush``
        self._pending: list[RemoteUpdate] = []
        self._flush_at: asyncio.Handle | None = None
        #: a change already went out at once this loop turn
        self._hot = False

    # --- inputs from the daemon ----------------------------------------------------------

    def set_neighbors(self, neighbors: Iterable[Neighbor]) -> None:
        """The BGP neighbours that are up. Each interface's heartbeats use the address family of
        its neighbour (IPv4 when it has both, see :func:`pick_neighbors`); an IPv6 socket sends
        from the neighbour's ``local`` address when one is given."""
        now = self._loop.time()
        new = pick_neighbors(neighbors)
        self.transport.set_interfaces({ifn: if_spec(n) for ifn, n in new.items()})
        updates: list[RemoteUpdate] = []
        if self.receiver is not None:
            for ifn in set(self._neighbors) - set(new):
                updates += self.receiver.remove_neighbor(ifn)
            for n in new.values():
                updates += self.receiver.set_neighbor(n)
        self._neighbors = new
        if self.sender is not None:
            self._transmit(self.sender.set_interfaces(self.transport.interfaces, now))
        self._deliver(updates)
        self._rearm()

    @property
    def neighbors(self) -> Mapping[str, Neighbor]:
        """Interface -> the neighbour its heartbeats are exchanged with (as last set)."""
        return self._neighbors

    def set_groups(self, group: str, group6: str, port: int) -> bool:
        """Reload: new groups/port apply at once (every socket reopened); the cores keep their
        state (sequence numbers, remote snapshots). Returns whether anything changed."""
        if not self.transport.set_groups(group, group6, port):
            return False
        if self.sender is not None:
            self._transmit(self.sender.set_interfaces(self.transport.interfaces, self._loop.time()))
        self._rearm()
        return True

    def update_links(self, entries: Iterable[wire.Entry]) -> None:
        """A new snapshot of this node's monitored links (helper role)."""
        if self.sender is None:
            return
        self._transmit(self.sender.update(entries, self._loop.time()))
        self._rearm()

    def set_drain(self, drain: bool) -> None:
        """Advertise every link at band 0 (drain) or as measured (helper role)."""
        if self.sender is None:
            return
        self._transmit(self.sender.set_drain(drain, self._loop.time()))
        self._rearm()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._flush_at is not None:
            self._flush_at.cancel()
            self._flush_at = None
        self._pending.clear()
        self.transport.close()

    # --- plumbing ------------------------------------------------------------------------

    def _datagram(self, data: bytes, ifname: str, src: str, ttl: int | None, now: float) -> None:
        if self.receiver is None:
            return
        ups = self.receiver.on_datagram(data, ifname=ifname, src=src, ttl=ttl, now=now)
        if ups and not (self._hot or self._pending) and ups[0].reason is UpdateReason.CHANGED:
            self._hot = True
            self._loop.call_soon(self._cool)  # after this turn's callbacks
            self._rearm()
            self.on_remote(ups)  # (a consumer's exception is counted by the reader)
            return
        if ups:
            self._pending += ups
            if self._flush_at is None:
                # after every reader of this turn: the whole burst in one call
                self._flush_at = self._loop.call_soon(self._flush)
            self._rearm()
        elif self._timer is None:
            self._rearm()

    def _opened(self, ifname: str) -> None:
        """A socket opened on a retry: the sender starts sending on its interface."""
        if self.sender is not None:
            self._transmit(self.sender.set_interfaces(self.transport.interfaces, self._loop.time()))
        self._rearm()

    def _cool(self) -> None:
        self._hot = False

    def _deliver(self, ups: list[RemoteUpdate]) -> None:
        """``ups`` now, after whatever datagrams are still pending (order is kept)."""
        if self._pending:
            ups = self._pending + ups
            self._pending = []
        if ups:
            self.on_remote(ups)

    def _flush(self) -> None:
        self._flush_at = None
        try:
            self._deliver([])
        except Exception:  # as in the reader: a bug in the consumer must not stop delivery
            self.transport._count("handler_exception")
            log.exception("heartbeat consumer failed")

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
            self._deliver(self.receiver.on_timer(now))
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

    def auth(self) -> dict[str, Any]:
        """Whether heartbeats are authenticated: the key id we sign with (sender) and the key
        ids we accept (receiver; empty = unsigned heartbeats accepted)."""
        sign = None
        if self.sender is not None and self.sender.params.key is not None:
            sign = self.sender.params.key.key_id
        accept = sorted(self.receiver.params.keys) if self.receiver is not None else []
        on = (self.sender is None or sign is not None) and (self.receiver is None or bool(accept))
        return {"enabled": on, "sign_key_id": sign, "accept_key_ids": accept}

    def to_dict(self) -> dict[str, Any]:
        now = self._loop.time()
        if self.receiver is not None:  # the kernel filter's drops, counted when read
            n = self.transport.take_local_origin()
            if n:
                self.receiver.drops[DropReason.LOCAL_ORIGIN] += n
        return {
            "auth": self.auth(),
            "group": self.transport.group,
            "group6": self.transport.group6,
            "port": self.transport.port,
            "sockets": self.transport.interfaces,
            "transport_errors": dict(sorted(self.transport.errors.items())),
            "sender": None if self.sender is None else self.sender.to_dict(now),
            "receiver": None if self.receiver is None else self.receiver.to_dict(now),
        }
