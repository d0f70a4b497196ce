"""bench.fabric.isolate: the bench's forwarding stays on the traffic CPUs."""

from __future__ import annotations

import os
import socket
import threading

import pytest
from glbdlab.netns import Lab

from bench.fabric import isolate

SOFTNET = (
    "000d3a96 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 "
    "00000000 00000000 00000000 00000000 00000000 00000000\n"
    "00c810b2 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 "
    "0003644f 00000000 00000000 00000001 00000000 00000000\n"
)


def test_softnet_counters_and_the_router_share() -> None:
    a = isolate.softnet_processed(SOFTNET)
    assert a == {0: 0xD3A96, 1: 0xC810B2}
    assert isolate.softnet_processed(SOFTNET, isolate.SOFTNET_RECEIVED_RPS) == {0: 0, 1: 0x3644F}
    b = {0: a[0] + 25, 1: a[1] + 75}
    assert isolate.processed_share(frozenset({0}), a, b) == 25.0
    wrapped = {0: 5, 1: 10}  # CPU 0's 32-bit counter wrapped after 0xFFFFFFFF
    assert isolate.processed_share(frozenset({0}), {0: 0xFFFFFFFB, 1: 0}, wrapped) == 10 / 20 * 100
    assert isolate.processed_share(frozenset({0}), a, a) != isolate.processed_share(
        frozenset({0}), a, a
    )  # nothing processed: NaN, not 0
    assert isolate.cpu_mask({0}) == "1" and isolate.cpu_mask({1, 4}) == "12"


def _rps_ipis(cpu: int) -> int:
    """Times ``cpu`` was woken to process packets another CPU steered to it."""
    return isolate.softnet_processed(column=isolate.SOFTNET_RECEIVED_RPS)[cpu]


@pytest.mark.netns
def test_receive_work_is_steered_to_the_traffic_cpus(netns_lab: Lab) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs")
    sender, target = cpus[0], cpus[-1]
    a, b = netns_lab.pair()
    isolate.steer_receive([a, b], frozenset({target}))
    for ns, ifname in ((a, "a-b"), (b, "b-a")):
        mask = ns.run(["cat", f"/sys/class/net/{ifname}/queues/rx-0/rps_cpus"]).stdout
        assert int(mask.strip().replace(",", ""), 16) == 1 << target
    lo = a.run(["cat", "/sys/class/net/lo/queues/rx-0/rps_cpus"]).stdout
    assert int(lo.strip().replace(",", ""), 16) == 0

    # frames sent on one CPU are received on the other: the target CPU is woken for them
    before = _rps_ipis(target)
    rx = b.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("198.18.0.2", 0))
    rx.settimeout(5)

    def send() -> None:
        os.sched_setaffinity(0, {sender})
        with a.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            for _ in range(50):
                tx.sendto(b"x", rx.getsockname())
                rx.recv(10)  # one at a time: every frame finds the target CPU idle

    with rx:
        t = threading.Thread(target=send)
        t.start()
        t.join()
    assert _rps_ipis(target) > before
