"""Two BFD engines in two namespaces joined by a veth (glbdlab harness): Up over IPv4 and IPv6,
an nftables drop gives Down once a detection time passed without packets, AdminDown is not a
failure, a Poll while Up does not flap, GTSM drops, and the thread-mode engine does the same.
Waits are on conditions (events, snapshot values); timeouts are generous upper bounds."""

from __future__ import annotations

import json
import queue
import socket
import struct
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from bfdwait import until as _until
from glbdlab.netns import Lab, Netns

from bfd.engine import BfdEngine, BfdEvent, EngineError, SessionConfig
from bfd.packet import ControlPacket, State
from bfd.session import SessionParams

pytestmark = pytest.mark.netns

FAST = SessionParams(desired_min_tx=50_000, required_min_rx=50_000, detect_mult=3)
#: FAST's detection time (3 x 50 ms)
DETECT_S = 0.150
A4, B4 = "198.18.0.1", "198.18.0.2"
A6, B6 = "2001:db8:bfd::1", "2001:db8:bfd::2"


class Side:
    def __init__(self, ns: Netns, ifname: str, mode: str) -> None:
        self.ns = ns
        self.ifname = ifname
        self.events: queue.Queue[BfdEvent] = queue.Queue()
        self.backlog: list[BfdEvent] = []
        self.engine = BfdEngine(self.events.put, mode=mode, netns=ns.name)  # type: ignore[arg-type]
        self.engine.start()

    def wait(self, peer: str, new: State, timeout: float = 5.0) -> BfdEvent:
        """The oldest not yet consumed event for ``peer`` entering ``new``."""
        for ev in self.backlog:
            if ev.peer == peer and ev.new == new:
                self.backlog.remove(ev)
                return ev
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                ev = self.events.get(timeout=left)
            except queue.Empty:
                break
            if ev.peer == peer and ev.new == new:
                return ev
            self.backlog.append(ev)
        raise AssertionError(f"no {new.name} event for {peer} in {timeout}s: {self.snap()}")

    def snap(self) -> dict[str, Any]:
        return self.engine.snapshot()

    def session(self, peer: str) -> dict[str, Any]:
        return next(s for s in self.snap()["sessions"] if s["peer"] == peer)

    def settled(self, peer: str, tx_ms: float, packets: int = 0) -> dict[str, Any]:
        """Wait until the session is Up at ``tx_ms`` with no Poll running and has received
        ``packets``; returns it."""

        def done(s: dict[str, Any]) -> bool:
            return bool(
                s["state"] == "up"
                and not s["polling"]
                and s["tx_interval_ms"] == pytest.approx(tx_ms)
                and s["packets_in"] >= packets
            )

        return _until(lambda: self.session(peer), done, f"{peer} settled at {tx_ms} ms")


def _pair(lab: Lab, mode: str = "process") -> tuple[Side, Side]:
    a_ns, b_ns = lab.pair()
    a_ns.addr_add("a-b", A6 + "/64")
    b_ns.addr_add("b-a", B6 + "/64")
    a, b = Side(a_ns, "a-b", mode), Side(b_ns, "b-a", mode)
    lab.on_close(a.engine.stop)
    lab.on_close(b.engine.stop)
    return a, b


@pytest.fixture
def sides(netns_lab: Lab) -> Iterator[tuple[Side, Side]]:
    a, b = _pair(netns_lab)
    yield a, b


def _up(a: Side, b: Side, pa: str, pb: str, params: SessionParams = FAST) -> None:
    a.engine.add_session(SessionConfig(peer=pa, interface=a.ifname, local=pb, params=params))
    b.engine.add_session(SessionConfig(peer=pb, interface=b.ifname, local=pa, params=params))
    a.wait(pa, State.UP)
    b.wait(pb, State.UP)


def _cut(sender: Side) -> None:
    """Lose every BFD packet ``sender`` sends, on the wire (its egress): the receiver's kernel
    path would take the steady state's repeats before an input-hook drop."""
    sender.ns.drop_egress(sender.ifname, "udp dport 3784")


def _uncut(sender: Side) -> None:
    sender.ns.undrop_egress(sender.ifname)


def test_up_ipv4_and_ipv6_then_drop_detected(sides: tuple[Side, Side]) -> None:
    a, b = sides
    _up(a, b, B4, A4)
    _up(a, b, B6, A6)
    for peer in (B4, B6):
        s = a.settled(peer, 50, packets=6)  # the Poll to 50 ms has completed
        assert s["state"] == "up" and not s["polling"]
        assert s["tx_interval_ms"] == pytest.approx(50) and s["detect_time_ms"] == pytest.approx(
            150
        )
        assert 49152 <= s["source_port"] <= 65535
        assert s["packets_in"] > 5 and s["flaps"] == 0
    # cut b's receive path: b detects within its detection time, a hears b's Down
    t0 = time.monotonic()
    _cut(a)
    ev = b.wait(A4, State.DOWN, timeout=3.0)
    assert ev.reason == "detection_timeout" and ev.failure
    # last accepted packet -> Down: never before a whole detection time without packets
    # (RFC 5880 §6.8.4), and well before several more would have passed (an upper bound on
    # behaviour, not speed: the latency itself is measured by bench/bfd_bench.py)
    assert ev.last_rx is not None and DETECT_S <= ev.at - ev.last_rx < 10 * DETECT_S
    assert ev.at - t0 < 2.0  # includes starting nft in the namespace
    ev6 = b.wait(A6, State.DOWN, timeout=3.0)
    assert ev6.failure
    eva = a.wait(B4, State.DOWN, timeout=3.0)
    assert eva.reason == "neighbor_down" and eva.failure
    _uncut(a)
    a.wait(B4, State.UP, timeout=5.0)
    b.wait(A4, State.UP, timeout=5.0)
    assert b.session(A4)["flaps"] == 1
    assert b.session(A4)["last_down_reason"] == "detection_timeout"


