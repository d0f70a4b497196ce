"""Heartbeat sender drain (pure, virtual time): a drained helper advertises every link at band
0 (not down) at once, keeps doing so as measurements change, and undrain restores the
measured bands at once."""

from __future__ import annotations

from heartbeat import wire
from heartbeat.sender import Sender, SenderParams

S1 = wire.node_id("10.0.0.11")


def links(band: int) -> list[wire.Entry]:
    return [
        wire.Entry(wire.node_id("10.0.0.1"), 3, 10_000, band, 0, 1200, 0),
        wire.Entry(wire.node_id("10.0.0.2"), 4, 10_000, 0, wire.ENTRY_FLAG_DOWN, 0, 0),
    ]


def sent(out: list[object]) -> list[tuple[int, bool]]:
    (t,) = out
    return [(e.band, e.down) for e in wire.decode(t.data).entries]  # type: ignore[attr-defined]


def test_drain_sends_band_zero_at_once_and_undrain_restores() -> None:
    s = Sender(SenderParams(S1), first_sequence=1)
    s.update(links(7), now=0.0)
    assert sent(s.set_interfaces(["eth1"], now=0.0)) == [(7, False), (0, True)]
    out = s.set_drain(True, now=0.010)  # outside the spacing window: at once
    assert sent(out) == [(0, False), (0, True)]  # a down link stays down
    assert s.drained and s.to_dict()["drained"] is True
    assert s.set_drain(True, now=0.011) == []
    # new measurements while drained are still sent at band 0
    assert s.update(links(3), now=0.020) == []  # nothing changed on the wire
    assert sent(s.on_timer(s.next_deadline() or 0.0)) == [(0, False), (0, True)]
    out = s.set_drain(False, now=0.040)
    assert sent(out) == [(3, False), (0, True)]
    assert not s.drained
