"""Replays against keyed authentication, in virtual time (RFC 5880 §6.7.3/6.7.4).

Keyed (non-meticulous) MD5/SHA1 accept a packet whose sequence number equals the last one
(bfd.XmitAuthSeq "MAY be incremented"), so one captured packet, replayed, used to hold a dead
session Up for as long as the attacker liked. The session now stops taking a sequence number
that has not advanced for longer than :attr:`Session.stale_sequence_hold` (the detection time,
at least 2 s): the replay is dropped as ``auth_sequence_stale`` and the session times out. A
genuine keyed peer advances at least that often (BIRD: once a second; FRR, VPP and glbd: every
packet) and is never dropped. Meticulous types reject a repeat at once (``auth_sequence``)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

import pytest

from bfd import packet
from bfd.packet import Auth, AuthType, ControlPacket, State
from bfd.session import AuthConfig, Effect, Session, SessionParams, StateChange

FAST = SessionParams(desired_min_tx=50_000, required_min_rx=50_000, detect_mult=3)
KEY = b"k3y"
KEYED = [AuthType.KEYED_MD5, AuthType.KEYED_SHA1]
METICULOUS = [AuthType.METICULOUS_KEYED_MD5, AuthType.METICULOUS_KEYED_SHA1]


def peer_packet(
    atype: AuthType, seq: int, state: State = State.UP, tx_us: int = 50_000, mult: int = 3
) -> ControlPacket:
    """What the peer (discriminator 9) sends to our session (discriminator 1), signed."""
    p = ControlPacket(
        state,
        detect_mult=mult,
        my_discriminator=9,
        your_discriminator=1 if state != State.DOWN else 0,
        desired_min_tx=tx_us,
        required_min_rx=tx_us,
        auth=Auth(atype, 1, seq % 2**32),
    )
    return packet.sign(p, KEY)


@dataclass
class Run:
    """Our session fed a timed packet stream, its timers run in between."""

    s: Session
    changes: list[tuple[float, StateChange]] = field(default_factory=list)

    def feed(self, arrivals: Iterable[tuple[float, ControlPacket]], until: float) -> None:
        for t, pkt in [*arrivals, (until, None)]:
            while (d := self.s.next_deadline()) is not None and d <= t:
                self._note(d, self.s.on_timer(d))
            if pkt is not None:
                self._note(t, self.s.on_packet(pkt, t))

    def _note(self, now: float, effects: list[Effect]) -> None:
        self.changes += [(now, e) for e in effects if isinstance(e, StateChange)]

    def downs(self) -> list[tuple[float, StateChange]]:
        return [(t, c) for t, c in self.changes if c.new == State.DOWN]


def up_session(atype: AuthType, seq0: int = 1000, params: SessionParams = FAST) -> Run:
    """Our session Up with a peer at sequence ``seq0`` (three packets: Down, Init, Up)."""
    r = Run(Session(1, replace(params, auth=AuthConfig(atype, 1, KEY)), random.Random(7), 0.0))
    tx = params.desired_min_tx
    r.feed(
        [
            (0.01, peer_packet(atype, seq0, State.DOWN, tx)),
            (0.02, peer_packet(atype, seq0 + 1, State.INIT, tx)),
            (0.03, peer_packet(atype, seq0 + 2, State.UP, tx)),
        ],
        0.03,
    )
    assert r.s.state == State.UP
    return r


def every(
    start: float, end: float, step: float, jitter: random.Random | None = None
) -> list[float]:
    """Send times from ``start`` to ``end``: every ``step`` s, cut by 0-25 % when jittered
    (RFC 5880 §6.8.7)."""
    out, t = [], start
    while t < end:
        out.append(t)
        t += step * (jitter.uniform(0.75, 1.0) if jitter is not None else 1.0)
    return out


def stream(
    atype: AuthType, times: list[float], seq: Callable[[int, float], int]
) -> list[tuple[float, ControlPacket]]:
    return [(t, peer_packet(atype, seq(i, t))) for i, t in enumerate(times)]


@pytest.mark.parametrize("atype", KEYED)
def test_a_replayed_packet_no_longer_holds_a_dead_session_up(atype: AuthType) -> None:
    """The peer dies at t = 1; an attacker replays its last packet every 40 ms. The replays are
    taken until the sequence number has stood still for the hold (2 s here), then dropped as
    ``auth_sequence_stale``, and the session times out one detection time later."""
    r = up_session(atype)
    genuine = stream(atype, every(0.05, 1.0, 0.05), lambda i, t: 1003 + i)
    last_t, last = genuine[-1]
    r.feed(genuine, 1.0)
    hold = 2.0  # the detection time (150 ms) is shorter: the 2 s minimum
    replays = [(t, last) for t in every(1.0, 10.0, 0.04)]
    r.feed(replays, 10.0)
    [(down_at, change)] = r.downs()
    assert change.reason == "detection_timeout" and change.failure
    # the last replay taken came at most ``hold`` after the sequence was first seen
    assert last_t + hold < down_at <= last_t + hold + r.s.detect_time
    assert r.s.state == State.DOWN and r.s.stale_sequence_hold == hold
    assert r.changes[-1][1] is change  # the replays never brought it back
    # after 2 x detection time without an accepted packet bfd.AuthSeqKnown resets (§6.8.1) and
    # one replay is taken again -- Down does not go Up on a peer's Up -- then 2 s later dropped
    assert r.s.drops.get("auth_sequence_stale", 0) > 10
    assert set(r.s.drops) <= {"auth_sequence_stale"}


@pytest.mark.parametrize("atype", KEYED)
def test_a_genuine_peer_that_increments_once_a_second_stays_up(atype: AuthType) -> None:
    """BIRD's keyed (non-meticulous) sender: its sequence number is its wall clock in seconds,
    so ~20 packets in a row carry the same number. Five minutes, no drop, no flap."""
    r = up_session(atype, seq0=1_700_000_000)
    times = every(0.05, 300.0, 0.05, random.Random(3))
    r.feed(stream(atype, times, lambda i, t: 1_700_000_002 + int(t)), 300.0)
    assert r.s.state == State.UP and r.changes[-1][1].new == State.UP
    assert r.s.drops == {} and r.s.flaps == 0


@pytest.mark.parametrize("atype", KEYED)
def test_a_slow_peer_that_increments_every_third_packet_stays_up(atype: AuthType) -> None:
    """1 s timers, Detect Mult 3 (a 3 s detection time): a peer that advances once per
    detection time's worth of packets is never dropped; the hold grows with the detection
    time."""
    slow = SessionParams(desired_min_tx=1_000_000, required_min_rx=1_000_000, detect_mult=3)
    r = up_session(atype, params=slow)
    times = every(1.0, 120.0, 1.0, random.Random(5))
    pkts = [(t, peer_packet(atype, 1003 + i // 3, tx_us=1_000_000)) for i, t in enumerate(times)]
    r.feed(pkts, 120.0)
    assert r.s.stale_sequence_hold == pytest.approx(3.0)
    assert r.s.state == State.UP and r.s.drops == {} and r.s.flaps == 0


@pytest.mark.parametrize("atype", KEYED)
def test_the_session_comes_back_when_the_peer_does(atype: AuthType) -> None:
    """After the replays took the session Down, the genuine peer (its sequence moved on)
    brings it Up again; the attacker's replays meanwhile change nothing."""
    r = up_session(atype)
    r.feed(stream(atype, every(0.05, 1.0, 0.05), lambda i, t: 1003 + i), 1.0)
    last = r.s.rcv_auth_seq
    r.feed([(t, peer_packet(atype, last)) for t in every(1.0, 5.0, 0.04)], 5.0)
    assert r.s.state == State.DOWN
    back = [
        (5.0, peer_packet(atype, last + 9, State.DOWN)),
        (5.05, peer_packet(atype, last + 10, State.INIT)),
        *stream(atype, every(5.1, 8.0, 0.05), lambda i, t: last + 11 + i),
    ]
    r.feed(back, 8.0)
    assert (r.s.state, r.s.flaps) == (State.UP, 1)


