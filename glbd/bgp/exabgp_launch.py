"""Starts ExaBGP 5.0.x the way glbd runs it: ``python -m glbd.bgp.exabgp_launch server CONF``.

Three fixes and two speed-ups are applied to the imported ExaBGP before its ``main`` runs; the
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
* **A malformed AIGP resets the session.** On a session with AIGP enabled (glbd enables it on
  every one, :mod:`glbd.bgp.exabgp`) ExaBGP 5.0.15 answers a malformed AIGP attribute (RFC
  7311: a TLV that overruns it, an AIGP TLV not 11 octets, none at all) with NOTIFICATION
  (3, 9): its ``AIGP.unpack`` raises ``Notify`` and ``Attributes._parse_one`` turns that into
  attribute discard only for the codes in ``Attributes.DISCARD``. RFC 7311 asks for attribute
  discard (the route kept, the attribute quietly ignored): AIGP is added to that tuple. glbd
  reads the raw UPDATE and discards and counts the attribute itself (:mod:`glbd.bgp.bgpmsg`).
* ``exabgp.util.hexstring`` (how a raw message reaches glbd) formats each byte through a
  generator and ``str.format``: 13 % of ExaBGP's time converging on 64 x 10k paths.
  Replaced by ``bytes.hex().upper()``, the same text.
* ``log.debug``, called for every prefix parsed, checks the level each time even when the
  configured level (``exabgp.log.level``, fixed for the process) leaves DEBUG out: 9 %.
  With such a level (FATAL to INFO) and no ``-d``/``-v`` (which force DEBUG) it is a no-op.

None of these has a supported ExaBGP mechanism (docs/bgp.md, "ExaBGP versions"). Before it
replaces anything, :func:`patch` checks that every ExaBGP callable it replaces or calls is there
with the signature of the versions checked (:data:`CONTRACT`, 5.0.14 and 5.0.15); if one is
not, it replaces nothing and :func:`main` refuses to start ExaBGP (exit 2, the reason on
stderr, which glbd logs): an unchecked ExaBGP never runs half-patched, nor silently unfixed.
tests/bgp/test_exabgp_contract.py fails on any change to the source of those callables.
"""

from __future__ import annotations

import importlib
import inspect
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "AIGP",
    "CHECKED",
    "CONTRACT",
    "HOLD_SUBCODE",
    "RELOAD",
    "PatchError",
    "aigp_discard",
    "check",
    "hexstring",
    "hold_teardowns",
    "main",
    "patch",
    "pending_adjribout",
    "raise_owed_reload",
    "resolve",
    "silences_debug",
]

#: ``exabgp.reactor.interrupt.Signal.RELOAD`` (SIGUSR1); FULL_RELOAD is SIGUSR2
RELOAD = -4
#: the Cease subcode of a teardown that holds the peer down (Maximum Number of Prefixes Reached)
HOLD_SUBCODE = 1
#: set on a ``Peer`` torn down with :data:`HOLD_SUBCODE` until a reload drops or lists it
HELD = "glbd_held"
#: the AIGP path attribute's type code (RFC 7311)
AIGP = 26


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


def aigp_discard(attributes_cls: Any) -> None:
    """Make a malformed AIGP an attribute discard in ExaBGP's ``Attributes`` (see the module)."""
    if AIGP not in attributes_cls.DISCARD:
        attributes_cls.DISCARD = (*attributes_cls.DISCARD, AIGP)


def _no_debug(cls: Any, message: Any, source: str = "", level: str = "DEBUG") -> None:
    return None


#: the ExaBGP versions the patches were checked on (tests/bgp/test_exabgp_contract.py)
CHECKED = ("5.0.14", "5.0.15")
#: per patch, the ExaBGP callables it replaces or calls (``module:qualname``) and their
#: signatures in the versions checked; :func:`check` holds the ExaBGP it patches to them
CONTRACT: dict[str, dict[str, str]] = {
    "pending_adjribout": {
        "exabgp.reactor.loop:Reactor._pending_adjribout": "(self)",
        "exabgp.reactor.loop:Reactor.established_peers": "(self)",
    },
    "reload_owed": {
        "exabgp.reactor.loop:Reactor.active_peers": "(self)",
        "exabgp.reactor.interrupt:Signal.rearm": "(self)",
    },
    "max_prefixes_hold": {
        "exabgp.reactor.loop:Reactor.teardown_peer": "(self, name, code)",
        "exabgp.reactor.loop:Reactor.reload": "(self)",
        "exabgp.reactor.peer:Peer.__init__": "(self, neighbor, reactor)",
        "exabgp.reactor.peer:Peer.run": "(self)",
        "exabgp.reactor.peer:Peer.stop": "(self)",
        "exabgp.reactor.peer:Peer.remove": "(self)",
        "exabgp.reactor.peer:Peer.teardown": "(self, code, restart=True)",
        "exabgp.reactor.peer:Peer.stopping": "(self)",
    },
    "hexstring": {"exabgp.util:hexstring": "(value)"},
    "log.debug": {"exabgp.logger:log.debug": "(message, source='', level='DEBUG')"},
}

