"""glbd speakers (ExaBGP 5.0.15 under supervision) in namespaces: leaf1 - spine - leaf2."""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import replace

import pytest
from bgp_helpers import A, Node, make_node, speaker_node, wait_for
from glbdlab.netns import Lab

from glbd.bgp.ribtypes import NeighborParams, Role
from glbd.bgp.speaker import NextHopsChanged, SpeakerLost, SpeakerReady

pytestmark = [pytest.mark.netns, pytest.mark.slow]


def topology(lab: Lab, **spine_kw: object) -> tuple[Node, Node, Node]:
    l1, s1, l2 = lab.netns("leaf1"), lab.netns("spine1"), lab.netns("leaf2")
    lab.veth(l1, "l1-s1", s1, "s1-l1", a_addr="172.16.11.1/24", b_addr="172.16.11.2/24")
    lab.veth(l2, "l2-s1", s1, "s1-l2", a_addr="172.16.12.1/24", b_addr="172.16.12.2/24")
    spine = make_node(
        s1.name,
        "10.0.0.11",
        65100,
        Role.HELPER,
        [
            ("172.16.11.1", 65001, "172.16.11.2", "s1-l1"),
            ("172.16.12.1", 65002, "172.16.12.2", "s1-l2"),
        ],
        **spine_kw,
    )
    leaf1 = make_node(
        l1.name,
        "10.0.0.1",
        65001,
        Role.LOAD_BALANCER,
        [("172.16.11.2", 65100, "172.16.11.1", "l1-s1")],
        ("10.201.0.0/24",),
    )
    leaf2 = make_node(
        l2.name,
        "10.0.0.2",
        65002,
        Role.LOAD_BALANCER,
        [("172.16.12.2", 65100, "172.16.12.1", "l2-s1")],
        ("10.202.0.0/24",),
    )
    return leaf1, spine, leaf2


async def test_leaf_spine_leaf_nnhn_and_restart(netns_lab: Lab) -> None:
    leaf1, spine, leaf2 = topology(netns_lab, stale_timer_s=20.0)
    nodes = (spine, leaf1, leaf2)
    try:
        await asyncio.gather(*(n.speaker.start() for n in nodes))
        await wait_for(lambda: leaf1.nh("10.202.0.0/24") and leaf2.nh("10.201.0.0/24"), 40)
        # leaf1 learns leaf2's prefix via the spine, with a validated NNHN naming leaf2
        assert leaf1.nh("10.202.0.0/24") == [("172.16.11.2", ("10.0.0.2",), "valid")]
        assert leaf2.nh("10.201.0.0/24") == [("172.16.12.2", ("10.0.0.1",), "valid")]
        (nb,) = leaf1.speaker.neighbors_snapshot()
        assert nb["bgp_id"] == "10.0.0.11" and nb["state"] == "up"
        assert nb["prefixes_in"] == 1 and nb["prefixes_out"] == 1
        rows = {r["prefix"]: r for r in spine.speaker.routes_snapshot()}
        assert rows["10.201.0.0/24"]["advertised_to"] == ["172.16.12.1"]

        # ExaBGP on leaf1 crashes: no forwarding change until the routes are known again
        pid = leaf1.speaker.supervisor.pid
        assert pid is not None
        before = leaf1.speaker.rib.forwarding()
        mark = len(leaf1.events)
        os.kill(pid, signal.SIGKILL)
        await wait_for(lambda: any(isinstance(e, SpeakerLost) for e in leaf1.events[mark:]), 10)
        await wait_for(
            lambda: (
                leaf1.speaker.neighbors_snapshot()[0]["state"] == "up"
                and not leaf1.speaker.rib.peers[next(iter(leaf1.speaker.rib.peers))].stale
            ),
            40,
            "leaf1 session back and refreshed",
        )
        after = leaf1.events[mark:]
        assert any(isinstance(e, SpeakerReady) for e in after)
        assert not [e for e in after if isinstance(e, NextHopsChanged)], after
        assert leaf1.speaker.rib.forwarding() == before
        assert leaf1.speaker.supervisor.pid != pid
        # and the spine still has leaf1's prefix (re-announced from the Adj-RIB-Out)
        await wait_for(lambda: leaf2.nh("10.201.0.0/24"), 20)
    finally:
        await asyncio.gather(*(n.speaker.stop() for n in nodes), return_exceptions=True)
    for n in nodes:
        assert n.speaker.supervisor.exited


