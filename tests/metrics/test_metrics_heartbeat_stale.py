"""The heartbeat staleness series outlive the sender's expiry: the receiver forgets an expired
sender (so ``glbd_heartbeat_age_seconds{sender}`` goes), but ``glbd_heartbeat_sender_up`` and
``glbd_heartbeat_port_age_seconds`` stay per BGP neighbour, so ``GlbdHeartbeatsStale`` can
fire. Driven through a real :class:`Receiver` and the quality sampler."""

from __future__ import annotations

from typing import Any, cast

from glbd.control import metrics_parts, views
from heartbeat import wire
from heartbeat.receiver import Neighbor, Receiver

SPINE = wire.node_id("10.0.0.1")


def _rows(r: Receiver, now: float) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    hb: dict[str, Any] = {"receiver": r.to_dict(now)}
    snap = views.quality_snapshot([], hb, None, {})
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for s in metrics_parts.quality_samples(cast(metrics_parts.QualityView, snap))
        if s.name.startswith("glbd_heartbeat_") and s.labels
    }


def test_sender_up_goes_to_zero_on_expiry_and_the_port_age_keeps_growing() -> None:
    r = Receiver()
    r.set_neighbor(Neighbor("eth1", SPINE, "198.18.1.0"))
    port = (("interface", "eth1"), ("neighbor", "10.0.0.1"))
    # a session without a heartbeat yet: not up, no age
    assert _rows(r, 0.5) == {("glbd_heartbeat_sender_up", port): 0.0}
    data = wire.Heartbeat(SPINE, 1000, 20_000).encode()
    r.on_datagram(data, ifname="eth1", src="198.18.1.0", ttl=255, now=1.0)
    live = _rows(r, 1.01)
    assert live[("glbd_heartbeat_sender_up", port)] == 1.0
    assert round(live[("glbd_heartbeat_port_age_seconds", port)], 3) == 0.01
    assert ("glbd_heartbeat_age_seconds", (("sender", "10.0.0.1"),)) in live
    r.on_timer(1.1)  # 3 x 20 ms later: expired
    gone = _rows(r, 5.0)
    assert gone[("glbd_heartbeat_sender_up", port)] == 0.0
    assert gone[("glbd_heartbeat_port_age_seconds", port)] == 4.0
    assert ("glbd_heartbeat_age_seconds", (("sender", "10.0.0.1"),)) not in gone
