"""glbd's ExaBGP launcher: its speed-ups write what ExaBGP's own code writes, its reload fix
lets only established peers hold a reload, and all apply to the ExaBGP it starts (in a child:
the patch is process-wide). The fix against a real ExaBGP: test_speaker_netns.py."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from glbd.bgp import exabgp_launch
from glbd.bgp.exabgp import default_exabgp


@given(st.binary(max_size=200))
def test_hexstring_is_exabgps(data: bytes) -> None:
    import exabgp.util

    assert exabgp_launch.hexstring(data) == exabgp.util.hexstring(data)


def _patched(level: str) -> dict[str, object]:
    code = (
        "import json, sys\n"
        "from glbd.bgp import exabgp_launch as l\n"
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
        "done": [
            "pending_adjribout",
            "reload_owed",
            "max_prefixes_hold",
            "aigp_discard",
            "hexstring",
            "log.debug",
        ],
        "hex": "0x01AB",
        "same": True,
        "debug_off": True,
    }


def test_at_debug_level_debug_logging_is_left_alone() -> None:
    got = _patched("DEBUG")
    assert got["done"] == [
        "pending_adjribout",
        "reload_owed",
        "max_prefixes_hold",
        "aigp_discard",
        "hexstring",
    ]
    assert got["debug_off"] is False


def test_glbd_starts_exabgp_through_it() -> None:
    assert default_exabgp() == (sys.executable, "-m", "glbd.bgp.exabgp_launch")


def _peer(pending: bool) -> SimpleNamespace:
    outgoing = SimpleNamespace(pending=lambda: pending)
    return SimpleNamespace(neighbor=SimpleNamespace(rib=SimpleNamespace(outgoing=outgoing)))


def _reactor(peers: dict[str, bool], established: set[str]) -> SimpleNamespace:
    return SimpleNamespace(
        _peers={k: _peer(v) for k, v in peers.items()},
        established_peers=lambda: set(established),
        signal=SimpleNamespace(received=0, number=0, glbd_last=exabgp_launch.RELOAD),
    )


def test_only_an_established_peer_with_routes_to_send_holds_a_reload() -> None:
    held = exabgp_launch.pending_adjribout
    # routes queued for a peer that cannot connect: the reload goes ahead
    assert not held(_reactor({"gone": True, "up": False}, {"up"}))
    # an established peer still sending: the reload waits, as ExaBGP intends
    assert held(_reactor({"gone": True, "up": True}, {"up"}))
    assert not held(_reactor({}, set()))


def test_a_reload_an_established_peer_holds_is_raised_again_once_it_is_done() -> None:
    """ExaBGP clears the SIGUSR1 it then skips; the launcher keeps it owed and raises it on
    the first loop turn no established peer has routes to send."""
    from exabgp.reactor.interrupt import Signal

    assert exabgp_launch.RELOAD == Signal.RELOAD
    r = _reactor({"up": True}, {"up"})
    assert exabgp_launch.pending_adjribout(r)  # the loop skips the reload it was handling
    exabgp_launch.raise_owed_reload(r)
    assert r.signal.received == 0  # still sending: not yet
    r._peers["up"] = _peer(False)
    exabgp_launch.raise_owed_reload(r)
    assert (r.signal.received, r.signal.number) == (Signal.RELOAD, signal.SIGUSR1)
    r.signal.received = 0  # the loop takes it
    exabgp_launch.raise_owed_reload(r)
    assert r.signal.received == 0  # raised once


class _Action:
    CLOSE, LATER = 1, 2


def _hold_reactor(neighbors: tuple[str, ...]) -> Any:
    """A reactor and peers with the parts of ExaBGP's that the max_prefixes hold patches."""

    class Peer:
        def __init__(self, neighbor: Any, reactor: Any) -> None:
            self.neighbor, self.proto, self._restart, self._teardown = neighbor, object(), True, 0
            self.removed = False

        def teardown(self, code: int, restart: bool = True) -> None:
            self._teardown, self._restart = code, restart

        def run(self) -> int:  # ExaBGP's: a peer down and not restarting leaves the reactor
            return _Action.CLOSE if self.proto is None and not self._restart else _Action.LATER

        def stop(self) -> None:
            self._restart = False

        def remove(self) -> None:
            self.removed, self.proto = True, None
            self.stop()

        def stopping(self) -> bool:
            return bool(self._teardown) and not self._restart

    class Reactor:
        def __init__(self) -> None:
            rib = SimpleNamespace(uncache=lambda: None)
            self.configuration = SimpleNamespace(
                neighbors={n: SimpleNamespace(rib=rib) for n in neighbors}
            )
            self._peers = {n: Peer(v, self) for n, v in self.configuration.neighbors.items()}

        def teardown_peer(self, name: str, code: int) -> None:
            self._peers[name].teardown(code)

        def reload(self) -> bool:
            for key, peer in self._peers.items():
                if key not in self.configuration.neighbors:
                    peer.remove()
            return True

    exabgp_launch.hold_teardowns(Reactor, Peer, _Action)
    return Reactor()


def test_a_max_prefixes_teardown_keeps_the_peer_down_until_a_reload_drops_or_lists_it() -> None:
    r = _hold_reactor(("a", "b", "c"))
    r.teardown_peer("a", 2)  # any other Cease: ExaBGP reconnects, as it always did
    assert r._peers["a"]._restart
    r.teardown_peer("b", exabgp_launch.HOLD_SUBCODE)
    held = r._peers["b"]
    held.proto = None  # its NOTIFICATION went out
    assert (held.stopping(), held.run()) == (True, _Action.LATER)  # stays, refusing
    # the hold's reload drops it (glbd's config left it out before the teardown): it leaves
    del r.configuration.neighbors["b"]
    r.reload()
    assert held.removed and held.run() == _Action.CLOSE
    # the hold is over before any reload dropped it: listed again, it is a new peer
    r.teardown_peer("c", exabgp_launch.HOLD_SUBCODE)
    r._peers["c"].proto = None
    r.reload()
    assert r._peers["c"]._restart and not r._peers["c"].stopping()


def test_a_held_peer_dropped_before_its_cease_went_out_sends_it_first() -> None:
    r = _hold_reactor(("a",))
    r.teardown_peer("a", exabgp_launch.HOLD_SUBCODE)
    peer = r._peers["a"]
    del r.configuration.neighbors["a"]
    r.reload()
    assert not peer.removed  # not closed bare: its session still ends with the Cease
    peer.proto = None
    assert peer.run() == _Action.CLOSE
