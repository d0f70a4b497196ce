"""Path-quality table (pure): profiles of prefixes and their per-next-hop ECMP weights.

Inputs (plain method calls, no clock, no I/O):

* **local** link quality per fabric interface (:meth:`PathTable.set_local`; from
  :class:`glbd.quality.linkq.LinkMonitor`): band 0..7, down flag, capacity;
* **remote** link qualities per helper (:meth:`PathTable.set_remote`; from a heartbeat
  :class:`heartbeat.receiver.RemoteUpdate`): every entry keyed by (spine BGP id, far-end node id,
  link id), or None when the helper's heartbeats expired (unknown);
* **routes** (:meth:`PathTable.set_prefix` / :meth:`on_next_hops_changed`; from the RIB): each
  prefix's next hops, each with its validated next-next-hop (NNH) set or None.

Profiles: prefixes whose next-hop set *and* per-next-hop NNH sets are equal share one profile,
keyed by a stable string (:func:`glbd.quality.pathprofile.profile_key`), so the FIB keeps one
nexthop group per profile. There is no 3-stage assumption: a next hop may have several NNHs
(5-stage Clos, anycast prefixes).

Profile cap: every distinct NNHN list an UPDATE carries can make one more profile (and kernel
group), so the profiles that carry NNHN are capped (``PathTableParams.max_profiles``). A prefix
whose NNHN would make one beyond the cap is not refused: it falls back to the profile of its
next hops without NNHN (plain ECMP with local quality, shared by every such prefix with the same
next hops), counted (:class:`ProfileFallback`). When a profile slot frees up (its last prefix
left), the oldest waiting profile takes it at once and its prefixes move back to it.

Weights: the documented functions 1-7 of :mod:`glbd.quality.pathweight` (see docs/heartbeat.md §7),
with a controller memory per profile (function 6).

Incremental: an index from interface and from (helper, NNH) to profiles means one changed link
recomputes only the profiles that depend on it, and a heartbeat rebuilds only its helper's rows
in them (the others keep their cached rows while the local inputs are unchanged). Each call
returns the profiles whose weights changed, the profiles removed and the prefixes whose profile
changed (:class:`glbd.quality.pathchanges.Changes`), and keeps no copy: the caller routes them once.

This module keeps the table's state and bookkeeping (inputs, profiles, their index, the cap);
the data types are in :mod:`glbd.quality.pathmodel`, the weight functions in
:mod:`glbd.quality.pathweight`, the profile state and key in :mod:`glbd.quality.pathprofile` and the
``glbctl`` documents in :mod:`glbd.quality.pathview`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from glbd.base.reasons import ProfileFallback
from glbd.quality.pathchanges import Changes
from glbd.quality.pathmodel import (
    LocalLike,
    LocalLink,
    NextHop,
    PathTableParams,
    RemoteLike,
    Weight,
    next_hop_from_rib,
)
from glbd.quality.pathprofile import Profile, profile_key
from glbd.quality.pathview import profile_dict, profiles_dict, quality_dict
from glbd.quality.pathweight import Agg, aggregate, compute_weights
from heartbeat import wire

if TYPE_CHECKING:
    from glbd.bgp.ribtypes import NextHopsChanged

__all__ = ["FALLBACK_WARN_INTERVAL_S", "PathTable"]

#: the weight-relevant prefix of a heartbeat v1 entry: far end, link id, capacity, band, flags
_SIG = struct.Struct("!IIIBB6x")
#: the fallback warning is logged at most this often (a flood of unique NNHN lists must not
#: flood the log; the counters have every one)
FALLBACK_WARN_INTERVAL_S = 60.0


# --- the table -------------------------------------------------------------------------------


class PathTable:
    """The inputs, the profiles and their index, and the profile cap (module docstring)."""

    def __init__(self, params: PathTableParams | None = None) -> None:
        self._p = params or PathTableParams()
        self._local: dict[str, LocalLink] = {}
        self._remote: dict[int, dict[tuple[int, int], tuple[int, bool, float]]] = {}
        self._agg: dict[tuple[int, int], Agg] = {}
        self._prefix: dict[str, str] = {}
        self._profiles: dict[str, Profile] = {}
        self._by_if: dict[str, set[str]] = {}
        self._by_remote: dict[tuple[int, int], set[str]] = {}
        self._rib_memo: dict[int, tuple[Any, dict[NextHop, frozenset[int] | None], str]] = {}
        self._conv: dict[int, tuple[Any, tuple[NextHop, frozenset[int] | None] | None]] = {}
        self.recomputes = 0
        #: next-hop rows looked at by recomputes (a heartbeat looks at its helper's rows only)
        self.rows_examined = 0
        #: bumped when a local input or the parameters change: a profile whose rows are of an
        #: older epoch looks at every row, not only at the helpers a heartbeat changed
        self._local_epoch = 0
        #: profiles with ``nnhn`` (what the cap counts)
        self._nnhn_profiles = 0
        #: profiles the cap keeps out: key -> (next hops, prefixes waiting), oldest first;
        #: each prefix is meanwhile in the profile of its next hops without NNHN
        self._waiting: dict[str, tuple[dict[NextHop, frozenset[int] | None], set[str]]] = {}
        self._waiting_of: dict[str, str] = {}  # prefix -> the profile it waits for
        #: prefixes sent to plain ECMP, by reason (every time, not only the ones still there)
        self.fallbacks: dict[ProfileFallback, int] = dict.fromkeys(ProfileFallback, 0)
        self.fallback_total = 0
        self._unlogged = 0
        self._warned_at: float | None = None

    @property
    def params(self) -> PathTableParams:
        return self._p

    def set_params(self, params: PathTableParams) -> Changes:
        self._p = params
        self._local_epoch += 1
        for prof in self._profiles.values():  # every row depends on the parameters
            prof.rows = [None] * len(prof.items)
        if not params.role.load_balancer:
            self._remote.clear()
            self._agg.clear()
        if not params.memory:
            for prof in self._profiles.values():
                prof.mem = [1.0] * len(prof.items)
        # a configuration change is not a measurement: no controller step
        return self._recompute(set(self._profiles), step=False) | self._promote()

    # --- inputs ----------------------------------------------------------------------------

    def set_local(self, ifname: str, q: LocalLike | None) -> Changes:
        """Local quality of a fabric interface (None = not measured / not monitored)."""
        new = None if q is None else LocalLink(q.band, q.down, float(q.capacity_mbps))
        if self._local.get(ifname) == new:
            return Changes()
        if new is None:
            del self._local[ifname]
        else:
            self._local[ifname] = new
        self._local_epoch += 1
        return self._recompute(self._by_if.get(ifname, set()))

    def set_remote(self, spine_id: int, entries: Iterable[RemoteLike] | None) -> Changes:
        """The complete link snapshot of helper ``spine_id`` (None = unknown/expired)."""
        return self.set_remotes(((spine_id, entries),))

    def set_remotes(self, snapshots: Iterable[tuple[int, Iterable[RemoteLike] | None]]) -> Changes:
        """Several helpers' snapshots at once (in order; a later one of the same helper wins):
        a profile through any of them is recomputed once, not once per helper, so a burst of
        heartbeats from a fabric's spines costs one recompute of each profile they touch."""
        if not self._p.role.load_balancer:
            return Changes()
        affected: set[str] = set()
        bids: set[int] = set()
        for spine_id, entries in snapshots:
            keys = self._put_remote(int(spine_id), entries)
            if keys:
                affected |= keys
                bids.add(int(spine_id))
        return self._recompute(affected, bids=bids) if affected else Changes()

    def _put_remote(self, spine_id: int, entries: Iterable[RemoteLike] | None) -> set[str]:
        """Store one snapshot and its aggregates; the keys of the profiles it affects."""
        links: dict[tuple[int, int], tuple[int, bool, float]] | None = None
        if isinstance(entries, wire.Entries):  # fast path: straight from the packed bytes
            links = {
                (fe, lid): (band, bool(fl & wire.ENTRY_FLAG_DOWN), float(cap))
                for fe, lid, cap, band, fl in _SIG.iter_unpack(entries.raw)
            }
        elif entries is not None:
            links = {
                (e.far_end_id, e.link_id): (e.band, e.down, float(e.capacity_mbps)) for e in entries
            }
        old = self._remote.get(spine_id)
        if links == old:
            return set()
        if links is None:
            del self._remote[spine_id]
        else:
            self._remote[spine_id] = links
        # far ends whose links changed (set algebra on the item views runs in C)
        diff = (old or {}).items() ^ (links or {}).items()
        groups: dict[int, list[tuple[int, bool, float]]] = {k[0]: [] for k, _v in diff}
        if links:
            for (fe, _lid), v in links.items():
                g = groups.get(fe)
                if g is not None:
                    g.append(v)
        affected: set[str] = set()
        agg_map = self._agg
        for fe, g in groups.items():
            k = (spine_id, fe)
            agg = aggregate(g) if g else None
            if agg_map.get(k) == agg:
                continue
            if agg is None:
                del agg_map[k]
            else:
                agg_map[k] = agg
            affected |= self._by_remote.get(k, set())
        if old is None or links is None:
            # the helper appeared or expired: every profile through it changes its remote
            # status (no_heartbeat <-> nnh_not_reported), even for NNHs it does not report
            for (bid, _nnh), keys in self._by_remote.items():
                if bid == spine_id:
                    affected |= keys
        return affected

    def set_prefix(
        self, prefix: str, next_hops: Mapping[NextHop, frozenset[int] | None]
    ) -> Changes:
        """The forwarding next hops of ``prefix`` and each one's validated NNH set (None =
        missing/invalid NNHN). An empty mapping removes the prefix."""
        if not next_hops:
            return self.remove_prefix(prefix)
        nhs = {
            nh: (None if s is None else frozenset(int(i) for i in s)) for nh, s in next_hops.items()
        }
        return self._set_prefix(prefix, nhs, profile_key(nhs))

    def _set_prefix(
        self, prefix: str, nhs: dict[NextHop, frozenset[int] | None], key: str
    ) -> Changes:
        old = self._prefix.get(prefix)
        wanted = self._waiting_of.get(prefix)
        if wanted is not None:
            if wanted == key:
                return Changes()  # still waiting for a slot
            self._unwait(prefix, wanted)
        elif old == key:
            return Changes()
        if key not in self._profiles and self._at_cap(nhs, old, prefix):
            self._wait(prefix, key, nhs)
            nhs = dict.fromkeys(nhs)
            key = profile_key(nhs)
        if old == key:
            return Changes()  # moved between waiting and its own plain profile: same group
        removed = self._detach(prefix, old) if old is not None else frozenset()
        self._prefix[prefix] = key
        prof = self._profiles.get(key)
        updated: frozenset[str] = frozenset()
        if prof is None:
            prof = self._new_profile(key, nhs)
            updated = frozenset((key,))
        prof.prefixes.add(prefix)
        ch = Changes(updated, removed, frozenset((prefix,)))
        return ch | self._promote() if removed and self._waiting else ch

    def remove_prefix(self, prefix: str) -> Changes:
        old = self._prefix.pop(prefix, None)
        if old is None:
            return Changes()
        wanted = self._waiting_of.get(prefix)
        if wanted is not None:
            self._unwait(prefix, wanted)
        ch = Changes(frozenset(), self._detach(prefix, old), frozenset((prefix,)))
        return ch | self._promote() if ch.removed and self._waiting else ch

    # --- the profile cap -------------------------------------------------------------------

    def _at_cap(
        self, nhs: Mapping[NextHop, frozenset[int] | None], old: str | None, prefix: str
    ) -> bool:
        """A new profile of ``nhs`` would exceed the cap (a profile ``prefix`` leaves empty
        frees its slot first: a prefix moving between NNHN sets keeps its slot)."""
        if all(v is None for v in nhs.values()):
            return False  # plain: bounded by the next-hop sets, never capped
        n = self._nnhn_profiles
        op = None if old is None else self._profiles.get(old)
        if op is not None and op.nnhn and len(op.prefixes) == 1 and prefix in op.prefixes:
            n -= 1
        return n >= self._p.max_profiles

    def _wait(self, prefix: str, key: str, nhs: dict[NextHop, frozenset[int] | None]) -> None:
        entry = self._waiting.get(key)
        if entry is None:
            entry = self._waiting[key] = (nhs, set())
        entry[1].add(prefix)
        self._waiting_of[prefix] = key
        self.fallbacks[ProfileFallback.PROFILE_CAP] += 1
        self.fallback_total += 1
        self._unlogged += 1

    def _unwait(self, prefix: str, key: str) -> None:
        del self._waiting_of[prefix]
        prefixes = self._waiting[key][1]
        prefixes.discard(prefix)
        if not prefixes:
            del self._waiting[key]

    def _promote(self) -> Changes:
        """Waiting profiles take the slots that are free, oldest first: each is created and
        its prefixes move to it from their plain profiles (one group more, routes re-pointed)."""
        out = Changes()
        while self._waiting and self._nnhn_profiles < self._p.max_profiles:
            key = next(iter(self._waiting))
            nhs, prefixes = self._waiting.pop(key)
            prof = self._profiles.get(key) or self._new_profile(key, nhs)
            removed: set[str] = set()
            for p in prefixes:
                del self._waiting_of[p]
                removed |= self._detach(p, self._prefix[p])
                self._prefix[p] = key
                prof.prefixes.add(p)
            out = out | Changes(frozenset((key,)), frozenset(removed), frozenset(prefixes))
        return out

    def fallback_prefixes(self) -> int:
        """Prefixes routed over plain ECMP now because the cap keeps their profile out."""
        return len(self._waiting_of)

    def fallback_warning(self, now: float) -> dict[str, Any] | None:
        """The fields of a warning when prefixes fell back since the last one and that one is
        at least ``FALLBACK_WARN_INTERVAL_S`` old (``now``: monotonic seconds); else None."""
        if not self._unlogged or (
            self._warned_at is not None and now - self._warned_at < FALLBACK_WARN_INTERVAL_S
        ):
            return None
        n, self._unlogged, self._warned_at = self._unlogged, 0, now
        return {
            "reason": str(ProfileFallback.PROFILE_CAP),
            "fell_back": n,
            "fallback_prefixes": len(self._waiting_of),
            "max_profiles": self._p.max_profiles,
        }

    def on_next_hops_changed(self, ev: NextHopsChanged) -> Changes:
        """Convenience for the RIB's event. Next hops whose peer BGP id is unknown are used
        without remote quality (their NNH set is ignored)."""
        if not ev.next_hops:
            return self.remove_prefix(str(ev.prefix))
        # the RIB hands out one tuple object per next-hop set: convert and key it once for
        # all the prefixes that share it (the memo keeps the tuple, so its id stays unique)
        memo = self._rib_memo.get(id(ev.next_hops))
        if memo is None or memo[0] is not ev.next_hops:
            nhs: dict[NextHop, frozenset[int] | None] = {}
            for nh in ev.next_hops:
                conv = self._conv.get(id(nh))  # the RIB's views are shared objects too
                if conv is None or conv[0] is not nh:
                    if nh.peer_bgp_id is None:
                        c: tuple[NextHop, frozenset[int] | None] | None = (
                            NextHop(0, str(nh.next_hop), nh.interface),
                            None,
                        )
                    else:
                        c = next_hop_from_rib(nh)
                    if len(self._conv) >= 8192:
                        self._conv.clear()
                    conv = self._conv[id(nh)] = (nh, c)
                if conv[1] is not None:
                    nhs[conv[1][0]] = conv[1][1]
            if not nhs:
                return self.remove_prefix(str(ev.prefix))
            if len(self._rib_memo) >= 64:
                self._rib_memo.clear()
            memo = self._rib_memo[id(ev.next_hops)] = (ev.next_hops, nhs, profile_key(nhs))
        return self._set_prefix(str(ev.prefix), memo[1], memo[2])

    # --- outputs ---------------------------------------------------------------------------

    def profile_of(self, prefix: str) -> str | None:
        return self._prefix.get(prefix)

    def weights(self, key: str) -> Mapping[NextHop, Weight]:
        prof = self._profiles.get(key)
        return {} if prof is None else dict(prof.weights)

    def weight_values(
        self, key: str
    ) -> tuple[Sequence[tuple[NextHop, tuple[int, ...] | None]], Sequence[int]] | None:
        """A profile's next hops (each with its sorted NNH ids) and their weight values, in
        the same order: what the FIB needs, without the inputs. Read-only. The next hops are
        one sequence object for the profile's life, so a caller may key a cache on it."""
        prof = self._profiles.get(key)
        return None if prof is None else (prof.items, prof.vals)

    def next_hops(self, key: str) -> Mapping[NextHop, frozenset[int] | None]:
        prof = self._profiles.get(key)
        return {} if prof is None else dict(prof.nhs)

    def profiles(self) -> list[str]:
        return sorted(self._profiles)

    def prefixes(self) -> Mapping[str, str]:
        return dict(self._prefix)

    # --- internals -------------------------------------------------------------------------

    def _new_profile(self, key: str, nhs: dict[NextHop, frozenset[int] | None]) -> Profile:
        prof = Profile(key, nhs, nnhn=any(v is not None for v in nhs.values()))
        self._profiles[key] = prof
        self._nnhn_profiles += prof.nnhn
        self._index(prof, add=True)
        self._compute(prof)
        return prof

    def _detach(self, prefix: str, key: str) -> frozenset[str]:
        prof = self._profiles[key]
        prof.prefixes.discard(prefix)
        if prof.prefixes:
            return frozenset()
        del self._profiles[key]
        self._nnhn_profiles -= prof.nnhn
        self._index(prof, add=False)
        return frozenset((key,))

    def _index(self, prof: Profile, *, add: bool) -> None:
        def upd(d: dict[Any, set[str]], k: Any) -> None:
            if add:
                d.setdefault(k, set()).add(prof.key)
            else:
                s = d.get(k)
                if s is not None:
                    s.discard(prof.key)
                    if not s:
                        del d[k]

        for nh, nnh in prof.nhs.items():
            if nh.ifname is not None:
                upd(self._by_if, nh.ifname)
            for s in nnh or ():
                upd(self._by_remote, (nh.bgp_id, s))

    def _recompute(
        self, keys: Iterable[str], *, step: bool = True, bids: Iterable[int] | None = None
    ) -> Changes:
        changed = set()
        for k in keys:
            prof = self._profiles.get(k)
            if prof is not None and self._compute(prof, step=step, bids=bids):
                changed.add(k)
        return Changes(frozenset(changed))

    def _compute(
        self, prof: Profile, *, step: bool = True, bids: Iterable[int] | None = None
    ) -> bool:
        """Weights of one profile (:func:`glbd.quality.pathweight.compute_weights`); True when a
        weight value or source changed."""
        self.recomputes += 1
        changed, rows = compute_weights(
            self._p,
            prof,
            self._local,
            self._remote,
            self._agg,
            self._local_epoch,
            step=step,
            bids=bids,
        )
        self.rows_examined += rows
        return changed

    # --- introspection ---------------------------------------------------------------------

    def profile_dict(self, key: str) -> dict[str, Any] | None:
        prof = self._profiles.get(key)
        return None if prof is None else profile_dict(key, prof)

    def to_dict(self) -> dict[str, Any]:
        """``glbctl quality``: inputs and every profile's weights."""
        return quality_dict(self._p, self.recomputes, self._local, self._remote, self._profiles)

    def profiles_dict(self) -> dict[str, Any]:
        """``glbctl profiles``: profile key -> prefixes and weights (compact)."""
        return profiles_dict(self._profiles)
