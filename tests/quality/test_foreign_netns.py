"""The foreign-load counter in the real kernel: a router with three ports, the program on the
egress of one (``r-o``), UDP from two peers and from the router itself.

::

    a  a-r ---- r-a  router r  r-o ---- o-r  o (receives)
    b  b-r ---- r-b

Every byte leaving ``r-o`` is known: the router has IPv6 off and a permanent neighbour on
``r-o`` (and ``o`` one for the router), so no ARP, ND or MLD of the router's ever leaves
there; what does is the test's datagrams, ``14 + 20 + 8 + payload`` bytes each at tc egress.
"""

from __future__ import annotations

import json
import shutil
import socket
import struct
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import astuple, dataclass
from pathlib import Path

import pytest
from glbdlab.netns import Lab, Netns
from glbdlab.waits import until

from glbd.flowlet.loader import FlowletAttachment, FlowletParams
from glbd.flowlet.loader import object_path as flowlet_object
from glbd.quality.bpfmap import PinnedMap, possible_cpus
from glbd.quality.foreigncount import (
    FOREIGN,
    PREF,
    STEERED,
    Counts,
    ForeignCounter,
    PortClasses,
    object_path,
    sum_percpu,
)
from glbd.quality.foreignservice import ForeignService, port_classes
from glbd.quality.linkq import LinkMonParams

pytestmark = [pytest.mark.netns, pytest.mark.slow]

OUT = "198.18.3.1"  # o's address on o-r
PORT = 4791
HEADERS = 14 + 20 + 8  # Ethernet, IPv4, UDP: skb->len at tc egress is these + the payload


@dataclass
class Rig:
    lab: Lab
    a: Netns
    b: Netns
    r: Netns
    o: Netns
    sink: socket.socket
    received: int = 0

    def ifindex(self, name: str) -> int:
        return int(json.loads(self.r.ip("-j", "link", "show", name).stdout)[0]["ifindex"])

    def mac(self, ns: Netns, name: str) -> str:
        return str(json.loads(ns.ip("-j", "link", "show", name).stdout)[0]["address"])

    def link(self, peer: Netns, i: int) -> None:
        """Router port ``r-<peer>`` to ``<peer>-r``, 198.18.i.0/30 (the peer .1, the router .2);
        the peer's default route goes through the router."""
        p = peer.node
        self.lab.veth(self.r, f"r-{p}", peer, f"{p}-r", a_addr=f"198.18.{i}.2/30",
                      b_addr=f"198.18.{i}.1/30")  # fmt: skip
        if peer is self.o:
            # permanent neighbours both ways: nothing of the router's own leaves r-o but ours
            self.r.ip("neigh", "replace", OUT, "lladdr", self.mac(self.o, "o-r"), "dev", "r-o",
                      "nud", "permanent")  # fmt: skip
            self.o.ip("neigh", "replace", "198.18.3.2", "lladdr", self.mac(self.r, "r-o"),
                      "dev", "o-r", "nud", "permanent")  # fmt: skip
        else:
            peer.ip("route", "add", "default", "via", f"198.18.{i}.2")
            assert peer.ping(f"198.18.{i}.2", count=5), f"{p} cannot reach the router"

    def send(self, ns: Netns, n: int, payload: int) -> int:
        """``n`` datagrams of ``payload`` bytes from ``ns`` to o: the bytes they make at r-o."""
        with ns.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for _ in range(n):
                s.sendto(b"x" * payload, (OUT, PORT))
        return n * (HEADERS + payload)

    def delivered(self) -> int:
        """Datagrams that reached o so far (so they left r-o)."""
        while True:
            try:
                self.sink.recv(65536)
            except BlockingIOError:
                return self.received
            self.received += 1


def build(lab: Lab) -> Rig:
    a, b, r, o = (lab.netns(n) for n in ("a", "b", "r", "o"))
    # before the ports exist: they get no IPv6 (no link-local, no MLD or ND of the router's)
    r.run(["sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1",
           "net.ipv6.conf.default.disable_ipv6=1"])  # fmt: skip
    sink = o.socket(socket.AF_INET, socket.SOCK_DGRAM)  # takes the datagrams: no ICMP back
    rig = Rig(lab, a, b, r, o, sink)
    lab.on_close(sink.close)
    for i, peer in enumerate((a, b, o), start=1):
        rig.link(peer, i)
    sink.bind((OUT, PORT))
    sink.setblocking(False)
    return rig


Start = Callable[..., Awaitable[ForeignCounter]]


