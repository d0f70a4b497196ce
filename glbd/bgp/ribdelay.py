"""The RIB's initial-exchange deferral (FRR's update-delay; ``RibParams.update_delay_s``), pure.

After the RIB starts or our ExaBGP restarts, received paths are stored but not selected until
every neighbor has sent End-of-RIB, is restarting itself, is held down or has not established
in time; at most ``update_delay_s``. :class:`UpdateDelay` owns that state and says when the
deferral ends; the RIB holds the waiting prefixes and selects them then. Separate from the RIB
because it is a small clock of its own that only gates when selection runs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import structlog

from glbd.base.reasons import UpdateDelayEnd
from glbd.bgp.ribtypes import IPAddress, PeerState, RibParams

__all__ = ["UpdateDelay"]

log = structlog.get_logger(__name__)


class UpdateDelay:
    """The deferral's state under ``params`` (kept current by the RIB); its end is counted in
    ``counters`` (the RIB's)."""

    def __init__(self, params: RibParams, counters: Counter[str]) -> None:
        self.params = params
        self._counters = counters
        #: on from the start (if configured); its clock starts at the first timed input
        self.active = params.update_delay_s > 0 and bool(params.neighbors)
        self.until: float | None = None
        self.wait_until: float | None = None
        self._waited = False  # the establish-wait is over
        #: the neighbors that sent End-of-RIB since it began
        self._eor: set[IPAddress] = set()

    def restart(self, now: float, have_peers: bool) -> bool:
        """Our ExaBGP restarted: the deferral starts again if configured (True if it did)."""
        if not (self.params.update_delay_s > 0 and have_peers):
            return False
        self.active = True
        self.until = self.wait_until = None
        self._waited = False
        self._eor.clear()
        self.clock(now)
        return True

    def clock(self, now: float) -> None:
        """The deferral's deadlines run from the first timed input after it began."""
        if self.active and self.until is None:
            self.until = now + self.params.update_delay_s
            self.wait_until = now + self.params.update_delay_establish_wait_s

    def tick(self, now: float) -> None:
        """A timer: the clock, and the end of the establish-wait once it is due."""
        self.clock(now)
        if self.wait_until is not None and now >= self.wait_until:
            self.wait_until = None
            self._waited = True

    def end_of_rib(self, peer: IPAddress) -> None:
        self._eor.add(peer)

    def waits_for(self, st: PeerState, now: float) -> bool:
        """The deferral still waits for this neighbor: it has not sent End-of-RIB since the
        deferral began, is not held down (max_prefixes), is not restarting itself (its R
        bit: it waits for our End-of-RIB), and is established or may still establish."""
        if not self.active or st.params.address in self._eor:
            return False
        if st.held_until is not None and now < st.held_until:
            return False
        if st.state == "up":
            return not (st.gr is not None and st.gr.restarting)
        if self._waited:
            return False
        return self.wait_until is None or now < self.wait_until

    def due(self, now: float, peers: Iterable[PeerState]) -> UpdateDelayEnd | None:
        """Why the deferral ends now (None: it goes on)."""
        if not self.active or self.until is None:
            return None
        if now >= self.until:
            return UpdateDelayEnd.TIMER
        if not any(self.waits_for(st, now) for st in peers):
            return UpdateDelayEnd.END_OF_RIB
        return None

    def end(
        self, reason: UpdateDelayEnd, now: float | None, peers: Iterable[PeerState], pending: int
    ) -> None:
        """The deferral is over (``pending`` prefixes wait for selection): logged, counted and
        reset."""
        waiting = [str(st.params.address) for st in peers if self.waits_for(st, now or 0)]
        self.active = False
        self._counters[reason.counter] += 1
        log.info(
            "bgp_update_delay_end",
            reason=str(reason),
            prefixes=pending,
            waited_for=waiting[:8],
        )
        self.until = self.wait_until = None
        self._waited = False
        self._eor.clear()
