"""Router advertisements on unnumbered ports: say we are here, and learn who is there.

One raw ICMPv6 socket per port (bound to it, SO_BINDTODEVICE; only RS and RA pass its
ICMP6_FILTER). It sends a router advertisement (lifetime 0, :mod:`~glbd.unnumbered.ndp`) at start,
every ``interval_s`` and in answer to a router solicitation, so a peer that learns unnumbered
neighbors from advertisements (FRR's ``neighbor PORT interface``) learns our link-local
address; and it feeds the advertisements it hears into :class:`glbd.unnumbered.ndpeers.NdpPeers`,
whose events go to ``on_event``. A port that does not exist yet is retried every interval.

Received messages are checked as RFC 4861 §6.1.2 asks (hop limit 255, link-local source,
code 0, well-formed options); every drop is counted by :class:`glbd.unnumbered.ndp.NdpDrop`, and
every advertisement the core did not take by :class:`glbd.base.reasons.NdpIgnored` (both in
``dropped``).

Which learned peers have a BGP session Established comes from the app (``set_established``):
the core does not move those. With ``state_path`` the learned peers are remembered in a small
JSON file (written atomically, 0600, on each learn or change) and loaded at start as each
port's preferred peer, still subject to the core's rules (docs/security.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import ipaddress
import json
import os
import socket
import stat
import struct
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import structlog

from glbd.base.ipzone import strip_zone
from glbd.daemon.netns import in_netns
from glbd.daemon.paths import write_private
from glbd.unnumbered import ndp
from glbd.unnumbered.ndpeers import HOLD_S, NdpEvent, NdpPeers, PeerChange

__all__ = ["STATE_FILE", "NdpSpeaker"]

log = structlog.get_logger(__name__)

#: FRR's default advertisement interval on an unnumbered BGP port
INTERVAL_S = 10.0
#: answers to solicitations on one port are at least this far apart
MIN_ANSWER_S = 0.5
#: how often each open port is checked to still be the same port (deleted, or re-created
#: under its name: a new link, whose peer is learned afresh)
CHECK_S = 1.0
#: messages handled per port per second at most (routers send one every few seconds); the
#: rest are read and dropped, so a flood on one port costs little of the event loop
RATE_PER_S = 20.0
_ICMP6_FILTER = 1
_SIOCGIFHWADDR = 0x8927
_SIOCGIFINDEX = 0x8933
_ALL_NODES = "ff02::1"
_ALL_ROUTERS = "ff02::2"
#: ancillary data: hop limit (int) and packet info (in6_pktinfo: address, ifindex)
_ANC_SPACE = socket.CMSG_SPACE(4) + socket.CMSG_SPACE(20)
#: the learned peers' file, next to the control socket (a tmpfs: it outlives a restart of
#: glbd, not a reboot, when the links' peers may have changed anyway)
STATE_FILE = "ndp-peers.json"
#: a state file larger than this is not ours: ignored
_STATE_MAX = 65536


def _filter(*passed: int) -> bytes:
    """struct icmp6_filter: a set bit blocks that type (Linux)."""
    words = [0xFFFFFFFF] * 8
    for t in passed:
        words[t >> 5] &= ~(1 << (t & 31)) & 0xFFFFFFFF
    return struct.pack("8I", *words)


class _Port:
    def __init__(self, name: str) -> None:
        self.name = name
        self.sock: socket.socket | None = None
        self.ifindex = 0
        self.ifindex_seen = 0
        self.lladdr: bytes | None = None
        self.last_answer = 0.0
        self.tokens = RATE_PER_S
        self.refilled = 0.0


class NdpSpeaker:
    def __init__(
        self,
        interfaces: Iterable[str],
        on_event: Callable[[NdpEvent], None],
        *,
        netns: str | None = None,
        interval_s: float = INTERVAL_S,
        hold_s: float = HOLD_S,
        state_path: Path | None = None,
    ) -> None:
        self.netns = netns
        self.interval_s = interval_s
        self.core = NdpPeers(hold_s=hold_s)
        self.state_path = state_path
        #: port -> its peer as last learned (this run or, until heard, the state file's)
        self.remembered: dict[str, ipaddress.IPv6Address] = _load(state_path)
        self._on_event = on_event
        self._ports: dict[str, _Port] = {}
        self.sent: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()
        self.received = 0
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        for name in interfaces:
            self.add(name)

    # ---- public ----------------------------------------------------------------------------

    def add(self, name: str) -> None:
        if name not in self._ports:
            self._ports[name] = _Port(name)
            self.core.watch(name)
            if name in self.remembered:
                self.core.prefer(name, self.remembered[name])
            if self._loop is not None:
                self._open(self._ports[name])

    def remove(self, name: str) -> None:
        p = self._ports.pop(name, None)
        if p is not None:
            self._close(p)
            self.core.forget(name)

    def peers(self) -> dict[str, ipaddress.IPv6Address]:
        return self.core.peers()

    def set_established(self, sessions: Mapping[str, ipaddress.IPv6Address]) -> None:
        """The ports whose BGP session is Established (all of them), with its peer address."""
        self.core.set_established(sessions, time.monotonic())

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        for p in self._ports.values():
            self._open(p)
        self._task = asyncio.create_task(self._run(), name="ndp")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for p in self._ports.values():
            self._close(p)
        self._loop = None

    def snapshot(self) -> dict[str, Any]:
        return {
            "ports": self.core.snapshot(),
            "sent": dict(self.sent),
            "received": self.received,
            "dropped": {**self.dropped, **self.core.counters},
        }

    # ---- sockets ---------------------------------------------------------------------------

    def _open(self, p: _Port) -> None:
        if p.sock is not None:
            return
        try:
            with in_netns(self.netns):
                s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
        except OSError as e:
            log.error("ndp_socket_failed", interface=p.name, error=str(e))
            return
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, p.name.encode())
            ifreq = struct.pack("16s16x", p.name.encode())
            p.ifindex = struct.unpack_from("16xi", fcntl.ioctl(s, _SIOCGIFINDEX, ifreq))[0]
            hw = fcntl.ioctl(s, _SIOCGIFHWADDR, ifreq)
            p.lladdr = hw[18:24] if any(hw[18:24]) else None
            s.setsockopt(socket.IPPROTO_ICMPV6, _ICMP6_FILTER, _filter(ndp.RS, ndp.RA))
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVHOPLIMIT, 1)
            # the arrival port of each message: what the kernel queued between socket() and
            # SO_BINDTODEVICE came from every port, and must not teach this one a peer
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVPKTINFO, 1)
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, ndp.HOP_LIMIT)
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, ndp.HOP_LIMIT)
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_LOOP, 0)
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, p.ifindex)
            # solicitations go to all-routers, which a host that does not forward never joins
            mreq = socket.inet_pton(socket.AF_INET6, _ALL_ROUTERS) + struct.pack("@I", p.ifindex)
            with contextlib.suppress(OSError):
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_JOIN_GROUP, mreq)
            s.setblocking(False)
        except OSError:  # no such port yet: retried at the next interval
            s.close()
            return
        if p.sock is None and p.ifindex_seen and p.ifindex_seen != p.ifindex:
            # the port was re-created: a new link, whose peer is learned afresh
            self.core.forget(p.name)
            self.core.watch(p.name)
        p.ifindex_seen = p.ifindex
        p.sock = s
        assert self._loop is not None
        self._loop.add_reader(s.fileno(), self._readable, p)
        self._send(p, ndp.encode_solicit(p.lladdr), _ALL_ROUTERS, "rs")
        self._send(p, ndp.encode_advert(p.lladdr), _ALL_NODES, "ra")
        log.info("ndp_port_open", interface=p.name, ifindex=p.ifindex)

    def _close(self, p: _Port) -> None:
        if p.sock is None:
            return
        if self._loop is not None:
            self._loop.remove_reader(p.sock.fileno())
        p.sock.close()
        p.sock = None

    def _send(self, p: _Port, data: bytes, dst: str, kind: str) -> None:
        if p.sock is None:
            return
        try:
            p.sock.sendto(data, (dst, 0, 0, p.ifindex))
            self.sent[kind] += 1
        except OSError as e:  # port down or deleted: the next interval tries again
            self.sent[f"{kind}_failed"] += 1
            if e.errno == 19:  # ENODEV: the port is gone; reopen later
                self._close(p)

    def _readable(self, p: _Port) -> None:
        for _ in range(64):
            if p.sock is None:
                return
            try:
                data, anc, _, addr = p.sock.recvmsg(1500, _ANC_SPACE)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self._close(p)
                return
            self.received += 1
            self._handle(p, data, anc, addr)

    def _handle(self, p: _Port, data: bytes, anc: list[tuple[int, int, bytes]], addr: Any) -> None:
        now = time.monotonic()
        hops: int | None = None
        arrived: int | None = None
        for lvl, typ, d in anc:
            if lvl != socket.IPPROTO_IPV6:
                continue
            if typ == socket.IPV6_HOPLIMIT and len(d) >= 4:
                hops = struct.unpack("@i", d[:4])[0]
            elif typ == socket.IPV6_PKTINFO and len(d) >= 20:
                arrived = struct.unpack_from("@I", d, 16)[0]
        if arrived != p.ifindex:  # not this port's: it spends none of this port's budget
            self.dropped[ndp.NdpDrop.OTHER_PORT] += 1
            return
        p.tokens = min(RATE_PER_S, p.tokens + (now - p.refilled) * RATE_PER_S)
        p.refilled = now
        if p.tokens < 1.0:
            self.dropped[ndp.NdpDrop.RATE_LIMITED] += 1
            return
        p.tokens -= 1.0
        if hops != ndp.HOP_LIMIT:
            self.dropped[ndp.NdpDrop.HOP_LIMIT] += 1
            return
        if not data:
            self.dropped[ndp.NdpDrop.MALFORMED] += 1
            return
        if data[0] not in (ndp.RS, ndp.RA):
            self.dropped[ndp.NdpDrop.OTHER_TYPE] += 1
            return
        if data[0] == ndp.RS:
            if now - p.last_answer >= MIN_ANSWER_S:
                p.last_answer = now
                self._send(p, ndp.encode_advert(p.lladdr), _ALL_NODES, "ra")
            return
        ra = ndp.decode_advert(data)
        if isinstance(ra, ndp.NdpDrop):
            self.dropped[ra] += 1
            return
        if p.lladdr is not None and ra.lladdr == p.lladdr:
            self.dropped[ndp.NdpDrop.OWN] += 1
            return
        src = ipaddress.IPv6Address(strip_zone(addr[0]))
        if not src.is_link_local:
            self.dropped[ndp.NdpDrop.SOURCE_NOT_LINK_LOCAL] += 1
            return
        ev = self.core.heard(p.name, src, now)
        if ev is not None:
            # a router that just appeared may not have heard us yet (it started after our last
            # advertisement and sent no solicitation): tell it now, not at the next interval
            self._send(p, ndp.encode_advert(p.lladdr), _ALL_NODES, "ra")
            self._emit(ev)

    def _emit(self, ev: NdpEvent) -> None:
        log.info(
            "ndp_peer",
            interface=ev.interface,
            change=ev.change.value,
            peer=str(ev.address),
            previous=None if ev.previous is None else str(ev.previous),
        )
        try:
            self._on_event(ev)
        except Exception:
            log.exception("ndp_on_event_failed")
        if ev.change is not PeerChange.EXPIRED and self.remembered.get(ev.interface) != ev.address:
            self.remembered[ev.interface] = ev.address
            self._save()

    def _save(self) -> None:
        if self.state_path is None:
            return
        peers = {i: str(a) for i, a in sorted(self.remembered.items())}
        try:
            write_private(self.state_path, json.dumps({"version": 1, "peers": peers}) + "\n")
        except OSError as e:  # remembered for this run only: the next start learns afresh
            log.warning("ndp_state_not_saved", path=str(self.state_path), error=str(e))

    def _check(self, p: _Port) -> None:
        """Close ``p``'s socket if its port is gone or is another port now (same name, new
        index); the caller opens it again when the port is there."""
        if p.sock is None:
            return
        try:
            ifreq = struct.pack("16s16x", p.name.encode())
            index = struct.unpack_from("16xi", fcntl.ioctl(p.sock, _SIOCGIFINDEX, ifreq))[0]
        except OSError:
            index = 0
        if index != p.ifindex:
            log.info("ndp_port_changed", interface=p.name, ifindex=index, was=p.ifindex)
            self._close(p)

    async def _run(self) -> None:
        next_ra = time.monotonic() + self.interval_s
        while True:
            wake = min(next_ra, time.monotonic() + CHECK_S)
            deadline = self.core.next_deadline()
            if deadline is not None:
                wake = min(wake, deadline)
            await asyncio.sleep(max(0.0, wake - time.monotonic()))
            now = time.monotonic()
            for ev in self.core.tick(now):
                self._emit(ev)
            for p in self._ports.values():
                self._check(p)
                if p.sock is None:
                    self._open(p)  # sends its first advertisement
            if now < next_ra:
                continue
            next_ra = now + self.interval_s
            for p in self._ports.values():
                if p.sock is None:
                    self._open(p)  # sends its first advertisement
                else:
                    self._send(p, ndp.encode_advert(p.lladdr), _ALL_NODES, "ra")


def _load(path: Path | None) -> dict[str, ipaddress.IPv6Address]:
    """The state file's peers; nothing if there is none, or it is not a regular file of
    root's (or ours), or is malformed (logged): the ports then learn as on a first start."""
    if path is None:
        return {}
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return {}
    except OSError as e:
        log.warning("ndp_state_ignored", path=str(path), error=str(e))
        return {}
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid not in (0, os.geteuid()):
            log.warning("ndp_state_ignored", path=str(path), error="not a file of root's")
            return {}
        raw = f.read(_STATE_MAX + 1)
    out: dict[str, ipaddress.IPv6Address] = {}
    try:
        if len(raw) > _STATE_MAX:
            raise ValueError("too large")
        peers = json.loads(raw)["peers"]
        for port, addr in peers.items():
            a = ipaddress.IPv6Address(addr)
            if isinstance(port, str) and a.is_link_local and a.scope_id is None:
                out[port] = a
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        log.warning("ndp_state_ignored", path=str(path), error=str(e) or type(e).__name__)
        return {}
    return out
