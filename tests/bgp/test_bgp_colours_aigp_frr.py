"""AIGP (RFC 7311), the primary copy's mark (docs/colours.md), against FRR 10.x in namespaces: a
glbd leaf with sessions green to FRR spine1, blue to spine2, green to spine3 and uncoloured to
spine4; every spine has ``neighbor X aigp`` (AIGP on for its eBGP session to glbd).

* glbd originates OWN green, backup blue: on the wire (tcpdump on glbd's side) the primary copy
  goes to spine1 and spine3 with AIGP 1, the backup copy to spine2 and the primary copy to the
  uncoloured spine4 without AIGP; FRR shows ``aigpMetric`` 1 at spine1 and spine3. (FRR 10.7
  takes an AIGP of 0, Junos's mark, as no AIGP: it only flags the attribute present for a
  non-zero metric. glbd marks with 1 so that the mark crosses an FRR spine.)
* spine1 announces FROM_S1 green with AIGP 5: glbd passes it on, unchanged, to green spine3
  (whose JSON shows ``aigpMetric`` 5) and without AIGP to uncoloured spine4, not to blue
  spine2.
* every spine announces SHARED: spine1 green with AIGP 5, spine2 blue, spine3 green, spine4
  blue with AIGP 3. glbd keeps spine1's AIGP, ignores spine4's (an uncoloured session; it would
  have made blue the primary colour) and announces SHARED's primary colour green in
  NextHopsChanged, each next hop with its session's colour.

FRR sends AIGP only for a non-zero metric set on the path itself (here a ``network`` route-map);
``set aigp-metric`` in an outbound route-map sent nothing (FRR 10.7.1)."""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from bgp_helpers import A, N, frr_bgp_conf, frr_paths, link, make_node, stop_all, wait_for
from glbdlab.capture import bgp_messages, parse_pcap, parse_update, start_tcpdump, tcp_streams
from glbdlab.frr import FrrInstance
from glbdlab.netns import Lab, LabError

from glbd.bgp.ribtypes import NextHopsChanged, Role
from glbd.colours.colours import Origination

pytestmark = [pytest.mark.netns, pytest.mark.frr, pytest.mark.slow]

GREEN, BLUE = 1, 2
#: glbd's session colour toward spine1..spine4
SESSIONS = (GREEN, BLUE, GREEN, None)
OWN = "10.100.0.0/24"  # glbd's: green, backup blue
FROM_S1 = "10.51.0.0/24"  # spine1's alone: green, AIGP 5
SHARED = "10.50.0.0/24"  # every spine's
#: per spine: its colour and, per prefix it announces, the AIGP metric it sets (None: none)
SPINES: tuple[tuple[int, Mapping[str, int | None]], ...] = (
    (GREEN, {SHARED: 5, FROM_S1: 5}),
    (BLUE, {SHARED: None}),
    (GREEN, {SHARED: None}),
    (BLUE, {SHARED: 3}),
)
#: AIGP (type 26) as ExaBGP packs ``aigp 1``: flags 0x80, one AIGP TLV (type 1, 11 octets)
AIGP_1 = bytes.fromhex("801a0b01000b0000000000000001")


def spine_conf(i: int, peer: str, colour: int, networks: Mapping[str, int | None]) -> str:
    """FRR spine``i`` (AS 65100 + i) with ``neighbor X aigp`` on its session to glbd at
    ``peer``, announcing ``networks`` coloured ``colour`` (an outbound route-map), each with
    the AIGP metric given (a ``network`` route-map: FRR sends only what the path carries)."""
    nets = [n if m is None else f"{n} route-map AIGP{m}" for n, m in networks.items()]
    conf = frr_bgp_conf(
        65100 + i,
        f"10.0.1.{i}",
        [(peer, 65001)],
        networks=nets,
        neighbor_extra={peer: ["aigp", "route-map OUT out"]},
        multipath=False,
    )
    lines = ["route-map OUT permit 10", f" set extcommunity color 00:{colour}"]
    for m in sorted({m for m in networks.values() if m is not None}):
        lines += [f"route-map AIGP{m} permit 10", f" set aigp-metric {m}"]
    return conf + "\n".join([*lines, ""])


def aigp_of(frr: FrrInstance, prefix: str) -> list[Any]:
    """FRR's ``aigpMetric`` of each of its paths for ``prefix`` ("absent" where it has none)."""
    return [p.get("aigpMetric", "absent") for p in frr_paths(frr, prefix)]


def sent_aigp(pcap: Path, src: str, dst: str, prefix: str) -> list[bytes | None]:
    """The AIGP attribute (whole, None: absent) of each UPDATE ``src`` sent ``dst`` announcing
    ``prefix``."""
    packets = list(parse_pcap(pcap.read_bytes()))
    out: list[bytes | None] = []
    for stream in tcp_streams(packets, src, dst):
        for msg in bgp_messages(stream):
            if msg[18] == 2 and prefix in (u := parse_update(msg))["nlri"]:
                attr = u["attrs"].get(26)
                out.append(None if attr is None else attr[1])
    return out


def captured_updates(pcap: Path, links: list[tuple[str, str]]) -> bool:
    """The pcap holds an UPDATE for OWN from glbd to every spine (False while a record is
    still being written)."""
    try:
        return all(sent_aigp(pcap, own, s, OWN) for s, own in links)
    except (struct.error, LabError, IndexError):
        return False


