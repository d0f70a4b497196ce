"""BFD control packet codec (RFC 5880 §4.1-4.4) with the stateless §6.8.6 reception checks.

Wire format (network byte order; RFC 5880 §4.1)::

     0                   1                   2                   3
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |Vers |  Diag   |Sta|P|F|C|A|D|M|  Detect Mult  |    Length     |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                       My Discriminator                        |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                      Your Discriminator                       |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                    Desired Min TX Interval                    |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                   Required Min RX Interval                    |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                 Required Min Echo RX Interval                 |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |   Auth Type   |   Auth Len    |    Authentication Data...     |   (A bit set)
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

Authentication sections (§4.2-4.4): Simple Password = Key ID (1) + password (1-16), Auth Len
3 + len(password); Keyed/Meticulous Keyed MD5 = Key ID, Reserved, Sequence (4), digest (16),
Auth Len 24; Keyed/Meticulous Keyed SHA1 = the same with a 20-byte hash, Auth Len 28.
Digest computation (§6.7.3/§6.7.4): put the key, zero-padded to 16 (MD5) or 20 (SHA1) bytes,
in the digest field, hash the whole packet (``Length`` bytes), then store the hash there.
:func:`sign` and :func:`verify` do that.

:func:`decode` runs the §6.8.6 checks that need no session state, in RFC order, and raises one
:class:`DecodeError` whose ``reason`` is a :class:`bfd.reasons.DropReason` (drop counters use it):

``too_short``, ``bad_version``, ``bad_length``, ``length_exceeds_payload``,
``zero_detect_mult``, ``multipoint``, ``zero_my_discriminator``, ``zero_your_discriminator``
(Your Discriminator 0 while State is Init or Up), ``auth_type_unknown``,
``auth_length_mismatch``, ``auth_without_a_bit`` (Length > 24 with A clear).

Bytes after ``Length`` (UDP padding) are ignored, as the RFC allows. (The transport reads at
most 256 bytes of a datagram, which always holds all ``Length`` <= 255 bytes; a longer
datagram is counted as ``truncated_datagram`` and decoded like any other.)
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import struct
from dataclasses import dataclass, field, replace
from typing import Any

from .reasons import DropReason

__all__ = [
    "AUTH_DIGEST_LEN",
    "HEADER_LEN",
    "VERSION",
    "Auth",
    "AuthType",
    "ControlPacket",
    "DecodeError",
    "Diag",
    "State",
    "compute_digest",
    "decode",
    "encode_plain",
    "sign",
    "verify",
]

VERSION = 1
HEADER_LEN = 24


class State(enum.IntEnum):
    """bfd.SessionState values (§4.1 Sta)."""

    ADMIN_DOWN = 0
    DOWN = 1
    INIT = 2
    UP = 3


class Diag(enum.IntEnum):
    """Diagnostic codes (§4.1)."""

    NONE = 0
    CONTROL_DETECTION_TIME_EXPIRED = 1
    ECHO_FUNCTION_FAILED = 2
    NEIGHBOR_SIGNALED_SESSION_DOWN = 3
    FORWARDING_PLANE_RESET = 4
    PATH_DOWN = 5
    CONCATENATED_PATH_DOWN = 6
    ADMINISTRATIVELY_DOWN = 7
    REVERSE_CONCATENATED_PATH_DOWN = 8


class AuthType(enum.IntEnum):
    """Authentication types (§4.1 Auth Type)."""

    SIMPLE_PASSWORD = 1
    KEYED_MD5 = 2
    METICULOUS_KEYED_MD5 = 3
    KEYED_SHA1 = 4
    METICULOUS_KEYED_SHA1 = 5

    @property
    def meticulous(self) -> bool:
        return self in (AuthType.METICULOUS_KEYED_MD5, AuthType.METICULOUS_KEYED_SHA1)

    @property
    def digest_len(self) -> int:
        """Length of the digest/hash field (0 for simple password)."""
        return AUTH_DIGEST_LEN.get(self, 0)


AUTH_DIGEST_LEN = {
    AuthType.KEYED_MD5: 16,
    AuthType.METICULOUS_KEYED_MD5: 16,
    AuthType.KEYED_SHA1: 20,
    AuthType.METICULOUS_KEYED_SHA1: 20,
}
_HASH = {16: hashlib.md5, 20: hashlib.sha1}

# flags in byte 1
_P, _F, _C, _A, _D, _M = 0x20, 0x10, 0x08, 0x04, 0x02, 0x01
_HDR = struct.Struct("!BBBBIIIII")
_KEYED = struct.Struct("!BBBBI")  # type, len, key id, reserved, sequence


class DecodeError(ValueError):
    """A BFD control packet that fails a stateless reception check (§6.8.6)."""

    def __init__(self, reason: DropReason, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else str(reason))
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Auth:
    """The authentication section.

    For :attr:`AuthType.SIMPLE_PASSWORD`, ``password`` holds the 1-16 byte password and
    ``sequence``/``digest`` are unused. For the keyed types ``digest`` holds the 16 (MD5) or
    20 (SHA1) byte digest and ``password`` is unused. ``reserved`` is kept so that a decoded
    section re-encodes byte for byte (the digest covers it). Secrets stay out of ``repr``.
    """

    type: AuthType
    key_id: int = 0
    sequence: int = 0
    password: bytes = field(default=b"", repr=False)
    digest: bytes = field(default=b"", repr=False)
    reserved: int = 0

    @property
    def length(self) -> int:
        """Auth Len: the length of the whole authentication section."""
        if self.type == AuthType.SIMPLE_PASSWORD:
            return 3 + len(self.password)
        return 8 + self.type.digest_len

    def encode(self) -> bytes:
        t = self.type
        if t == AuthType.SIMPLE_PASSWORD:
            if not 1 <= len(self.password) <= 16:
                raise ValueError("simple password must be 1-16 bytes")
            return bytes((t, self.length, self.key_id)) + self.password
        dl = t.digest_len
        digest = self.digest if self.digest else bytes(dl)
        if len(digest) != dl:
            raise ValueError(f"{t.name} digest must be {dl} bytes")
        return _KEYED.pack(t, self.length, self.key_id, self.reserved, self.sequence) + digest

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"type": self.type.name.lower(), "key_id": self.key_id}
        if self.type == AuthType.SIMPLE_PASSWORD:
            d["password_len"] = len(self.password)  # never the password itself
        else:
            d["sequence"] = self.sequence
            d["digest"] = self.digest.hex()
        return d


@dataclass(frozen=True, slots=True)
class ControlPacket:
    """One BFD control packet. Intervals are in microseconds. The A bit and Length are derived
    from ``auth``; the version is always 1."""

    state: State = State.DOWN
    diag: Diag | int = Diag.NONE
    detect_mult: int = 3
    my_discriminator: int = 1
    your_discriminator: int = 0
    desired_min_tx: int = 1_000_000
    required_min_rx: int = 1_000_000
    required_min_echo_rx: int = 0
    poll: bool = False
    final: bool = False
    cpi: bool = False  # C bit: control plane independent
    demand: bool = False
    multipoint: bool = False
    auth: Auth | None = None

    @property
    def length(self) -> int:
        return HEADER_LEN + (self.auth.length if self.auth is not None else 0)

    @property
    def flags(self) -> int:
        return (
            (_P if self.poll else 0)
            | (_F if self.final else 0)
            | (_C if self.cpi else 0)
            | (_A if self.auth is not None else 0)
            | (_D if self.demand else 0)
            | (_M if self.multipoint else 0)
        )

    def encode(self) -> bytes:
        head = _HDR.pack(
            (VERSION << 5) | (self.diag & 0x1F),
            (self.state << 6) | self.flags,
            self.detect_mult,
            self.length,
            self.my_discriminator,
            self.your_discriminator,
            self.desired_min_tx,
            self.required_min_rx,
            self.required_min_echo_rx,
        )
        if self.auth is None:
            return head
        return head + self.auth.encode()

    def to_dict(self) -> dict[str, Any]:
        try:
            diag_name = Diag(self.diag).name.lower()
        except ValueError:
            diag_name = f"reserved_{int(self.diag)}"
        return {
            "version": VERSION,
            "diag": int(self.diag),
            "diag_name": diag_name,
            "state": State(self.state).name.lower(),
            "poll": self.poll,
            "final": self.final,
            "cpi": self.cpi,
            "auth_present": self.auth is not None,
            "demand": self.demand,
            "multipoint": self.multipoint,
            "detect_mult": self.detect_mult,
            "length": self.length,
            "my_discriminator": self.my_discriminator,
            "your_discriminator": self.your_discriminator,
            "desired_min_tx_us": self.desired_min_tx,
            "required_min_rx_us": self.required_min_rx,
            "required_min_echo_rx_us": self.required_min_echo_rx,
            "auth": self.auth.to_dict() if self.auth is not None else None,
        }


_STATES = tuple(State)
_DIAGS: tuple[Diag | int, ...] = tuple(
    Diag(i) if i in Diag._value2member_map_ else i for i in range(32)
)


def encode_plain(
    state: int,
    diag: int,
    detect_mult: int,
    my_discriminator: int,
    your_discriminator: int,
    desired_min_tx: int,
    required_min_rx: int,
    *,
    poll: bool = False,
    final: bool = False,
    cpi: bool = False,
) -> bytes:
    """``ControlPacket(...).encode()`` for a packet without authentication, Demand, Multipoint
    or Required Min Echo RX Interval, without building the object: the engine sends one per
    state change, hundreds at once when a link carrying many sessions fails."""
    return _HDR.pack(
        (VERSION << 5) | (diag & 0x1F),
        (state << 6) | (_P if poll else 0) | (_F if final else 0) | (_C if cpi else 0),
        detect_mult,
        HEADER_LEN,
        my_discriminator,
        your_discriminator,
        desired_min_tx,
        required_min_rx,
        0,
    )


def decode(data: bytes) -> ControlPacket:
    """Decode one control packet (the UDP payload), running the stateless §6.8.6 checks."""
    n = len(data)
    if n < HEADER_LEN:
        raise DecodeError(DropReason.TOO_SHORT, f"{n} bytes < {HEADER_LEN}")
    b0, b1, mult, length, my, your, dtx, rrx, recho = _HDR.unpack_from(data)
    if b0 >> 5 != VERSION:
        raise DecodeError(DropReason.BAD_VERSION, str(b0 >> 5))
    a = b1 & _A
    if length < HEADER_LEN or (a and length < HEADER_LEN + 2):
        raise DecodeError(DropReason.BAD_LENGTH, str(length))
    if length > n:
        raise DecodeError(DropReason.LENGTH_EXCEEDS_PAYLOAD, f"length {length} > {n} bytes")
    if mult == 0:
        raise DecodeError(DropReason.ZERO_DETECT_MULT)
    if b1 & _M:
        raise DecodeError(DropReason.MULTIPOINT)
    if my == 0:
        raise DecodeError(DropReason.ZERO_MY_DISCRIMINATOR)
    state = _STATES[b1 >> 6]
    if your == 0 and state >= State.INIT:
        raise DecodeError(DropReason.ZERO_YOUR_DISCRIMINATOR, f"state {state.name}")
    auth = None
    if a:
        auth = _decode_auth(data, length)
    elif length != HEADER_LEN:
        raise DecodeError(DropReason.AUTH_WITHOUT_A_BIT, f"length {length}")
    return ControlPacket(
        state,
        _DIAGS[b0 & 0x1F],
        mult,
        my,
        your,
        dtx,
        rrx,
        recho,
        bool(b1 & _P),
        bool(b1 & _F),
        bool(b1 & _C),
        bool(b1 & _D),
        False,
        auth,
    )


def _decode_auth(data: bytes, length: int) -> Auth:
    atype, alen = data[24], data[25]
    if HEADER_LEN + alen != length:
        raise DecodeError(
            DropReason.AUTH_LENGTH_MISMATCH, f"auth len {alen}, packet length {length}"
        )
    try:
        t = AuthType(atype)
    except ValueError:
        raise DecodeError(DropReason.AUTH_TYPE_UNKNOWN, str(atype)) from None
    if t == AuthType.SIMPLE_PASSWORD:
        if not 4 <= alen <= 19:
            raise DecodeError(DropReason.AUTH_LENGTH_MISMATCH, f"simple password auth len {alen}")
        return Auth(t, data[26], password=bytes(data[27:length]))
    if alen != 8 + t.digest_len:
        raise DecodeError(DropReason.AUTH_LENGTH_MISMATCH, f"{t.name} auth len {alen}")
    _, _, key_id, reserved, seq = _KEYED.unpack_from(data, 24)
    return Auth(t, key_id, seq, digest=bytes(data[32:length]), reserved=reserved)


def compute_digest(pkt: ControlPacket, key: bytes) -> bytes:
    """The MD5/SHA1 digest of ``pkt`` under ``key`` (§6.7.3, §6.7.4): the key, zero-padded to
    the digest length, stands in the digest field while the whole packet is hashed."""
    if pkt.auth is None or pkt.auth.type == AuthType.SIMPLE_PASSWORD:
        raise ValueError("packet has no keyed authentication section")
    dl = pkt.auth.type.digest_len
    if len(key) > dl:
        raise ValueError(f"{pkt.auth.type.name} key longer than {dl} bytes")
    stand_in = replace(pkt, auth=replace(pkt.auth, digest=key.ljust(dl, b"\0")))
    return _HASH[dl](stand_in.encode()).digest()


def sign(pkt: ControlPacket, key: bytes) -> ControlPacket:
    """``pkt`` with its digest filled in (a simple-password packet is returned unchanged)."""
    if pkt.auth is None or pkt.auth.type == AuthType.SIMPLE_PASSWORD:
        return pkt
    return replace(pkt, auth=replace(pkt.auth, digest=compute_digest(pkt, key)))


def verify(pkt: ControlPacket, key: bytes) -> bool:
    """Whether the password/digest in ``pkt`` matches ``key`` (constant-time compare)."""
    if pkt.auth is None:
        return False
    if pkt.auth.type == AuthType.SIMPLE_PASSWORD:
        return hmac.compare_digest(pkt.auth.password, key)
    if len(key) > pkt.auth.type.digest_len:
        return False
    return hmac.compare_digest(compute_digest(pkt, key), pkt.auth.digest)
