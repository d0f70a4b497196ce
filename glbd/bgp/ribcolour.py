"""Fabric colours in the RIB, the AIGP side (pure; docs/colours.md): which sessions carry AIGP
(RFC 7311), the AIGP an advertisement carries, and the primary colour of a received prefix.

The rest of the colour rules (hiding, the send rule, the copies of a coloured origination) are
:mod:`glbd.colours.colours`; the RIB applies them in :mod:`glbd.bgp.ribadjin` (hidden paths),
:mod:`glbd.bgp.ribselect` (selection and what each session is sent) and :mod:`glbd.bgp.rib`.

* **AIGP_SESSION** (RFC 7311: off by default between ASes): on for a coloured session,
  off for an uncoloured one. Decided here, per session, by the RIB: an uncoloured session is
  sent no AIGP and an AIGP it sends is ignored (counted ``aigp_ignored``); a session a reload
  uncolours drops the AIGP of the paths it holds (one it colours gets AIGP with the routes its
  peer sends from then on: an ignored AIGP is not kept). ExaBGP has AIGP
  enabled on every session (glbd/bgp/exabgp.py) so that a reload that colours or uncolours a
  session does not make it a new ExaBGP session.
* **Sending**: the primary copy of a coloured origination carries AIGP 0 (as Junos marks it);
  backup copies and uncoloured prefixes carry none. A learned route goes on with the AIGP it
  came with, unchanged (RFC 7311 would add the distance to the new next hop: every hop of
  a DPF fabric would add the same, so 0 keeps the primary copy's mark).
* **The primary colour** of a prefix at a receiving leaf: among its visible (not hidden)
  received copies that carry AIGP, the colour of the one with the lowest metric; of a copy with
  several colours, the lowest; between copies of equal metric, the lowest colour. A copy counts
  while it is in the Adj-RIB-In, usable or not (BFD down, stale): the colour names the prefix's
  preferred logical fabric, which stays the same while that fabric's path is down. None: no
  copy carries AIGP (the prefix is plain GLB).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, MutableMapping

from glbd.bgp import exabgp_api as api
from glbd.bgp.ribadjin import AdjRibIn
from glbd.bgp.ribtypes import NeighborParams, Path, PeerState, Prefix, hidden_on
from glbd.colours.colours import Advert

__all__ = [
    "aigp_session",
    "learned_aigp",
    "origin_as",
    "originated_aigp",
    "primary_colour",
    "received_aigp",
    "recoloured",
    "set_colour",
    "without_aigp",
]


def aigp_session(n: NeighborParams) -> bool:
    """RFC 7311's AIGP_SESSION of ``n``: AIGP is sent and taken on coloured sessions only."""
    return n.colour is not None


def received_aigp(
    st: PeerState, attrs: api.PathAttributes, counters: Counter[str] | None = None, n: int = 0
) -> int | None:
    """The AIGP a route from ``st`` keeps: its own on a coloured session, None on an uncoloured
    one (RFC 7311: ignored where AIGP_SESSION is off); ``n`` routes that ignore one are counted
    ``aigp_ignored`` for the peer and in ``counters``."""
    if st.params.colour is not None:
        return attrs.aigp
    if attrs.aigp is not None and counters is not None and n:
        st.counters["aigp_ignored"] += n
        counters["aigp_ignored"] += n
    return None


def recoloured(adj: AdjRibIn, st: PeerState, intern: Callable[[Path], Path]) -> int:
    """``st``'s session has a new colour (``st.params``): uncoloured now, its paths lose their
    AIGP (AIGP_SESSION is off); then its hidden gauges are counted again. Returns how many of
    its paths are hidden now."""
    if st.params.colour is None:
        for prefix, p in list(st.paths()):
            if p.aigp is not None:
                adj.store_path(st, prefix, intern(without_aigp(p)))
    return adj.recount_hidden(st)


def without_aigp(p: Path) -> Path:
    """``p`` without its AIGP (not interned)."""
    return Path(
        p.peer,
        p.next_hop,
        p.as_path,
        p.as_path_length,
        p.origin,
        p.communities,
        p.nnh,
        p.nnhn_status,
        p.stale,
        p.colours,
    )


#: the AIGP metric that marks the primary copy. Junos uses 0; FRR 10 takes an AIGP of 0 for
#: none and drops it, so the mark would not cross an FRR spine. Any metric marks the copy (a
#: receiver takes the lowest AIGP there is), so glbd sends 1 and reads Junos's 0 alike.
PRIMARY_AIGP = 1


def originated_aigp(copy: Advert, n: NeighborParams) -> int | None:
    """The AIGP of the copy of an originated prefix ``n`` gets: :data:`PRIMARY_AIGP` on the
    primary copy of a coloured prefix, on a coloured session; None otherwise (backups,
    uncoloured prefixes)."""
    if copy.colour is None or copy.backup or not aigp_session(n):
        return None
    return PRIMARY_AIGP


def origin_as(best: Path | None, colour: int | None) -> int | None:
    """With a colour: the AS that originated the prefix (the best path's last AS; None for a
    local one), which names the destination when no NNHN does."""
    if colour is None or best is None or not best.as_path:
        return None
    return best.as_path[-1]


def learned_aigp(best: Path, n: NeighborParams) -> int | None:
    """The AIGP a learned route is passed on to ``n`` with: as received, on a coloured
    session."""
    return best.aigp if aigp_session(n) else None


def primary_colour(slots: Iterable[PeerState | None], paths: Iterable[Path | None]) -> int | None:
    """The primary colour of a prefix whose Adj-RIB-In holds ``paths`` (slot by slot, as
    ``slots``): the colour of its visible copy with the lowest AIGP (see the module)."""
    best: tuple[int, int] | None = None
    for st, p in zip(slots, paths, strict=False):
        if p is None or p.aigp is None or not p.colour_set or st is None:
            continue
        if hidden_on(st.params.colour, p) is not None:
            continue
        key = (p.aigp, min(p.colour_set))
        if best is None or key < best:
            best = key
    return None if best is None else best[1]


def set_colour(table: MutableMapping[Prefix, int], prefix: Prefix, colour: int | None) -> None:
    """Record ``prefix``'s primary colour in ``table`` (None: it has none, not kept)."""
    if colour is None:
        table.pop(prefix, None)
    else:
        table[prefix] = colour