async def test_aigp_between_glbd_and_frr(netns_lab: Lab, tmp_path: Path) -> None:
    lab = netns_lab
    l1 = lab.netns("leaf1")
    spines = [lab.netns(f"spine{i}") for i in (1, 2, 3, 4)]
    links = [
        link(lab, s, f"s{i}-l1", l1, f"l1-s{i}", f"172.16.{i}") for i, s in enumerate(spines, 1)
    ]
    node = make_node(
        l1.name,
        "10.0.0.1",
        65001,
        Role.LOAD_BALANCER,
        [(s, 65100 + i, own, f"l1-s{i}") for i, (s, own) in enumerate(links, 1)],
        (OWN,),
        origin_colours=((N(OWN), Origination(GREEN, (BLUE,))),),
    )
    p = node.speaker.params
    coloured = tuple(replace(n, colour=c) for n, c in zip(p.neighbors, SESSIONS, strict=True))
    node.speaker.reconfigure(replace(p, neighbors=coloured))
    pcap = tmp_path / "leaf1.pcap"
    dump = start_tcpdump(l1, pcap, "tcp port 179", link_type="LINUX_SLL")  # every port
    try:
        frrs = [
            FrrInstance(ns, hostname=f"spine{i}").start(spine_conf(i, own, colour, nets))
            for i, (ns, (_s, own), (colour, nets)) in enumerate(
                zip(spines, links, SPINES, strict=True), 1
            )
        ]
        await node.speaker.start()
        rib = node.speaker.rib
        await wait_for(lambda: all(frr_paths(f, OWN) for f in frrs), 60, "OWN at every spine")
        await wait_for(lambda: len(rib.next_hops(N(SHARED))) == 4, 30, "SHARED from all four")
        await wait_for(lambda: frr_paths(frrs[2], FROM_S1), 30, "FROM_S1 at spine3")
        await wait_for(lambda: frr_paths(frrs[3], FROM_S1), 30, "FROM_S1 at spine4")
        # tcpdump may still be behind the kernel's capture buffer (a busy machine): it is
        # stopped only once the file holds an UPDATE for OWN to every spine
        await wait_for(lambda: captured_updates(pcap, links), 30, "UPDATEs in the pcap")
        dump.terminate()
        dump.wait(10)

        # -- glbd's origination: AIGP 0 on the primary copy to the green sessions only
        for i, f in enumerate(frrs, 1):
            print(f"\nFRR spine{i}'s paths for {OWN}: {json.dumps(frr_paths(f, OWN))}")
        wire = {i: sent_aigp(pcap, own, s, OWN) for i, (s, own) in enumerate(links, 1)}
        print(f"\nAIGP glbd sent with {OWN}, per spine: {wire}")
        # every UPDATE carried it (a session that flapped sent it more than once)
        assert {i: set(w) for i, w in wire.items()} == {
            1: {AIGP_1},
            2: {None},
            3: {AIGP_1},
            4: {None},
        }
        # FRR 10.7 treats AIGP 0 as absent: it is not in its path, even where it was sent
        # FRR keeps the mark (it would drop an AIGP of 0) where AIGP is on and the session is
        # coloured: spine1 and spine3
        assert [aigp_of(f, OWN) for f in frrs] == [[1], ["absent"], [1], ["absent"]]
        assert [frr_paths(f, OWN)[0]["extendedCommunity"]["string"] for f in frrs] == [
            "Color:00:1",
            "Color:00:2",
            "Color:00:1",
            "Color:00:1",
        ]

        # -- pass-through: spine1's AIGP 5 goes on unchanged to green spine3 only
        assert aigp_of(frrs[2], FROM_S1) == [5]
        assert aigp_of(frrs[3], FROM_S1) == ["absent"]
        assert frr_paths(frrs[1], FROM_S1) == []  # green: not to the blue session

        # -- receiving: the primary colour of SHARED
        def received(i: int, prefix: str) -> dict[str, Any]:
            rows = {r["prefix"]: r for r in rib.received(A(links[i - 1][0]))}
            return rows.get(prefix, {})

        for i in (1, 2, 3, 4):
            print(f"\nglbd's received from spine{i}: {json.dumps(received(i, SHARED))}")
        assert [received(i, SHARED)["aigp"] for i in (1, 2, 3, 4)] == [5, None, None, None]
        counters = {r["peer"]: r["counters"] for r in node.speaker.neighbors_snapshot()}
        assert counters[links[3][0]]["aigp_ignored"] >= 1  # spine4's AIGP 3: ignored

        def last_change() -> NextHopsChanged | None:
            evs = [
                e for e in node.events if isinstance(e, NextHopsChanged) and e.prefix == N(SHARED)
            ]
            return evs[-1] if evs else None

        ch = last_change()
        assert ch is not None and len(ch.next_hops) == 4
        assert ch.colour == GREEN
        assert {(str(h.peer), h.colour) for h in ch.next_hops} == {
            (s, c) for (s, _own), c in zip(links, SESSIONS, strict=True)
        }
    finally:
        if dump.poll() is None:
            dump.terminate()
            dump.wait(10)
        await stop_all((node,))