def _prefixes(n: int) -> list[str]:
    return [f"10.{100 + i // 256}.{i % 256}.0/24" for i in range(n)]


@pytest.mark.parametrize("raw", [False, True], ids=["parsed", "raw"])
async def test_burst_1000_prefixes_announce_and_withdraw(netns_lab: Lab, raw: bool) -> None:
    """Also with leaf1's ExaBGP handing over raw messages (glbd.bgp.bgpmsg reads them)."""
    from glbd.bgp.ribtypes import PeerDown

    leaf1, spine, leaf2 = topology(netns_lab)
    nodes = (spine, leaf1, leaf2)
    sup = leaf1.speaker.supervisor
    sup.params = replace(sup.params, raw_messages=raw)
    burst = _prefixes(1000)
    try:
        await asyncio.gather(*(n.speaker.start() for n in nodes))
        await wait_for(lambda: leaf1.nh("10.202.0.0/24"), 40)
        leaf2.speaker.set_originated([*map(__import__("ipaddress").ip_network, burst)])
        fwd = leaf1.speaker.rib.forwarding
        await wait_for(lambda: len(fwd()) == 1000 + 1 - 1, 60, "1000 prefixes at leaf1")
        # every prefix carries its own, validated NNHN (no packing: group-updates false)
        for p, nhs in fwd().items():
            assert [(str(x.peer), x.nnhn_status) for x in nhs] == [("172.16.11.2", "valid")], p
            assert [str(i) for i in nhs[0].nnh or ()] == ["10.0.0.2"]
        assert len(leaf1.speaker.routes_snapshot()) == 1001  # + its own originated prefix
        leaf2.speaker.set_originated([])
        await wait_for(lambda: not fwd(), 60, "withdrawals at leaf1")
        assert not [e for n in nodes for e in n.events if isinstance(e, PeerDown)]
        assert spine.speaker.supervisor.stats.acked_error == 0
        assert leaf2.speaker.supervisor.stats.acked_error == 0
        assert ("packets;" in sup.config_path.read_text()) == raw
        assert not leaf1.speaker.parser.dropped
    finally:
        await asyncio.gather(*(n.speaker.stop() for n in nodes), return_exceptions=True)


def advertised_to(node: Node, prefix: str) -> list[str]:
    rows = [r for r in node.speaker.routes_snapshot() if r["prefix"] == prefix]
    return list(rows[0]["advertised_to"]) if rows else []


async def test_a_neighbor_added_while_an_unreachable_one_has_routes_queued(
    netns_lab: Lab,
) -> None:
    """The spine's ExaBGP has leaf1's route queued for a neighbour it cannot reach (it
    connects, nobody answers); adding leaf2 still takes: ExaBGP 5.0.15 on its own skips every
    reload while any peer has routes to send, established or not."""
    leaf1, spine, leaf2 = topology(netns_lab)
    unreachable = NeighborParams(
        A("172.16.11.9"), 65009, A("172.16.11.2"), interface="s1-l1", hold_time=9, passive=False
    )
    full = spine.speaker.params
    to_leaf1 = tuple(n for n in full.neighbors if str(n.address) == "172.16.11.1")
    spine = speaker_node(replace(full, neighbors=(*to_leaf1, unreachable)), spine.speaker.netns)
    nodes = (spine, leaf1, leaf2)
    try:
        await asyncio.gather(*(n.speaker.start() for n in nodes))
        await wait_for(lambda: spine.nh("10.201.0.0/24"), 40, "leaf1's prefix at the spine")
        await wait_for(
            lambda: "172.16.11.9" in advertised_to(spine, "10.201.0.0/24"),
            10,
            "leaf1's prefix queued for the unreachable neighbour",
        )
        assert await spine.speaker.supervisor.drain(10)
        spine.speaker.reconfigure(replace(full, neighbors=(*full.neighbors, unreachable)))
        await wait_for(lambda: leaf2.nh("10.201.0.0/24"), 40, "leaf2 added and learning")
    finally:
        await asyncio.gather(*(n.speaker.stop() for n in nodes), return_exceptions=True)


