"""glbdlab.topology: the addressing plan (pure) and the fabric's fault helpers (netns)."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

import pytest
from glbdlab.netns import Lab, list_lab_namespaces
from glbdlab.topology import Fabric, leaf_spine

V4 = ipaddress.ip_network("198.18.0.0/15")
V6 = ipaddress.ip_network("2001:db8::/32")


@pytest.mark.parametrize(("s", "n"), [(2, 2), (4, 4), (1, 3), (99, 99)])
def test_addressing_plan_is_unique_and_in_range(s: int, n: int) -> None:
    topo = leaf_spine(s, n)
    assert len(topo.names("spine")) == s and len(topo.names("leaf")) == n
    assert len(topo.names("host")) == n
    addrs: list[str] = []
    for ln in topo.links:
        for ifname in (ln.a_if, ln.b_if):
            assert len(ifname) <= 15
        for cidr in (ln.a_addr4, ln.a_addr6, ln.b_addr4, ln.b_addr6):
            iface = ipaddress.ip_interface(cidr)
            assert iface.ip in (V4 if iface.version == 4 else V6)
            addrs.append(str(iface.ip))
        # both ends of a link share one subnet
        assert (
            ipaddress.ip_interface(ln.a_addr4).network == ipaddress.ip_interface(ln.b_addr4).network
        )
        assert (
            ipaddress.ip_interface(ln.a_addr6).network == ipaddress.ip_interface(ln.b_addr6).network
        )
    for node in topo.nodes:
        if node.role != "host":
            assert node.loopback4 and node.loopback6 and node.router_id
            addrs += [node.loopback4.split("/")[0], node.loopback6.split("/")[0]]
    assert len(addrs) == len(set(addrs))
    assert len(topo.links) == s * n + n
    assert {x.asn for x in topo.nodes if x.role == "spine"} == {65100}
    assert sorted(x.asn or 0 for x in topo.nodes if x.role == "leaf") == list(
        range(65001, 65001 + n)
    )


@pytest.mark.netns
def test_fabric_faults_and_cleanup(netns_lab: Lab) -> None:
    fab = Fabric(leaf_spine(1, 1), lab=netns_lab).build()
    leaf1, spine1 = fab.ns("leaf1"), fab.ns("spine1")
    far = fab.addr("spine1", "leaf1")
    assert fab.check_links() == []
    assert fab.ns("host1").ping("198.18.1.1")  # host -> its leaf's uplink address via default

    fab.shape("leaf1", "spine1", rate="5mbit")
    assert "tbf" in leaf1.run(["tc", "qdisc", "show", "dev", "spine1"]).stdout
    assert "5mbit" in fab.status()
    fab.unshape("leaf1", "spine1")
    assert "tbf" not in leaf1.run(["tc", "qdisc", "show", "dev", "spine1"]).stdout

    fab.drop("leaf1", "spine1")
    assert "LOWER_UP" in leaf1.ip("link", "show", "spine1").stdout  # still up...
    assert not leaf1.ping(far, wait=0.3)  # ...but dropping
    fab.undrop("leaf1", "spine1")
    assert leaf1.ping(far)

    fab.cut("leaf1", "spine1")
    assert "NO-CARRIER" in spine1.ip("link", "show", "leaf1").stdout
    assert not spine1.ping(fab.addr("leaf1", "spine1"), wait=0.3)
    fab.restore("leaf1", "spine1")
    assert spine1.ping(fab.addr("leaf1", "spine1"))

    fab.destroy()
    assert list_lab_namespaces(netns_lab.tag) == []


@pytest.mark.netns
def test_lab_fabric_fixture(lab_fabric: Callable[..., Fabric], netns_lab: Lab) -> None:
    fab = lab_fabric(1, 2, hosts=False)
    assert fab.tag == netns_lab.tag
    assert sorted(n.split("-")[-1] for n in list_lab_namespaces(fab.tag)) == [
        "leaf1",
        "leaf2",
        "spine1",
    ]
    assert fab.ns("leaf2").ping(fab.addr("spine1", "leaf2"))
