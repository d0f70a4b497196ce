"""Sender and receiver cores in virtual time (no sockets, no sleeps)."""

from __future__ import annotations

import itertools

import pytest

from heartbeat import wire
from heartbeat.receiver import Neighbor, Receiver, ReceiverParams, RemoteUpdate
from heartbeat.sender import Sender, SenderParams, initial_sequence
from heartbeat.wire import Entry, Heartbeat, HmacKey

S1, S2 = wire.node_id("10.0.0.1"), wire.node_id("10.0.0.2")
L1, L2 = wire.node_id("10.1.0.1"), wire.node_id("10.1.0.2")
KEY = HmacKey(3, b"sixteen byte key")


def ents(b1: int = 7, b2: int = 7, load: int = 0) -> list[Entry]:
    return [Entry(L1, 11, 100_000, b1, 0, load, 0), Entry(L2, 12, 100_000, b2, 0, load, 0)]


# --- sender ---------------------------------------------------------------------------------


def test_sender_periodic_and_sequence() -> None:
    s = Sender(SenderParams(S1), first_sequence=0xFFFFFFFE)
    assert s.next_deadline() is None  # no interface yet
    out = s.set_interfaces(["eth2", "eth1", "eth1"], now=0.0)
    assert [t.ifname for t in out] == ["eth1", "eth2"]
    assert out[0].data == out[1].data and out[0].sequence == 0xFFFFFFFE
    seqs = [out[0].sequence]
    now = 0.0
    for _ in range(5):
        assert s.on_timer(now + 0.019) == []
        now = s.next_deadline() or 0.0
        out = s.on_timer(now)
        seqs.append(out[0].sequence)
        assert wire.decode(out[0].data).interval_us == 20_000
    assert abs(now - 0.1) < 1e-9
    # one per millisecond since the first send: wraps, never repeats
    assert seqs == [(0xFFFFFFFE + 20 * i) & 0xFFFFFFFF for i in range(6)]


def test_sender_sequence_is_at_least_one_per_datagram() -> None:
    s = Sender(SenderParams(S1, interval_s=0.001, min_spacing_s=0.0001), first_sequence=7)
    out = s.set_interfaces(["eth1"], now=0.0)
    assert s.update(ents(3), now=0.0002)[0].sequence == 8  # faster than the clock: + 1
    assert out[0].sequence == 7 and s.on_timer(0.0013)[0].sequence == 9
    assert s.on_timer(0.5)[0].sequence == 7 + 500  # then the clock again


def test_sender_on_change_respects_min_spacing() -> None:
    s = Sender(SenderParams(S1), first_sequence=1)
    s.set_interfaces(["eth1"], now=0.0)  # sends at t=0
    assert s.update(ents(load=500), now=0.001) == []  # raw figures only: no on-change send
    assert s.update(ents(6), now=0.002) == []  # band change inside the 5 ms window
    assert s.next_deadline() == 0.005
    assert s.update(ents(5), now=0.003) == []  # coalesced
    out = s.on_timer(0.005)
    assert len(out) == 1 and list(wire.decode(out[0].data).entries) == ents(5)
    assert s.next_deadline() == 0.025
    out = s.update(ents(5, 0), now=0.012)  # outside the window: at once
    assert len(out) == 1 and s.next_deadline() == 0.032
    assert s.sent == 3 and s.sent_on_change == 2


def test_a_periodic_send_does_not_hold_back_a_first_change() -> None:
    """The spacing bounds a storm of changes; a change right after a routine heartbeat goes
    at once, or 1 ms after it at most (waiting out the spacing from that heartbeat was most of
    a band change's tail)."""
    s = Sender(SenderParams(S1), first_sequence=1)
    s.set_interfaces(["eth1"], now=0.0)
    assert len(s.on_timer(0.020)) == 1  # periodic
    out = s.update(ents(6), now=0.0215)  # 1.5 ms later: at once
    assert len(out) == 1 and list(wire.decode(out[0].data).entries) == ents(6)
    assert s.update(ents(5), now=0.022) == []  # a second change: the spacing applies
    assert s.next_deadline() == pytest.approx(0.0265)
    due = s.next_deadline()
    assert due is not None and s.sent_on_change == 1
    assert len(s.on_timer(due)) == 1 and s.sent_on_change == 2
    s.on_timer(0.0465)  # periodic
    assert s.update(ents(4), now=0.0468) == []  # within a millisecond of it: 1 ms after
    assert s.next_deadline() == pytest.approx(0.0475)


def test_sender_on_change_disabled_and_signed() -> None:
    s = Sender(SenderParams(S1, on_change=False, key=KEY), first_sequence=1)
    s.set_interfaces(["eth1"], now=0.0)
    assert s.update(ents(0), now=0.010) == []
    out = s.on_timer(0.020)
    assert wire.verify(out[0].data, KEY)
    assert "sixteen" not in repr(s.params)