async def test_bfd_down_strict_mode_and_teardown(netns_lab: Lab) -> None:
    from glbd.bgp.ribtypes import PeerDown

    leaf1, spine, leaf2 = topology(netns_lab)
    nodes = (spine, leaf1, leaf2)
    l2 = __import__("ipaddress").ip_address("172.16.12.1")
    try:
        await asyncio.gather(*(n.speaker.start() for n in nodes))
        await wait_for(lambda: leaf1.nh("10.202.0.0/24"), 40)
        mark = len(spine.events)
        spine.speaker.peer_bfd_down(l2)
        # forwarding reacts synchronously, before any BGP message
        assert spine.nh("10.202.0.0/24") == []
        assert isinstance(spine.events[mark], NextHopsChanged)
        # the session is torn down with Cease/10 (BFD down) and comes back ...
        await wait_for(
            lambda: any(isinstance(e, PeerDown) for e in leaf2.events), 20, "leaf2 sees teardown"
        )
        await wait_for(lambda: not leaf1.nh("10.202.0.0/24"), 20, "leaf1 withdrawn")
        await wait_for(
            lambda: (
                spine.speaker.rib.peers[l2].state == "up" and spine.speaker.rib.peers[l2].n_paths
            ),
            40,
            "session back",
        )
        down = [e for e in leaf2.events if isinstance(e, PeerDown)]
        assert "(6,10)" in down[0].reason, down
        # ... but strict mode keeps leaf2's routes out while BFD is down
        assert spine.nh("10.202.0.0/24") == []
        spine.speaker.peer_bfd_up(l2)
        assert spine.nh("10.202.0.0/24") == [("172.16.12.1", None, "absent")]
        await wait_for(lambda: leaf1.nh("10.202.0.0/24"), 20, "leaf1 has it again")
    finally:
        await asyncio.gather(*(n.speaker.stop() for n in nodes), return_exceptions=True)


async def test_reconfigure_adds_neighbor_without_disturbing_others(netns_lab: Lab) -> None:
    import dataclasses

    from glbd.bgp.ribtypes import PeerDown

    leaf1, spine, leaf2 = topology(netns_lab)
    full = spine.speaker.params
    only_leaf1 = dataclasses.replace(full, neighbors=full.neighbors[:1])
    spine.speaker.rib.reconfigure(only_leaf1)  # start the spine knowing leaf1 only
    spine.speaker.params = only_leaf1
    spine.speaker.supervisor.params = spine.speaker.exabgp_params()
    nodes = (spine, leaf1, leaf2)
    try:
        await asyncio.gather(*(n.speaker.start() for n in nodes))
        await wait_for(lambda: leaf1.speaker.neighbors_snapshot()[0]["state"] == "up", 40)
        assert not leaf1.nh("10.202.0.0/24")
        spine.speaker.reconfigure(full)
        await wait_for(lambda: leaf1.nh("10.202.0.0/24"), 40, "leaf2's prefix via the spine")
        await wait_for(lambda: leaf2.nh("10.201.0.0/24"), 40, "leaf1's prefix at leaf2")
        assert not [e for e in leaf1.events if isinstance(e, PeerDown)]
    finally:
        await asyncio.gather(*(n.speaker.stop() for n in nodes), return_exceptions=True)


