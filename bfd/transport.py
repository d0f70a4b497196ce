"""RFC 5881 single-hop sockets: a receive socket per (interface, family) and a transmit socket per
session. Plain non-blocking stdlib sockets; the engine owns the loop.

* Receive: UDP, bound to the device (``SO_BINDTODEVICE``) and to port 3784 on the wildcard
  address. Sockets bound to different devices (and IPv4 vs. v6-only IPv6) never conflict, so
  several interfaces share the port without ``SO_REUSEADDR``. Without it (or ``SO_REUSEPORT``,
  whose group the kernel limits to one uid) no other local user can bind 3784 on an address
  of ours and take our packets: that bind fails with EADDRINUSE. A user who binds the port
  *before* glbd makes glbd's bind fail loudly (the session's ``socket_error``, retried).
  Multihop (4784) and echo (3785) sockets, should they come, must follow the same rule. The
  TTL / hop limit arrives as ancillary data (``IP_RECVTTL`` = 12, which Python 3.11 lacks;
  ``IPV6_RECVHOPLIMIT``) and is checked in user space: Linux's ``IP_MINTTL`` does not filter
  UDP (seen on the kernels glbd is tested on).
* Transmit: UDP, bound to the device and to a source port in 49152-65535 that stays the same for
  the life of the session (§4), TTL / hop limit 255 (§5, GTSM).

:func:`recv_batch` drains a receive socket without raising: it returns what it read and the
name of a socket-level error, if one happened.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import random
import socket
import struct

__all__ = [
    "BFD_PORT",
    "IP_PKTINFO",
    "IP_RECVTTL",
    "RX_BUFSIZE",
    "RX_CMSG_SPACE",
    "SRC_PORT_MAX",
    "SRC_PORT_MIN",
    "Datagram",
    "open_rx_socket",
    "open_tx_socket",
    "parse_ancillary",
    "peer_sockaddr",
    "recv_batch",
]

BFD_PORT = 3784
SRC_PORT_MIN = 49152
SRC_PORT_MAX = 65535
IP_RECVTTL = getattr(socket, "IP_RECVTTL", 12)
IP_PKTINFO = getattr(socket, "IP_PKTINFO", 8)
_SO_BINDTODEVICE = getattr(socket, "SO_BINDTODEVICE", 25)
_IP_TTL = socket.IP_TTL
_IPV6_HOPLIMIT = socket.IPV6_HOPLIMIT
_IPPROTO_IP = socket.IPPROTO_IP
_SOL_SOCKET = socket.SOL_SOCKET
_IPPROTO_IPV6 = socket.IPPROTO_IPV6
#: kernel receive timestamps (struct timespec, CLOCK_REALTIME) as SCM_TIMESTAMPNS ancillary data
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_TIMESPEC = struct.Struct("@ll")
_CMSG_SPACE = socket.CMSG_SPACE(4) * 2 + socket.CMSG_SPACE(_TIMESPEC.size)
#: the ancillary buffer a receive socket's ``recvmsg`` needs (hop limit, arrival stamp)
RX_CMSG_SPACE = _CMSG_SPACE
_INT = struct.Struct("=i")
_MSG_TRUNC = int(socket.MSG_TRUNC)  # an IntFlag: & on it would run Python code

#: (payload, source address without scope, hop limit or -1 if absent, kernel arrival time in
#: CLOCK_REALTIME seconds or 0.0 if absent)
Datagram = tuple[bytes, str, int, float]


def _bind_device(sock: socket.socket, ifname: str) -> None:
    sock.setsockopt(socket.SOL_SOCKET, _SO_BINDTODEVICE, ifname.encode())


def open_rx_socket(ifname: str, family: int, rcvbuf: int = 4 << 20) -> socket.socket:
    """The port-3784 receive socket for ``ifname`` (raises OSError, e.g. ENODEV). ``rcvbuf``
    (capped by net.core.rmem_max) holds about 100 ms of 512 sessions at 3 x 10 ms, so a
    stalled loop does not lose packets."""
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        # no SO_REUSEADDR / SO_REUSEPORT: either would let another user share the port
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        _bind_device(sock, ifname)
        # the detection timer starts when the packet arrived, not when the engine read it
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(_IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.setsockopt(_IPPROTO_IPV6, socket.IPV6_RECVHOPLIMIT, 1)
            sock.bind(("::", BFD_PORT))
        else:
            sock.setsockopt(_IPPROTO_IP, IP_RECVTTL, 1)
            sock.bind(("0.0.0.0", BFD_PORT))
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def open_tx_socket(
    ifname: str,
    family: int,
    local: str | None,
    used_ports: set[int],
    rng: random.Random,
) -> tuple[socket.socket, int]:
    """A transmit socket bound to ``ifname`` and a free source port in 49152-65535 (recorded
    in ``used_ports``). Returns (socket, port). Raises OSError when nothing can be bound."""
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        _bind_device(sock, ifname)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        if family == socket.AF_INET6:
            sock.setsockopt(_IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.setsockopt(_IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, 255)
            host = local or "::"
            scope = socket.if_nametoindex(ifname) if _link_local(host) else 0
            addr: tuple[str, int] | tuple[str, int, int, int] = (host, 0, 0, scope)
        else:
            sock.setsockopt(_IPPROTO_IP, _IP_TTL, 255)
            addr = (local or "0.0.0.0", 0)
        mark_network_control(sock, family)
        span = SRC_PORT_MAX - SRC_PORT_MIN + 1
        start = rng.randrange(span)
        last: OSError | None = None
        for i in range(span):
            port = SRC_PORT_MIN + (start + i) % span
            if port in used_ports:
                continue
            try:
                sock.bind((addr[0], port, *addr[2:]))
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise
                last = exc
                continue
            used_ports.add(port)
            sock.setblocking(False)
            return sock, port
        raise last or OSError(errno.EADDRINUSE, "no free BFD source port")
    except BaseException:
        sock.close()
        raise


#: DSCP CS6 (network control): switches queue it strict-priority, ahead of data
TOS_CS6 = 0xC0
#: skb priority TC_PRIO_CONTROL: band 0 of pfifo_fast, the first band of prio qdiscs
PRIO_CONTROL = 7


def mark_network_control(sock: socket.socket, family: int) -> None:
    """DSCP CS6 plus skb priority 7 (6 without CAP_NET_ADMIN), so BFD is not queued behind
    data on the very link it watches. IP_TOS resets the priority, so it goes first."""
    if family == socket.AF_INET6:
        sock.setsockopt(_IPPROTO_IPV6, socket.IPV6_TCLASS, TOS_CS6)
    else:
        sock.setsockopt(_IPPROTO_IP, socket.IP_TOS, TOS_CS6)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY, PRIO_CONTROL)
    except PermissionError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY, PRIO_CONTROL - 1)


def _link_local(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_link_local
    except ValueError:
        return False


def peer_sockaddr(peer: str, ifname: str) -> tuple[str, int] | tuple[str, int, int, int]:
    """The destination sockaddr for ``peer`` (a link-local IPv6 peer gets the scope id)."""
    ip = ipaddress.ip_address(peer)
    if ip.version == 6:
        scope = socket.if_nametoindex(ifname) if ip.is_link_local else 0
        return (str(ip), BFD_PORT, 0, scope)
    return (str(ip), BFD_PORT)


def parse_ancillary(anc: list[tuple[int, int, bytes]]) -> tuple[int, float]:
    """(hop limit or -1 if absent, kernel arrival time in CLOCK_REALTIME seconds or 0.0 if
    absent) from a received datagram's ancillary data."""
    ttl = -1
    ts = 0.0
    for level, kind, value in anc:
        if (level == _IPPROTO_IP and kind == _IP_TTL) or (
            level == _IPPROTO_IPV6 and kind == _IPV6_HOPLIMIT
        ):
            ttl = _INT.unpack(value[:4])[0] if len(value) >= 4 else value[0]
        elif level == _SOL_SOCKET and kind == SO_TIMESTAMPNS and len(value) >= _TIMESPEC.size:
            sec, nsec = _TIMESPEC.unpack_from(value)
            ts = sec + nsec * 1e-9
    return ttl, ts


