"""Max-prefix and the refused-route keeping of the RIB (pure).

:class:`MaxPrefixes` applies ``NeighborParams.max_prefixes``: "warn" logs and counts a
neighbor over its limit; "teardown" drops its routes, asks for a Cease (subcode 1) and keeps
the session down for ``max_prefixes_restart_s``. It also keeps the routes a peer's import
policy (or the AS loop check) refused, for the pre-policy view, up to
:data:`~glbd.bgp.ribtypes.REFUSED_KEPT` per peer. Separate from the RIB: both bound what one
neighbor may make glbd hold, and neither selects anything.
"""

from __future__ import annotations

from collections import Counter

import structlog

from glbd.base.reasons import RouteRejected
from glbd.bgp import exabgp_api as api
from glbd.bgp.ribadjin import AdjRibIn
from glbd.bgp.ribcolour import received_aigp
from glbd.bgp.ribtypes import REFUSED_KEPT, PeerState, Prefix, Refused, count_rejected

__all__ = ["MaxPrefixes"]

log = structlog.get_logger(__name__)


class MaxPrefixes:
    """Limits over ``adj``; rejections are counted in ``counters`` (the RIB's)."""

    def __init__(self, adj: AdjRibIn, counters: Counter[str]) -> None:
        self._adj = adj
        self._counters = counters

    def held(self, st: PeerState, now: float) -> bool:
        """The session is kept down (a teardown's restart time has not passed)."""
        return st.held_until is not None and now < st.held_until

    def refuse_up(self, st: PeerState, now: float) -> bool:
        """The session came up: True if it must be closed again at once (held down); a hold
        that is over is forgotten."""
        if st.held_until is None:
            return False
        if now < st.held_until:
            st.counters["max_prefixes_held"] += 1
            st.notification = ("send", 6)
            return True
        st.held_until = None
        return False

    def check(self, st: PeerState, changed: set[Prefix], now: float) -> bool:
        """The neighbor's prefix count crossed ``max_prefixes`` (or fell back under it). True
        if the session must be torn down: its paths are gone then (their prefixes added to
        ``changed``) and it is held down until its restart time."""
        n = st.params
        assert n.max_prefixes is not None
        over = st.n_paths > n.max_prefixes
        if over == st.over_max:
            return False
        st.over_max = over
        if not over:
            log.info("bgp_max_prefixes_ok", peer=str(n.address), prefixes=st.n_paths)
            return False
        st.counters["max_prefixes_exceeded"] += 1
        log.warning(
            "bgp_max_prefixes_exceeded",
            peer=str(n.address),
            prefixes=st.n_paths,
            max_prefixes=n.max_prefixes,
            action=n.max_prefixes_action,
        )
        if n.max_prefixes_action != "teardown":
            return False
        # Cease/1: its routes go now, and it stays down for the restart time
        count_rejected(self._counters, st, RouteRejected.MAX_PREFIXES, st.n_paths - n.max_prefixes)
        st.over_max = False
        st.held_until = now + n.max_prefixes_restart_s
        st.last_down_reason = "max_prefixes"
        st.notification = ("send", 6)
        changed |= {p for p, _ in st.paths()}
        self._adj.clear_paths(st)
        return True

    def keep_refused(
        self, st: PeerState, a: api.RouteAnnounced, ev: api.UpdateEvent, why: RouteRejected
    ) -> None:
        """A route refused before the Adj-RIB-In, kept for the pre-policy view (or counted as
        ``refused_not_kept`` once the peer has REFUSED_KEPT of them)."""
        if a.prefix not in st.refused and len(st.refused) >= REFUSED_KEPT:
            st.counters["refused_not_kept"] += 1
            return
        attrs = ev.attributes
        st.refused[a.prefix] = Refused(
            why,
            a.next_hop if a.next_hop is not None else ev.peer,
            attrs.as_path,
            attrs.origin,
            attrs.communities,
            attrs.colours,
            received_aigp(st, attrs),
        )
