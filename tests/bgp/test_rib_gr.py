"""Graceful restart (RFC 4724) in the RIB, receiving speaker (helper) role, in virtual time: a
peer whose session drops without a NOTIFICATION keeps its paths (stale, still forwarding) for
its restart time, then until its End-of-RIB or the stale path time; a NOTIFICATION, BFD
failure, a comeback without the capability or with the Forwarding State bit clear, or GR off
on our side end that at once. Also when the restarting speaker (us) may send End-of-RIB."""

from __future__ import annotations

from collections.abc import Sequence

from rib_helpers import LEAVES, V4, N, spine_rib, update_from

from glbd.bgp import exabgp_api as api
from glbd.bgp.rib import Rib
from glbd.bgp.ribtypes import (
    NextHopsChanged,
    PeerDown,
    RibParams,
    Role,
    StaleTimerExpired,
)

#: the graceful restart tests run with two leaves
TWO = {i: LEAVES[i] for i in (1, 2)}
BOTH = ("ipv4/unicast", "ipv6/unicast")


def cap(
    time: int = 120,
    *,
    restarting: bool = False,
    families: tuple[str, ...] = BOTH,
    forwarding: tuple[str, ...] | None = None,
) -> api.GracefulRestart:
    return api.GracefulRestart(
        time, restarting, families, families if forwarding is None else forwarding
    )


def rib(gr: api.GracefulRestart | None = None, **kw: object) -> Rib:
    kw.setdefault("graceful_restart", True)
    return spine_rib(Role.BOTH, TWO, gr=gr, **kw)


def upd(leaf: int, *prefixes: str) -> api.UpdateEvent:
    return update_from(TWO[leaf], *prefixes)


def eor(leaf: int, family: str = "ipv4 unicast") -> api.UpdateEvent:
    n = TWO[leaf]
    return api.UpdateEvent(n.address, n.local_address, n.remote_as, 65100, "receive", eor=family)


def changes(effects: Sequence[object]) -> dict[str, int]:
    return {str(e.prefix): len(e.next_hops) for e in effects if isinstance(e, NextHopsChanged)}


def row(r: Rib, leaf: int, now: float = 0.0) -> dict[str, object]:
    (x,) = [x for x in r.neighbors_snapshot(now) if x["peer"] == str(LEAVES[leaf].address)]
    return x


def back(r: Rib, leaf: int, now: float, gr: api.GracefulRestart | None) -> list[object]:
    n = LEAVES[leaf]
    out: list[object] = list(r.on_open(n.address, V4(f"10.0.0.{leaf}"), gr))
    out += r.on_state(n.address, "connected", now)
    out += r.on_state(n.address, "up", now)
    return out


def test_restarting_peer_keeps_forwarding_until_its_eor() -> None:
    r = rib(cap(30))
    r.on_update(upd(1, "10.201.0.0/24", "10.209.0.0/24"), 1.0)
    before = r.forwarding()
    eff = r.on_state(LEAVES[1].address, "down", 5.0, "peer reset")
    assert [type(e) for e in eff] == [PeerDown]  # no forwarding change
    assert r.forwarding() == before
    x = row(r, 1, 5.0)
    assert x["state"] == "stale" and x["gr_helping"] and x["stale_for_s"] == 30.0
    assert r.next_deadline() == 35.0
    assert r.on_timer(34.9) == []
    # back with R and F set; resends one of its two prefixes, then End-of-RIB
    eff = back(r, 1, 10.0, cap(30, restarting=True))
    assert not changes(eff)
    assert r.next_deadline() == 10.0 + 360.0  # stale_path_time_s
    assert not changes(r.on_update(upd(1, "10.201.0.0/24"), 10.5))
    eff = r.on_update(eor(1), 11.0)
    assert changes(eff) == {"10.209.0.0/24": 0}
    assert r.next_hops(N("10.201.0.0/24"))
    x = row(r, 1, 11.0)
    assert x["state"] == "up" and not x["gr_helping"] and x["stale_for_s"] is None
    assert r.next_deadline() is None
    assert x["counters"]["gr_restarts"] == 1  # type: ignore[index]


