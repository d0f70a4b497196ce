"""Helpers for BGP integration tests: glbd speakers on a leaf-spine lab in namespaces."""

from __future__ import annotations

import asyncio
import ipaddress
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from glbd.core.rib import NeighborParams, RibParams, Role
from glbd.io.bgp import BgpEvent, BgpSpeaker, ProcessOptions

A = ipaddress.ip_address
N = ipaddress.ip_network
V4 = ipaddress.IPv4Address


async def wait_for(cond: Callable[[], object], timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while True:
        if cond():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or cond}")
        await asyncio.sleep(0.1)


@dataclass
class Node:
    speaker: BgpSpeaker
    events: list[BgpEvent] = field(default_factory=list)

    def nh(self, prefix: str) -> list[tuple[str, tuple[str, ...] | None, str]]:
        return [
            (
                str(x.peer),
                None if x.nnh is None else tuple(str(i) for i in x.nnh),
                x.nnhn_status,
            )
            for x in self.speaker.rib.next_hops(N(prefix))
        ]


def make_node(
    netns: str | None,
    router_id: str,
    local_as: int,
    role: Role,
    neighbors: list[tuple[str, int, str, str]],
    originated: tuple[str, ...] = (),
    passive: bool | None = None,
    **kw: object,
) -> Node:
    params = RibParams(
        V4(router_id),
        local_as,
        role,
        tuple(
            NeighborParams(A(addr), ras, A(local), interface=ifname, hold_time=9, passive=passive)
            for addr, ras, local, ifname in neighbors
        ),
        tuple(N(p) for p in originated),
        **kw,  # type: ignore[arg-type]
    )
    events: list[BgpEvent] = []
    sp = BgpSpeaker(
        params,
        netns=netns,
        on_event=events.append,
        process=ProcessOptions(backoff_initial_s=0.2, stop_grace_s=3.0, drain_timeout_s=3.0),
    )
    return Node(sp, events)
