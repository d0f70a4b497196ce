"""Stale paths (pure): paths kept in use, marked stale, while their peer's session is gone:
across our own ExaBGP's restart (``RibParams.stale_timer_s``) and across a peer's graceful
restart (RFC 4724, receiving speaker: its restart time, then until its End-of-RIB or
``stale_path_time_s``).

:class:`StaleHandler` marks and sweeps stale paths in the Adj-RIB-In and keeps the stale
deadlines; it returns the prefixes whose paths changed and the RIB selects them. Separate from
the RIB because the graceful-restart rules (when a drop is a restart, which families stay,
when the wait ends) are a protocol of their own.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import structlog

from glbd.bgp.ribadjin import AdjRibIn
from glbd.bgp.ribtypes import IPAddress, Path, PeerState, Prefix, RibParams, with_stale

__all__ = ["StaleHandler", "notification_in"]

log = structlog.get_logger(__name__)


class StaleHandler:
    """Stale handling over ``adj`` for the RIB's ``peers`` (the RIB's own dict) under
    ``params`` (kept current by the RIB); ``intern`` is the RIB's path interning."""

    def __init__(
        self,
        params: RibParams,
        adj: AdjRibIn,
        peers: dict[IPAddress, PeerState],
        intern: Callable[[Path], Path],
    ) -> None:
        self.params = params
        self._adj = adj
        self._peers = peers
        self._intern = intern
        #: the RIB's stale deadline: the earliest of its peers'
        self.deadline: float | None = None

    def speaker_lost(self, now: float) -> None:
        """ExaBGP died: every session is gone; every peer's paths stay, stale, until its
        End-of-RIB or the stale timer (a deadline already running is kept)."""
        for st in self._peers.values():
            st.state = "down"
            st.last_down_reason = "exabgp restart"
            st.refused.clear()
            if st.n_paths:
                self.mark_stale(st)
                if st.stale_deadline is None:
                    st.stale_deadline = now + self.params.stale_timer_s
        self.rearm()

    def stop(self, st: PeerState) -> None:
        """``st``'s paths are no longer kept stale (they go, or are fresh again)."""
        st.stale = False
        st.gr_helping = False
        st.stale_deadline = None
        self.rearm()

    def applies(self, st: PeerState, notification: tuple[str, int] | None) -> bool:
        """RFC 4724 §4.2: a session with graceful restart that ends without a NOTIFICATION
        (TCP reset or close) is a restart of the peer; our own NOTIFICATION for an expired
        hold timer too (its control plane stalled). Any other NOTIFICATION is a deliberate
        close, and a BFD failure is a forwarding failure, not a restart: paths go at once."""
        gr = st.gr
        if gr is None or gr.restart_time <= 0 or not gr.families or st.bfd_down:
            return False
        return notification is None or notification == ("send", 4)

    def start(self, st: PeerState, reason: str, now: float) -> set[Prefix]:
        """The peer is restarting: its paths of the families its capability named stay in
        use, stale, for its restart time; the others go now (returned). Forwarding does not
        change."""
        assert st.gr is not None
        changed: set[Prefix] = set()
        keep = _versions(st.gr.families)
        for prefix, _ in list(st.paths()):
            if prefix.version not in keep and self._adj.del_path(st, prefix):
                changed.add(prefix)
        self.mark_stale(st)
        st.gr_helping = st.stale
        st.stale_deadline = now + st.gr.restart_time if st.stale else None
        self.rearm()
        st.counters["gr_restarts"] += 1
        log.info(
            "bgp_gr_helper_start",
            peer=str(st.params.address),
            reason=reason,
            restart_time=st.gr.restart_time,
            stale_paths=st.n_paths,
        )
        return changed

    def reestablished(self, st: PeerState, now: float) -> set[Prefix]:
        """A restarting peer is back (RFC 4724 §4.2): without the capability now, every stale
        path goes; a family whose Forwarding State bit is clear (its forwarding was not kept)
        loses its stale paths; the rest wait for that family's End-of-RIB, at most
        ``stale_path_time_s``. Returns the prefixes whose paths went."""
        gr = st.gr
        keep = _versions(gr.forwarding) if gr is not None else set()
        changed: set[Prefix] = set()
        for version in (4, 6):
            if version not in keep:
                self.sweep(st, changed, version)
        if st.stale:
            st.stale_deadline = now + self.params.stale_path_time_s
        else:
            st.gr_helping = False
            st.stale_deadline = None
        self.rearm()
        if changed:
            st.counters["gr_stale_flushed"] += 1
            log.info(
                "bgp_gr_stale_flushed",
                peer=str(st.params.address),
                capability=gr is not None,
                forwarding=[] if gr is None else list(gr.forwarding),
                prefixes=len(changed),
            )
        return changed

    def mark_stale(self, st: PeerState) -> None:
        for prefix, path in list(st.paths()):
            if not path.stale:
                self._adj.set_path(st, prefix, self._intern(with_stale(path, True)))
        st.stale = st.n_paths > 0

    def rearm(self) -> None:
        """The RIB's stale deadline: the earliest of its peers'."""
        ds = [st.stale_deadline for st in self._peers.values() if st.stale_deadline is not None]
        self.deadline = min(ds) if ds else None

    def end_of_rib(self, st: PeerState, family: str) -> set[Prefix]:
        """End-of-RIB for one family: the peer's stale paths of that family are gone
        (returned)."""
        st.counters["eor_in"] += 1
        st.eor_received = True
        if not st.stale or st.state != "up":
            return set()
        version = 6 if family.startswith("ipv6") else 4
        changed: set[Prefix] = set()
        self.sweep(st, changed, version)
        if not st.stale:
            st.gr_helping = False
            st.stale_deadline = None
            self.rearm()
        return changed

    def sweep(self, st: PeerState, changed: set[Prefix], version: int | None = None) -> int:
        """``st``'s stale paths (of IP ``version``, or all) go; their prefixes are added to
        ``changed``. Returns how many went."""
        removed = 0
        for prefix, path in list(st.paths()):
            if path.stale and (version is None or prefix.version == version):
                self._adj.del_path(st, prefix)
                changed.add(prefix)
                removed += 1
        st.stale = any(p.stale for _, p in st.paths())
        if not st.stale:
            st.gr_helping = False
        return removed

    def expire(self, now: float, changed: set[Prefix]) -> tuple[list[IPAddress], int] | None:
        """The stale timer: the stale paths of every peer whose deadline passed go (their
        prefixes added to ``changed``). Returns those peers and how many paths went, or None
        when no deadline is due."""
        if self.deadline is None or now < self.deadline:
            return None
        peers: list[IPAddress] = []
        removed = 0
        for addr, st in self._peers.items():
            if st.stale_deadline is None or now < st.stale_deadline:
                continue
            st.stale_deadline = None
            if not st.stale:
                continue
            peers.append(addr)
            if st.gr_helping:
                st.counters["gr_stale_timer_expired"] += 1
                log.info("bgp_gr_stale_expired", peer=str(addr), state=st.state)
            removed += self.sweep(st, changed)
        self.rearm()
        return peers, removed


_NOTIFICATION_REASON = re.compile(r"^notification (sent|received) \((\d+),")


def notification_in(reason: str) -> tuple[str, int] | None:
    """ExaBGP's "down" reason names a NOTIFICATION it sent or received ("notification sent
    (4,0)"); the API reports only received ones as events."""
    m = _NOTIFICATION_REASON.match(reason)
    if m is None:
        return None
    return ("send" if m.group(1) == "sent" else "receive", int(m.group(2)))


def _versions(families: Iterable[str]) -> set[int]:
    """IP versions of ExaBGP family names ("ipv4/unicast", "ipv6 unicast"); unicast only."""
    out: set[int] = set()
    for f in families:
        afi, _, safi = f.replace("/", " ").partition(" ")
        if safi == "unicast" and afi in ("ipv4", "ipv6"):
            out.add(4 if afi == "ipv4" else 6)
    return out
