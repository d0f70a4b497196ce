"""BFD control packet codec: golden vectors both ways (FRR captures and constructed), digest
computation checked by hand, the §6.8.6 stateless checks by name, scapy cross-check, hypothesis
round trip and fuzz."""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
import struct
from dataclasses import replace
from pathlib import Path

import pytest
from fuzzing import fuzz_codec
from hypothesis import given, settings
from hypothesis import strategies as st

from bfd import packet
from bfd.packet import Auth, AuthType, ControlPacket, DecodeError, Diag, State
from bfd.reasons import DropReason

VECTORS = Path(__file__).resolve().parent.parent / "vectors"

FRR84_INIT = "208003182b4550d71ed7609d000f4240000f42400000c350"

GOLDEN: list[tuple[str, ControlPacket]] = [
    # FRR 8.4.4 bfdd, first packet (captured in a namespace): Init, 1 s slow timers, echo 50 ms
    (
        FRR84_INIT,
        ControlPacket(
            state=State.INIT,
            detect_mult=3,
            my_discriminator=725962967,
            your_discriminator=517431453,
            desired_min_tx=1_000_000,
            required_min_rx=1_000_000,
            required_min_echo_rx=50_000,
        ),
    ),
    # FRR 10.7.1 bfdd, first packet (tests/vectors/frr10_bfd.json): Down, Your Discr 0
    (
        "204003182b95853200000000000f4240000f42400000c350",
        ControlPacket(
            State.DOWN,
            my_discriminator=731219250,
            desired_min_tx=1_000_000,
            required_min_rx=1_000_000,
            required_min_echo_rx=50_000,
        ),
    ),
    # Down, Your Discriminator 0 (first packet of a session)
    (
        "204003180000000100000000000f42400000c35000000000",
        ControlPacket(State.DOWN, my_discriminator=1, required_min_rx=50_000),
    ),
    # AdminDown with diag 7 (§6.8.16)
    (
        "270003180000000a0000000b000f4240000f424000000000",
        ControlPacket(
            State.ADMIN_DOWN,
            Diag.ADMINISTRATIVELY_DOWN,
            my_discriminator=10,
            your_discriminator=11,
        ),
    ),
    # Up + Poll + C bit, 50 ms
    (
        "20e8031800000001000000020000c3500000c35000000000",
        ControlPacket(
            State.UP,
            my_discriminator=1,
            your_discriminator=2,
            desired_min_tx=50_000,
            required_min_rx=50_000,
            poll=True,
            cpi=True,
        ),
    ),
    # Up + Final, detect mult 5, diag 1 (control detection time expired kept after recovery)
    (
        "21d005180000000200000001000027100000271000000000",
        ControlPacket(
            State.UP, Diag.CONTROL_DETECTION_TIME_EXPIRED, 5, 2, 1, 10_000, 10_000, final=True
        ),
    ),
    # simple password "secret", key id 1
    (
        "204403210000000100000000000f4240000f424000000000010901" + b"secret".hex(),
        ControlPacket(
            State.DOWN,
            my_discriminator=1,
            required_min_rx=1_000_000,
            auth=Auth(AuthType.SIMPLE_PASSWORD, 1, password=b"secret"),
        ),
    ),
]


def _keyed_hex(atype: int, dlen: int, key: bytes, seq: int) -> tuple[str, bytes]:
    """A keyed-auth packet built and hashed by hand (RFC 5880 §6.7.3/§6.7.4)."""
    alen = 8 + dlen
    head = struct.pack("!BBBBIIIII", 0x20, 0xC4, 3, 24 + alen, 7, 9, 50_000, 50_000, 0)
    sect = struct.pack("!BBBBI", atype, alen, 2, 0, seq)
    h = hashlib.md5 if dlen == 16 else hashlib.sha1
    digest = h(head + sect + key.ljust(dlen, b"\0")).digest()
    return (head + sect + digest).hex(), digest


@pytest.mark.parametrize("hexstr,obj", GOLDEN)
def test_golden_decode(hexstr: str, obj: ControlPacket) -> None:
    assert packet.decode(bytes.fromhex(hexstr)) == obj


@pytest.mark.parametrize("hexstr,obj", GOLDEN)
def test_golden_encode(hexstr: str, obj: ControlPacket) -> None:
    assert obj.encode().hex() == hexstr


