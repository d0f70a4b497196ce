"""BFD's named reasons: one :class:`enum.StrEnum` per kind, shared by the codec, the session
core, the engine's counters, logs and glbctl.

Each member's value is the stable snake_case name that drop counters, ``glbctl --json`` and
metric labels show, so a member can stand wherever the plain string did.
"""

from __future__ import annotations

import enum

__all__ = ["DECODE_REASONS", "SESSION_REASONS", "DropReason", "StateChangeReason"]


class DropReason(enum.StrEnum):
    """Why a received (or, ``tx_*``, a transmitted) packet was discarded."""

    # stateless §6.8.6 checks (bfd.packet.decode), in RFC order
    TOO_SHORT = "too_short"
    BAD_VERSION = "bad_version"
    BAD_LENGTH = "bad_length"
    LENGTH_EXCEEDS_PAYLOAD = "length_exceeds_payload"
    ZERO_DETECT_MULT = "zero_detect_mult"
    MULTIPOINT = "multipoint"
    ZERO_MY_DISCRIMINATOR = "zero_my_discriminator"
    ZERO_YOUR_DISCRIMINATOR = "zero_your_discriminator"
    AUTH_TYPE_UNKNOWN = "auth_type_unknown"
    AUTH_LENGTH_MISMATCH = "auth_length_mismatch"
    AUTH_WITHOUT_A_BIT = "auth_without_a_bit"
    # the session's authentication checks (§6.8.6 A bit, §6.7.2-6.7.4)
    AUTH_UNEXPECTED = "auth_unexpected"
    AUTH_MISSING = "auth_missing"
    AUTH_TYPE_MISMATCH = "auth_type_mismatch"
    AUTH_KEY_ID_MISMATCH = "auth_key_id_mismatch"
    AUTH_SEQUENCE = "auth_sequence"
    AUTH_FAILED = "auth_failed"
    # the transport and the engine's demultiplexing (RFC 5881 §5 GTSM, §6.3)
    TRUNCATED_DATAGRAM = "truncated_datagram"
    BAD_TTL = "bad_ttl"
    NO_TTL = "no_ttl"
    INTERNAL_ERROR = "internal_error"
    UNKNOWN_DISCRIMINATOR = "unknown_discriminator"
    WRONG_INTERFACE = "wrong_interface"
    WRONG_PEER = "wrong_peer"
    #: another UDP source port than the session's, from the same remote session while Up
    #: (RFC 5881 §4: one source port per session)
    WRONG_SOURCE_PORT = "wrong_source_port"
    NO_SESSION = "no_session"
    TX_NO_SOCKET = "tx_no_socket"
    #: not shown to have arrived from the wire on the socket's interface (a local sender, a
    #: looped copy): dropped by the kernel filter of ``bfd/engine/wirefilter.py``
    LOCAL_ORIGIN = "local_origin"
    #: keyed (non-meticulous) MD5/SHA1: a correctly signed packet whose sequence number has
    #: not advanced for longer than :attr:`bfd.session.Session.stale_sequence_hold` (a replay of
    #: the last packet, or a peer that stopped incrementing)
    AUTH_SEQUENCE_STALE = "auth_sequence_stale"


#: the reasons :func:`bfd.packet.decode` raises, in check order
DECODE_REASONS = tuple(DropReason)[: list(DropReason).index(DropReason.AUTH_WITHOUT_A_BIT) + 1]
#: the reasons :meth:`bfd.session.Session.on_packet` counts itself
SESSION_REASONS = (
    DropReason.AUTH_UNEXPECTED,
    DropReason.AUTH_MISSING,
    DropReason.AUTH_TYPE_MISMATCH,
    DropReason.AUTH_KEY_ID_MISMATCH,
    DropReason.AUTH_SEQUENCE,
    DropReason.AUTH_FAILED,
    DropReason.AUTH_SEQUENCE_STALE,
)


class StateChangeReason(enum.StrEnum):
    """Why a session changed state (:attr:`bfd.session.StateChange.reason`)."""

    DETECTION_TIMEOUT = "detection_timeout"
    NEIGHBOR_DOWN = "neighbor_down"
    NEIGHBOR_ADMIN_DOWN = "neighbor_admin_down"
    ADMIN_DOWN = "admin_down"
    ADMIN_UP = "admin_up"
    #: Down -> Init, or -> Up, on the peer's state
    NEIGHBOR_SIGNAL = "neighbor_signal"
    #: Up in an engine that died, not Up again in the one that replaced it (said by the
    #: engine's user, which saw both)
    ENGINE_RESTART_UNCONFIRMED = "engine_restart_unconfirmed"
