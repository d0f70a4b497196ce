"""TCP MD5 (RFC 2385) between a glbd speaker (ExaBGP 5.0.15) and FRR 10.x in namespaces: the
right key establishes and routes flow; a wrong key never establishes, the kernels count the
dropped segments, and glbd says the session is down with a hint that MD5 is configured. The
key never shows in ExaBGP's log (at DEBUG), its stdout, or glbd's log."""

from __future__ import annotations

import base64

import pytest
from bgp_helpers import V4, A, N, frr_bgp_conf, link, speaker_node, wait_for
from glbdlab.frr import FrrInstance
from glbdlab.netns import Lab, Netns
from structlog.testing import capture_logs

from glbd.bgp.ribtypes import NeighborParams, RibParams, Role
from glbd.bgp.speaker import tcp_md5_counters

pytestmark = [pytest.mark.netns, pytest.mark.frr, pytest.mark.slow]

KEY = "Gl6d/md5+key=1;x"


def frr_conf(peer: str, password: str) -> str:
    return frr_bgp_conf(
        65100,
        "10.0.0.11",
        [(peer, 65001)],
        networks=["10.99.0.0/24"],
        neighbor_extra={peer: [f"password {password}"]},
        multipath=False,
    )


def md5_drops(ns: Netns) -> int:
    c = tcp_md5_counters(ns.name)
    return c.get("TCPMD5Failure", 0) + c.get("TCPMD5NotFound", 0)


async def test_md5_right_key_establishes_wrong_key_never(netns_lab: Lab) -> None:
    lab = netns_lab
    spine_ns, leaf_ns = lab.netns("spine1"), lab.netns("leaf1")
    link(lab, spine_ns, "s1-l1", leaf_ns, "l1-s1", "172.16.31")
    spine = FrrInstance(spine_ns, hostname="spine1").start(frr_conf("172.16.31.2", KEY))
    neighbor = NeighborParams(
        A("172.16.31.1"),
        65100,
        A("172.16.31.2"),
        interface="l1-s1",
        hold_time=9,
        passive=False,
        tcp_md5=KEY.encode(),
    )
    params = RibParams(V4("10.0.0.1"), 65001, Role.LOAD_BALANCER, (neighbor,), (N("10.1.0.0/24"),))
    speaker = speaker_node(
        params,
        leaf_ns.name,
        exabgp_log_level="DEBUG",  # the most ExaBGP ever writes: still no key
        md5_hint_after_s=3.0,
    ).speaker
    with capture_logs() as logs:
        try:
            await speaker.start()
            # the right key: up both ways, routes both ways
            await spine.await_bgp_established(["172.16.31.2"], timeout=60)
            await wait_for(lambda: speaker.rib.next_hops(N("10.99.0.0/24")), 30, "FRR's route")
            (row,) = speaker.neighbors_snapshot()
            assert row["state"] == "up" and row["tcp_md5"] is True
            assert "TCP MD5" not in row["last_down_reason"]

            # FRR's key changes: FRR resets the session, and it must never come back
            leaf_drops, spine_drops = md5_drops(leaf_ns), md5_drops(spine_ns)
            seen = len(logs)
            spine.configure("router bgp 65100", "neighbor 172.16.31.2 password wrong-key")
            spine.vtysh("clear bgp ipv4 unicast 172.16.31.2")
            await wait_for(
                lambda: speaker.neighbors_snapshot()[0]["state"] != "up", 30, "session down"
            )
            # both kernels drop the other's signed SYNs: a few rounds of retries each way
            await wait_for(
                lambda: (
                    md5_drops(leaf_ns) >= leaf_drops + 3 and md5_drops(spine_ns) >= spine_drops + 3
                ),
                60,
                "MD5 drops in both kernels",
            )
            await wait_for(
                lambda: any(r["event"] == "bgp_session_not_established" for r in logs[seen:]),
                30,
                "glbd's warning after the session went down",
            )
            assert spine.bgp_peers()["172.16.31.2"] != "Established"
            (row,) = speaker.neighbors_snapshot()
            assert row["state"] != "up"
            assert "TCP MD5 is configured" in row["last_down_reason"]
            assert "TCPMD5Failure" in row["last_down_reason"]
            (warn,) = [r for r in logs[seen:] if r["event"] == "bgp_session_not_established"]
            assert warn["peer"] == "172.16.31.1" and warn["tcp_md5"] is True
            assert warn["kernel_tcpmd5failure"] >= 1
            print(
                f"\nwrong key: leaf drops {md5_drops(leaf_ns) - leaf_drops}, "
                f"spine drops {md5_drops(spine_ns) - spine_drops}; glbd: {row['last_down_reason']}"
            )

            # the right key again: it comes back
            spine.configure("router bgp 65100", f"neighbor 172.16.31.2 password {KEY}")
            await spine.await_bgp_established(["172.16.31.2"], timeout=60)
            await wait_for(lambda: speaker.neighbors_snapshot()[0]["state"] == "up", 30)
            texts = [
                p.read_text(errors="replace")
                for p in (speaker.supervisor.log_path, speaker.supervisor.stdout_path)
                if p.exists()
            ]
            assert texts and "172.16.31.1" in texts[0]  # the DEBUG log did get written
        finally:
            await speaker.stop()
            spine.stop()
    b64 = base64.b64encode(KEY.encode()).decode()
    for text in [*texts, *(repr(r) for r in logs)]:
        for k in (KEY, b64):
            i = text.find(k)
            assert i < 0, text[max(0, i - 300) : i + 100]