@pytest.fixture
def rig(netns_lab: Lab) -> Rig:
    return build(netns_lab)


@pytest.fixture
async def counter(rig: Rig) -> AsyncIterator[Start]:
    """``await counter(interfaces, classes)``: a started ForeignCounter in the router (a new
    one each call, as a restarted glbd); the last one is stopped after the test."""
    if object_path() is None:
        pytest.skip(
            "foreign.bpf.o is not built (glbd/flowlet/bpf/build.sh glbd/quality/bpf/"
            "foreign.bpf.c; bootstrap.sh builds it)"
        )
    made: list[ForeignCounter] = []

    async def start(
        interfaces: tuple[str, ...] = ("r-o",), classes: PortClasses | None = None
    ) -> ForeignCounter:
        fc = ForeignCounter(netns=rig.r.name)
        made.append(fc)
        await fc.start(interfaces, classes or PortClasses(FOREIGN, {"r-a": STEERED}))
        return fc

    yield start
    if made:
        await made[-1].stop()


def tc_egress(rig: Rig, ifname: str) -> list[dict[str, object]]:
    """The filters (with their options) on ``ifname``'s egress."""
    out = rig.r.run(["tc", "-j", "filter", "show", "dev", ifname, "egress"]).stdout
    return [f for f in json.loads(out or "[]") if "options" in f]


def prog_name(f: dict[str, object]) -> str:
    opts = f["options"]
    assert isinstance(opts, dict)
    return str(opts["prog"]["name"])


def prog_id(f: dict[str, object]) -> int:
    opts = f["options"]
    assert isinstance(opts, dict)
    return int(opts["prog"]["id"])


async def wait_packets(fc: ForeignCounter, ifindex: int, packets: int) -> Counts:
    """The counts of ``ifindex`` once they reach ``packets``; more would fail the test."""
    await until(
        lambda: fc.read().get(ifindex, Counts()).packets >= packets,
        what=f"{packets} packets counted at ifindex {ifindex}",
    )
    return fc.read()[ifindex]


def minus(c: Counts, base: Counts) -> Counts:
    return Counts(*(x - y for x, y in zip(astuple(c), astuple(base), strict=True)))


async def test_foreign_is_what_entered_by_a_foreign_port_or_the_router(
    rig: Rig, counter: Start
) -> None:
    fc = await counter(("r-o",), PortClasses(FOREIGN, {"r-a": STEERED}))
    out = rig.ifindex("r-o")
    assert fc.attached == ["r-o"] and fc.missing == []
    assert fc.read().get(out, Counts()) == Counts()

    steered = rig.send(rig.a, 20, 100)
    foreign = rig.send(rig.b, 15, 200) + rig.send(rig.r, 10, 300)
    c = await wait_packets(fc, out, 45)
    assert c == Counts(steered + foreign, 45, foreign, 25)
    assert fc.foreign_bytes() == {out: foreign}
    snap = fc.snapshot()
    assert snap["counts"]["r-o"]["foreign_bytes"] == foreign
    assert (snap["default_class"], snap["ports"]) == ("foreign", {"r-a": "steered"})

    # a leaf's view: default steered, b foreign (the router's own stays foreign)
    await fc.apply(("r-o",), PortClasses(STEERED, {"r-b": FOREIGN}))
    assert fc.events["attached"] == 1 and fc.events["loaded"] == 1  # nothing re-attached
    steered = rig.send(rig.a, 12, 400)
    foreign = rig.send(rig.b, 7, 50) + rig.send(rig.r, 3, 60)
    d = minus(await wait_packets(fc, out, 45 + 22), c)
    assert d == Counts(steered + foreign, 22, foreign, 10)