async def test_routes_for_a_neighbor_exabgp_learns_after_them_are_sent_again(
    netns_lab: Lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reload that adds leaf2 is taken after the spine's routes for leaf2 reached ExaBGP
    (as when ExaBGP skipped the signal and took a repeat): ExaBGP answers them ``error`` (no
    such neighbor), and they are sent again when leaf2's session comes up."""
    import dataclasses

    leaf1, spine, leaf2 = topology(netns_lab)
    full = spine.speaker.params
    only_leaf1 = dataclasses.replace(full, neighbors=full.neighbors[:1])
    spine.speaker.rib.reconfigure(only_leaf1)  # start the spine knowing leaf1 only
    spine.speaker.params = only_leaf1
    sup = spine.speaker.supervisor
    sup.params = spine.speaker.exabgp_params()
    nodes = (spine, leaf1, leaf2)
    real_reload = sup.reload
    late: list[asyncio.Task[None]] = []

    def reload_after_the_commands(params: object) -> None:
        async def later() -> None:
            assert await sup.drain(10)
            real_reload(params)  # type: ignore[arg-type]

        late.append(asyncio.get_running_loop().create_task(later()))

    try:
        await asyncio.gather(*(n.speaker.start() for n in nodes))
        await wait_for(lambda: spine.nh("10.201.0.0/24"), 40, "leaf1's prefix at the spine")
        assert await sup.drain(10)
        errors_before = sup.stats.acked_error
        monkeypatch.setattr(sup, "reload", reload_after_the_commands)
        spine.speaker.reconfigure(full)
        await wait_for(lambda: late and late[0].done(), 20, "the late reload")
        late[0].result()
        assert sup.stats.acked_error > errors_before  # the routes for leaf2 were refused
        await wait_for(lambda: leaf2.nh("10.201.0.0/24"), 40, "leaf1's prefix at leaf2")
        l2 = __import__("ipaddress").ip_address("172.16.12.1")
        assert spine.speaker.rib.peers[l2].counters["adj_out_replays"] == 1
    finally:
        await asyncio.gather(*(n.speaker.stop() for n in nodes), return_exceptions=True)


async def test_garbage_nhc_is_counted_never_resets(netns_lab: Lab) -> None:
    import ipaddress

    from bgp_helpers import make_node

    from glbd.bgp import exabgp_api as api
    from glbd.bgp.exabgp import ExabgpNeighbor, ExabgpParams, ExabgpSupervisor
    from glbd.bgp.ribtypes import PeerDown

    a, b = netns_lab.pair("leaf", "peer", a_addr="172.16.31.1/24", b_addr="172.16.31.2/24")
    leaf = make_node(
        a.name,
        "10.0.0.1",
        65001,
        Role.LOAD_BALANCER,
        [("172.16.31.2", 65100, "172.16.31.1", "leaf-peer")],
        passive=False,
    )
    injector = ExabgpSupervisor(
        ExabgpParams("10.0.0.9", 65100, (ExabgpNeighbor("172.16.31.1", "172.16.31.2", 65001),)),
        netns=b.name,
        on_line=lambda s: None,
        on_lost=lambda: None,
        on_ready=lambda: None,
    )
    peer = ipaddress.ip_address("172.16.31.1")
    nh = ipaddress.ip_address("172.16.31.2")
    garbage = {
        "10.220.0.0/24": "00010104ac101f02000200",  # trailing bytes
        "10.221.0.0/24": "00010104ac101f020002000a0a0000090a0000070a00",  # NNHN length 10
        "10.222.0.0/24": "0003",  # too short
        "10.223.0.0/24": "00010104ac101f02000200080a0000090a000007",  # valid, for contrast
    }
    try:
        await injector.start()
        await leaf.speaker.start()
        for prefix, value in garbage.items():
            injector.send(
                api.Announce(
                    peer,
                    ipaddress.ip_network(prefix),
                    nh,
                    as_path=(65100,),
                    nhc=bytes.fromhex(value),
                )
            )
        await wait_for(lambda: all(leaf.nh(p) for p in garbage), 40, "all four routes kept")
        assert leaf.nh("10.220.0.0/24")[0][2] == "nhc_malformed_trailing_bytes"
        assert leaf.nh("10.221.0.0/24")[0][2] == "nnhn_discarded"
        assert leaf.nh("10.222.0.0/24")[0][2] == "nhc_malformed_too_short"
        assert leaf.nh("10.223.0.0/24")[0][1:] == (("10.0.0.7",), "valid")
        assert not [e for e in leaf.events if isinstance(e, PeerDown)]
        (nb,) = leaf.speaker.neighbors_snapshot()
        assert nb["state"] == "up" and nb["counters"]["nhc_malformed_trailing_bytes"] == 1
    finally:
        await leaf.speaker.stop()
        await injector.stop()
