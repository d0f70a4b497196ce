"""Hostile neighbours on the link, in virtual time: forged and bit-flipped sequence numbers and
intervals, replays after expiry and after a session restart, a key rollover, a sender whose
sequence goes back on one of two parallel links, a long-running sender that restarts."""

from __future__ import annotations

import random
from typing import Any

from heartbeat import wire
from heartbeat.receiver import Neighbor, Receiver, ReceiverParams, RemoteUpdate
from heartbeat.sender import Sender, SenderParams, initial_sequence
from heartbeat.wire import Entry, Heartbeat, HmacKey

S1 = wire.node_id("10.0.0.1")
L1, L2 = wire.node_id("10.1.0.1"), wire.node_id("10.1.0.2")
SRC = "192.0.2.1"
KEY = HmacKey(3, b"sixteen byte key")
OLD_KEY, NEW_KEY = HmacKey(1, b"the old secret key"), HmacKey(2, b"the new secret key")
IV = 0.020
HALF = 1 << 31
#: recover_after (3) + hold_multiplier (3): the longest lockout a forged sequence may cause
BOUND = 6


def ents(b1: int = 7, b2: int = 7) -> list[Entry]:
    return [Entry(L1, 11, 100_000, b1), Entry(L2, 12, 100_000, b2)]


def hb(seq: int, interval_us: int = 20_000, e: list[Entry] | None = None) -> Heartbeat:
    return Heartbeat(S1, seq & 0xFFFFFFFF, interval_us, ents() if e is None else e)


def rx(**kw: Any) -> Receiver:
    r = Receiver(ReceiverParams(**kw))
    r.set_neighbor(Neighbor("eth1", S1, SRC))
    return r


def feed(r: Receiver, data: bytes, now: float, ifname: str = "eth1") -> list[RemoteUpdate]:
    return r.on_datagram(data, ifname=ifname, src=SRC, ttl=255, now=now)


def accepted_on(r: Receiver, ifname: str) -> int:
    return next(i["accepted"] for i in r.to_dict()["interfaces"] if i["ifname"] == ifname)


class Genuine:
    """A genuine sender's stream: one datagram per interval, sequence one per millisecond."""

    def __init__(self, r: Receiver, seq: int, now: float = 0.0, key: HmacKey | None = None):
        self.r, self.seq, self.now, self.key = r, seq, now, key

    def next(self, ifnames: tuple[str, ...] = ("eth1",)) -> bool:
        """Send the next datagram on ``ifnames``; True when the receiver took it."""
        self.now += IV
        self.seq = (self.seq + 20) & 0xFFFFFFFF
        data = hb(self.seq).encode(self.key)
        before = self.r.accepted
        for ifn in ifnames:
            feed(self.r, data, self.now, ifn)
            self.r.on_timer(self.now)
        return self.r.accepted > before

    def lockout(self, n: int = 50) -> int:
        """The longest run of rejected genuine datagrams among the next ``n``."""
        run = worst = 0
        for _ in range(n):
            run = 0 if self.next() else run + 1
            worst = max(worst, run)
        return worst


# --- one forged datagram froze a spine's quality for hours ----------------------------


def test_forged_max_jump_and_max_interval_is_dropped_and_genuine_keeps_flowing() -> None:
    r = rx()
    g = Genuine(r, 100_000)
    assert g.next()
    forged = hb(g.seq + HALF - 1, interval_us=0xFFFFFFFF).encode()
    assert feed(r, forged, g.now + 0.001) == []
    assert r.drops["interval_too_long"] == 1
    assert g.lockout() == 0
    assert r.to_dict(g.now)["senders"][0]["expires_in_ms"] <= 3 * IV * 1000


def test_forged_jump_with_a_valid_interval_is_suspect_not_adopted() -> None:
    r = rx()
    g = Genuine(r, 100_000)
    assert g.next()
    forged = hb(g.seq + HALF - 1, interval_us=10_000_000, e=ents(0, 0)).encode()
    assert feed(r, forged, g.now + 0.001) == []
    assert r.drops["sequence_jump"] == 1 and r.remote(S1) == ents()
    assert g.lockout() == 0 and r.remote(S1) == ents()
    assert "stale_sequence" not in r.drops


def test_forged_confirmed_jump_locks_out_the_genuine_sender_only_briefly() -> None:
    """Without authentication an attacker can send two consecutive datagrams; the genuine
    sender is resynchronised after a bounded number of its own datagrams."""
    r = rx()
    g = Genuine(r, 100_000)
    assert g.next()
    x = g.seq + HALF - 100
    for i in range(2):
        feed(r, hb(x + i, interval_us=10_000_000, e=ents(0, 0)).encode(), g.now + 0.001 * (i + 1))
    assert r.remote(S1) == ents(0, 0)
    assert 0 < g.lockout() <= BOUND
    assert r.remote(S1) == ents()
    assert r.sequence_jumps == 1 and r.sequence_recoveries == 1


