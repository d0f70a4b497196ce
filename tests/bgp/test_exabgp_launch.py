"""glbd's ExaBGP launcher: its replacements write what ExaBGP's own code writes, and apply to
the ExaBGP it starts (in a child: the patch is process-wide)."""

from __future__ import annotations

import json
import subprocess
import sys

from hypothesis import given
from hypothesis import strategies as st

from glbd.io import exabgp_launch
from glbd.io.exabgp import default_exabgp


@given(st.binary(max_size=200))
def test_hexstring_is_exabgps(data: bytes) -> None:
    import exabgp.util

    assert exabgp_launch.hexstring(data) == exabgp.util.hexstring(data)


def _patched(level: str) -> dict[str, object]:
    code = (
        "import json, sys\n"
        "from glbd.io import exabgp_launch as l\n"
        f"done = l.patch({{'exabgp.log.level': {level!r}}})\n"
        "import exabgp.util as u, exabgp.reactor.api.response.json as j\n"
        "from exabgp.logger import log\n"
        "print(json.dumps({'done': done, 'hex': j.hexstring(b'\\x01\\xab'),"
        " 'same': j.hexstring is u.hexstring is l.hexstring,"
        " 'debug_off': 'debug' in vars(log) and log.debug(lambda: 1 / 0) is None}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout))


def test_the_launcher_replaces_both_above_debug_level() -> None:
    got = _patched("WARNING")
    assert got == {
        "done": ["hexstring", "log.debug"],
        "hex": "0x01AB",
        "same": True,
        "debug_off": True,
    }


def test_at_debug_level_debug_logging_is_left_alone() -> None:
    got = _patched("DEBUG")
    assert got["done"] == ["hexstring"] and got["debug_off"] is False


def test_glbd_does_not_start_exabgp_through_it_by_default() -> None:
    assert "glbd.io.exabgp_launch" not in default_exabgp()
