"""Issue 2 "done when": the default lab fabric with FRR 10.x on the spines and plain namespaces on
the leaves comes up, its veth links pass traffic, and nothing is left behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from glbdlab.frr import FrrInstance, fabric_bgp_config, start_fabric_frr
from glbdlab.netns import list_lab_namespaces
from glbdlab.topology import Fabric, leaf_spine

pytestmark = [pytest.mark.netns, pytest.mark.frr]


def _frr_dirs(insts: dict[str, FrrInstance]) -> list[Path]:
    return [d for i in insts.values() for d in (i.etc_dir, i.run_dir, i.log_dir)]


def test_default_fabric_frr10_spines_links_pass_traffic_nothing_left() -> None:
    with Fabric() as fab:  # default: 2 spines x 2 leaves + a host per leaf
        tag = fab.tag
        assert len(list_lab_namespaces(tag)) == 6
        frr = start_fabric_frr(fab, fab.topo.names("spine"))
        for name, inst in frr.items():
            assert all(inst.alive().values()), name
            version = inst.vtysh_json("show version json") or {}
            text = inst.vtysh("show version")
            assert "FRRouting 10." in text, (name, version)
            # each spine is configured for both leaves (which run no BGP here)
            assert set(inst.bgp_peers()) == {fab.addr(leaf, name) for leaf in ("leaf1", "leaf2")}
        assert fab.check_links() == []  # ping across every link, IPv4 and IPv6
        assert fab.ns("host1").ping("198.19.1.1")
        pids = [p.pid for i in frr.values() for p in i.procs.values()]
        dirs = _frr_dirs(frr)
    assert list_lab_namespaces(tag) == []
    assert not any(os.path.exists(f"/proc/{pid}") and _not_zombie(pid) for pid in pids)
    assert not any(d.exists() for d in dirs)


def _not_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except OSError:
        return False


def test_two_concurrent_fabrics_do_not_clash() -> None:
    with Fabric(leaf_spine(1, 1)) as one, Fabric(leaf_spine(1, 1)) as two:
        assert one.tag != two.tag
        assert not set(list_lab_namespaces(one.tag)) & set(list_lab_namespaces(two.tag))
        f1 = start_fabric_frr(one, ["spine1", "leaf1"])
        f2 = start_fabric_frr(two, ["spine1", "leaf1"])
        assert f1["spine1"].name != f2["spine1"].name  # FRR pathspaces differ too
        for inst in (*f1.values(), *f2.values()):
            inst.wait_bgp_established(timeout=60)
        # identical addresses in both fabrics, yet each has its own session and routes
        assert one.check_links(v6=False) == [] and two.check_links(v6=False) == []
        f2["leaf1"].stop()
        assert f1["leaf1"].bgp_peers() == {"198.18.1.0": "Established"}
    assert list_lab_namespaces(one.tag) == list_lab_namespaces(two.tag) == []


def test_frr10_spine_with_host_frr84_leaf() -> None:
    """Legacy interop: the same API runs the host's FRR 8.4 (bookworm) next to FRR 10.x."""
    if not Path("/usr/lib/frr/bgpd").exists():
        pytest.skip("the host's FRR 8.4 is not installed: apt-get install frr")
    with Fabric(leaf_spine(1, 1, hosts=False)) as fab:
        spine = FrrInstance(fab.ns("spine1")).start(fabric_bgp_config(fab, "spine1"))
        leaf = FrrInstance(fab.ns("leaf1"), build="host").start(
            fabric_bgp_config(fab, "leaf1", legacy=True)
        )
        assert leaf.build.major == 8 and spine.build.major >= 10
        leaf.wait_bgp_established(timeout=60)
        spine.wait_bgp_established(timeout=60)
        leaf.wait_bfd_up(timeout=60)
        leaf.wait_route("198.18.0.1/32", timeout=60)  # spine1's loopback, learned over eBGP
        tag = fab.tag
    assert list_lab_namespaces(tag) == []
