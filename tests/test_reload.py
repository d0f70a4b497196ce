"""What a reload does with each key: applied live by the running parts, or refused as a whole
(``needs restart: KEY``, nothing applied); a part that fails to apply a change fails the reload."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import structlog
from pydantic import BaseModel

from glbd.cli import glbctl as ctl
from glbd.config import config as cfgmod
from glbd.config import confref
from glbd.daemon import log as logmod
from glbd.daemon.daemon import Daemon
from glbd.daemon.node import Node
from tests.test_daemon import Dummy, _write_cfg


def _model_paths(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Every dotted field path of a model, into lists and optional tables as well."""
    out: set[str] = set()
    for name, f in model.model_fields.items():
        out.add(prefix + name)
        todo, seen = [f.annotation], []
        while todo:
            t = todo.pop()
            seen.append(t)
            todo += [a for a in typing.get_args(t) if a not in seen]
            if isinstance(t, type) and issubclass(t, BaseModel):
                out |= _model_paths(t, f"{prefix}{name}.")
    return out


def test_every_key_of_the_model_is_live_or_restart() -> None:
    classified = set(cfgmod.RELOAD)
    unclassified = []
    for path in _model_paths(cfgmod.Config):
        section = any(k.startswith(path + ".") for k in classified)
        inside = any(path.startswith(k + ".") for k in classified)
        if path not in classified and not section and not inside:
            unclassified.append(path)
    assert unclassified == []
    assert classified <= _model_paths(cfgmod.Config)
    assert set(cfgmod.config_keys()) == classified
    assert set(cfgmod.RELOAD.values()) == set(cfgmod.Reload)


def _load(tmp: Path, extra: str = "", edit: Callable[[str], str] = lambda t: t) -> cfgmod.Config:
    f = _write_cfg(tmp, extra)
    f.write_text(edit(f.read_text()))
    return cfgmod.load(f)


@pytest.mark.parametrize(
    ("extra", "edit", "key"),
    [
        ('[metrics]\nlisten = "127.0.0.1:9477"\n', None, "metrics.listen"),
        ("[fib]\nprotocol = 201\n", None, "fib.protocol"),
        ("[fib]\ntable = 100\n", None, "fib.table"),
        ('[logging]\nformat = "json"\n', None, "logging.format"),
        ("", lambda t: t.replace("ctl.sock", "other.sock"), "control.socket"),
        ("", lambda t: t.replace("65001", "65009"), "local_as"),
    ],
)
def test_a_key_read_at_start_is_restart_required(
    tmp_path: Path, extra: str, edit: Callable[[str], str] | None, key: str
) -> None:
    old = _load(tmp_path)
    new = _load(tmp_path, extra, edit or (lambda t: t))
    ch = cfgmod.diff(old, new)
    assert ch["keys"] == [key] and ch["restart_required"] == [key]
    assert cfgmod.RELOAD[key] is cfgmod.Reload.RESTART


def test_a_live_key_is_named_and_not_restart_required(tmp_path: Path) -> None:
    old = _load(tmp_path)
    new = _load(tmp_path, '[logging]\nlevel = "debug"\n[fib]\nreconcile_interval_s = 2.0\n')
    ch = cfgmod.diff(old, new)
    assert ch["keys"] == ["fib.reconcile_interval_s", "logging.level"]
    assert ch["sections"] == ["fib", "logging"] and ch["restart_required"] == []
    assert cfgmod.diff(old, old)["keys"] == []


def test_the_reference_says_what_a_reload_does() -> None:
    """docs/config-reference.md's *on reload* column (tests/test_confref.py checks the file) is
    :data:`RELOAD`, key for key."""
    rows = {r.key: r for r in confref.rows()}
    assert {k: rows[k].reload for k in cfgmod.config_keys()} == {
        k: cfgmod.RELOAD[k] for k in cfgmod.config_keys()
    }
    assert rows["metrics.listen"].reload is cfgmod.Reload.RESTART
    assert rows["bfd.min_tx_ms"].reload is cfgmod.Reload.LIVE


# ---- through the daemon's reload ------------------------------------------------------------


async def _glbctl_reload(sock: Path) -> int:
    return await asyncio.to_thread(ctl.main, ["--socket", str(sock), "reload"])


