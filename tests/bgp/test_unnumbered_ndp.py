"""Router advertisement codec and the learned-peer state of unnumbered ports (virtual time)."""

from __future__ import annotations

import ipaddress

import pytest

from glbd.unnumbered import ndp
from glbd.unnumbered.ndpeers import NdpEvent, NdpPeers, PeerChange

A = ipaddress.IPv6Address
MAC = bytes.fromhex("020000000a0b")
P1, P2, P3 = A("fe80::1"), A("fe80::2"), A("fe80::3")


def test_advert_bytes() -> None:
    # type 134, code 0, checksum left to the kernel, hop limit 64, no flags, lifetime 0,
    # reachable 0, retrans 0, then option 1 (source link-layer address), one 8-octet unit
    assert ndp.encode_advert(MAC) == bytes.fromhex("86000000400000000000000000000000") + (
        b"\x01\x01" + MAC
    )
    assert ndp.encode_solicit(MAC) == bytes.fromhex("8500000000000000") + b"\x01\x01" + MAC
    assert ndp.encode_advert(None) == bytes.fromhex("86000000400000000000000000000000")


def test_advert_decode() -> None:
    ra = ndp.decode_advert(ndp.encode_advert(MAC))
    assert ra == ndp.RouterAdvert(0, MAC)
    frr = bytes.fromhex("86000000400007080000000000000000") + b"\x01\x01" + MAC
    assert ndp.decode_advert(frr) == ndp.RouterAdvert(1800, MAC)
    # an MTU option (5) before the link-layer address is skipped
    mtu = bytes.fromhex("05010000000005dc")
    assert ndp.decode_advert(frr[:16] + mtu + frr[16:]) == ndp.RouterAdvert(1800, MAC)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"\x86\x00\x00", ndp.NdpDrop.MALFORMED),
        (bytes.fromhex("86010000400000000000000000000000"), ndp.NdpDrop.BAD_CODE),
        (ndp.encode_advert(None) + b"\x01\x00" + MAC, ndp.NdpDrop.MALFORMED),  # length 0
        (ndp.encode_advert(None) + b"\x01\x02" + MAC, ndp.NdpDrop.MALFORMED),  # past the end
        (ndp.encode_advert(None) + b"\x01", ndp.NdpDrop.MALFORMED),
    ],
)
def test_advert_drops(data: bytes, why: ndp.NdpDrop) -> None:
    assert ndp.decode_advert(data) is why


def test_learned_refreshed_expired() -> None:
    c = NdpPeers(hold_s=30.0)
    c.watch("swp1")
    assert c.heard("swp2", P1, 0.0) is None  # not an unnumbered port of ours
    assert c.heard("swp1", A("2001:db8::1"), 0.0) is None  # not link-local
    assert c.heard("swp1", P1, 1.0) == NdpEvent("swp1", PeerChange.LEARNED, P1)
    assert c.peers() == {"swp1": P1}
    assert c.heard("swp1", P1, 11.0) is None  # refreshed
    assert c.next_deadline() == 41.0
    assert c.tick(40.9) == []
    assert c.tick(41.0) == [NdpEvent("swp1", PeerChange.EXPIRED, P1)]
    assert c.peer("swp1") is None
    assert c.next_deadline() is None
    assert c.heard("swp1", P1, 50.0) == NdpEvent("swp1", PeerChange.LEARNED, P1)


def test_zone_is_dropped() -> None:
    c = NdpPeers()
    c.watch("swp1")
    ev = c.heard("swp1", A("fe80::1%swp1"), 0.0)
    assert ev is not None and ev.address == P1 and ev.address.scope_id is None


def test_change_needs_confirmation() -> None:
    """One stray advertisement does not move a working session; a repeated one does."""
    c = NdpPeers(hold_s=30.0, confirm=2, confirm_span_s=0.0, min_change_interval_s=0.0)
    c.watch("swp1")
    c.heard("swp1", P1, 0.0)
    assert c.heard("swp1", P2, 1.0) is None
    assert c.heard("swp1", P1, 2.0) is None  # the current peer speaks: the candidate is reset
    assert c.heard("swp1", P2, 3.0) is None
    assert c.heard("swp1", P3, 4.0) is None  # another candidate starts over
    assert c.heard("swp1", P3, 5.0) == NdpEvent("swp1", PeerChange.CHANGED, P3, P1)
    assert c.peer("swp1") == P3


def test_change_after_silence_is_immediate() -> None:
    """The old peer was not heard for the hold time: a new one replaces it at once."""
    c = NdpPeers(hold_s=30.0, confirm=3)
    c.watch("swp1")
    c.heard("swp1", P1, 0.0)
    assert c.heard("swp1", P2, 30.0) == NdpEvent("swp1", PeerChange.CHANGED, P2, P1)


def test_forget() -> None:
    c = NdpPeers()
    c.watch("swp1")
    c.heard("swp1", P1, 0.0)
    c.forget("swp1")
    assert c.peers() == {} and c.tick(1e9) == []


def test_changes_are_spaced() -> None:
    """A neighbor alternating between two addresses moves the session at most every
    min_change_interval_s."""
    c = NdpPeers(hold_s=30.0, confirm=2, min_change_interval_s=5.0, confirm_span_s=0.0)
    c.watch("swp1")
    c.heard("swp1", P1, 0.0)
    assert c.heard("swp1", P2, 1.0) is None
    assert c.heard("swp1", P2, 2.0) is None  # confirmed, but too soon after the learn
    assert c.heard("swp1", P2, 5.0) == NdpEvent("swp1", PeerChange.CHANGED, P2, P1)
    assert c.heard("swp1", P1, 6.0) is None
    assert c.heard("swp1", P1, 7.0) is None
    assert c.heard("swp1", P1, 10.0) == NdpEvent("swp1", PeerChange.CHANGED, P1, P2)