def test_restart_time_expires_without_the_peer() -> None:
    r = rib(cap(30))
    r.on_update(upd(1, "10.201.0.0/24"), 1.0)
    r.on_state(LEAVES[1].address, "down", 5.0, "peer reset")
    eff = r.on_timer(35.0)
    assert eff[0] == StaleTimerExpired((LEAVES[1].address,), 1)
    assert changes(eff) == {"10.201.0.0/24": 0}
    assert row(r, 1)["state"] == "down" and not row(r, 1)["gr_helping"]


def test_stale_path_time_expires_without_eor() -> None:
    r = rib(cap(30), stale_path_time_s=5.0)
    r.on_update(upd(1, "10.201.0.0/24", "10.209.0.0/24"), 1.0)
    r.on_state(LEAVES[1].address, "down", 2.0)
    back(r, 1, 3.0, cap(30, restarting=True))
    r.on_update(upd(1, "10.201.0.0/24"), 3.5)
    assert r.next_deadline() == 8.0
    eff = r.on_timer(8.0)
    assert eff[0] == StaleTimerExpired((LEAVES[1].address,), 1)
    assert changes(eff) == {"10.209.0.0/24": 0}


def test_comeback_without_capability_flushes() -> None:
    r = rib(cap(30))
    r.on_update(upd(1, "10.201.0.0/24"), 1.0)
    r.on_state(LEAVES[1].address, "down", 2.0)
    eff = back(r, 1, 3.0, None)
    assert changes(eff) == {"10.201.0.0/24": 0}
    assert r.next_deadline() is None
    assert row(r, 1)["counters"]["gr_stale_flushed"] == 1  # type: ignore[index]


def test_comeback_without_forwarding_state_flushes_that_family() -> None:
    r = rib(cap(30))
    r.on_update(upd(1, "10.201.0.0/24", "2001:db8:201::/48"), 1.0)
    r.on_state(LEAVES[1].address, "down", 2.0)
    eff = back(r, 1, 3.0, cap(30, restarting=True, forwarding=("ipv6/unicast",)))
    assert changes(eff) == {"10.201.0.0/24": 0}
    assert r.next_hops(N("2001:db8:201::/48"))  # its forwarding was kept: waits for EoR
    assert row(r, 1, 3.0)["gr_helping"]


def test_families_not_in_the_capability_go_at_once() -> None:
    r = rib(cap(30, families=("ipv4/unicast",)))
    r.on_update(upd(1, "10.201.0.0/24", "2001:db8:201::/48"), 1.0)
    eff = r.on_state(LEAVES[1].address, "down", 2.0)
    assert changes(eff) == {"2001:db8:201::/48": 0}
    assert r.next_hops(N("10.201.0.0/24"))


def test_helper_only_peer_is_not_helped() -> None:
    """FRR's default (helper only) sends the capability without families: nothing is kept."""
    r = rib(cap(120, families=()))
    r.on_update(upd(1, "10.201.0.0/24"), 1.0)
    assert changes(r.on_state(LEAVES[1].address, "down", 2.0)) == {"10.201.0.0/24": 0}


def test_notification_received_is_not_a_restart() -> None:
    r = rib(cap(30))
    r.on_update(upd(1, "10.201.0.0/24"), 1.0)
    n = LEAVES[1]
    r.on_notification(
        api.NotificationEvent(n.address, n.local_address, 65001, 65100, "receive", 6, 2)
    )
    assert changes(r.on_state(n.address, "down", 2.0)) == {"10.201.0.0/24": 0}
    assert r.next_deadline() is None


def test_our_hold_timer_expiry_is_a_restart() -> None:
    """ExaBGP reports the NOTIFICATIONs it sends only in the "down" reason."""
    r = rib(cap(30))
    r.on_update(upd(1, "10.201.0.0/24"), 1.0)
    assert not changes(r.on_state(LEAVES[1].address, "down", 2.0, "notification sent (4,0)"))
    assert r.next_deadline() == 32.0


def test_our_cease_is_not_a_restart() -> None:
    r = rib(cap(30))
    r.on_update(upd(1, "10.201.0.0/24"), 1.0)
    eff = r.on_state(LEAVES[1].address, "down", 2.0, "notification sent (6,2)")
    assert changes(eff) == {"10.201.0.0/24": 0}


