"""BFD session core in virtual time. Each test names the RFC 5880 clause it pins."""

from __future__ import annotations

import heapq
import itertools
import random
from dataclasses import replace

import pytest

from bfd import packet
from bfd.packet import AuthType, ControlPacket, Diag, State
from bfd.session import (
    TRANSITIONS,
    TX_EARLY,
    AuthConfig,
    Effect,
    Event,
    Session,
    SessionParams,
    StateChange,
    Transmit,
)

FAST = SessionParams(desired_min_tx=50_000, required_min_rx=50_000, detect_mult=3)


class Wire:
    """Two sessions joined by a lossless link with a fixed one-way delay, in virtual time."""

    def __init__(
        self,
        pa: SessionParams = FAST,
        pb: SessionParams = FAST,
        delay: float = 0.001,
        start_b: float = 0.0,
        seed: int = 1,
    ) -> None:
        self.now = 0.0
        self.delay = delay
        self.a = Session(1, pa, random.Random(seed), 0.0)
        self.b: Session | None = None
        self.b_params, self.start_b, self.seed = pb, start_b, seed
        self.cut = False
        self.q: list[tuple[float, int, str, bytes]] = []
        self._n = itertools.count()
        self.events: dict[str, list[tuple[float, StateChange]]] = {"a": [], "b": []}
        self.sent: dict[str, list[tuple[float, ControlPacket]]] = {"a": [], "b": []}
        if start_b == 0.0:
            self._start_b()

    def _start_b(self) -> None:
        self.b = Session(2, self.b_params, random.Random(self.seed + 1), self.now)

    def sess(self, name: str) -> Session:
        s = self.a if name == "a" else self.b
        assert s is not None
        return s

    def handle(self, name: str, effects: list[Effect]) -> None:
        other = "b" if name == "a" else "a"
        for e in effects:
            if isinstance(e, Transmit):
                self.sent[name].append((self.now, packet.decode(e.data)))
                if not self.cut:
                    heapq.heappush(self.q, (self.now + self.delay, next(self._n), other, e.data))
            else:
                self.events[name].append((self.now, e))

    def run(self, until: float) -> None:
        while True:
            cands = [(t, "q") for t, *_ in self.q[:1]]
            if self.b is None:
                cands.append((self.start_b, "start"))
            for name in ("a", "b"):
                s = self.a if name == "a" else self.b
                if s is not None and (d := s.next_deadline()) is not None:
                    cands.append((d, name))
            if not cands:
                self.now = until
                return
            t, what = min(cands)
            if t > until:
                self.now = until
                return
            self.now = max(self.now, t)
            if what == "q":
                _, _, dst, data = heapq.heappop(self.q)
                s = self.a if dst == "a" else self.b
                if s is not None:
                    self.handle(dst, s.on_packet(packet.decode(data), self.now))
            elif what == "start":
                self._start_b()
            else:
                self.handle(what, self.sess(what).on_timer(self.now))


def up_pair(**kw: object) -> Wire:
    w = Wire(**kw)  # type: ignore[arg-type]
    w.run(5.0)
    assert w.a.state == State.UP and w.sess("b").state == State.UP
    return w


# --------------------------------------------------------------------------- §6.2 table

#: RFC 5880 §6.2 diagram written out independently of bfd.session.TRANSITIONS.
EXPECTED = {
    State.DOWN: {"AdminDown": None, "Down": "Init", "Init": "Up", "Up": None, "timeout": None},
    State.INIT: {"AdminDown": "Down", "Down": None, "Init": "Up", "Up": "Up", "timeout": "Down"},
    State.UP: {"AdminDown": "Down", "Down": "Down", "Init": None, "Up": None, "timeout": "Down"},
    State.ADMIN_DOWN: dict.fromkeys(["AdminDown", "Down", "Init", "Up", "timeout"]),
}
NAMES = {"AdminDown": State.ADMIN_DOWN, "Down": State.DOWN, "Init": State.INIT, "Up": State.UP}


