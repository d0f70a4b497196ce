"""glbd itself runs the flowlet program: ``[flowlet] enabled`` attaches it on every interface
that is no neighbor's port, ``glbctl flowlet`` shows it and its counters, a restart adopts it
(under ``ip netns exec`` glbd gets a fresh bpffs each time, so the pins are made again from
the filter), and a stop with ``on_stop = "remove"`` takes the filters and pins away."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flowletrig import Rig, bursts
from glbdlab.nodes import wait_until

from glbd.cli import glbctl as ctl
from glbd.flowlet.loader import object_path

pytestmark = [pytest.mark.netns, pytest.mark.slow]

IFACES = ["r-h", "r-m1", "r-m2"]


def _config(tmp: Path, on_stop: str) -> Path:
    cfg = tmp / "glbd.toml"
    cfg.write_text(
        f"""router_id = "198.18.0.2"
local_as = 65001
role = "load-balancer"

[bfd]
enabled = false

[flowlet]
enabled = true
timeout_us = 1000
table_size = 1024
on_stop = "{on_stop}"

[control]
socket = "{tmp / "glbd.sock"}"

[logging]
format = "json"
"""
    )
    return cfg


class Glbd:
    def __init__(self, rig: Rig, tmp: Path) -> None:
        self.rig, self.tmp = rig, tmp
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, on_stop: str, edit: Callable[[str], str] = str) -> None:
        cfg = _config(self.tmp, on_stop)
        cfg.write_text(edit(cfg.read_text()))
        with open(self.tmp / "glbd.log", "ab") as log:
            self.proc = self.rig.r.popen(
                [sys.executable, "-m", "glbd", "run", "-c", str(cfg)], stdout=log, stderr=log
            )

    def flowlet(self) -> dict[str, Any]:
        assert self.proc is not None and self.proc.poll() is None, self.log()
        res: dict[str, Any] = ctl.request(str(self.tmp / "glbd.sock"), "flowlet", timeout=2)
        return res

    def when(self, pred: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
        """``glbctl flowlet`` if ``pred`` holds for it, else None."""
        snap = self.flowlet()
        return snap if pred(snap) else None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)

    def log(self) -> str:
        return (self.tmp / "glbd.log").read_text(errors="replace")[-3000:]


def _filters(rig: Rig, ifname: str) -> str:
    return rig.r.run(["tc", "-j", "filter", "show", "dev", ifname, "ingress"]).stdout


def test_glbd_attaches_adopts_and_removes(rig: Rig, tmp_path: Path) -> None:
    if object_path() is None:
        pytest.skip(
            "flowlet.bpf.o is not built (glbd/flowlet/bpf/build.sh; bootstrap.sh builds it)"
        )
    rig.group((1, 1))
    g = Glbd(rig, tmp_path)
    try:
        g.start(on_stop="keep")
        first = wait_until(
            lambda: g.when(lambda s: s.get("attached") == IFACES),
            60,
            what="glbd's flowlet program on every interface",
        )
        assert first["error"] is None and first["events"]["loaded"] == 1
        assert first["hash_policy"] == {"ipv4": "1", "ipv6": "1"}
        with rig.udp() as s:
            bursts(s, 5, 2, 0.004)
        counted = wait_until(
            lambda: g.when(lambda s: s["counters"]["packets"] >= 10),
            10,
            what="the packets counted",
        )
        rows = {r["interface"]: r for r in counted["interfaces"]}
        assert rows["r-h"]["packets"] == 10 and rows["r-h"]["attached"]
        # move = "on-change" (the default) and no weight changed: every gap keeps the flow
        assert rows["r-h"]["flowlets"] == 1 and rows["r-h"]["moved"] == 0
        assert rows["r-h"]["kept"] == 4
        assert first["move"] == "on-change" and first["move_gate"]["opened"] == 0
        # an interface that appears is found at the next reconcile tick (a netlink dump, no
        # process), long before the full check every 12 ticks; one that goes, likewise
        rig.r.run(["ip", "link", "add", "r-new", "type", "veth", "peer", "name", "r-newp"])
        wait_until(
            lambda: g.when(lambda s: s.get("attached") == sorted([*IFACES, "r-new", "r-newp"])),
            30,
            what="the program on a new interface",
        )
        rig.r.run(["ip", "link", "del", "r-new"])  # and its peer
        wait_until(
            lambda: g.when(lambda s: s.get("attached") == IFACES), 30, what="r-new forgotten"
        )

        g.stop()  # on_stop = "keep": the filters stay, the flows keep their salts
        assert "glbd_flowlet" in _filters(rig, "r-h")

        g.start(on_stop="remove")
        again = wait_until(
            lambda: g.when(lambda s: s.get("attached") == IFACES),
            60,
            what="the program adopted",
        )
        assert again["prog_id"] == first["prog_id"]
        ev = again["events"]
        assert (ev["adopted"], ev["loaded"], ev["repinned"]) == (1, 0, 1), ev
        assert again["counters"]["packets"] >= 10

        g.stop()
        for ifname in IFACES:
            assert "glbd_flowlet" not in _filters(rig, ifname)
    finally:
        g.stop()


def test_auto_timeout_follows_a_queue_on_a_fabric_link(rig: Rig, tmp_path: Path) -> None:
    """``timeout_us = "auto"`` (the default): held at ``timeout_start_us`` (100 ms) while the
    window has not yet seen the fabric (the link's queue is empty); once a queue builds there,
    the timeout rises to cover its drain time. A restart resumes the timeout it left, not the
    start value: the queues it measured are still there."""
    if object_path() is None:
        pytest.skip(
            "flowlet.bpf.o is not built (glbd/flowlet/bpf/build.sh; bootstrap.sh builds it)"
        )

    def edit(text: str) -> str:  # r-m1: a neighbor's port (monitored), shaped to 1 Mbit/s
        return text.replace("timeout_us = 1000\n", "").replace(
            "[bfd]",
            '[[neighbors]]\naddress = "198.18.1.2"\nremote_as = 65100\ninterface = "r-m1"\n'
            'import = ["0.0.0.0/0 le 32", "::/0 le 128"]\n'
            'export = ["0.0.0.0/0 le 32", "::/0 le 128"]\n\n'
            '[link_quality]\ncapacity_mbps = { "r-m1" = 1 }\n\n[bfd]',
        )

    rig.r.run(["tc", "qdisc", "replace", "dev", "r-m1", "root", "tbf", "rate", "1mbit",
               "burst", "4kb", "limit", "100kb"])  # fmt: skip
    g = Glbd(rig, tmp_path)
    try:
        g.start(on_stop="keep", edit=edit)
        first = wait_until(
            lambda: g.when(lambda s: s.get("attached") == ["r-h", "r-m2"]),
            60,
            what="glbd's flowlet program on the host-facing interfaces",
        )
        assert first["timeout_source"] == "auto" and first["timeout_us"] == 100_000.0
        assert first["skew"]["peak_local_us"] == 0.0 and first["skew"]["start_us"] == 100_000
        # out of r-m1, over the sink's connected route; unconnected: the sink's port
        # unreachables do not fail the sends
        s = rig.h.socket(socket.AF_INET, socket.SOCK_DGRAM)

        def deeper() -> dict[str, Any] | None:
            for _ in range(100):  # 120 kB: more than the 100 kB the shaper queues
                s.sendto(b"q" * 1200, ("198.18.1.2", 9))
            return g.when(
                lambda f: f["timeout_us"] >= 400_000 and f["events"]["timeout_changed"] >= 1
            )

        # 100 kB queued at 1 Mbit/s drain in 800 ms: far above the start hold
        risen = wait_until(deeper, 30, what="the flowlet timeout above 400 ms")
        s.close()
        assert risen["skew"]["peak_local_us"] >= 400_000
        assert risen["events"]["timeout_changed"] >= 1 and risen["error"] is None
        assert '"event": "flowlet_timeout"' in g.log() or "flowlet_timeout" in g.log()

        g.stop()  # on_stop = "keep": the program and its config map stay
        g.start(on_stop="remove", edit=edit)
        again = wait_until(
            lambda: g.when(lambda s: s.get("attached") == ["r-h", "r-m2"]),
            60,
            what="the program adopted",
        )
        assert again["events"]["adopted"] == 1
        assert again["timeout_us"] >= risen["timeout_us"]  # not back at 100 ms
        assert again["skew"]["resumed_us"] == again["timeout_us"]
    finally:
        g.stop()
