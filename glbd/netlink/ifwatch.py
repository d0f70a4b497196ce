"""The interfaces of a namespace as netlink reports them: name -> oper-up, and each interface's
connected subnets, kept from one dump and then from RTNLGRP_LINK, RTNLGRP_IPV4_IFADDR and
RTNLGRP_IPV6_IFADDR notifications (no polling). ``on_change()`` is called on the loop after
each notification or resynchronisation that changed either table; :mod:`glbd.bgp.origin`
decides what that means for origination.

Oper-up is the kernel's ``IFF_RUNNING`` with ``IFF_UP``: administratively up and operationally up
(carrier, not dormant), so a host port whose cable (or veth peer) goes down is down here.

Consistency: the event socket subscribes before the dump is asked for, and every notification
received while a dump runs is applied again, in order, over the dump's tables: each object's last
notification is its newest state, and an object without one is as the dump saw it. A receive
queue overrun (notifications lost) starts such a dump again.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Callable

import structlog

from glbd.netlink import const as c
from glbd.netlink.codec import DecodeError, IfAddrMsg, IfInfoMsg, Message
from glbd.netlink.rtnl import link_dump
from glbd.netlink.rtsocket import NetlinkSocket

__all__ = ["InterfaceWatch", "link_up"]

log = structlog.get_logger(__name__)

Prefix = ipaddress.IPv4Network | ipaddress.IPv6Network
#: an address as the kernel keys it: (ifindex, family, local address, prefix length)
_AddrKey = tuple[int, int, str, int]


def link_up(flags: int) -> bool:
    """Administratively and operationally up (``ip link``: ``UP`` with ``LOWER_UP``/running)."""
    return bool(flags & c.IFF_UP) and bool(flags & c.IFF_RUNNING)


async def dump_links_and_addresses(netns: str | None) -> tuple[list[Message], list[Message]]:
    """Every link (without statistics) and every address in ``netns``, one dump each."""
    sock = await NetlinkSocket.open(netns=netns)
    try:
        links = await sock.dump(link_dump(skip_stats=True))
        addrs = await sock.dump(
            Message(c.RTM_GETADDR, c.NLM_F_REQUEST | c.NLM_F_DUMP, header=IfAddrMsg())
        )
    finally:
        sock.close()
    return links, addrs


class InterfaceWatch:
    """``links`` (name -> oper-up) and ``connected`` (name -> subnets) of ``netns``, current
    from :meth:`start` until :meth:`close`."""

    def __init__(self, on_change: Callable[[], None], *, netns: str | None = None) -> None:
        self._on_change = on_change
        self.netns = netns
        self._links: dict[int, tuple[str, bool]] = {}
        self._addrs: dict[_AddrKey, Prefix] = {}
        self._events: NetlinkSocket | None = None
        #: notifications received while a dump runs (None: no dump running)
        self._replay: list[Message] | None = None
        self._resync_task: asyncio.Task[None] | None = None
        self.events = 0
        self.resyncs = 0

    # ---- the tables ------------------------------------------------------------------------

    @property
    def links(self) -> dict[str, bool]:
        return {name: up for name, up in self._links.values()}

    @property
    def connected(self) -> dict[str, frozenset[Prefix]]:
        out: dict[str, set[Prefix]] = {}
        for (index, _fam, _addr, _plen), net in self._addrs.items():
            link = self._links.get(index)
            if link is not None:
                out.setdefault(link[0], set()).add(net)
        return {name: frozenset(nets) for name, nets in out.items()}

    # ---- life cycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Subscribe, then dump: the tables are complete when this returns."""
        self._events = await NetlinkSocket.open(
            netns=self.netns,
            groups=(c.RTNLGRP_LINK, c.RTNLGRP_IPV4_IFADDR, c.RTNLGRP_IPV6_IFADDR),
            on_event=self._on_event,
            on_overrun=self._on_overrun,
        )
        try:
            await self._resync()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._resync_task is not None:
            self._resync_task.cancel()
            self._resync_task = None
        if self._events is not None:
            self._events.close()
            self._events = None

    async def _resync(self) -> None:
        """Dump links and addresses, then replay what arrived meanwhile; notify once."""
        self._replay = []
        try:
            links, addrs = await dump_links_and_addresses(self.netns)
            self._links.clear()
            self._addrs.clear()
            for m in (*links, *addrs):
                self._apply(m)
            for m in self._replay:
                self._apply(m)
        finally:
            self._replay = None
        self.resyncs += 1
        self._on_change()

    def _on_overrun(self) -> None:
        log.warning("ifwatch_overrun", note="notifications lost: dumping the interfaces again")
        if self._resync_task is None or self._resync_task.done():
            self._resync_task = asyncio.get_running_loop().create_task(self._resync_logged())

    async def _resync_logged(self) -> None:
        try:
            await self._resync()
        except Exception as e:  # the next overrun (or a restart) tries again
            log.error("ifwatch_resync_failed", error=repr(e))

    # ---- notifications ---------------------------------------------------------------------

    def _on_event(self, msg: Message) -> None:
        self.events += 1
        if self._replay is not None:  # a dump runs: it notifies once, when it is complete
            self._replay.append(msg)
            self._apply(msg)
        elif self._apply(msg):
            self._on_change()

    def _apply(self, msg: Message) -> bool:
        """Take one link or address message into the tables; True if they changed."""
        try:
            h = msg.header
            if isinstance(h, IfInfoMsg):
                return self._apply_link(msg, h)
            if isinstance(h, IfAddrMsg):
                return self._apply_addr(msg, h)
        except (DecodeError, ValueError) as e:
            log.warning("ifwatch_undecodable", type=msg.type, error=str(e))
        return False

    def _apply_link(self, msg: Message, h: IfInfoMsg) -> bool:
        old = self._links.get(h.index)
        if msg.type == c.RTM_DELLINK:
            if old is None:
                return False
            del self._links[h.index]
            for key in [k for k in self._addrs if k[0] == h.index]:
                del self._addrs[key]
            return True
        if msg.type != c.RTM_NEWLINK:
            return False
        name_a = msg.attr(c.IFLA_IFNAME)
        name = name_a.as_str() if name_a is not None else (old[0] if old else "")
        if not name:
            return False
        new = (name, link_up(h.flags))
        if new == old:
            return False
        self._links[h.index] = new
        return True

    def _apply_addr(self, msg: Message, h: IfAddrMsg) -> bool:
        remote = msg.attr(c.IFA_ADDRESS)
        local = msg.attr(c.IFA_LOCAL) or remote
        if local is None:
            return False
        own = local.as_addr()
        key = (h.index, h.family, str(own), h.prefixlen)
        if msg.type == c.RTM_DELADDR:
            return self._addrs.pop(key, None) is not None
        if msg.type != c.RTM_NEWADDR:
            return False
        flags_a = msg.attr(c.IFA_FLAGS)
        flags = flags_a.as_u32() if flags_a is not None else h.flags
        if flags & c.IFA_F_DADFAILED:
            return self._addrs.pop(key, None) is not None
        # a point-to-point address reaches its peer's subnet
        on_link = (remote or local).as_addr()
        net = ipaddress.ip_network(f"{on_link}/{h.prefixlen}", strict=False)
        if self._addrs.get(key) == net:
            return False
        self._addrs[key] = net
        return True