#: the peer's state in a packet at t = 0 that leaves (or brings) a Down session in each state
_VIA = {
    State.DOWN: State.ADMIN_DOWN,
    State.INIT: State.DOWN,
    State.UP: State.INIT,
    State.ADMIN_DOWN: State.DOWN,
}


def _in_state(state: State) -> Session:
    """A session in ``state`` whose peer (discriminator 9, Detect Mult 3, 50 ms) was last heard
    at t = 0, reached through the public inputs only."""
    s = Session(1, FAST, random.Random(0), 0.0)
    if state == State.ADMIN_DOWN:
        s.admin_down(0.0)
    heard = ControlPacket(
        _VIA[state], detect_mult=3, my_discriminator=9, your_discriminator=1, desired_min_tx=50_000
    )
    s.on_packet(heard, 0.0)
    assert (s.state, s.remote_discr, s.remote_detect_mult) == (state, 9, 3)
    assert s.remote_desired_tx == 50_000 and s.last_rx == 0.0 and s.detect_at == 0.15
    return s


@pytest.mark.parametrize("local", list(State))
@pytest.mark.parametrize("event", ["AdminDown", "Down", "Init", "Up", "timeout"])
def test_state_machine_exhaustive(local: State, event: str) -> None:
    """§6.2 + §6.8.6 (AdminDown discards) + §6.8.4 (timeout only matters in Init/Up)."""
    s = _in_state(local)
    if event == "timeout":
        eff = s.on_timer(1.0)
    else:
        pkt = ControlPacket(NAMES[event], my_discriminator=9, your_discriminator=1)
        eff = s.on_packet(pkt, 0.5)
    changes = [e for e in eff if isinstance(e, StateChange)]
    want = EXPECTED[local][event]
    if want is None:
        assert s.state == local and not changes
    else:
        assert s.state == NAMES[want]
        assert [(c.old, c.new) for c in changes] == [(local, NAMES[want])]
        diag = changes[0].diag
        if want == "Down":
            want_diag = (
                Diag.CONTROL_DETECTION_TIME_EXPIRED
                if event == "timeout"
                else Diag.NEIGHBOR_SIGNALED_SESSION_DOWN
            )
            assert diag == want_diag == s.local_diag
    # and the data table says the same thing
    ev = Event.TIMEOUT if event == "timeout" else Event(NAMES[event])
    got = TRANSITIONS.get((local, ev))
    assert (got[0] if got else None) == (NAMES[want] if want else None) or (
        local == State.ADMIN_DOWN and got is None
    )


# --------------------------------------------------------------------------- bring-up, timers


def test_bring_up_and_poll_to_fast_timers() -> None:
    """§6.2 three-way handshake; §6.8.3 1 s while not Up, then a Poll to the configured rate."""
    w = Wire()
    w.run(0.01)
    first = w.sent["a"][0][1]
    assert first.state == State.DOWN and first.your_discriminator == 0
    assert first.desired_min_tx == 1_000_000  # §6.8.3
    assert first.required_min_rx == 50_000
    w.run(3.0)
    assert w.a.state == w.sess("b").state == State.UP
    ups = [e for _, e in w.events["a"]]
    assert [(e.old, e.new) for e in ups][-1][1] == State.UP
    assert not w.a.polling and not w.sess("b").polling  # the poll completed
    assert w.a.tx_interval == pytest.approx(0.05)
    assert w.a.detect_time == pytest.approx(0.15)
    polls = [p for _, p in w.sent["a"] if p.poll]
    finals = [p for _, p in w.sent["b"] if p.final]
    assert polls and finals and all(p.desired_min_tx == 50_000 for p in polls)
    assert not any(p.poll and p.final for _, p in w.sent["a"] + w.sent["b"])


def test_up_from_either_side_starting_first() -> None:
    """§6.2: the session comes up whichever side starts first."""
    w = Wire(start_b=2.5)
    w.run(6.0)
    assert w.a.state == w.sess("b").state == State.UP


