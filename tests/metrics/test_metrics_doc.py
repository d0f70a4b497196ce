"""Every metric family glbd exports is described in docs/metrics.md (the operator's list)."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from glbd.control.metrics import render
from tests.test_views import everything

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def test_every_exported_family_is_in_the_metrics_doc() -> None:
    families = {
        f.name for f in text_string_to_metric_families(render(everything()))
    }  # counters without their _total
    glbd = {name for name in families if name.startswith("glbd_")}
    assert len(glbd) > 20, glbd
    doc = DOC.read_text()
    assert not sorted(n for n in glbd if n not in doc)
