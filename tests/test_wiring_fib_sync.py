"""The FIB sync's incremental path (``Node._fib_incremental``: ``set_weights`` / ``update``) must
leave the FIB programmer with exactly the desired state a full sync (``Node.desired()``) would
give it, whatever the sequence of path-table changes. The FIB here is a model of
FibProgrammer's desired-state bookkeeping (no kernel): this checks wiring's ``_fib_keys`` and
change handling, not the planner."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from glbd.app.node import Node
from glbd.core.fibmodel import Desired, GroupSpec, Member
from glbd.core.pathtable import LocalLink, NextHop, PathTable


class ModelFib:
    """FibProgrammer's desired-state semantics for apply / set_weights / update."""

    def __init__(self) -> None:
        self.desired: Desired | None = None
        self.calls: list[str] = []

    async def apply(self, desired: Desired) -> None:
        self.calls.append("apply")
        self.desired = desired

    async def set_weights(
        self, key: str, weights: Mapping[Member, int], resilient: Any = True
    ) -> None:
        self.calls.append("set_weights")
        d = self.desired
        if d is None or key not in d.groups:
            raise KeyError(key)
        groups = dict(d.groups)
        groups[key] = GroupSpec(dict(weights), d.groups[key].resilient)
        self.desired = Desired(groups=groups, routes=d.routes)

    async def update(
        self,
        groups: Mapping[str, GroupSpec] | None = None,
        remove_groups: Iterable[str] = (),
        add: Mapping[Any, str] | None = None,
        remove: Iterable[Any] = (),
    ) -> None:
        self.calls.append("update")
        d = self.desired
        if d is None:
            raise RuntimeError("apply() a desired state first")
        add = dict(add or {})
        new_groups = dict(d.groups)
        new_groups.update(groups or {})
        for key in set(remove_groups):
            new_groups.pop(key, None)
        routes = dict(d.routes)
        routes.update(add)
        for pfx in remove:
            if pfx not in add:
                routes.pop(pfx, None)
        self.desired = Desired(groups=new_groups, routes=routes)


# two spines on interfaces, one next hop without an interface (e.g. a multihop peer): a profile
# of such next hops has no member the FIB can program while its interface members are down
NHS = [
    NextHop(1, "198.18.1.0", "spine1"),
    NextHop(2, "198.18.2.0", "spine2"),
    NextHop(3, "198.18.3.0", None),
]
PREFIXES = [f"198.19.{i}.0/24" for i in range(1, 5)]


def make_node(incremental: bool = True) -> tuple[Node, ModelFib, PathTable]:
    cfg = SimpleNamespace(fib=SimpleNamespace(group_type="hash"), neighbors=[])
    node = Node(SimpleNamespace(cfg=cfg))  # type: ignore[arg-type]
    node.fib_incremental_profiles = incremental
    fib = ModelFib()
    table = PathTable()
    node.fib = fib  # type: ignore[assignment]
    node.table = table
    return node, fib, table


async def sync(node: Node) -> None:
    assert node.table is not None
    node._fib_changes.add(node.table.take_changes())
    node._fib_dirty = True
    await node._fib_sync_loop()


def canon(d: Desired) -> tuple[dict[str, Any], dict[str, str]]:
    return (
        {k: (dict(g.weights), g.resilient) for k, g in d.groups.items()},
        {str(p): k for p, k in d.routes.items()},
    )


_nh_sets = hs.frozensets(hs.sampled_from(NHS), min_size=1, max_size=3)
_op = hs.one_of(
    hs.tuples(hs.just("prefix"), hs.sampled_from(PREFIXES), _nh_sets),
    hs.tuples(hs.just("withdraw"), hs.sampled_from(PREFIXES), hs.just(frozenset())),
    hs.tuples(
        hs.just("link"),
        hs.sampled_from(["spine1", "spine2"]),
        hs.sampled_from([(7, False), (3, False), (0, True)]),
    ),
    hs.tuples(hs.just("sync"), hs.just(""), hs.just(None)),
)


