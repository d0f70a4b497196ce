"""Received routes, from the UPDATE to the Adj-RIB-In (pure): the family and import-policy
filter, whether a next hop can forward (with this router's addresses and on-link subnets), the
validation of a received NHC, and storing what passed as interned paths (:class:`Inbound`).

Validation of a received NHC (load balancer), in order, each failure counted by name (a
:class:`~glbd.base.reasons.NhcStatus`; the route always stays: attribute discard): flags
optional transitive as ExaBGP reports them (``nhc_bad_flags``) -> decodes (else
``nhc_malformed_<reason>``) -> header AFI/SAFI equal the route's family
(``nhc_family_mismatch``) -> header next hop equals the route's next hop (all-zero accepted as
``nhc_nh_unspecified`` unless strict) -> a link-local-only next hop carries a BGPID
(``nhc_malformed_bgpid_missing``) equal to the peer's BGP ID, and AS when 8 octets
(``nhc_bgpid_mismatch``) -> has a usable NNHN (``nnhn_absent``, ``nnhn_discarded``,
``nnhn_zero_id``) -> NNHN[0] equals the peer's BGP ID (else ``nnhn_nh_bgp_id_mismatch``, a
stale relayed NNHN) -> not one of the later prefixes of a multi-prefix UPDATE (FRR 10.x computes
one NNHN per UPDATE from its first prefix, so the others are not trusted unless
``trust_packed_nnhn``).

Separate from the RIB: these are verdicts on one route or one UPDATE, with their own inputs
(the connected addresses the io passes in, the NHC codec), that never select anything.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import structlog

from glbd.base.reasons import NHC_DISREGARDED, NhcDiscard, NhcStatus, RouteRejected, nhc_malformed
from glbd.bgp import exabgp_api as api
from glbd.bgp import nhc as nhcmod
from glbd.bgp.ribadjin import AdjRibIn
from glbd.bgp.ribcolour import received_aigp
from glbd.bgp.ribtypes import (
    Connected,
    IPAddress,
    Path,
    PeerState,
    Prefix,
    RibParams,
    count_rejected,
    no_import_policy,
)

__all__ = ["Inbound", "decode_nhc", "validate"]

log = structlog.get_logger(__name__)


class Inbound:
    """Received routes into ``adj`` under ``params`` (kept current by the RIB): rejections
    are counted in ``counters`` (the RIB's) and withdraw the path they replace; ``intern``
    is the RIB's path interning, ``keep_refused`` keeps a refused route for the pre-policy
    view. A next hop is checked against this router's addresses and on-link subnets by
    interface (:meth:`set_connected`) and the own addresses ``params`` names."""

    def __init__(
        self,
        params: RibParams,
        adj: AdjRibIn,
        counters: Counter[str],
        intern: Callable[[Path], Path],
        keep_refused: Callable[
            [PeerState, api.RouteAnnounced, api.UpdateEvent, RouteRejected], None
        ],
    ) -> None:
        self.params = params
        self._adj = adj
        self._counters = counters
        self._intern = intern
        self._keep_refused = keep_refused
        self._own: frozenset[IPAddress] = frozenset()
        self._own_ll: dict[str, frozenset[IPAddress]] = {}
        self._subnets: dict[str, tuple[Prefix, ...]] = {}
        self._own_params: tuple[RibParams, frozenset[IPAddress]] | None = None

    def set_connected(self, connected: Iterable[Connected]) -> None:
        """This router's addresses and on-link subnets, per interface (all of them: a next hop
        on any of them is our own). Applies to routes received from now on; until it is called
        only the neighbors' local addresses count as our own and no next hop is off-link."""
        own: set[IPAddress] = set()
        own_ll: dict[str, set[IPAddress]] = {}
        subnets: dict[str, list[Prefix]] = {}
        for c in connected:
            if c.address.version == 6 and c.address.is_link_local:
                own_ll.setdefault(c.interface, set()).add(c.address)
                continue  # fe80::/64 is on every port: never a subnet for the check
            own.add(c.address)
            subnets.setdefault(c.interface, []).append(c.network)
        self._own = frozenset(own)
        self._own_ll = {k: frozenset(v) for k, v in own_ll.items()}
        self._subnets = {k: tuple(v) for k, v in subnets.items()}

    def rejected(self, st: PeerState, nh: IPAddress) -> RouteRejected | None:
        """Why ``nh``, received from ``st``, cannot forward (None: usable). Our own address,
        a global one outside the session interface's subnets while the session's peer is
        inside them, or no gateway at all: the kernel would refuse such a nexthop, and a
        prefix's other paths must not wait on it."""
        if nh.is_unspecified or nh.is_loopback or nh.is_multicast:
            return RouteRejected.NEXTHOP_INVALID
        n = st.params
        if nh.version == 6 and nh.is_link_local:  # on-link on the session's port by definition
            mine = self._own_ll.get(n.interface or "", frozenset())
            if nh in mine or nh == n.local_address or nh == n.local_address6:
                return RouteRejected.NEXTHOP_SELF
            return None
        if nh in self._own or nh in self._params_own():
            return RouteRejected.NEXTHOP_SELF
        subnets = self._subnets.get(n.interface or "", ())
        nets = [x for x in subnets if x.version == nh.version]
        if not nets or any(nh in x for x in nets):
            return None
        peer = n.address  # a directly connected session (either family) or a multihop one
        if (peer.version == 6 and peer.is_link_local) or any(peer in x for x in subnets):
            return RouteRejected.NEXTHOP_OFFLINK
        return None

    def _params_own(self) -> frozenset[IPAddress]:
        """The neighbors' global local addresses (our side of each session), per params."""
        have = self._own_params
        if have is not None and have[0] is self.params:
            return have[1]
        own = frozenset(
            a
            for n in self.params.neighbors
            for a in (n.local_address, n.local_address6)
            if a is not None and not (a.version == 6 and a.is_link_local)
        )
        self._own_params = (self.params, own)
        return own

    def check(
        self,
        st: PeerState,
        announced: tuple[api.RouteAnnounced, ...],
        changed: set[Prefix],
    ) -> tuple[api.RouteAnnounced, ...]:
        """The announced routes whose next hop can forward; a rejected one is counted by reason
        and is an implicit withdraw of the path it replaces. One check per distinct next hop
        (an UPDATE has one, shared by its routes)."""
        peer = st.params.address
        first = announced[0].next_hop
        if (
            all(a.next_hop is first for a in announced)
            and self.rejected(st, peer if first is None else first) is None
        ):
            return announced
        out: list[api.RouteAnnounced] = []
        verdicts: dict[IPAddress, RouteRejected | None] = {}
        for a in announced:
            nh = peer if a.next_hop is None else a.next_hop
            if nh not in verdicts:
                verdicts[nh] = self.rejected(st, nh)
            why = verdicts[nh]
            if why is None:
                out.append(a)
                continue
            count_rejected(self._counters, st, why, 1)
            if self._adj.del_path(st, a.prefix):
                changed.add(a.prefix)
            k = st.counters[why.counter]
            if k & (k - 1) == 0:  # 1st, 2nd, 4th, 8th... per peer and reason
                log.warning(
                    "bgp_next_hop_rejected",
                    peer=str(peer),
                    prefix=str(a.prefix),
                    next_hop=str(nh),
                    reason=why,
                    count=k,
                )
        return tuple(out)

    def store(
        self,
        st: PeerState,
        ev: api.UpdateEvent,
        announced: tuple[api.RouteAnnounced, ...],
        changed: set[Prefix],
    ) -> None:
        """Store the routes that passed the checks as ``st``'s paths (their prefixes added to
        ``changed`` when new): the NHC validated once per next hop and family, not per prefix
        (it is the UPDATE's), and one interned Path per distinct result."""
        attrs = ev.attributes
        params = self.params
        decoded, decode_error = decode_nhc(params, st, attrs, self._counters)
        aigp = received_aigp(st, attrs, self._counters, len(announced))
        made: dict[tuple[IPAddress, str], Path] = {}
        checked: dict[tuple[IPAddress, str, int], tuple[Any, NhcStatus, bool]] = {}
        # ExaBGP 5.0 lists an IPv4 prefix FRR 10 sends with an IPv6 next hop (RFC 8950) twice
        # in one UPDATE: a repeat of the first prefix is that prefix, not a packed one
        first = ev.announced[0].prefix if ev.announced else None
        first_hash = hash(first)
        check_packed = not params.trust_packed_nnhn
        # the routes of one UPDATE share next hop and family objects: the last verdict and
        # path are reused by identity, without hashing addresses per prefix
        last: tuple[Any, ...] = ()
        verdict: tuple[Any, NhcStatus, bool] = (None, NhcStatus.ABSENT, False)
        path: Path | None = None
        path_for: tuple[Any, ...] = ()
        for a in announced:
            next_hop = a.next_hop if a.next_hop is not None else ev.peer
            kind = type(a.prefix)
            if (
                not last
                or last[0] is not next_hop
                or last[1] is not a.family
                or last[2] is not kind
            ):
                last = (next_hop, a.family, kind)
                ck = (next_hop, a.family, a.prefix.version)
                have = checked.get(ck)
                if have is None:
                    have = checked[ck] = validate(
                        params, st, a, next_hop, attrs, decoded, decode_error
                    )
                verdict = have
            nnh, status, unspecified = verdict
            if unspecified:
                self._counters["nhc_nh_unspecified"] += 1
                st.counters["nhc_nh_unspecified"] += 1
            if (
                nnh is not None
                and check_packed
                and a.prefix is not first
                and (hash(a.prefix) != first_hash or a.prefix != first)
            ):
                nnh, status = None, NhcStatus.NNHN_PACKED_UNTRUSTED
            if status in NHC_DISREGARDED:
                self._nhc_ignored(st, a.prefix, status)
            if path is None or path_for[0] is not next_hop or path_for[1] is not status:
                path = made.get((next_hop, status))
                path_for = (next_hop, status)
            if path is None or (path.nnh is not nnh and path.nnh != nnh):
                path = made[(next_hop, status)] = self._intern(
                    Path(
                        ev.peer,
                        next_hop,
                        attrs.as_path,
                        attrs.as_path_length,
                        attrs.origin,
                        attrs.communities,
                        nnh,
                        status,
                        colours=attrs.colours,
                        aigp=aigp,
                    )
                )
            stored = self._adj.store_path(st, a.prefix, path)
            if stored is not None:
                changed.add(stored)

    def _nhc_ignored(self, st: PeerState, prefix: Prefix, status: NhcStatus) -> None:
        """A route's NHC was disregarded: counted, and logged for the 1st, 2nd, 4th, 8th...
        per peer and reason."""
        st.counters[status] += 1
        self._counters[status] += 1
        n = st.counters[status]
        if n & (n - 1) == 0:
            log.info(
                "nhc_ignored",
                peer=str(st.params.address),
                prefix=str(prefix),
                reason=status,
                count=n,
                peer_bgp_id=str(st.bgp_id),
            )

    def take(
        self,
        st: PeerState,
        announced: tuple[api.RouteAnnounced, ...],
        changed: set[Prefix],
        ev: api.UpdateEvent,
    ) -> tuple[api.RouteAnnounced, ...]:
        """The announced routes the neighbor's families and import filter take; a rejected
        one is an implicit withdraw of the path it replaces."""
        n = st.params
        out = []
        refused = no_import_policy(self.params, n)
        for a in announced:
            if refused:
                why = RouteRejected.NO_IMPORT_POLICY
            elif a.prefix.version not in n.families:
                why = RouteRejected.FAMILY_NOT_ACTIVE
            elif n.import_filter is not None and not n.import_filter.permits(a.prefix):
                why = RouteRejected.IMPORT_DENIED
            else:
                out.append(a)
                continue
            count_rejected(self._counters, st, why, 1)
            if self._adj.del_path(st, a.prefix):
                changed.add(a.prefix)
            self._keep_refused(st, a, ev, why)
        return tuple(out)