@pytest.mark.parametrize(
    "atype",
    [
        AuthType.KEYED_MD5,
        AuthType.METICULOUS_KEYED_MD5,
        AuthType.KEYED_SHA1,
        AuthType.METICULOUS_KEYED_SHA1,
    ],
)
def test_keyed_digest_matches_hand_computation(atype: AuthType) -> None:
    key = b"glbd-key"
    hexstr, digest = _keyed_hex(atype, atype.digest_len, key, 0x01020304)
    unsigned = ControlPacket(
        State.UP,
        detect_mult=3,
        my_discriminator=7,
        your_discriminator=9,
        desired_min_tx=50_000,
        required_min_rx=50_000,
        auth=Auth(atype, key_id=2, sequence=0x01020304),
    )
    signed = packet.sign(unsigned, key)
    assert signed.encode().hex() == hexstr
    assert signed.auth is not None and signed.auth.digest == digest
    got = packet.decode(bytes.fromhex(hexstr))
    assert got == signed
    assert packet.verify(got, key)
    assert not packet.verify(got, b"other")
    # any change to the covered bytes breaks it
    assert got.auth is not None
    assert not packet.verify(
        ControlPacket(**{**_fields(got), "auth": Auth(atype, 2, 0x01020305, digest=digest)}), key
    )


def _fields(p: ControlPacket) -> dict[str, object]:
    return {f: getattr(p, f) for f in ControlPacket.__dataclass_fields__}


def test_simple_password_verify_and_repr_hides_secrets() -> None:
    p = GOLDEN[-1][1]
    assert packet.verify(p, b"secret")
    assert not packet.verify(p, b"Secret")
    assert "secret" not in repr(p)
    assert "secret" not in json.dumps(p.to_dict())
    keyed = packet.sign(ControlPacket(auth=Auth(AuthType.KEYED_SHA1, 1, 5)), b"k")
    assert keyed.auth is not None and keyed.auth.digest.hex() not in repr(keyed)


def test_to_dict_frr_packet() -> None:
    d = packet.decode(bytes.fromhex(FRR84_INIT)).to_dict()
    assert d == {
        "version": 1,
        "diag": 0,
        "diag_name": "none",
        "state": "init",
        "poll": False,
        "final": False,
        "cpi": False,
        "auth_present": False,
        "demand": False,
        "multipoint": False,
        "detect_mult": 3,
        "length": 24,
        "my_discriminator": 725962967,
        "your_discriminator": 517431453,
        "desired_min_tx_us": 1_000_000,
        "required_min_rx_us": 1_000_000,
        "required_min_echo_rx_us": 50_000,
        "auth": None,
    }
    json.dumps(d)


def test_trailing_padding_ignored() -> None:
    assert packet.decode(bytes.fromhex(FRR84_INIT) + b"\0\0\0\0") == GOLDEN[0][1]


def test_frr10_capture_file() -> None:
    """tests/vectors/frr10_bfd.json: FRR 10.7 bfdd's first packet, captured by glbdlab.capture."""
    f = VECTORS / "frr10_bfd.json"
    if not f.exists():
        pytest.skip("tests/vectors/frr10_bfd.json not captured yet")
    doc = json.loads(f.read_text())
    assert doc["ttl"] == 255  # RFC 5881 §5
    raw = bytes.fromhex(doc["udp_payload_hex"])
    p = packet.decode(raw)
    assert p.encode() == raw
    want = doc["decoded"]
    flags = {
        "P": p.poll,
        "F": p.final,
        "C": p.cpi,
        "A": p.auth is not None,
        "D": p.demand,
        "M": p.multipoint,
    }
    assert (1, int(p.diag), State(p.state).name.lower(), flags) == (
        want["version"],
        want["diag"],
        want["state"].lower(),
        want["flags"],
    )
    d = p.to_dict()
    for k in (
        "detect_mult",
        "length",
        "my_discriminator",
        "your_discriminator",
        "desired_min_tx_us",
        "required_min_rx_us",
        "required_min_echo_rx_us",
    ):
        assert d[k] == want[k], k


def _h(s: str) -> bytes:
    return bytes.fromhex(s.replace(" ", ""))


BASE = "20400318 00000001 00000000 000f4240 000f4240 00000000"