def test_admin_down_is_not_a_failure_and_poll_does_not_flap(sides: tuple[Side, Side]) -> None:
    a, b = sides
    _up(a, b, B4, A4)
    a.engine.admin_down(a.ifname, B4)
    ev = b.wait(A4, State.DOWN)
    assert (ev.reason, ev.failure, ev.remote_diag) == ("neighbor_admin_down", False, 7)
    assert a.session(B4)["state"] == "admin_down" and a.session(B4)["diag"] == 7
    a.engine.admin_up(a.ifname, B4)
    b.wait(A4, State.UP)
    # timers changed while Up: a Poll/Final, no flap; b's detection time follows
    a.settled(B4, 50)
    b.settled(A4, 50)
    cfg = SessionConfig(
        peer=B4, interface=a.ifname, local=A4, params=replace(FAST, desired_min_tx=100_000)
    )
    a.engine.update_session(cfg)
    sa = a.settled(B4, 100)
    sb = _until(
        lambda: b.session(A4), lambda s: s["detect_time_ms"] == pytest.approx(300), "b follows a"
    )
    assert sa["state"] == sb["state"] == "up" and not sa["polling"]
    assert sa["tx_interval_ms"] == pytest.approx(100)
    assert sb["detect_time_ms"] == pytest.approx(300)
    assert sa["flaps"] == sb["flaps"] == 0
    a.engine.remove_session(a.ifname, B4)
    ev = b.wait(A4, State.DOWN)
    assert not ev.failure and ev.reason == "neighbor_admin_down"


def test_gtsm_and_unknown_discriminator_drops(sides: tuple[Side, Side]) -> None:
    a, b = sides
    _up(a, b, B4, A4)
    pkt = ControlPacket(State.UP, my_discriminator=77, your_discriminator=12345).encode()
    for ttl, dst in ((64, B4), (255, B4)):
        with a.ns.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, ttl)
            s.sendto(pkt, (dst, 3784))
    with a.ns.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, 255)
        s.sendto(b"\x20\x40\x03", (B4, 3784))

    reasons = {"bad_ttl", "unknown_discriminator", "too_short"}

    def v4(snap: dict[str, Any]) -> dict[str, Any]:
        return next(x for x in snap["sockets"] if x["family"] == "ipv4")

    sock = _until(lambda: v4(b.snap()), lambda x: set(x["drops"]) >= reasons, "the drops counted")
    assert sock["drops"].get("bad_ttl") == 1
    assert sock["drops"].get("unknown_discriminator") == 1
    assert sock["drops"].get("too_short") == 1
    assert b.session(A4)["state"] == "up"


def test_thread_mode(netns_lab: Lab) -> None:
    a, b = _pair(netns_lab, mode="thread")
    _up(a, b, B4, A4)
    snap = a.snap()
    assert snap["engine"]["mode"] == "thread" and snap["sessions"][0]["state"] == "up"
    _cut(b)
    assert a.wait(B4, State.DOWN, timeout=3.0).failure


def test_control_errors_and_missing_interface(netns_lab: Lab) -> None:
    """Errors come back as EngineError across the process boundary; a session on an interface
    that does not exist yet reports socket_error and comes up once the interface appears."""
    a_ns, b_ns = netns_lab.netns("a"), netns_lab.netns("b")
    a, b = Side(a_ns, "a-b", "process"), Side(b_ns, "b-a", "process")
    netns_lab.on_close(a.engine.stop)
    netns_lab.on_close(b.engine.stop)
    cfg = SessionConfig(peer=B4, interface="a-b", local=A4, params=FAST)
    a.engine.add_session(cfg)
    with pytest.raises(EngineError, match="exists"):
        a.engine.add_session(cfg)
    with pytest.raises(EngineError, match="no BFD session"):
        a.engine.admin_down("a-b", "198.18.0.99")
    assert a.session(B4)["socket_error"]  # no such device yet
    netns_lab.veth(a_ns, "a-b", b_ns, "b-a", a_addr=A4 + "/30", b_addr=B4 + "/30")
    b.engine.add_session(SessionConfig(peer=A4, interface="b-a", local=B4, params=FAST))
    a.wait(B4, State.UP, timeout=6.0)
    assert a.session(B4)["socket_error"] == ""
    # the interface goes away and comes back (new ifindex): sockets are reopened
    a_ns.ip("link", "del", "a-b")
    assert a.wait(B4, State.DOWN, timeout=3.0).failure
    netns_lab.veth(a_ns, "a-b", b_ns, "b-a", a_addr=A4 + "/30", b_addr=B4 + "/30")
    a.wait(B4, State.UP, timeout=8.0)
    a.engine.stop()
    with pytest.raises(EngineError, match="not running"):
        a.engine.snapshot()


