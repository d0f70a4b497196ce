"""The BFD session core (RFC 5880 §6), sans I/O.

One :class:`Session` is one single-hop BFD session in asynchronous mode. It has no sockets, no
clock and no randomness of its own: ``now`` (float seconds, monotonic) and a ``random.Random``
come in from the caller, and every method returns a list of effects:

* :class:`Transmit` -- send these bytes (the encoded control packet) to the peer;
* :class:`StateChange` -- the session changed state, with the local diag and a named reason.

Inputs: :meth:`Session.on_packet` (a decoded, demultiplexed packet), :meth:`Session.on_timer`
(call it at or after :meth:`Session.next_deadline`), and the administrative calls
:meth:`Session.admin_down`, :meth:`Session.admin_up`, :meth:`Session.update`.

Rules implemented (clause numbers of RFC 5880 unless noted):

* §6.2 state machine, as the data table :data:`TRANSITIONS` (local state x event).
* §6.8.1 initial values; RemoteDiscr reset to 0 when the detection time expires; AuthSeqKnown
  reset after 2 x detection time without packets; XmitAuthSeq starts at a random value.
* §6.8.3 DesiredMinTx >= 1 s while not Up; a change of DesiredMinTx or RequiredMinRx in Init/Up
  starts a Poll Sequence; while Up, a slower TX and a lower RX (which would shrink the peer's
  or our detection time) take effect only when the Final arrives, faster TX / higher RX at once.
* §6.8.4 detection time = remote Detect Mult x max(RequiredMinRx in use, remote DesiredMinTx).
* §6.8.6 reception: A bit vs configuration, authentication (§6.7.2-6.7.4 incl. sequence
  windows), remote variables, Final ends a poll, the AdminDown discard, the state machine,
  Poll answered with Final at once.
* Keyed (non-meticulous) MD5/SHA1 may repeat a sequence number (§6.7.3/6.7.4), so a replay of
  the last packet passes the window. Local policy on top: a sequence number that has stood
  still for longer than :attr:`Session.stale_sequence_hold` (the detection time, at least
  :data:`KEYED_SEQ_HOLD_MIN`) no longer counts as the peer being alive (``auth_sequence_stale``).
* §6.8.7 transmit interval = max(DesiredMinTx in use, RemoteMinRxInterval), sent at a random
  75-100 % of it (75-90 % when DetectMult = 1); nothing periodic while
  RemoteMinRxInterval = 0 or, in the passive role, while RemoteDiscr = 0. P and F never together.
* §6.8.16 AdminDown is entered and left only by local action and sends diag 7. A peer's
  AdminDown takes us Down with diag 3 and reason ``neighbor_admin_down``, which
  :attr:`StateChange.failure` reports as *not* a failure (RFC 5882 §3.2).
* The C bit is advertised from :attr:`SessionParams.cpi`; the peer's is kept in
  :attr:`Session.remote_cpi` (RFC 5882 §4.3, graceful restart).

Demand mode and the echo function are not implemented (FRR has neither demand mode nor echo
toward non-FRR peers); RequiredMinEchoRx is always sent as 0.
"""

from __future__ import annotations

import enum
import logging
import random
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .packet import Auth, AuthType, ControlPacket, Diag, State, encode_plain, sign, verify
from .reasons import DropReason, StateChangeReason

__all__ = [
    "TRANSITIONS",
    "TX_EARLY",
    "AuthConfig",
    "Effect",
    "Event",
    "Session",
    "SessionParams",
    "StateChange",
    "Transmit",
]

log = logging.getLogger(__name__)

SLOW_TX_US = 1_000_000  # §6.8.3: DesiredMinTx while not Up
#: seconds: the least time a keyed (non-meticulous) sequence number may stand still before its
#: packets are taken as replays; genuine peers advance faster (BIRD: its wall clock in seconds;
#: FRR, VPP and glbd: every packet)
KEYED_SEQ_HOLD_MIN = 2.0
U32 = 0xFFFFFFFF
#: share of the transmit interval a periodic packet may leave before its deadline, so that an
#: engine with many sessions sends several per wakeup (see :attr:`Session.tx_early`)
TX_EARLY = 0.05
_JITTER_LO = 0.75 + TX_EARLY


