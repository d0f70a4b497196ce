"""glbd heartbeat v1: the link-quality message a helper floods to its fabric neighbours.

Full description, rationale and examples: ``docs/heartbeat.md``. Network byte order.

Header (20 octets)::

     0                   1                   2                   3
     0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |  Magic 0x47 'G' |  Magic 0x48 'H' |   Version=1   |A|  Flags=0  |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                  Sender node id (BGP identifier)              |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                 Sequence number (RFC 1982, 32 bit)            |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |              Advertised transmit interval (microseconds)      |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |          Entry count          |  Entry length |   Reserved    |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

Entry (Entry length octets, 20 in v1; a receiver reads the first 20 and skips the rest)::

    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                 Far-end node id (BGP identifier)              |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                  Link id (sender-local, e.g. ifindex)         |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                     Capacity (Mbit/s)                         |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |0 0 0 0 0| Band|D|0 0 0 0 0 0 0|   Load (1/100 %, saturating)  |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
    |                     Queue (bytes of backlog)                  |
    +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+

Authentication trailer (present iff flag A): Key id (1 octet), then HMAC-SHA256 (32 octets) over
every octet before the HMAC (header, entries and key id).

Speed: ``decode`` validates everything with a constant number of C-level operations (struct,
byte slicing) and keeps the entries as an :class:`Entries` view over the datagram; entries become
:class:`Entry` tuples only when read. A 64-entry message decodes at well over 50k messages/s.
"""

from __future__ import annotations

import array
import hashlib
import hmac
import ipaddress
import struct
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, overload

from .reasons import DecodeReason

__all__ = [
    "AUTH_TRAILER_LEN",
    "ENTRY_LEN",
    "FLAG_AUTH",
    "HEADER_LEN",
    "MAGIC",
    "MAX_ENTRIES",
    "VERSION",
    "Auth",
    "DecodeError",
    "Entries",
    "Entry",
    "Heartbeat",
    "HmacKey",
    "decode",
    "node_id",
    "node_str",
    "serial_add",
    "serial_gt",
    "serial_lt",
    "verify",
]

MAGIC = b"GH"
VERSION = 1
FLAG_AUTH = 0x80
ENTRY_FLAG_DOWN = 0x80
MAX_BAND = 7

_HEADER = struct.Struct("!2sBBIIIHBB")
_ENTRY = struct.Struct("!IIIBBHI")
HEADER_LEN = _HEADER.size  # 20
ENTRY_LEN = _ENTRY.size  # 20
DIGEST_LEN = 32
AUTH_TRAILER_LEN = 1 + DIGEST_LEN
MAX_ENTRIES = 0xFFFF
_BAND_OFF = 12
_FLAGS_OFF = 13
#: an entry's weight-relevant octets (up to the flags), the load and queue figures skipped
_KEY = struct.Struct(f"{_FLAGS_OFF + 1}s{ENTRY_LEN - _FLAGS_OFF - 1}x")
_OK_ENTRY_FLAGS = bytes((0, ENTRY_FLAG_DOWN))

SERIAL_BITS = 32
_SERIAL_MOD = 1 << SERIAL_BITS
_SERIAL_HALF = 1 << (SERIAL_BITS - 1)


class DecodeError(ValueError):
    """A heartbeat that cannot be decoded. ``reason`` names the failed check."""

    def __init__(self, reason: DecodeReason, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else str(reason))
        self.reason = reason
        self.detail = detail


# --- RFC 1982 serial number arithmetic (SERIAL_BITS = 32) ------------------------------------


def serial_add(s: int, n: int) -> int:
    """``s + n`` in serial space; RFC 1982 §3.1 allows 0 <= n <= 2**31 - 1."""
    if not 0 <= n < _SERIAL_HALF:
        raise ValueError(f"serial addition of {n} is undefined (0 <= n < 2**31)")
    return (s + n) % _SERIAL_MOD


def serial_lt(a: int, b: int) -> bool:
    """RFC 1982 §3.2: ``a < b``. False both ways when the distance is exactly 2**31."""
    return a != b and ((a < b and b - a < _SERIAL_HALF) or (a > b and a - b > _SERIAL_HALF))


def serial_gt(a: int, b: int) -> bool:
    """RFC 1982 §3.2: ``a > b``."""
    return serial_lt(b, a)


# --- node ids ---------------------------------------------------------------------------------


def node_id(value: int | str | ipaddress.IPv4Address) -> int:
    """A BGP identifier as a 32-bit int (accepts int, dotted quad or IPv4Address)."""
    if isinstance(value, int):
        if not 0 <= value <= 0xFFFFFFFF:
            raise ValueError(f"node id {value} out of range")
        return value
    return int(ipaddress.IPv4Address(value))


def node_str(value: int) -> str:
    """Dotted-quad form of a 32-bit node id."""
    return str(ipaddress.IPv4Address(value))


