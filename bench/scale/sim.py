"""One-process Clos simulation in virtual time over the real pure cores.

What runs per node (all real glbd code, driven with ``now`` arguments):

* every node: a :class:`glbd.bgp.rib.Rib` (leaves: load balancer, spines of a 3-stage Clos and
  super-spines: helper, pod spines of a 5-stage Clos: both). The ExaBGP hop is a direct call:
  an :class:`glbd.bgp.rib.Advertise` / ``Retract`` a Rib decides towards neighbour N becomes
  the :class:`glbd.bgp.exabgp_api.UpdateEvent` N's Rib receives (peer = the sender's address on
  that link, the NHC attribute *bytes* from the decision, which the receiving Rib decodes with
  :func:`glbd.bgp.nhc.decode_value` and validates).
* spines: a :class:`heartbeat.sender.Sender` with one entry per link (3-stage: the downstream
  links to the leaves; 5-stage: the links to the leaves and to the super-spines); each datagram
  is ``wire``-encoded bytes, delivered on every virtual link after a configurable delay (plus an
  optional uniform jitter) to the far end's :class:`heartbeat.receiver.Receiver`
  (``on_datagram(bytes, ifname, src, ttl=255, now)``, which decodes it).
* leaves: Receiver + :class:`glbd.quality.pathtable.PathTable`, wired like
  ``glbd.daemon.node.Node``: ``RemoteUpdate`` -> ``set_remote``, ``NextHopsChanged`` ->
  ``on_next_hops_changed``, the receiver's expiry timer re-armed at ``next_deadline()``.

What is synthesized (documented in bench/scale/README.md):

* local link quality: every leaf uplink is band 7, up, 100 Gbit/s (``set_local``; no
  LinkMonitor, no counters); a spine's link snapshot is a list of ``wire.Entry`` that the
  simulation edits (the degradation is a band change of one entry handed to ``Sender.update``,
  i.e. it starts when the spine's LinkMonitor would have reported the new band);
* ``rib="sample"`` (the default for the 128 x 64 3-stage Clos, where a real leaf Rib costs
  O(spines^2) per prefix): every spine and super-spine Rib is real, every leaf Rib is real as an
  originator, but only ``rib_sample`` leaves receive their UPDATEs into their real Rib. For the
  other leaves the NextHopsChanged events are derived from the *same* Advertise decisions the real
  spine Ribs produced for them: NHC bytes decoded with ``glbd.bgp.nhc.decode_value``, the Rib's
  checks (header next hop matches, NNHN[0] is the peer's BGP ID), multipath = every path of the
  shortest AS path. The run asserts that, on every sampled leaf, this derivation equals the real
  Rib's forwarding state (next hops, BGP ids, NNH sets).
* no packet loss, no BFD, no FIB (the settle time ends when a PathTable returns the new
  weights; the kernel write is benchmarked in bench/fib_bench.py).
"""

from __future__ import annotations

import copy
import gc
import heapq
import ipaddress
import random
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from glbd.bgp import exabgp_api as api
from glbd.bgp import nhc as nhcmod
from glbd.bgp.rib import Rib
from glbd.bgp.ribtypes import Advertise, NeighborParams, NextHopsChanged, Retract, RibParams, Role
from glbd.bgp.ribtypes import NextHop as RibNextHop
from glbd.quality.pathmodel import LocalLink, PathTableParams
from glbd.quality.pathtable import PathTable
from heartbeat import wire
from heartbeat.receiver import Neighbor, Receiver, ReceiverParams
from heartbeat.sender import Sender, SenderParams

IPv4 = ipaddress.IPv4Address
CAPACITY_MBPS = 100_000
GOOD_BAND = 7
_FAMILY = "ipv4 unicast"
#: NHC attribute flags as ExaBGP reports a received one: optional, transitive, extended length
_NHC_FLAGS_RECEIVED = 0xE0