def decode_nhc(
    params: RibParams, st: PeerState, attrs: api.PathAttributes, counters: Counter[str]
) -> tuple[nhcmod.Nhc | None, str]:
    """The UPDATE's NHC decoded (None if absent or malformed) and the decode error ("" if
    none); a load balancer counts the TLVs it discarded once per UPDATE, however many
    prefixes."""
    decoded: nhcmod.Nhc | None = None
    decode_error = ""
    if attrs.nhc is not None:
        try:
            decoded = nhcmod.decode_value(attrs.nhc)
        except nhcmod.DecodeError as exc:
            decode_error = exc.reason
        if decoded is not None and decoded.discarded and params.role.load_balancer:
            for d in decoded.discarded:
                key = NhcDiscard(d).counter
                st.counters[key] += 1
                counters[key] += 1
    return decoded, decode_error


def validate(
    params: RibParams,
    st: PeerState,
    route: api.RouteAnnounced,
    next_hop: IPAddress,
    attrs: api.PathAttributes,
    decoded: nhcmod.Nhc | None,
    decode_error: str,
) -> tuple[tuple[ipaddress.IPv4Address, ...] | None, NhcStatus, bool]:
    """The route's NNHN and status, and whether its NHC's next hop is all-zero and was
    accepted (the caller counts ``nhc_nh_unspecified`` per route)."""
    if attrs.nhc is None:
        return None, NhcStatus.ABSENT, False
    if not params.role.load_balancer:
        return None, NhcStatus.NOT_VALIDATED, False
    if nhcmod.flags_problem(attrs.nhc_flags) is not None:
        return None, NhcStatus.NHC_BAD_FLAGS, False
    if decoded is None:
        return None, nhc_malformed(decode_error), False
    if (decoded.afi, decoded.safi) != _family_afi_safi(route):
        return None, NhcStatus.NHC_FAMILY_MISMATCH, False
    match = decoded.next_hop_match(next_hop)
    if match is nhcmod.NextHopMatch.MISMATCH:
        return None, NhcStatus.NHC_NH_MISMATCH, False
    unspecified = match is nhcmod.NextHopMatch.UNSPECIFIED
    if unspecified and params.nnhn_strict_next_hop:
        return None, NhcStatus.NHC_NH_UNSPECIFIED_REJECTED, False
    nnh, status = _check_nnhn(st, decoded)
    return nnh, status, unspecified


