"""route_wire: the one-pack IPv4 fast path and the general path write the same requests as
the generic netlink encoder."""

from __future__ import annotations

import socket

import pytest

from glbd.base.prefix import network
from glbd.fib.fibmsg import CREATE_FLAGS, REPLACE_FLAGS, route_wire
from glbd.netlink import const as c
from glbd.netlink.codec import Attr, Message, RtMsg


def expected(prefix: str, metric: int, nhid: int | None, table: int, replace: bool) -> bytes:
    net = network(prefix)
    fam = socket.AF_INET if net.version == 4 else socket.AF_INET6
    attrs = []
    if net.prefixlen:
        attrs.append(Attr.addr(c.RTA_DST, net.network_address))
    attrs.append(Attr.u32(c.RTA_TABLE, table))
    if nhid is None:
        mtype, flags, scope, rtype = c.RTM_DELROUTE, c.NLM_F_REQUEST, 255, 0
    else:
        attrs.append(Attr.u32(c.RTA_NH_ID, nhid))
        mtype, scope, rtype = c.RTM_NEWROUTE, c.RT_SCOPE_UNIVERSE, c.RTN_UNICAST
        flags = REPLACE_FLAGS if replace else CREATE_FLAGS
    if metric:
        attrs.append(Attr.u32(c.RTA_PRIORITY, metric))
    hdr = RtMsg(fam, net.prefixlen, 0, 0, table if table < 256 else 0, 200, scope, rtype, 0)
    return Message(mtype, flags, 0, 0, hdr, tuple(attrs)).encode()


@pytest.mark.parametrize("prefix", ["203.0.113.0/24", "198.18.16.7/32", "10.0.0.0/8",
                                    "0.0.0.0/0", "2001:db8::/48", "::/0"])  # fmt: skip
@pytest.mark.parametrize("metric", [0, 20])
@pytest.mark.parametrize("nhid", [None, 7, 0xFFFFFFFF])
@pytest.mark.parametrize("table", [254, 1000])
@pytest.mark.parametrize("replace", [False, True])
def test_same_bytes_as_the_generic_encoder(
    prefix: str, metric: int, nhid: int | None, table: int, replace: bool
) -> None:
    got = route_wire(network(prefix), metric, nhid, table=table, protocol=200, replace=replace)
    assert got == expected(prefix, metric, nhid, table, replace)
