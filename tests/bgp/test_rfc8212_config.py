"""RFC 8212 from the config: ``bgp.ebgp_requires_policy`` (on by default) reaches the RIB, and
``glbd check-config`` warns once per eBGP neighbor without an import or export list."""

from __future__ import annotations

from pathlib import Path

import pytest

from glbd.cli.glbctl_render import COLUMNS
from glbd.cli.glbd import check_config
from glbd.config import config as cfgmod
from glbd.config import params


def _cfg(tmp: Path, l1: str = "", l2: str = "", bgp: str = "") -> Path:
    f = tmp / "glbd.toml"
    f.write_text(f"""
router_id = "10.0.0.11"
local_as = 65100
role = "helper"
[[neighbors]]
address = "172.16.11.1"
local_address = "172.16.11.2"
remote_as = 65001
interface = "s1-l1"
{l1}
[[neighbors]]
address = "172.16.12.1"
local_address = "172.16.12.2"
remote_as = "internal"
interface = "s1-l2"
{l2}
[[neighbors]]
interface = "s1-l3"
remote_as = "external"
import = ["0.0.0.0/0 le 32"]
[heartbeat]
enabled = false
[bgp]
{bgp}
[control]
socket = "{tmp / "ctl.sock"}"
""")
    return f


def test_on_by_default_and_reaches_the_rib(tmp_path: Path) -> None:
    cfg = cfgmod.load(_cfg(tmp_path))
    assert cfg.bgp.ebgp_requires_policy is True
    assert params.rib_params(cfg).ebgp_requires_policy is True
    off = cfgmod.load(_cfg(tmp_path, bgp="ebgp_requires_policy = false"))
    assert params.rib_params(off).ebgp_requires_policy is False


def test_check_config_warns_per_ebgp_neighbor_without_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = _cfg(tmp_path)
    assert check_config(str(f)) == 0  # a warning, not an error
    lines = [x for x in capsys.readouterr().err.splitlines() if "warning" in x]
    assert lines == [
        f"{f}: warning: neighbors 172.16.11.1: eBGP without import and export policy: "
        "no route from it is taken; nothing is sent to it (RFC 8212, "
        'bgp.ebgp_requires_policy; e.g. ["0.0.0.0/0 le 32", "::/0 le 128"] permits all)',
        f"{f}: warning: neighbors on s1-l3: eBGP without export policy: nothing is sent to "
        'it (RFC 8212, bgp.ebgp_requires_policy; e.g. ["0.0.0.0/0 le 32", "::/0 le 128"] '
        "permits all)",
    ]  # the iBGP neighbor 172.16.12.1 needs none


def test_no_warning_with_policy_or_when_off(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    both = 'import = ["0.0.0.0/0 le 32"]\nexport = ["10.0.0.0/8 le 24"]'
    f = _cfg(tmp_path, l1=both, l2=both)
    (only,) = cfgmod.load(f).policy_warnings()  # the unnumbered neighbor's missing export
    assert only.startswith("neighbors on s1-l3: eBGP without export policy")
    off = _cfg(tmp_path, bgp="ebgp_requires_policy = false")
    assert check_config(str(off)) == 0
    assert "warning" not in capsys.readouterr().err


def test_glbctl_neighbors_policy_column() -> None:
    col = dict(c for c in COLUMNS["neighbors"] if isinstance(c, tuple))["policy"]
    assert col({"policy_missing": ["import", "export"]}) == "missing import/export (RFC 8212)"
    assert col({"policy_missing": []}) == "ok"
    assert col({}) == "-"  # a daemon from before the key