def test_bfd_down_is_not_a_restart() -> None:
    r = rib(cap(30), bfd_strict=True)
    r.on_update(upd(1, "10.201.0.0/24"), 1.0)
    eff = r.peer_bfd_down(LEAVES[1].address, 2.0)
    assert changes(eff) == {"10.201.0.0/24": 0}
    r.on_state(LEAVES[1].address, "down", 2.1)
    assert not row(r, 1)["gr_helping"] and row(r, 1)["prefixes_in"] == 0
    assert r.next_deadline() is None


def test_graceful_restart_off_on_our_side() -> None:
    r = rib(cap(30), graceful_restart=False)
    r.on_update(upd(1, "10.201.0.0/24"), 1.0)
    assert changes(r.on_state(LEAVES[1].address, "down", 2.0)) == {"10.201.0.0/24": 0}
    assert row(r, 1)["graceful_restart"] is None


def test_restart_times_are_per_peer() -> None:
    r = rib()
    for i, t in ((1, 30), (2, 90)):
        n = LEAVES[i]
        r.on_state(n.address, "down", 0.5)
        r.on_open(n.address, V4(f"10.0.0.{i}"), cap(t))
        r.on_state(n.address, "up", 0.5)
        r.on_update(upd(i, f"10.20{i}.0.0/24"), 1.0)
        r.on_state(n.address, "down", 2.0)
    assert r.next_deadline() == 32.0
    eff = r.on_timer(32.0)
    assert eff[0] == StaleTimerExpired((LEAVES[1].address,), 1)
    assert changes(eff) == {"10.201.0.0/24": 0}
    assert r.next_deadline() == 92.0
    assert r.next_hops(N("10.202.0.0/24"))


def test_a_second_drop_restarts_the_wait() -> None:
    r = rib(cap(30))
    r.on_update(upd(1, "10.201.0.0/24", "10.209.0.0/24"), 1.0)
    r.on_state(LEAVES[1].address, "down", 2.0)
    back(r, 1, 3.0, cap(30, restarting=True))
    r.on_update(upd(1, "10.201.0.0/24"), 3.5)
    assert not changes(r.on_state(LEAVES[1].address, "down", 4.0))
    assert r.next_deadline() == 34.0
    assert r.next_hops(N("10.209.0.0/24")) and r.next_hops(N("10.201.0.0/24"))


def test_converged_waits_for_peers_eor_after_our_restart() -> None:
    """Our End-of-RIB waits until every established peer sent its own (or is restarting
    itself) and nothing is stale from our ExaBGP's restart."""
    r = rib(cap(30))
    r.on_update(upd(1, "10.201.0.0/24"), 1.0)
    r.on_update(eor(1), 1.0)
    r.on_update(eor(2), 1.0)
    assert r.converged()
    r.speaker_lost(2.0)
    assert not r.converged()
    back(r, 1, 3.0, cap(30))
    back(r, 2, 3.0, cap(30, restarting=True))  # restarting too: never waited for
    assert not r.converged()
    r.on_update(upd(1, "10.201.0.0/24"), 3.5)
    r.on_update(eor(1), 3.6)
    assert r.converged()


def test_converged_after_a_start_waits_for_every_neighbor() -> None:
    """A fresh glbd (nothing stale) still waits for a neighbor not up yet: its routes are
    what a restarted spine re-advertises to the others."""
    params = RibParams(
        V4("10.0.0.11"), 65100, Role.BOTH, tuple(TWO.values()), graceful_restart=True
    )
    r = Rib(params)
    r.on_open(LEAVES[1].address, V4("10.0.0.1"), cap(30))
    r.on_state(LEAVES[1].address, "up", 1.0)
    r.on_update(eor(1), 1.5)
    assert not r.converged()  # leaf2 never came up
    r.on_open(LEAVES[2].address, V4("10.0.0.2"), cap(30))
    r.on_state(LEAVES[2].address, "up", 2.0)
    r.on_update(eor(2), 2.5)
    assert r.converged()
    r.on_state(LEAVES[2].address, "down", 3.0)
    assert r.converged()  # down now, but its last session ended its table
