"""The whole GLB loop with real processes: glbd (ExaBGP, BFD, heartbeats, FIB) on a 2-spine x
3-leaf fabric of namespaces, tbf-shaped links, real traffic. The kernel (``ip -j``) is the oracle.

One fabric for the module (start-up costs ~10 s); every test leaves it as it found it.
Three leaves so that "other prefixes are left alone" can be checked: leaf1 reaches leaf2's and
leaf3's prefixes, and congestion toward leaf2 must move only the former.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from glbdlab.demo import NexthopWatcher
from glbdlab.netns import LabError
from glbdlab.nodes import GlbdNode, GlbdOptions, kernel_group_for, start_glbd, stop_all, wait_until
from glbdlab.topology import Fabric, leaf_spine

from glbd.control.protocol import QUERIES as QUERY_COMMANDS

pytestmark = [pytest.mark.netns, pytest.mark.slow]

RATE = 20  # Mbit/s on every fabric link
BFD_MS = 100  # 3 x 100 ms: BGP withdraws ~300 ms after a cut, heartbeats act in ~tens of ms
TOPO = leaf_spine(2, 3)
P = {n: TOPO.node(n).prefix4 for n in TOPO.names("leaf")}
MARK = 990_000  # a nexthop id no daemon uses, for monitor markers


def spine_addr(spine: str, leaf: str) -> str:
    return TOPO.link(spine, leaf).end(spine)[1].split("/")[0]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Fabric, dict[str, GlbdNode]]]:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    run = tmp_path_factory.mktemp("e2e")
    fab = Fabric(TOPO)
    nodes: dict[str, GlbdNode] = {}
    try:
        fab.build()
        for s in TOPO.names("spine"):
            for leaf in TOPO.names("leaf"):
                for a, b in ((s, leaf), (leaf, s)):
                    fab.shape(a, b, rate=f"{RATE}mbit", burst="64kbit", latency="100ms")
        nodes = start_glbd(
            fab,
            Path(run),
            GlbdOptions(
                capacity_mbps=RATE,
                bfd_interval_ms=BFD_MS,
                extra={"leaf": '[metrics]\nlisten = "127.0.0.1:9477"'},
            ),
        )
        for leaf in TOPO.names("leaf"):
            for other, prefix in P.items():
                if other != leaf:
                    wait_until(
                        lambda leaf=leaf, prefix=prefix: (
                            len(kernel_group_for(fab, leaf, prefix)) == 2
                        ),
                        60,
                        what=f"{leaf} group for {prefix}",
                    )
        yield fab, nodes
    finally:
        stop_all(nodes)
        fab.destroy()


def group(fab: Fabric, node: str, prefix: str) -> dict[str, int]:
    return kernel_group_for(fab, node, prefix)


def both_equal(fab: Fabric, node: str, prefix: str) -> bool:
    g = group(fab, node, prefix)
    return len(g) == 2 and len(set(g.values())) == 1


def settle(fab: Fabric) -> None:
    for leaf in TOPO.names("leaf"):
        for other, prefix in P.items():
            if other != leaf:
                wait_until(
                    lambda leaf=leaf, prefix=prefix: both_equal(fab, leaf, prefix),
                    30,
                    what=f"{leaf} equal weights for {prefix}",
                )


# (a)
def test_every_leaf_has_weighted_group_via_both_spines(
    lab: tuple[Fabric, dict[str, GlbdNode]],
) -> None:
    fab, nodes = lab
    for leaf in TOPO.names("leaf"):
        for other, prefix in P.items():
            if other == leaf:
                continue
            g = group(fab, leaf, prefix)
            assert set(g) == {spine_addr("spine1", leaf), spine_addr("spine2", leaf)}, (leaf, g)
    routes = nodes["leaf1"].request("routes")
    r2 = next(r for r in routes if r["prefix"] == P["leaf2"])
    # NNHN validated: each spine says leaf2 (198.18.0.102) lies behind it
    assert {tuple(nh["nnh"]) for nh in r2["next_hops"]} == {(TOPO.node("leaf2").router_id,)}
    assert fab.ns("host1").ping("198.19.2.2", count=5, wait=1.0)

    # spread placement: the flowlet program holds each remote prefix's bucket order
    def placed() -> bool:
        f = nodes["leaf1"].request("flowlet")
        return bool(f.get("layouts") == len(P) - 1 and f.get("layouts_left_out") == 0)

    wait_until(
        placed,
        10,
        what="leaf1's bucket orders in the flowlet program",
    )


def udp_flood(fab: Fabric, src: str, dst_node: str, dst: str) -> tuple[Any, Any]:
    """iperf3 UDP at twice the link rate for 4 s from ``src`` to ``dst``, an address of
    ``dst_node``: (server, client), both running."""
    srv = fab.ns(dst_node).popen(["iperf3", "-s", "-1", "-B", dst])
    wait_until(
        lambda: fab.ns(dst_node).run(["ss", "-Hltn", "sport = :5201"]).stdout.strip(),
        10,
        what="iperf3 server listening",
    )
    cli = fab.ns(src).popen(
        ["iperf3", "-c", dst, "-u", "-b", f"{2 * RATE}M", "-t", "4", "-l", "1200"]
    )
    return srv, cli


# (b)
def test_congestion_two_hops_away_is_prefix_specific(
    lab: tuple[Fabric, dict[str, GlbdNode]],
) -> None:
    fab, nodes = lab
    settle(fab)
    dst = TOPO.link("spine1", "leaf2").end("leaf2")[1].split("/")[0]
    srv, cli = udp_flood(fab, "spine1", "leaf2", dst)
    try:
        g = wait_until(
            lambda: (x := group(fab, "leaf1", P["leaf2"])) and len(set(x.values())) > 1 and x,
            10,
            what="leaf1 weights to move",
        )
        s1, s2 = spine_addr("spine1", "leaf1"), spine_addr("spine2", "leaf1")
        assert g[s1] < g[s2], g
        prof = nodes["leaf1"].request("profiles")
        p2 = next(p for p in prof["profiles"] if P["leaf2"] in p["prefixes"])
        src = {w["next_hop"]: w["source"] for w in p2["weights"]}
        assert src == {s1: "glb", s2: "glb"}
        # leaf3 toward leaf2 is also behind spine1->leaf2: it moves too. The same heartbeats
        # reach every leaf, so once it has moved the other prefixes have been decided as well
        g3 = wait_until(
            lambda: (
                (x := group(fab, "leaf3", P["leaf2"]))
                and x[spine_addr("spine1", "leaf3")] < x[spine_addr("spine2", "leaf3")]
                and x
            ),
            10,
            what="leaf3 weights to move",
        )
        assert g3[spine_addr("spine1", "leaf3")] < g3[spine_addr("spine2", "leaf3")]
        # spine1 sends the flood itself: its ingress counter calls it foreign
        wait_until(
            lambda: (link_row(nodes["spine1"], "leaf2")["foreign_mbps"] or 0) > RATE / 2,
            5,
            what="spine1's foreign rate toward leaf2 to show the flood",
        )
        # other prefixes and the other leaves' own weights stay equal
        assert both_equal(fab, "leaf1", P["leaf3"]), group(fab, "leaf1", P["leaf3"])
        assert both_equal(fab, "leaf2", P["leaf1"]), group(fab, "leaf2", P["leaf1"])
        assert both_equal(fab, "leaf3", P["leaf1"])
    finally:
        cli.wait(15)
        srv.wait(5)
    settle(fab)


def link_row(node: GlbdNode, ifname: str) -> dict[str, Any]:
    rows = node.request("links")
    return next(r for r in rows if r["ifname"] == ifname)


def test_load_the_leaves_steer_does_not_lower_a_band(
    lab: tuple[Fabric, dict[str, GlbdNode]],
) -> None:
    """glbd as shipped counts the foreign load at ingress and takes bands from it: a flood
    from host3 to host2 fills a spine's link to leaf2, but it entered that spine from a leaf
    (it is steered), so the link stays at band 7, its foreign rate near 0, and the leaves'
    weights toward leaf2 equal. With bands from all traffic the band would drop."""
    fab, nodes = lab
    settle(fab)
    for name, node in nodes.items():
        fl = node.request("status")["foreign_load"]
        assert fl["counting"] and not fl["error"], (name, fl)
    srv, cli = udp_flood(fab, "host3", "host2", "198.19.2.2")
    try:
        spines = TOPO.names("spine")
        hot = wait_until(
            lambda: next(
                (s for s in spines if link_row(nodes[s], "leaf2")["load_pct"] >= 90), None
            ),
            10,
            what="a spine's link to leaf2 saturated by the flood",
        )
        reads = 0
        while cli.poll() is None:
            row = link_row(nodes[hot], "leaf2")
            if row["load_pct"] < 90:
                break  # the flood is ending
            assert row["band"] == 7, row
            assert (row["foreign_mbps"] or 0.0) < RATE / 10, row
            assert both_equal(fab, "leaf1", P["leaf2"]), group(fab, "leaf1", P["leaf2"])
            reads += 1
        assert reads >= 3, "the flood ended before the band was read while it lasted"
    finally:
        cli.wait(15)
        srv.wait(5)
    settle(fab)


# (c)
def test_cut_two_hops_away_fails_over_from_heartbeat_before_bgp(
    lab: tuple[Fabric, dict[str, GlbdNode]],
) -> None:
    fab, nodes = lab
    settle(fab)
    s1 = spine_addr("spine1", "leaf1")
    with NexthopWatcher(fab.ns("leaf1").name) as watch:
        t_cut = time.time()
        fab.cut("spine1", "leaf2")
        try:
            # poll the RIB for BGP's withdraw while watching the kernel
            t_withdraw = None
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and t_withdraw is None:
                r2 = next(
                    (r for r in nodes["leaf1"].request("routes") if r["prefix"] == P["leaf2"]), None
                )
                if r2 is None or all(nh["peer"] != s1 for nh in r2["next_hops"]):
                    t_withdraw = time.time()
                time.sleep(0.005)  # poll interval of this wait (it also times the withdraw)
            assert t_withdraw is not None, "BGP never withdrew spine1's path"
            t_out = watch.first_after(t_cut, lambda es: len(es) == 1)
            assert t_out is not None, "leaf1's group never lost spine1"
            assert t_out < t_withdraw, (t_out - t_cut, t_withdraw - t_cut)
            assert s1 not in group(fab, "leaf1", P["leaf2"])
            assert both_equal(fab, "leaf1", P["leaf3"])  # leaf3's prefix keeps spine1
        finally:
            fab.restore("spine1", "leaf2")
    settle(fab)


# (d)
def test_bfd_takes_next_hop_out_within_detection_time(
    lab: tuple[Fabric, dict[str, GlbdNode]],
) -> None:
    fab, nodes = lab
    settle(fab)
    s1 = spine_addr("spine1", "leaf1")
    detect = 3 * BFD_MS / 1e3
    with NexthopWatcher(fab.ns("leaf1").name) as watch:
        t0 = time.time()
        fab.drop("leaf1", "spine1")  # link stays up, packets dropped
        try:
            wait_until(
                lambda: (
                    s1 not in group(fab, "leaf1", P["leaf2"])
                    and s1 not in group(fab, "leaf1", P["leaf3"])
                ),
                5,
                what="spine1 out of all of leaf1's groups",
            )
            t_out = watch.first_after(t0, lambda es: len(es) == 1)
            assert t_out is not None
            # detection time + scheduling slack (the packet in flight at t0 counts)
            assert t_out - t0 <= detect + 0.15, t_out - t0
            bfd = nodes["leaf1"].request("bfd")
            st = {s["peer"]: s["state"] for s in bfd}
            assert st[s1] == "down"
        finally:
            fab.undrop("leaf1", "spine1")
    wait_until(
        lambda: {s["peer"]: s["state"] for s in nodes["leaf1"].request("bfd")}[s1] == "up",
        15,
        what="BFD back up",
    )
    settle(fab)


# (e)
def test_silent_spine_falls_back_to_dlb_within_hold_time(
    lab: tuple[Fabric, dict[str, GlbdNode]],
) -> None:
    fab, nodes = lab
    settle(fab)
    s2 = spine_addr("spine2", "leaf1")
    ns = fab.ns("spine2")
    rules = (
        "add table inet glbtest\n"
        "add chain inet glbtest out { type filter hook output priority 0; }\n"
        "add rule inet glbtest out udp dport 6149 drop\n"
    )
    ns.run(["nft", "-f", "-"], input=rules)
    t0 = time.monotonic()
    try:

        def spine2_source() -> str | None:
            prof = nodes["leaf1"].request("profiles")
            p2 = next(p for p in prof["profiles"] if P["leaf2"] in p["prefixes"])
            return next(w["source"] for w in p2["weights"] if w["next_hop"] == s2)

        wait_until(lambda: spine2_source() == "dlb", 5, interval=0.01, what="DLB fallback")
        took = time.monotonic() - t0
        hold = 3 * 0.020  # hold_multiplier x advertised interval
        assert took <= hold + 0.5, took  # + polling and the last heartbeat in flight
        assert len(group(fab, "leaf1", P["leaf2"])) == 2  # still used, on local quality
    finally:
        ns.run(["nft", "delete", "table", "inet", "glbtest"])
    wait_until(lambda: spine2_source() == "glb", 5, what="GLB again")


def _children(pid: int) -> dict[int, str]:
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = (d / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == pid:
                out[int(d.name)] = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    return out


# (g)
def test_exabgp_crash_restarts_without_touching_fib(
    lab: tuple[Fabric, dict[str, GlbdNode]],
) -> None:
    fab, nodes = lab
    settle(fab)
    leaf1 = nodes["leaf1"]
    assert leaf1.proc is not None
    exa = [p for p, cmd in _children(leaf1.proc.pid).items() if "exabgp" in cmd]
    assert len(exa) == 1, _children(leaf1.proc.pid)
    before = {p: group(fab, "leaf1", p) for p in (P["leaf2"], P["leaf3"])}
    os.kill(exa[0], signal.SIGKILL)
    t0 = time.monotonic()
    seen_down = False
    while time.monotonic() - t0 < 30:
        for p, g in before.items():
            assert group(fab, "leaf1", p) == g, "FIB touched while ExaBGP restarted"
        st = {n["peer"]: n["state"] for n in leaf1.request("neighbors")}
        seen_down |= any(s != "up" for s in st.values())
        new = [p for p, cmd in _children(leaf1.proc.pid).items() if "exabgp" in cmd]
        if new and new != exa and all(s == "up" for s in st.values()):
            break
        time.sleep(0.05)  # poll interval: the FIB is checked all along the restart
    else:
        raise AssertionError("ExaBGP not restarted / sessions not back within 30 s")
    assert leaf1.running()
    settle(fab)


# (h)
def test_bad_config_on_sighup_is_rejected_and_daemon_keeps_running(
    lab: tuple[Fabric, dict[str, GlbdNode]],
) -> None:
    fab, nodes = lab
    leaf1 = nodes["leaf1"]
    good = leaf1.config.read_text()
    leaf1.config.write_text(good.replace("[bgp]", "[bgp]\nbogus_key = 1"))
    try:
        leaf1.signal(signal.SIGHUP)
        st = wait_until(
            lambda: (s := leaf1.request("status"))["last_reload"] and s, 10, what="reload result"
        )
        assert st["last_reload"]["ok"] is False
        assert "bgp.bogus_key: unknown key" in st["last_reload"]["message"]
        assert st["state"] == "running" and leaf1.running()
        assert len(group(fab, "leaf1", P["leaf2"])) == 2
    finally:
        leaf1.config.write_text(good)


# (f) last: it restarts leaf1
def test_kill9_and_restart_keeps_and_readopts_kernel_state(
    lab: tuple[Fabric, dict[str, GlbdNode]],
) -> None:
    fab, nodes = lab
    settle(fab)
    leaf1 = nodes["leaf1"]
    ns = fab.ns("leaf1")

    def nh_ids() -> list[tuple[object, object, object, object]]:
        """Each nexthop's id, members, type and idle timer (a resilient group's follows the
        flowlet timeout, which a restarted glbd resumes)."""
        rows = json.loads(ns.ip("-j", "nexthop", "show").stdout)
        return [
            (r.get("id"), r.get("group"), r.get("type"), r.get("resilient", {}).get("idle_timer"))
            for r in rows
        ]

    ids_before = nh_ids()
    before = {p: group(fab, "leaf1", p) for p in (P["leaf2"], P["leaf3"])}
    mon = subprocess.Popen(
        ns.argv(["ip", "-o", "monitor", "nexthop", "route"]),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(mon.stdout or ()), daemon=True)
    reader.start()

    def subscribed() -> bool:
        """A nexthop nobody else uses, added and deleted until the monitor prints it: from
        then on it prints every event."""
        if not any(ln.startswith(f"Deleted id {MARK} ") for ln in seen):
            ns.ip("nexthop", "add", "id", str(MARK), "blackhole")
            ns.ip("nexthop", "del", "id", str(MARK))
        return any(ln.startswith(f"Deleted id {MARK} ") for ln in seen)

    try:
        wait_until(subscribed, 10, interval=0.2, what="ip monitor subscribed")
        start = len(seen)
        leaf1.kill9()
        for _ in range(20):  # the stimulus: 1 s with glbd dead; the kernel keeps forwarding
            for p, g in before.items():
                assert group(fab, "leaf1", p) == g
            time.sleep(0.05)  # the stimulus: time with glbd dead
        leaf1.start()
        leaf1.wait_ready()
        wait_until(
            lambda: all(n["state"] == "up" for n in leaf1.request("neighbors")),
            30,
            what="leaf1 sessions back",
        )

        def owns_again() -> bool:  # a FIB sync since the restart re-learned what it adopted
            prof = leaf1.request("profiles")
            return prof["last_sync"] is not None and not any(prof["fib"]["stale_held"].values())

        wait_until(owns_again, 30, what="leaf1's first FIB sync after the restart")
        for p, g in before.items():
            assert group(fab, "leaf1", p) == g
        assert nh_ids() == ids_before  # adopted, not re-created
    finally:
        mon.terminate()
        mon.wait(timeout=5)
        reader.join(timeout=5)
    deleted = [ln for ln in seen[start:] if ln.startswith("Deleted") and f"id {MARK} " not in ln]
    assert not deleted, deleted
    with contextlib.suppress(LabError):
        settle(fab)


# reload: apply only what changed, without disturbing the rest
def test_reload_removes_and_adds_a_neighbor_and_retimes_bfd_without_disturbing_others(
    lab: tuple[Fabric, dict[str, GlbdNode]],
) -> None:
    fab, nodes = lab
    settle(fab)
    leaf1 = nodes["leaf1"]
    s1, s2 = spine_addr("spine1", "leaf1"), spine_addr("spine2", "leaf1")
    good = leaf1.config.read_text()

    def peers() -> dict[str, dict[str, object]]:
        return {n["peer"]: n for n in leaf1.request("neighbors")}

    def bfd() -> dict[str, dict[str, object]]:
        return {s["peer"]: s for s in leaf1.request("bfd")}

    up_before = float(peers()[s1]["uptime_s"])  # type: ignore[arg-type]
    flaps_before = bfd()[s1]["flaps"]
    # drop the spine2 neighbor block from leaf1's config
    blocks = good.split("\n\n")
    without = "\n\n".join(b for b in blocks if f'address = "{s2}"' not in b)
    assert without != good
    leaf1.config.write_text(without)
    try:
        res = leaf1.request("reload")
        assert res["ok"], res
        assert res["changes"]["neighbors_removed"] == [s2]
        wait_until(lambda: s2 not in peers() and s2 not in bfd(), 10, what="spine2 gone")
        wait_until(
            lambda: set(group(fab, "leaf1", P["leaf2"])) == {s1},
            10,
            what="leaf1 group via spine1 only",
        )
        # retime BFD toward spine1 while it is Up: Poll/Final, no flap
        leaf1.config.write_text(
            without.replace(f"min_tx_ms = {BFD_MS}", "min_tx_ms = 150").replace(
                f"min_rx_ms = {BFD_MS}", "min_rx_ms = 150"
            )
        )
        res = leaf1.request("reload")
        assert res["ok"] and res["changes"]["sections"] == ["bfd"], res
        wait_until(
            lambda: bfd()[s1]["local_desired_min_tx_us"] == 150_000, 5, what="new BFD timers"
        )
        assert bfd()[s1]["state"] == "up" and bfd()[s1]["flaps"] == flaps_before
    finally:
        leaf1.config.write_text(good)
    res = leaf1.request("reload")
    assert res["ok"] and res["changes"]["neighbors_added"] == [s2], res
    wait_until(lambda: peers().get(s2, {}).get("state") == "up", 30, what="spine2 back")
    settle(fab)
    # the spine1 session was never reset through all of it
    assert float(peers()[s1]["uptime_s"]) > up_before  # type: ignore[arg-type]
    assert bfd()[s1]["flaps"] == flaps_before


# glbctl --json contract: the key structure of every command is frozen
CONTRACT = Path(__file__).resolve().parent.parent / "vectors" / "glbctl_contract.json"
QUERIES = QUERY_COMMANDS
# objects keyed by data (interface names, node ids, drop reasons), not by field names
MAPS = {
    "quality.local",
    "quality.remote",
    "counters",
    "drops",
    "api_dropped",
    "transport_errors",
    "counters.*",
    "engine",
    "changes",
    "capacity_mbps",
}
SNAKE = re.compile(r"^[a-z][a-z0-9_]*$")


def shape(v: object, path: str = "") -> object:
    """Keys (recursively) with values replaced by type names; data-keyed maps collapsed."""
    leaf = path.rsplit(".", 1)[-1]
    if isinstance(v, dict):
        if path in MAPS or leaf in MAPS or any(path.endswith("." + m) for m in MAPS):
            inner = [shape(x, path + ".*") for x in v.values()]
            same = inner and all(i == inner[0] for i in inner)
            return {"<map>": inner[0] if same else "null"}  # empty/mixed: any value shape
        return {k: shape(x, f"{path}.{k}" if path else k) for k, x in sorted(v.items())}
    if isinstance(v, list):
        items = [shape(x, path) for x in v]
        dicts = [i for i in items if isinstance(i, dict)]
        if dicts:  # union of row keys: rows of one table may differ in optional keys
            merged: dict[str, object] = {}
            for d in dicts:
                merged.update(d)
            return [dict(sorted(merged.items()))]
        return ["scalar"] if items else []
    return "null" if v is None else "scalar"


def same_shape(want: object, got: object, path: str = "") -> list[str]:
    """Differences between two shapes; "null" (an optional object not present now) matches
    anything, an empty list matches any list."""
    if want == "null" or got == "null":
        return []
    if isinstance(want, dict) and isinstance(got, dict):
        out = [f"{path}.{k}: missing" for k in want.keys() - got.keys()]
        out += [f"{path}.{k}: new key" for k in got.keys() - want.keys()]
        for k in want.keys() & got.keys():
            out += same_shape(want[k], got[k], f"{path}.{k}")
        return out
    if isinstance(want, list) and isinstance(got, list):
        return same_shape(want[0], got[0], path + "[]") if want and got else []
    return [] if want == got else [f"{path}: {want!r} -> {got!r}"]


def keys_of(v: object) -> list[str]:
    if isinstance(v, dict):
        out = [k for k in v if k not in ("<map>",)]
        return out + [k for x in v.values() for k in keys_of(x)]
    if isinstance(v, list):
        return [k for x in v for k in keys_of(x)]
    return []


def test_glbctl_json_contract(lab: tuple[Fabric, dict[str, GlbdNode]]) -> None:
    fab, nodes = lab
    settle(fab)
    got = {
        f"{role}.{cmd}": shape(nodes[n].request(cmd), cmd)
        for role, n in (("leaf", "leaf1"), ("spine", "spine1"))
        for cmd in QUERIES
    }
    bad = sorted({k for s in got.values() for k in keys_of(s) if not SNAKE.match(k)})
    assert not bad, f"keys that are not snake_case: {bad}"
    if os.environ.get("GLBD_UPDATE_CONTRACT") == "1":
        CONTRACT.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(CONTRACT.read_text())
    diffs = [d for k in want for d in same_shape(want[k], got.get(k), k)]
    assert not diffs, (
        "glbctl --json changed shape (if on purpose, rerun with GLBD_UPDATE_CONTRACT=1 and say "
        "so in the commit):\n" + "\n".join(diffs)
    )


def test_metrics_endpoint_and_glbctl_watch(lab: tuple[Fabric, dict[str, GlbdNode]]) -> None:
    fab, nodes = lab
    settle(fab)
    with fab.ns("leaf1").entered():
        body = urllib.request.urlopen("http://127.0.0.1:9477/metrics", timeout=5).read().decode()
    s1, s2 = spine_addr("spine1", "leaf1"), spine_addr("spine2", "leaf1")
    for want in (
        f'glbd_bfd_up{{interface="spine1",peer="{s1}"}} 1.0',
        f'glbd_bgp_peer_up{{interface="spine2",peer="{s2}"}} 1.0',
        'glbd_link_band{ifname="spine1"} 7.0',
        'glbd_link_reported_capacity_bytes_per_second{ifname="spine1"} ',
        "glbd_loop_lag_seconds ",
        "# TYPE glbd_heartbeats_accepted_total counter",
    ):
        assert want in body, want
    assert re.search(
        r'glbd_weight\{next_hop="198\.18\.1\.0",profile="pf-[0-9a-f]+",'
        r'source="glb"\} 255\.0',
        body,
    ), body
    assert re.search(r'glbd_profile_fib_diff\{profile="pf-[0-9a-f]+"\} 0\.0', body), body
    w = subprocess.run(
        [
            sys.executable,
            "-m",
            "glbd.cli.glbctl",
            "--socket",
            str(nodes["leaf1"].socket),
            "watch",
            "--count",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert w.returncode == 0, w.stderr
    assert "glbd watch" in w.stdout and "pf-" in w.stdout and "spine1" in w.stdout
