"""Unnumbered peer discovery under forged router advertisements (virtual time, pure core).

The real spine advertises every 10 s (FRR's default on an unnumbered BGP port); an attacker on
the link forges advertisements from another link-local address. None of the attacks may move a
session off the real spine; a genuine change of the spine's address is still followed.
"""

from __future__ import annotations

import ipaddress

from glbd.base.reasons import NdpIgnored
from glbd.unnumbered.ndpeers import NdpEvent, NdpPeers, PeerChange

A = ipaddress.IPv6Address
SPINE, FORGED, NEW = A("fe80::1"), A("fe80::bad"), A("fe80::2")
PORT = "swp1"


def timeline(*streams: tuple[A, float, float, float]) -> list[tuple[float, A]]:
    """(address, first, every, until) streams of advertisements, merged in time order."""
    out = []
    for addr, first, every, until in streams:
        t = first
        while t <= until:
            out.append((round(t, 3), addr))
            t += every
    return sorted(out)


def run(c: NdpPeers, adverts: list[tuple[float, A]]) -> list[tuple[float, NdpEvent]]:
    """Feed ``adverts`` (ticking the core between them as the speaker does)."""
    events = []
    for t, addr in adverts:
        events += [(t, ev) for ev in c.tick(t)]
        ev = c.heard(PORT, addr, t)
        if ev is not None:
            events.append((t, ev))
    return events


def core() -> NdpPeers:
    c = NdpPeers()
    c.watch(PORT)
    return c


def test_two_or_three_forged_adverts_between_the_spines_do_not_move_it() -> None:
    """Attack (a): bursts of forged advertisements between the spine's. While its session is
    coming up (``grace_s``) the rule holds without it; once it is up, the forger is ignored."""
    c = core()
    assert c.heard(PORT, SPINE, 0.0) == NdpEvent(PORT, PeerChange.LEARNED, SPINE)
    bursts = [(t + d, FORGED) for t in range(3, 600, 10) for d in (0.0, 0.5, 1.0, 1.5)]
    adverts = sorted(bursts + timeline((SPINE, 10.0, 10.0, 600.0)))
    up = 55.0  # the session comes up within the grace time
    assert run(c, [a for a in adverts if a[0] < up]) == []
    unconfirmed = c.counters[NdpIgnored.CANDIDATE_UNCONFIRMED]
    assert unconfirmed == len([b for b in bursts if b[0] < up])
    c.set_established({PORT: SPINE}, up)
    assert run(c, [a for a in adverts if a[0] >= up]) == []
    assert c.peer(PORT) == SPINE
    assert c.counters[NdpIgnored.PEER_ESTABLISHED] == len(bursts) - unconfirmed


def test_an_established_session_stays_even_when_the_spine_is_not_heard() -> None:
    """Once the learned address's session is Established, nothing another address sends
    moves it, not even when the spine's own advertisements are lost for minutes."""
    c = core()
    c.heard(PORT, SPINE, 0.0)
    c.set_established({PORT: SPINE}, 5.0)
    events = run(c, timeline((FORGED, 6.0, 2.0, 600.0)))
    assert events == []
    assert c.peer(PORT) == SPINE
    assert c.counters[NdpIgnored.PEER_ESTABLISHED] == len(timeline((FORGED, 6.0, 2.0, 600.0)))


def test_a_forged_advert_every_few_seconds_does_not_keep_the_spine_out() -> None:
    """Attack (b): the forger was heard first (nothing known yet) and repeats every 5 s,
    more often than the spine. Its address never gets a session, so after the grace time
    the spine's consistent advertisements win; the spine's session comes up and keeps it."""
    c = core()
    adverts = timeline((FORGED, 0.0, 5.0, 600.0), (SPINE, 1.0, 10.0, 600.0))
    events: list[tuple[float, NdpEvent]] = []
    for t, addr in adverts:
        ev = c.heard(PORT, addr, t)
        if ev is not None:
            events.append((t, ev))
        if c.peer(PORT) == SPINE and not c.snapshot()[PORT]["established"]:
            c.set_established({PORT: SPINE}, t + 0.1)  # the session to the spine comes up
    assert [ev for _, ev in events] == [
        NdpEvent(PORT, PeerChange.LEARNED, FORGED),
        NdpEvent(PORT, PeerChange.CHANGED, SPINE, FORGED),
    ]
    assert events[1][0] <= c.grace_s + 2 * c.confirm_span_s
    assert c.peer(PORT) == SPINE
    assert c.counters[NdpIgnored.PEER_ESTABLISHED] > 0


