"""The session's steady-state shortcuts (:meth:`Session.rx_repeat`, :meth:`Session.tx_periodic`)
in virtual time: driven the way the engine loop drives them, two sessions send exactly the same
bytes at exactly the same times, change state at the same instants and end with the same
counters as two sessions driven through :meth:`Session.on_packet` / :meth:`Session.on_timer`
only, through bring-up, Polls, a parameter change, a cut and its recovery, AdminDown and
authentication; and the shortcuts do carry the steady state."""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable
from dataclasses import replace

from bfd import packet
from bfd.packet import AuthType, ControlPacket, State
from bfd.session import AuthConfig, Effect, Session, SessionParams, StateChange, Transmit

FAST = SessionParams(desired_min_tx=10_000, required_min_rx=10_000, detect_mult=3)
#: (time, side, action) applied to the session on ``side`` at ``time``
Script = list[tuple[float, str, Callable[[Session, float], list[Effect]]]]


class Pair:
    """Two sessions over a lossless link with a fixed delay. ``fast``: receive and fire timers
    the way the engine loop does (a repeat of the last accepted bytes goes to ``rx_repeat``
    first, a due timer to ``tx_periodic`` first); otherwise through the full paths only."""

    def __init__(self, fast: bool, params: SessionParams = FAST, seed: int = 7) -> None:
        self.fast = fast
        self.now = 0.0
        self.s = {
            "a": Session(11, params, random.Random(seed), 0.0),
            "b": Session(22, params, random.Random(seed + 1), 0.0),
        }
        self.q: list[tuple[float, int, str, bytes]] = []
        self.n = itertools.count()
        self.cut = False
        #: what each side sent and when, and its state changes
        self.sent: dict[str, list[tuple[float, bytes]]] = {"a": [], "b": []}
        self.changes: dict[str, list[tuple[float, StateChange]]] = {"a": [], "b": []}
        self.last: dict[str, tuple[bytes, ControlPacket] | None] = {"a": None, "b": None}
        self.shortcuts = {"rx_repeat": 0, "tx_periodic": 0, "on_packet": 0, "on_timer": 0}

    def _effects(self, side: str, effects: list[Effect]) -> None:
        for e in effects:
            if isinstance(e, Transmit):
                self._send(side, e.data)
            else:
                self.changes[side].append((self.now, e))

    def _send(self, side: str, data: bytes) -> None:
        self.sent[side].append((self.now, data))
        if not self.cut:
            other = "b" if side == "a" else "a"
            heapq.heappush(self.q, (self.now + 0.0002, next(self.n), other, data))

    def _receive(self, side: str, data: bytes) -> None:
        sess = self.s[side]
        last = self.last[side]
        if self.fast and last is not None and last[0] == data:
            if sess.rx_repeat(last[1], self.now):
                self.shortcuts["rx_repeat"] += 1
                return
            pkt = last[1]
        else:
            pkt = packet.decode(data)
        self.last[side] = (data, pkt)
        self.shortcuts["on_packet"] += 1
        self._effects(side, sess.on_packet(pkt, self.now))

    def _timer(self, side: str) -> None:
        sess = self.s[side]
        if self.fast:
            data = sess.tx_periodic(self.now)
            if data is not None:
                self.shortcuts["tx_periodic"] += 1
                self._send(side, data)
                return
        self.shortcuts["on_timer"] += 1
        self._effects(side, sess.on_timer(self.now))

    def run(self, until: float, script: Script | None = None) -> None:
        todo = sorted(script or [], key=lambda x: x[0])
        while True:
            cands: list[tuple[float, int, str]] = []
            if self.q:
                cands.append((self.q[0][0], 0, "q"))
            if todo:
                cands.append((todo[0][0], 1, "script"))
            for side in ("a", "b"):
                d = self.s[side].next_deadline()
                if d is not None:
                    cands.append((d, 2 if side == "a" else 3, side))
            t, _, what = min(cands)
            if t > until:
                self.now = until
                return
            self.now = max(self.now, t)
            if what == "q":
                _, _, dst, data = heapq.heappop(self.q)
                self._receive(dst, data)
            elif what == "script":
                _, side, action = todo.pop(0)
                self._effects(side, action(self.s[side], self.now))
            else:
                self._timer(what)


def _same(script: Script, until: float, params: SessionParams = FAST) -> Pair:
    """Run ``script`` both ways; assert identical traffic, changes and counters; return the
    fast run."""
    slow, fast = Pair(False, params), Pair(True, params)
    slow.run(until, script)
    fast.run(until, script)
    for side in ("a", "b"):
        assert fast.sent[side] == slow.sent[side], side
        assert fast.changes[side] == slow.changes[side], side
        assert fast.s[side].snapshot(until) == slow.s[side].snapshot(until), side
        assert fast.s[side].next_deadline() == slow.s[side].next_deadline(), side
    return fast


def _cut(on: bool) -> Callable[[Session, float], list[Effect]]:
    def act(s: Session, now: float) -> list[Effect]:
        PAIRS[-1].cut = on
        return []

    return act