# --- configuration ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SimConfig:
    stages: int = 3
    # 3-stage
    leaves: int = 128
    spines: int = 64
    # 5-stage: pods of leaves and spines; spine k of every pod connects to plane k's super-spines
    pods: int = 8
    leaves_per_pod: int = 16
    spines_per_pod: int = 8
    supers_per_plane: int = 8
    # heartbeats
    interval_s: float = 0.020
    min_spacing_s: float = 0.005
    on_change: bool = True
    delay_s: float = 0.001
    jitter_s: float = 0.0005
    hmac: bool = True
    hold_multiplier: int = 3
    # run
    prefixes_per_leaf: int = 1
    steady_s: float = 1.0
    #: band changes per spine per second during the steady window (leaf-side churn)
    churn_per_spine_s: float = 1.0
    degrade_band: int = 2
    rib: str = "full"  # full | sample
    rib_sample: int = 4
    seed: int = 1

    @property
    def n_leaves(self) -> int:
        return self.leaves if self.stages == 3 else self.pods * self.leaves_per_pod


KEY = wire.HmacKey(1, b"scale-sim-secret-0123456789abcdef")


# --- fabric ----------------------------------------------------------------------------------


@dataclass(eq=False)
class Port:
    node: Node
    ifname: str
    ifindex: int
    addr: IPv4
    peer: Port | None = None
    delay: float = 0.0


@dataclass(eq=False)
class Node:
    name: str
    kind: str  # leaf | spine | super
    idx: int
    rid: IPv4
    asn: int
    pod: int = 0
    plane: int = 0
    prefixes: tuple[ipaddress.IPv4Network, ...] = ()
    ports: dict[str, Port] = field(default_factory=dict)
    by_peer: dict[IPv4, Port] = field(default_factory=dict)  # neighbour address -> my port
    rib: Rib | None = None
    sender: Sender | None = None
    entries: list[wire.Entry] = field(default_factory=list)
    rx: Receiver | None = None
    table: PathTable | None = None
    rib_real_in: bool = True  # this node's UPDATEs go into its real Rib
    inbox: dict[Any, dict[IPv4, Advertise]] = field(default_factory=dict)
    timer_at: float | None = None
    # measurements
    cpu_rx: float = 0.0
    cpu_tx: float = 0.0
    datagrams: int = 0
    change_times: list[float] = field(default_factory=list)

    @property
    def rid_int(self) -> int:
        return int(self.rid)


class Fabric:
    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.leaves: list[Node] = []
        self.spines: list[Node] = []
        self.supers: list[Node] = []
        self._addr = int(IPv4("100.64.0.0"))
        self._build()

    @property
    def nodes(self) -> list[Node]:
        return self.leaves + self.spines + self.supers

    def _link(self, upper: Node, lower: Node) -> None:
        a, b = IPv4(self._addr), IPv4(self._addr + 1)
        self._addr += 2
        d = self.cfg.delay_s + self.rng.uniform(0, self.cfg.jitter_s)
        pu = Port(upper, f"to-{lower.name}", len(upper.ports) + 1, a, delay=d)
        pl = Port(lower, f"to-{upper.name}", len(lower.ports) + 1, b, delay=d)
        pu.peer, pl.peer = pl, pu
        upper.ports[pu.ifname] = pu
        lower.ports[pl.ifname] = pl
        upper.by_peer[b] = pu
        lower.by_peer[a] = pl

    def _leaf(self, i: int, pod: int = 0) -> Node:
        ppl = self.cfg.prefixes_per_leaf
        base = int(IPv4("172.16.0.0"))
        pfx = tuple(ipaddress.IPv4Network((base + (i * ppl + j) * 256, 24)) for j in range(ppl))
        return Node(
            f"l{i}", "leaf", i, IPv4(int(IPv4("10.1.0.1")) + i), 4_200_000_000 + i, pod, 0, pfx
        )

    def _build(self) -> None:
        c = self.cfg
        if c.stages == 3:
            self.leaves = [self._leaf(i) for i in range(c.leaves)]
            self.spines = [
                Node(f"s{k}", "spine", k, IPv4(int(IPv4("10.2.0.1")) + k), 65_000)
                for k in range(c.spines)
            ]
            for sp in self.spines:
                for lf in self.leaves:
                    self._link(sp, lf)
        elif c.stages == 5:
            self.leaves = [
                self._leaf(p * c.leaves_per_pod + i, p)
                for p in range(c.pods)
                for i in range(c.leaves_per_pod)
            ]
            self.spines = [
                Node(
                    f"p{p}s{k}",
                    "spine",
                    p * c.spines_per_pod + k,
                    IPv4(int(IPv4("10.2.0.1")) + p * c.spines_per_pod + k),
                    65_000 + p,  # one AS per pod's spines (RFC 7938)
                    p,
                    k,
                )
                for p in range(c.pods)
                for k in range(c.spines_per_pod)
            ]
            self.supers = [
                Node(
                    f"x{k}.{j}",
                    "super",
                    k * c.supers_per_plane + j,
                    IPv4(int(IPv4("10.3.0.1")) + k * c.supers_per_plane + j),
                    64_900,
                    0,
                    k,
                )
                for k in range(c.spines_per_pod)
                for j in range(c.supers_per_plane)
            ]
            for sp in self.spines:
                for lf in self.leaves[sp.pod * c.leaves_per_pod : (sp.pod + 1) * c.leaves_per_pod]:
                    self._link(sp, lf)
            for x in self.supers:
                for sp in self.spines:
                    if sp.plane == x.plane:
                        self._link(x, sp)
        else:
            raise ValueError("stages must be 3 or 5")