def test_jitter_bounds() -> None:
    """§6.8.7: periodic packets at 75-100 % of the interval; 75-90 % when DetectMult = 1."""
    for mult, hi in ((3, 1.0), (1, 0.9)):
        p = replace(FAST, detect_mult=mult)
        w = up_pair(pa=p, pb=p)
        start = w.now
        w.run(start + 10.0)
        times = [t for t, pk in w.sent["a"] if t > start and not pk.final]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert len(gaps) > 100
        # drawn TX_EARLY inside the bounds: the engine may send that much early (tx_early)
        assert min(gaps) >= 0.05 * (0.75 + TX_EARLY) - 1e-9
        assert max(gaps) <= 0.05 * (hi - TX_EARLY) + 1e-9
        assert max(gaps) > 0.05 * (hi - TX_EARLY - 0.03)  # really spread


def test_transmit_interval_is_max_of_local_tx_and_remote_rx() -> None:
    """§6.8.7: interval = max(bfd.DesiredMinTxInterval, bfd.RemoteMinRxInterval)."""
    w = up_pair(pb=replace(FAST, required_min_rx=200_000))
    assert w.a.tx_interval == pytest.approx(0.2)
    assert w.sess("b").tx_interval == pytest.approx(0.05)


def test_detection_time_uses_remote_mult_and_max() -> None:
    """§6.8.4: remote DetectMult x max(local RequiredMinRx, remote DesiredMinTx)."""
    w = up_pair(pb=replace(FAST, detect_mult=5, desired_min_tx=100_000))
    assert w.a.detect_time == pytest.approx(5 * 0.1)
    assert w.sess("b").detect_time == pytest.approx(3 * 0.05)


def test_detection_timeout_goes_down_and_resets_remote_discr() -> None:
    """§6.8.4 expiry -> Down, diag 1; §6.8.1 bfd.RemoteDiscr := 0."""
    w = up_pair()
    w.run(w.now + 1.0)
    w.cut = True
    cut_at = w.now
    last_rx_a = max(t for t, _ in w.sent["b"]) + w.delay
    w.run(cut_at + 1.0)
    (t, ev) = next((t, e) for t, e in w.events["a"] if t > cut_at)
    assert (ev.old, ev.new, ev.diag, ev.reason) == (
        State.UP,
        State.DOWN,
        Diag.CONTROL_DETECTION_TIME_EXPIRED,
        "detection_timeout",
    )
    assert ev.failure
    assert t == pytest.approx(last_rx_a + 0.15)
    assert w.a.remote_discr == 0
    assert w.a.flaps == 1 and w.a.last_down_reason == "detection_timeout"
    # after going down: slow timers again (§6.8.3), Your Discriminator 0
    pk = w.sent["a"][-1][1]
    assert pk.state == State.DOWN and pk.desired_min_tx == 1_000_000
    assert pk.your_discriminator == 0


def test_recovers_after_cut_heals() -> None:
    w = up_pair()
    w.cut = True
    w.run(w.now + 1.0)
    assert w.a.state == State.DOWN
    w.cut = False
    w.run(w.now + 5.0)
    assert w.a.state == w.sess("b").state == State.UP


# --------------------------------------------------------------------------- Poll / Final


def test_slower_tx_applies_only_after_final() -> None:
    """§6.8.3: an increased DesiredMinTx keeps the old rate until the Poll completes."""
    w = up_pair(delay=0.3)  # slow link: the Final needs 0.6 s
    t0 = w.now
    eff = w.a.update(replace(FAST, desired_min_tx=200_000), t0)
    w.handle("a", eff)
    assert w.a.polling
    assert isinstance(eff[0], Transmit) and packet.decode(eff[0].data).poll
    assert w.a.tx_interval == pytest.approx(0.05)  # old rate while polling
    w.run(t0 + 0.5)
    sent = [p for t, p in w.sent["a"] if t > t0]
    assert len(sent) > 5 and all(p.poll and p.desired_min_tx == 200_000 for p in sent)
    w.run(t0 + 0.7)
    assert not w.a.polling
    assert w.a.tx_interval == pytest.approx(0.2)
    assert w.sess("b").detect_time == pytest.approx(0.6)