ERRORS = [
    ("2040031800000001", "too_short"),
    ("40400318 00000001 00000000 000f4240 000f4240 00000000", "bad_version"),
    ("20400317 00000001 00000000 000f4240 000f4240 00000000", "bad_length"),
    ("20440319 00000001 00000000 000f4240 000f4240 00000000 01", "bad_length"),
    ("2040031c 00000001 00000000 000f4240 000f4240 00000000", "length_exceeds_payload"),
    ("20400018 00000001 00000000 000f4240 000f4240 00000000", "zero_detect_mult"),
    ("20410318 00000001 00000000 000f4240 000f4240 00000000", "multipoint"),
    ("20400318 00000000 00000000 000f4240 000f4240 00000000", "zero_my_discriminator"),
    ("20c00318 00000001 00000000 000f4240 000f4240 00000000", "zero_your_discriminator"),
    ("20800318 00000001 00000000 000f4240 000f4240 00000000", "zero_your_discriminator"),
    ("2040031c 00000001 00000000 000f4240 000f4240 00000000 01020304", "auth_without_a_bit"),
    ("2044031c 00000001 00000000 000f4240 000f4240 00000000 01050161", "auth_length_mismatch"),
    ("2044031c 00000001 00000000 000f4240 000f4240 00000000 09040161", "auth_type_unknown"),
    ("2044031b 00000001 00000000 000f4240 000f4240 00000000 010301", "auth_length_mismatch"),
    (
        "2044032c 00000001 00000000 000f4240 000f4240 00000000 0214" + "00" * 18,
        "auth_length_mismatch",
    ),
]


@pytest.mark.parametrize("hexstr,reason", ERRORS)
def test_stateless_checks(hexstr: str, reason: str) -> None:
    with pytest.raises(DecodeError) as ei:
        packet.decode(_h(hexstr))
    assert ei.value.reason == reason
    assert isinstance(ei.value.reason, DropReason)
    assert issubclass(DecodeError, ValueError)  # glbctl decode catches ValueError


def test_down_and_admin_down_may_have_zero_your_discriminator() -> None:
    assert packet.decode(_h(BASE)).your_discriminator == 0
    assert packet.decode(_h("20000318" + BASE[9:].replace(" ", ""))).state == State.ADMIN_DOWN


# ----------------------------------------------------------------------------- scapy


def _scapy():
    return pytest.importorskip("scapy.contrib.bfd")


@pytest.mark.parametrize("hexstr,obj", GOLDEN[:-1])
def test_scapy_decodes_our_bytes(hexstr: str, obj: ControlPacket) -> None:
    s = _scapy().BFD(bytes.fromhex(hexstr))
    assert s.version == 1
    assert s.diag == obj.diag
    assert s.sta == obj.state
    assert int(s.flags) == obj.flags
    assert s.detect_mult == obj.detect_mult
    assert s.len == obj.length
    assert s.my_discriminator == obj.my_discriminator
    assert s.your_discriminator == obj.your_discriminator
    assert s.min_tx_interval == obj.desired_min_tx
    assert s.min_rx_interval == obj.required_min_rx
    assert s.echo_rx_interval == obj.required_min_echo_rx


def test_scapy_built_packets_decode() -> None:
    m = _scapy()
    rng = random.Random(5)
    for _ in range(200):
        sta = rng.randrange(4)
        your = rng.randrange(1, 2**32) if sta >= 2 else rng.choice([0, rng.randrange(2**32)])
        flags = rng.randrange(64) & ~0x05  # no M, no A
        s = m.BFD(
            diag=rng.randrange(32),
            sta=sta,
            flags=flags,
            detect_mult=rng.randrange(1, 256),
            my_discriminator=rng.randrange(1, 2**32),
            your_discriminator=your,
            min_tx_interval=rng.randrange(2**32),
            min_rx_interval=rng.randrange(2**32),
            echo_rx_interval=rng.randrange(2**32),
        )
        raw = bytes(s)
        p = packet.decode(raw)
        assert p.encode() == raw
        assert (p.state, int(p.diag), p.flags) == (sta, s.diag, flags)
        assert (p.my_discriminator, p.your_discriminator) == (
            s.my_discriminator,
            s.your_discriminator,
        )
        assert (p.desired_min_tx, p.required_min_rx, p.required_min_echo_rx) == (
            s.min_tx_interval,
            s.min_rx_interval,
            s.echo_rx_interval,
        )


