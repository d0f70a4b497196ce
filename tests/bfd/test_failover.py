"""bfd.failover: the framing check of armed requests and the decoding of the kernel's answers
(golden vectors, round trip, fuzz); the engine's control call rejects bad requests."""

from __future__ import annotations

import contextlib
import struct

import pytest
from fuzzing import fuzz_codec
from hypothesis import given
from hypothesis import strategies as st

from bfd.engine import BfdEngine, EngineError, SessionConfig
from bfd.failover import Ack, DecodeError, decode_acks, split_requests

_HDR = struct.Struct("=IHHII")

# RTM_DELNEXTHOP (105), NLM_F_REQUEST|NLM_F_ACK, seq 901; struct nhmsg (8 zero octets);
# NHA_ID (1) = 901. What glbd.fib.fibmsg.failover_wire([901]) encodes (host order).
DEL_901 = bytes.fromhex(
    "20000000"
    "6900"
    "0500"
    "85030000"
    "00000000"  # nlmsghdr: len 32, type 105, flags 5
    "0000000000000000"  # nhmsg
    "08000100"
    "85030000"  # NHA_ID = 901
)
# the kernel's answers: ENOENT (-2) to seq 901, echoing the request's header; then a plain ack
ACK_ENOENT_901 = bytes.fromhex(
    "24000000"
    "0200"
    "0001"
    "85030000"
    "00000000"  # NLMSG_ERROR, NLM_F_CAPPED, seq 901
    "feffffff"  # error -2
    "20000000"
    "6900"
    "0500"
    "85030000"
    "00000000"  # the request's header
)
ACK_OK_7 = bytes.fromhex("2400000002000001070000000000000000000000") + bytes(16)


def test_golden_request_splits_into_itself() -> None:
    assert split_requests(DEL_901) == [DEL_901]
    assert split_requests(DEL_901 + DEL_901) == [DEL_901, DEL_901]
    assert split_requests(b"") == []


def test_golden_acks() -> None:
    acks = decode_acks(ACK_ENOENT_901 + ACK_OK_7)
    assert acks == [Ack(901, 2, 105), Ack(7, 0, 0)]
    assert not acks[0].ok and "ENOENT" in acks[0].describe() and acks[1].ok


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (DEL_901[:10], "truncated_header"),
        (DEL_901[:30], "truncated_message"),
        (_HDR.pack(8, 105, 5, 0, 0), "bad_length"),
        (_HDR.pack(16, 2, 5, 0, 0), "not_rtnetlink"),  # NLMSG_ERROR is not a request
        (_HDR.pack(16, 105, 4, 0, 0), "not_request"),  # NLM_F_ACK without NLM_F_REQUEST
        (DEL_901 * 1100, "too_long"),
    ],
)
def test_bad_requests_are_named(data: bytes, reason: str) -> None:
    with pytest.raises(DecodeError) as ei:
        split_requests(data)
    assert ei.value.reason == reason


def test_bad_error_code() -> None:
    with pytest.raises(DecodeError, match="bad_error"):
        decode_acks(_HDR.pack(20, 2, 0, 1, 0) + struct.pack("=i", 5))
    with pytest.raises(DecodeError, match="short_error"):
        decode_acks(_HDR.pack(18, 2, 0, 1, 0) + b"\0\0")


_msg = st.builds(
    lambda t, f, seq, body: _HDR.pack(16 + len(body), t, f | 1, seq, 0) + body,
    st.integers(16, 0xFFFF),
    st.integers(0, 0xFFFF),
    st.integers(0, 2**32 - 1),
    st.binary(max_size=40).map(lambda b: b + bytes(-len(b) % 4)),
)


@given(st.lists(_msg, max_size=8))
def test_round_trip(msgs: list[bytes]) -> None:
    assert split_requests(b"".join(msgs)) == msgs


@given(st.binary(max_size=200))
def test_fuzz_arbitrary_bytes(data: bytes) -> None:
    for fn in (split_requests, decode_acks):
        with contextlib.suppress(DecodeError):
            fn(data)


def test_fuzz_mutations() -> None:
    seeds = [DEL_901, DEL_901 * 2, ACK_ENOENT_901, ACK_OK_7]
    for fn in (split_requests, decode_acks):
        ok, bad = fuzz_codec(fn, DecodeError, seeds, 3000, 7, max_insert=8)
        assert ok and bad


def test_engine_rejects_bad_requests_and_unknown_sessions() -> None:
    """Thread mode, no namespace, no sockets needed: the session's interface does not exist."""
    eng = BfdEngine(lambda ev: None, mode="thread")
    eng.start()
    try:
        eng.add_session(SessionConfig(peer="198.18.0.2", interface="glbd-none0"))
        with pytest.raises(EngineError, match=r"bad failover requests.*not_request"):
            eng.set_failover("glbd-none0", "198.18.0.2", _HDR.pack(16, 105, 0, 0, 0))
        with pytest.raises(EngineError, match="no BFD session"):
            eng.set_failover("glbd-none0", "198.18.0.9", DEL_901)
        assert eng.set_failover("glbd-none0", "198.18.0.2", DEL_901 * 2) == 2
        snap = eng.snapshot()
        assert snap["sessions"][0]["failover_requests"] == 2
        assert snap["engine"]["failover"]["sent"] == 0
        assert eng.set_failover("glbd-none0", "198.18.0.2", b"") == 0
        assert eng.snapshot()["sessions"][0]["failover_requests"] == 0
    finally:
        eng.stop()
