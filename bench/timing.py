"""Shared by the benchmark scripts (run as ``python bench/NAME.py``, so this is importable)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType


def rate(
    fn: Callable[[], object], min_time: float = 0.5, clock: Callable[[], float] = time.process_time
) -> float:
    """Calls of ``fn`` per second of ``clock`` (CPU time by default), over >= ``min_time``."""
    n = 0
    t0 = clock()
    while True:
        for _ in range(1000):
            fn()
        n += 1000
        dt = clock() - t0
        if dt >= min_time:
            return n / dt


#: imports in old baselines of modules that have moved into the layer folders since
_MOVED_IMPORTS = (
    ("from glbd import nhc as nhcmod", "from glbd.codec import nhc as nhcmod"),
    ("from glbd.exabgp import api", "from glbd.codec import exabgp_api as api"),
    ("from glbd.netlink.client import", "from glbd.io.netlink import"),
    ("from glbd.netlink.netns import", "from glbd.io.netns import"),
    ("from glbd.netlink.rtnl import", "from glbd.io.rtnl import"),
    ("from glbd.netlink.codec import", "from glbd.codec.netlink.codec import"),
    ("from glbd.netlink import", "from glbd.codec.netlink import"),
)


def module_at(ref: str, relpath: str, name: str) -> ModuleType | None:
    """``relpath`` (e.g. ``glbd/rib.py``) as it was at git ``ref``, loaded as the private module
    ``glbd._<name>`` (the baseline measured in the same run); None if git cannot show it."""
    root = Path(__file__).resolve().parent.parent
    try:
        src = subprocess.run(
            ["git", "-C", str(root), "show", f"{ref}:{relpath}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"baseline {ref}: not available ({exc})")
        return None
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    for before, after in _MOVED_IMPORTS:
        src = src.replace(before, after)
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(f"glbd._{name}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    try:
        spec.loader.exec_module(mod)
    except ImportError as exc:  # the baseline imports modules that have moved since
        print(f"baseline {ref}: {relpath} does not import in today's tree ({exc})")
        del sys.modules[spec.name]
        return None
    return mod