@dataclass(frozen=True, slots=True)
class AuthConfig:
    """The session's authentication. ``key`` is the password (1-16 bytes) for simple password,
    or the key (up to 16 bytes for MD5, 20 for SHA1); we transmit with ``key_id``/``key``.

    ``accept`` holds further ``(key_id, key)`` pairs accepted on receive during a key rollover:
    the Key ID in a received packet selects the key it is checked with (RFC 5880 §6.7.1)."""

    type: AuthType
    key_id: int
    key: bytes = field(repr=False)
    accept: tuple[tuple[int, bytes], ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        limit = 16 if self.type.digest_len in (0, 16) else 20
        lo = 1 if self.type == AuthType.SIMPLE_PASSWORD else 0
        seen: set[int] = set()
        for key_id, key in ((self.key_id, self.key), *self.accept):
            if not 0 <= key_id <= 255:
                raise ValueError("key_id must be 0-255")
            if key_id in seen:
                raise ValueError(f"key_id {key_id} configured twice")
            seen.add(key_id)
            if not lo <= len(key) <= limit:
                raise ValueError(f"{self.type.name} key must be {lo}-{limit} bytes")

    def key_for(self, key_id: int) -> bytes | None:
        """The key a received packet with ``key_id`` is checked with (None: not configured)."""
        if key_id == self.key_id:
            return self.key
        for k, key in self.accept:
            if k == key_id:
                return key
        return None


@dataclass(frozen=True, slots=True)
class SessionParams:
    """Per-session configuration. Intervals in microseconds."""

    #: bfd.DesiredMinTxInterval once Up
    desired_min_tx: int = 300_000
    #: bfd.RequiredMinRxInterval (0: the peer must not send periodic packets)
    required_min_rx: int = 300_000
    #: bfd.DetectMult
    detect_mult: int = 3
    #: passive role (§6.1): send nothing until the peer has been heard
    passive: bool = False
    #: the C bit: our BFD does not share fate with the control plane
    cpi: bool = False
    auth: AuthConfig | None = None
    #: DesiredMinTx floor while the session is not Up (§6.8.3: >= 1 s)
    slow_tx: int = SLOW_TX_US

    def __post_init__(self) -> None:
        if not 1 <= self.detect_mult <= 255:
            raise ValueError("detect_mult must be 1-255")
        if not 1 <= self.desired_min_tx <= U32 or not 0 <= self.required_min_rx <= U32:
            raise ValueError("intervals must fit 32 bits (desired_min_tx > 0)")
        if not SLOW_TX_US <= self.slow_tx <= U32:
            raise ValueError("slow_tx must be >= 1 s")


@dataclass(frozen=True, slots=True)
class Transmit:
    """Send ``data`` (one encoded control packet) to the peer."""

    data: bytes


class StateChange(NamedTuple):
    """A session's state moved (a tuple: hundreds are made at once when a link fails)."""

    old: State
    new: State
    diag: Diag
    reason: StateChangeReason

    @property
    def failure(self) -> bool:
        """An Up session lost: detection timeout or the peer signalling Down. A peer's
        AdminDown and our own admin action are not failures (RFC 5882 §3.2)."""
        return self.old == State.UP and self.new == State.DOWN and self.reason in _FAILURES


Effect = Transmit | StateChange
_FAILURES = (StateChangeReason.DETECTION_TIMEOUT, StateChangeReason.NEIGHBOR_DOWN)


class Event(enum.Enum):
    """State machine inputs: the received State, or the detection timer."""

    RX_ADMIN_DOWN = State.ADMIN_DOWN
    RX_DOWN = State.DOWN
    RX_INIT = State.INIT
    RX_UP = State.UP
    TIMEOUT = "timeout"


_D = Diag
_R = StateChangeReason
#: §6.2 / §6.8.6 as data: (local state, event) -> (new state, diag, reason). Absent = no change.
#: While AdminDown nothing in this table applies (packets are discarded, §6.8.6).
TRANSITIONS: dict[tuple[State, Event], tuple[State, Diag, StateChangeReason]] = {
    (State.DOWN, Event.RX_DOWN): (State.INIT, _D.NONE, _R.NEIGHBOR_SIGNAL),
    (State.DOWN, Event.RX_INIT): (State.UP, _D.NONE, _R.NEIGHBOR_SIGNAL),
    (State.INIT, Event.RX_ADMIN_DOWN): (
        State.DOWN,
        _D.NEIGHBOR_SIGNALED_SESSION_DOWN,
        _R.NEIGHBOR_ADMIN_DOWN,
    ),
    (State.INIT, Event.RX_INIT): (State.UP, _D.NONE, _R.NEIGHBOR_SIGNAL),
    (State.INIT, Event.RX_UP): (State.UP, _D.NONE, _R.NEIGHBOR_SIGNAL),
    (State.INIT, Event.TIMEOUT): (
        State.DOWN,
        _D.CONTROL_DETECTION_TIME_EXPIRED,
        _R.DETECTION_TIMEOUT,
    ),
    (State.UP, Event.RX_ADMIN_DOWN): (
        State.DOWN,
        _D.NEIGHBOR_SIGNALED_SESSION_DOWN,
        _R.NEIGHBOR_ADMIN_DOWN,
    ),
    (State.UP, Event.RX_DOWN): (State.DOWN, _D.NEIGHBOR_SIGNALED_SESSION_DOWN, _R.NEIGHBOR_DOWN),
    (State.UP, Event.TIMEOUT): (
        State.DOWN,
        _D.CONTROL_DETECTION_TIME_EXPIRED,
        _R.DETECTION_TIMEOUT,
    ),
}
_RX_EVENT = {s: Event(s) for s in State}


class Session:
    """One BFD session (see the module docstring). Public read-only attributes are the RFC
    state variables; :meth:`snapshot` gives them as a dict."""

    def __init__(
        self,
        local_discr: int,
        params: SessionParams,
        rng: random.Random,
        now: float,
    ) -> None:
        if not 1 <= local_discr <= U32:
            raise ValueError("local discriminator must be 1..2**32-1")
        self.local_discr = local_discr
        self.params = params
        self._rng = rng
        # §6.8.1 state variables
        self.state = State.DOWN
        self.remote_state = State.DOWN
        self.remote_discr = 0
        self.local_diag = Diag.NONE
        self.remote_diag: int = 0
        self.remote_min_rx = 1  # µs
        self.remote_desired_tx = 0
        self.remote_detect_mult = 0
        self.remote_demand = False
        self.remote_cpi = False
        self.xmit_auth_seq = rng.getrandbits(32)
        self.rcv_auth_seq = 0
        self.auth_seq_known = False
        #: when the current bfd.RcvAuthSeq was first received
        self.auth_seq_since = now
        # timers in use (§6.8.3): advertised vs. applied
        self.polling = False
        self._adv_tx = max(params.desired_min_tx, params.slow_tx)
        self._adv_rx = params.required_min_rx
        self._tx_used = self._adv_tx
        self._rx_used = self._adv_rx
        self._next_tx: float | None = None if params.passive else now
        self._detect_at: float | None = None
        self._last_rx: float | None = None
        # observability
        self.created = now
        self.up_since: float | None = None
        self.last_change = now
        self.flaps = 0
        self.last_down_reason: StateChangeReason | str = ""
        self.packets_in = 0
        self.packets_out = 0
        #: by reason; the engine counts its own here too (a ``tx_<errno>`` has no member)
        self.drops: dict[DropReason | str, int] = {}
        self._tx_key: tuple[Any, ...] | None = None
        self._tx_bytes = b""
        #: the last packet whose exact repeat changes nothing but the reception time (see
        #: :meth:`rx_repeat`); cleared by everything that could make a repeat do more
        self._quiet_rx: ControlPacket | None = None
        #: the next periodic packet is ``_tx_bytes`` unchanged (see :meth:`tx_periodic`);
        #: cleared by everything that changes a field of it or whether it is sent
        self._tx_quiet = False
        #: while a shortcut holds, the values it needs (they change only where it ends)
        self._quiet_iv = self._quiet_det = self._tx_iv = 0.0
        self._jitter_span = self._jitter_hi(params) - TX_EARLY - _JITTER_LO
        self._random = rng.random
        #: set by tx_periodic: how late the packet it sent was, and the next deadline
        self.tx_late = 0.0
        self.tx_deadline = 0.0

    # ------------------------------------------------------------------ derived values

    @property
    def detect_time(self) -> float:
        """§6.8.4 detection time in seconds (0 until the peer has been heard)."""
        return self.remote_detect_mult * max(self._rx_used, self.remote_desired_tx) / 1e6

    @property
    def stale_sequence_hold(self) -> float:
        """Keyed (non-meticulous) authentication: how long, in seconds, the peer's sequence
        number may stand still and its packets still count; after that they are dropped as
        ``auth_sequence_stale`` (a replay of one captured packet, or a peer that stopped
        incrementing), so the session times out."""
        return max(self.detect_time, KEYED_SEQ_HOLD_MIN)

    @property
    def tx_interval(self) -> float:
        """§6.8.7 transmit interval before jitter, seconds."""
        return max(self._tx_used, self.remote_min_rx) / 1e6

    @property
    def next_tx_at(self) -> float | None:
        """When the next periodic packet is due (None: nothing periodic)."""
        return self._next_tx

    @property
    def last_rx(self) -> float | None:
        """When the last accepted packet arrived (None: never)."""
        return self._last_rx

    @property
    def detect_at(self) -> float | None:
        """When the detection time expires (None: not armed)."""
        return self._detect_at

    def next_deadline(self) -> float | None:
        a, b = self._next_tx, self._detect_at
        if a is None:
            return b
        if b is None or a < b:
            return a
        return b

    def drop(self, reason: DropReason | str) -> None:
        """Count one discarded packet for this session (also used by the transport)."""
        self.drops[reason] = self.drops.get(reason, 0) + 1

    # ------------------------------------------------------------------ inputs

    def on_packet(self, pkt: ControlPacket, now: float) -> list[Effect]:
        """A packet that passed the stateless checks and was demultiplexed to this session."""
        self._quiet_rx = None
        self._tx_quiet = False
        reason = self._check_auth(pkt, now)
        if reason is not None:
            self.drop(reason)
            return []
        self.packets_in += 1
        self.remote_discr = pkt.my_discriminator
        self.remote_state = pkt.state
        self.remote_diag = int(pkt.diag)
        self.remote_demand = pkt.demand
        self.remote_cpi = pkt.cpi
        self.remote_min_rx = pkt.required_min_rx
        self.remote_desired_tx = pkt.desired_min_tx
        self.remote_detect_mult = pkt.detect_mult
        if pkt.final and self.polling:
            self._terminate_poll()
        self._last_rx = now
        self._detect_at = now + self.detect_time
        if self.state == State.ADMIN_DOWN:
            return []
        out: list[Effect] = []
        move = TRANSITIONS.get((self.state, _RX_EVENT[pkt.state]))
        if move is not None:
            out += self._set_state(move[0], move[1], move[2], now, send=not pkt.poll)
        if pkt.poll:  # §6.8.7: reply at once, whatever the timers
            out.append(self._transmit(final=True))
        self._reschedule_tx(now)
        if (
            self.params.auth is None
            and not (pkt.poll or pkt.final)
            and (self.state, _RX_EVENT[pkt.state]) not in TRANSITIONS
            and self._next_tx is not None
        ):
            self._quiet_rx = pkt
            self._quiet_iv = self.tx_interval
            self._quiet_det = self.detect_time
        return out

    @property
    def repeat_of(self) -> ControlPacket | None:
        """The packet whose repeats :meth:`rx_repeat` would take (None: none would)."""
        return self._quiet_rx

    def rx_repeat(self, pkt: ControlPacket, now: float, count: int = 1) -> bool:
        """The steady state of :meth:`on_packet`: if ``pkt`` is the packet last accepted and
        a repeat of it can only restart the detection timer (no authentication, no P or F,
        no transition, the transmit schedule unaffected), count it (``count`` repeats, the
        last at ``now``), restart detection and return True. False: nothing was done, call
        :meth:`on_packet`. A True never moves :meth:`next_deadline` earlier."""
        if pkt is not self._quiet_rx:
            return False
        nt = self._next_tx
        if nt is None or nt > now + self._quiet_iv:
            return False
        self.packets_in += count
        self._last_rx = now
        self._detect_at = now + self._quiet_det
        return True

    def on_timer(self, now: float) -> list[Effect]:
        out: list[Effect] = []
        if self._detect_at is not None and now >= self._detect_at:
            self._detect_at = None
            self._quiet_rx = None
            self._tx_quiet = False
            self.remote_discr = 0  # §6.8.1
            move = TRANSITIONS.get((self.state, Event.TIMEOUT))
            if move is not None:
                out += self._set_state(move[0], move[1], move[2], now)
        if self._next_tx is not None and now >= self._next_tx:
            if self._may_send_periodic():
                out.append(self._transmit(poll=self.polling))
                self._next_tx = now + self._jittered()
                # the next periodic packet is the same bytes until something changes
                self._tx_quiet = self.params.auth is None
                self._tx_iv = self.tx_interval
            else:
                self._next_tx = None
        return out

    def tx_periodic(self, now: float) -> bytes | None:
        """The steady state of :meth:`on_timer`: if the only thing due at ``now`` is a periodic
        packet equal to the previous one (no authentication, nothing changed since), count
        it, schedule the next one and return its bytes (and set :attr:`tx_late`, how late
        it is, and :attr:`tx_deadline`, the new :meth:`next_deadline`). None: nothing was
        done, call :meth:`on_timer`."""
        if not self._tx_quiet:
            return None
        det = self._detect_at
        nt = self._next_tx
        if nt is None or now < nt or (det is not None and now >= det):
            return None
        self.packets_out += 1
        self.tx_late = now - nt
        # the same draw as _jittered (Random.uniform(a, b) is a + (b - a) * random())
        nt = self._next_tx = now + self._tx_iv * (_JITTER_LO + self._jitter_span * self._random())
        self.tx_deadline = nt if det is None or nt < det else det
        return self._tx_bytes

    def admin_down(self, now: float) -> list[Effect]:
        """§6.8.16: enter AdminDown, diag 7."""
        if self.state == State.ADMIN_DOWN:
            return []
        return self._set_state(State.ADMIN_DOWN, Diag.ADMINISTRATIVELY_DOWN, _R.ADMIN_DOWN, now)

    def admin_up(self, now: float) -> list[Effect]:
        """Leave AdminDown to Down."""
        if self.state != State.ADMIN_DOWN:
            return []
        return self._set_state(State.DOWN, Diag.NONE, _R.ADMIN_UP, now)

    def update(self, params: SessionParams, now: float) -> list[Effect]:
        """Apply new parameters; timer changes in Init/Up run a Poll Sequence (§6.8.3)."""
        old_auth = self.params.auth
        self.params = params
        self._quiet_rx = None
        self._tx_quiet = False
        self._jitter_span = self._jitter_hi(params) - TX_EARLY - _JITTER_LO
        # a new sequence space only when authentication is turned on/off or changes type: a
        # key rollover keeps it, so a reload opens no window for replayed packets
        if (params.auth and params.auth.type) != (old_auth and old_auth.type):
            self.auth_seq_known = False
        new_tx, new_rx = self._advertised_for(self.state)
        changed = (new_tx, new_rx) != (self._adv_tx, self._adv_rx)
        self._adv_tx, self._adv_rx = new_tx, new_rx
        out: list[Effect] = []
        if self.state == State.UP and changed:
            # faster TX and higher RX at once; slower TX / lower RX only after the Final
            self._tx_used = min(self._tx_used, new_tx)
            self._rx_used = max(self._rx_used, new_rx)
        else:
            self._tx_used, self._rx_used = new_tx, new_rx
        if self._last_rx is not None and self._detect_at is not None:
            self._detect_at = self._last_rx + self.detect_time
        if changed and self.state in (State.INIT, State.UP):
            out += self._start_poll()
        if params.passive and self.remote_discr == 0:
            self._next_tx = None
        self._reschedule_tx(now)
        return out

    # ------------------------------------------------------------------ internals

    def _advertised_for(self, state: State) -> tuple[int, int]:
        p = self.params
        tx = p.desired_min_tx if state == State.UP else max(p.desired_min_tx, p.slow_tx)
        return tx, p.required_min_rx

    def _set_state(
        self, new: State, diag: Diag, reason: StateChangeReason, now: float, send: bool = True
    ) -> list[Effect]:
        old = self.state
        self.state = new
        self.local_diag = diag
        self._quiet_rx = None
        self._tx_quiet = False
        self.last_change = now
        out: list[Effect] = [change := StateChange(old, new, diag, reason)]
        if old == State.UP:
            self.up_since = None
            self.last_down_reason = reason
            if change.failure:  # a peer's AdminDown and our own admin action are no flap
                self.flaps += 1
        tx, rx = self._advertised_for(new)
        if new == State.UP:
            self.up_since = now
            changed = (tx, rx) != (self._adv_tx, self._adv_rx)
            self._adv_tx, self._adv_rx = tx, rx
            self._tx_used = min(self._tx_used, tx)
            self._rx_used = max(self._rx_used, rx)
            if changed:
                self.polling = True  # the packet sent below carries P
        else:
            self.polling = False
            self._adv_tx = self._tx_used = tx
            self._adv_rx = self._rx_used = rx
        log.debug(
            "bfd %d: %s -> %s (%s, diag %d)", self.local_discr, old.name, new.name, reason, diag
        )
        if send and self._may_send_periodic():
            out.append(self._transmit(poll=self.polling))
            self._next_tx = now + self._jittered()
        else:
            self._reschedule_tx(now)
        return out

    def _start_poll(self) -> list[Effect]:
        self.polling = True
        self._tx_quiet = False
        if self._may_send_periodic():
            return [self._transmit(poll=True)]
        return []

    def _terminate_poll(self) -> None:
        self.polling = False
        self._quiet_rx = None
        self._tx_quiet = False
        self._tx_used = self._adv_tx
        self._rx_used = self._adv_rx

    def _may_send_periodic(self) -> bool:
        if self.remote_min_rx == 0:
            return False
        return not (self.params.passive and self.remote_discr == 0)

    @staticmethod
    def _jitter_hi(params: SessionParams) -> float:
        """§6.8.7: the interval is cut by 0-25 %, by 10-25 % when DetectMult is 1."""
        return 0.90 if params.detect_mult == 1 else 1.0

    def _jittered(self) -> float:
        hi = self._jitter_hi(self.params) - TX_EARLY
        return self.tx_interval * self._rng.uniform(_JITTER_LO, hi)

    @property
    def tx_early(self) -> float:
        """How early, in seconds, a periodic packet may leave to share a wakeup with another
        session's: the jitter is drawn TX_EARLY inside its bounds at both ends, so an interval
        still ends up within §6.8.7's 75-100 % of the transmit interval."""
        return TX_EARLY * self._tx_iv

    def _reschedule_tx(self, now: float) -> None:
        if not self._may_send_periodic():
            self._next_tx = None
            return
        interval = self.tx_interval
        if self._next_tx is None or self._next_tx > now + interval:
            self._next_tx = now + self._jittered()

    def _transmit(self, poll: bool = False, final: bool = False) -> Transmit:
        self.packets_out += 1
        p = self.params
        if p.auth is None:
            key = (
                self.state,
                self.local_diag,
                poll,
                final,
                self._adv_tx,
                self._adv_rx,
                p.detect_mult,
                self.remote_discr,
                p.cpi,
            )
            if key == self._tx_key:
                return Transmit(self._tx_bytes)
            self._tx_key = key
            self._tx_bytes = encode_plain(
                self.state,
                self.local_diag,
                p.detect_mult,
                self.local_discr,
                self.remote_discr,
                self._adv_tx,
                self._adv_rx,
                poll=poll and not final,
                final=final,
                cpi=p.cpi,
            )
            return Transmit(self._tx_bytes)
        pkt = ControlPacket(
            state=self.state,
            diag=self.local_diag,
            detect_mult=p.detect_mult,
            my_discriminator=self.local_discr,
            your_discriminator=self.remote_discr,
            desired_min_tx=self._adv_tx,
            required_min_rx=self._adv_rx,
            required_min_echo_rx=0,
            poll=poll and not final,
            final=final,
            cpi=p.cpi,
            auth=self._auth_section(),
        )
        return Transmit(sign(pkt, p.auth.key).encode())

    def _auth_section(self) -> Auth | None:
        a = self.params.auth
        if a is None:
            return None
        if a.type == AuthType.SIMPLE_PASSWORD:
            return Auth(a.type, a.key_id, password=a.key)
        # §6.7.3/6.7.4: meticulous MUST increment per packet; keyed MAY -- we always do
        self.xmit_auth_seq = (self.xmit_auth_seq + 1) & U32
        return Auth(a.type, a.key_id, self.xmit_auth_seq)

    def _check_auth(self, pkt: ControlPacket, now: float) -> DropReason | None:
        """§6.8.6 A bit vs configuration, then §6.7.2-6.7.4. Returns a drop reason or None."""
        cfg = self.params.auth
        a = pkt.auth
        if cfg is None:
            return None if a is None else DropReason.AUTH_UNEXPECTED
        if a is None:
            return DropReason.AUTH_MISSING
        if a.type != cfg.type:
            return DropReason.AUTH_TYPE_MISMATCH
        key = cfg.key_for(a.key_id)
        if key is None:
            return DropReason.AUTH_KEY_ID_MISMATCH
        if cfg.type == AuthType.SIMPLE_PASSWORD:
            return None if verify(pkt, key) else DropReason.AUTH_FAILED
        if (
            self.auth_seq_known
            and self._last_rx is not None
            and now - self._last_rx > 2 * self.detect_time
        ):
            self.auth_seq_known = False  # §6.8.1
        if self.auth_seq_known:
            # §6.7.3/6.7.4 in the circular 32-bit space: the offset past RcvAuthSeq must lie
            # in [0 (keyed) or 1 (meticulous), 3 * Detect Mult]
            first = 1 if cfg.type.meticulous else 0
            if not first <= (a.sequence - self.rcv_auth_seq) & U32 <= 3 * pkt.detect_mult:
                return DropReason.AUTH_SEQUENCE
        if not verify(pkt, key):
            return DropReason.AUTH_FAILED
        if not self.auth_seq_known or a.sequence != self.rcv_auth_seq:
            self.auth_seq_since = now
        elif now - self.auth_seq_since > self.stale_sequence_hold:
            # keyed: a repeat is allowed, but not forever -- a peer that is alive moves on,
            # and a replay of its last packet must not keep a dead session Up
            return DropReason.AUTH_SEQUENCE_STALE
        self.rcv_auth_seq = a.sequence
        self.auth_seq_known = True
        return None

    # ------------------------------------------------------------------ observability

    def snapshot(self, now: float) -> dict[str, Any]:
        """JSON-safe per-session state."""
        return {
            "state": self.state.name.lower(),
            "diag": int(self.local_diag),
            "diag_name": Diag(self.local_diag).name.lower(),
            "remote_state": self.remote_state.name.lower(),
            "remote_diag": self.remote_diag,
            "local_discriminator": self.local_discr,
            "remote_discriminator": self.remote_discr,
            "detect_mult": self.params.detect_mult,
            "remote_detect_mult": self.remote_detect_mult,
            "local_desired_min_tx_us": self._adv_tx,
            "local_required_min_rx_us": self._adv_rx,
            "remote_desired_min_tx_us": self.remote_desired_tx,
            "remote_required_min_rx_us": self.remote_min_rx,
            "tx_interval_ms": self.tx_interval * 1e3,
            "detect_time_ms": self.detect_time * 1e3,
            "polling": self.polling,
            "passive": self.params.passive,
            "cpi": self.params.cpi,
            "remote_cpi": self.remote_cpi,
            "auth": self.params.auth.type.name.lower() if self.params.auth else None,
            "uptime_s": (now - self.up_since) if self.up_since is not None else None,
            "since_last_change_s": now - self.last_change,
            "flaps": self.flaps,
            "last_down_reason": self.last_down_reason,
            "packets_in": self.packets_in,
            "packets_out": self.packets_out,
            "drops": dict(self.drops),
        }
