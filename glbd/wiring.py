"""Builds the daemon's components from the config (filled in as the parts land)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from glbd.daemon import Component, Daemon


def build_components(d: Daemon) -> list[Component]:
    if os.environ.get("GLBD_TEST_NO_COMPONENTS") == "1":  # lifecycle tests of the bare daemon
        return []
    return []
