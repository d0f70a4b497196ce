"""Lab teardown hygiene: nothing keeps running in a deleted namespace, and ``glbd-lab down --all``
only takes the caller's labs. Cheap: one bare namespace per lab, no FRR, no glbd."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from glbdlab import cli
from glbdlab.netns import Lab, list_lab_namespaces

pytestmark = pytest.mark.netns

OTHER_UID = 12345


def _by_hand(lab: Lab, node: str) -> subprocess.Popen[bytes]:
    """A process started in the lab's namespace behind the lab's back (not tracked)."""
    return subprocess.Popen(
        ["ip", "netns", "exec", lab.ns_name(node), "sleep", "600"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _wait_in_ns(lab: Lab, node: str, proc: subprocess.Popen[bytes]) -> None:
    """Until ``ip netns exec`` has exec'd sleep inside the namespace."""
    ns_ino = os.stat(f"/run/netns/{lab.ns_name(node)}").st_ino
    for _ in range(2000):
        with contextlib.suppress(OSError):
            cmd = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
            if cmd.startswith(b"sleep") and os.stat(f"/proc/{proc.pid}/ns/net").st_ino == ns_ino:
                return
        if proc.poll() is not None:
            break
        os.sched_yield()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(0.005)
    raise AssertionError("the hand-started process never ran in the namespace")


@contextlib.contextmanager
def _reaped(*procs: subprocess.Popen[bytes]) -> Iterator[None]:
    try:
        yield
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)


def test_close_stops_a_process_started_by_hand_in_the_namespace() -> None:
    lab = Lab()
    try:
        lab.netns("a")
        proc = _by_hand(lab, "a")
        with _reaped(proc):
            _wait_in_ns(lab, "a", proc)
            lab.close()
            assert proc.wait(10) != 0  # killed, not left running in a deleted namespace
    finally:
        lab.close()
    assert list_lab_namespaces(lab.tag) == []


def _detached(tmp: Path, owner_uid: int | None) -> Lab:
    """A one-namespace lab recorded in ``tmp`` like ``glbd-lab up --detach`` records one."""
    lab = Lab()
    lab.netns("a")
    state: dict[str, object] = {
        "tag": lab.tag,
        "namespaces": [lab.ns_name("a")],
        "frr": {},
        "glbd": {},
        "owner_pid": None,
        "detached": True,
        "pids": lab.detach(),
        "status": "",
    }
    if owner_uid is not None:
        state["owner_uid"] = owner_uid
    (tmp / f"{lab.tag}.json").write_text(json.dumps(state))
    return lab


def _cleanup(lab: Lab) -> None:
    for name in list_lab_namespaces(lab.tag):
        subprocess.run(["ip", "netns", "del", name], check=False)


def _down(state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GLBD_LAB_STATE_DIR": str(state_dir)}
    return subprocess.run(
        [sys.executable, "-m", "glbdlab.cli", "down", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_down_stops_a_process_started_by_hand_in_the_lab(tmp_path: Path) -> None:
    lab = _detached(tmp_path, cli.caller_uid())
    proc = _by_hand(lab, "a")
    try:
        with _reaped(proc):
            _wait_in_ns(lab, "a", proc)
            r = _down(tmp_path, lab.tag)
            assert r.returncode == 0, r.stderr
            assert proc.wait(10) != 0
        assert list_lab_namespaces(lab.tag) == []
        assert not (tmp_path / f"{lab.tag}.json").exists()
    finally:
        _cleanup(lab)


def test_down_all_takes_only_the_callers_labs(tmp_path: Path) -> None:
    mine = _detached(tmp_path, cli.caller_uid())
    theirs = _detached(tmp_path, OTHER_UID)
    unowned = _detached(tmp_path, None)  # recorded before owners were: named by tag only
    try:
        r = _down(tmp_path, "--all")
        assert r.returncode == 0, r.stderr
        assert list_lab_namespaces(mine.tag) == []
        assert not (tmp_path / f"{mine.tag}.json").exists()
        for other in (theirs, unowned):
            assert list_lab_namespaces(other.tag) == [other.ns_name("a")]
            assert (tmp_path / f"{other.tag}.json").exists()
            assert other.tag in r.stdout  # said why it was left alone
        r = _down(tmp_path, theirs.tag)  # by name: taken, whoever recorded it
        assert r.returncode == 0, r.stderr
        assert list_lab_namespaces(theirs.tag) == []
    finally:
        for lab in (mine, theirs, unowned):
            _cleanup(lab)


def test_caller_is_the_sudo_user_when_run_through_sudo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUDO_UID", "1234")
    assert cli.caller_uid() == 1234
    monkeypatch.setenv("SUDO_UID", "not a number")
    assert cli.caller_uid() != 1234
