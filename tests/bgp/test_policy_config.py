"""Policy keys from the config file to the RIB and to the ExaBGP config glbd writes: families,
import/export prefix lists, max-prefixes; bad entries are refused with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from glbd.base.reasons import RouteRejected
from glbd.bgp.exabgp import render_config
from glbd.bgp.speaker import BgpSpeaker, ProcessOptions
from glbd.config import config as cfgmod
from glbd.config import params
from glbd.control.metrics_parts import bgp_samples


def _cfg(tmp: Path, neighbor: str) -> Path:
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
{neighbor}
[[neighbors]]
address = "172.16.12.1"
local_address = "172.16.12.2"
remote_as = 65002
interface = "s1-l2"
[control]
socket = "{tmp / "ctl.sock"}"
""")
    return f


def test_policy_keys_reach_the_rib_and_the_exabgp_config(tmp_path: Path) -> None:
    f = _cfg(
        tmp_path,
        """families = ["ipv4"]
import = ["10.0.0.0/8 le 24", "deny 0.0.0.0/0"]
export = ["permit 10.11.0.0/16 ge 24"]
max_prefixes = 1000
max_prefixes_action = "warn"
max_prefixes_restart_s = 300""",
    )
    cfg = cfgmod.load(f)
    rp = params.rib_params(cfg)
    n1, n2 = rp.neighbors
    assert n1.families == (4,) and n2.families == (4, 6)
    assert str(n1.import_filter) == "permit 10.0.0.0/8 le 24, deny 0.0.0.0/0"
    assert str(n1.export_filter) == "permit 10.11.0.0/16 ge 24"
    assert (n1.max_prefixes, n1.max_prefixes_action, n1.max_prefixes_restart_s) == (
        1000,
        "warn",
        300.0,
    )
    assert n2.import_filter is None and n2.max_prefixes is None
    assert cfg.redacted()["neighbors"][0]["import"] == list(cfg.neighbors[0].import_)
    sp = BgpSpeaker(rp, process=ProcessOptions(runtime_dir=tmp_path / "rt"))
    text = render_config(sp.exabgp_params(), ["bridge"])
    blocks = text.split("neighbor 172.16.")[1:]
    fam1 = blocks[0].split("family {")[1].split("}")[0].split()
    fam2 = blocks[1].split("family {")[1].split("}")[0].split()
    assert fam1 == ["ipv4", "unicast;"]
    assert fam2 == ["ipv4", "unicast;", "ipv6", "unicast;"]


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ('import = ["10.0.0.0/8 le 7"]', "le must be a length from 8 to 32"),
        ('export = ["allow 10.0.0.0/8"]', "'allow 10.0.0.0/8'"),
        ('families = ["ipv4", "ipv4"]', "each once"),
        ('families = ["ipx"]', "families"),
        ('max_prefixes_action = "drop"', "max_prefixes_action"),
        ("max_prefixes = 0", "max_prefixes"),
    ],
)
def test_bad_policy_keys_are_refused(tmp_path: Path, line: str, why: str) -> None:
    with pytest.raises(cfgmod.ConfigError) as e:
        cfgmod.load(_cfg(tmp_path, line))
    assert why in e.value.format()


def test_rejected_routes_metric_has_every_reason() -> None:
    rows = [s for s in bgp_samples({"counters": {"rejected_import_denied": 3}})]
    got = {s.labels["reason"]: s.value for s in rows if s.name == "glbd_bgp_routes_rejected_total"}
    assert got == {str(r): 3 if r == "import_denied" else 0 for r in RouteRejected}
