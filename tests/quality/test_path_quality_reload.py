"""A reload that changes ``[path_quality]`` reaches the running path table (it used to be
accepted by the config diff and then ignored), and only the profiles whose weights move go to
the FIB."""

from __future__ import annotations

from pathlib import Path

from glbd.config import config as cfgmod
from glbd.daemon.daemon import Daemon
from glbd.daemon.node import Node
from tests.quality.test_pathtable import L2, L3, all_remote, set_l2, to_leaf, w
from tests.test_daemon import _write_cfg


def _cfg(tmp: Path, extra: str = "") -> cfgmod.Config:
    return cfgmod.load(_write_cfg(tmp, extra))


async def test_path_quality_reload_applies_weight_memory_and_combine(tmp_path: Path) -> None:
    old = _cfg(tmp_path)
    node = Node(Daemon("glbd.toml", old))
    node.table = t = node.build_table()
    assert t.params.memory and t.params.combine == "bottleneck"
    synced: list[int] = []
    node.fib_service.schedule_sync = lambda: synced.append(1)  # type: ignore[method-assign]

    all_remote(t)
    t.set_prefix("p2", to_leaf(L2))
    t.set_prefix("p3", to_leaf(L3))
    set_l2(t, 0, 4)
    set_l2(t, 0, 3)  # spine 1 two steps behind: the memory holds 5/27
    for band in (6, 5, 4, 3):  # the others load up one band at a time: the bands flatten
        for s in (1, 2, 3):
            set_l2(t, s, band)
    held = w(t, "p2")
    assert held[0] < 255 and held[1:] == [255, 255, 255]

    # the same config again: nothing to do
    await node.reconfigure_quality(old, cfgmod.diff(old, old))
    assert synced == [] and w(t, "p2") == held

    new = _cfg(tmp_path, "[path_quality]\nweight_memory = false\n")
    ch = cfgmod.diff(old, new)
    assert ch["sections"] == ["path_quality"] and not ch["restart_required"]
    await node.reconfigure_fib(new, ch)  # the daemon's order: fib first, it switches node.cfg
    await node.reconfigure_quality(new, ch)
    assert not t.params.memory
    assert w(t, "p2") == [255] * 4  # stateless: every band is 3 now
    assert w(t, "p3") == [255] * 4
    assert synced == [1]
    # only leaf 2's profile moved: the FIB sync gets that one, not leaf 3's
    assert node.fib_service.sync.pending().updated == {t.profile_of("p2")}
    assert t.to_dict()["weight_memory"] is False

    # and back: the memory starts empty (a config change is not a measurement)
    ch = cfgmod.diff(new, old)
    await node.reconfigure_fib(old, ch)
    await node.reconfigure_quality(old, ch)
    assert t.params.memory and w(t, "p2") == [255] * 4


async def test_profiles_last_sync_is_null_before_the_first_fib_sync(tmp_path: Path) -> None:
    """``glbctl profiles --json`` keeps its shape: ``last_sync`` is an object once a sync ran,
    null before (it was an empty object, which the contract test saw as four missing keys)."""
    node = Node(Daemon("glbd.toml", _cfg(tmp_path)))
    node.table = node.build_table()
    assert node.fib_service.snapshot()["last_sync"] is None
    node.fib_service.last_sync = {"at": 1.0, "ms": 2.0, "mode": "full", "result": "ok"}
    assert node.fib_service.snapshot()["last_sync"]["mode"] == "full"
