"""Leaf-spine lab fabric: a small topology description and a builder of namespaces and links.

Default: 2 spines x 2 leaves, one host namespace behind each leaf (``leaf_spine(2, 2)``); the
benchmark uses ``leaf_spine(4, 4)``. Node names are ``spine<i>``, ``leaf<j>``, ``host<j>``
(1-based); namespaces are ``glb-<tag>-<node>`` (see :mod:`glbdlab.netns`).

Routing layout (RFC 7938 eBGP Clos): all spines share AS **65100**; leaf *j* has its own AS
**65000+j**; hosts run no BGP. Router id = the node's IPv4 loopback.

Addressing plan -- everything from ONE test range, 198.18.0.0/15 (RFC 2544 benchmarking), and
2001:db8::/32 (documentation) for IPv6. ``s`` = spine index, ``j`` = leaf index (1-based):

=========================  ===========================  ====================================
what                       IPv4                         IPv6
=========================  ===========================  ====================================
spine s loopback/router-id 198.18.0.s/32                2001:db8:ffff::s/128 (s in hex)
leaf j loopback/router-id  198.18.0.(100+j)/32          2001:db8:ffff::1:j/128
spine s -- leaf j link     198.18.s.(2j-2)/31:          2001:db8:s:j::/64:
                           spine .2j-2, leaf .2j-1      spine ::1, leaf ::2
leaf j -- host j link      198.19.j.0/24 (leaf j's      2001:db8:100:j::/64 (leaf ::1, host
(leaf j's host prefix)     host prefix): leaf .1,       ::2)
                           host .2; host default via .1
spare for tests/demo       198.19.200.0/21 (anycast,    2001:db8:200::/40
                           service prefixes)
=========================  ===========================  ====================================

Limits: up to 99 spines and 99 leaves. Interface names are the peer's node name (on ``leaf1``
the link to ``spine2`` is ``spine2``; on ``host1`` the uplink is ``leaf1``), all <= 15 chars.

Usage::

    from glbdlab.topology import Fabric, leaf_spine

    with Fabric(leaf_spine(2, 2)) as fab:            # build() on enter, destroy() on exit
        fab.ns("leaf1").ping(fab.addr("spine1", "leaf1"))
        fab.shape("leaf1", "spine1", rate="10mbit")  # tbf on leaf1's end of leaf1--spine1
        fab.cut("leaf1", "spine1")                   # link down on leaf1's end; fab.restore(...)
        fab.drop("leaf1", "spine1")                  # nft: link stays up, packets dropped
        print(fab.status())

Fault helpers act on one end of a link (default: the first-named node's end). ``drop`` adds the
interface to an nftables set (``table inet glblab``, chains input/forward/output) in that node's
namespace; ``undrop`` removes it.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

from glbdlab.netns import Lab, LabError, Netns, check_ifname

__all__ = [
    "LEAF_AS_BASE",
    "SPINE_AS",
    "Fabric",
    "LinkSpec",
    "Node",
    "Topology",
    "leaf_spine",
]

SPINE_AS = 65100
LEAF_AS_BASE = 65000
Role = Literal["spine", "leaf", "host"]


@dataclass(frozen=True)
class Node:
    """One node of the fabric. ``asn``/``router_id``/loopbacks are None for hosts."""

    name: str
    role: Role
    index: int
    asn: int | None = None
    router_id: str | None = None
    loopback4: str | None = None  # "a.b.c.d/32"
    loopback6: str | None = None  # "x::y/128"
    prefix4: str | None = None  # leaf: the host prefix it serves
    prefix6: str | None = None


@dataclass(frozen=True)
class LinkSpec:
    """A point-to-point link; ``a_if`` lives on node ``a``. Addresses are interface CIDRs."""

    a: str
    a_if: str
    a_addr4: str
    a_addr6: str
    b: str
    b_if: str
    b_addr4: str
    b_addr6: str

    def end(self, node: str) -> tuple[str, str, str, str]:
        """(ifname, addr4, addr6, peer) for ``node``'s end of this link."""
        if node == self.a:
            return self.a_if, self.a_addr4, self.a_addr6, self.b
        if node == self.b:
            return self.b_if, self.b_addr4, self.b_addr6, self.a
        raise LabError(f"{node} is not an end of link {self.a}--{self.b}")


