"""The FIB programmer's pure state (glbd.fib.fibcache) in virtual time: events, holds,
failover, write outcomes, without a kernel."""

from __future__ import annotations

import errno
import ipaddress

from glbd.fib.fibcache import FibCache
from glbd.fib.fibmodel import (
    Desired,
    GroupSpec,
    KGroup,
    KLink,
    KNexthop,
    KRoute,
    Member,
    Observed,
)
from glbd.fib.fibplan import GroupDel, GroupSet, IdMap, NhDel, NhSet, RouteDel, RouteSet
from glbd.fib.fibsnap import snapshot
from glbd.netlink import const as c
from glbd.netlink.codec import Attr, IfInfoMsg, Message, NhMsg, RtMsg

P = 200
M1 = Member(ipaddress.ip_address("198.18.10.2"), "eth1")
M2 = Member(ipaddress.ip_address("198.18.10.6"), "eth2")
M3 = Member(ipaddress.ip_address("198.18.10.10"), "eth1")
PFX = ipaddress.ip_network("203.0.113.0/24")
PFX2 = ipaddress.ip_network("198.51.100.0/24")


def cache() -> FibCache:
    """Two members, group 21 (both) and group 22 (M1 alone), a route on each."""
    fc = FibCache(P, 254)
    fc.desired = Desired(
        groups={"p": GroupSpec({M1: 1, M2: 1}), "solo": GroupSpec({M1: 1})},
        routes={PFX: "p", PFX2: "solo"},
    )
    fc.ids = IdMap(members={M1: 11, M2: 12}, groups={"p": 21, "solo": 22})
    fc.obs = Observed(
        links={"eth1": KLink(2, "eth1", True, True), "eth2": KLink(3, "eth2", True, True)},
        nexthops={11: KNexthop(11, P, M1.gateway, 2), 12: KNexthop(12, P, M2.gateway, 3)},
        groups={21: KGroup(21, P, ((11, 1), (12, 1))), 22: KGroup(22, P, ((11, 1),))},
        routes={(PFX, 0): KRoute(PFX, 254, P, 0, 21), (PFX2, 0): KRoute(PFX2, 254, P, 0, 22)},
    )
    fc.routes_dirty = False
    return fc


def nh_deleted(nid: int) -> Message:
    return Message(c.RTM_DELNEXTHOP, header=NhMsg(protocol=P), attrs=(Attr.u32(c.NHA_ID, nid),))


def test_member_delete_shrinks_groups_and_an_emptied_group_takes_its_routes() -> None:
    fc = cache()
    fc.account(NhDel(11))
    assert fc.obs.groups == {21: KGroup(21, P, ((12, 1),))}
    assert set(fc.obs.routes) == {(PFX, 0)} and fc.routes_dirty
    fc.account(GroupDel(21))
    assert not fc.obs.routes


def test_unclaimed_delete_is_held_for_the_hold_time_then_released() -> None:
    fc = cache()
    fc.on_event(nh_deleted(11), now=100.0)
    assert fc.wake and fc.map_dirty and 11 not in fc.obs.nexthops
    assert fc.excluded == {M1} and fc.stats.foreign_deletes == 1
    assert snapshot(fc, 100.0, 8)["groups"]["p"]["excluded"] == {M1.label: "deleted_elsewhere"}
    fc.expire_held(100.0 + fc.foreign_delete_hold_s - 0.01)
    assert fc.excluded == {M1}
    fc.expire_held(100.0 + fc.foreign_delete_hold_s)
    assert not fc.excluded and not fc.held_until


def test_claimed_failover_stays_excluded_until_restored() -> None:
    fc = cache()
    fc.on_event(nh_deleted(11), now=0.0)
    assert fc.failed_over(M1.gateway, "eth1") == 0  # the kernel event came first
    fc.expire_held(10.0)
    assert fc.excluded == {M1} and fc.stats.engine_failovers == 1
    fc.restore(M1.gateway, "eth1")
    assert not fc.excluded


def test_failover_map_is_taken_only_when_it_changed() -> None:
    fc = cache()
    assert fc.take_failover_map() == {(M1.gateway, "eth1"): (11,), (M2.gateway, "eth2"): (12,)}
    assert fc.take_failover_map() is None
    fc.failed_over(M1.gateway, "eth1")
    assert fc.map_dirty and fc.take_failover_map() == {(M2.gateway, "eth2"): (12,)}