# --- virtual time ----------------------------------------------------------------------------


class Loop:
    def __init__(self) -> None:
        self.now = 0.0
        self._q: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = 0

    def at(self, t: float, fn: Callable[..., None], *args: Any) -> None:
        self._seq += 1
        heapq.heappush(self._q, (t, self._seq, fn, args))

    def run_until(self, t_end: float) -> None:
        q = self._q
        pop = heapq.heappop
        while q and q[0][0] <= t_end:
            t, _s, fn, args = pop(q)
            self.now = t
            fn(*args)
        self.now = t_end


# --- the simulation --------------------------------------------------------------------------


class Sim:
    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.fab = Fabric(cfg)
        self.loop = Loop()
        self.rng = random.Random(cfg.seed + 1)
        self.timings: dict[str, float] = {}
        self.bgp_messages = 0
        self.recording: dict[str, list[tuple[float, bytes, str, str]]] | None = None
        self.track_changes = False
        self.rib_checks = 0
        self.bgp_rounds = 0

    # --- BGP ---------------------------------------------------------------------------------

    def _rib_params(self, n: Node) -> RibParams:
        if n.kind == "leaf":
            role = Role.LOAD_BALANCER
        elif n.kind == "spine" and self.cfg.stages == 5:
            role = Role.BOTH
        else:
            role = Role.HELPER
        nbs = tuple(
            NeighborParams(
                address=p.peer.addr,
                remote_as=p.peer.node.asn,
                local_address=p.addr,
                interface=p.ifname,
            )
            for p in n.ports.values()
            if p.peer is not None
        )
        # every UPDATE selected at once: the simulation delivers them without the RIB timer
        return RibParams(n.rid, n.asn, role, nbs, originated=n.prefixes, update_coalesce_s=0.0)

    def build_bgp(self) -> None:
        t0 = time.perf_counter()
        fab = self.fab
        if self.cfg.rib == "sample":
            k = max(1, min(self.cfg.rib_sample, len(fab.leaves)))
            real = {0, len(fab.leaves) - 1, *self.rng.sample(range(len(fab.leaves)), k)}
            real = set(sorted(real)[:k]) | {0}
            for lf in fab.leaves:
                lf.rib_real_in = lf.idx in real
        for n in fab.nodes:
            n.rib = Rib(self._rib_params(n))
        work: dict[tuple[int, Any, Any], tuple[Node, Any]] = {}
        for n in fab.nodes:
            assert n.rib is not None
            for p in n.ports.values():
                assert p.peer is not None
                n.rib.on_open(p.peer.addr, p.peer.node.rid)
                self._effects(n, n.rib.on_state(p.peer.addr, "up", 0.0), work)
        for n in fab.nodes:
            assert n.rib is not None
            self._effects(n, n.rib.initial_decisions(), work)
        # rounds: every command emitted in one round is delivered in the next; a later command
        # for the same (speaker, neighbour, prefix) replaces an undelivered one (what BGP's
        # Adj-RIB-Out / MRAI batching does). The converged state does not depend on it.
        self.bgp_rounds = 0
        while work:
            batch = list(work.values())
            work.clear()
            self.bgp_rounds += 1
            for src, cmd in batch:
                self._deliver_bgp(src, cmd, work)
        for lf in fab.leaves:
            if not lf.rib_real_in:
                self._derive_next_hops(lf)
        self.timings["bgp_build_s"] = time.perf_counter() - t0
        self._check_sampled_ribs()

    def _effects(self, n: Node, effects: Iterable[Any], work: dict[Any, tuple[Node, Any]]) -> None:
        for e in effects:
            if isinstance(e, Advertise | Retract):
                work[(id(n), e.peer, e.prefix)] = (n, e)
            elif isinstance(e, NextHopsChanged) and n.table is not None:
                ch = n.table.on_next_hops_changed(e)
                if ch and self.track_changes:
                    n.change_times.append(self.loop.now)

    def _deliver_bgp(self, src: Node, cmd: Advertise | Retract, work: Any) -> None:
        """The ExaBGP hop, as a direct call: a decision of ``src`` becomes the UPDATE the far
        end's Rib receives from it."""
        self.bgp_messages += 1
        port = src.by_peer[cmd.peer]  # type: ignore[index]
        assert port.peer is not None
        dst = port.peer.node
        if not dst.rib_real_in:  # sampled mode: keep the command for the derivation
            box = dst.inbox.setdefault(cmd.prefix, {})
            if isinstance(cmd, Advertise):
                box[port.addr] = cmd
            else:
                box.pop(port.addr, None)
            return
        assert dst.rib is not None
        if isinstance(cmd, Advertise):
            attrs = api.PathAttributes(
                origin=cmd.origin,
                as_path=cmd.as_path,
                as_path_length=len(cmd.as_path),
                med=None,
                communities=cmd.communities,
                nhc=cmd.nhc,
                nhc_flags=None if cmd.nhc is None else _NHC_FLAGS_RECEIVED,
            )
            ev = api.UpdateEvent(
                port.addr,
                port.peer.addr,
                src.asn,
                dst.asn,
                "receive",
                attrs,
                (api.RouteAnnounced(_FAMILY, cmd.next_hop, cmd.prefix),),
            )
        else:
            ev = api.UpdateEvent(
                port.addr,
                port.peer.addr,
                src.asn,
                dst.asn,
                "receive",
                withdrawn=((_FAMILY, cmd.prefix),),
            )
        self._effects(dst, dst.rib.on_update(ev, self.loop.now), work)

    def _derived(self, lf: Node) -> dict[Any, tuple[RibNextHop, ...]]:
        """A leaf's forwarding state derived from the Advertise decisions addressed to it (see
        the module docstring): real NHC decode, the Rib's NNHN checks, shortest-AS-path
        multipath."""
        out: dict[Any, tuple[RibNextHop, ...]] = {}
        for prefix, box in lf.inbox.items():
            if not box:
                continue
            best = min((len(c.as_path), c.origin) for c in box.values())
            nhs = []
            for addr, c in box.items():
                if (len(c.as_path), c.origin) != best:
                    continue
                port = lf.by_peer[addr]
                assert port.peer is not None
                peer_id = port.peer.node.rid
                nnh: tuple[IPv4, ...] | None = None
                status = "absent"
                if c.nhc is not None:
                    d = nhcmod.decode_value(c.nhc)
                    if d.next_hop_match(c.next_hop) is nhcmod.NextHopMatch.MISMATCH:
                        status = "nhc_nh_mismatch"
                    elif d.nnhn is None:
                        status = "nnhn_absent"
                    elif d.nnhn.nh_bgp_id != peer_id:
                        status = "nnhn_nh_bgp_id_mismatch"
                    else:
                        nnh, status = d.nnhn.nnh_ids, "valid"
                nhs.append(RibNextHop(addr, peer_id, c.next_hop, port.ifname, nnh, status))
            out[prefix] = tuple(sorted(nhs, key=lambda nh: int(nh.peer)))
        return out

    def _derive_next_hops(self, lf: Node) -> None:
        for prefix, nhs in sorted(self._derived(lf).items()):
            if lf.table is not None:
                lf.table.on_next_hops_changed(NextHopsChanged(prefix, nhs))

    def _check_sampled_ribs(self) -> None:
        """In sampled mode, replay the derivation on the leaves with a real Rib: it must give
        the Rib's own forwarding state."""
        if self.cfg.rib != "sample":
            return
        for lf in self.fab.leaves:
            if not lf.rib_real_in:
                continue
            # what the spines sent to this leaf, collected from their Adj-RIB-Out
            lf.inbox = {}
            for p in lf.ports.values():
                assert p.peer is not None and p.peer.node.rib is not None
                for cmd in p.peer.node.rib.adj_rib_out():
                    if cmd.peer == p.addr:
                        lf.inbox.setdefault(cmd.prefix, {})[p.peer.addr] = cmd
            assert lf.rib is not None
            derived = self._derived(lf)
            real = lf.rib.forwarding()
            if derived != real:
                raise AssertionError(f"derived next hops differ from {lf.name}'s real Rib")
            self.rib_checks += 1
            lf.inbox = {}

    # --- heartbeats --------------------------------------------------------------------------

    def build_heartbeats(self) -> None:
        c = self.cfg
        rp = ReceiverParams(c.hold_multiplier, {KEY.key_id: KEY} if c.hmac else {})
        for lf in self.fab.leaves:
            lf.rx = Receiver(rp)
            lf.table = PathTable(PathTableParams(role=Role.LOAD_BALANCER))
            for p in lf.ports.values():
                assert p.peer is not None
                if p.peer.node.kind == "spine":
                    lf.rx.set_neighbor(Neighbor(p.ifname, p.peer.node.rid_int, str(p.peer.addr)))
                lf.table.set_local(p.ifname, LocalLink(GOOD_BAND, False, float(CAPACITY_MBPS)))
        for sp in self.fab.spines:
            sp.sender = Sender(
                SenderParams(
                    sp.rid_int, c.interval_s, c.min_spacing_s, c.on_change, KEY if c.hmac else None
                ),
                first_sequence=self.rng.randrange(1, 2**31),
            )
            sp.entries = [
                wire.Entry(p.peer.node.rid_int, p.ifindex, CAPACITY_MBPS, GOOD_BAND)
                for p in sp.ports.values()
                if p.peer is not None
            ]

    def start_heartbeats(self, t0: float) -> None:
        for sp in self.fab.spines:
            phase = t0 + self.rng.uniform(0, self.cfg.interval_s)
            self.loop.at(phase, self._spine_start, sp)

    def _spine_start(self, sp: Node) -> None:
        assert sp.sender is not None
        now = self.loop.now
        sp.sender.update(sp.entries, now)
        ifs = [p.ifname for p in sp.ports.values() if p.peer is not None]
        self._transmit(sp, sp.sender.set_interfaces(ifs, now))

    def _spine_timer(self, sp: Node) -> None:
        assert sp.sender is not None
        t0 = time.perf_counter()
        tx = sp.sender.on_timer(self.loop.now)
        sp.cpu_tx += time.perf_counter() - t0
        self._transmit(sp, tx)

    def set_band(self, sp: Node, i: int, band: int) -> None:
        """The spine's monitor reports a new band for its i-th link."""
        assert sp.sender is not None
        sp.entries[i] = sp.entries[i]._replace(band=band)
        t0 = time.perf_counter()
        tx = sp.sender.update(sp.entries, self.loop.now)
        sp.cpu_tx += time.perf_counter() - t0
        self._transmit(sp, tx)
        self._arm_sender(sp)

    def _arm_sender(self, sp: Node) -> None:
        assert sp.sender is not None
        d = sp.sender.next_deadline()
        if d is not None and d != sp.timer_at:
            sp.timer_at = d
            self.loop.at(d, self._spine_fire, sp, d)

    def _spine_fire(self, sp: Node, d: float) -> None:
        if sp.timer_at != d:
            return  # superseded
        sp.timer_at = None
        self._spine_timer(sp)
        self._arm_sender(sp)

    def _transmit(self, sp: Node, txs: list[Any]) -> None:
        now = self.loop.now
        for tx in txs:
            p = sp.ports[tx.ifname]
            assert p.peer is not None
            dst = p.peer.node
            if dst.rx is None:
                continue  # super-spines do not consume heartbeats in this model
            self.loop.at(now + p.delay, self._rx, dst, p.peer.ifname, str(p.addr), tx.data)
        self._arm_sender(sp)

    def _rx(self, lf: Node, ifname: str, src: str, data: bytes) -> None:
        rx, table = lf.rx, lf.table
        assert rx is not None and table is not None
        now = self.loop.now
        t0 = time.perf_counter()
        ups = rx.on_datagram(data, ifname=ifname, src=src, ttl=255, now=now)
        changed = False
        for u in ups:
            if table.set_remote(u.node_id, u.entries):
                changed = True
        lf.cpu_rx += time.perf_counter() - t0
        lf.datagrams += 1
        if changed and self.track_changes:
            lf.change_times.append(now)
        if self.recording is not None and lf.name in self.recording:
            self.recording[lf.name].append((now, data, ifname, src))
        d = rx.next_deadline()
        if d is not None and (lf.timer_at is None or d < lf.timer_at):
            lf.timer_at = d
            self.loop.at(d, self._leaf_timer, lf, d)

    def _leaf_timer(self, lf: Node, d: float) -> None:
        if lf.timer_at != d:
            return
        rx, table = lf.rx, lf.table
        assert rx is not None and table is not None
        now = self.loop.now
        t0 = time.perf_counter()
        changed = False
        for u in rx.on_timer(now):
            if table.set_remote(u.node_id, u.entries):
                changed = True
        lf.cpu_rx += time.perf_counter() - t0
        if changed and self.track_changes:
            lf.change_times.append(now)
        lf.timer_at = None
        nd = rx.next_deadline()
        if nd is not None:
            lf.timer_at = nd
            self.loop.at(nd, self._leaf_timer, lf, nd)

    # --- views -------------------------------------------------------------------------------

    def weights_of(self, lf: Node, prefix: Any) -> dict[int, int]:
        """Leaf ``lf``'s weight per next-hop BGP id for ``prefix`` (summed over parallel links)."""
        assert lf.table is not None
        key = lf.table.profile_of(str(prefix))
        if key is None:
            return {}
        out: dict[int, int] = {}
        for nh, w in lf.table.weights(key).items():
            out[nh.bgp_id] = out.get(nh.bgp_id, 0) + w.value
        return out

    def snapshot(self) -> dict[str, dict[str, tuple[tuple[int, int], ...]]]:
        out: dict[str, dict[str, tuple[tuple[int, int], ...]]] = {}
        for lf in self.fab.leaves:
            assert lf.table is not None
            out[lf.name] = {
                p: tuple(sorted(self.weights_of(lf, p).items())) for p in lf.table.prefixes()
            }
        return out


