"""FRR 10.x for the lab: Debian sid's ``frr`` in a debootstrap chroot under a cache directory.

Bookworm ships FRR 8.4, which has no NHC/NNHN support, so the lab runs FRR from Debian sid out of
a chroot. Procedure (``glbd-lab provision``; works on bookworm's debootstrap 1.0.128):

1. ``debootstrap --variant=minbase sid <tmp> <mirror>``. ``--include=frr`` does **not** work:
   old debootstrap orders sid's systemd/libsystemd-shared pre-depends wrongly and fails.
   ``<mirror>`` is the Debian archive URL taken from the host's own apt sources
   (``/etc/apt/sources.list`` and ``/etc/apt/sources.list.d/*.list|*.sources``); set
   ``GLBD_LAB_MIRROR`` to override it.
2. ``/usr/sbin/policy-rc.d`` (``exit 101``) in the chroot, so no service is started, ``/proc``
   mounted in a private mount namespace, then ``chroot <tmp> apt-get install
   --no-install-recommends frr iproute2`` (with an ``apt-get update`` first if that fails).
3. ``apt-get clean``, a stamp file, and an atomic rename of ``<tmp>`` to the final directory.

Paths: the cache directory is ``$GLBD_LAB_CACHE`` (default ``/var/cache/glbd-lab``); the chroot
is ``<cache>/frr-sid`` and the stamp ``<cache>/frr-sid.stamp`` (JSON: FRR version, mirror, date).
With a valid stamp, :func:`provision` returns at once (a stat and a small JSON read), so
``bootstrap.sh`` can call it on every run. A ``flock`` on ``<cache>/.lock`` serialises
concurrent runs. About 30 s and ~270 MB on this kind of machine.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from glbdlab.netns import LabError

__all__ = [
    "DEFAULT_CACHE",
    "Chroot",
    "cache_dir",
    "chroot_dir",
    "find_mirror",
    "provision",
    "provisioned",
    "require_chroot",
]

DEFAULT_CACHE = "/var/cache/glbd-lab"
CHROOT_NAME = "frr-sid"
SUITE = "sid"
PACKAGES = ("frr", "iproute2")


@dataclass(frozen=True)
class Chroot:
    """A provisioned FRR chroot: its root directory and the FRR version installed in it."""

    root: Path
    frr_version: str
    mirror: str
    created: str


def cache_dir() -> Path:
    return Path(os.environ.get("GLBD_LAB_CACHE") or DEFAULT_CACHE)


def chroot_dir() -> Path:
    return cache_dir() / CHROOT_NAME


def _stamp_path() -> Path:
    return cache_dir() / f"{CHROOT_NAME}.stamp"


def provisioned() -> Chroot | None:
    """The chroot described by a valid stamp, or None. Cheap: no subprocess."""
    try:
        data = json.loads(_stamp_path().read_text())
        root = Path(data["root"])
        if root != chroot_dir() or not (root / "usr/lib/frr/bgpd").exists():
            return None
        return Chroot(root, str(data["frr_version"]), str(data["mirror"]), str(data["created"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def require_chroot() -> Chroot:
    """The provisioned chroot, or a one-line LabError saying how to provision it."""
    ch = provisioned()
    if ch is None:
        raise LabError(
            f"no FRR 10.x chroot in {chroot_dir()}: run '.venv/bin/glbd-lab provision' as root "
            "(or ./bootstrap.sh install)"
        )
    return ch


# --------------------------------------------------------------------------- mirror


def _debian_uri(uri: str, suites: list[str]) -> bool:
    uri = uri.rstrip("/")
    if not uri.startswith(("http://", "https://")) or "security" in uri:
        return False
    if not uri.endswith("/debian"):
        return False
    return any(
        re.fullmatch(r"(bookworm|trixie|forky|sid|unstable|testing|stable|oldstable)(-updates)?", s)
        for s in suites
    )


def find_mirror(root: Path = Path("/")) -> str:
    """The Debian archive URL of the host's own apt sources (``GLBD_LAB_MIRROR`` overrides)."""
    env = os.environ.get("GLBD_LAB_MIRROR")
    if env:
        return env
    apt = root / "etc/apt"
    files = [apt / "sources.list"]
    with contextlib.suppress(OSError):
        files += sorted((apt / "sources.list.d").iterdir())
    for path in files:
        try:
            text = path.read_text()
        except OSError:
            continue
        if path.suffix == ".sources":  # deb822 stanzas
            for stanza in re.split(r"\n\s*\n", text):
                fields: dict[str, str] = {}
                for line in stanza.splitlines():
                    if line.startswith("#") or ":" not in line or line[:1].isspace():
                        continue
                    key, _, value = line.partition(":")
                    fields[key.strip().lower()] = value.strip()
                if "deb" not in fields.get("types", "").split():
                    continue
                if fields.get("enabled", "yes").lower() == "no":
                    continue
                for uri in fields.get("uris", "").split():
                    if _debian_uri(uri, fields.get("suites", "").split()):
                        return uri.rstrip("/")
        elif path.suffix == ".list" or path.name == "sources.list":
            for line in text.splitlines():
                words = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()
                if len(words) >= 3 and words[0] == "deb" and _debian_uri(words[1], [words[2]]):
                    return words[1].rstrip("/")
    raise LabError(
        "no Debian mirror found in /etc/apt/sources.list*: set GLBD_LAB_MIRROR to a Debian "
        "archive URL (e.g. http://<mirror>/debian)"
    )