def test_a_trickle_of_forged_datagrams_cannot_block_the_recovery() -> None:
    """After a forged pair took over, one forged datagram per genuine interval (each newer
    than the genuine stream, none consecutive) must not keep the genuine sender out."""
    r = rx()
    g = Genuine(r, 100_000)
    assert g.next()
    x = g.seq + HALF - 100
    for i in range(2):
        feed(r, hb(x + i, interval_us=10_000_000, e=ents(0, 0)).encode(), g.now + 0.001 * (i + 1))
    assert r.remote(S1) == ents(0, 0)
    run = worst = 0
    for k in range(1, 40):
        forged = hb(g.seq + 5_000 * k, interval_us=10_000_000, e=ents(0, 0)).encode()
        feed(r, forged, g.now + 0.005)
        run = 0 if g.next() else run + 1
        worst = max(worst, run)
    assert worst <= BOUND and r.remote(S1) == ents()


def test_bit_flipped_copies_never_lock_out_the_genuine_sender() -> None:
    """Only a flip of a low sequence bit (a jump inside the bound, which nothing tells from
    loss) may cost genuine datagrams, and at most BOUND of them; any other flip costs none."""
    r = rx()
    g = Genuine(r, 0x1234_5678)
    rnd = random.Random(7)
    lost = allowed = 0
    for _ in range(50):
        data = bytearray(hb(g.seq).encode())
        bit = rnd.randrange(len(data) * 8)
        data[bit // 8] ^= 1 << (bit % 8)
        seq_bit = 31 - (bit - 64) if 64 <= bit < 96 else None
        if seq_bit is not None and seq_bit < 12:
            allowed += BOUND
        feed(r, bytes(data), g.now + 0.001)
        for _ in range(20):
            lost += not g.next()
    assert lost <= allowed
    assert g.next()


def test_bit_flip_of_a_high_sequence_bit_is_not_adopted() -> None:
    r = rx()
    g = Genuine(r, 0x1234_5678)
    assert g.next()
    for k in (29, 30):
        feed(r, hb(g.seq ^ (1 << k)).encode(), g.now + 0.001)
        assert g.lockout(10) == 0
    assert r.drops["sequence_jump"] + r.drops["stale_sequence"] == 2


# --- captured datagrams accepted again after a hold time or a session restart ---------


def test_replay_after_expiry_is_dropped_with_hmac() -> None:
    r = rx(keys={KEY.key_id: KEY})
    g = Genuine(r, initial_sequence(1_700_000_000.0), key=KEY)
    assert g.next()
    captured = hb(g.seq).encode(KEY)
    for _ in range(9000):  # three minutes of heartbeats
        g.seq = (g.seq + 20) & 0xFFFFFFFF
        g.now += IV
        feed(r, hb(g.seq).encode(KEY), g.now)
    r.on_timer(g.now + 0.3)  # 0.3 s of blocked heartbeats: expired
    assert r.remote(S1) is None
    assert feed(r, captured, g.now + 0.3) == []
    assert r.remote(S1) is None and r.drops["stale_sequence"] == 1


def test_replay_after_session_restart_is_dropped() -> None:
    r = rx(keys={KEY.key_id: KEY})
    g = Genuine(r, 5_000_000, key=KEY)
    assert g.next()
    captured = hb(g.seq).encode(KEY)
    for _ in range(10):
        assert g.next()
    assert [u.reason for u in r.remove_neighbor("eth1")] == ["neighbor_removed"]
    r.set_neighbor(Neighbor("eth1", S1, SRC))
    assert feed(r, captured, g.now + 0.001) == []
    assert r.remote(S1) is None and r.drops["stale_sequence"] == 1
    assert g.next() and r.remote(S1) == ents()  # the live sender is taken at once


def test_replays_never_displace_a_live_sender() -> None:
    """A burst of consecutive captured (signed) datagrams between two genuine ones is not a
    reason to recover onto the old stream: the reference is alive."""
    r = rx(keys={KEY.key_id: KEY})
    g = Genuine(r, 9_000_000, key=KEY)
    old = [hb(g.seq + 20 * i + 20, e=ents(1, 1)).encode(KEY) for i in range(20)]
    for _ in range(30):
        assert g.next()
    for d in old:
        feed(r, d, g.now + 0.0001)
    assert r.remote(S1) == ents() and g.lockout(10) == 0
    assert r.sequence_recoveries == 0 and r.drops["stale_sequence"] == 20


def test_replay_takeover_needs_suppression_and_ends_within_two_genuine_heartbeats() -> None:
    """With HMAC, a chain of captured datagrams is adopted only while the genuine heartbeats
    are suppressed for a hold time; the genuine sender wins back at its second datagram even
    while the replays go on."""
    r = rx(keys={KEY.key_id: KEY})
    g = Genuine(r, 9_000_000, key=KEY)
    old = [hb(g.seq + 20 * i + 20, e=ents(1, 1)).encode(KEY) for i in range(40)]
    for _ in range(500):  # ten seconds of live heartbeats
        assert g.next()
    t = g.now
    for i in range(10):  # genuine heartbeats suppressed, old ones replayed in their place
        t += IV
        feed(r, old[i], t)
    assert r.remote(S1) == ents(1, 1) and r.sequence_recoveries == 1
    g.now = t
    lost = 0
    for i in range(10, 20):  # the replays go on at the same rate; the genuine sender is back
        feed(r, old[i], g.now + 0.001)
        lost += not g.next()
    assert lost == 1 and r.remote(S1) == ents() and r.sequence_jumps == 1


def test_replay_right_after_the_receiver_starts_lasts_two_genuine_heartbeats() -> None:
    r = rx(keys={KEY.key_id: KEY})
    captured = hb(9_000_000, e=ents(1, 1)).encode(KEY)
    assert [u.reason for u in feed(r, captured, 0.0)] == ["new"]  # nothing to compare with yet
    g = Genuine(r, 9_000_000 + 180_000, key=KEY)
    assert not g.next() and g.next() and r.remote(S1) == ents()


def test_restarted_sender_after_expiry_is_accepted_within_two_datagrams() -> None:
    r = rx(keys={KEY.key_id: KEY})
    s = Sender(SenderParams(S1, key=KEY), initial_sequence(1_700_000_000.0))
    out = s.set_interfaces(["eth1"], 0.0)
    feed(r, out[0].data, 0.0)
    r.on_timer(1.0)
    assert r.remote(S1) is None
    s2 = Sender(SenderParams(S1, key=KEY), initial_sequence(1_700_003_600.0))  # an hour later
    got: list[str] = []
    now = 5.0
    out = s2.set_interfaces(["eth1"], now)
    for _ in range(3):
        got += [u.reason for u in feed(r, out[0].data, now)]
        now = s2.next_deadline() or now
        out = s2.on_timer(now)
    assert got == ["new"] and r.sequence_jumps == 1


# --- key rollover without an outage -------------------------------------------------


def test_rollover_with_two_keys_loses_no_heartbeat() -> None:
    both = {OLD_KEY.key_id: OLD_KEY, NEW_KEY.key_id: NEW_KEY}
    r = rx(keys={OLD_KEY.key_id: OLD_KEY})
    s = Sender(SenderParams(S1, key=OLD_KEY), 1000)
    now, n = 0.0, 0
    out = s.set_interfaces(["eth1"], now)
    for step in range(1, 200):
        if step == 50:  # 1: every node accepts both keys, still signs with the old one
            r.set_params(ReceiverParams(keys=both))
        if step == 100:  # 2: the senders switch to the new key
            s.set_params(SenderParams(S1, key=NEW_KEY), now)
        if step == 150:  # 3: the old key is withdrawn
            r.set_params(ReceiverParams(keys={NEW_KEY.key_id: NEW_KEY}))
        for t in out:
            feed(r, t.data, now)
            n += 1
        r.on_timer(now)
        now = s.next_deadline() or now
        out = s.on_timer(now)
    assert r.drops == {} and r.accepted == n


# --- sequence per interface, expiry per node -----------------------------------------


def test_parallel_links_sequence_going_back_recovers_on_both_links() -> None:
    r = Receiver()
    r.set_neighbor(Neighbor("eth1", S1, SRC))
    r.set_neighbor(Neighbor("eth3", S1, SRC))
    g = Genuine(r, 80_000_000)
    for _ in range(5):
        assert g.next(("eth1", "eth3"))
    # eth1's session flaps while the sender restarts with a clock that went back a minute
    r.remove_neighbor("eth1")
    r.set_neighbor(Neighbor("eth1", S1, SRC))
    g.seq -= 60_000
    before = accepted_on(r, "eth3")
    for _ in range(20):
        g.next(("eth1", "eth3"))
    assert accepted_on(r, "eth3") - before >= 20 - BOUND
    stale = r.drops["stale_sequence"]
    for _ in range(10):
        assert g.next(("eth1", "eth3"))
    assert r.drops["stale_sequence"] == stale and r.remote(S1) == ents()


# --- the sender: a restart is always newer --------------------------------------------------


def test_sender_restart_after_a_long_run_is_newer() -> None:
    """The sequence follows the clock (one per ms), so after a run of any length a restarted
    sender, seeded from the wall clock, is newer than the last datagram of the previous run."""
    wall0 = 1_700_000_000.0
    s = Sender(SenderParams(S1), initial_sequence(wall0))
    s.set_interfaces(["eth1"], 0.0)
    run = 30 * 86400.0  # thirty days
    out = s.on_timer(run)
    last = out[0].sequence
    assert wire.serial_gt(initial_sequence(wall0 + run + 1.0), last)
    assert wire.serial_gt(s.on_timer(run + IV)[0].sequence, last)
