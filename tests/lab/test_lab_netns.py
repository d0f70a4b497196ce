"""glbdlab.netns: namespaces and veths are created under a run tag and always deleted."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest
from glbdlab.netns import Lab, LabError, check_ifname, list_lab_namespaces
from glbdlab.nodes import wait_until

pytestmark = pytest.mark.netns


def test_pair_pings_and_socket_lives_in_namespace(netns_lab: Lab) -> None:
    a, b = netns_lab.pair()
    assert a.name == f"glb-{netns_lab.tag}-a"
    assert a.ping("198.18.0.2")
    rx = b.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = a.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with rx, tx:
        rx.bind(("198.18.0.2", 0))  # only exists in b: proves the socket is in b
        rx.settimeout(5)
        tx.sendto(b"hi", rx.getsockname())
        data, peer = rx.recvfrom(100)
    assert (data, peer[0]) == (b"hi", "198.18.0.1")
    # The calling thread is back in its own namespace.
    with pytest.raises(OSError), socket.socket() as s:
        s.bind(("198.18.0.2", 0))


async def test_async_run_and_spawn_are_stopped(netns_lab: Lab) -> None:
    a, _ = netns_lab.pair()
    res = await a.arun(["ip", "-o", "addr", "show", "dev", "a-b"])
    assert "198.18.0.1/30" in res.stdout
    proc = await a.spawn(["sleep", "60"])
    pop = a.popen(["sleep", "60"])
    netns_lab.close()
    assert pop.returncode is not None
    assert await proc.wait() != 0
    assert list_lab_namespaces(netns_lab.tag) == []


@pytest.fixture
def tags_after_teardown() -> Iterator[list[str]]:
    """Set up before ``netns_lab`` (so torn down after it): checks what the fixture left."""
    tags: list[str] = []
    yield tags
    for tag in tags:
        assert list_lab_namespaces(tag) == [], "netns_lab fixture left namespaces behind"


def test_fixture_cleans_up(tags_after_teardown: list[str], netns_lab: Lab) -> None:
    netns_lab.pair()
    netns_lab.netns("c").popen(["sleep", "60"])  # a process in a namespace must not keep it
    tags_after_teardown.append(netns_lab.tag)
    assert len(list_lab_namespaces(netns_lab.tag)) == 3


def test_two_labs_do_not_clash() -> None:
    with Lab() as one, Lab() as two:
        assert one.tag != two.tag
        a1, _ = one.pair()
        a2, _ = two.pair()  # same node and interface names, same addresses: no clash
        assert a1.name != a2.name
        assert a1.ping("198.18.0.2") and a2.ping("198.18.0.2")
    assert list_lab_namespaces(one.tag) == list_lab_namespaces(two.tag) == []


def test_a_namespace_of_another_run_is_refused_and_left_alone() -> None:
    """Names are unique per run, but should one exist already (a run with the same tag), a
    lab refuses it and its teardown does not delete what it did not make."""
    with Lab() as mine:
        mine.netns("a")
        with Lab(tag=mine.tag) as other, pytest.raises(LabError, match="exists already"):
            other.netns("a")
        assert list_lab_namespaces(mine.tag) == [mine.ns_name("a")]
    assert list_lab_namespaces(mine.tag) == []


def test_errors_are_one_line() -> None:
    with pytest.raises(LabError, match="bad interface name"):
        check_ifname("x" * 16)
    with Lab() as lab:
        a = lab.netns("a")
        with pytest.raises(LabError) as err:
            a.run(["ip", "link", "set", "nonexistent", "up"])
        assert "\n" not in str(err.value)
    assert list_lab_namespaces(lab.tag) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_cleans_up(sig: signal.Signals) -> None:
    code = (
        "import signal, sys, time\n"
        # a script started from a shell: Ctrl-C raises, whatever the test runner's own
        # process had ignored or blocked (a child inherits both across exec)
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})\n"
        "from glbdlab.netns import Lab\n"
        "lab = Lab()\n"
        "lab.pair()\n"
        "lab.netns('c').popen(['sleep', '60'])\n"
        "print(lab.tag, flush=True)\n"
        "time.sleep(60)\n"  # the stimulus: alive until the signal the test sends
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    tag = proc.stdout.readline().strip()
    try:
        assert len(list_lab_namespaces(tag)) == 3
        os.kill(proc.pid, sig)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            _out, err = proc.communicate()
            pytest.fail(f"the lab script did not exit within 20 s of {sig.name}: {err[-2000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
    wait_until(lambda: list_lab_namespaces(tag) == [], 5, what="the lab's namespaces gone")