# --- message ----------------------------------------------------------------------------------


class Entry(NamedTuple):
    """One monitored link of the sender. Field order is the wire order."""

    far_end_id: int
    link_id: int
    capacity_mbps: int
    band: int
    flags: int = 0
    load_bp: int = 0
    queue_bytes: int = 0

    @property
    def down(self) -> bool:
        return bool(self.flags & ENTRY_FLAG_DOWN)

    @property
    def load_pct(self) -> float:
        return self.load_bp / 100.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "far_end_id": node_str(self.far_end_id),
            "link_id": self.link_id,
            "capacity_mbps": self.capacity_mbps,
            "band": self.band,
            "down": self.down,
            "load_pct": self.load_bp / 100.0,
            "queue_bytes": self.queue_bytes,
        }


_entry_make = Entry._make


class Entries(Sequence[Entry]):
    """Immutable sequence of entries backed by their packed v1 bytes (``raw``)."""

    __slots__ = ("_n", "raw")

    def __init__(self, entries: Iterable[Entry] = ()) -> None:
        pack = _ENTRY.pack
        try:
            raw = b"".join(
                pack(
                    e.far_end_id,
                    e.link_id,
                    e.capacity_mbps,
                    e.band,
                    e.flags,
                    e.load_bp,
                    e.queue_bytes,
                )
                for e in entries
            )
        except struct.error as e:
            raise ValueError(f"entry field out of range: {e}") from None
        if max(raw[_BAND_OFF::ENTRY_LEN], default=0) > MAX_BAND:
            raise ValueError("band out of range 0..7")
        if raw[_FLAGS_OFF::ENTRY_LEN].translate(None, _OK_ENTRY_FLAGS):
            raise ValueError("entry flags: only the down bit (0x80) is defined")
        self.raw = raw
        self._n = len(raw) // ENTRY_LEN

    @classmethod
    def _from_raw(cls, raw: bytes) -> Entries:
        self = cls.__new__(cls)
        self.raw = raw
        self._n = len(raw) // ENTRY_LEN
        return self

    def __len__(self) -> int:
        return self._n

    def key(self) -> bytes:
        """The octets that matter for weights (ids, capacity, band, down flag) of every entry,
        without the raw load/queue figures: equal keys mean equal weights. The receiver takes
        it for every heartbeat: one fixed struct over the entries, nothing built per count."""
        return b"".join([k for (k,) in _KEY.iter_unpack(self.raw)])

    def max_queue_delay_us(self) -> float:
        """The longest time any of these links needs to drain its reported backlog: the
        largest queue over the smallest non-zero capacity (an upper bound, read column-wise
        from the packed bytes so that a 128-entry message costs microseconds)."""
        if not self._n:
            return 0.0
        words = array.array("I", self.raw)
        if sys.byteorder == "little":
            words.byteswap()
        queue = max(words[4::5])
        if not queue:
            return 0.0
        caps = [c for c in words[2::5] if c]
        return queue * 8 / min(caps) if caps else 0.0

    @overload
    def __getitem__(self, i: int) -> Entry: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Entry]: ...
    def __getitem__(self, i: int | slice) -> Entry | Sequence[Entry]:
        if isinstance(i, slice):
            return tuple(self)[i]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("entry index out of range")
        return _entry_make(_ENTRY.unpack_from(self.raw, i * ENTRY_LEN))

    def __iter__(self) -> Iterator[Entry]:
        return map(_entry_make, _ENTRY.iter_unpack(self.raw))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Entries):
            return self.raw == other.raw
        if isinstance(other, Sequence):
            return tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.raw)

    def __repr__(self) -> str:
        return f"Entries({list(self)!r})"


