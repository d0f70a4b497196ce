"""Forwarding loss across a glbd restart, graceful restart (RFC 4724) on and off, against an
FRR 10.x spine in namespaces.

Run as root: ``.venv/bin/python bench/bgp_restart.py [--pps 1000] [--restart-delay 1.0]``

Topology (one lab, fresh namespaces per case)::

    hostA 10.100.0.2 -- spine (FRR 10.x, AS 65100, GR at FRR's default: helper)
                          |  eBGP 172.16.51.0/24
                        leaf (glbd daemon, AS 65001, originates 10.201.0.0/24)
                          |
                        hostB 10.201.0.2

hostA sends a UDP stream at a fixed rate to hostB, through the spine and the leaf: the spine
forwards it only while it has the leaf's prefix from BGP. Per case, with the stream running:

* ``glbd kill -9``: the glbd daemon is killed (its ExaBGP follows it: PR_SET_PDEATHSIG) and
  started again ``--restart-delay`` later (systemd's RestartSec=1s in the packaged unit);
* ``exabgp kill -9``: only glbd's ExaBGP child is killed; glbd's supervisor restarts it.

``--bfd on`` adds BFD between the spine and the leaf (FRR ``neighbor X bfd``, glbd's
``[bfd]``), ``--bfd cpf`` also FRR's ``bfd check-control-plane-failure``.

The stream runs until the spine has the prefix again, no longer stale, plus 1 s. Loss = packets
sent - packets received; the outage is the longest run of consecutive lost packets / rate.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from glbdlab.frr import FrrInstance
from glbdlab.netns import Lab, Netns, require_netns
from glbdlab.nodes import PERMIT_ALL
from glbdlab.provision import provisioned

from glbd.cli import glbctl as ctl

PREFIX = "10.201.0.0/24"
PORT = 40_000


def frr_conf(bfd: str) -> str:
    peer = "172.16.51.2"
    bfd_lines = {
        "off": [],
        "on": [f" neighbor {peer} bfd"],
        "cpf": [f" neighbor {peer} bfd", f" neighbor {peer} bfd check-control-plane-failure"],
    }[bfd]
    return "\n".join(
        [
            "frr defaults datacenter",
            "router bgp 65100",
            " bgp router-id 10.0.0.11",
            " no bgp ebgp-requires-policy",
            " neighbor 172.16.51.2 remote-as 65001",
            " neighbor 172.16.51.2 timers 3 9",
            " neighbor 172.16.51.2 timers connect 1",
            *bfd_lines,
            " address-family ipv4 unicast",
            "  neighbor 172.16.51.2 activate",
            " exit-address-family",
            "exit",
            "",
        ]
    )


def glbd_conf(run_dir: Path, gr: bool, bfd: bool) -> str:
    return "\n".join(
        [
            'router_id = "10.0.0.1"',
            "local_as = 65001",
            'role = "load-balancer"',
            f'originate = ["{PREFIX}"]',
            "",
            "[[neighbors]]",
            'address = "172.16.51.1"',
            "remote_as = 65100",
            'interface = "l1-s1"',
            'local_address = "172.16.51.2"',
            "passive = false",
            f"import = {PERMIT_ALL}",
            f"export = {PERMIT_ALL}",
            "",
            "[bgp]",
            f'graceful_restart = "{"full" if gr else "off"}"',
            "",
            "[bfd]",
            f"enabled = {'true' if bfd else 'false'}",
            "",
            "[heartbeat]",
            "enabled = false",
            "",
            "[control]",
            f'socket = "{run_dir / "glbd.sock"}"',
            "",
            "[logging]",
            'level = "info"',
            'format = "json"',
            "",
        ]
    )


class Glbd:
    def __init__(self, ns: Netns, run_dir: Path, gr: bool, bfd: bool) -> None:
        self.ns = ns
        self.dir = run_dir
        self.conf = run_dir / "glbd.toml"
        self.conf.write_text(glbd_conf(run_dir, gr, bfd))
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.dir / "glbd.log", "ab") as out:
            self.proc = self.ns.popen(
                [sys.executable, "-m", "glbd", "run", "-c", str(self.conf)],
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def ready(self) -> bool:
        try:
            st = ctl.request(str(self.dir / "glbd.sock"), "status", timeout=1.0)
        except ctl.DaemonError:
            return False
        return bool(st.get("state") == "running")

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(5)

    def exabgp_pid(self) -> int | None:
        assert self.proc is not None
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                stat = (d / "stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                cmd = (d / "cmdline").read_bytes()
                if ppid == self.proc.pid and b"exabgp" in cmd and b"bridge" not in cmd:
                    return int(d.name)
        return None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def until(pred: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():  # type: ignore[operator]
            return
        time.sleep(0.02)
    raise RuntimeError(f"timed out after {timeout:g} s waiting for {what}")


def spine_route(frr: FrrInstance) -> dict[str, object]:
    data = frr.vtysh_json(f"show bgp ipv4 unicast {PREFIX} json")
    paths = data.get("paths", []) if isinstance(data, dict) else []
    return paths[0] if paths else {}


def refreshed(frr: FrrInstance) -> bool:
    path = spine_route(frr)
    return bool(path) and not path.get("stale")


def kernel_has(ns: Netns) -> bool:
    return bool(json.loads(ns.ip("-j", "route", "show", PREFIX).stdout or "[]"))


@dataclass
class Stream:
    sent: int = 0
    got: set[int] | None = None


@contextlib.contextmanager
def stream(src: Netns, dst: Netns, dst_addr: str, pps: int) -> Iterator[Stream]:
    """A UDP stream of sequence numbers at ``pps`` from ``src`` to ``dst``."""
    res = Stream(got=set())
    rx = dst.socket()
    rx.bind(("0.0.0.0", PORT))
    rx.settimeout(0.2)
    tx = src.socket()
    stop = threading.Event()

    def send() -> None:
        gap = 1.0 / pps
        t = time.monotonic()
        while not stop.is_set():
            tx.sendto(struct.pack("!Q", res.sent), (dst_addr, PORT))
            res.sent += 1
            t += gap
            delay = t - time.monotonic()
            if delay > 0:
                time.sleep(delay)

    def recv() -> None:
        assert res.got is not None
        while not stop.is_set():
            try:
                data = rx.recv(64)
            except TimeoutError:
                continue
            except OSError:
                return
            res.got.add(struct.unpack("!Q", data[:8])[0])

    threads = [threading.Thread(target=f, daemon=True) for f in (recv, send)]
    for th in threads:
        th.start()
    try:
        yield res
    finally:
        stop.set()
        for th in threads:
            th.join(5)
        time.sleep(0.2)  # packets in flight
        tx.close()
        rx.close()


def run_case(
    gr: bool, what: str, pps: int, restart_delay: float, bfd: str
) -> tuple[int, float, int]:
    with Lab() as lab:
        ha, sp, lf, hb = (lab.netns(n) for n in ("hostA", "spine", "leaf", "hostB"))
        lab.veth(ha, "ha-s", sp, "s-ha", a_addr="10.100.0.2/24", b_addr="10.100.0.1/24")
        lab.veth(lf, "l1-s1", sp, "s1-l1", a_addr="172.16.51.2/24", b_addr="172.16.51.1/24")
        lab.veth(lf, "l-hb", hb, "hb-l", a_addr="10.201.0.1/24", b_addr="10.201.0.2/24")
        ha.ip("route", "add", "default", "via", "10.100.0.1")
        hb.ip("route", "add", "default", "via", "10.201.0.1")
        frr = FrrInstance(sp, hostname="spine").start(frr_conf(bfd))
        run_dir = Path(f"/tmp/glbd-bgp-restart-{lab.tag}")
        run_dir.mkdir(mode=0o700)
        glbd = Glbd(lf, run_dir, gr, bfd != "off")
        try:
            glbd.start()
            until(glbd.ready, 30, "glbd ready")
            until(lambda: kernel_has(sp), 30, "the leaf's prefix on the spine")
            if bfd != "off":
                frr.wait_bfd_up(["172.16.51.2"], timeout=30)
            with stream(ha, hb, "10.201.0.2", pps) as res:
                until(lambda: res.got, 5, "the stream")
                time.sleep(1.0)
                if what == "glbd":
                    glbd.kill9()
                    time.sleep(restart_delay)
                    glbd.start()
                    until(glbd.ready, 30, "glbd ready again")
                else:
                    pid = glbd.exabgp_pid()
                    assert pid is not None, "no ExaBGP child"
                    os.kill(pid, signal.SIGKILL)
                    until(lambda: glbd.exabgp_pid() not in (None, pid), 30, "a new ExaBGP")
                time.sleep(0.5)
                until(
                    lambda: kernel_has(sp) and refreshed(frr),
                    60,
                    "the leaf's prefix back on the spine, refreshed",
                )
                time.sleep(1.0)
            assert res.got is not None
            lost = res.sent - len(res.got)
            longest = run = 0
            for i in range(res.sent):
                run = run + 1 if i not in res.got else 0
                longest = max(longest, run)
            return lost, longest / pps, res.sent
        finally:
            glbd.stop()
            frr.stop()
            with contextlib.suppress(OSError):
                for f in run_dir.iterdir():
                    f.unlink()
                run_dir.rmdir()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pps", type=int, default=1000)
    ap.add_argument("--restart-delay", type=float, default=1.0)
    ap.add_argument(
        "--bfd",
        choices=("off", "on", "cpf"),
        default="off",
        help="BFD between spine and leaf (cpf: FRR with bfd check-control-plane-failure)",
    )
    args = ap.parse_args()
    require_netns()
    if provisioned() is None:
        sys.exit("no FRR 10.x chroot: run glbd-lab provision")
    print(f"command: {' '.join([sys.executable, *sys.argv])}")
    print(
        f"UDP stream {args.pps} pps hostA -> FRR 10.x spine -> glbd leaf -> hostB, BFD {args.bfd}"
    )
    print(f"{'restart':18s} {'graceful_restart':17s} {'lost':>7s} {'outage s':>9s} {'sent':>7s}")
    for what in ("glbd", "exabgp"):
        for gr in (True, False):
            lost, outage, sent = run_case(gr, what, args.pps, args.restart_delay, args.bfd)
            label = f"{what} kill -9"
            mode = "full" if gr else "off"
            print(f"{label:18s} {mode:17s} {lost:7d} {outage:9.3f} {sent:7d}")


if __name__ == "__main__":
    main()
