"""heartbeat v1 codec: golden vectors both ways, named decode errors, RFC 1982, round trip, fuzz."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import struct

import pytest
from fuzzing import fuzz_codec
from hypothesis import given, settings
from hypothesis import strategies as st

from heartbeat import wire
from heartbeat.reasons import DecodeReason
from heartbeat.wire import Auth, DecodeError, Entry, Heartbeat, HmacKey, decode

R1 = 0xC0000201  # 192.0.2.1
L2, L6 = 0xC6120002, 0xC6120006  # 198.18.0.2, 198.18.0.6
KEY = HmacKey(9, b"0123456789abcdef")

CASES: list[tuple[Heartbeat, str]] = [
    (Heartbeat(R1, 1, 20000), "4748 01 00 c0000201 00000001 00004e20 0000 14 00"),
    (
        Heartbeat(
            R1,
            0xFFFFFFFF,
            10000,
            [Entry(L2, 7, 100000, 5, 0, 4250, 3000), Entry(L6, 8, 400000, 0, 0x80, 0, 0)],
        ),
        "4748 01 00 c0000201 ffffffff 00002710 0002 14 00"
        " c6120002 00000007 000186a0 05 00 109a 00000bb8"
        " c6120006 00000008 00061a80 00 80 0000 00000000",
    ),
]
SIGNED_HEX = (
    "4748 01 80 c0000201 00000002 00004e20 0001 14 00"
    " c6120002 00000007 000186a0 07 00 0000 00000000"
    " 09 c0717b4145c8f050f197d68333e8da0d68a7fa309a346d0b0d741fd180e57c29"
)


def h(s: str) -> bytes:
    return bytes.fromhex(s.replace(" ", ""))


@pytest.mark.parametrize(("msg", "hexs"), CASES)
def test_golden_encode(msg: Heartbeat, hexs: str) -> None:
    assert msg.encode() == h(hexs)


@pytest.mark.parametrize(("msg", "hexs"), CASES)
def test_golden_decode(msg: Heartbeat, hexs: str) -> None:
    assert decode(h(hexs)) == msg


def test_signed_golden_and_independent_hmac() -> None:
    msg = Heartbeat(R1, 2, 20000, [Entry(L2, 7, 100000, 7)])
    data = msg.encode(KEY)
    assert data == h(SIGNED_HEX)
    expect = hmac.new(KEY.secret, data[:-32], hashlib.sha256).digest()
    assert data[-32:] == expect
    got = decode(data)
    assert got.auth == Auth(9, expect)
    assert wire.verify(data, KEY)
    assert got.encode() == data  # the trailer is re-emitted as decoded
    assert not wire.verify(data, HmacKey(9, b"another secret!!"))
    assert not wire.verify(data, HmacKey(8, KEY.secret))
    tampered = bytearray(data)
    tampered[30] ^= 1
    assert not wire.verify(bytes(tampered), KEY)


def test_secret_not_in_repr() -> None:
    assert "0123456789" not in repr(KEY)
    assert "c0717b" not in repr(decode(h(SIGNED_HEX)))


def test_entry_accessors_and_to_dict() -> None:
    m = decode(h(CASES[1][1]))
    e0, e1 = m.entries
    assert e0.load_pct == 42.5 and not e0.down and e1.down
    assert m.entries[-1] == e1 and list(m.entries[0:1]) == [e0]
    with pytest.raises(IndexError):
        m.entries[2]
    d = m.to_dict()
    json.dumps(d)
    assert d["sender_id"] == "192.0.2.1" and d["entry_count"] == 2 and d["auth"] is None
    assert d["entries"][1] == {
        "far_end_id": "198.18.0.6",
        "link_id": 8,
        "capacity_mbps": 400000,
        "band": 0,
        "down": True,
        "load_pct": 0.0,
        "queue_bytes": 0,
    }


def _hdr(**kw: int) -> bytes:
    f = {"version": 1, "flags": 0, "interval": 20000, "count": 0, "elen": 20}
    f.update(kw)
    return struct.pack(
        "!2sBBIIIHBB",
        b"GH",
        f["version"],
        f["flags"],
        R1,
        1,
        f["interval"],
        f["count"],
        f["elen"],
        0,
    )


ENTRY = bytes(20)

ERRORS = [
    (b"", "too_short"),
    (_hdr()[:19], "too_short"),
    (b"XX" + _hdr()[2:], "bad_magic"),
    (_hdr(version=2), "bad_version"),
    (_hdr(flags=0x01), "unknown_flags"),
    (_hdr(elen=19), "bad_entry_len"),
    (_hdr(interval=0), "bad_interval"),
    (_hdr(count=1), "length_mismatch"),
    (_hdr() + b"\x00", "length_mismatch"),
    (_hdr(flags=0x80), "length_mismatch"),
    (_hdr(count=1) + ENTRY[:12] + b"\x08" + ENTRY[13:], "bad_band"),
    (_hdr(count=1) + ENTRY[:13] + b"\x01" + ENTRY[14:], "bad_entry_flags"),
]


@pytest.mark.parametrize(("data", "reason"), ERRORS)
def test_decode_errors_are_named(data: bytes, reason: str) -> None:
    with pytest.raises(DecodeError) as ei:
        decode(data)
    assert ei.value.reason == reason
    assert isinstance(ei.value.reason, DecodeReason)
    assert issubclass(DecodeError, ValueError)  # glbctl decode catches ValueError


def test_longer_entries_of_a_future_version_are_read_by_prefix() -> None:
    e = Entry(L2, 3, 1000, 6, 0, 100, 200)
    raw = wire.Entries([e]).raw
    data = _hdr(count=2, elen=24) + raw + b"\xff" * 4 + raw + b"\xee" * 4
    assert list(decode(data).entries) == [e, e]


def test_encode_rejects_out_of_range() -> None:
    with pytest.raises(ValueError):
        Heartbeat(R1, 1, 20000, [Entry(L2, 1, 1, 8)])
    with pytest.raises(ValueError):
        Heartbeat(R1, 1, 20000, [Entry(L2, 1, 1, 1, 0x01)])
    with pytest.raises(ValueError):
        Heartbeat(R1, 1, 0)
    with pytest.raises(ValueError):
        Heartbeat(R1, 2**32, 1)
    with pytest.raises(ValueError):
        Heartbeat(R1, 1, 1, [Entry(2**32, 1, 1, 1)])


@pytest.mark.parametrize(
    ("a", "b", "lt"),
    [
        (0, 1, True),
        (1, 0, False),
        (0xFFFFFFFF, 0, True),  # wrap
        (0, 0xFFFFFFFF, False),
        (5, 5, False),
        (0, 2**31 - 1, True),
        (0, 2**31, False),  # undefined: neither
        (2**31, 0, False),
        (100, 2**31 + 101, False),
        (100, 2**31 + 99, True),
    ],
)
def test_serial_lt(a: int, b: int, lt: bool) -> None:
    assert wire.serial_lt(a, b) is lt
    if a != b and abs(a - b) != 2**31:
        assert wire.serial_gt(b, a) is lt


def test_serial_add() -> None:
    assert wire.serial_add(0xFFFFFFFF, 1) == 0
    assert wire.serial_add(10, 2**31 - 1) == 2**31 + 9
    with pytest.raises(ValueError):
        wire.serial_add(1, 2**31)


def test_node_id_helpers() -> None:
    assert wire.node_id("192.0.2.1") == R1 == wire.node_id(R1)
    assert wire.node_str(R1) == "192.0.2.1"
    with pytest.raises(ValueError):
        wire.node_id(-1)


u32 = st.integers(0, 2**32 - 1)
entries_st = st.builds(
    Entry,
    u32,
    u32,
    u32,
    st.integers(0, 7),
    st.sampled_from([0, 0x80]),
    st.integers(0, 0xFFFF),
    u32,
)
hb_st = st.builds(
    Heartbeat,
    u32,
    u32,
    st.integers(1, 2**32 - 1),
    st.lists(entries_st, max_size=20).map(tuple),
    st.one_of(st.none(), st.builds(Auth, st.integers(0, 255), st.binary(min_size=32, max_size=32))),
)


@given(hb_st)
@settings(max_examples=200, deadline=None)
def test_round_trip(msg: Heartbeat) -> None:
    data = msg.encode()
    assert decode(data) == msg
    assert decode(data).encode() == data


FUZZ_SEEDS = [h(c[1]) for c in CASES] + [h(SIGNED_HEX)]


def _check(data: bytes, m: wire.Heartbeat) -> None:
    if data[18] == wire.ENTRY_LEN:  # re-encoding is byte exact up to the reserved octet
        assert m.encode() == data[:19] + b"\x00" + data[20:]
    json.dumps(m.to_dict())


def _fuzz(n: int, seed: int) -> int:
    return fuzz_codec(
        decode, DecodeError, FUZZ_SEEDS, n, seed, check=_check, random_len=120, max_insert=20
    )[0]


@given(st.binary(max_size=200))
@settings(max_examples=300, deadline=None)
def test_fuzz_arbitrary_short(data: bytes) -> None:
    with contextlib.suppress(DecodeError):
        decode(data)


def test_fuzz_mutation_short() -> None:
    _fuzz(3000, 1)


@pytest.mark.fuzz
def test_fuzz_mutation_100k() -> None:
    assert _fuzz(120_000, 20261122) > 0


def test_vector_file_pins_bytes_and_json_keys() -> None:
    """tests/vectors/heartbeat_v1.jsonl: hex + the exact to_dict() (the glbctl JSON contract)."""
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "vectors" / "heartbeat_v1.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert len(rows) == 3
    for row in rows:
        data = bytes.fromhex(row["hex"])
        msg = decode(data)
        assert msg.to_dict() == row["json"], row["name"]
        assert msg.encode() == data
        if row["secret"] is not None:
            assert wire.verify(data, HmacKey(row["json"]["auth"]["key_id"], row["secret"].encode()))


_entry = st.builds(
    Entry,
    st.integers(0, 3),
    st.integers(0, 2),
    st.sampled_from([10, 100]),
    st.integers(0, 7),
    st.sampled_from([0, wire.ENTRY_FLAG_DOWN]),
    st.integers(0, 10_000),
    st.integers(0, 1 << 20),
)


@given(st.lists(_entry, max_size=6), st.lists(_entry, max_size=6))
@settings(max_examples=300, deadline=None)
def test_entry_keys_are_equal_when_what_weights_use_is_equal(
    a: list[Entry], b: list[Entry]
) -> None:
    """``Entries.key``: ids, capacity, band and flags in order; the load and queue figures,
    which change with every heartbeat, are left out."""

    def used(es: list[Entry]) -> list[tuple[int, ...]]:
        return [(e.far_end_id, e.link_id, e.capacity_mbps, e.band, e.flags) for e in es]

    assert (wire.Entries(a).key() == wire.Entries(b).key()) == (used(a) == used(b))
    calm = [e._replace(load_bp=0, queue_bytes=0) for e in a]
    assert wire.Entries(calm).key() == wire.Entries(a).key()
