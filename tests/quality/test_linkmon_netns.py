"""Lab test: a tbf-shaped veth that is really loaded (iperf3 UDP above the shaped rate) drops in
band, with its qdisc backlog seen through the netlink qdisc dump, and recovers when the load
stops. The monitor reads all interfaces in one stats dump and one qdisc dump per sample."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
from collections.abc import Callable

import pytest
from glbdlab.netns import Lab, Netns

from glbd.quality.linkq import LinkMonitor, LinkMonParams, LinkSample, QualityChanged
from glbd.quality.linkrunner import MonitorRunner
from glbd.quality.linkstats import StatsReader

RATE_MBIT = 20


@pytest.mark.netns
@pytest.mark.skipif(shutil.which("iperf3") is None, reason="iperf3 not installed")
async def test_shaped_loaded_link_drops_in_band(netns_lab: Lab) -> None:
    a, b = netns_lab.pair("tx", "rx")
    a.run(
        ["tc", "qdisc", "add", "dev", "tx-rx", "root", "tbf", "rate", f"{RATE_MBIT}mbit",
         "burst", "32kb", "latency", "100ms"]
    )  # fmt: skip
    mon = LinkMonitor(LinkMonParams(capacity_mbps={"tx-rx": float(RATE_MBIT)}))
    mon.set_interfaces(["tx-rx"])
    seen: list[QualityChanged] = []
    queues: list[float] = []

    def on_update(changes: list[QualityChanged], m: LinkMonitor) -> None:
        seen.extend(changes)
        q = m.quality("tx-rx")
        if q is not None:
            queues.append(q.queue_bytes)

    reader = await StatsReader.open(netns=a.name)
    runner = MonitorRunner(mon, reader, on_update)
    server: subprocess.Popen[bytes] | None = None
    client: subprocess.Popen[bytes] | None = None

    def band() -> int | None:
        q = mon.quality("tx-rx")
        return None if q is None else q.band

    async def until(cond: object, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while not cond():  # type: ignore[operator]
            assert loop.time() < end, (
                f"timed out; changes: {[(c.quality.band, c.reason) for c in seen]}"
            )
            await asyncio.sleep(0.02)  # poll interval

    try:
        runner.start()
        await until(lambda: band() == 7, 3.0)  # idle link: best band
        server = b.popen(["iperf3", "-s", "-1", "-B", "198.18.0.2", "-p", "5299"])
        await until(lambda: b.run(["ss", "-Hltn", "sport = :5299"]).stdout.strip() != "", 5.0)
        client = a.popen(
            ["iperf3", "-c", "198.18.0.2", "-p", "5299", "-u", "-b", f"{3 * RATE_MBIT}M",
             "-t", "3", "-l", "1200"]
        )  # fmt: skip
        # saturated: load score 0; with the default rate_weight 0.5 the queue (tens of KB of
        # tbf backlog, below the 300 KB max) keeps the combined band at about 3
        await until(lambda: (band() or 7) <= 3 and max(queues, default=0) > 10_000, 5.0)
        q = mon.quality("tx-rx")
        assert q is not None and not q.down and q.load_pct > 80
        await asyncio.to_thread(client.wait, 10)
        await until(lambda: band() == 7, 5.0)  # load gone: back to the best band
        assert reader.dumps >= 2 * runner.samples and runner.errors == 0
        assert reader.link_dumps >= 1
        # link down is seen at once (RTNLGRP_LINK event), quality 0 with the down flag
        b.link_down("rx-tx")  # the peer goes away: no carrier on tx-rx
        await until(lambda: (q := mon.quality("tx-rx")) is not None and q.down, 2.0)
        assert seen[-1].reason == "down" and seen[-1].quality.band == 0
    finally:
        await runner.stop()
        reader.close()
        for p in (client, server):
            if p is not None and p.poll() is None:
                p.terminate()
                await asyncio.to_thread(p.wait, 5)


@pytest.mark.netns
async def test_lean_reader_agrees_with_full_link_and_qdisc_dumps(netns_lab: Lab) -> None:
    from glbd.netlink import const as c
    from glbd.netlink.codec import IfInfoMsg, TcMsg
    from glbd.netlink.rtnl import (
        LINK_WANT,
        QDISC_WANT,
        link_dump,
        link_state,
        qdisc_dump,
        qdisc_queue,
    )
    from glbd.netlink.rtsocket import NetlinkSocket

    async def full_read(nl: NetlinkSocket, want: set[str]) -> list[LinkSample]:
        """The same samples from whole RTM_GETLINK and RTM_GETQDISC dumps, decoded plainly."""
        links = await nl.dump_select(link_dump(), IfInfoMsg, LINK_WANT)
        qdiscs = await nl.dump_select(qdisc_dump(), TcMsg, QDISC_WANT)
        roots = [q for q in map(qdisc_queue, qdiscs) if q.parent == c.TC_H_ROOT]
        backlog = {q.ifindex: q.backlog for q in roots}
        out = []
        for st in map(link_state, links):
            if st.name in want:
                up = st.up and st.operstate in (c.IF_OPER_UP, c.IF_OPER_UNKNOWN)
                bl = backlog.get(st.ifindex, 0)
                out.append(LinkSample(st.name, up, st.tx_bytes, bl, st.ifindex))
        return out

    a, _b = netns_lab.pair("p", "q")
    lean = await StatsReader.open(netns=a.name)
    nl = await NetlinkSocket.open(netns=a.name)
    try:
        x = {s.ifname: s for s in await lean.read(["p-q", "lo"])}
        y = {s.ifname: s for s in await full_read(nl, {"p-q", "lo"})}
        assert set(x) == set(y) == {"p-q", "lo"}
        for name in x:
            assert (x[name].up, x[name].ifindex, x[name].backlog_bytes) == (
                y[name].up,
                y[name].ifindex,
                y[name].backlog_bytes,
            )
            assert abs(x[name].tx_bytes - y[name].tx_bytes) < 10_000  # counters move a little
    finally:
        lean.close()
        nl.close()


@pytest.mark.netns
async def test_reader_follows_links_qdiscs_and_state(netns_lab: Lab) -> None:
    """Columns reader in a namespace: interfaces added, a root qdisc replaced, a link going
    down and up (RTNLGRP_LINK), all seen on the next read; the per-sample reads run without
    waiting and mostly through the learned layouts."""
    ns = netns_lab.netns("cols")
    ns.ip_batch(["link add c0 type veth peer name c1", "link set c0 up", "link set c1 up"])
    reader = await StatsReader.open(netns=ns.name)
    want = frozenset({"c0", "c1", "c2", "c3"})

    async def read() -> dict[str, LinkSample]:
        cols = await reader.read_columns(want)
        return {s.ifname: s for s in map(LinkSample, *cols)}

    async def until(cond: Callable[[dict[str, LinkSample]], bool]) -> dict[str, LinkSample]:
        for _ in range(200):  # link events arrive on their own socket: a few loop turns
            got = await read()
            if cond(got):
                return got
            await asyncio.sleep(0.01)  # poll interval
        raise AssertionError(f"never true; last read {got}")

    try:
        got = await read()
        assert set(got) == {"c0", "c1"} and got["c0"].up and got["c0"].backlog_bytes == 0
        for _ in range(5):
            await read()
        assert reader.fast_reads >= 8  # stats + qdisc datagrams of the repeated reads
        steps = reader.read_steps(want, asyncio.get_running_loop().time())
        with pytest.raises(StopIteration):
            next(steps)  # the kernel answered inside send/recv: nothing to wait for
        ns.ip_batch(["link add c2 type veth peer name c3", "link set c2 up", "link set c3 up"])
        got = await until(lambda g: {"c2", "c3"} <= set(g) and g["c2"].up)
        ns.run(["tc", "qdisc", "add", "dev", "c0", "root", "pfifo", "limit", "10"])
        ns.addr_add("c0", "198.18.99.1/24")
        tx0 = (await read())["c0"].tx_bytes
        with ns.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:  # raises if it cannot send
            s.sendto(b"x", ("198.18.99.2", 9))  # resolving the neighbour sends ARP out of c0
        got = await until(lambda g: g["c0"].tx_bytes > tx0)  # > 0 too
        assert got["c0"].ifindex == ns_ifindex(ns, "c0")
        ns.ip("link", "set", "c1", "down")  # c0 loses its carrier
        got = await until(lambda g: not g["c0"].up)
        assert not got["c1"].up and got["c2"].up
        ns.ip("link", "set", "c1", "up")
        await until(lambda g: g["c0"].up and g["c1"].up)
        ns.ip("link", "del", "c2")  # its peer c3 goes with it
        await until(lambda g: set(g) == {"c0", "c1"})
        assert reader.link_events > 0
    finally:
        reader.close()


def ns_ifindex(ns: Netns, name: str) -> int:
    return int(ns.ip("-o", "link", "show", name).stdout.split(":", 1)[0])