async def test_stop_removes_only_our_filter_and_nothing_is_counted_after(
    rig: Rig, counter: Start
) -> None:
    # someone else's filter on the same egress: the same program's name at another priority,
    # after ours (one before it returning TC_ACT_OK, as these do, would end the chain there).
    # bpftool and tc run outside ``ip netns exec``, whose fresh /sys has no bpffs
    other = Path(f"/sys/fs/bpf/glbd-test-{rig.lab.tag}")
    other.mkdir()
    try:
        subprocess.run(["bpftool", "prog", "load", str(object_path()), f"{other}/prog",
                        "type", "classifier"], check=True, capture_output=True)  # fmt: skip
        rig.r.run(["tc", "qdisc", "replace", "dev", "r-o", "clsact"])
        subprocess.run(["nsenter", f"--net=/run/netns/{rig.r.name}", "tc", "filter", "add",
                        "dev", "r-o", "egress", "pref", "60000", "bpf", "da", "object-pinned",
                        f"{other}/prog"], check=True, capture_output=True)  # fmt: skip
    finally:
        (other / "prog").unlink(missing_ok=True)
        other.rmdir()
    theirs = tc_egress(rig, "r-o")
    assert [f["pref"] for f in theirs] == [60000]

    fc = await counter()
    out = rig.ifindex("r-o")
    assert sorted(f["pref"] for f in tc_egress(rig, "r-o")) == [PREF, 60000]
    rig.send(rig.b, 5, 100)
    before = await wait_packets(fc, out, 5)
    assert before.foreign_packets == 5
    # the counts map, held open by the test: it outlives the program
    counts = PinnedMap(fc.map_pin("counts"), value_size=32 * possible_cpus())
    try:
        await fc.stop()
        assert tc_egress(rig, "r-o") == theirs  # the other filter as it was, ours gone
        assert not fc.dir.exists()
        assert fc.read() == {} and fc.prog_id is None
        assert fc.events["detached"] == 1

        raw = counts.lookup(struct.pack("<I", out))
        assert raw is not None and sum_percpu(raw, possible_cpus()) == before
        got = rig.delivered()
        rig.send(rig.b, 5, 100)
        rig.send(rig.r, 5, 100)
        await until(lambda: rig.delivered() >= got + 10, what="10 datagrams at o")
        assert counts.lookup(struct.pack("<I", out)) == raw  # nothing counted
    finally:
        counts.close()


async def test_a_recreated_interface_is_attached_again(rig: Rig, counter: Start) -> None:
    fc = await counter(("r-o",), PortClasses(FOREIGN, {"r-a": STEERED}))
    old_out, old_a = rig.ifindex("r-o"), rig.ifindex("r-a")
    rig.send(rig.a, 3, 100)
    await wait_packets(fc, old_out, 3)

    for name in ("r-o", "r-a"):
        rig.r.ip("link", "del", name)
    await fc.apply(("r-o",), PortClasses(FOREIGN, {"r-a": STEERED}))
    assert fc.attached == [] and fc.missing == ["r-o"]
    assert fc.read() == {}  # a gone interface's counters go with it

    rig.link(rig.o, 3)
    rig.link(rig.a, 1)
    out, a = rig.ifindex("r-o"), rig.ifindex("r-a")
    assert (out, a) != (old_out, old_a)
    await fc.apply(("r-o",), PortClasses(FOREIGN, {"r-a": STEERED}))
    assert fc.attached == ["r-o"] and fc.events["reattached"] == 1
    assert fc.ifindex == {"r-a": a, "r-o": out}
    assert [prog_name(f) for f in tc_egress(rig, "r-o")] == ["glbd_foreign"]

    # the port map follows r-a's new ifindex: its datagrams are steered
    steered = rig.send(rig.a, 4, 100)
    foreign = rig.send(rig.b, 2, 100)
    assert await wait_packets(fc, out, 6) == Counts(steered + foreign, 6, foreign, 2)

    # apply again with nothing changed: nothing happens
    events = dict(fc.events)
    await fc.apply(("r-o",), PortClasses(FOREIGN, {"r-a": STEERED}))
    assert fc.events == events


async def test_a_restart_leaves_one_filter_of_ours(rig: Rig, counter: Start) -> None:
    first = await counter()
    second = await counter()  # a new glbd: loads its own program, replaces the filter
    assert second.prog_id != first.prog_id
    ours = [f for f in tc_egress(rig, "r-o") if f["pref"] == PREF]
    assert len(ours) == 1 and prog_name(ours[0]) == "glbd_foreign"
    assert prog_id(ours[0]) == second.prog_id

    # the same counter started again: still one filter, the new program's
    await second.start(("r-o",), PortClasses(FOREIGN, {"r-a": STEERED}))
    ours = [f for f in tc_egress(rig, "r-o") if f["pref"] == PREF]
    assert len(ours) == 1 and prog_id(ours[0]) == second.prog_id
    out = rig.ifindex("r-o")
    foreign = rig.send(rig.r, 3, 100)
    assert await wait_packets(second, out, 3) == Counts(foreign, 3, foreign, 3)
    assert first.read() == {}  # its program runs nowhere now: its map stays empty