async def test_a_restart_key_refuses_the_whole_reload_and_glbctl_exits_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = _write_cfg(tmp_path)
    dummy = Dummy()
    d = Daemon(str(f), cfgmod.load(f), components=lambda _: [dummy])
    await d.start()
    sock = tmp_path / "ctl.sock"
    try:
        # a live change and a restart one: neither is applied
        _write_cfg(tmp_path, '[metrics]\nlisten = "127.0.0.1:9477"\n', hold=5)
        capsys.readouterr()
        assert await _glbctl_reload(sock) == ctl.EXIT_REJECTED == 3
        assert capsys.readouterr().err.strip() == (
            "glbctl reload: needs restart: metrics.listen; nothing applied, the old config runs"
        )
        st = await asyncio.to_thread(ctl.request, str(sock), "status")
        assert st["last_reload"]["outcome"] == "needs_restart"
        assert st["last_reload"]["changes"]["restart_required"] == ["metrics.listen"]
        cfg = await asyncio.to_thread(ctl.request, str(sock), "config")
        assert cfg["metrics"]["listen"] is None and cfg["heartbeat"]["hold_multiplier"] == 3
        assert d.metrics is None
        assert [e for e in dummy.events if e != "start"] == []
    finally:
        await d.stop()


async def test_a_logging_level_reload_takes_effect(
    tmp_path: Path, restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    out = io.StringIO()
    logmod.setup("info", "json", stream=out)
    f = _write_cfg(tmp_path)
    d = Daemon(str(f), cfgmod.load(f), components=lambda _: [])
    await d.start()
    try:
        structlog.get_logger("glbd.test").debug("before")
        _write_cfg(tmp_path, '[logging]\nlevel = "debug"\n')
        assert await _glbctl_reload(tmp_path / "ctl.sock") == 0
        assert d.last_reload is not None and d.last_reload.message == "applied: logging.level"
        structlog.get_logger("glbd.test").debug("after")
        logging.getLogger("bfd.engine").debug("stdlib after")
        events = [json.loads(line)["event"] for line in out.getvalue().splitlines()]
        assert "before" not in events and {"after", "stdlib after"} <= set(events)
        # back to info: debug lines stop again
        _write_cfg(tmp_path, '[logging]\nlevel = "info"\n')
        assert (await d.reload()).ok
        structlog.get_logger("glbd.test").debug("hidden again")
        assert "hidden again" not in out.getvalue()
    finally:
        await d.stop()


class Boom(Dummy):
    """A component whose reconfigure raises while ``fail`` is set."""

    name = "boom"

    def __init__(self) -> None:
        super().__init__()
        self.fail = True

    async def reconfigure(self, new: cfgmod.Config, changes: dict[str, Any]) -> None:
        if self.fail:
            raise RuntimeError("no can do")
        self.events.append(("reconfigure", changes["keys"]))


async def test_a_component_that_fails_fails_the_reload_and_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = _write_cfg(tmp_path)
    first, boom, last = Dummy(), Boom(), Dummy()
    last.name = "last"
    d = Daemon(str(f), cfgmod.load(f), components=lambda _: [first, boom, last])
    await d.start()
    sock = tmp_path / "ctl.sock"
    try:
        _write_cfg(tmp_path, hold=5)
        capsys.readouterr()
        assert await _glbctl_reload(sock) == ctl.EXIT_FAILED == 4
        err = capsys.readouterr().err
        assert err.startswith("glbctl reload: failed in boom (RuntimeError('no can do'))"), err
        assert "applied in dummy, last" in err
        st = await asyncio.to_thread(ctl.request, str(sock), "status")
        res = st["last_reload"]
        assert res["ok"] is False and res["outcome"] == "failed"
        assert res["failed"] == ["boom"] and res["applied"] == ["dummy", "last"]
        # the parts that applied it run on the new config: it is the one in force
        assert d.cfg.heartbeat.hold_multiplier == 5
        assert ("reconfigure", ["heartbeat"]) in first.events
        assert ("reconfigure", ["heartbeat"]) in last.events
        # the next reload hands the failed part the changes it missed, and succeeds
        boom.fail = False
        again = await d.reload()
        assert again.ok and again.applied == ["dummy", "boom", "last"]
        assert boom.events[-1] == ("reconfigure", ["heartbeat.hold_multiplier"])
        assert first.events[-1] == ("reconfigure", [])
        assert (await d.reload()).message == "applied: nothing changed"
        assert boom.events[-1] == ("reconfigure", [])
    finally:
        await d.stop()


async def test_fib_reconcile_intervals_apply_on_reload(tmp_path: Path) -> None:
    old = _load(tmp_path)
    node = Node(Daemon("glbd.toml", old))
    node.fib = node.fib_service.build()
    assert (node.fib.reconcile_interval_s, node.fib.route_audit_interval_s) == (5.0, 60.0)
    new = _load(tmp_path, "[fib]\nreconcile_interval_s = 2.0\nroute_audit_interval_s = 30.0\n")
    ch = cfgmod.diff(old, new)
    assert ch["restart_required"] == []
    await node.reconfigure_fib(new, ch)
    assert (node.fib.reconcile_interval_s, node.fib.route_audit_interval_s) == (2.0, 30.0)