@dataclass(frozen=True)
class Topology:
    spines: int
    leaves: int
    hosts: bool
    nodes: tuple[Node, ...]
    links: tuple[LinkSpec, ...]

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise LabError(f"no node {name!r} in this topology ({', '.join(self.names())})")

    def names(self, role: Role | None = None) -> list[str]:
        return [n.name for n in self.nodes if role is None or n.role == role]

    def link(self, a: str, b: str) -> LinkSpec:
        for ln in self.links:
            if {ln.a, ln.b} == {a, b}:
                return ln
        raise LabError(f"no link between {a!r} and {b!r}")

    def links_of(self, node: str) -> list[LinkSpec]:
        return [ln for ln in self.links if node in (ln.a, ln.b)]

    def to_dict(self) -> dict[str, object]:
        return {"spines": self.spines, "leaves": self.leaves, "hosts": self.hosts}


def leaf_spine(spines: int = 2, leaves: int = 2, *, hosts: bool = True) -> Topology:
    """An S x L leaf-spine fabric (every leaf linked to every spine), optionally one host per
    leaf, with the addressing plan of this module's docstring."""
    if not (1 <= spines <= 99 and 1 <= leaves <= 99):
        raise LabError("a lab fabric has 1-99 spines and 1-99 leaves")
    nodes: list[Node] = []
    links: list[LinkSpec] = []
    for s in range(1, spines + 1):
        nodes.append(
            Node(
                f"spine{s}",
                "spine",
                s,
                asn=SPINE_AS,
                router_id=f"198.18.0.{s}",
                loopback4=f"198.18.0.{s}/32",
                loopback6=f"2001:db8:ffff::{s:x}/128",
            )
        )
    for j in range(1, leaves + 1):
        nodes.append(
            Node(
                f"leaf{j}",
                "leaf",
                j,
                asn=LEAF_AS_BASE + j,
                router_id=f"198.18.0.{100 + j}",
                loopback4=f"198.18.0.{100 + j}/32",
                loopback6=f"2001:db8:ffff::1:{j:x}/128",
                prefix4=f"198.19.{j}.0/24",
                prefix6=f"2001:db8:100:{j:x}::/64",
            )
        )
    for j in range(1, leaves + 1):
        for s in range(1, spines + 1):
            links.append(
                LinkSpec(
                    a=f"leaf{j}",
                    a_if=check_ifname(f"spine{s}"),
                    a_addr4=f"198.18.{s}.{2 * j - 1}/31",
                    a_addr6=f"2001:db8:{s:x}:{j:x}::2/64",
                    b=f"spine{s}",
                    b_if=check_ifname(f"leaf{j}"),
                    b_addr4=f"198.18.{s}.{2 * j - 2}/31",
                    b_addr6=f"2001:db8:{s:x}:{j:x}::1/64",
                )
            )
    if hosts:
        for j in range(1, leaves + 1):
            nodes.append(Node(f"host{j}", "host", j))
            links.append(
                LinkSpec(
                    a=f"leaf{j}",
                    a_if=f"host{j}",
                    a_addr4=f"198.19.{j}.1/24",
                    a_addr6=f"2001:db8:100:{j:x}::1/64",
                    b=f"host{j}",
                    b_if=f"leaf{j}",
                    b_addr4=f"198.19.{j}.2/24",
                    b_addr6=f"2001:db8:100:{j:x}::2/64",
                )
            )
    return Topology(spines, leaves, hosts, tuple(nodes), tuple(links))


def _ip(cidr: str) -> str:
    return str(ipaddress.ip_interface(cidr).ip)


_NFT_TABLE = "glblab"
_NFT_SETUP = f"""
table inet {_NFT_TABLE} {{
  set dropif {{ type ifname; }}
  chain input {{ type filter hook input priority -10; iifname @dropif drop; }}
  chain forward {{ type filter hook forward priority -10; iifname @dropif drop; \
oifname @dropif drop; }}
  chain output {{ type filter hook output priority -10; oifname @dropif drop; }}
}}
"""


@dataclass
class _LinkState:
    down: set[str] = field(default_factory=set)  # nodes whose end is admin-down
    shaped: dict[str, str] = field(default_factory=dict)  # node -> tbf spec
    dropped: set[str] = field(default_factory=set)  # nodes dropping on their end