async def run(ops: list[tuple[str, str, Any]], incremental: bool) -> None:
    node, fib, table = make_node(incremental)
    for ifname in ("spine1", "spine2"):
        table.set_local(ifname, LocalLink(7))
    table.set_prefix(PREFIXES[0], {NHS[0]: None, NHS[1]: None})
    await sync(node)  # the first sync is the full one
    for kind, what, arg in ops:
        if kind == "prefix":
            table.set_prefix(what, dict.fromkeys(arg))
        elif kind == "withdraw":
            table.remove_prefix(what)
        elif kind == "link":
            table.set_local(what, LocalLink(arg[0], arg[1]))
        else:
            await sync(node)
            assert fib.desired is not None
            assert canon(fib.desired) == canon(node.desired()), fib.calls
    await sync(node)
    assert fib.desired is not None
    assert canon(fib.desired) == canon(node.desired()), fib.calls


@pytest.mark.parametrize("incremental", [True, False], ids=["update", "apply"])
@settings(max_examples=300, deadline=None)
@given(ops=hs.lists(_op, max_size=25))
def test_incremental_sync_equals_a_full_sync(
    incremental: bool, ops: list[tuple[str, str, Any]]
) -> None:
    """``incremental``: new/removed profiles as ``update`` steps (the path 3df34a9 switched
    off) or as full applies."""
    asyncio.run(run(ops, incremental))


def test_profile_back_from_no_usable_member_gets_its_routes() -> None:
    """A profile whose only programmable member is down is left out of the FIB (with its
    routes); when the member comes back, its routes must come back too, though no prefix
    moved."""

    async def scenario() -> None:
        node, fib, table = make_node(incremental=True)
        table.set_local("spine1", LocalLink(7))
        table.set_prefix(PREFIXES[0], {NHS[0]: None, NHS[2]: None})
        await sync(node)
        table.set_local("spine1", LocalLink(0, True))
        await sync(node)
        assert fib.desired is not None and not fib.desired.routes
        table.set_local("spine1", LocalLink(7))
        await sync(node)
        assert canon(fib.desired) == canon(node.desired())
        assert {str(p) for p in fib.desired.routes} == {PREFIXES[0]}

    asyncio.run(scenario())


def test_fib_view_and_metrics_show_foreign_routes_conflicts_and_stale_hold() -> None:
    """What the FIB leaves alone because it is not glbd's is visible in ``glbctl profiles``
    (the ``fib`` summary) and in the metrics, by reason."""
    from glbd.app.node import _fib_samples

    class SnapFib(ModelFib):
        def snapshot(self) -> dict[str, Any]:
            return {
                "protocol": 200,
                "stale_held": {"routes": 3, "groups": 1, "nexthops": 1},
                "foreign_routes": [{"prefix": "192.0.2.0/24", "group": "p", "metric": 0}],
                "conflicts": {"route_exists_on_create": 2, "nexthop_reowned": 1},
            }

    async def scenario() -> dict[str, Any]:
        node, _fib, _table = make_node()
        node.fib = SnapFib()  # type: ignore[assignment]
        return node.fib_snapshot()

    snap = asyncio.run(scenario())
    assert snap["fib"]["foreign_routes"] == [{"prefix": "192.0.2.0/24", "group": "p", "metric": 0}]
    assert snap["fib"]["conflicts"]["route_exists_on_create"] == 2
    assert snap["fib"]["stale_held"]["routes"] == 3
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in _fib_samples(snap)}
    assert got[("glbd_fib_foreign_routes", ())] == 1
    assert got[("glbd_fib_conflicts_total", (("reason", "route_exists_on_create"),))] == 2
    assert got[("glbd_fib_conflicts_total", (("reason", "nexthop_reowned"),))] == 1
    assert got[("glbd_fib_stale_held", (("kind", "routes"),))] == 3
