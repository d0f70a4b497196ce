"""The Debian package as an operator gets it, for Debian 12 (bookworm) and 13 (trixie):
``packaging/build-deb --suite S`` builds the .deb, apt installs it into a clean tree of the same
release (dependencies from the Debian mirror), and the installed glbd, run from that tree inside
lab namespaces, brings up BGP and BFD with FRR 10.x and heartbeats with a second installed glbd
(checked with the installed glbctl)."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import CHROOT_ENV, DEBIAN, PYTHON, REPO, SUITES, deb_for, in_chroot
from glbdlab.frr import start_fabric_frr
from glbdlab.netns import Lab
from glbdlab.nodes import GlbdOptions, glbd_config, wait_until
from glbdlab.topology import Fabric, leaf_spine

import glbd
from glbd.cli import manpages

# control sockets, configs and logs of the lab's glbds, as seen inside the installed tree
RUN = Path("/run/glbd-lab")
ETC = Path("/etc/glbd/lab")


def _pins(lines: list[str]) -> dict[str, str]:
    out = {}
    for line in lines:
        m = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*==\s*([^\s;#]+).*", line)
        if m:
            out[re.sub(r"[-_.]+", "-", m[1]).lower()] = m[2]
    return out


def test_requirements_lock_pins_what_pyproject_pins() -> None:
    """The .deb's venv is built from packaging/requirements.txt: every runtime dependency of
    pyproject.toml must be in it at the same version."""
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    lock = _pins((REPO / "packaging/requirements.txt").read_text().splitlines())
    want = _pins(deps)
    assert len(want) == len(deps), f"unpinned runtime dependency in pyproject.toml: {deps}"
    assert {k: lock.get(k) for k in want} == want


def test_changelog_is_for_this_version() -> None:
    """The committed changelog's top entry is glbd.__version__ (build-deb adds only +debNN)."""
    res = subprocess.run(
        ["dpkg-parsechangelog", "-l", str(REPO / "packaging/debian/changelog"), "-S", "Version"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert res.stdout.strip() == glbd.__version__


def test_build_deb_refuses_a_changelog_of_another_version(tmp_path: Path) -> None:
    """A changelog left behind by a version bump stops build-deb before it builds anything."""
    for rel in ("packaging/build-deb", "packaging/debian/changelog", "glbd/__init__.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, tmp_path / rel)
    init = tmp_path / "glbd/__init__.py"
    init.write_text(init.read_text().replace(glbd.__version__, "9.9.9"))
    res = subprocess.run(
        [str(tmp_path / "packaging/build-deb"), str(tmp_path / "out")],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 1
    assert res.stdout == ""
    (line,) = res.stderr.splitlines()
    assert line.startswith("build-deb: packaging/debian/changelog's top version"), line
    assert "9.9.9" in line, line
    assert not (tmp_path / "out").exists()


@pytest.mark.root
@pytest.mark.slow
def test_deb_version_and_python_follow_its_suite(suite: str, suite_deb: Path) -> None:
    """glbd_<__version__>+debNN: Depends names the Python of its release, the one its venv has."""
    assert suite_deb.name.startswith(f"glbd_{glbd.__version__}+deb{DEBIAN[suite]}_")

    def dpkg_deb(option: str, *fields: str) -> str:
        argv = ["dpkg-deb", option, str(suite_deb), *fields]
        return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()

    assert dpkg_deb("-f", "Version") == f"{glbd.__version__}+deb{DEBIAN[suite]}"
    major, minor = map(int, PYTHON[suite].split("."))
    depends = [d.strip() for d in dpkg_deb("-f", "Depends").split(",")]
    python = [d for d in depends if re.match(r"python3\b", d)]
    assert python == [f"python3 (>= {major}.{minor})", f"python3 (<< {major}.{minor + 1})"]
    venv_pythons = set(re.findall(r"\./opt/glbd/lib/(python3\.\d+)/", dpkg_deb("-c")))
    assert venv_pythons == {f"python{PYTHON[suite]}"}


@pytest.mark.root
@pytest.mark.slow
def test_the_other_releases_package_is_refused(
    suite: str,
    suite_root: Path,
    built_debs: dict[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """apt will not put the other release's .deb on this one: its python3 is not this one's."""
    (other,) = (s for s in SUITES if s != suite)
    deb = deb_for(other, built_debs, tmp_path_factory)
    shutil.copy(deb, suite_root / "tmp" / deb.name)
    try:
        res = in_chroot(suite_root, f"apt-get install -s -q /tmp/{deb.name}", timeout=120)
    finally:
        (suite_root / "tmp" / deb.name).unlink()
    assert res.returncode != 0, res.stdout
    unmet = re.search(r"^\s*glbd : Depends: (python3 .*)$", res.stdout + res.stderr, re.M)
    assert unmet is not None, res.stdout + res.stderr
    assert PYTHON[other] in unmet[1] or PYTHON[suite] in unmet[1], unmet[1]


@pytest.mark.netns
@pytest.mark.frr
@pytest.mark.slow
def test_installed_layout_and_check_config(suite: str, suite_root: Path) -> None:
    root = suite_root
    status = _run(root, "dpkg-query -W -f='${Status} ${Version}' glbd")
    assert status == f"install ok installed {glbd.__version__}+deb{DEBIAN[suite]}", status
    # the release's own python3, the one the venv was built with
    assert _run(root, "python3 --version").split()[1].startswith(f"{PYTHON[suite]}.")
    # the daemon in its own venv, on PATH; the systemd files are the repository's
    assert (root / "usr/sbin/glbd").readlink() == Path("/opt/glbd/bin/glbd")
    assert (root / "usr/bin/glbctl").readlink() == Path("/opt/glbd/bin/glbctl")
    for src, dst in (
        ("systemd/glbd.service", "lib/systemd/system/glbd.service"),
        ("systemd/glbd.sysusers", "usr/lib/sysusers.d/glbd.conf"),
        ("systemd/glbd.tmpfiles", "usr/lib/tmpfiles.d/glbd.conf"),
    ):
        assert (root / dst).read_bytes() == (REPO / src).read_bytes(), dst
    conffiles = _run(root, "dpkg-query -W -f='${Conffiles}' glbd")
    assert "/etc/glbd/glbd.toml" in conffiles
    # the service user glbd reads its config; nobody else may (secrets go in it)
    assert _run(root, "stat -c '%U:%G %a' /etc/glbd/glbd.toml").split() == ["root:glbd", "640"]
    unit = (root / "lib/systemd/system/glbd.service").read_text()
    for doc in re.findall(r"file:(\S+)", unit):
        assert (root / doc.lstrip("/")).is_file(), doc
    # no lab, tests or build tools in the package; the venv holds exactly the pinned set
    files = _run(root, "dpkg -L glbd").split()
    assert not [f for f in files if "glbdlab" in f or "site-packages/tests" in f]
    # man pages made at build time by the built venv (glbd.cli.manpages): every command, option
    # and config key, the same pages this tree makes. Another release's argparse words an option
    # its own way (3.13: "-c, --config CONFIG"), so there they are the pages the installed venv
    # makes, with the same options as this tree's
    version = _run(root, "glbd --version").strip()
    same_python = PYTHON[suite] == "{}.{}".format(*sys.version_info[:2])
    if not same_python:
        _run(root, "PYTHONDONTWRITEBYTECODE=1 /opt/glbd/bin/python -m glbd.cli.manpages /tmp/man")
    for name, want in manpages.pages().items():
        page = f"/usr/share/man/man{name[-1]}/{name}.gz"
        assert page in files, f"{page} not in the package"
        text = gzip.decompress((root / page.lstrip("/")).read_bytes()).decode()
        assert version.split()[-1] in text.splitlines()[0] and '.SH "SEE ALSO"' in text, page
        if same_python:
            assert text == want, f"{page} differs from what python -m glbd.cli.manpages makes here"
            continue
        assert text == (root / "tmp/man" / name).read_text(), f"{page} is not the venv's"
        options = re.compile(r"^\\fB(\\?-.*)\\fR$", re.M)
        assert _option_names(options.findall(text)) == _option_names(options.findall(want)), page
    # the docs: the guide, the reference, their images and the examples, and every relative
    # link of an installed document leads to a file that is installed too
    doc = root / "usr/share/doc/glbd"
    for name in ("operator-guide.md", "config-reference.md", "img/glb-latency-cdf.png",
                 "examples/leaf.toml", "examples/spine.toml", "examples/sysctl-glbd.conf",
                 "examples/prometheus/glbd-alerts.yml"):  # fmt: skip
        assert (doc / name).is_file(), name
    assert (doc / "config-reference.md").read_bytes() == (
        REPO / "docs/config-reference.md"
    ).read_bytes()
    for md in doc.glob("*.md"):
        for target in re.findall(r"\]\(([^)\s#]+)[^)]*\)", md.read_text()):
            if not re.match(r"[a-z]+:", target):
                assert (md.parent / target).exists(), f"{md.name}: {target} is not installed"
    freeze = _pins(_run(root, "/opt/glbd/bin/python -m pip freeze").splitlines())
    lock = _pins((REPO / "packaging/requirements.txt").read_text().splitlines())
    assert {k: v for k, v in freeze.items() if k != "glbd"} == lock
    # sysusers ran (systemd is recommended, so apt installed it): the service user exists
    assert _run(root, "getent passwd glbd").startswith("glbd:")
    out = _run(root, "glbd check-config /etc/glbd/glbd.toml")
    assert "/etc/glbd/glbd.toml: ok" in out
    # the unit's first ExecStartPre, as its User= runs it
    pre = re.search(r"^ExecStartPre=(.*)$", unit, re.M)
    user = re.search(r"^User=(.*)$", unit, re.M)
    assert pre is not None and user is not None
    _run(root, f"runuser -u {user[1]} -- {pre[1]}")


def _option_names(invocations: list[str]) -> list[str]:
    """The option strings of man page invocations, "\\-c CONFIG, \\-\\-config CONFIG" or
    "\\-c, \\-\\-config CONFIG" alike."""
    return [" ".join(re.findall(r"(?<![\w\\-])(?:\\-)+\w[\w-]*", inv)) for inv in invocations]


def _run(root: Path, script: str) -> str:
    res = in_chroot(root, script, timeout=120)
    assert res.returncode == 0, f"{script}: exit {res.returncode}\n{res.stdout}{res.stderr}"
    return res.stdout


class InstalledGlbd:
    """The installed /usr/sbin/glbd of ``root``, run chrooted inside a lab namespace."""

    def __init__(self, fab: Fabric, node: str, root: Path, opts: GlbdOptions) -> None:
        self.root, self.node = root, node
        self.socket = RUN / node / "glbd.sock"
        self.config = ETC / f"{node}.toml"
        self.log = root / f"var/log/glbd-{node}.log"
        (root / str(RUN / node).lstrip("/")).mkdir(parents=True, exist_ok=True)
        (root / str(ETC).lstrip("/")).mkdir(parents=True, exist_ok=True)
        (root / str(self.config).lstrip("/")).write_text(glbd_config(fab.topo, node, RUN, opts))
        # /proc, the namespace's own /sys and /dev inside the tree, in a private mount
        # namespace (gone with the process); exec chains keep glbd's PID the one the lab stops
        script = (
            'mount -t proc proc "$0/proc" && mount -t sysfs sysfs "$0/sys" && '
            'mount --rbind /dev "$0/dev" && exec chroot "$0" "$@"'
        )
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-ec", script]
        argv += [str(root), "/usr/sbin/glbd", "run", "-c", str(self.config)]
        with open(self.log, "ab") as out:
            self.proc = fab.ns(node).popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**CHROOT_ENV, "PYTHONUNBUFFERED": "1"},
            )

    def glbctl(self, cmd: str) -> Any:
        """``glbctl --json CMD`` from the installed tree."""
        if self.proc.poll() is not None:
            tail = self.log.read_text(errors="replace")[-3000:]
            raise AssertionError(f"glbd on {self.node} exited {self.proc.returncode}:\n{tail}")
        res = subprocess.run(
            ["chroot", str(self.root), "glbctl", "--socket", str(self.socket), "--json", cmd],
            env=CHROOT_ENV,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=10,
        )
        return json.loads(res.stdout) if res.returncode == 0 else None


def _up(rows: Any, peer: str) -> bool:
    return any(r["peer"] == peer and str(r["state"]).lower() == "up" for r in rows or [])


def _heard_from(heartbeats: Any, node_id: str) -> bool:
    for hb in heartbeats or []:
        for s in (hb.get("receiver") or {}).get("senders", []):
            if s["node_id"] == node_id and s["accepted"] > 0:
                return True
    return False


@pytest.fixture
def fabric(netns_lab: Lab) -> Iterator[Fabric]:
    """spine1 (FRR 10.x), spine2 and leaf1 (the installed glbd)."""
    yield Fabric(leaf_spine(2, 1, hosts=False), lab=netns_lab).build()


@pytest.mark.netns
@pytest.mark.frr
@pytest.mark.slow
def test_installed_glbd_runs_against_frr10(suite_root: Path, fabric: Fabric) -> None:
    """leaf1's installed glbd: BGP and BFD up with FRR 10.x on spine1 and with spine2's installed
    glbd, and spine2's heartbeats accepted; spine2 sees leaf1 up too."""
    fab, root = fabric, suite_root
    start_fabric_frr(fab, ["spine1"], bfd=True)
    opts = GlbdOptions(bfd_interval_ms=100, hb_interval_ms=50, log_level="info")
    leaf = InstalledGlbd(fab, "leaf1", root, opts)
    spine2 = InstalledGlbd(fab, "spine2", root, opts)
    frr_addr, glbd_addr = fab.addr("spine1", "leaf1"), fab.addr("spine2", "leaf1")
    for peer in (frr_addr, glbd_addr):
        wait_until(lambda p=peer: _up(leaf.glbctl("neighbors"), p), 60, what=f"BGP up to {peer}")
        wait_until(lambda p=peer: _up(leaf.glbctl("bfd"), p), 60, what=f"BFD up to {peer}")
    spine2_id = str(fab.topo.node("spine2").router_id)
    wait_until(lambda: _heard_from(leaf.glbctl("heartbeats"), spine2_id), 30, what="heartbeats")
    leaf1_addr = fab.addr("leaf1", "spine2")
    assert _up(spine2.glbctl("neighbors"), leaf1_addr)
    assert _up(spine2.glbctl("bfd"), leaf1_addr)
    status = leaf.glbctl("status")
    assert status["state"] == "running"
