"""Kernel test rig for FIB tests: router namespace ``r`` with three veths to a peer ``p``.

r-p1 198.18.10.1/30 (gw .2)   r-p2 198.18.10.5/30 (gw .6)   r-p3 198.18.10.9/30 (gw .10)
plus 2001:db8:10:N::1/64 (gw 2001:db8:10:N::2) on each.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from typing import Any

from glbdlab.netns import Lab, Netns

from glbd.fib.fibmodel import Member

V4_GW = ["198.18.10.2", "198.18.10.6", "198.18.10.10"]
V6_GW = ["2001:db8:10:1::2", "2001:db8:10:2::2", "2001:db8:10:3::2"]


@dataclass
class Rig:
    lab: Lab
    r: Netns
    p: Netns

    def ip_json(self, *args: str) -> Any:
        out = self.r.ip("-j", *args).stdout.strip()
        return json.loads(out) if out else []

    def nexthops(self) -> list[dict[str, Any]]:
        return list(self.ip_json("nexthop", "show"))

    def routes(self, v6: bool = False) -> list[dict[str, Any]]:
        return list(self.ip_json(*(["-6"] if v6 else []), "route", "show", "table", "main"))

    def group(self, nhid: int) -> dict[int, int]:
        """member id -> weight, from ``ip -j nexthop show id N`` (weights <= 256)."""
        (g,) = self.ip_json("nexthop", "show", "id", str(nhid))
        return {e["id"]: e.get("weight", 1) for e in g["group"]}

    def peer_link(self, i: int, up: bool) -> None:
        # carrier loss on r-p{i}: take the peer end down
        self.p.ip("link", "set", f"p-r{i}", "up" if up else "down")


def member(i: int, v6: bool = False) -> Member:
    gw = (V6_GW if v6 else V4_GW)[i - 1]
    return Member(ipaddress.ip_address(gw), f"r-p{i}")