#: ``exabgp.log.level`` values that leave DEBUG out (ExaBGP's order: ... INFO DEBUG NOTSET)
_ABOVE_DEBUG = frozenset({"FATAL", "CRITICAL", "ERROR", "WARNING", "INFO"})
#: ``exabgp server`` options that force DEBUG whatever ``exabgp.log.level`` says
_DEBUG_ARGS = frozenset({"-v", "--verbose", "-d", "--debug"})


def silences_debug(env: Mapping[str, str], argv: Sequence[str]) -> bool:
    """Whether ExaBGP run with ``env`` and ``argv`` leaves DEBUG out for the whole process."""
    level = env.get("exabgp.log.level", "").upper()
    return level in _ABOVE_DEBUG and not _DEBUG_ARGS.intersection(argv)


class PatchError(RuntimeError):
    """The imported ExaBGP is not one the launcher's patches were checked on."""


def resolve(target: str) -> Any:
    """The object ``module:qualname`` names; raises ImportError / AttributeError."""
    module, _, qualname = target.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def check() -> list[str]:
    """What in the imported ExaBGP breaks the patches' contract ([] when nothing does)."""
    problems: list[str] = []
    for name, targets in CONTRACT.items():
        for target, want in targets.items():
            try:
                got = str(inspect.signature(resolve(target)))
            except (ImportError, AttributeError, TypeError, ValueError) as e:
                problems.append(f"{name}: {target} missing ({e!r})")
                continue
            if got != want:
                problems.append(f"{name}: {target}{got}, checked {want}")
    if problems:
        return problems
    # the values and call sites the patches rely on besides those callables
    from exabgp.reactor.interrupt import Signal
    from exabgp.reactor.peer import ACTION

    if getattr(Signal, "RELOAD", None) != RELOAD:
        problems.append(f"reload_owed: Signal.RELOAD is not {RELOAD}")
    if not all(hasattr(ACTION, a) for a in ("CLOSE", "LATER")):
        problems.append("max_prefixes_hold: ACTION.CLOSE / ACTION.LATER missing")
    from exabgp.bgp.message.update.attribute.aigp import AIGP as AigpAttribute
    from exabgp.bgp.message.update.attribute.attributes import Attributes

    if AigpAttribute.ID != AIGP or not isinstance(Attributes.DISCARD, tuple):
        problems.append("aigp_discard: AIGP.ID is not 26 or Attributes.DISCARD not a tuple")
    original = resolve("exabgp.util:hexstring")
    for where in ("exabgp.reactor.api.response.json", "exabgp.reactor.api.response.text"):
        if getattr(importlib.import_module(where), "hexstring", None) is not original:
            problems.append(f"hexstring: {where} does not use exabgp.util.hexstring")
    sample = bytes(range(256))
    if original(sample) != hexstring(sample):
        problems.append("hexstring: exabgp.util.hexstring writes another text")
    return problems


def patch(env: Mapping[str, str] | None = None, argv: Sequence[str] | None = None) -> list[str]:
    """Apply the replacements to the imported ExaBGP; returns the names replaced. Raises
    :class:`PatchError`, replacing nothing, if :func:`check` finds the contract broken."""
    if env is None:
        env = os.environ
    if argv is None:
        argv = sys.argv
    try:
        problems = check()
    except ImportError as e:
        problems = [f"ExaBGP not importable: {e}"]
    if problems:
        raise PatchError("; ".join(problems))
    import exabgp.reactor.api.response.json as rjson
    import exabgp.reactor.api.response.text as rtext
    import exabgp.util as util
    from exabgp.bgp.message.update.attribute.attributes import Attributes
    from exabgp.logger import log
    from exabgp.reactor import peer as exapeer
    from exabgp.reactor.interrupt import Signal
    from exabgp.reactor.loop import Reactor

    Reactor._pending_adjribout = pending_adjribout
    active_peers, rearm = Reactor.active_peers, Signal.rearm

    def owed_then_active(self: Any) -> Any:
        raise_owed_reload(self)
        return active_peers(self)

    def rearm_noting(self: Any) -> None:
        self.glbd_last = self.received  # what the loop is handling, before it clears
        rearm(self)

    Reactor.active_peers = owed_then_active
    Signal.rearm = rearm_noting
    hold_teardowns(Reactor, exapeer.Peer, exapeer.ACTION)
    for m in (util, rjson, rtext):  # json and text imported it by name
        m.hexstring = hexstring
    aigp_discard(Attributes)
    done = ["pending_adjribout", "reload_owed", "max_prefixes_hold", "aigp_discard", "hexstring"]
    if silences_debug(env, argv):
        log.debug = classmethod(_no_debug)
        done.append("log.debug")
    return done


def _version() -> str:
    try:
        from exabgp.version import version
    except ImportError:
        return "?"
    return str(version)


def main() -> int:
    try:
        patch()
    except PatchError as e:
        sys.stderr.write(
            f"glbd.bgp.exabgp_launch: refusing to start ExaBGP {_version()}, not a version glbd's"
            f" patches were checked on (docs/bgp.md, ExaBGP versions): {e}\n"
        )
        return 2
    from exabgp.application.main import main as exabgp_main

    sys.argv[0] = "exabgp"
    return int(exabgp_main() or 0)


if __name__ == "__main__":
    sys.exit(main())
