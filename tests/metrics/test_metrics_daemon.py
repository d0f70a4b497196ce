"""The daemon's own metrics: build info and the reload status, through a real reload."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from glbd import __version__
from glbd.config import config as cfgmod
from glbd.control.metrics import Sample
from glbd.daemon.daemon import Daemon
from tests.test_daemon import _write_cfg


def _rows(d: Daemon) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for s in d.samples()
        if isinstance(s, Sample)
    }


async def test_reload_status_and_build_info_follow_reloads(tmp_path: Path) -> None:
    f = _write_cfg(tmp_path)
    d = Daemon(str(f), cfgmod.load(f), components=lambda _: [])
    got = _rows(d)
    assert got[("glbd_build_info", (("version", __version__),))] == 1
    assert got[("glbd_config_last_reload_successful", ())] == 1  # the start's load
    started = got[("glbd_config_last_reload_success_timestamp_seconds", ())]
    assert started == d.started_at

    good = f.read_text()
    f.write_text(good + "\n[bgp]\nhold_time = 1\n")  # below the minimum: rejected
    res: Any = await d.reload()
    assert res.ok is False
    got = _rows(d)
    assert got[("glbd_config_last_reload_successful", ())] == 0
    assert got[("glbd_config_last_reload_success_timestamp_seconds", ())] == started

    f.write_text(good)
    res = await d.reload()
    assert res.ok is True
    got = _rows(d)
    assert got[("glbd_config_last_reload_successful", ())] == 1
    assert got[("glbd_config_last_reload_success_timestamp_seconds", ())] == res.at