def test_faster_tx_applies_at_once() -> None:
    """§6.8.3: a decreased DesiredMinTx may apply at once (only the increase is held back)."""
    w = up_pair(pa=replace(FAST, desired_min_tx=200_000))
    eff = w.a.update(FAST, w.now)
    assert w.a.polling and w.a.tx_interval == pytest.approx(0.05)
    assert packet.decode(eff[0].data).poll  # type: ignore[union-attr]


def test_lower_rx_keeps_old_detection_time_until_final() -> None:
    """§6.8.3: a reduced RequiredMinRx is not used for the detection time before the Final."""
    slow = replace(FAST, desired_min_tx=10_000, required_min_rx=100_000)
    w = up_pair(pa=slow, pb=replace(FAST, desired_min_tx=10_000), delay=0.2)
    assert w.a.detect_time == pytest.approx(0.3)
    t0 = w.now
    w.handle("a", w.a.update(replace(slow, required_min_rx=20_000), t0))
    assert w.a.detect_time == pytest.approx(0.3)
    w.run(t0 + 0.5)
    assert not w.a.polling
    assert w.a.detect_time == pytest.approx(0.06)


def test_poll_answered_with_final_at_once() -> None:
    """§6.8.7: P is answered with F (and P clear) at once, whatever the timers or state."""
    s = _in_state(State.UP)
    s.remote_min_rx = 0  # even when periodic transmission is off
    eff = s.on_packet(
        ControlPacket(State.UP, my_discriminator=9, your_discriminator=1, poll=True), 0.1
    )
    tx = [packet.decode(e.data) for e in eff if isinstance(e, Transmit)]
    assert len(tx) == 1 and tx[0].final and not tx[0].poll


def test_no_periodic_tx_when_remote_min_rx_zero() -> None:
    """§6.8.7: RemoteMinRxInterval 0 -> no periodic packets."""
    s = _in_state(State.UP)
    pkt = ControlPacket(
        State.UP, my_discriminator=9, your_discriminator=1, desired_min_tx=50_000, required_min_rx=0
    )
    assert s.on_packet(pkt, 0.1) == []
    assert s.next_deadline() == pytest.approx(0.1 + 0.15)  # only the detection timer
    assert [e for e in s.on_timer(0.2) if isinstance(e, Transmit)] == []


def test_detect_mult_change_needs_no_poll() -> None:
    """§6.8.3 lists only the two intervals; Detect Mult goes out in the next packet."""
    w = up_pair()
    assert w.a.update(replace(FAST, detect_mult=5), w.now) == []
    assert not w.a.polling
    w.run(w.now + 0.2)
    assert w.sess("b").detect_time == pytest.approx(0.25)


# --------------------------------------------------------------------------- roles and admin


def test_passive_sends_nothing_until_heard() -> None:
    """§6.1/§6.8.7: passive role: no packets while bfd.RemoteDiscr is 0."""
    w = Wire(pa=replace(FAST, passive=True), start_b=1.0)
    w.run(0.99)
    assert w.sent["a"] == []
    assert w.a.next_deadline() is None
    w.run(5.0)
    assert w.a.state == State.UP


def test_two_passive_sides_stay_silent() -> None:
    p = replace(FAST, passive=True)
    w = Wire(pa=p, pb=p)
    w.run(5.0)
    assert w.sent == {"a": [], "b": []}


