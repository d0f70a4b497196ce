"""Fixture ``rig``: router namespace ``r`` with three veths to a peer ``p`` (see fibrig.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fibrig import Rig
from glbdlab.netns import Lab


@pytest.fixture
def rig(netns_lab: Lab) -> Iterator[Rig]:
    r = netns_lab.netns("r")
    p = netns_lab.netns("p")
    for i in (1, 2, 3):
        base = 4 * (i - 1)
        netns_lab.veth(
            r, f"r-p{i}", p, f"p-r{i}",
            a_addr=[f"198.18.10.{base + 1}/30", f"2001:db8:10:{i}::1/64"],
            b_addr=[f"198.18.10.{base + 2}/30", f"2001:db8:10:{i}::2/64"],
        )  # fmt: skip
    yield Rig(netns_lab, r, p)
