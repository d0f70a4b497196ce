"""Starts ExaBGP 5.0.x the way glbd runs it: ``python -m glbd.io.exabgp_launch server CONF``.

Two of ExaBGP's per-message costs are replaced by equivalents before its ``main`` runs; what
it writes is unchanged. Converging on 64 x 10k paths, a profile of ExaBGP showed:

* ``exabgp.util.hexstring`` (how a raw message reaches glbd) formats each byte through a
  generator and ``str.format``: 13 % of its time. Replaced by ``bytes.hex().upper()``, the
  same text.
* ``log.debug``, called for every prefix parsed, checks the level each time even when the
  configured level (``exabgp.log.level``, fixed for the process) leaves DEBUG out: 9 %.
  With such a level it is a no-op.

A name this does not find (another ExaBGP layout) is left alone: ExaBGP then runs as it is.

Not the default (``glbd.io.exabgp.default_exabgp``): with ExaBGP started this way,
tests/bgp/test_unnumbered_glbd.py::test_glbd_to_glbd_unnumbered failed 2 runs in 14 (one
side's ExaBGP never took the reload that adds the neighbour on the new link-local address),
against 0 in 14 without it; the cause is not found. Use it by setting ``ExabgpParams.exabgp``
to ``(python, "-m", "glbd.io.exabgp_launch")``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["hexstring", "main", "patch"]


def hexstring(value: bytes) -> str:
    """``exabgp.util.hexstring``: ``"0x"`` and two upper-case hex digits per byte."""
    return "0x" + bytes(value).hex().upper()


def _no_debug(cls: Any, message: Any, source: str = "", level: str = "DEBUG") -> None:
    return None


def patch(env: Mapping[str, str] | None = None) -> list[str]:
    """Apply the replacements to the imported ExaBGP; returns the names replaced."""
    if env is None:
        env = os.environ
    done: list[str] = []
    try:
        import exabgp.reactor.api.response.json as rjson
        import exabgp.reactor.api.response.text as rtext
        import exabgp.util as util
        from exabgp.logger import log
    except ImportError:
        return done
    original = getattr(util, "hexstring", None)
    mods = [m for m in (util, rjson, rtext) if getattr(m, "hexstring", None) is original]
    if original is not None and len(mods) == 3:
        for m in mods:
            m.hexstring = hexstring
        done.append("hexstring")
    level = env.get("exabgp.log.level", "").upper()
    if level and level != "DEBUG" and callable(getattr(log, "debug", None)):
        log.debug = classmethod(_no_debug)
        done.append("log.debug")
    return done


def main() -> int:
    patch()
    from exabgp.application.main import main as exabgp_main

    sys.argv[0] = "exabgp"
    return int(exabgp_main() or 0)


if __name__ == "__main__":
    sys.exit(main())