#: bytes read per datagram: a control packet's Length is one byte, so every byte the §6.8.6
#: checks and the digest look at is within the first 255
RX_BUFSIZE = 256


def recv_batch(
    sock: socket.socket,
    out: list[Datagram],
    limit: int = 256,
    counts: dict[str, int] | None = None,
) -> str | None:
    """Read up to ``limit`` datagrams into ``out``; never raises. Returns the name of a socket
    error that stopped the batch (``None`` when the socket was simply drained).

    A datagram longer than :data:`RX_BUFSIZE` is cut to it (the kernel says so with
    ``MSG_TRUNC``) and still handed on: only the bytes up to Length matter (RFC 5880 §6.8.6),
    the rest is padding the codec ignores anyway. Each is counted in ``counts`` as
    ``truncated_datagram``."""
    recvmsg = sock.recvmsg
    append = out.append
    for _ in range(limit):
        try:
            data, anc, flags, addr = recvmsg(RX_BUFSIZE, _CMSG_SPACE)
        except BlockingIOError:
            return None
        except InterruptedError:
            continue
        except OSError as exc:
            return f"recv_{errno.errorcode.get(exc.errno or 0, 'error').lower()}"
        if flags & _MSG_TRUNC and counts is not None:
            counts["truncated_datagram"] = counts.get("truncated_datagram", 0) + 1
        ttl, ts = parse_ancillary(anc)
        host: str = addr[0]
        if "%" in host:
            host = host.split("%", 1)[0]
        append((data, host, ttl, ts))
    return None
