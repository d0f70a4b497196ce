"""Starts ExaBGP 5.0.x the way glbd runs it: ``python -m glbd.io.exabgp_launch server CONF``.

Two fixes and two speed-ups are applied to the imported ExaBGP before its ``main`` runs; the
speed-ups leave what it writes to peers and to glbd unchanged.

* **Reloads held by a peer that cannot take routes.** On SIGUSR1 ExaBGP 5.0.15 skips the
  reload (and forgets the signal) while any peer has Adj-RIB-Out changes still to send,
  counting peers that are not established. A peer whose address is gone (an unnumbered link
  made again with new link-local addresses) keeps routes announced to it queued until it
  connects, which it never will, so no reload is taken again: not even the one that removes
  it and adds the neighbour on the new address. Only established peers, which can drain
  their queue, now hold a reload back, and a reload they hold is owed, not forgotten: it is
  raised again on the first loop turn nothing holds it (glbd also sends the signal again).
* **A max_prefixes teardown reconnected at once.** An API ``teardown`` restarts the peer:
  right after its NOTIFICATION ExaBGP connects again and accepts the neighbour's connection
  (in the same millisecond), before glbd, told of the session's end, can reload the neighbour
  out for its hold. A teardown with Cease subcode 1 (Maximum Number of Prefixes Reached,
  RFC 4486; glbd sends it only to start a hold) now does not restart: once its NOTIFICATION
  is out the peer neither connects nor accepts, until a reload drops the neighbour (glbd's
  config for the hold leaves it out) or lists it again (the hold is over: a new peer). A
  reload that drops the neighbour before its NOTIFICATION went out lets it go out first.
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

__all__ = [
    "HOLD_SUBCODE",
    "RELOAD",
    "hexstring",
    "hold_teardowns",
    "main",
    "patch",
    "pending_adjribout",
    "raise_owed_reload",
]

#: ``exabgp.reactor.interrupt.Signal.RELOAD`` (SIGUSR1); FULL_RELOAD is SIGUSR2
RELOAD = -4
#: the Cease subcode of a teardown that holds the peer down (Maximum Number of Prefixes Reached)
HOLD_SUBCODE = 1
#: set on a ``Peer`` torn down with :data:`HOLD_SUBCODE` until a reload drops or lists it
HELD = "glbd_held"


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


def hold_teardowns(reactor_cls: Any, peer_cls: Any, action: Any) -> None:
    """Patch ExaBGP's ``Reactor`` and ``Peer`` (``action``: ExaBGP's ``ACTION``) so a
    teardown with :data:`HOLD_SUBCODE` keeps the peer down (see the module)."""
    teardown_peer, run, stop, remove = (
        reactor_cls.teardown_peer,
        peer_cls.run,
        peer_cls.stop,
        peer_cls.remove,
    )
    reload = reactor_cls.reload

    def teardown_holding(self: Any, name: str, code: int) -> None:
        if code != HOLD_SUBCODE:
            teardown_peer(self, name, code)
            return
        peer = self._peers[name]
        peer.teardown(code, restart=False)
        setattr(peer, HELD, True)

    def run_held(self: Any) -> Any:
        # not restarting, it would leave the reactor: it stays, so that its connections are
        # refused (a stopping peer drops them) instead of answered "no session configured"
        done = run(self)
        if done == action.CLOSE and getattr(self, HELD, False):
            return action.LATER
        return done

    def stop_unheld(self: Any) -> None:  # a removal or shutdown: it may leave the reactor
        setattr(self, HELD, False)
        stop(self)

    def remove_after_cease(self: Any) -> None:
        if getattr(self, HELD, False) and self.proto is not None:
            # its NOTIFICATION is still to go out: it does (no restart), then the peer closes
            setattr(self, HELD, False)
            self.neighbor.rib.uncache()  # as stop() does: a neighbour added later starts empty
            return
        remove(self)

    def reload_reviving(self: Any) -> Any:
        ok = reload(self)
        if ok:
            for key, peer in list(self._peers.items()):
                neighbor = self.configuration.neighbors.get(key)
                if neighbor is not None and getattr(peer, HELD, False) and peer.proto is None:
                    # listed again: the hold is over; a new peer, as for an added neighbour
                    self._peers[key] = peer_cls(neighbor, self)
        return ok

    reactor_cls.teardown_peer = teardown_holding
    reactor_cls.reload = reload_reviving
    peer_cls.run = run_held
    peer_cls.stop = stop_unheld
    peer_cls.remove = remove_after_cease


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
        from exabgp.reactor import peer as exapeer
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
    peer_cls, action = getattr(exapeer, "Peer", None), getattr(exapeer, "ACTION", None)
    if all(
        callable(getattr(cls, name, None))
        for cls, names in (
            (Reactor, ("teardown_peer", "reload")),
            (peer_cls, ("run", "stop", "remove", "teardown", "stopping")),
        )
        for name in names
    ) and all(hasattr(action, a) for a in ("CLOSE", "LATER")):
        hold_teardowns(Reactor, peer_cls, action)
        done.append("max_prefixes_hold")
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
