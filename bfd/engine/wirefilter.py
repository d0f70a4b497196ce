"""Only what arrived from the wire: a kernel socket filter on the port-3784 receive sockets.

A local process, however unprivileged, can send the engine a packet that passes every other
check: IPv6 lets it bind the neighbour's link-local address (``IPV6_FREEBIND``) and send to
ours on the port's scope with hop limit 255, and the socket bound to the port
(``SO_BINDTODEVICE``) receives it with that source, hop limit and ``IPV6_PKTINFO`` ifindex.
GTSM protects against remote senders only. What gives such a packet away is the device it
arrived on, which the kernel knows and user space does not see: a packet for a local
address is looped through ``lo`` (ifindex 1), a looped multicast copy keeps the port as its
device but is marked ``PACKET_LOOPBACK``. A packet from the wire arrives on the port itself as
``PACKET_HOST`` (or broadcast, multicast). (IPv4 refuses to send from an address that is not
local without ``IP_TRANSPARENT``, which needs CAP_NET_ADMIN; the filter guards both families.)

The filter is classic BPF (``SO_ATTACH_FILTER``: no privilege, no ``bpf()``): it keeps a
datagram only if its arrival device is the port the socket is bound to and its packet type is
host, broadcast or multicast. The kernel counts each datagram a filter drops in the socket's
drop counter (``SO_MEMINFO``, ``SK_MEMINFO_DROPS``); :func:`fold` moves its growth into the
socket's drops as ``local_origin``. That counter also counts a datagram lost to a full receive
buffer or a bad UDP checksum: those land in ``local_origin`` too (glbd counted them nowhere
before). Datagrams queued in the instant between the socket's bind and its filter cannot be
told apart and are read away and counted as ``local_origin`` when the filter is attached.
"""

from __future__ import annotations

import ctypes
import socket
import struct
import weakref
from typing import Protocol

from ..reasons import DropReason

__all__ = ["attach", "fold", "kernel_drops", "program", "wire_only"]

SO_ATTACH_FILTER = getattr(socket, "SO_ATTACH_FILTER", 26)
SO_MEMINFO = 55
#: the index of the drop counter in ``SO_MEMINFO``'s array of u32
SK_MEMINFO_DROPS = 8
_SKF_AD_OFF = -0x1000
_SKF_AD_PKTTYPE = 4
_SKF_AD_IFINDEX = 8
#: the largest packet type from the wire (PACKET_HOST 0, BROADCAST 1, MULTICAST 2);
#: PACKET_LOOPBACK is 5
_PACKET_MULTICAST = 2
_INSN = struct.Struct("=HBBI")
#: datagrams read away at most when a filter is attached (the socket was just bound)
_DRAIN_MAX = 1024


class _Rx(Protocol):
    """What :func:`wire_only` and :func:`fold` need of the engine's receive socket."""

    sock: socket.socket
    #: this socket's drops by reason, and the engine-wide ones (both grow by the same count)
    drops: dict[DropReason | str, int]
    totals: dict[DropReason | str, int]


def program(ifindex: int) -> bytes:
    """The classic BPF program: keep (whole) a datagram that arrived on ``ifindex`` as host,
    broadcast or multicast; drop anything else."""
    ld_abs, jeq_k, jgt_k, ret_k = 0x20, 0x15, 0x25, 0x06
    insns = (
        (ld_abs, 0, 0, _SKF_AD_OFF + _SKF_AD_IFINDEX),  # A = skb->dev->ifindex
        (jeq_k, 0, 3, ifindex),  # not the port: drop
        (ld_abs, 0, 0, _SKF_AD_OFF + _SKF_AD_PKTTYPE),  # A = skb->pkt_type
        (jgt_k, 1, 0, _PACKET_MULTICAST),  # looped back (or outgoing, other host): drop
        (ret_k, 0, 0, 0xFFFFFFFF),
        (ret_k, 0, 0, 0),
    )
    return b"".join(_INSN.pack(c, jt, jf, k & 0xFFFFFFFF) for c, jt, jf, k in insns)


def attach(sock: socket.socket, ifindex: int) -> None:
    """Attach :func:`program` to ``sock`` (raises OSError)."""
    code = program(ifindex)
    buf = ctypes.create_string_buffer(code, len(code))
    fprog = struct.pack("@HP", len(code) // _INSN.size, ctypes.addressof(buf))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)


def kernel_drops(sock: socket.socket) -> int:
    """The socket's kernel drop counter (a u32 that wraps)."""
    info = sock.getsockopt(socket.SOL_SOCKET, SO_MEMINFO, 4 * (SK_MEMINFO_DROPS + 1))
    return int(struct.unpack_from("=I", info, 4 * SK_MEMINFO_DROPS)[0])


#: per socket, the value of its kernel drop counter already counted
_counted: weakref.WeakKeyDictionary[socket.socket, int] = weakref.WeakKeyDictionary()


def wire_only(rx: _Rx, ifname: str) -> None:
    """Filter ``rx``'s socket to what arrives from the wire on ``ifname`` and read away what
    was queued before the filter, each counted as ``local_origin``. On OSError the socket is
    closed: it must never be read unfiltered."""
    sock = rx.sock
    try:
        attach(sock, socket.if_nametoindex(ifname))
    except BaseException:
        sock.close()
        raise
    _counted[sock] = 0  # a new socket: whatever its counter shows was not counted yet
    for _ in range(_DRAIN_MAX):
        try:
            sock.recv(1, socket.MSG_DONTWAIT)
        except OSError:  # BlockingIOError: nothing (more) was queued
            break
        _count(rx, 1)


def fold(rx: _Rx) -> None:
    """Count what the filter dropped since the last call as ``local_origin``."""
    sock = rx.sock
    base = _counted.get(sock)
    if base is None or sock.fileno() < 0:
        return
    now = kernel_drops(sock)
    _counted[sock] = now
    _count(rx, (now - base) & 0xFFFFFFFF)


def _count(rx: _Rx, n: int) -> None:
    if n:
        r = DropReason.LOCAL_ORIGIN
        rx.drops[r] = rx.drops.get(r, 0) + n
        rx.totals[r] = rx.totals.get(r, 0) + n
