"""Fixtures ``rig`` (host, router, sink: see flowletrig.py) and ``flowlet``: glbd's program on
the router's host-facing link, removed after the test even when it fails."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from flowletrig import Rig, Start, build
from glbdlab.netns import Lab

from glbd.flowlet.loader import FlowletAttachment, FlowletParams, object_path


@pytest.fixture
def rig(netns_lab: Lab) -> Rig:
    return build(netns_lab)


@pytest.fixture
async def flowlet(rig: Rig) -> AsyncIterator[Start]:
    if object_path() is None:
        pytest.skip(
            "flowlet.bpf.o is not built (glbd/flowlet/bpf/build.sh; bootstrap.sh builds it)"
        )
    made: list[FlowletAttachment] = []

    async def start(
        timeout_us: int = 1000,
        table_size: int = 4096,
        move_on_change: bool = False,
        spread: bool = True,
        buckets: int = 0,
    ) -> FlowletAttachment:
        att = FlowletAttachment(netns=rig.r.name)
        made.append(att)
        await att.start(params(timeout_us, table_size, move_on_change, spread, buckets))
        return att

    yield start
    if made:
        await made[-1].stop()


def params(
    timeout_us: int = 1000,
    table_size: int = 4096,
    move_on_change: bool = False,
    spread: bool = True,
    buckets: int = 0,
) -> FlowletParams:
    """Every gap moves its flow unless ``move_on_change`` (then only as the move chance says,
    0 until :meth:`FlowletAttachment.set_move`); new flowlets placed by ``spread`` (aimed at
    resilient groups of ``buckets``) or at random."""
    return FlowletParams(
        interfaces=("r-h",),
        timeout_ns=timeout_us * 1000,
        aging_ns=10 * 10**9,
        table_size=table_size,
        move_on_change=move_on_change,
        spread=spread,
        buckets=buckets,
    )