@pytest.mark.parametrize("atype", METICULOUS)
def test_meticulous_rejects_a_repeated_sequence_at_once(atype: AuthType) -> None:
    """§6.7.3/6.7.4: meticulous needs RcvAuthSeq + 1 or more, so the first replay is already
    dropped (``auth_sequence``) and the session times out one detection time after the peer
    died, not after the hold."""
    r = up_session(atype)
    genuine = stream(atype, every(0.05, 1.0, 0.05), lambda i, t: 1003 + i)
    last_t, last = genuine[-1]
    r.feed(genuine, 1.0)
    r.feed([(t, last) for t in every(1.0, 3.0, 0.04)], 3.0)
    [(down_at, change)] = r.downs()
    assert change.reason == "detection_timeout"
    assert down_at == pytest.approx(last_t + r.s.detect_time)
    assert r.s.drops.get("auth_sequence", 0) > 10 and "auth_sequence_stale" not in r.s.drops


def test_two_glbd_sessions_with_keyed_auth_never_drop_each_other() -> None:
    """glbd's own keyed sender increments on every packet (§6.7.4 MAY): a minute of two
    sessions talking, no ``auth_sequence_stale``."""
    atype = AuthType.KEYED_SHA1
    p = replace(FAST, auth=AuthConfig(atype, 1, KEY))
    a = Session(1, p, random.Random(1), 0.0)
    b = Session(2, p, random.Random(2), 0.0)
    now, inflight = 0.0, []  # (arrival, to a?, bytes)
    while now < 60.0:
        for sess, to_a in ((a, False), (b, True)):
            d = sess.next_deadline()
            if d is not None and d <= now:
                for e in sess.on_timer(now):
                    if not isinstance(e, StateChange):
                        inflight.append((now + 0.001, to_a, e.data))
        for item in sorted(x for x in inflight if x[0] <= now):
            inflight.remove(item)
            dst = a if item[1] else b
            for e in dst.on_packet(packet.decode(item[2]), now):
                if not isinstance(e, StateChange):
                    inflight.append((now + 0.001, not item[1], e.data))
        now = round(now + 0.001, 3)
    assert a.state == b.state == State.UP
    assert a.drops == b.drops == {} and a.flaps == b.flaps == 0
