"""A package upgrade of a running glbd loses no packet.

The package is built twice from this tree (``packaging/build-deb``, and again with
``--version-suffix +upgrade1``: a newer version), the first installed by apt into a fresh
bookworm tree. Its glbd runs leaf1 of a 2 x 2 leaf-spine fabric with hosts (FRR 10.x with BFD
on both spines and on leaf2), chrooted into that tree inside leaf1's namespace (as root, not as
the unit's user glbd), its control socket at the default path where the package's postinst
finds it. 1000 numbered UDP datagrams
a second flow host1 -> host2 and host2 -> host1 through leaf1 while:

1. ``dpkg -i`` of the newer .deb runs inside the tree. Its postinst arms the running glbd's
   graceful restart (``glbctl graceful-restart``) before debhelper's code would restart the
   unit; the tree has no systemd (and a policy-rc.d that forbids starting services), so
2. the test does what systemd's ``restart`` of the unit does: SIGTERM to glbd (``KillMode=
   mixed``: to glbd only), wait for it to exit, start the installed ``/usr/sbin/glbd`` (now
   the new version) again;
3. it waits until the new glbd is up with both spines, every End-of-RIB in (each way), its BFD
   up and the spines' paths to leaf1's prefix fresh again; a few hundred datagrams later the
   streams stop.

With ``bgp.graceful_restart`` at its default (``"full"``) nothing may be lost in either
direction. With ``"helper"`` the armed stop falls back to a planned one (withdraw first) and
the loss is printed for comparison. ``pytest -s`` shows the numbers.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import CHROOT_ENV, REPO, SUITE, in_chroot, installed_copy
from glbdlab.frr import FrrInstance, start_fabric_frr
from glbdlab.netns import Lab
from glbdlab.nodes import GlbdOptions, glbd_config, kernel_group_for, wait_until
from glbdlab.topology import Fabric, leaf_spine

from tests.seqtraffic import Stream

pytestmark = [pytest.mark.netns, pytest.mark.frr, pytest.mark.slow]

TOPO = leaf_spine(2, 2)
P1, P2 = str(TOPO.node("leaf1").prefix4), str(TOPO.node("leaf2").prefix4)
SPINES = ("spine1", "spine2")
#: the control socket the package's config names (the postinst's glbctl talks to it)
SOCKET = "/run/glbd/glbd.sock"
CONFIG = Path("/etc/glbd/lab/leaf1.toml")
SUFFIX = "+upgrade1"


@pytest.fixture(scope="session")
def newer_deb(deb: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same tree built again as a newer version (``--version-suffix``)."""
    out = tmp_path_factory.mktemp("deb-upgrade")
    res = subprocess.run(
        [str(REPO / "packaging/build-deb"), "--suite", SUITE, "--version-suffix", SUFFIX, str(out)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert res.returncode == 0, f"build-deb {SUFFIX}: {res.stdout[-3000:]}{res.stderr[-3000:]}"
    built = Path(res.stdout.splitlines()[-1])
    assert built.is_file() and built != deb, built
    return built


@pytest.fixture
def root(deb: Path, tmp_path: Path) -> Iterator[Path]:
    """A fresh bookworm tree with the older package installed (this test's own: it upgrades it)."""
    with installed_copy(SUITE, deb, tmp_path) as r:
        yield r


@pytest.fixture
def fabric(netns_lab: Lab) -> Iterator[tuple[Fabric, dict[str, FrrInstance]]]:
    fab = Fabric(TOPO, lab=netns_lab).build()
    frr = start_fabric_frr(fab, [*SPINES, "leaf2"], bfd=True, bfd_interval_ms=100)
    yield fab, frr


def _sh(root: Path, script: str) -> str:
    res = in_chroot(root, script, timeout=600)
    assert res.returncode == 0, f"{script}: exit {res.returncode}\n{res.stdout}{res.stderr}"
    return res.stdout


class Leaf:
    """The installed glbd of ``root`` as leaf1, chrooted inside leaf1's namespace; its output
    in the tree's /var/log/glbd-leaf1.log (both runs)."""

    def __init__(self, fab: Fabric, root: Path, mode: str | None) -> None:
        self.fab, self.root = fab, root
        self.log = root / "var/log/glbd-leaf1.log"
        text = glbd_config(
            fab.topo, "leaf1", Path("/run/glbd-lab"), GlbdOptions(bfd_interval_ms=100)
        )
        text = re.sub(r"(?m)^socket = .*$", f'socket = "{SOCKET}"', text)
        if mode is not None:
            text = text.replace("[bgp]\n", f'[bgp]\ngraceful_restart = "{mode}"\n')
        conf = root / str(CONFIG).lstrip("/")
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text(text)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """``/usr/sbin/glbd run`` as the unit's ExecStart runs it (the exec chain keeps glbd's
        PID the one :meth:`stop` signals)."""
        # glbd runs as root here, not as the unit's user glbd, and accepts a socket directory
        # only root or its own user can change: the package's /run/glbd (user glbd, made again
        # by the upgrade's tmpfiles) made root's
        _sh(self.root, "install -d -o root -g glbd -m 0750 /run/glbd")
        script = (
            'mount -t proc proc "$0/proc" && mount -t sysfs sysfs "$0/sys" && '
            'mount --rbind /dev "$0/dev" && exec chroot "$0" "$@"'
        )
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-ec", script]
        argv += [str(self.root), "/usr/sbin/glbd", "run", "-c", str(CONFIG)]
        with open(self.log, "ab") as out:
            self.proc = self.fab.ns("leaf1").popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**CHROOT_ENV, "PYTHONUNBUFFERED": "1"},
            )

    def stop(self, timeout: float = 30) -> int | None:
        """SIGTERM, and its exit code (SIGKILL after ``timeout``, as TimeoutStopSec)."""
        p = self.proc
        if p is None:
            return None
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        return p.returncode

    def glbctl(self, cmd: str) -> Any:
        """``glbctl --json CMD`` of the installed tree (default socket), or None."""
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"glbd exited {self.proc.returncode}:\n{self.tail()}")
        res = subprocess.run(
            ["chroot", str(self.root), "glbctl", "--json", cmd],
            env=CHROOT_ENV,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=15,
        )
        return json.loads(res.stdout) if res.returncode == 0 else None

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def events(self, name: str) -> list[dict[str, Any]]:
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            if f'"{name}"' in line:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if rec.get("event") == name:
                    out.append(rec)
        return out


