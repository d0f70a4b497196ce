"""BGP burst handling (1000 prefix announcements and withdrawals in bursts) and NHC decode
speed.

Run as root: ``.venv/bin/python bench/bgp_burst.py [N]`` (default N=1000).

1. NHC codec: decodes/s of FRR 10.7's NNHN attribute, against a baseline measured in the same
   run (``struct.unpack`` of the same bytes: no validation, no objects).
2. RIB core: prefixes/s through ``Rib.on_update`` (one UPDATE per prefix, helper role with
   NNHN origination toward 2 peers), against a baseline of building the same UpdateEvents.
3. End to end in namespaces, leaf2 -- spine -- leaf1, three glbd speakers (ExaBGP 5.0.15 each):
   time from ``set_originated(N prefixes)`` on leaf2 until the spine has them (1 hop, the
   baseline) and until leaf1 has them all with validated NNHN (2 hops), then the same for the
   withdrawal. Prints seconds, prefixes/s and the 2-hop/1-hop ratio.
"""

from __future__ import annotations

import asyncio
import ipaddress
import struct
import sys
import time
from pathlib import Path

from timing import rate

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "bgp"))

from glbd.bgp import exabgp_api as api
from glbd.bgp import nhc
from glbd.bgp.rib import Rib
from glbd.bgp.ribtypes import NeighborParams, RibParams, Role

DEBUG = False
A = ipaddress.ip_address
N = ipaddress.ip_network


def prefixes(n: int) -> list[ipaddress.IPv4Network]:
    return [N(f"10.{100 + i // 256}.{i % 256}.0/24") for i in range(n)]


def bench_codec() -> None:
    attr = nhc.parse_hex("d0 27 0018 0001 01 04 00000000 0002 000c 0a00000b 0a000002 0a000003")
    st = struct.Struct("!BBHHBB4sHH12s")
    base = rate(lambda: st.unpack_from(attr))
    dec = rate(lambda: nhc.decode(attr))
    print(
        f"{'nhc decode (FRR 10.7 NNHN attribute)':44s} {dec:12,.0f}/s {dec / base:8.3f}x baseline"
    )


def bench_rib(n: int) -> None:
    peers = tuple(
        NeighborParams(A(f"172.16.1{i}.1"), 65000 + i, A(f"172.16.1{i}.2"), f"s1-l{i}")
        for i in (1, 2, 3)
    )
    evs = []

    def build() -> list[api.UpdateEvent]:
        return [
            api.UpdateEvent(
                peers[2].address,
                peers[2].local_address,
                65003,
                65100,
                "receive",
                api.PathAttributes("igp", (65003,), 1),
                (api.RouteAnnounced("ipv4 unicast", peers[2].address, p),),
            )
            for p in prefixes(n)
        ]

    t0 = time.perf_counter()
    evs = build()
    t_build = time.perf_counter() - t0
    rib = Rib(RibParams(ipaddress.IPv4Address("10.0.0.11"), 65100, Role.HELPER, peers))
    for i, p in enumerate(peers):
        rib.on_open(p.address, ipaddress.IPv4Address(f"10.0.0.{i + 1}"))
        rib.on_state(p.address, "up", 0.0)
    t0 = time.perf_counter()
    for ev in evs:
        rib.on_update(ev, 1.0)
    t_rib = time.perf_counter() - t0
    print(
        f"{'rib on_update (helper, NNHN to 2 peers)':44s} {n / t_rib:12,.0f}/s "
        f"{t_rib / t_build:8.3f}x baseline (building the events)"
    )


async def bench_e2e(n: int) -> None:
    from bgp_helpers import wait_for
    from glbdlab.netns import Lab
    from test_speaker_netns import topology

    with Lab() as lab:
        leaf1, spine, leaf2 = topology(lab)
        nodes = (spine, leaf1, leaf2)
        try:
            await asyncio.gather(*(x.speaker.start() for x in nodes))
            await wait_for(lambda: leaf1.nh("10.202.0.0/24"), 60)
            burst = prefixes(n)
            s_rib, l_rib = spine.speaker.rib, leaf1.speaker.rib

            t0 = time.perf_counter()
            leaf2.speaker.set_originated(burst)
            t_spine = t_leaf = 0.0
            while True:
                now = time.perf_counter() - t0
                if not t_spine and len(s_rib.forwarding()) >= n + 1:  # + leaf1's own prefix
                    t_spine = now
                if len(l_rib.forwarding()) >= n:
                    t_leaf = now
                    break
                if DEBUG:
                    print(
                        round(now, 2),
                        len(s_rib.forwarding()),
                        len(l_rib.forwarding()),
                        leaf2.speaker.supervisor.stats,
                    )
                await asyncio.sleep(0.02)
            assert all(nh[0].nnhn_status == "valid" for nh in l_rib.forwarding().values())
            t0 = time.perf_counter()
            leaf2.speaker.set_originated([])
            w_spine = w_leaf = 0.0
            while True:
                now = time.perf_counter() - t0
                if not w_spine and len(s_rib.forwarding()) <= 1:
                    w_spine = now
                if not len(l_rib.forwarding()):
                    w_leaf = now
                    break
                await asyncio.sleep(0.02)
            for what, one, two in (("announce", t_spine, t_leaf), ("withdraw", w_spine, w_leaf)):
                print(
                    f"{what + f' {n} prefixes, leaf2->spine (1 hop)':44s} {one:8.3f} s"
                    f" {n / one:10,.0f} prefixes/s"
                )
                print(
                    f"{what + f' {n} prefixes, leaf2->leaf1 (2 hops)':44s} {two:8.3f} s"
                    f" {n / two:10,.0f} prefixes/s {two / one:6.2f}x 1-hop baseline"
                )
            print("exabgp spine:", spine.speaker.supervisor.snapshot())
        finally:
            await asyncio.gather(*(x.speaker.stop() for x in nodes), return_exceptions=True)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    bench_codec()
    bench_rib(n)
    asyncio.run(bench_e2e(n))


if __name__ == "__main__":
    main()