async def test_the_flowlet_program_s_pins_are_left_alone(rig: Rig, counter: Start) -> None:
    if flowlet_object() is None:
        pytest.skip("flowlet.bpf.o is not built (glbd/flowlet/bpf/build.sh)")
    flowlet = FlowletAttachment(netns=rig.r.name)
    params = FlowletParams(interfaces=("r-a",), timeout_ns=10**6, aging_ns=10**10,
                           table_size=1024, set_hash_policy=False)  # fmt: skip
    await flowlet.start(params)
    try:
        fc = await counter()
        assert fc.dir.parent == flowlet.dir
        pins = sorted(str(p.relative_to(flowlet.dir)) for p in flowlet.dir.rglob("*"))
        assert "prog" in pins and "foreign/prog" in pins

        await fc.stop()
        left = sorted(str(p.relative_to(flowlet.dir)) for p in flowlet.dir.rglob("*"))
        assert left == [p for p in pins if not p.startswith("foreign")]
        assert (await flowlet.poll()).attached == ["r-a"]

        # and the other way round: the flowlet program's stop leaves ours
        fc = await counter()
        await flowlet.stop()
        assert fc.prog_pin.exists() and flowlet.dir.exists()
        assert not flowlet.prog_pin.exists()
        rig.send(rig.r, 2, 10)
        await wait_packets(fc, rig.ifindex("r-o"), 2)
    finally:
        await flowlet.stop()


# ---- the daemon's service: the classes by role, the fallback and its end ----------------------


async def test_the_service_falls_back_to_all_traffic_until_the_program_loads(
    rig: Rig, tmp_path: Path
) -> None:
    """Where the program cannot load, the service says why, counts nothing and gives the link
    monitor bands from all traffic; once it loads (the next check), it counts and the monitor
    gets the ingress counter back. A helper's fabric ports are steered, its own traffic not."""
    good = object_path()
    if good is None:
        pytest.skip("foreign.bpf.o is not built (bootstrap.sh builds it)")
    obj = tmp_path / "foreign.bpf.o"
    obj.write_bytes(b"not an ELF object")
    seen: list[bool] = []
    svc = ForeignService(rig.r.name, lambda: seen.append(svc.counting), obj=obj)
    fabric = ["r-a", "r-b", "r-o"]
    args = (True, ["r-o"], port_classes(fabric, helper=True, load_balancer=False), 3600.0)
    p = LinkMonParams(foreign_ingress=True, band_from_foreign=True)
    try:
        await svc.start(*args)
        assert not svc.counting and svc.error, svc.snapshot()
        assert svc.read() is None
        fallback = svc.effective(p)
        assert not fallback.foreign_ingress and not fallback.band_from_foreign
        assert (svc.snapshot() or {})["counting"] is False
        assert tc_egress(rig, "r-o") == [] and seen == []

        shutil.copyfile(good, obj)  # now it loads (a reload runs the same check)
        await svc.start(*args)
        assert svc.counting and svc.error is None and seen == [True]
        assert svc.effective(p) == p
        out = rig.ifindex("r-o")
        own = rig.send(rig.r, 20, 300)
        steered = rig.send(rig.a, 30, 200)
        await until(lambda: (svc.read() or {}).get(out, 0) >= own, what="own bytes counted")
        await until(lambda: rig.delivered() >= 50, what="every datagram delivered")
        assert (svc.read() or {})[out] == own  # a's were steered: not foreign
        assert steered > 0
    finally:
        await svc.stop()
    assert seen == [True, False]
    assert tc_egress(rig, "r-o") == []


async def test_the_service_removes_what_a_dead_glbd_left_when_not_counting(
    rig: Rig, counter: Start
) -> None:
    """A glbd that died left its filter; the next one, configured without the ingress
    counter, removes it (and its pins)."""
    fc = await counter()
    assert [prog_name(f) for f in tc_egress(rig, "r-o")] == ["glbd_foreign"]
    svc = ForeignService(rig.r.name, lambda: None)
    await svc.start(False, ["r-o"], port_classes(["r-o"], helper=True, load_balancer=False), 5)
    assert tc_egress(rig, "r-o") == []
    assert not fc.dir.exists()
    assert svc.snapshot() is None


@pytest.mark.parametrize(
    ("helper", "load_balancer", "default", "fabric_class"),
    [
        (True, False, FOREIGN, STEERED),
        (False, True, STEERED, FOREIGN),
        (True, True, STEERED, STEERED),
    ],
)
def test_the_classes_by_role(
    helper: bool, load_balancer: bool, default: int, fabric_class: int
) -> None:
    pc = port_classes(["eth1", "eth2"], helper=helper, load_balancer=load_balancer)
    assert pc.default == default
    assert dict(pc.ports) == {"eth1": fabric_class, "eth2": fabric_class}