def settled(fab: Fabric, frr: dict[str, FrrInstance], leaf: Leaf, full: bool) -> bool:
    """leaf1 up with both spines, End-of-RIB in (and out, with ``full``) on each session, BFD
    up; both spines' paths to leaf1's prefix fresh (not stale); leaf1 reaches leaf2's prefix
    over both."""
    rows = leaf.glbctl("neighbors")
    if not rows or len(rows) != 2:
        return False
    for r in rows:
        c = r["counters"]
        if r["state"] != "up" or not c.get("eor_in"):
            return False
        if full and not c.get("eor_out"):  # glbd's own End-of-RIB: only with "full"
            return False
    bfd = leaf.glbctl("bfd")
    if not bfd or any(b["state"] != "up" for b in bfd):
        return False
    for s in SPINES:
        r = frr[s].vtysh_json(f"show bgp ipv4 unicast {P1} json")
        paths = r.get("paths", []) if isinstance(r, dict) else []
        if not paths or any(p.get("stale") for p in paths):
            return False
    return len(kernel_group_for(fab, "leaf1", P2)) == 2


def version(root: Path) -> str:
    return _sh(root, "dpkg-query -W -f='${Version}' glbd").strip()


@pytest.mark.parametrize("mode", [None, "helper"], ids=["default", "helper"])
def test_upgrade_of_a_running_glbd_loses_nothing(
    root: Path,
    newer_deb: Path,
    fabric: tuple[Fabric, dict[str, FrrInstance]],
    mode: str | None,
) -> None:
    fab, frr = fabric
    old = version(root)
    leaf = Leaf(fab, root, mode)
    leaf.start()
    try:
        wait_until(
            lambda: settled(fab, frr, leaf, mode is None),
            120,
            what="leaf1's installed glbd settled",
        )
        (root / "tmp" / newer_deb.name).write_bytes(newer_deb.read_bytes())
        h1, h2 = fab.ns("host1"), fab.ns("host2")
        a1, a2 = fab.addr("host1", "leaf1"), fab.addr("host2", "leaf2")
        with Stream(h1, h2, a2, port=47_011) as up, Stream(h2, h1, a1, port=47_012) as down:
            wait_until(lambda: up.received() > 200 and down.received() > 200, 30, what="traffic")
            dpkg = _sh(root, f"dpkg -i /tmp/{newer_deb.name}")
            status = leaf.glbctl("status")
            assert status is not None, leaf.tail()
            armed = status["graceful_restart"]
            # what systemd's restart of the unit does: SIGTERM to glbd, wait, start again
            rc = leaf.stop()
            leaf.start()
            wait_until(
                lambda: settled(fab, frr, leaf, mode is None), 120, what="the new glbd settled"
            )
            mark = (up.received(), down.received())
            wait_until(
                lambda: up.received() > mark[0] + 300 and down.received() > mark[1] + 300,
                30,
                what="traffic after the upgrade",
            )
            up.stop_sending()
            down.stop_sending()
        new = version(root)
    finally:
        leaf.stop()
    u, d = up.result(), down.result()
    name = mode or "default (full)"
    print(
        f"\nupgrade {old} -> {new}, bgp.graceful_restart {name}:\n"
        f"  host1 -> host2 (out of leaf1): {u}\n  host2 -> host1 (into leaf1):  {d}"
    )
    assert new == f"{old}{SUFFIX}", (old, new)
    assert rc == 0, leaf.tail()
    # the postinst armed the running glbd, and the stop did what that asked
    assert armed["armed"] is True, (armed, dpkg)
    assert leaf.events("glbctl_graceful_restart"), leaf.tail()
    (stopping, *_) = leaf.events("glbd_stopping")
    if mode == "helper":
        assert armed["next_stop"] == "planned" and armed["fallback"] == "not_full", armed
        assert stopping["stop"] == "planned"
        assert leaf.events("graceful_stop_fallback")[0]["fallback"] == "not_full"
        assert d["lost"] > 0, d  # the spines dropped leaf1's prefix while it restarted
        return
    assert armed["next_stop"] == "graceful_restart" and armed["sessions_kept"] == 2, armed
    assert stopping["stop"] == "graceful_restart", stopping
    assert u["lost"] == 0 and d["lost"] == 0, (u, d)