def test_admin_down_sends_diag_7_and_peer_sees_no_failure() -> None:
    """§6.8.16: AdminDown with diag 7; RFC 5882 §3.2: a peer's AdminDown is not a failure."""
    w = up_pair()
    t0 = w.now
    w.handle("a", w.a.admin_down(t0))
    w.run(t0 + 0.1)
    assert w.a.state == State.ADMIN_DOWN
    ev = w.events["a"][-1][1]
    assert (ev.new, ev.diag, ev.reason, ev.failure) == (
        State.ADMIN_DOWN,
        Diag.ADMINISTRATIVELY_DOWN,
        "admin_down",
        False,
    )
    pk = [p for t, p in w.sent["a"] if t >= t0]
    assert pk[0].state == State.ADMIN_DOWN and pk[0].diag == Diag.ADMINISTRATIVELY_DOWN
    b = w.sess("b")
    evb = w.events["b"][-1][1]
    assert b.state == State.DOWN
    assert (evb.old, evb.new, evb.diag, evb.reason) == (
        State.UP,
        State.DOWN,
        Diag.NEIGHBOR_SIGNALED_SESSION_DOWN,
        "neighbor_admin_down",
    )
    assert not evb.failure
    w.run(t0 + 5.0)  # AdminDown is left only by local action
    assert w.a.state == State.ADMIN_DOWN and b.state == State.DOWN
    assert not [e for t, e in w.events["b"] if t > t0 + 0.1]  # b stays Down without flapping
    w.handle("a", w.a.admin_up(w.now))
    w.run(w.now + 5.0)
    assert w.a.state == b.state == State.UP


def test_neighbor_down_is_a_failure() -> None:
    """§6.2: Up + received Down -> Down, diag 3."""
    s = _in_state(State.UP)
    eff = s.on_packet(ControlPacket(State.DOWN, my_discriminator=9), 0.1)
    ch = next(e for e in eff if isinstance(e, StateChange))
    assert (ch.new, ch.diag, ch.reason, ch.failure) == (
        State.DOWN,
        Diag.NEIGHBOR_SIGNALED_SESSION_DOWN,
        "neighbor_down",
        True,
    )


def test_c_bit_advertised_and_remote_c_bit_kept() -> None:
    """§4.1 C bit from configuration; the peer's is kept for RFC 5882 graceful restart."""
    w = up_pair(pa=replace(FAST, cpi=True))
    assert all(p.cpi for _, p in w.sent["a"]) and not any(p.cpi for _, p in w.sent["b"])
    assert w.sess("b").remote_cpi and not w.a.remote_cpi


# --------------------------------------------------------------------------- authentication

KEYED = [
    AuthType.KEYED_MD5,
    AuthType.METICULOUS_KEYED_MD5,
    AuthType.KEYED_SHA1,
    AuthType.METICULOUS_KEYED_SHA1,
]


@pytest.mark.parametrize("atype", [AuthType.SIMPLE_PASSWORD, *KEYED])
def test_auth_comes_up_and_wrong_key_does_not(atype: AuthType) -> None:
    """§6.7.2-6.7.4: both sides with the same key come up; a wrong key never does."""
    good = replace(FAST, auth=AuthConfig(atype, 3, b"s3cret"))
    w = up_pair(pa=good, pb=good)
    assert w.a.drops == {}
    assert all(p.auth is not None and p.auth.type == atype for _, p in w.sent["a"])
    bad = replace(FAST, auth=AuthConfig(atype, 3, b"wrong"))
    w = Wire(pa=good, pb=bad)
    w.run(5.0)
    assert w.a.state == State.DOWN and w.sess("b").state == State.DOWN
    assert w.a.drops.get("auth_failed", 0) > 0


def test_auth_a_bit_must_match_configuration() -> None:
    """§6.8.6: A bit set without auth configured, or clear with it, -> discard."""
    auth = replace(FAST, auth=AuthConfig(AuthType.KEYED_SHA1, 1, b"k"))
    w = Wire(pa=auth, pb=FAST)
    w.run(3.0)
    assert w.a.drops.get("auth_missing", 0) > 0
    assert w.sess("b").drops.get("auth_unexpected", 0) > 0
    assert w.a.state == State.DOWN
    w = Wire(pa=auth, pb=replace(FAST, auth=AuthConfig(AuthType.KEYED_SHA1, 2, b"k")))
    w.run(3.0)
    assert w.a.drops.get("auth_key_id_mismatch", 0) > 0
    w = Wire(pa=auth, pb=replace(FAST, auth=AuthConfig(AuthType.KEYED_MD5, 1, b"k")))
    w.run(3.0)
    assert w.a.drops.get("auth_type_mismatch", 0) > 0


