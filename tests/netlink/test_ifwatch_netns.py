"""InterfaceWatch against the real kernel: a leaf's host port and its connected subnets follow
the notifications (carrier from the veth peer, addresses, a deleted port), with no polling; an
overrun's dump gives the same tables."""

from __future__ import annotations

import ipaddress

import pytest
from glbdlab.netns import Lab
from glbdlab.waits import until

from glbd.netlink.ifwatch import InterfaceWatch

pytestmark = pytest.mark.netns

N = ipaddress.ip_network


async def test_links_and_connected_subnets_follow_the_kernel(netns_lab: Lab) -> None:
    lab = netns_lab
    leaf, host = lab.netns("leaf"), lab.netns("host")
    lab.veth(leaf, "host0", host, "eth0", a_addr=["198.19.1.1/24", "2001:db8:1::1/64"])
    changes: list[int] = []
    w = InterfaceWatch(lambda: changes.append(1), netns=leaf.name)
    await w.start()
    try:
        assert changes and w.links == {"lo": True, "host0": True}
        assert w.connected["host0"] == {
            N("198.19.1.0/24"),
            N("2001:db8:1::/64"),
            *(n for n in w.connected["host0"] if n.is_link_local),
        }
        assert N("127.0.0.0/8") in w.connected["lo"]

        # the host's side goes down: no carrier on host0, which stays administratively up
        host.link_down("eth0")
        await until(lambda: w.links["host0"] is False, 5, what="host0 down")
        assert N("198.19.1.0/24") in w.connected["host0"]  # the address stays
        host.link_up("eth0")
        await until(lambda: w.links["host0"] is True, 5, what="host0 up")

        leaf.addr_add("host0", "198.19.5.1/24")
        await until(lambda: N("198.19.5.0/24") in w.connected["host0"], 5, what="address")
        leaf.ip("addr", "del", "198.19.5.1/24", "dev", "host0")
        await until(lambda: N("198.19.5.0/24") not in w.connected["host0"], 5, what="gone")

        before = (w.links, w.connected)
        w._on_overrun()  # as if notifications were lost: dumped again
        await until(lambda: w.resyncs == 2, 5, what="the resync")
        assert (w.links, w.connected) == before

        leaf.ip("link", "del", "host0")
        await until(lambda: "host0" not in w.links, 5, what="host0 deleted")
        assert "host0" not in w.connected
    finally:
        w.close()
