"""Best-path and multipath selection, and the advertisement each peer should hold (pure).

:class:`Selector` picks a prefix's best path and multipath set from the Adj-RIB-In index
(the rules in :mod:`glbd.bgp.rib`'s docstring), shares one selection between the prefixes of
a recompute that have the very same paths, interns forwarding sets and outcomes, and builds
the :class:`~glbd.bgp.ribtypes.Advertise` a peer should hold (next-hop-self, our NHC, drain,
export policy, colours and AIGP), and the prefix's primary colour. Separate from the RIB so the
decision rules read on their own; the RIB keeps the per-prefix loop that compares them with what
is in forwarding and advertised.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from itertools import islice
from typing import Any, TypeVar

from glbd.bgp import nhc as nhcmod
from glbd.bgp.ribcolour import learned_aigp, originated_aigp, primary_colour
from glbd.bgp.ribtypes import (
    GRACEFUL_SHUTDOWN,
    Advertise,
    Entry,
    IPAddress,
    NextHop,
    Path,
    PeerState,
    Prefix,
    RibParams,
    RibStats,
    hidden_on,
    no_export_policy,
)
from glbd.colours.colour import ColourCommunity
from glbd.colours.colours import Origination, may_send, originate_to

__all__ = ["NO_SELECTION", "ORIGINATED", "Selection", "Selector"]

_ORIGIN_RANK = {"igp": 0, "egp": 1, "incomplete": 2}

_V = TypeVar("_V")


@dataclass(frozen=True, slots=True, eq=False)
class Selection:
    """One selection over one list of paths (slot by slot), shared by every prefix with it."""

    #: the paths selected over: held so their identities (the cache key) stay theirs
    paths: tuple[Path | None, ...]
    best: Path | None
    mp: list[tuple[PeerState, Path]]
    mp_peers: frozenset[PeerState]
    #: the NNHN we send: the multipath peers' BGP IDs
    mp_ids: tuple[ipaddress.IPv4Address, ...]
    #: the forwarding view (interned), for a prefix not originated here
    fwd: tuple[NextHop, ...]
    #: the multipath peers' slots, ascending
    slots: tuple[int, ...]
    #: what the Adj-RIB-Outs of a prefix not originated here follow from: the best path's
    #: attributes, the multipath peers and the NNHN (interned: compared by identity first)
    outcome: tuple[Any, ...]
    #: the prefix's primary colour (:func:`~glbd.bgp.ribcolour.primary_colour`), or None
    colour: int | None = None


NO_SELECTION = Selection((), None, [], frozenset(), (), (), (), (None, (), ()))
#: the outcome of an originated prefix: its advertisements depend on no path
ORIGINATED: tuple[Any, ...] = ("originated",)


class Selector:
    """Selection over the index and slots of an Adj-RIB-In, under ``params`` (kept current
    by the RIB); ``stats`` is the RIB's, ``computed`` is counted here."""

    def __init__(
        self,
        params: RibParams,
        index: dict[Prefix, Entry],
        slots: list[PeerState | None],
        stats: RibStats,
    ) -> None:
        self.params = params
        self._index = index
        self._slots = slots
        self.stats = stats
        #: how originated prefixes are coloured (``RibParams.origin_colours``)
        self.origin_colours: dict[Prefix, Origination] = dict(params.origin_colours)
        #: interned outcomes and forwarding sets (see ``_intern_outcome``, ``_intern_fwd``)
        self._outcomes: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self._fwd_sets: dict[tuple[int, ...], tuple[NextHop, ...]] = {}
        #: NHC values by NNHN ids, then by the next hop sent and the prefix's IP version
        self._nhc_cache: dict[
            tuple[ipaddress.IPv4Address, ...], dict[tuple[IPAddress, int], bytes]
        ] = {}
        #: selections by the prefix's paths, slot by slot (their identities): within one
        #: recompute (peers unchanged), prefixes with the same paths from the same peers, a
        #: fabric's common case, share one selection. Emptied when the recompute ends
        self._selections: dict[tuple[int, ...], Selection] = {}

    def done(self) -> None:
        """The recompute is over: peers may change, so no selection is shared past it."""
        self._selections.clear()

    @staticmethod
    def _sort_key(item: tuple[PeerState, Path]) -> tuple[bool, int, int, int, int, int]:
        st, path = item
        bid = int(st.bgp_id) if st.bgp_id is not None else 2**32
        return (
            GRACEFUL_SHUTDOWN in path.communities,
            path.as_path_length,
            _ORIGIN_RANK.get(path.origin, 3),
            bid,
            path.peer.version,
            int(path.peer),
        )

    def select(self, prefix: Prefix) -> tuple[Path | None, list[Path]]:
        entry = self._index.get(prefix)
        sel = NO_SELECTION if entry is None else self.select_paths(tuple(entry[1:]))
        return sel.best, [p for _st, p in sel.mp]

    def selection(self, prefix: Prefix) -> Selection:
        """The prefix's best path and multipath set, shared with the prefixes of the same
        recompute that have the very same paths."""
        entry = self._index.get(prefix)
        if entry is None:
            return NO_SELECTION
        key = tuple(map(id, islice(entry, 1, None)))
        sel = self._selections.get(key)
        if sel is not None:
            return sel
        sel = self.select_paths(tuple(islice(entry, 1, None)))
        if len(self._selections) >= 2048:
            self._selections.clear()
        self._selections[key] = sel  # holds the paths: their ids are not reused meanwhile
        return sel

    def select_paths(self, paths: tuple[Path | None, ...]) -> Selection:
        self.stats.computed += 1
        cands = [
            (st, p)
            for st, p in zip(self._slots, paths, strict=False)
            if p is not None
            and st is not None
            and st.usable
            and (not p.colours or hidden_on(st.params.colour, p) is None)
        ]
        colour = primary_colour(self._slots, paths)
        if not cands:
            return Selection(paths, None, [], frozenset(), (), (), (), NO_SELECTION.outcome, colour)
        cands.sort(key=self._sort_key)
        best = cands[0][1]
        relax = self.params.multipath_relax
        gshut = GRACEFUL_SHUTDOWN in best.communities
        mp = [
            c
            for c in cands
            if (GRACEFUL_SHUTDOWN in c[1].communities) == gshut
            and c[1].as_path_length == best.as_path_length
            and c[1].origin == best.origin
            and (relax or (c[1].as_path[:1] == best.as_path[:1]))
        ][: self.params.max_paths]
        # an NNHN names BGP Identifiers only: never None or 0.0.0.0 (RFC 6286 §2.1)
        mp_ids = tuple(st.bgp_id for st, _p in mp if st.bgp_id is not None and int(st.bgp_id))
        fwd = tuple(
            sorted(
                (self._next_hop_view(st, p) for st, p in mp),
                key=lambda nh: (nh.peer.version, int(nh.peer)),
            )
        )
        if fwd:
            fwd = self._intern_fwd(fwd)
        slots = tuple(sorted(st.slot for st, _p in mp))
        attrs = (best.as_path, best.origin, best.communities, best.colours, best.aigp)
        outcome = attrs, slots, mp_ids
        return Selection(
            paths,
            best,
            mp,
            frozenset(st for st, _p in mp),
            mp_ids,
            fwd,
            slots,
            self._intern_outcome(outcome),
            colour,
        )

    def _intern_outcome(self, outcome: tuple[Any, ...]) -> tuple[Any, ...]:
        """One tuple per distinct selection outcome (a fabric has few): ~8 bytes per prefix,
        and an unchanged outcome is the same object."""
        return _bounded_intern(self._outcomes, outcome, outcome)

    def _intern_fwd(self, fwd: tuple[NextHop, ...]) -> tuple[NextHop, ...]:
        """One tuple object per next-hop set: prefixes with the same next hops share it, and
        a consumer may cache what it derives from one by identity. Keyed by the identities of
        the (memoised) views; the table holds the tuple, so those views stay alive and their
        ids cannot be reused while the entry exists."""
        return _bounded_intern(self._fwd_sets, tuple(map(id, fwd)), fwd)

    @staticmethod
    def _next_hop_view(st: PeerState, p: Path) -> NextHop:
        v, n = p.view, st.params
        if (
            v is not None
            and v.peer_bgp_id == st.bgp_id
            and v.interface == n.interface
            and v.colour == n.colour
        ):
            return v
        v = NextHop(p.peer, st.bgp_id, p.next_hop, n.interface, p.nnh, p.nnhn_status, n.colour)
        object.__setattr__(p, "view", v)  # a memo, not part of the path's value
        return v

    def nhc_values(
        self, mp_ids: tuple[ipaddress.IPv4Address, ...]
    ) -> dict[tuple[IPAddress, int], bytes]:
        """NHC values for one NNHN, by the next hop sent and the prefix's IP version (filled as
        peers need them): the same for every prefix with that multipath set, so it is encoded
        once per peer and family, not per prefix and peer."""
        by_nh = self._nhc_cache.get(mp_ids)
        if by_nh is None:
            if len(self._nhc_cache) >= 1024:
                self._nhc_cache.clear()
            by_nh = self._nhc_cache[mp_ids] = {}
        return by_nh

    def _own_nhc(
        self, nh: IPAddress, version: int, mp_ids: tuple[ipaddress.IPv4Address, ...]
    ) -> bytes:
        """Our NHC for routes of IP ``version`` sent with next hop ``nh``: built afresh, never
        from a received one. A link-local-only next hop gets our BGP ID (4 octets, as FRR)."""
        bgpid = nhcmod.BgpId(self.params.router_id) if nhcmod.is_link_local(nh) else None
        return nhcmod.Nhc.for_next_hop(
            nh,
            afi=nhcmod.AFI_IPV4 if version == 4 else nhcmod.AFI_IPV6,
            nnhn=nhcmod.Nnhn(self.params.router_id, mp_ids),
            bgpid=bgpid,
        ).encode_value()

    def advert(
        self,
        prefix: Prefix,
        originated: bool,
        best: Path | None,
        st: PeerState,
        mp_peers: frozenset[PeerState],
        mp_ids: tuple[ipaddress.IPv4Address, ...],
        nhcs: dict[tuple[IPAddress, int], bytes] | None,
    ) -> Advertise | None:
        """What ``st`` should hold for ``prefix`` (None: nothing is sent to it)."""
        if not originated and (
            best is None
            or st in mp_peers
            or st.params.remote_as in best.as_path
            or (best.colours and not may_send(best.colour_set, st.params.colour))
        ):
            return None
        n = st.params
        if n.export_filter is None:
            if no_export_policy(self.params, n):
                return None
        elif not n.export_filter.permits(prefix):
            return None
        if prefix.version not in n.families:
            return None
        if prefix.version == 6:
            nh: IPAddress | None = (
                n.local_address if n.local_address.version == 6 else n.local_address6
            )
        else:
            nh = n.local_address if n.local_address.version == 4 or n.unnumbered else None
        if nh is None:
            return None
        drain = self.params.drain or st.drained
        own = (self.params.local_as,) * (1 + self.params.drain_prepend if drain else 1)
        if originated:
            colours: tuple[ColourCommunity, ...] = ()
            aigp: int | None = None
            origin = self.origin_colours.get(prefix) if self.origin_colours else None
            if origin is not None:
                copy = originate_to(origin, n.colour)
                if copy is None:  # a session of a colour that is neither its nor a backup
                    return None
                if copy.colour is not None:
                    colours = (ColourCommunity(copy.colour),)
                aigp = originated_aigp(copy, n)  # 0 marks the primary copy
            return Advertise(
                n.address,
                prefix,
                nh,
                as_path=own,
                communities=(GRACEFUL_SHUTDOWN,) if drain else (),
                colours=colours,
                aigp=aigp,
            )
        assert best is not None
        communities = best.communities
        if drain and GRACEFUL_SHUTDOWN not in communities:
            communities = (*communities, GRACEFUL_SHUTDOWN)
        value: bytes | None = None
        if nhcs is not None:
            value = nhcs.get((nh, prefix.version))
            if value is None:
                value = nhcs[(nh, prefix.version)] = self._own_nhc(nh, prefix.version, mp_ids)
        return Advertise(
            n.address,
            prefix,
            nh,
            as_path=(*own, *best.as_path),
            origin=best.origin,
            communities=communities,
            nhc=value,
            colours=best.colours,
            aigp=learned_aigp(best, n),
        )


def _bounded_intern(table: dict[Any, _V], key: Any, value: _V) -> _V:
    """``table[key]`` if there, else ``value`` stored under ``key``; a table that reached 4096
    entries starts over (few distinct values in a fabric: a full one means churn)."""
    have = table.get(key)
    if have is not None:
        return have
    if len(table) >= 4096:
        table.clear()
    table[key] = value
    return value