def test_scapy_keyed_sha1_layout() -> None:
    m = _scapy()
    ours = packet.sign(
        ControlPacket(
            State.UP,
            my_discriminator=7,
            your_discriminator=9,
            auth=Auth(AuthType.METICULOUS_KEYED_SHA1, 3, 77),
        ),
        b"k",
    )
    s = m.BFD(ours.encode())
    a = s.optional_auth
    assert (s.len, a.auth_type, a.auth_len, a.auth_keyid, a.sequence_number) == (52, 5, 28, 3, 77)
    assert ours.auth is not None
    assert a.auth_key == int.from_bytes(ours.auth.digest, "big")
    assert bytes(s) == ours.encode()


# ----------------------------------------------------------------------------- properties

u32 = st.integers(0, 2**32 - 1)
auths = st.one_of(
    st.none(),
    st.builds(
        Auth,
        st.just(AuthType.SIMPLE_PASSWORD),
        st.integers(0, 255),
        password=st.binary(min_size=1, max_size=16),
    ),
    st.sampled_from([t for t in AuthType if t != AuthType.SIMPLE_PASSWORD]).flatmap(
        lambda t: st.builds(
            Auth,
            st.just(t),
            st.integers(0, 255),
            u32,
            digest=st.binary(min_size=t.digest_len, max_size=t.digest_len),
            reserved=st.integers(0, 255),
        )
    ),
)


@st.composite
def packets(draw: st.DrawFn) -> ControlPacket:
    state = draw(st.sampled_from(list(State)))
    your = draw(st.integers(1, 2**32 - 1) if state >= State.INIT else u32)
    diag = draw(st.integers(0, 31))
    return ControlPacket(
        state=state,
        diag=Diag(diag) if diag <= 8 else diag,
        detect_mult=draw(st.integers(1, 255)),
        my_discriminator=draw(st.integers(1, 2**32 - 1)),
        your_discriminator=your,
        desired_min_tx=draw(u32),
        required_min_rx=draw(u32),
        required_min_echo_rx=draw(u32),
        poll=draw(st.booleans()),
        final=draw(st.booleans()),
        cpi=draw(st.booleans()),
        demand=draw(st.booleans()),
        auth=draw(auths),
    )


@given(packets())
@settings(max_examples=300)
def test_round_trip(p: ControlPacket) -> None:
    raw = p.encode()
    assert len(raw) == p.length
    got = packet.decode(raw)
    assert got == p
    assert got.encode() == raw
    json.dumps(got.to_dict())


@given(packets())
@settings(max_examples=300)
def test_encode_plain_is_the_objects_encoding(p: ControlPacket) -> None:
    plain = replace(p, auth=None, demand=False, multipoint=False, required_min_echo_rx=0)
    assert (
        packet.encode_plain(
            plain.state,
            plain.diag,
            plain.detect_mult,
            plain.my_discriminator,
            plain.your_discriminator,
            plain.desired_min_tx,
            plain.required_min_rx,
            poll=plain.poll,
            final=plain.final,
            cpi=plain.cpi,
        )
        == plain.encode()
    )


SEEDS = [bytes.fromhex(h) for h, _ in GOLDEN] + [
    bytes.fromhex(_keyed_hex(t, t.digest_len, b"k", 1)[0])
    for t in (AuthType.KEYED_MD5, AuthType.METICULOUS_KEYED_SHA1)
]


def _check(data: bytes, got: packet.ControlPacket) -> None:
    assert got.encode() == data[: got.length]
    got.to_dict()


def _fuzz(n: int, seed: int) -> int:
    return fuzz_codec(packet.decode, DecodeError, SEEDS, n, seed, check=_check)[0]


@given(st.binary(max_size=64))
@settings(max_examples=300)
def test_fuzz_arbitrary_bytes(data: bytes) -> None:
    with contextlib.suppress(DecodeError):
        packet.decode(data)


def test_fuzz_mutations_short() -> None:
    assert _fuzz(3000, 1) > 0


@pytest.mark.fuzz
def test_fuzz_mutations_100k() -> None:
    assert _fuzz(120_000, 2026) > 0
