"""Every reason a core counts or reports is a member of its package's reason enum, and each
member's value is the exact string counters, glbctl and metrics have always shown."""

from __future__ import annotations

import random
import re
from pathlib import Path

from bfd import packet
from bfd.packet import AuthType, ControlPacket, State
from bfd.reasons import DECODE_REASONS, SESSION_REASONS, DropReason, StateChangeReason
from bfd.session import TRANSITIONS, AuthConfig, Session, SessionParams
from glbd.base.reasons import FibConflict, QualitySource, RemoteStatus
from heartbeat import reasons as hbr
from heartbeat import wire
from heartbeat.receiver import Neighbor, Receiver, ReceiverParams
from heartbeat.wire import Entry, Heartbeat, HmacKey

ROOT = Path(__file__).resolve().parent.parent


def _mutations(good: bytes, n: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    out = [good[:i] for i in range(len(good))]
    for _ in range(n):
        b = bytearray(good)
        for _ in range(rng.randint(1, 3)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        out.append(bytes(b))
    return out


def test_members_keep_their_strings() -> None:
    for enum_ in (DropReason, StateChangeReason, hbr.DropReason, hbr.DecodeReason):
        for m in enum_:
            assert m == m.value and str(m) == m.value and f"{m}" == m.value
            assert m.value == m.name.lower()
    assert [str(m) for m in QualitySource] == ["glb", "dlb", "static"]
    assert {str(m) for m in RemoteStatus} >= {"ok", "down", "no_heartbeat"}


def test_bfd_decode_reasons_are_members() -> None:
    good = packet.sign(
        ControlPacket(State.UP, your_discriminator=2, auth=packet.Auth(AuthType.KEYED_SHA1, 1, 5)),
        b"k",
    ).encode()
    seen = set()
    for data in _mutations(good, 3000, 1) + _mutations(ControlPacket().encode(), 3000, 2):
        try:
            packet.decode(data)
        except packet.DecodeError as e:
            assert type(e.reason) is DropReason and e.reason in DECODE_REASONS
            seen.add(e.reason)
    assert len(seen) >= 8


def test_bfd_session_drops_and_state_changes_are_members() -> None:
    auth = AuthConfig(AuthType.KEYED_MD5, 1, b"secret")
    s = Session(1, SessionParams(auth=auth), random.Random(1), 0.0)
    bad = [
        ControlPacket(my_discriminator=9),  # no auth
        ControlPacket(my_discriminator=9, auth=packet.Auth(AuthType.KEYED_SHA1, 1)),
        ControlPacket(my_discriminator=9, auth=packet.Auth(AuthType.KEYED_MD5, 7)),
        ControlPacket(my_discriminator=9, auth=packet.Auth(AuthType.KEYED_MD5, 1)),  # bad digest
    ]
    for pkt in bad:
        assert s.on_packet(pkt, 0.1) == []
    assert s.drops and all(type(k) is DropReason and k in SESSION_REASONS for k in s.drops)
    plain = Session(2, SessionParams(), random.Random(1), 0.0)
    plain.on_packet(bad[1], 0.1)
    assert list(plain.drops) == [DropReason.AUTH_UNEXPECTED]
    assert all(type(r) is StateChangeReason for _s, _d, r in TRANSITIONS.values())


def test_bfd_literal_drop_reasons_in_the_engine_are_members() -> None:
    """The engine and transport still pass plain strings (equal to the members)."""
    names = set()
    for f in (ROOT / "bfd").rglob("*.py"):
        text = f.read_text()
        for arg in re.findall(r"\bdrop\(([^()\n]*)\)", text):
            if "+" not in arg:  # "tx_" + errno name: no member, by design
                names |= set(re.findall(r"\"([a-z_]+)\"", arg))
        names |= set(re.findall(r"counts\[\"([a-z_]+)\"\]", text))
    assert names and names <= {m.value for m in DropReason}


def test_heartbeat_drops_are_members() -> None:
    s1, l1 = wire.node_id("10.0.0.1"), wire.node_id("10.1.0.1")
    key = HmacKey(3, b"sixteen byte key")
    r = Receiver(ReceiverParams(keys={3: key}))
    r.set_neighbor(Neighbor("eth1", s1, "192.0.2.1"))
    good = Heartbeat(s1, 1000, 20_000, [Entry(l1, 11, 100_000, 7, 0, 0, 0)]).encode(key)
    for data in _mutations(good, 2000, 3):
        r.on_datagram(data, ifname="eth1", src="192.0.2.1", ttl=255, now=0.0)
    r.on_datagram(good, ifname="eth1", src="192.0.2.9", ttl=255, now=0.0)
    r.on_datagram(good, ifname="eth2", src="192.0.2.1", ttl=255, now=0.0)
    r.on_datagram(good, ifname="eth1", src="192.0.2.1", ttl=64, now=0.0)
    assert len(r.drops) >= 6
    assert all(type(k) is hbr.DropReason for k in r.drops)
    for d in hbr.DecodeReason:
        assert hbr.malformed(d) == "malformed_" + d


def test_fib_conflict_reasons_match_the_fib() -> None:
    from glbd.fib import fibcache as fib

    assert tuple(FibConflict) == fib.CONFLICT_REASONS