@dataclass(frozen=True, slots=True)
class Auth:
    """The authentication trailer of a decoded (or pre-signed) message."""

    key_id: int
    digest: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class HmacKey:
    """A configured HMAC-SHA256 key. The secret never appears in repr."""

    key_id: int
    secret: bytes = field(repr=False)
    _keyed: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not 0 <= self.key_id <= 255:
            raise ValueError("key_id must be 0..255")
        if not self.secret:
            raise ValueError("empty HMAC secret")
        # the keyed inner/outer states, copied per message (saves the key schedule)
        object.__setattr__(self, "_keyed", hmac.new(self.secret, digestmod=hashlib.sha256))

    def digest(self, data: bytes) -> bytes:
        h = self._keyed.copy()
        h.update(data)
        d: bytes = h.digest()
        return d


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A heartbeat v1 message. ``entries`` may be given as any sequence of :class:`Entry`."""

    sender_id: int
    sequence: int
    interval_us: int
    entries: Sequence[Entry] = ()
    auth: Auth | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.entries, Entries):
            object.__setattr__(self, "entries", Entries(self.entries))
        if len(self.entries) > MAX_ENTRIES:
            raise ValueError(f"more than {MAX_ENTRIES} entries")
        if not 0 < self.interval_us <= 0xFFFFFFFF:
            raise ValueError("interval_us must be 1..2**32-1")
        if not 0 <= self.sender_id <= 0xFFFFFFFF or not 0 <= self.sequence <= 0xFFFFFFFF:
            raise ValueError("sender_id and sequence are 32-bit unsigned")
        if self.auth is not None and (
            not 0 <= self.auth.key_id <= 255 or len(self.auth.digest) != DIGEST_LEN
        ):
            raise ValueError("auth: key_id 0..255 and a 32-octet digest")

    @property
    def interval_s(self) -> float:
        return self.interval_us / 1e6

    def encode(self, key: HmacKey | None = None) -> bytes:
        """Wire bytes. With ``key`` the message is signed; without, an existing ``auth`` trailer
        (from ``decode``) is re-emitted as it was."""
        entries = self.entries
        assert isinstance(entries, Entries)
        auth = key is not None or self.auth is not None
        head = _HEADER.pack(
            MAGIC,
            VERSION,
            FLAG_AUTH if auth else 0,
            self.sender_id,
            self.sequence,
            self.interval_us,
            len(entries),
            ENTRY_LEN,
            0,
        )
        if key is not None:
            signed = head + entries.raw + bytes((key.key_id,))
            return signed + key.digest(signed)
        if self.auth is not None:
            return head + entries.raw + bytes((self.auth.key_id,)) + self.auth.digest
        return head + entries.raw

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "sender_id": node_str(self.sender_id),
            "sequence": self.sequence,
            "interval_us": self.interval_us,
            "entry_count": len(self.entries),
            "entries": [e.to_dict() for e in self.entries],
            "auth": None
            if self.auth is None
            else {"key_id": self.auth.key_id, "digest": self.auth.digest.hex()},
        }


_unpack_header = _HEADER.unpack_from


def decode(data: bytes) -> Heartbeat:
    """Decode one datagram. Raises only :class:`DecodeError`. Does not verify the HMAC
    (see :func:`verify`)."""
    n = len(data)
    if n < HEADER_LEN:
        raise DecodeError(DecodeReason.TOO_SHORT, f"{n} < {HEADER_LEN} octets")
    magic, version, flags, sender, seq, interval, count, elen, _res = _unpack_header(data)
    if magic != MAGIC:
        raise DecodeError(DecodeReason.BAD_MAGIC, magic.hex())
    if version != VERSION:
        raise DecodeError(DecodeReason.BAD_VERSION, str(version))
    if flags & ~FLAG_AUTH:
        raise DecodeError(DecodeReason.UNKNOWN_FLAGS, f"0x{flags:02x}")
    if elen < ENTRY_LEN:
        raise DecodeError(DecodeReason.BAD_ENTRY_LEN, f"{elen} < {ENTRY_LEN}")
    if interval == 0:
        raise DecodeError(DecodeReason.BAD_INTERVAL, "0")
    body_end = HEADER_LEN + count * elen
    expected = body_end + (AUTH_TRAILER_LEN if flags else 0)
    if n != expected:
        raise DecodeError(DecodeReason.LENGTH_MISMATCH, f"{n} octets, header implies {expected}")
    bdata = bytes(data)
    if elen == ENTRY_LEN:
        raw = bdata[HEADER_LEN:body_end]
    else:  # a future version's longer entries: keep the v1 prefix of each
        raw = b"".join(bdata[off : off + ENTRY_LEN] for off in range(HEADER_LEN, body_end, elen))
    if count:
        if max(raw[_BAND_OFF::ENTRY_LEN]) > MAX_BAND:
            raise DecodeError(DecodeReason.BAD_BAND, "band above 7")
        if raw[_FLAGS_OFF::ENTRY_LEN].translate(None, _OK_ENTRY_FLAGS):
            raise DecodeError(DecodeReason.BAD_ENTRY_FLAGS, "only the down bit (0x80) is defined")
    auth = Auth(bdata[body_end], bdata[body_end + 1 :]) if flags else None
    hb = object.__new__(Heartbeat)
    object.__setattr__(hb, "sender_id", sender)
    object.__setattr__(hb, "sequence", seq)
    object.__setattr__(hb, "interval_us", interval)
    object.__setattr__(hb, "entries", Entries._from_raw(raw))
    object.__setattr__(hb, "auth", auth)
    return hb


def verify(data: bytes, key: HmacKey) -> bool:
    """True when ``data`` (a whole datagram that decoded with an auth trailer whose key id is
    ``key.key_id``) carries a correct HMAC-SHA256."""
    if len(data) < HEADER_LEN + AUTH_TRAILER_LEN or data[-AUTH_TRAILER_LEN] != key.key_id:
        return False
    return hmac.compare_digest(key.digest(bytes(data[:-DIGEST_LEN])), data[-DIGEST_LEN:])