def _link_local(ns: Netns, ifname: str) -> str:
    deadline = time.monotonic() + 5
    while True:  # the kernel adds the fe80:: address shortly after the link comes up
        out = ns.ip("-j", "-6", "addr", "show", "dev", ifname, "scope", "link").stdout
        for link in json.loads(out or "[]"):
            for info in link.get("addr_info", []):
                if "local" in info:
                    return str(info["local"])
        assert time.monotonic() < deadline, f"no link-local address on {ifname}"
        time.sleep(0.05)  # poll interval


def test_ipv6_link_local_peers(netns_lab: Lab) -> None:
    """Unnumbered fabrics: link-local peer and source, the scope taken from the interface."""
    a, b = _pair(netns_lab, mode="thread")
    la, lb = _link_local(a.ns, "a-b"), _link_local(b.ns, "b-a")
    _up(a, b, lb, la)
    assert a.session(lb)["state"] == "up" and a.session(lb)["socket_error"] == ""


def _del_nexthop(nid: int) -> bytes:
    """RTM_DELNEXTHOP id ``nid`` with NLM_F_REQUEST|NLM_F_ACK, seq = id (by hand: bfd tests do
    not use glbd's netlink codec)."""
    body = bytes(8) + struct.pack("=HHI", 8, 1, nid)  # struct nhmsg; NHA_ID
    return struct.pack("=IHHII", 16 + len(body), 105, 0x05, nid, 0) + body


def _nexthops(ns: Netns) -> dict[int, dict[str, Any]]:
    return {n["id"]: n for n in json.loads(ns.ip("-j", "nexthop", "show").stdout or "[]")}


@pytest.mark.parametrize("mode", ["process", "thread"])
def test_armed_failover_reaches_the_kernel_before_the_event(netns_lab: Lab, mode: str) -> None:
    """A session with armed RTM_DELNEXTHOP requests: on its failure the engine deletes the
    nexthops itself (the kernel drops them from their groups, an emptied group goes with its
    route) and only then emits the event, marked failover_sent; the answers are counted, a
    refusal is named. A non-failure Down (AdminDown) sends nothing."""
    a, b = _pair(netns_lab, mode=mode)
    _up(a, b, B4, A4)
    for args in (
        ("nexthop", "add", "id", "901", "via", B4, "dev", "a-b"),
        ("nexthop", "add", "id", "903", "via", B4, "dev", "a-b"),
        ("nexthop", "add", "id", "902", "group", "901"),
        ("nexthop", "add", "id", "904", "group", "901,3/903,1"),
        ("route", "add", "10.77.1.0/24", "nhid", "902"),
        ("route", "add", "10.77.2.0/24", "nhid", "904"),
    ):
        a.ns.ip(*args)
    # armed: 901 (exists) and 999 (does not: the kernel refuses it, ENOENT)
    assert a.engine.set_failover("a-b", B4, _del_nexthop(901) + _del_nexthop(999)) == 2
    # an AdminDown from the peer is not a failure: nothing is sent
    b.engine.admin_down("b-a", A4)
    ev = a.wait(B4, State.DOWN)
    assert not ev.failure and not ev.failover_sent
    assert 901 in _nexthops(a.ns)
    b.engine.admin_up("b-a", A4)
    a.wait(B4, State.UP)
    _cut(b)
    ev = a.wait(B4, State.DOWN, timeout=3.0)
    # the event was emitted after the send: the kernel already has the result
    nhs = _nexthops(a.ns)
    assert ev.failure and ev.failover_sent
    assert 901 not in nhs and 902 not in nhs
    assert [g["id"] for g in nhs[904]["group"]] == [903]
    routes = a.ns.ip("route", "show").stdout
    assert "10.77.1.0/24" not in routes and "10.77.2.0/24 nhid 904" in routes
    fo = _until(lambda: a.snap()["engine"]["failover"], lambda f: f["refused"] > 0, "refusal")
    assert (fo["sent"], fo["acks_ok"], fo["refused"], fo["send_errors"]) == (1, 1, 1, 0)
    assert "seq 999" in fo["last_error"] and "ENOENT" in fo["last_error"]
    assert a.session(B4)["failovers"] == 1
    # disarmed: the next failure sends nothing
    _uncut(b)
    a.wait(B4, State.UP, timeout=5.0)
    assert a.engine.set_failover("a-b", B4, b"") == 0
    _cut(b)
    ev = a.wait(B4, State.DOWN, timeout=3.0)
    assert ev.failure and not ev.failover_sent
    assert a.snap()["engine"]["failover"]["sent"] == 1
