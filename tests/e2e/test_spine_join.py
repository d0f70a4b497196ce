"""A spine that joins a running glbd fabric drops nothing.

A 2 x 2 leaf-spine fabric with glbd on both leaves and spine2, then spine1's glbd starts
fresh. leaf1 puts spine1 into its group as soon as spine1 advertises host2's prefix, and at
that instant eight UDP streams start host1 -> host2 (eight source ports, hashed over the
spines). spine1 must forward what it advertises from then on: a fresh start has no adopted
kernel state to hold for (``FibSync.adopted``), and a hold would drop every stream hashed to
spine1 until it ended.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import pytest
from glbdlab.netns import Lab
from glbdlab.nodes import GlbdNode, GlbdOptions, kernel_group_for, start_glbd, stop_all, wait_until
from glbdlab.topology import Fabric, leaf_spine

from tests.seqtraffic import Stream

pytestmark = [pytest.mark.netns, pytest.mark.slow]

TOPO = leaf_spine(2, 2)
P2 = str(TOPO.node("leaf2").prefix4)
STREAMS = 8


def tx_packets(fab: Fabric, node: str, ifname: str) -> int:
    (link,) = json.loads(fab.ns(node).ip("-j", "-s", "link", "show", "dev", ifname).stdout)
    return int(link["stats64"]["tx"]["packets"])


def test_a_fresh_spine_forwards_what_it_advertises(netns_lab: Lab, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    fab = Fabric(TOPO, lab=netns_lab).build()
    # leaf2 without flowlets, which would set the hash policy themselves (the warning below)
    opts = GlbdOptions(extra={"leaf2": "[flowlet]\nenabled = false"})
    nodes = start_glbd(fab, tmp_path, opts, names=["leaf1", "leaf2", "spine2"])
    spine1 = GlbdNode(fab, "spine1", tmp_path, GlbdOptions())
    nodes["spine1"] = spine1
    try:
        s2 = fab.addr("spine2", "leaf1")
        wait_until(lambda: set(kernel_group_for(fab, "leaf1", P2)) == {s2}, 90, what="via spine2")
        h1, h2 = fab.ns("host1"), fab.ns("host2")
        a2 = fab.addr("host2", "leaf2")
        # hash on ports (what a fabric's routers are set to; glbd writes it with flowlets on)
        fab.ns("leaf1").run(["sysctl", "-qw", "net.ipv4.fib_multipath_hash_policy=1"])
        # the fabric through spine2 works both ways, every neighbour on the way resolved
        wait_until(lambda: h1.ping(a2), 60, what="host1 reaches host2")
        spine1.start()
        spine1.wait_ready(60)
        # the instant leaf1 sends through spine1, eight new streams start
        wait_until(lambda: len(kernel_group_for(fab, "leaf1", P2)) == 2, 60, what="spine1 in")
        with contextlib.ExitStack() as stack:
            streams = [
                stack.enter_context(Stream(h1, h2, a2, port=47_100 + i)) for i in range(STREAMS)
            ]
            wait_until(lambda: all(s.received() > 1500 for s in streams), 30, what="traffic")
            for s in streams:
                s.stop_sending()
        results = [s.result() for s in streams]
        print("\nspine1 joins:\n" + "\n".join(f"  {r}" for r in results))
        assert spine1.events("fib_started")[0]["adopted"] == 0
        # the streams did spread: spine1 forwarded some of them to leaf2
        assert tx_packets(fab, "spine1", "leaf2") > 1000
        assert all(r["lost"] == 0 for r in results), results
        # a load balancer started on address-only hashing (and no flowlets) says so; a spine has
        # nothing to say
        (warn,) = nodes["leaf2"].events("fib_hash_policy_l3_only")
        assert warn["sysctl"] == "net.ipv4.fib_multipath_hash_policy"
        assert not nodes["spine2"].events("fib_hash_policy_l3_only")
    finally:
        stop_all(nodes)
