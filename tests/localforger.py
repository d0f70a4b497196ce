"""A local unprivileged forger for the wire-only tests (BFD and heartbeats): a child started as
root in a namespace drops to uid/gid 65534, binds an IPv6 link-local address that is not its
host's (IPV6_FREEBIND) and sends one datagram as that address with hop limit 255."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable

from glbdlab.netns import Netns

#: ``argv``: interface, source, source port, destination, destination port; the payload (hex)
#: comes on stdin once the socket is ready, so it can carry what must be current then
FORGER = r"""
import os, socket, sys
ifname, src, sport, dst, dport = sys.argv[1:]
os.setgroups([]); os.setgid(65534); os.setuid(65534)
assert os.getuid() == os.geteuid() == 65534
idx = socket.if_nametoindex(ifname)
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IPV6, 78, 1)  # IPV6_FREEBIND: an address that is not ours
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, 255)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 255)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, idx)
s.bind((src, int(sport), 0, idx))
print("ready", flush=True)
s.sendto(bytes.fromhex(sys.stdin.readline()), (dst, int(dport), 0, idx))
print("sent")
"""


def _argv(ifname: str, src: str, sport: int, dst: str, dport: int) -> list[str]:
    return [sys.executable, "-I", "-c", FORGER, ifname, src, str(sport), dst, str(dport)]


def forge(ns: Netns, ifname: str, src: str, sport: int, dst: str, dport: int, data: bytes) -> None:
    """Send ``data`` from a uid-65534 process in ``ns`` that poses as ``src``."""
    pipe = subprocess.PIPE
    proc = ns.popen(_argv(ifname, src, sport, dst, dport), stdin=pipe, stdout=pipe, stderr=pipe)
    out, err = proc.communicate(data.hex().encode() + b"\n", timeout=30)
    assert proc.returncode == 0 and out.split() == [b"ready", b"sent"], err.decode()


async def forge_async(
    ns: Netns, ifname: str, src: str, sport: int, dst: str, dport: int, data: Callable[[], bytes]
) -> None:
    """Send ``data()`` (built when the forger is ready) from a uid-65534 process in ``ns`` that
    poses as ``src``."""
    pipe = subprocess.PIPE
    proc = await ns.spawn(
        _argv(ifname, src, sport, dst, dport), stdin=pipe, stdout=pipe, stderr=pipe
    )
    assert proc.stdin is not None and proc.stdout is not None
    ready = await asyncio.wait_for(proc.stdout.readline(), 30)
    if ready.strip() == b"ready":
        proc.stdin.write(data().hex().encode() + b"\n")
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0 and out.strip() == b"sent", err.decode()