def _signed(atype: AuthType, seq: int, key: bytes = b"k") -> ControlPacket:
    p = ControlPacket(State.DOWN, my_discriminator=9, auth=packet.Auth(atype, 1, seq))
    return packet.sign(p, key)


@pytest.mark.parametrize("atype", KEYED)
def test_sequence_window(atype: AuthType) -> None:
    """§6.7.3/6.7.4: keyed accepts [RcvAuthSeq, +3*DetectMult]; meticulous needs > RcvAuthSeq."""
    s = Session(1, replace(FAST, auth=AuthConfig(atype, 1, b"k")), random.Random(0), 0.0)
    s.on_packet(_signed(atype, 2**32 - 2), 0.0)  # learn the sequence, near the wrap
    assert s.auth_seq_known and s.packets_in == 1
    s.on_packet(_signed(atype, 2**32 - 2), 0.01)  # replay
    if atype.meticulous:
        assert s.drops == {"auth_sequence": 1}
    else:
        assert s.drops == {} and s.packets_in == 2
    s.drops.clear()
    s.on_packet(_signed(atype, 5), 0.02)  # wraps: (2**32-2) + 7 = 5 <= + 3*3
    assert s.drops == {}
    s.on_packet(_signed(atype, 5 + 10), 0.03)  # beyond 3 * DetectMult
    assert s.drops == {"auth_sequence": 1}
    s.on_packet(_signed(atype, 6, key=b"x"), 0.04)
    assert s.drops == {"auth_sequence": 1, "auth_failed": 1}


def _window(atype: AuthType, mult: int = 3) -> set[int]:
    """RFC 5880 §6.7.3/6.7.4 written out: the offsets past the last sequence that are accepted."""
    return set(range(1 if atype.meticulous else 0, 3 * mult + 1))


@pytest.mark.parametrize("atype", KEYED)
@pytest.mark.parametrize("last", [0, 1, 2**31, 2**32 - 10, 2**32 - 2, 2**32 - 1])
def test_sequence_window_is_mod_2_32(atype: AuthType, last: int) -> None:
    """§6.7.3/6.7.4: the window is [RcvAuthSeq (+1 meticulous), RcvAuthSeq + 3*DetectMult] in
    a circular 32-bit space; every offset around it, and far away, is checked at the wrap."""
    offsets = [*range(-3, 3 * 3 + 4), 2**31, 2**32 - 1, 2**32 - 9, 1000]
    for off in offsets:
        s = Session(1, replace(FAST, auth=AuthConfig(atype, 1, b"k")), random.Random(0), 0.0)
        s.on_packet(_signed(atype, last), 0.0)
        assert s.auth_seq_known and s.rcv_auth_seq == last
        s.on_packet(_signed(atype, (last + off) % 2**32), 0.01)
        accepted = s.packets_in == 2
        assert accepted == (off % 2**32 in _window(atype)), (hex(last), off)
        assert s.drops == ({} if accepted else {"auth_sequence": 1})


@pytest.mark.parametrize("atype", KEYED)
def test_replay_at_the_wrap_does_not_lock_out_the_peer(atype: AuthType) -> None:
    """A captured packet replayed while the last sequence is 0xFFFFFFFF is discarded; it does
    not move RcvAuthSeq back, so the genuine peer's next packets are still accepted."""
    s = Session(1, replace(FAST, auth=AuthConfig(atype, 1, b"k")), random.Random(0), 0.0)
    captured = _signed(atype, 2**32 - 1000)
    s.on_packet(captured, 0.0)
    for i, seq in enumerate(range(2**32 - 999, 2**32)):  # the genuine peer up to the wrap
        s.on_packet(_signed(atype, seq), 0.001 * i)
    assert s.rcv_auth_seq == 2**32 - 1 and s.drops == {}
    s.on_packet(captured, 1.0)  # the attacker replays
    assert s.drops == {"auth_sequence": 1} and s.rcv_auth_seq == 2**32 - 1
    for seq in (0, 1, 2):  # the genuine peer goes on past the wrap
        s.on_packet(_signed(atype, seq), 1.01 + seq * 0.01)
    assert s.drops == {"auth_sequence": 1} and s.rcv_auth_seq == 2


