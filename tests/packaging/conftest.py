"""Fixtures for the .deb test: the package built once per session by ``packaging/build-deb``, a
clean Debian bookworm (debootstrap minbase, cached under the lab cache directory like the FRR
chroot) copied fresh for the run, and that copy with the package installed by apt."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from glbdlab.provision import cache_dir, find_mirror

REPO = Path(__file__).resolve().parents[2]
SUITE = "bookworm"
CHROOT_ENV = {
    "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
    "DEBIAN_FRONTEND": "noninteractive",
    "LC_ALL": "C",
}


def _need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("building and installing the .deb needs root (debootstrap, chroot)")


def in_chroot(root: Path, script: str, *, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """``script`` (sh) run inside ``root``, with /proc mounted in a private mount namespace (the
    mount never reaches the host's namespace and goes away with the process)."""
    outer = 'mount -t proc proc "$0/proc" && exec chroot "$0" sh -ec "$1"'
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-ec", outer, str(root), script],
        env=CHROOT_ENV,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _checked(res: subprocess.CompletedProcess[str], what: str) -> str:
    assert res.returncode == 0, f"{what}: exit {res.returncode}\n{res.stdout}\n{res.stderr}"
    return res.stdout


def _mounts_under(path: Path) -> list[str]:
    prefix = str(path.resolve()) + "/"
    with open("/proc/self/mountinfo") as f:
        return [ln.split()[4] for ln in f if (ln.split()[4] + "/").startswith(prefix)]


def _bookworm_template() -> Path:
    """The cached minbase bookworm tree (built once: debootstrap, then apt-get update)."""
    cache = cache_dir()
    root, stamp = cache / f"{SUITE}-minbase", cache / f"{SUITE}-minbase.stamp"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and (root / "usr/bin/apt-get").exists():
            return root
        tmp = cache / f"{SUITE}-minbase.tmp"
        if tmp.exists():
            shutil.rmtree(tmp)
        mirror = find_mirror()
        res = subprocess.run(
            ["debootstrap", "--variant=minbase", SUITE, str(tmp), mirror],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
        )
        _checked(res, f"debootstrap {SUITE} from {mirror}")
        prc = tmp / "usr/sbin/policy-rc.d"  # no service starts inside the chroot
        prc.write_text("#!/bin/sh\nexit 101\n")
        prc.chmod(0o755)
        _checked(in_chroot(tmp, "apt-get update -q"), "apt-get update in the chroot")
        if root.exists():
            shutil.rmtree(root)
        tmp.rename(root)
        stamp.write_text(json.dumps({"root": str(root), "suite": SUITE, "mirror": mirror}) + "\n")
        return root


@pytest.fixture(scope="session")
def deb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """glbd_<version>_<arch>.deb, built by the one command an operator or CI runs."""
    _need_root()
    out = tmp_path_factory.mktemp("deb")
    res = subprocess.run(
        [str(REPO / "packaging/build-deb"), str(out)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    _checked(res, "packaging/build-deb")
    (built,) = out.glob("glbd_*.deb")
    return built


@pytest.fixture(scope="session")
def installed_root(deb: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh copy of the bookworm tree with ``apt-get install ./glbd_*.deb`` done in it."""
    template = _bookworm_template()
    root = tmp_path_factory.mktemp("bookworm") / "root"
    subprocess.run(["cp", "-a", "--reflink=auto", str(template), str(root)], check=True)
    try:
        shutil.copy(deb, root / "tmp" / deb.name)
        install = f"apt-get install -y -q /tmp/{deb.name}"
        res = in_chroot(root, install)
        if res.returncode != 0:  # the cached package lists may be out of date
            res = in_chroot(root, f"apt-get update -q && {install}")
        _checked(res, "apt-get install of the .deb in a clean bookworm")
        yield root
    finally:
        left = _mounts_under(root)
        assert not left, f"mounts left under {root}: {left} (not deleting it)"
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(root)
