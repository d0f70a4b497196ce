"""glbd without root: an unprivileged user with only the capabilities systemd/glbd.service
grants (ambient, so ExaBGP and the BFD engine inherit them) and a read-only /proc/sys brings a
leaf up in a lab fabric, and a daemon missing one says which in one line."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from glbdlab.nodes import GlbdNode, GlbdOptions, kernel_group_for, start_glbd, stop_all, wait_until
from glbdlab.topology import Fabric

from glbd.flowlet.loader import HASH_POLICY_SYSCTLS

ROOT = Path(__file__).resolve().parent.parent
NOBODY = 65534
UNIT = (ROOT / "systemd" / "glbd.service").read_text()

pytestmark = pytest.mark.netns  # root: setpriv changes uid, the lab makes namespaces


def unit_caps() -> list[str]:
    """The capabilities the unit grants (AmbientCapabilities=), as setpriv names them."""
    m = re.search(r"^AmbientCapabilities=(.+)$", UNIT, re.M)
    assert m
    return [c.removeprefix("CAP_").lower() for c in m.group(1).split()]


def setpriv(caps: list[str]) -> list[str]:
    spec = ",".join(["-all", *(f"+{c}" for c in caps)])
    return [
        "setpriv",
        f"--reuid={NOBODY}",
        f"--regid={NOBODY}",
        "--clear-groups",
        f"--inh-caps={spec}",
        f"--ambient-caps={spec}",
        f"--bounding-set={spec}",
    ]


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory under /tmp the unprivileged user can reach (pytest's tmp_path is 0700)."""
    d = Path(tempfile.mkdtemp(prefix="glbd-unpriv-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


#: what the daemon imports at run time (its runtime dependencies and theirs)
RUNTIME_MODULES = (
    "glbd", "bfd", "heartbeat", "exabgp", "pydantic", "pydantic_core", "annotated_types",
    "typing_extensions", "typing_inspection", "structlog", "rich", "markdown_it", "mdurl",
    "pygments", "prometheus_client",
)  # fmt: skip


def importable_copy(dest: Path) -> Path:
    """The daemon's packages copied where the unprivileged user can read them."""
    dest.mkdir(mode=0o755, exist_ok=True)
    for name in RUNTIME_MODULES:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None, name
        origin = Path(spec.origin)
        if origin.name == "__init__.py":
            shutil.copytree(origin.parent, dest / origin.parent.name, dirs_exist_ok=True)
        else:
            shutil.copy2(origin, dest / origin.name)
    subprocess.run(["chmod", "-R", "a+rX", str(dest)], check=True)
    return dest


def python_for_nobody(bindir: Path) -> tuple[str, dict[str, str]]:
    """An interpreter the unprivileged user may run, with glbd importable and an ``exabgp``
    on PATH: the system's python of this version (a venv's base may lie in a private home, as
    pyenv's under /root) with a copy of the daemon's packages (a fresh clone or CI's checkout,
    and so its venv, may sit under a directory only root can enter)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    exe = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    if not os.path.exists(exe):
        exe = sys.executable
    env["PYTHONPATH"] = str(importable_copy(bindir / "site"))
    wrapper = bindir / "exabgp"
    wrapper.write_text(
        f"#!{exe}\nimport sys\nfrom exabgp.application.main import main\nsys.exit(main())\n"
    )
    wrapper.chmod(0o755)
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    return exe, env


class UnprivilegedGlbd(GlbdNode):
    """A lab glbd run as uid 65534 with only ``caps`` (setpriv, as the unit's ambient set)."""

    def __init__(self, *args: Any, caps: list[str], python: str, env: dict[str, str]) -> None:
        super().__init__(*args)
        os.chown(self.dir, NOBODY, NOBODY)  # its control socket and ExaBGP's directory go here
        self.dir.chmod(0o750)
        self.caps, self.python, self.env = caps, python, env

    def start(self) -> None:
        out = open(self.log, "ab")  # noqa: SIM115 - handed to the child
        argv = [*setpriv(self.caps), self.python, "-m", "glbd", "run", "-c", str(self.config)]
        # /proc/sys read-only in a mount namespace of its own, as ProtectKernelTunables= does;
        # bpffs with a directory of glbd's in it, as systemd and glbd.tmpfiles make them
        ro_sys = (
            "mount --bind -o ro /proc/sys /proc/sys && mount -t bpf bpf /sys/fs/bpf && "
            f'install -d -m 0700 -o {NOBODY} -g {NOBODY} /sys/fs/bpf/glbd && exec "$@"'
        )
        argv = ["unshare", "-m", "--propagation=private", "sh", "-c", ro_sys, "sh", *argv]
        self.proc = self.ns.popen(argv, stdout=out, stderr=subprocess.STDOUT, env=self.env)
        out.close()


def test_leaf_comes_up_as_an_unprivileged_user_with_the_units_capabilities(
    lab_fabric: Any, shared_dir: Path
) -> None:
    fab: Fabric = lab_fabric(spines=1, leaves=2, hosts=False)
    python, env = python_for_nobody(shared_dir)
    # asks for a sysctl it cannot write (read-only /proc/sys): a warning, not a failure; the
    # leaves run the flowlet program, loaded as the unit's user
    opts = GlbdOptions(
        heartbeat=True,
        bfd=True,
        fib={"set_compat_mode_off": "true"},
        extra={"leaf": "[flowlet]\nenabled = true"},
    )
    nodes: dict[str, GlbdNode] = {}
    try:
        nodes = start_glbd(fab, shared_dir, opts, names=["spine1"])
        sysctl = "net.ipv4.nexthop_compat_mode"
        ns1 = fab.ns("leaf1")
        ns1.run(["sysctl", "-qw", f"{sysctl}=1"])  # the kernel's default
        # the flowlet program's hash policy, which the unit's root ExecStartPre writes (below)
        for key in HASH_POLICY_SYSCTLS:
            ns1.run(["sysctl", "-qw", f"{key}=1"])
        leaf1 = nodes["leaf1"] = UnprivilegedGlbd(
            fab, "leaf1", shared_dir, opts, caps=unit_caps(), python=python, env=env
        )
        # leaf2 lacks CAP_BPF: its flowlets are off, and it says why
        no_bpf = [c for c in unit_caps() if c != "bpf"]
        leaf2 = nodes["leaf2"] = UnprivilegedGlbd(
            fab, "leaf2", shared_dir, opts, caps=no_bpf, python=python, env=env
        )
        leaf1.start()
        leaf2.start()
        leaf1.wait_ready(60)
        leaf2.wait_ready(60)
        status = leaf1.request("status")
        assert status["bfd_engine"] and status["bfd_engine"].get("pid"), status
        uid = int(Path(f"/proc/{status['pid']}/status").read_text().split("Uid:")[1].split()[1])
        assert uid == NOBODY
        # CAP_SYS_NICE reached the engine (a child): it runs real-time as configured
        assert os.sched_getscheduler(status["bfd_engine"]["pid"]) == os.SCHED_FIFO
        # ExaBGP (TCP 179) and the BFD engine (its children) work: the session with the
        # spine is up, and leaf2's prefix is programmed as a nexthop group (rtnetlink)
        prefix = fab.topo.node("leaf2").prefix4
        assert prefix
        wait_until(lambda: kernel_group_for(fab, "leaf1", prefix), 90, what="leaf1's route")
        prefix1 = fab.topo.node("leaf1").prefix4
        assert prefix1
        wait_until(lambda: kernel_group_for(fab, "leaf2", prefix1), 90, what="leaf2's route")
        # the flowlet program loaded as the unit's user; without CAP_BPF it is off, said once
        fl1 = leaf1.request("flowlet")
        assert fl1["enabled"] and fl1["error"] is None and fl1["prog_id"], fl1
        fl2 = leaf2.request("flowlet")
        assert fl2["enabled"] and "CAP_BPF" in (fl2["error"] or ""), fl2
        assert len(leaf2.events("flowlet_unavailable")) == 1, leaf2.tail()
        # the route comes with BGP (a fresh start holds nothing back); BFD comes up on its own
        wait_until(
            lambda: (rows := leaf1.request("bfd")) and all(s["state"] == "up" for s in rows),
            60,
            what="leaf1's BFD session up",
        )
        assert [e["fix"] for e in leaf1.events("sysctl_not_set")], leaf1.tail()
        # the foreign-load counter (bpftool, tc, bpf(2)) runs with the unit's capabilities
        foreign = leaf1.request("status")["foreign_load"]
        assert foreign["counting"] and foreign["attached"] == ["spine1"], foreign
        # what the unit's root ExecStartPre does: the sysctl the config asks for
        assert fab.ns("leaf1").run(["sysctl", "-n", sysctl]).stdout.strip() == "1"
        fab.ns("leaf1").run([sys.executable, "-m", "glbd", "sysctl", "-q", "-c", str(leaf1.config)])
        assert fab.ns("leaf1").run(["sysctl", "-n", sysctl]).stdout.strip() == "0"
        ns2 = fab.ns("leaf2")
        for key in HASH_POLICY_SYSCTLS:  # and the flowlet program's hash policy
            ns2.run(["sysctl", "-qw", f"{key}=0"])
        ns2.run([sys.executable, "-m", "glbd", "sysctl", "-q", "-c", str(leaf2.config)])
        assert [ns2.run(["sysctl", "-n", k]).stdout.strip() for k in HASH_POLICY_SYSCTLS] == [
            "1",
            "1",
        ]
    finally:
        stop_all(nodes)


def test_a_missing_capability_is_one_line_naming_it(shared_dir: Path) -> None:
    cfg = shared_dir / "glbd.toml"
    cfg.write_text(f"""
router_id = "198.18.255.1"
local_as = 65001
role = "load-balancer"
[control]
socket = "{shared_dir / "ctl.sock"}"
""")
    python, env = python_for_nobody(shared_dir)
    caps = [c for c in unit_caps() if c != "net_bind_service"]
    r = subprocess.run(
        [*setpriv(caps), python, "-m", "glbd", "run", "-c", str(cfg)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 3
    lines = [line for line in r.stderr.splitlines() if not line.startswith("{")]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("glbd: missing capabilities CAP_NET_BIND_SERVICE;"), lines
    assert not (shared_dir / "ctl.sock").exists()
