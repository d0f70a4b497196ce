"""Fixtures for the .deb tests: the package built by ``packaging/build-deb`` once per session and
Debian release (bookworm on the host, trixie in build-deb's cached chroot), a clean debootstrap
minbase tree of the same release (cached under the lab cache directory like the FRR chroot) copied
fresh for the run, and that copy with the package installed by apt.

``deb`` and ``installed_root`` are bookworm's; ``suite_deb`` and ``suite_root`` are parametrized
over ``SUITES``."""

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
SUITE = "bookworm"  # the release of ``deb`` and ``installed_root``
SUITES = ("bookworm", "trixie")
# each release's number (the package's +debNN version suffix) and Python (the venv's interpreter)
DEBIAN = {"bookworm": "12", "trixie": "13"}
PYTHON = {"bookworm": "3.11", "trixie": "3.13"}
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


def _template(suite: str) -> Path:
    """The cached minbase tree of ``suite`` (built once: debootstrap, then apt-get update)."""
    cache = cache_dir()
    root, stamp = cache / f"{suite}-minbase", cache / f"{suite}-minbase.stamp"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and (root / "usr/bin/apt-get").exists():
            return root
        tmp = cache / f"{suite}-minbase.tmp"
        if tmp.exists():
            shutil.rmtree(tmp)
        mirror = find_mirror()
        res = subprocess.run(
            ["debootstrap", "--variant=minbase", suite, str(tmp), mirror],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
        )
        _checked(res, f"debootstrap {suite} from {mirror}")
        prc = tmp / "usr/sbin/policy-rc.d"  # no service starts inside the chroot
        prc.write_text("#!/bin/sh\nexit 101\n")
        prc.chmod(0o755)
        _checked(in_chroot(tmp, "apt-get update -q"), "apt-get update in the chroot")
        if root.exists():
            shutil.rmtree(root)
        tmp.rename(root)
        stamp.write_text(json.dumps({"root": str(root), "suite": suite, "mirror": mirror}) + "\n")
        return root


def _bookworm_template() -> Path:
    return _template(SUITE)


def build_deb(out: Path, *options: str) -> Path:
    """``packaging/build-deb [options] OUT``: the .deb it built (its last line of output)."""
    res = subprocess.run(
        [str(REPO / "packaging/build-deb"), *options, str(out)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    built = Path(_checked(res, f"packaging/build-deb {' '.join(options)}").splitlines()[-1])
    assert built.parent == out and built.is_file(), f"build-deb printed {built}"
    return built


@contextlib.contextmanager
def installed_copy(suite: str, deb: Path, parent: Path) -> Iterator[Path]:
    """A fresh copy of the ``suite`` tree in ``parent`` with ``apt-get install ./glbd_*.deb``
    done in it; removed on exit (unless something is still mounted under it)."""
    template = _template(suite)
    root = parent / "root"
    try:
        subprocess.run(["cp", "-a", "--reflink=auto", str(template), str(root)], check=True)
        shutil.copy(deb, root / "tmp" / deb.name)
        install = f"apt-get install -y -q /tmp/{deb.name}"
        res = in_chroot(root, install)
        if res.returncode != 0:  # the cached package lists may be out of date
            res = in_chroot(root, f"apt-get update -q && {install}")
        _checked(res, f"apt-get install of the .deb in a clean {suite}")
        yield root
    finally:
        left = _mounts_under(root)
        assert not left, f"mounts left under {root}: {left} (not deleting it)"
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(root)


@pytest.fixture(scope="session")
def built_debs() -> dict[str, Path]:
    """The .debs this session built, by suite (each suite is built once)."""
    return {}


def deb_for(suite: str, debs: dict[str, Path], tmp: pytest.TempPathFactory) -> Path:
    """``suite``'s .deb from ``debs`` (the ``built_debs`` fixture), built if not yet there."""
    _need_root()
    if suite not in debs:
        debs[suite] = build_deb(tmp.mktemp(f"deb-{suite}"), "--suite", suite)
    return debs[suite]


@pytest.fixture(scope="session")
def deb(built_debs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bookworm glbd_<version>+deb12_<arch>.deb, built by the one command an operator or CI
    runs."""
    return deb_for(SUITE, built_debs, tmp_path_factory)


@pytest.fixture(scope="session")
def installed_root(deb: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh copy of the bookworm tree with ``apt-get install ./glbd_*.deb`` done in it."""
    with installed_copy(SUITE, deb, tmp_path_factory.mktemp(SUITE)) as root:
        yield root


@pytest.fixture(scope="session", params=SUITES)
def suite(request: pytest.FixtureRequest) -> str:
    """The Debian release a test's package is built for and installed on."""
    name: str = request.param
    return name


@pytest.fixture(scope="session")
def suite_deb(
    suite: str, built_debs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """glbd_<version>+debNN_<arch>.deb for ``suite``: on the host for its own release, in
    build-deb's cached chroot for the other."""
    return deb_for(suite, built_debs, tmp_path_factory)


@pytest.fixture(scope="session")
def suite_root(
    suite: str, suite_deb: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """A fresh copy of the clean ``suite`` tree with that suite's .deb installed by apt (its own,
    not ``installed_root``: tests elsewhere may change that one)."""
    with installed_copy(suite, suite_deb, tmp_path_factory.mktemp(f"{suite}-")) as root:
        yield root
