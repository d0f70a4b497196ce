"""``PathTable.set_remotes``: several helpers' heartbeats at once recompute each profile they
touch once, and end where the same snapshots one by one end (without the controller's memory,
which steps once per recompute)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from glbd.quality.pathmodel import NextHop, PathTableParams, RemoteLink, Weight
from glbd.quality.pathtable import PathTable
from heartbeat import wire

S = [wire.node_id(f"10.0.0.{i}") for i in range(1, 5)]  # helpers
L = [wire.node_id(f"10.1.0.{i}") for i in range(1, 3)]  # destination leaves
NH = [NextHop(s, f"198.18.{i}.0", f"eth{i}") for i, s in enumerate(S)]


def table(memory: bool = True) -> PathTable:
    t = PathTable(PathTableParams(memory=memory))
    for i, leaf in enumerate(L):
        t.set_prefix(f"10.{i}.0.0/24", {nh: frozenset({leaf}) for nh in NH})
    return t


def snap(band: int, leaf: int = 0) -> list[RemoteLink]:
    return [RemoteLink(L[leaf], 1, band, False, 100)]


def weights(t: PathTable) -> dict[str, dict[NextHop, Weight]]:
    return {k: dict(t.weights(k)) for k in t.profiles()}


def test_a_burst_from_every_helper_recomputes_each_profile_once() -> None:
    one_by_one, batched = table(), table()
    for t in (one_by_one, batched):  # every helper known, its link to leaf 0 idle
        t.set_remotes([(s, snap(7)) for s in S])
    before = (one_by_one.recomputes, batched.recomputes)
    burst = [(s, snap(3 + i)) for i, s in enumerate(S)]
    for s, entries in burst:
        one_by_one.set_remote(s, entries)
    changes = batched.set_remotes(burst)
    # leaf 0's profile goes through all four helpers; leaf 1's is not touched
    assert one_by_one.recomputes - before[0] == len(S)
    assert batched.recomputes - before[1] == 1
    assert changes.updated == {batched.prefixes()["10.0.0.0/24"]}


def test_the_later_snapshot_of_a_helper_wins_and_nothing_new_is_nothing() -> None:
    t, ref = table(memory=False), table(memory=False)
    t.set_remotes([(S[0], snap(1)), (S[0], snap(6))])
    ref.set_remote(S[0], snap(6))
    assert weights(t) == weights(ref)
    n = t.recomputes
    assert not t.set_remotes([(S[0], snap(6))]) and not t.set_remotes([])
    assert t.recomputes == n


helper_snap = st.tuples(
    st.sampled_from(S),
    st.one_of(st.none(), st.builds(snap, st.integers(0, 7), st.integers(0, 1))),
)


@given(st.lists(st.lists(helper_snap, max_size=6), max_size=6))
@settings(max_examples=150, deadline=None)
def test_batches_end_where_one_by_one_ends(bursts: list[list[tuple[int, object]]]) -> None:
    one_by_one, batched = table(memory=False), table(memory=False)
    for burst in bursts:
        for s, entries in burst:
            one_by_one.set_remote(s, entries)  # type: ignore[arg-type]
        batched.set_remotes(burst)  # type: ignore[arg-type]
        assert weights(batched) == weights(one_by_one)


def test_a_heartbeat_looks_only_at_the_rows_of_its_helper() -> None:
    """64 next hops, one helper's link changes: its row is rebuilt, the other 63 are not
    looked at, and the weights are those of a table that saw the same inputs in one go."""
    helpers = [wire.node_id(f"10.0.1.{i}") for i in range(1, 65)]
    nhs = [NextHop(s, f"198.19.{i}.0", f"e{i}") for i, s in enumerate(helpers)]

    def fabric(band_of_first: int) -> PathTable:
        t = PathTable()
        t.set_prefix("10.5.0.0/24", {nh: frozenset({L[0]}) for nh in nhs})
        t.set_remotes([(s, snap(7)) for s in helpers[1:]] + [(helpers[0], snap(band_of_first))])
        return t

    t = fabric(7)
    before = t.rows_examined
    t.set_remote(helpers[0], snap(2))
    assert t.rows_examined - before == 1
    key = t.profile_of("10.5.0.0/24") or ""
    want = fabric(2).weights(key)
    assert {nh: w.value for nh, w in t.weights(key).items()} == {
        nh: w.value for nh, w in want.items()
    }
    assert t.weights(key)[nhs[0]].value < t.weights(key)[nhs[1]].value