def test_a_forger_every_5_to_10_s_never_displaces_a_learned_spine() -> None:
    """Attack (b) the other way round: the spine is learned, its session comes up, later
    flaps. The forger repeats every 7.5 s throughout: it is ignored while the session is up,
    and interrupted by the spine's adverts while the session is coming (back) up."""
    c = core()
    c.heard(PORT, SPINE, 0.0)
    forged = [(3.0 + 7.5 * i, FORGED) for i in range(80)]
    adverts = sorted(forged + timeline((SPINE, 10.0, 10.0, 600.0)))
    assert run(c, [a for a in adverts if a[0] < 20.0]) == []
    c.set_established({PORT: SPINE}, 20.0)
    assert run(c, [a for a in adverts if 20.0 <= a[0] < 300.0]) == []
    c.set_established({}, 300.0)  # the session dropped: the spine has the grace time
    assert run(c, [a for a in adverts if 300.0 <= a[0] < 340.0]) == []
    c.set_established({PORT: SPINE}, 340.0)
    assert run(c, [a for a in adverts if a[0] >= 340.0]) == []
    assert c.peer(PORT) == SPINE
    assert c.counters[NdpIgnored.PEER_ESTABLISHED] > 0
    assert c.counters[NdpIgnored.CANDIDATE_UNCONFIRMED] > 0


def test_restart_prefers_the_remembered_address() -> None:
    """Attack (c): after a restart the remembered address (``prefer``) is taken at once when
    heard; a forger heard first must pass the consistency rule, and the spine interrupts it."""
    c = core()
    c.prefer(PORT, SPINE)
    assert c.heard(PORT, FORGED, 0.0) is None
    assert c.heard(PORT, FORGED, 0.5) is None
    assert c.heard(PORT, FORGED, 1.0) is None
    assert c.peer(PORT) is None
    assert c.heard(PORT, SPINE, 2.0) == NdpEvent(PORT, PeerChange.LEARNED, SPINE)
    assert run(c, timeline((FORGED, 3.0, 5.0, 9.0))) == []
    c.set_established({PORT: SPINE}, 10.0)
    assert run(c, sorted(timeline((FORGED, 13.0, 5.0, 300.0), (SPINE, 12.0, 10.0, 300.0)))) == []
    assert c.counters[NdpIgnored.CANDIDATE_UNCONFIRMED] > 0


def test_a_remembered_address_that_is_gone_is_replaced_after_confirmation() -> None:
    """The spine's address changed while glbd was down: the new one is learned once heard
    consistently (``confirm`` times over ``confirm_span_s``)."""
    c = core()
    c.prefer(PORT, SPINE)
    events = run(c, timeline((NEW, 0.0, 10.0, 100.0)))
    assert events == [(20.0, NdpEvent(PORT, PeerChange.LEARNED, NEW))]


def test_a_genuine_address_change_is_followed() -> None:
    """The spine's address really changes (a new line card): the old one falls silent, its
    session goes down on its own timers, and the new address is taken after the consistency
    rule (not on its first advertisement)."""
    c = core()
    c.heard(PORT, SPINE, 0.0)
    c.set_established({PORT: SPINE}, 5.0)
    run(c, timeline((SPINE, 10.0, 10.0, 100.0)))
    # the new address, while the old session is still Established (BGP hold time 90 s)
    assert run(c, timeline((NEW, 105.0, 10.0, 185.0))) == []
    assert c.peer(PORT) == SPINE
    c.set_established({}, 190.0)
    events = run(c, timeline((NEW, 195.0, 10.0, 300.0)))
    assert [ev for _, ev in events][-1:] == [NdpEvent(PORT, PeerChange.CHANGED, NEW, SPINE)] or [
        ev.change for _, ev in events
    ] == [PeerChange.EXPIRED, PeerChange.LEARNED]
    assert c.peer(PORT) == NEW
    assert events[-1][0] <= 195.0 + c.confirm_span_s + 10.0


def test_a_genuine_change_without_silence_needs_confirmation_and_is_rate_limited() -> None:
    """No session yet: the old address stops, the new one is taken only after ``confirm``
    advertisements over ``confirm_span_s``; a move back needs the same and waits out
    ``min_change_interval_s``."""
    c = core()
    c.heard(PORT, SPINE, 0.0)
    assert run(c, timeline((SPINE, 5.0, 10.0, 95.0))) == []
    events = run(c, timeline((NEW, 100.0, 10.0, 120.0)))
    assert events == [(120.0, NdpEvent(PORT, PeerChange.CHANGED, NEW, SPINE))]
    # the old address again at once (an alternating neighbor): not before the interval
    events = run(c, timeline((SPINE, 121.0, 1.0, 200.0)))
    assert events[0][0] >= 120.0 + c.min_change_interval_s
    assert c.counters[NdpIgnored.CHANGE_RATE_LIMITED] > 0