def _keyed(atype: AuthType, seq: int, key_id: int, key: bytes) -> ControlPacket:
    p = ControlPacket(State.DOWN, my_discriminator=9, auth=packet.Auth(atype, key_id, seq))
    return packet.sign(p, key)


@pytest.mark.parametrize("atype", [AuthType.SIMPLE_PASSWORD, *KEYED])
def test_key_rollover_accepts_both_keys_by_key_id(atype: AuthType) -> None:
    """During a rollover a second key is accepted: the Key ID in the packet selects the key;
    we transmit with the designated one only."""
    cfg = AuthConfig(atype, 2, b"new", accept=((1, b"old"),))
    s = Session(1, replace(FAST, auth=cfg), random.Random(0), 0.0)

    def pkt(seq: int, key_id: int, key: bytes) -> ControlPacket:
        if atype == AuthType.SIMPLE_PASSWORD:
            return ControlPacket(
                State.DOWN, my_discriminator=9, auth=packet.Auth(atype, key_id, password=key)
            )
        return _keyed(atype, seq, key_id, key)

    first = s.on_packet(pkt(10, 1, b"old"), 0.0)
    s.on_packet(pkt(11, 2, b"new"), 0.01)
    assert s.packets_in == 2 and s.drops == {}
    s.on_packet(pkt(12, 1, b"new"), 0.02)  # key id 1 selects the old key
    s.on_packet(pkt(12, 3, b"new"), 0.03)  # a key id that is not configured
    assert s.drops == {"auth_failed": 1, "auth_key_id_mismatch": 1}
    [tx] = [e for e in first if isinstance(e, Transmit)]  # Down -> Init, answered at once
    sent = packet.decode(tx.data)
    assert sent.auth is not None and sent.auth.key_id == 2 and packet.verify(sent, b"new")


def test_key_rollover_between_two_peers_without_a_flap() -> None:
    """The rollover runbook: both sides accept the new key, then switch their transmit key one
    at a time, then drop the old one. The session stays Up throughout, nothing is dropped."""
    atype = AuthType.METICULOUS_KEYED_SHA1
    old = AuthConfig(atype, 1, b"old")
    both = AuthConfig(atype, 1, b"old", accept=((2, b"new"),))
    switched = AuthConfig(atype, 2, b"new", accept=((1, b"old"),))
    new = AuthConfig(atype, 2, b"new")
    w = up_pair(pa=replace(FAST, auth=old), pb=replace(FAST, auth=old))
    steps = [(both, old), (both, both), (switched, both), (switched, switched), (new, switched)]
    for ca, cb in [*steps, (new, new)]:
        w.handle("a", w.a.update(replace(FAST, auth=ca), w.now))
        w.handle("b", w.sess("b").update(replace(FAST, auth=cb), w.now))
        w.run(w.now + 1.0)
        assert w.a.state == State.UP and w.sess("b").state == State.UP
    assert w.a.drops == {} and w.sess("b").drops == {} and w.a.flaps == 0
    assert w.sent["a"][-1][1].auth is not None and w.sent["a"][-1][1].auth.key_id == 2