# --- measurements ----------------------------------------------------------------------------


def deep_size(roots: Iterable[Any], exclude: set[int] | None = None) -> int:
    """Bytes of every object reachable from ``roots`` (each counted once), not counting
    modules, classes, functions and objects in ``exclude``."""
    seen: set[int] = set(exclude or ())
    skip = (type, type(sys), type(deep_size), type(len))
    stack = list(roots)
    total = 0
    while stack:
        o = stack.pop()
        if id(o) in seen or isinstance(o, skip):
            continue
        seen.add(id(o))
        total += sys.getsizeof(o)
        stack.extend(gc.get_referents(o))
    return total


def shared_ids(sim: Sim) -> set[int]:
    """Objects every node references but none owns (params, the fabric graph)."""
    ids: set[int] = set()
    for n in sim.fab.nodes:
        ids.add(id(n))
        for p in n.ports.values():
            ids.add(id(p))
    ids.add(id(KEY))
    return ids


def rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096
    except OSError:  # pragma: no cover
        return 0


def replay_cpu(
    lf: Node, rec: list[tuple[float, bytes, str, str]], rx: Receiver, table: PathTable
) -> float:
    """Process CPU seconds for a copy of a leaf's receiver + table to process a recorded
    datagram stream (what the leaf got in the steady window), in one tight loop."""
    gc.collect()
    t0 = time.process_time()
    for now, data, ifname, src in rec:
        for u in rx.on_datagram(data, ifname=ifname, src=src, ttl=255, now=now):
            table.set_remote(u.node_id, u.entries)
    return time.process_time() - t0


def clone(obj: Any) -> Any:
    """A deep copy sharing the (immutable, unpicklable) HMAC key."""
    return copy.deepcopy(obj, {id(KEY): KEY})