# --------------------------------------------------------------------------- provisioning


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _step(argv: list[str], what: str, log: Path, *, env: dict[str, str] | None = None) -> None:
    with open(log, "a") as out:
        out.write(f"\n$ {' '.join(argv)}\n")
        out.flush()
        res = subprocess.run(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env
        )
    if res.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:]
        raise LabError(f"{what} failed (exit {res.returncode}): {' '.join(tail)} -- see {log}")


def _in_chroot(root: Path, script: str) -> list[str]:
    """argv running ``script`` with sh inside ``root``, /proc mounted privately."""
    return [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-ec",
        f'mount -t proc proc "{root}/proc"; exec chroot "{root}" sh -ec \'{script}\'',
    ]


def frr_version(root: Path) -> str:
    res = subprocess.run(
        ["chroot", str(root), "dpkg-query", "-W", "-f=${Version}", "frr"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    if res.returncode != 0 or not res.stdout.strip():
        raise LabError(f"frr is not installed in {root}: remove it and run provision again")
    return res.stdout.strip()


def provision(*, force: bool = False, echo: bool = True) -> Chroot:
    """Make sure the FRR 10.x chroot exists; build it if not. Idempotent and fast when done."""
    if not force and (ch := provisioned()) is not None:
        return ch
    if os.geteuid() != 0:
        raise LabError("provisioning the FRR chroot needs root: run it as root (e.g. with sudo)")
    for tool, pkg in (("debootstrap", "debootstrap"), ("unshare", "util-linux")):
        if shutil.which(tool) is None:
            raise LabError(f"'{tool}' is missing: apt-get install {pkg}")
    cache = cache_dir()
    with _lock(cache / ".lock"):
        if not force and (ch := provisioned()) is not None:
            return ch  # someone else finished it while we waited
        mirror = find_mirror()
        final = chroot_dir()
        tmp = cache / f"{CHROOT_NAME}.tmp"
        log = cache / f"{CHROOT_NAME}.log"
        log.write_text("")
        t0 = time.monotonic()

        def say(msg: str) -> None:
            if echo:
                print(f"glbd-lab provision: {msg} ({time.monotonic() - t0:.1f}s)", flush=True)

        if tmp.exists():
            shutil.rmtree(tmp)
        say(f"debootstrap --variant=minbase {SUITE} from {mirror} into {tmp}")
        _step(
            ["debootstrap", "--variant=minbase", SUITE, str(tmp), mirror],
            "debootstrap",
            log,
        )
        prc = tmp / "usr/sbin/policy-rc.d"
        prc.write_text("#!/bin/sh\nexit 101\n")
        prc.chmod(0o755)
        env = {
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "DEBIAN_FRONTEND": "noninteractive",
            "LC_ALL": "C",
        }
        install = f"apt-get install -y -q --no-install-recommends {' '.join(PACKAGES)}"
        say(f"chroot: {install}")
        try:
            _step(_in_chroot(tmp, install), "apt-get install in the chroot", log, env=env)
        except LabError:
            say("retrying after apt-get update")
            _step(
                _in_chroot(tmp, f"apt-get update -q; {install}"),
                "apt-get install in the chroot",
                log,
                env=env,
            )
        _step(_in_chroot(tmp, "apt-get clean"), "apt-get clean in the chroot", log, env=env)
        version = frr_version(tmp)
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        ch = Chroot(final, version, mirror, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        stamp = {
            "root": str(final),
            "frr_version": ch.frr_version,
            "mirror": mirror,
            "created": ch.created,
            "suite": SUITE,
            "seconds": round(time.monotonic() - t0, 1),
        }
        _stamp_path().write_text(json.dumps(stamp, indent=1) + "\n")
        say(f"FRR {version} ready in {final}")
        return ch
