"""The heartbeat package's named reasons, shared by the codec, the receiver core, counters,
logs and glbctl.

Members are :class:`enum.StrEnum`: each value is the stable snake_case name the drop counters,
``glbctl heartbeats --json`` and metric labels show.
"""

from __future__ import annotations

import enum

__all__ = ["DecodeReason", "DropReason", "UpdateReason", "malformed"]


class DecodeReason(enum.StrEnum):
    """Why :func:`heartbeat.wire.decode` refused a datagram (check order)."""

    TOO_SHORT = "too_short"
    BAD_MAGIC = "bad_magic"
    BAD_VERSION = "bad_version"
    UNKNOWN_FLAGS = "unknown_flags"
    BAD_ENTRY_LEN = "bad_entry_len"
    BAD_INTERVAL = "bad_interval"
    LENGTH_MISMATCH = "length_mismatch"
    BAD_BAND = "bad_band"
    BAD_ENTRY_FLAGS = "bad_entry_flags"


class DropReason(enum.StrEnum):
    """Why the receiver dropped a datagram (docs/heartbeat.md §3, checklist order). A datagram
    that does not decode counts ``malformed`` and ``malformed_<DecodeReason>``."""

    BAD_TTL = "bad_ttl"
    NO_NEIGHBOR = "no_neighbor"
    MALFORMED = "malformed"
    MALFORMED_TOO_SHORT = "malformed_too_short"
    MALFORMED_BAD_MAGIC = "malformed_bad_magic"
    MALFORMED_BAD_VERSION = "malformed_bad_version"
    MALFORMED_UNKNOWN_FLAGS = "malformed_unknown_flags"
    MALFORMED_BAD_ENTRY_LEN = "malformed_bad_entry_len"
    MALFORMED_BAD_INTERVAL = "malformed_bad_interval"
    MALFORMED_LENGTH_MISMATCH = "malformed_length_mismatch"
    MALFORMED_BAD_BAND = "malformed_bad_band"
    MALFORMED_BAD_ENTRY_FLAGS = "malformed_bad_entry_flags"
    WRONG_SOURCE = "wrong_source"
    WRONG_SENDER = "wrong_sender"
    AUTH_MISSING = "auth_missing"
    AUTH_UNKNOWN_KEY = "auth_unknown_key"
    AUTH_BAD_DIGEST = "auth_bad_digest"
    INTERVAL_TOO_LONG = "interval_too_long"
    STALE_SEQUENCE = "stale_sequence"
    SEQUENCE_JUMP = "sequence_jump"
    #: not from the wire on the socket's interface (a local sender's looped multicast copy):
    #: dropped by the transport's kernel socket filter, counted when the endpoint is read
    LOCAL_ORIGIN = "local_origin"


_MALFORMED = {r: DropReason("malformed_" + r) for r in DecodeReason}


def malformed(reason: DecodeReason) -> DropReason:
    """The ``malformed_<reason>`` drop counted next to ``malformed``."""
    return _MALFORMED[reason]


class UpdateReason(enum.StrEnum):
    """Why a :class:`heartbeat.receiver.RemoteUpdate` was emitted."""

    NEW = "new"
    CHANGED = "changed"
    EXPIRED = "expired"
    NEIGHBOR_REMOVED = "neighbor_removed"