def _check_nnhn(
    st: PeerState, decoded: nhcmod.Nhc
) -> tuple[tuple[ipaddress.IPv4Address, ...] | None, NhcStatus]:
    if decoded.link_local_only:  # the address alone does not name the router (§3.3)
        bid = decoded.bgpid
        if bid is None:
            return None, NhcStatus.NHC_MALFORMED_BGPID_MISSING
        if (
            st.bgp_id is None
            or bid.bgp_id != st.bgp_id
            or bid.asn
            not in (
                None,
                st.params.remote_as,
            )
        ):
            return None, NhcStatus.NHC_BGPID_MISMATCH
    if decoded.nnhn is None:
        if "nnhn_zero_id" in decoded.discarded:
            return None, NhcStatus.NNHN_ZERO_ID
        if any(d.startswith("nnhn_") for d in decoded.discarded):
            return None, NhcStatus.NNHN_DISCARDED
        return None, NhcStatus.NNHN_ABSENT
    if st.bgp_id is None or decoded.nnhn.nh_bgp_id != st.bgp_id:
        return None, NhcStatus.NNHN_NH_BGP_ID_MISMATCH
    return decoded.nnhn.nnh_ids, NhcStatus.VALID


def _family_afi_safi(route: api.RouteAnnounced) -> tuple[int, int]:
    """The (AFI, SAFI) of ExaBGP's family name ("ipv4 unicast" -> (1, 1))."""
    afi, _, safi = route.family.partition(" ")
    return (
        _AFI.get(afi, nhcmod.AFI_IPV4 if route.prefix.version == 4 else nhcmod.AFI_IPV6),
        _SAFI.get(safi, -1),
    )


_AFI = {"ipv4": nhcmod.AFI_IPV4, "ipv6": nhcmod.AFI_IPV6}
_SAFI = {"unicast": 1, "multicast": 2}