def test_initial_sequence_after_restart_is_newer() -> None:
    assert initial_sequence(1000.0) == 1_000_000
    assert initial_sequence(1000.0, last_sent=1_000_005) == 1_000_006
    assert initial_sequence(2**32 / 1000 + 1.0) == 1000  # wraps modulo 2**32


# --- receiver -------------------------------------------------------------------------------


def rx(**kw: object) -> Receiver:
    r = Receiver(ReceiverParams(**kw))  # type: ignore[arg-type]
    r.set_neighbor(Neighbor("eth1", S1, "192.0.2.1"))
    r.set_neighbor(Neighbor("eth2", S2, None))
    return r


def hb(
    seq: int, sender: int = S1, e: list[Entry] | None = None, interval_us: int = 20_000
) -> Heartbeat:
    return Heartbeat(sender, seq, interval_us, ents() if e is None else e)


def feed(
    r: Receiver,
    data: bytes,
    now: float,
    ifname: str = "eth1",
    src: str = "192.0.2.1",
    ttl: int = 255,
) -> list[RemoteUpdate]:
    return r.on_datagram(data, ifname=ifname, src=src, ttl=ttl, now=now)


def test_receiver_checklist_counts_every_drop() -> None:
    r = rx(keys={KEY.key_id: KEY})
    good = hb(10).encode(KEY)
    assert feed(r, good, 0.0, ttl=254) == []
    assert feed(r, good, 0.0, ttl=None) == []  # type: ignore[arg-type]
    assert feed(r, good, 0.0, ifname="eth9") == []
    assert feed(r, b"\x00" * 10, 0.0) == []
    assert feed(r, good, 0.0, src="192.0.2.99") == []
    assert feed(r, hb(10, sender=S2).encode(KEY), 0.0) == []
    assert feed(r, hb(10).encode(), 0.0) == []
    assert feed(r, hb(10).encode(HmacKey(4, KEY.secret)), 0.0) == []
    assert feed(r, hb(10).encode(HmacKey(3, b"x" * 16)), 0.0) == []
    ups = feed(r, good, 0.0)
    assert [(u.node_id, u.reason) for u in ups] == [(S1, "new")]
    assert list(ups[0].entries or ()) == ents()
    assert feed(r, good, 0.001) == []  # replay
    assert feed(r, hb(9).encode(KEY), 0.002) == []  # older
    assert dict(r.drops) == {
        "bad_ttl": 2,
        "no_neighbor": 1,
        "malformed": 1,
        "malformed_too_short": 1,
        "wrong_source": 1,
        "wrong_sender": 1,
        "auth_missing": 1,
        "auth_unknown_key": 1,
        "auth_bad_digest": 1,
        "stale_sequence": 2,
    }
    assert r.accepted == 1


def test_receiver_forged_datagram_does_not_advance_sequence() -> None:
    r = rx(keys={KEY.key_id: KEY})
    feed(r, hb(10).encode(KEY), 0.0)
    feed(r, hb(1000).encode(HmacKey(3, b"y" * 16)), 0.001)  # forged, high sequence
    assert feed(r, hb(11, e=ents(3)).encode(KEY), 0.002) != []


def test_receiver_emits_only_weight_relevant_changes() -> None:
    r = rx()
    assert feed(r, hb(1).encode(), 0.0)[0].reason == "new"
    assert feed(r, hb(2, e=ents(load=4000)).encode(), 0.02) == []  # raw figures only
    ups = feed(r, hb(3, e=ents(7, 2)).encode(), 0.04)
    assert [u.reason for u in ups] == ["changed"]
    assert [e.band for e in ups[0].entries or ()] == [7, 2]
    assert feed(r, hb(4, e=ents(7, 2)).encode(), 0.06) == []
    assert r.to_dict(0.07)["senders"][0]["changes"] == 1


def test_receiver_expiry_is_unknown_and_sequence_survives_it() -> None:
    r = rx()
    feed(r, hb(100).encode(), 0.0)
    assert r.next_deadline() == 0.06  # 3 x 20 ms
    feed(r, hb(101).encode(), 0.02)
    assert r.on_timer(0.06) == []  # lower bound fired early: refreshed at 0.02
    assert r.next_deadline() == 0.08 and r.expirations == 0
    ups = r.on_timer(0.08)
    assert [(u.node_id, u.entries, u.reason) for u in ups] == [(S1, None, "expired")]
    assert r.remote(S1) is None and r.next_deadline() is None
    assert r.expirations == 1 and r.to_dict()["expirations"] == 1
    # an older sequence after expiry (a replay, or a sender whose clock went back) is dropped;
    # a sender that keeps sending from there is resynchronised after recover_after datagrams
    assert feed(r, hb(5).encode(), 0.1) == [] and r.drops["stale_sequence"] == 1
    assert feed(r, hb(6).encode(), 0.12) == []
    ups = feed(r, hb(7).encode(), 0.14)
    assert [u.reason for u in ups] == ["new"] and r.sequence_recoveries == 1


