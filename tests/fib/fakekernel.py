"""A tiny fake kernel for plan tests: what each planned op does to glbd's objects, checking the
order and the rules the real kernel enforces (members before groups, groups before routes, a
route at a taken key only replaced, never a foreign route), and the kernel's silent flush on
carrier loss."""

from __future__ import annotations

from glbd.fib.fibmodel import KGroup, KLink, KNexthop, KRoute, Observed
from glbd.fib.fibplan import GroupDel, GroupSet, NhDel, NhSet, Op, RouteDel, RouteSet

#: the protocol number the plan tests program with
P = 200


def links(down: tuple[str, ...] = ()) -> dict[str, KLink]:
    """eth1..eth3 (ifindex 2..4), admin up, without carrier if named in ``down``."""
    return {f"eth{i}": KLink(i + 1, f"eth{i}", True, f"eth{i}" not in down) for i in (1, 2, 3)}


def kernel_apply(obs: Observed, ops: tuple[Op, ...] | list[Op]) -> Observed:
    """``obs`` after ``ops``, as the kernel would do them."""
    o = obs.copy()
    for op in ops:
        if isinstance(op, NhSet):
            o.nexthops[op.id] = KNexthop(op.id, P, op.member.gateway, op.ifindex, op.member.onlink)
        elif isinstance(op, GroupSet):
            assert all(i in o.nexthops for i, _w in op.entries), "member before group"
            if op.create:
                assert op.id not in o.groups
            o.groups[op.id] = KGroup(op.id, P, op.entries, op.resilient)
        elif isinstance(op, RouteSet):
            rk = (op.prefix, op.metric)
            assert op.nhid in o.groups, "group before route"
            assert rk not in o.foreign_routes, "a foreign route is never replaced"
            assert op.replace == (rk in o.routes), "create-only unless glbd's route is there"
            o.routes[rk] = KRoute(op.prefix, 254, P, op.metric, op.nhid)
        elif isinstance(op, RouteDel):
            del o.routes[(op.prefix, op.metric)]
        elif isinstance(op, GroupDel):
            del o.groups[op.id]
            o.routes = {k: r for k, r in o.routes.items() if r.nhid != op.id}
        elif isinstance(op, NhDel):
            assert not any(op.id in dict(g.entries) for g in o.groups.values())
            del o.nexthops[op.id]
    return o


def carrier_lost(obs: Observed, ifname: str) -> Observed:
    """The kernel's silent flush: the link's nexthops go, an emptied group with its routes."""
    o = obs.copy()
    o.links = {**o.links, ifname: KLink(o.links[ifname].index, ifname, True, False)}
    gone = {i for i, nh in o.nexthops.items() if nh.ifindex == o.links[ifname].index}
    o.nexthops = {i: nh for i, nh in o.nexthops.items() if i not in gone}
    for gid, g in list(o.groups.items()):
        rest = tuple(e for e in g.entries if e[0] not in gone)
        if rest:
            o.groups[gid] = KGroup(gid, P, rest, g.resilient)
        else:
            del o.groups[gid]
            o.routes = {k: r for k, r in o.routes.items() if r.nhid != gid}
    return o
