"""The RIB's Adj-RIB-In (pure): one per-prefix index of every peer's paths, and the peer slots
that place a peer's path in it.

Separate from :mod:`glbd.bgp.rib` so that the index is changed in one place only: selection
reads it, and the RIB, stale handling and max-prefix change it through :class:`AdjRibIn`'s
methods alone, which also keep each peer's path count and hidden-path gauges right.
"""

from __future__ import annotations

from collections import Counter

import structlog

from glbd.base.reasons import HiddenReason
from glbd.bgp.ribtypes import Entry, NeighborParams, Path, PeerState, Prefix, hidden_on
from glbd.colours.colour import ColourCommunity
from glbd.colours.colours import hidden, route_colours

__all__ = ["AdjRibIn"]

log = structlog.get_logger(__name__)


class AdjRibIn:
    """The index (prefix -> :data:`~glbd.bgp.ribtypes.Entry`) and the slots; ``counters``
    is the RIB's own counter set, where the ``hidden_<reason>`` gauges are summed."""

    def __init__(self, counters: Counter[str]) -> None:
        self.index: dict[Prefix, Entry] = {}
        #: slot -> peer (None: a free slot, left by a removed neighbor)
        self.slots: list[PeerState | None] = []
        self.counters = counters

    def add_peer(self, n: NeighborParams) -> PeerState:
        """A new peer in the first free slot, with no path."""
        try:
            slot = self.slots.index(None)
        except ValueError:
            slot = len(self.slots)
            self.slots.append(None)
        st = PeerState(n, slot=slot, index=self.index)
        self.slots[slot] = st
        return st

    def free(self, st: PeerState) -> None:
        """``st`` is gone (its paths cleared first): its slot is free for the next peer."""
        self.slots[st.slot] = None

    def set_path(self, st: PeerState, prefix: Prefix, path: Path) -> Prefix:
        """Store ``path`` as ``st``'s path to ``prefix``; returns the interned prefix (one
        network object per prefix across all peers)."""
        p = self.store_path(st, prefix, path)
        if p is None:  # that very path was there already
            p = self.index[prefix][0]
        return p

    def store_path(self, st: PeerState, prefix: Prefix, path: Path) -> Prefix | None:
        """Store ``path`` as ``st``'s path to ``prefix`` in one index lookup: the interned
        prefix if ``path`` is new for it, else None (the same path again changes nothing)."""
        entry = self.index.get(prefix)
        if entry is None:
            entry = self.index[prefix] = [prefix]
        i = st.slot + 1
        if len(entry) <= i:
            entry.extend([None] * (i + 1 - len(entry)))
        have = entry[i]
        if have is path:
            return None
        if have is None:
            st.n_paths += 1
        elif have.colours and st.params.colour is not None:
            self.count_hidden(st, have, -1)
        entry[i] = path
        if path.colours and st.params.colour is not None:
            self.count_hidden(st, path, 1)
        p: Prefix = entry[0]
        return p

    def del_path(self, st: PeerState, prefix: Prefix) -> bool:
        entry = self.index.get(prefix)
        i = st.slot + 1
        if entry is None or len(entry) <= i or entry[i] is None:
            return False
        if entry[i].colours and st.params.colour is not None:
            self.count_hidden(st, entry[i], -1)
        entry[i] = None
        st.n_paths -= 1
        while entry[-1] is None:
            entry.pop()
        if len(entry) == 1:
            del self.index[prefix]
        return True

    def clear_paths(self, st: PeerState) -> None:
        for prefix, _ in list(st.paths()):
            self.del_path(st, prefix)

    def count_hidden(self, st: PeerState, path: Path, n: int) -> None:
        """``path`` enters (``n`` 1) or leaves (-1) ``st``'s Adj-RIB-In: the hidden gauges."""
        why = hidden_on(st.params.colour, path)
        if why is not None:
            st.counters[why.counter] += n
            self.counters[why.counter] += n

    def recount_hidden(self, st: PeerState) -> int:
        """The session's colour changed: its hidden gauges counted again. Returns how many of
        its paths are hidden now."""
        for why in HiddenReason:
            self.counters[why.counter] -= st.counters.pop(why.counter, 0)
        n = 0
        if st.params.colour is not None:
            for _prefix, path in st.paths():
                if hidden_on(st.params.colour, path) is not None:
                    self.count_hidden(st, path, 1)
                    n += 1
        return n

    def log_hidden(
        self, st: PeerState, prefix: Prefix, colours: tuple[ColourCommunity, ...]
    ) -> None:
        """An UPDATE whose routes the session hides: logged for the 1st, 2nd, 4th, 8th... such
        UPDATE of the session (a misconfigured neighbour sends many)."""
        why = hidden(route_colours(colours), st.params.colour)
        if why is None:
            return
        st.hidden_updates += 1
        k = st.hidden_updates
        if k & (k - 1) == 0:
            log.warning(
                "bgp_route_hidden",
                peer=str(st.params.address),
                prefix=str(prefix),
                route_colours=sorted(route_colours(colours)),
                session_colour=st.params.colour,
                reason=why,
                count=k,
            )
