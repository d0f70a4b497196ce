"""The path table's per-next-hop row cache (``Profile.rows``, glbd/quality/pathprofile.py): after
any sequence of inputs the weights equal a recompute from scratch with the same controller
memory."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from glbd.quality.pathmodel import LocalLink, NextHop, PathTableParams, RemoteLink, Weight
from glbd.quality.pathtable import PathTable
from heartbeat import wire

S = [wire.node_id(f"10.0.0.{i}") for i in range(1, 4)]  # helpers
L = [wire.node_id(f"10.1.0.{i}") for i in range(1, 4)]  # destination leaves
# spine 0 twice (parallel links: its downstream capacity is shared between them)
NH = [
    NextHop(S[0], "198.18.0.0", "eth1"),
    NextHop(S[0], "198.18.0.2", "eth2"),
    NextHop(S[1], "198.18.1.0", "eth3"),
    NextHop(S[2], "198.18.2.0", "eth4"),
]
IFS = [nh.ifname or "" for nh in NH]

local_op = st.tuples(
    st.just("local"),
    st.sampled_from(IFS),
    st.one_of(
        st.none(),
        st.builds(LocalLink, st.integers(0, 7), st.booleans(), st.sampled_from([10.0, 100.0])),
    ),
)
remote_op = st.tuples(
    st.just("remote"),
    st.sampled_from(S),
    st.one_of(
        st.none(),
        st.lists(
            st.builds(
                RemoteLink,
                st.sampled_from(L),
                st.integers(1, 3),
                st.integers(0, 7),
                st.booleans(),
                st.sampled_from([10, 40, 100]),
            ),
            max_size=5,
        ),
    ),
)
params_op = st.tuples(
    st.just("params"),
    st.sampled_from(["bottleneck", "mean"]),
    st.booleans(),
    st.booleans(),
)


def _weights(t: PathTable) -> dict[str, dict[NextHop, Weight]]:
    return {k: dict(t.weights(k)) for k in t.profiles()}


@given(st.lists(st.one_of(local_op, remote_op, params_op), max_size=30))
@settings(max_examples=200, deadline=None)
def test_cached_rows_give_the_weights_of_a_fresh_recompute(ops: list[tuple[object, ...]]) -> None:
    t = PathTable()
    # one single-NNH profile per leaf, one compound (two NNHs) and one without NNHN
    for i, leaf in enumerate(L):
        t.set_prefix(f"10.{i}.0.0/24", {nh: frozenset({leaf}) for nh in NH})
    t.set_prefix("10.9.0.0/24", {nh: frozenset({L[0], L[1]}) for nh in NH})
    t.set_prefix("10.8.0.0/24", {nh: None for nh in NH[1:]})
    for op in ops:
        if op[0] == "local":
            t.set_local(op[1], op[2])  # type: ignore[arg-type]
        elif op[0] == "remote":
            t.set_remote(op[1], op[2])  # type: ignore[arg-type]
        else:
            t.set_params(
                PathTableParams(combine=op[1], capacity_aware=op[2], memory=op[3])  # type: ignore[arg-type]
            )
        fresh = copy.deepcopy(t)
        for prof in fresh._profiles.values():
            prof.rows = [None] * len(prof.items)
        fresh._recompute(list(fresh._profiles), step=False)
        assert _weights(fresh) == _weights(t)
