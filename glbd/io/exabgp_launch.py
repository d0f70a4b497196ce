"""Starts ExaBGP 5.0.x the way glbd runs it: ``python -m glbd.io.exabgp_launch server CONF``.

One fix and two speed-ups are applied to the imported ExaBGP before its ``main`` runs; what
it writes to peers and to glbd is unchanged.

* **Reloads held by a peer that cannot take routes.** On SIGUSR1 ExaBGP 5.0.15 skips the
  reload (and forgets the signal) while any peer has Adj-RIB-Out changes still to send,
  counting peers that are not established. A peer whose address is gone (an unnumbered link
  made again with new link-local addresses) keeps routes announced to it queued until it
  connects, which it never will, so no reload is taken again: not even the one that removes
  it and adds the neighbour on the new address. Only established peers, which can drain
  their queue, now hold a reload back, and a reload they hold is owed, not forgotten: it is
  raised again on the first loop turn nothing holds it (glbd also sends the signal again).
* ``exabgp.util.hexstring`` (how a raw message reaches glbd) formats each byte through a
  generator and ``str.format``: 13 % of ExaBGP's time converging on 64 x 10k paths.
  Replaced by ``bytes.hex().upper()``, the same text.
* ``log.debug``, called for every prefix parsed, checks the level each time even when the
  configured level (``exabgp.log.level``, fixed for the process) leaves DEBUG out: 9 %.
  With such a level it is a no-op.

A name this does not find (another ExaBGP layout) is left alone: ExaBGP then runs as it is.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["RELOAD", "hexstring", "main", "patch", "pending_adjribout", "raise_owed_reload"]

#: ``exabgp.reactor.interrupt.Signal.RELOAD`` (SIGUSR1); FULL_RELOAD is SIGUSR2
RELOAD = -4


def hexstring(value: bytes) -> str:
    """``exabgp.util.hexstring``: ``"0x"`` and two upper-case hex digits per byte."""
    return "0x" + bytes(value).hex().upper()


def _held(reactor: Any) -> bool:
    peers = reactor._peers
    return any(
        peers[key].neighbor.rib.outgoing.pending()
        for key in reactor.established_peers()
        if key in peers
    )


def pending_adjribout(reactor: Any) -> bool:
    """``Reactor._pending_adjribout``, counting only established peers: whether one still has
    Adj-RIB-Out changes to send (the reload waits for those). ExaBGP has already cleared the
    signal it then skips: it is kept owed (:func:`raise_owed_reload`)."""
    held = _held(reactor)
    if held:
        last = getattr(reactor.signal, "glbd_last", 0)
        if last:
            reactor.glbd_owed = last
    return held


def raise_owed_reload(reactor: Any) -> None:
    """Run at each loop turn (before ExaBGP picks the peers to run): a reload that
    established peers held is raised again once none holds it and no other signal waits."""
    owed = getattr(reactor, "glbd_owed", 0)
    if not owed or reactor.signal.received or _held(reactor):
        return
    reactor.glbd_owed = 0
    reactor.signal.received = owed
    reactor.signal.number = signal.SIGUSR1 if owed == RELOAD else signal.SIGUSR2


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
        from exabgp.reactor.interrupt import Signal
        from exabgp.reactor.loop import Reactor
    except ImportError:
        return done
    if callable(getattr(Reactor, "_pending_adjribout", None)) and callable(
        getattr(Reactor, "established_peers", None)
    ):
        Reactor._pending_adjribout = pending_adjribout
        done.append("pending_adjribout")
        if (
            callable(getattr(Reactor, "active_peers", None))
            and callable(getattr(Signal, "rearm", None))
            and getattr(Signal, "RELOAD", None) == RELOAD
        ):
            active_peers, rearm = Reactor.active_peers, Signal.rearm

            def owed_then_active(self: Any) -> Any:
                raise_owed_reload(self)
                return active_peers(self)

            def rearm_noting(self: Any) -> None:
                self.glbd_last = self.received  # what the loop is handling, before it clears
                rearm(self)

            Reactor.active_peers = owed_then_active
            Signal.rearm = rearm_noting
            done.append("reload_owed")
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