def test_the_failover_map_is_looked_at_again_only_when_member_ids_may_have_changed() -> None:
    """The map follows member ids and member nexthops. A weights-only write (each BGP or
    heartbeat step) changes neither and leaves it alone; a member write, a new id map or a
    write error marks it for a new look."""
    fc = cache()
    fc.take_failover_map()
    fc.written([GroupSet(21, "p", ((11, 3), (12, 1)), None, create=False)], {}, set(), True)
    fc.failed([])
    assert not fc.map_dirty
    fc.written([NhSet(13, M3, 4, replace=False)], {}, set(), True)
    fc.failed([])
    assert fc.map_dirty
    fc.take_failover_map()
    fc.ids = IdMap(members={M1: 11}, groups={"p": 21, "solo": 22})
    fc.failed([])
    assert fc.map_dirty and fc.take_failover_map() == {(M1.gateway, "eth1"): (11,)}
    fc.failed(["EPERM"])
    assert fc.map_dirty


def test_failover_ops_keep_the_other_members_and_delete_an_emptied_group() -> None:
    fc = cache()
    ops = fc.failover_ops(M1.gateway, None)
    assert ops == [GroupSet(21, "p", ((12, 1),), None, create=False), GroupDel(22)]
    assert fc.excluded == {M1} and fc.wake
    stripped = fc.strip_excluded([GroupSet(21, "p", ((11, 5), (12, 1)), None, create=False)])
    assert stripped == [GroupSet(21, "p", ((12, 1),), None, create=False)]


def test_link_without_carrier_flushes_its_members() -> None:
    fc = cache()
    down = Message(
        c.RTM_NEWLINK,
        header=IfInfoMsg(index=2, flags=c.IFF_UP),
        attrs=(Attr.string(c.IFLA_IFNAME, "eth1"), Attr.u8(c.IFLA_CARRIER, 0)),
    )
    fc.on_event(down, now=0.0)
    assert fc.wake and fc.stats.link_events == 1
    assert 11 not in fc.obs.nexthops and 22 not in fc.obs.groups
    assert fc.obs.groups[21].entries == ((12, 1),)


def test_foreign_route_on_a_wanted_prefix_is_left_alone_and_counted() -> None:
    fc = cache()
    hdr = RtMsg(family=2, dst_len=24, table=254, protocol=186, type=c.RTN_UNICAST)
    new = Message(c.RTM_NEWROUTE, header=hdr, attrs=(Attr.addr(c.RTA_DST, PFX.network_address),))
    fc.on_route_event(new)
    assert (PFX, 0) in fc.obs.foreign_routes and (PFX, 0) not in fc.obs.routes
    assert fc.stats.conflicts == {"glbd_route_replaced": 1}
    assert fc.notes[str(PFX)] == "foreign_route" and fc.wake and fc.routes_dirty
    fc.wake = False
    gone = Message(c.RTM_DELROUTE, header=hdr, attrs=new.attrs)
    fc.on_route_event(gone)
    assert not fc.obs.foreign_routes and fc.wake


def test_write_outcomes() -> None:
    fc = cache()
    not_created: set[int] = set()
    ops = [
        RouteSet(ipaddress.ip_network("192.0.2.0/24"), 0, 21),
        RouteDel(PFX2, 0),
        GroupSet(23, "x", ((12, 300),), None, create=True),
    ]
    failed = {
        0: OSError(errno.EEXIST, "exists"),
        1: OSError(errno.ESRCH, "gone"),
        2: OSError(errno.EEXIST, "id taken"),
    }
    errors, no_w16 = fc.written(ops, failed, not_created, w16=True)
    assert errors == [] and not no_w16
    assert (ipaddress.ip_network("192.0.2.0/24"), 0) in fc.obs.foreign_routes
    assert (PFX2, 0) not in fc.obs.routes  # already gone: accounted
    assert not_created == {23} and 23 in fc.obs.foreign_ids
    assert fc.stats.conflicts == {"route_exists_on_create": 1, "nexthop_id_taken": 1}
    assert fc.need_full and fc.stats.ops == 3
    fc.failed(["x"])
    assert fc.stats.op_errors == 1 and fc.stats.last_errors == ["x"]


def test_the_echo_of_our_own_deletion_needs_no_reconcile() -> None:
    """The kernel notifies glbd's own deletions too: those are mirrored by ``written`` and
    must not wake a reconcile (a full plan) each time BGP churn retires a group; a deletion
    by someone else still does."""
    fc = cache()
    fc.sending([GroupDel(22)])
    fc.on_event(nh_deleted(22), now=0.0)  # the echo may come before the ACK is read
    assert not fc.wake and 22 in fc.obs.groups
    assert fc.written([GroupDel(22)], {}, set(), False) == ([], False)
    assert 22 not in fc.obs.groups and not fc.wake
    fc.on_event(nh_deleted(21), now=0.0)  # not ours to delete: someone else did
    assert fc.wake
    fc.wake = False
    # a deletion the kernel refused sends no notification: a later one of the same id is
    # someone else's
    fc.sending([NhDel(12)])
    fc.written([NhDel(12)], {0: OSError(errno.EBUSY, "busy")}, set(), False)
    fc.on_event(nh_deleted(12), now=0.0)
    assert fc.wake