PAIRS: list[Pair] = []


def test_steady_state_goes_through_the_shortcuts() -> None:
    fast = _same([], 3.0)
    n = fast.shortcuts
    # after bring-up (about 2 s of slow packets and a Poll) every packet is a repeat
    assert n["rx_repeat"] > 150, n
    assert n["tx_periodic"] > 150, n
    assert n["rx_repeat"] > 5 * n["on_packet"], n
    assert fast.s["a"].state == State.UP and fast.s["b"].state == State.UP


def test_a_poll_and_a_parameter_change_give_the_same_traffic() -> None:
    slower = replace(FAST, desired_min_tx=20_000, required_min_rx=20_000)
    script: Script = [
        (3.0, "a", lambda s, now: s.update(slower, now)),
        (4.0, "b", lambda s, now: s.update(replace(FAST, detect_mult=5), now)),
        (5.0, "a", lambda s, now: s.update(FAST, now)),
    ]
    fast = _same(script, 6.0)
    assert fast.s["a"].detect_time == 5 * 0.010  # b's new multiplier, after its Poll
    assert fast.shortcuts["tx_periodic"] > 100


def test_admin_down_and_up_give_the_same_traffic() -> None:
    script: Script = [
        (3.0, "a", lambda s, now: s.admin_down(now)),
        (3.5, "a", lambda s, now: s.admin_up(now)),
    ]
    fast = _same(script, 7.0)
    assert [c.new for _, c in fast.changes["b"]][-3:] == [State.DOWN, State.INIT, State.UP]


def test_a_cut_times_out_at_the_same_instant_and_recovers_the_same() -> None:
    for fast_mode in (False, True):
        p = Pair(fast_mode)
        PAIRS.append(p)
        p.run(8.0, [(3.0, "a", _cut(True)), (3.2, "a", _cut(False))])
    slow, fast = PAIRS[-2], PAIRS[-1]
    for side in ("a", "b"):
        assert fast.sent[side] == slow.sent[side]
        assert fast.changes[side] == slow.changes[side]
    downs = [(t, c.reason) for t, c in fast.changes["a"] if c.new == State.DOWN]
    assert len(downs) == 1 and downs[0][1] == "detection_timeout"
    assert fast.s["a"].state == State.UP


def test_authentication_never_takes_the_shortcuts() -> None:
    auth = AuthConfig(AuthType.METICULOUS_KEYED_SHA1, 1, b"secret")
    fast = _same([], 4.0, replace(FAST, auth=auth))
    assert fast.shortcuts["rx_repeat"] == fast.shortcuts["tx_periodic"] == 0
    simple = AuthConfig(AuthType.SIMPLE_PASSWORD, 1, b"pw")
    fast = _same([], 4.0, replace(FAST, auth=simple))
    assert fast.shortcuts["rx_repeat"] == fast.shortcuts["tx_periodic"] == 0


def test_a_repeated_poll_is_answered_every_time() -> None:
    """A Poll that repeats byte for byte is not a steady state: each gets its Final."""
    fast = Pair(True)
    fast.run(3.0)
    b = fast.s["b"]
    poll = packet.decode(fast.sent["a"][-1][1])
    poll = replace(poll, poll=True)
    finals = 0
    for i in range(3):
        effects = [] if b.rx_repeat(poll, 3.0 + i * 0.001) else b.on_packet(poll, 3.0 + i * 0.001)
        finals += sum(1 for e in effects if isinstance(e, Transmit) and packet.decode(e.data).final)
    assert finals == 3


def test_after_a_detection_timeout_a_repeat_is_processed_in_full() -> None:
    """The timeout resets the remote discriminator (§6.8.1): the next packet, even with the
    same bytes as before, must set it again and move the state machine."""
    fast = Pair(True)
    fast.run(3.0)
    a = fast.s["a"]
    last = fast.last["a"]
    assert last is not None
    det = a.detect_at
    assert det is not None
    assert [type(e) for e in a.on_timer(det + 0.001)][:1] == [StateChange]
    assert a.remote_discr == 0
    assert not a.rx_repeat(last[1], det + 0.002)
    a.on_packet(last[1], det + 0.002)
    assert a.remote_discr == 22 and a.state == State.DOWN


def test_a_timeout_without_a_transition_still_ends_the_shortcut() -> None:
    """Down, hearing a peer that says Up (no transition, §6.2): the detection timeout resets
    the remote discriminator without a state change, and the same packet again restores it."""
    s = Session(11, FAST, random.Random(1), 0.0)
    heard = ControlPacket(State.UP, my_discriminator=22, your_discriminator=11)
    assert s.on_packet(heard, 0.0) == []
    assert s.rx_repeat(heard, 0.5)  # a repeat: the shortcut
    det = s.detect_at
    assert det is not None
    assert not [e for e in s.on_timer(det) if isinstance(e, StateChange)]
    assert s.state == State.DOWN and s.remote_discr == 0
    assert not s.rx_repeat(heard, det + 0.1)
    s.on_packet(heard, det + 0.1)
    assert s.remote_discr == 22
