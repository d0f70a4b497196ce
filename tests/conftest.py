"""Suite-wide fixtures come from the lab's plugin. With ``GLBD_NO_SKIP=1`` (set by
``bootstrap.sh test``, so by CI) a skipped test fails instead: a skip there means a missing
package or service that the README's command should have installed, and a green run that quietly
skipped part of the suite would prove little."""

from __future__ import annotations

import logging
import os
from collections.abc import Generator
from typing import Any

import pytest
import structlog

pytest_plugins = ["glbdlab.pytest_plugin"]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Generator[Any]:
    outcome = yield
    if os.environ.get("GLBD_NO_SKIP") != "1":
        return
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped under GLBD_NO_SKIP=1 (a missing install?): {reason}"


@pytest.fixture
def restore_logging() -> Generator[None]:
    """The root logger's handlers and level, and structlog's defaults, as they were before."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield None
    for h in list(root.handlers):
        root.removeHandler(h)
    for h in handlers:
        root.addHandler(h)
    root.setLevel(level)
    structlog.reset_defaults()