def test_receiver_hold_follows_advertised_interval() -> None:
    r = rx(hold_multiplier=5)
    feed(r, hb(1, interval_us=10_000).encode(), 1.0)
    assert r.next_deadline() == 1.05


def test_receiver_parallel_links_to_one_spine_share_state() -> None:
    r = Receiver()
    r.set_neighbor(Neighbor("eth1", S1))
    r.set_neighbor(Neighbor("eth3", S1))
    d = hb(7).encode()
    assert len(feed(r, d, 0.0, ifname="eth1")) == 1
    assert feed(r, d, 0.0, ifname="eth3") == []  # same snapshot via the parallel link
    assert r.remove_neighbor("eth1") == []  # still a session on eth3
    ups = r.remove_neighbor("eth3")
    assert [(u.node_id, u.reason) for u in ups] == [(S1, "neighbor_removed")]


def test_sender_to_receiver_virtual_time_loss_and_recovery() -> None:
    s = Sender(SenderParams(S1, key=KEY), first_sequence=initial_sequence(1234.5))
    r = rx(keys={KEY.key_id: KEY})
    seen: list[str] = []
    now = 0.0
    assert s.update(ents(), now) == []  # no interface yet
    out = s.set_interfaces(["eth1"], now)
    for step in range(1, 40):
        now = step * 0.005
        if 10 <= step < 30:
            out = []  # link loses heartbeats for 100 ms
        for t in out:
            seen += [u.reason for u in feed(r, t.data, now)]
        seen += [u.reason for u in r.on_timer(now)]
        out = s.on_timer(now)
    assert seen == ["new", "expired", "new"]
    assert r.drops == {}


# ---- the idle refresh: a quiet fabric is refreshed every idle_interval_s ------------------

IDLE = SenderParams(S1, interval_s=0.020, idle_interval_s=0.100, idle_after_s=1.0)
CALM = [Entry(S2, 1, 10_000, 7)]


def _promised(tx: list[object]) -> float:
    return wire.decode(tx[0].data).interval_us / 1e6  # type: ignore[attr-defined]


def _sends(s: Sender, t0: float, t1: float, step: float = 0.001) -> list[tuple[float, float]]:
    """(time, promised interval) of every datagram between t0 and t1, driven at its deadline."""
    out: list[tuple[float, float]] = []
    t = t0
    while t < t1:
        nd = s.next_deadline()
        assert nd is not None
        t = max(t, nd)
        tx = s.on_timer(t)
        if tx:
            out.append((round(t, 6), _promised(tx)))
        t += step
    return out


def test_a_quiet_sender_refreshes_at_the_idle_interval_and_promises_it() -> None:
    s = Sender(IDLE, 1)
    s.set_interfaces(["e1"], 0.0)
    s.update(CALM, 0.0)
    sends = _sends(s, 0.0, 3.0)
    busy = [t for t, iv in sends if iv == pytest.approx(0.020)]
    idle = [(t, iv) for t, iv in sends if iv == pytest.approx(0.100)]
    # the first second after the snapshot's first send (a change) at 20 ms, then 100 ms
    assert busy and max(busy) < 1.02 and idle and min(t for t, _ in idle) >= 1.0
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(idle)]
    assert gaps and all(g == pytest.approx(0.100, abs=0.002) for g in gaps)


def test_a_change_leaves_at_once_and_brings_the_busy_interval_back() -> None:
    s = Sender(IDLE, 1)
    s.set_interfaces(["e1"], 0.0)
    s.update(CALM, 0.0)
    _sends(s, 0.0, 2.0)
    tx = s.update([Entry(S2, 1, 10_000, 5)], 2.05)
    assert tx and _promised(tx) == pytest.approx(0.020)
    assert s.next_deadline() == pytest.approx(2.07)


def test_a_link_below_the_best_band_keeps_the_busy_interval() -> None:
    s = Sender(IDLE, 1)
    s.set_interfaces(["e1"], 0.0)
    s.update([Entry(S2, 1, 10_000, 6)], 0.0)
    sends = _sends(s, 0.0, 3.0)
    assert sends and all(iv == pytest.approx(0.020) for _, iv in sends)


def test_without_an_idle_interval_the_sender_never_slows_down() -> None:
    s = Sender(SenderParams(S1, interval_s=0.020), 1)
    s.set_interfaces(["e1"], 0.0)
    s.update(CALM, 0.0)
    assert all(iv == pytest.approx(0.020) for _, iv in _sends(s, 0.0, 3.0))
