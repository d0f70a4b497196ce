"""The alert rules in conf/prometheus: valid, their unit tests pass under promtool, and every
glbd metric they name is one glbd exports (a rename cannot silently disarm an alert)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from glbd.control.metrics import render
from tests.test_views import everything

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "conf" / "prometheus" / "glbd-alerts.yml"
RULE_TESTS = Path(__file__).with_name("glbd-alerts.test.yml")


def _promtool(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("promtool")
    if exe is None:
        pytest.skip("promtool not installed (Debian's prometheus package; bootstrap.sh)")
    return subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_alert_rules_are_valid() -> None:
    r = _promtool("check", "rules", str(RULES))
    assert r.returncode == 0, r.stdout + r.stderr


def test_alert_rules_fire_on_trouble_and_stay_quiet_on_a_healthy_node() -> None:
    r = _promtool("test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_metric_an_alert_names_is_exported() -> None:
    exported = {
        s.name for f in text_string_to_metric_families(render(everything())) for s in f.samples
    }
    named = set(re.findall(r"\bglbd_[a-z0-9_]+", RULES.read_text()))
    assert named, "no glbd metric in the rules?"
    assert named <= exported, sorted(named - exported)


DASHBOARD = ROOT / "conf" / "prometheus" / "glbd-dashboard.json"


def _dashboard_exprs() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    # Grafana's variables, as Grafana would fill them in
    return [e.replace("$__rate_interval", "5m").replace("$instance", ".*") for e in exprs]


def test_dashboard_queries_parse_and_name_only_exported_metrics(tmp_path: Path) -> None:
    """Every panel query is valid PromQL (checked by promtool as recording rules) and every
    glbd metric it names is one glbd exports."""
    exprs = _dashboard_exprs()
    assert len(exprs) >= 15
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"glbd_dashboard:q{i}", "expr": e} for i, e in enumerate(exprs)
                ],
            }
        ]
    }
    f = tmp_path / "dashboard-rules.yml"
    f.write_text(json.dumps(rules))  # JSON is YAML
    r = _promtool("check", "rules", str(f))
    assert r.returncode == 0, r.stdout + r.stderr
    exported = {
        s.name for fam in text_string_to_metric_families(render(everything())) for s in fam.samples
    }
    named = {n for e in exprs for n in re.findall(r"\bglbd_[a-z0-9_]+", e)}
    assert named <= exported, sorted(named - exported)
