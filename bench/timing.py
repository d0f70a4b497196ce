"""Shared by the benchmark scripts (run as ``python bench/NAME.py``, so this is importable)."""

from __future__ import annotations

import importlib.util
import re
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


#: imports in old baselines of modules that have moved since (before the layer folders)
_MOVED_IMPORTS = (
    ("from glbd import nhc as nhcmod", "from glbd.bgp import nhc as nhcmod"),
    ("from glbd.exabgp import api", "from glbd.bgp import exabgp_api as api"),
    ("from glbd.netlink.client import", "from glbd.netlink.rtsocket import"),
    ("from glbd.netlink.netns import", "from glbd.daemon.netns import"),
)
#: the layer folders' modules (``codec``, ``core``, ``io``, ``app``) -> their feature folders
_LAYER_PAIRS = (
    "app.component=daemon.component app.config=config.config "
    "app.config_base=config.config_base app.config_bfd=config.config_bfd "
    "app.config_colours=config.config_colours app.config_control=config.config_control "
    "app.config_fib=config.config_fib app.config_peers=config.config_peers "
    "app.config_quality=config.config_quality app.confref=config.confref "
    "app.daemon=daemon.daemon app.failover=fib.failover app.fibservice=fib.fibservice "
    "app.log=daemon.log app.metrics_daemon=control.metrics_daemon "
    "app.metrics_parts=control.metrics_parts app.metrics_table=control.metrics_table "
    "app.neighbors=bgp.neighbors app.node=daemon.node app.origination=bgp.origination "
    "app.params=config.params app.parts=daemon.parts app.privileges=daemon.privileges "
    "app.secrets=config.secrets app.unnumbered=unnumbered.part app.views=control.views "
    "codec.bgpmsg=bgp.bgpmsg codec.colour=colours.colour codec.control=control.protocol "
    "codec.exabgp_api=bgp.exabgp_api codec.ipzone=base.ipzone codec.ndp=unnumbered.ndp "
    "codec.netlink.codec=netlink.codec codec.netlink.columns=netlink.columns "
    "codec.netlink.const=netlink.const codec.netlink.fibmsg=fib.fibmsg "
    "codec.netlink.headers=netlink.headers codec.nhc=bgp.nhc codec.prefix=base.prefix "
    "core.colours=colours.colours core.fibcache=fib.fibcache core.fibmodel=fib.fibmodel "
    "core.fibplan=fib.fibplan core.fibsnap=fib.fibsnap core.fibstep=fib.fibstep "
    "core.fibsync=fib.fibsync core.fibwire=fib.fibwire core.gracestop=bgp.gracestop "
    "core.linkq=quality.linkq core.loopprio=daemon.loopprio core.movegate=flowlet.movegate "
    "core.ndpeers=unnumbered.ndpeers core.origin=bgp.origin "
    "core.pathchanges=quality.pathchanges core.pathmodel=quality.pathmodel "
    "core.pathprofile=quality.pathprofile core.pathtable=quality.pathtable "
    "core.pathview=quality.pathview core.pathweight=quality.pathweight "
    "core.prefixlist=bgp.prefixlist core.reasons=base.reasons core.rib=bgp.rib "
    "core.ribadjin=bgp.ribadjin core.ribcheck=bgp.ribcheck core.ribdelay=bgp.ribdelay "
    "core.ribmaxpfx=bgp.ribmaxpfx core.ribselect=bgp.ribselect core.ribstale=bgp.ribstale "
    "core.ribtypes=bgp.ribtypes core.ribviews=bgp.ribviews core.skew=flowlet.skew "
    "io.bgp=bgp.speaker io.caps=daemon.caps io.control=control.server io.exabgp=bgp.exabgp "
    "io.exabgp_bridge=bgp.exabgp_bridge io.exabgp_launch=bgp.exabgp_launch "
    "io.fib=fib.programmer io.fibkernel=fib.fibkernel io.fibread=fib.fibread "
    "io.flowlet=flowlet.loader io.ifwatch=netlink.ifwatch io.linkrunner=quality.linkrunner "
    "io.linkstats=quality.linkstats io.metrics=control.metrics io.ndp=unnumbered.ndpsock "
    "io.netlink=netlink.rtsocket io.netns=daemon.netns io.paths=daemon.paths "
    "io.rtnl=netlink.rtnl io.sched=daemon.sched io.systemd=daemon.systemd "
)
_LAYER_LAYOUT = dict(pair.split("=") for pair in _LAYER_PAIRS.split())
_LAYER_NAME = re.compile(r"\bglbd\.((?:codec\.netlink|codec|core|io|app)\.\w+)")
_LAYER_FROM = re.compile(r"\bfrom glbd\.(codec\.netlink|codec|core|io|app) import (\w+)")


def _moved(src: str) -> str:
    """``src`` with the imports of modules that have moved since rewritten to today's tree."""
    for before, after in _MOVED_IMPORTS:
        src = src.replace(before, after)

    def one_from(m: re.Match[str]) -> str:
        new = _LAYER_LAYOUT.get(f"{m[1]}.{m[2]}")
        if new is None:
            return m[0]
        pkg, _, name = new.rpartition(".")
        return f"from glbd.{pkg} import {name}" + (f" as {m[2]}" if name != m[2] else "")

    src = _LAYER_FROM.sub(one_from, src)
    return _LAYER_NAME.sub(lambda m: "glbd." + _LAYER_LAYOUT.get(m[1], m[1]), src)


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
    path.write_text(_moved(src))
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
