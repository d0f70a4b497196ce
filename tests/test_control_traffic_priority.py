"""BFD and heartbeat packets are network control: DSCP CS6 and skb priority 7, so they are not
queued behind the data on the link they watch (the fabric benchmark lost a route without it)."""

from __future__ import annotations

import random
import socket

import pytest
from glbdlab.netns import Lab

from bfd import transport as bfd_transport
from heartbeat import transport as hb_transport

pytestmark = pytest.mark.netns


def _marks(s: socket.socket, family: int) -> tuple[int, int]:
    tos = (
        s.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS)
        if family == socket.AF_INET6
        else s.getsockopt(socket.IPPROTO_IP, socket.IP_TOS)
    )
    return tos, s.getsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY)


def test_bfd_and_heartbeat_sockets_are_marked_cs6_priority_7(netns_lab: Lab) -> None:
    a, _b = netns_lab.pair()
    ifname = netns_lab.links[0].a_if
    with a.entered():
        tx, _port = bfd_transport.open_tx_socket(
            ifname, socket.AF_INET, None, set(), random.Random(1)
        )
        hb = hb_transport.open_socket(ifname)
        try:
            assert _marks(tx, socket.AF_INET) == (0xC0, 7)
            assert _marks(hb, socket.AF_INET) == (0xC0, 7)
        finally:
            tx.close()
            hb.close()