def test_adding_a_rollover_key_keeps_the_sequence_known() -> None:
    """A reload that only adds or switches keys keeps bfd.AuthSeqKnown: otherwise every key
    change would open a window in which a replayed packet is accepted."""
    atype = AuthType.METICULOUS_KEYED_SHA1
    s = Session(1, replace(FAST, auth=AuthConfig(atype, 1, b"k")), random.Random(0), 0.0)
    captured = _signed(atype, 100)
    s.on_packet(captured, 0.0)
    s.on_packet(_signed(atype, 101), 0.01)
    s.update(replace(FAST, auth=AuthConfig(atype, 2, b"n", accept=((1, b"k"),))), 0.02)
    s.on_packet(captured, 0.03)
    assert s.drops == {"auth_sequence": 1} and s.rcv_auth_seq == 101
    s.update(replace(FAST, auth=AuthConfig(AuthType.METICULOUS_KEYED_MD5, 1, b"k")), 0.04)
    assert not s.auth_seq_known  # another type: a new sequence space


def test_rollover_config_validation_and_secrets_hidden() -> None:
    t = AuthType.KEYED_SHA1
    with pytest.raises(ValueError):
        AuthConfig(t, 1, b"a", accept=((1, b"b"),))  # the designated key id twice
    with pytest.raises(ValueError):
        AuthConfig(t, 1, b"a", accept=((2, b"b"), (2, b"c")))
    with pytest.raises(ValueError):
        AuthConfig(AuthType.KEYED_MD5, 1, b"a", accept=((2, b"x" * 17),))
    with pytest.raises(ValueError):
        AuthConfig(t, 1, b"a", accept=((256, b"b"),))
    cfg = AuthConfig(t, 1, b"a", accept=((2, b"hunter2"),))
    assert "hunter2" not in repr(cfg) and cfg.key_for(2) == b"hunter2" and cfg.key_for(3) is None


def test_auth_seq_known_resets_after_twice_detection_time() -> None:
    """§6.8.1: bfd.AuthSeqKnown := 0 after 2 x detection time without packets."""
    atype = AuthType.METICULOUS_KEYED_SHA1
    s = Session(1, replace(FAST, auth=AuthConfig(atype, 1, b"k")), random.Random(0), 0.0)
    s.on_packet(_signed(atype, 1000), 0.0)
    detect = s.detect_time
    s.on_packet(_signed(atype, 10), 2 * detect - 0.01)
    assert s.drops == {"auth_sequence": 1}
    s.on_packet(_signed(atype, 10), 2 * detect + 0.02)
    assert s.drops == {"auth_sequence": 1} and s.rcv_auth_seq == 10


def test_xmit_seq_is_random_and_increments() -> None:
    """§6.8.1 bfd.XmitAuthSeq starts random; meticulous increments on every packet."""
    p = replace(FAST, auth=AuthConfig(AuthType.METICULOUS_KEYED_SHA1, 1, b"k"))
    seqs = []
    for seed in (1, 2):
        s = Session(1, p, random.Random(seed), 0.0)
        a = [packet.decode(e.data).auth for e in s.on_timer(0.0) + s.on_timer(2.0)]
        seqs.append([x.sequence for x in a if x is not None])
    assert seqs[0][1] == (seqs[0][0] + 1) % 2**32
    assert seqs[0][0] != seqs[1][0]


def test_auth_config_validation_and_secret_hidden() -> None:
    with pytest.raises(ValueError):
        AuthConfig(AuthType.KEYED_MD5, 1, b"x" * 17)
    with pytest.raises(ValueError):
        AuthConfig(AuthType.SIMPLE_PASSWORD, 1, b"")
    AuthConfig(AuthType.KEYED_SHA1, 1, b"x" * 20)
    assert "hunter2" not in repr(AuthConfig(AuthType.SIMPLE_PASSWORD, 1, b"hunter2"))


def test_snapshot_keys() -> None:
    w = up_pair()
    snap = w.a.snapshot(w.now)
    assert snap["state"] == "up" and snap["remote_discriminator"] == 2
    assert snap["detect_time_ms"] == pytest.approx(150)
    assert snap["tx_interval_ms"] == pytest.approx(50)
    assert snap["uptime_s"] > 0 and snap["flaps"] == 0
    assert snap["packets_in"] > 0 and snap["packets_out"] > 0
