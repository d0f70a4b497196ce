"""A router between a host and a sink, with a 2-member nexthop group, for flowlet tests.

::

    host h  h-r ---- r-h  router r  r-m1 ---- m1-r  sink s
                                    r-m2 ---- m2-r

The router routes 203.0.113.0/24 and 2001:db8:ff::/64 over a group of its two sink links
(weights and type per test); the sink counts what arrives on each link (nftables counters on
the test's destination port; UDP is dropped there), so a flow's packets are counted per
member. TCP goes on to a listener; the sink's replies go back over m1.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from glbdlab.netns import Lab, Netns
from glbdlab.nodes import wait_until

from glbd.flowlet.loader import FlowletAttachment

DST4 = "203.0.113.1"
DST6 = "2001:db8:ff::1"
PORT = 4791  # RoCEv2's port: any UDP port works alike
MEMBERS = ("m1-r", "m2-r")

#: the ``flowlet`` fixture: start glbd's program on the router (timeout_us=, table_size=,
#: move_on_change=)
Start = Callable[..., Awaitable[FlowletAttachment]]


@dataclass
class Rig:
    lab: Lab
    h: Netns
    r: Netns
    s: Netns

    def group(self, weights: tuple[int, int], kind: str = "hash-threshold") -> None:
        """(Re)program the router's group: members 1 (r-m1) and 2 (r-m2) at ``weights``."""
        w1, w2 = weights
        extra = " type resilient buckets 64 idle_timer 0" if kind == "resilient" else ""
        cmds = [
            "route del 203.0.113.0/24",
            "-6 route del 2001:db8:ff::/64",
            "nexthop del id 10",
            "nexthop del id 20",
        ]
        for c in cmds:
            self.r.ip(*c.split(), check=False)
        self.r.ip_batch(
            [
                f"nexthop add id 10 group 1,{w1}/2,{w2}{extra}",
                f"nexthop add id 20 group 3,{w1}/4,{w2}{extra}",
                "route add 203.0.113.0/24 nhid 10",
                "route add 2001:db8:ff::/64 nhid 20",
            ]
        )

    def counts(self) -> tuple[int, int]:
        """Packets to :data:`PORT` that arrived at the sink over m1 and over m2."""
        js = json.loads(self.s.run(["nft", "-j", "list", "table", "inet", "flowlet"]).stdout)
        by_if: dict[str, int] = {}
        for item in js["nftables"]:
            rule = item.get("rule")
            if not rule:
                continue
            ifname = next(
                e["match"]["right"]
                for e in rule["expr"]
                if "match" in e and e["match"]["left"].get("meta", {}).get("key") == "iifname"
            )
            n = next(e["counter"]["packets"] for e in rule["expr"] if "counter" in e)
            by_if[ifname] = by_if.get(ifname, 0) + n
        return by_if.get(MEMBERS[0], 0), by_if.get(MEMBERS[1], 0)

    def reset(self) -> None:
        self.s.run(["nft", "reset", "counters", "table", "inet", "flowlet"])

    def udp(self, v6: bool = False, dst: str | None = None) -> socket.socket:
        """One connected UDP socket in the host: one 5-tuple (to ``dst``: any address of the
        routed prefixes; the sink counts it on arrival and drops it)."""
        s = self.h.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM)
        s.connect((dst or (DST6 if v6 else DST4), PORT))
        return s

    def tcp(self, v6: bool = False) -> socket.socket:
        """One TCP connection from the host to the sink's listener."""
        s = self.h.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.settimeout(10)
        s.connect((DST6 if v6 else DST4, PORT))
        return s


def bursts(send: socket.socket, n: int, size: int, pause_s: float, payload: int = 200) -> None:
    """``n`` bursts of ``size`` packets, ``pause_s`` apart: the pauses are the stimulus (the
    idle gaps a flowlet switch may move a flow at), not a wait for anything."""
    data = b"x" * payload
    for _ in range(n):
        for _ in range(size):
            send.send(data)
        time.sleep(pause_s)  # the stimulus: the idle gap


def member_of_new_flow(rig: Rig, dst: str, v6: bool) -> int:
    """Send one new flow of 3 packets to ``dst``: the member (0: m1, 1: m2) it arrived over."""
    b = rig.counts()
    with rig.udp(v6, dst) as s:
        for _ in range(3):
            s.send(b"x" * 100)

    def arrived() -> tuple[int, int] | None:
        c = rig.counts()
        return c if sum(c) - sum(b) >= 3 else None

    after = wait_until(arrived, 10, what="3 packets at the sink")
    d1, d2 = after[0] - b[0], after[1] - b[1]
    assert (d1, d2) in ((3, 0), (0, 3)), (d1, d2)
    return 0 if d1 else 1


def build(lab: Lab) -> Rig:
    h, r, s = lab.netns("h"), lab.netns("r"), lab.netns("s")
    lab.veth(h, "h-r", r, "r-h", a_addr=["198.18.0.1/30", "2001:db8:0::1/64"],
             b_addr=["198.18.0.2/30", "2001:db8:0::2/64"])  # fmt: skip
    for i in (1, 2):
        lab.veth(
            r, f"r-m{i}", s, f"m{i}-r",
            a_addr=[f"198.18.{i}.1/30", f"2001:db8:{i}::1/64"],
            b_addr=[f"198.18.{i}.2/30", f"2001:db8:{i}::2/64"],
        )  # fmt: skip
    h.ip("route", "add", "default", "via", "198.18.0.2")
    h.ip("-6", "route", "add", "default", "via", "2001:db8::2")
    r.ip_batch(
        [
            "nexthop add id 1 via 198.18.1.2 dev r-m1",
            "nexthop add id 2 via 198.18.2.2 dev r-m2",
            "nexthop add id 3 via 2001:db8:1::2 dev r-m1",
            "nexthop add id 4 via 2001:db8:2::2 dev r-m2",
        ]
    )
    # the sink owns the destinations, takes them on either link, answers over m1
    s.ip_batch(
        [
            f"addr add {DST4}/32 dev lo",
            f"addr add {DST6}/128 dev lo",
            "route add default via 198.18.1.1",
            "route add ::/0 via 2001:db8:1::1",
        ]
    )
    s.run(["sysctl", "-q", "-w", "net.ipv4.conf.all.rp_filter=0",
           "net.ipv4.conf.m1-r.rp_filter=0", "net.ipv4.conf.m2-r.rp_filter=0"])  # fmt: skip
    # UDP is counted and dropped (no listener, no port unreachable); TCP goes on to a listener
    rules = "\n".join(
        f"    iifname {m} {p} dport {PORT} counter{' drop' if p == 'udp' else ''}"
        for m in MEMBERS
        for p in ("udp", "tcp")
    )
    s.run(
        ["nft", "-f", "-"],
        input=f"table inet flowlet {{\n  chain pre {{\n    type filter hook prerouting "
        f"priority -300;\n{rules}\n  }}\n}}\n",
    )
    # neighbours resolved before any count: while one is unresolved the kernel's multipath
    # selection skips that member, and packets wait or drop, which is not what is measured
    for ns, dst in ((h, "198.18.0.2"), (h, "2001:db8::2"), (r, "198.18.1.2"), (r, "198.18.2.2"),
                    (r, "2001:db8:1::2"), (r, "2001:db8:2::2")):  # fmt: skip
        assert ns.ping(dst, count=5), f"{ns.node} cannot reach {dst}"
    return Rig(lab, h, r, s)