class Fabric:
    """Namespaces and links of a :class:`Topology`, built in a :class:`Lab`.

    ``Fabric(topo)`` owns a new Lab (own tag) and closes it in :meth:`destroy`; pass ``lab=`` to
    build inside an existing Lab (e.g. the ``netns_lab`` fixture) -- then destroy() leaves the
    Lab open and the Lab's close deletes the namespaces."""

    def __init__(self, topo: Topology | None = None, *, lab: Lab | None = None) -> None:
        self.topo = topo or leaf_spine()
        self._own_lab = lab is None
        self.lab = lab or Lab()
        self.tag = self.lab.tag
        self._ns: dict[str, Netns] = {}
        self._state: dict[tuple[str, str], _LinkState] = {}
        self._nft_ready: set[str] = set()
        self.built = False

    def __enter__(self) -> Fabric:
        try:
            self.build()
        except BaseException:
            self.destroy()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    # --- build / destroy ---------------------------------------------------------------------
    def build(self) -> Fabric:
        """Create every namespace and link, address them, loopbacks, host default routes."""
        if self.built:
            return self
        for node in self.topo.nodes:
            ns = self.lab.netns(node.name)
            self._ns[node.name] = ns
            cmds = []
            if node.loopback4:
                cmds.append(f"addr add {node.loopback4} dev lo")
            if node.loopback6:
                cmds.append(f"addr add {node.loopback6} dev lo")
            ns.ip_batch(cmds)
        for ln in self.topo.links:
            self.lab.veth(
                self._ns[ln.a],
                ln.a_if,
                self._ns[ln.b],
                ln.b_if,
                a_addr=[ln.a_addr4, ln.a_addr6],
                b_addr=[ln.b_addr4, ln.b_addr6],
            )
            self._state[(ln.a, ln.b)] = _LinkState()
        for node in self.topo.nodes:
            if node.role == "host":
                (up,) = self.topo.links_of(node.name)
                _, _, _, leaf = up.end(node.name)
                _, leaf4, leaf6, _ = up.end(leaf)
                self._ns[node.name].ip_batch(
                    [
                        f"route add default via {_ip(leaf4)}",
                        f"route add default via {_ip(leaf6)}",
                    ]
                )
        self.built = True
        return self

    def destroy(self) -> None:
        """Delete everything (idempotent). Safe to call after a failed build."""
        self.built = False
        self._ns.clear()
        if self._own_lab:
            self.lab.close()
        else:
            for node in self.topo.nodes:
                self.lab.remove(node.name)

    # --- lookups -------------------------------------------------------------------------------
    def ns(self, node: str) -> Netns:
        try:
            return self._ns[node]
        except KeyError:
            self.topo.node(node)  # raises "no node" if unknown
            raise LabError("the fabric is not built") from None

    def nodes(self, role: Role | None = None) -> list[Node]:
        return [n for n in self.topo.nodes if role is None or n.role == role]

    def ifname(self, node: str, peer: str) -> str:
        """Name of ``node``'s interface toward ``peer``."""
        return self.topo.link(node, peer).end(node)[0]

    def addr(self, node: str, peer: str, *, v6: bool = False) -> str:
        """``node``'s address (no prefix length) on its link to ``peer``."""
        _, a4, a6, _ = self.topo.link(node, peer).end(node)
        return _ip(a6 if v6 else a4)

    def _st(self, a: str, b: str) -> _LinkState:
        ln = self.topo.link(a, b)
        return self._state[(ln.a, ln.b)]

    # --- faults and shaping ----------------------------------------------------------------------
    def cut(self, a: str, b: str, *, end: str | None = None) -> None:
        """Take link a--b down on one end (default ``a``): the peer sees carrier loss."""
        end = end or a
        self.ns(end).link_down(self.ifname(end, b if end == a else a))
        self._st(a, b).down.add(end)

    def restore(self, a: str, b: str) -> None:
        """Bring both ends of link a--b up again."""
        st = self._st(a, b)
        for end in list(st.down):
            peer = b if end == a else a
            self.ns(end).link_up(self.ifname(end, peer))
        st.down.clear()

    def shape(
        self,
        a: str,
        b: str,
        *,
        rate: str = "10mbit",
        burst: str = "32kbit",
        latency: str = "50ms",
        end: str | None = None,
    ) -> None:
        """``tc qdisc replace dev X root tbf rate R burst B latency L`` on one end (default
        ``a``, i.e. traffic leaving ``a`` toward ``b``)."""
        end = end or a
        peer = b if end == a else a
        dev = self.ifname(end, peer)
        tbf = ["tbf", "rate", rate, "burst", burst, "latency", latency]
        self.ns(end).run(["tc", "qdisc", "replace", "dev", dev, "root", *tbf])
        self._st(a, b).shaped[end] = f"tbf {rate} burst {burst} latency {latency}"

    def unshape(self, a: str, b: str) -> None:
        st = self._st(a, b)
        for end in list(st.shaped):
            peer = b if end == a else a
            self.ns(end).run(
                ["tc", "qdisc", "del", "dev", self.ifname(end, peer), "root"], check=False
            )
        st.shaped.clear()

    def drop(self, a: str, b: str, *, end: str | None = None) -> None:
        """nftables: drop every packet in and out of ``end``'s (default ``a``) interface of link
        a--b, while the link stays up. What the peer sends towards ``end`` is dropped on the
        peer's egress too, as a wire would lose it: a tc ingress BPF program at ``end`` (glbd's
        BFD kernel path) runs before the input hook."""
        end = end or a
        peer = b if end == a else a
        ns = self.ns(end)
        if end not in self._nft_ready:
            ns.run(["nft", "-f", "-"], input=_NFT_SETUP)
            self._nft_ready.add(end)
        dev = self.ifname(end, peer)
        ns.run(["nft", "add", "element", "inet", _NFT_TABLE, "dropif", f"{{ {dev} }}"])
        self.ns(peer).drop_egress(self.ifname(peer, end))
        self._st(a, b).dropped.add(end)

    def undrop(self, a: str, b: str) -> None:
        st = self._st(a, b)
        for end in list(st.dropped):
            peer = b if end == a else a
            dev = self.ifname(end, peer)
            self.ns(peer).undrop_egress(self.ifname(peer, end))
            self.ns(end).run(
                ["nft", "delete", "element", "inet", _NFT_TABLE, "dropif", f"{{ {dev} }}"]
            )
        st.dropped.clear()

    # --- checks and status ---------------------------------------------------------------------
    def check_links(self, *, v6: bool = True) -> list[str]:
        """Ping across every link (both address families). Returns the failures (empty = ok)."""
        failures = []
        for ln in self.topo.links:
            for fam6 in (False, True) if v6 else (False,):
                dst = _ip(ln.b_addr6 if fam6 else ln.b_addr4)
                if not self.ns(ln.a).ping(dst, count=3, wait=1.0):
                    failures.append(f"{ln.a} -> {ln.b} ({dst}) via {ln.a_if}")
        return failures

    def link_rows(self) -> Iterator[dict[str, str]]:
        for ln in self.topo.links:
            st = self._state.get((ln.a, ln.b), _LinkState())
            faults = [f"{n} down" for n in sorted(st.down)]
            faults += [f"{n}: {spec}" for n, spec in sorted(st.shaped.items())]
            faults += [f"{n} drops" for n in sorted(st.dropped)]
            yield {
                "a": f"{ln.a}:{ln.a_if}",
                "a_addr": f"{ln.a_addr4} {ln.a_addr6}",
                "b": f"{ln.b}:{ln.b_if}",
                "b_addr": f"{ln.b_addr4} {ln.b_addr6}",
                "state": ", ".join(faults) or "up",
            }

    def to_dict(self) -> dict[str, object]:
        """JSON-safe description (tag, topology parameters, namespaces, links and their state)."""
        return {
            "tag": self.tag,
            "topology": self.topo.to_dict(),
            "namespaces": {n: ns.name for n, ns in self._ns.items()},
            "links": list(self.link_rows()),
        }

    def status(self) -> str:
        """A human-readable table of nodes and links."""
        out = [f"lab fabric tag {self.tag}: {self.topo.spines} spines x {self.topo.leaves} leaves"]
        out.append(f"{'node':<9} {'namespace':<22} {'AS':>6} {'router-id':<15} loopback / prefix")
        for n in self.topo.nodes:
            nsname = self._ns[n.name].name if n.name in self._ns else "-"
            extra = n.prefix4 and f"serves {n.prefix4} {n.prefix6}"
            lo = " ".join(x for x in (n.loopback4, n.loopback6, extra) if x)
            out.append(
                f"{n.name:<9} {nsname:<22} {n.asn or '-':>6} {n.router_id or '-':<15} {lo}".rstrip()
            )
        out.append("")
        out.append(f"{'link':<28} {'addresses':<62} state")
        for r in self.link_rows():
            out.append(
                f"{r['a'] + ' -- ' + r['b']:<28} {r['a_addr'] + ' | ' + r['b_addr']:<62} "
                f"{r['state']}"
            )
        return "\n".join(out)

    def dumps(self) -> str:
        return json.dumps(self.to_dict(), indent=1)
