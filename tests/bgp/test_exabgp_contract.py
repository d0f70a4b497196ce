"""The ExaBGP internals glbd's launcher patches (glbd/bgp/exabgp_launch.py), held to what they
were in the versions checked (docs/bgp.md, "ExaBGP versions"): the source of each callable a
patch replaces or relies on (any change fails here: re-check that patch), their signatures
(checked again at every launch) and their behaviour on real ExaBGP objects.

Against another ExaBGP without installing it: ``PYTHONPATH=/path/to/unzipped/wheel pytest
tests/bgp/test_exabgp_contract.py`` (the subprocesses inherit PYTHONPATH)."""

from __future__ import annotations

import hashlib
import inspect
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from glbd.bgp import exabgp_launch

REPO = Path(__file__).resolve().parents[2]

#: ``module:qualname`` -> (the patches that rely on it, sha256 of its source, first 16 hex
#: digits), the same in ExaBGP 5.0.14 and 5.0.15
SOURCES: dict[str, tuple[str, str]] = {
    "exabgp.reactor.loop:Reactor._pending_adjribout": ("pending_adjribout", "1eca799614b5b01c"),
    "exabgp.reactor.loop:Reactor.established_peers": ("pending_adjribout", "a733eb4d1b5e264d"),
    "exabgp.reactor.loop:Reactor.active_peers": ("reload_owed", "163a6e3b7080e056"),
    "exabgp.reactor.interrupt:Signal.rearm": ("reload_owed", "02f41cd0879a1cb3"),
    "exabgp.reactor.loop:Reactor.teardown_peer": ("max_prefixes_hold", "97c16f5f7001341a"),
    "exabgp.reactor.loop:Reactor.reload": ("max_prefixes_hold", "9d31059186ff3252"),
    "exabgp.reactor.peer:Peer.__init__": ("max_prefixes_hold", "544c6aa7fc86e227"),
    "exabgp.reactor.peer:Peer.run": ("max_prefixes_hold", "c00bb5613e406b4f"),
    "exabgp.reactor.peer:Peer.stop": ("max_prefixes_hold", "2f504314246dd798"),
    "exabgp.reactor.peer:Peer.remove": ("max_prefixes_hold", "3330b3d2b7ad1ee6"),
    "exabgp.reactor.peer:Peer.teardown": ("max_prefixes_hold", "a4494f0eed893ca9"),
    "exabgp.reactor.peer:Peer.stopping": ("max_prefixes_hold", "482c8154d8eb60a4"),
    "exabgp.util:hexstring": ("hexstring", "43de1dab2e06089d"),
    "exabgp.logger:log.debug": ("log.debug", "ab6001acaee2d55a"),
    # not replaced, but the patches depend on what they do: the loop clears the signal
    # (rearm) before it checks _pending_adjribout, calls active_peers every turn and drops a
    # peer whose run() says CLOSE; a signal arriving while one is set is ignored; the API's
    # teardown goes through Reactor.teardown_peer; a peer not restarting ends its generator
    # after its NOTIFICATION; the level filter log.debug skips
    "exabgp.reactor.loop:Reactor.run": (
        "pending_adjribout, reload_owed, max_prefixes_hold",
        "2be669a4812a5c6d",
    ),
    "exabgp.reactor.interrupt:Signal._defer_or_schedule": ("reload_owed", "59ea7274b5dc3a65"),
    "exabgp.reactor.api.command.neighbor:teardown": ("max_prefixes_hold", "488c2ded881a3c9e"),
    "exabgp.reactor.peer:Peer._run": ("max_prefixes_hold", "a514d2f5f0bb3364"),
    "exabgp.reactor.peer:Peer._reset": ("max_prefixes_hold", "4f709dbfce076cda"),
    "exabgp.reactor.peer:Peer._stop": ("max_prefixes_hold", "88768f757d091a08"),
    "exabgp.logger:log.logger": ("log.debug", "3a63592d6ee91cb7"),
    "exabgp.logger.option:option.log_enabled": ("log.debug", "8b7950867e214a27"),
    "exabgp.logger.option:option._set_level": ("log.debug", "4198c46eea1fe8ce"),
    # aigp_discard replaces no callable (it adds AIGP to Attributes.DISCARD): the parser that
    # reads that tuple when an attribute's unpack raises, and AIGP's unpack that raises
    # (hashed on 5.0.15)
    "exabgp.bgp.message.update.attribute.attributes:Attributes._parse_one": (
        "aigp_discard",
        "3a23a3ce12cfa67b",
    ),
    "exabgp.bgp.message.update.attribute.aigp:AIGP.unpack": ("aigp_discard", "5a698a1d51f41da8"),
}


def test_every_patched_callable_has_a_source_hash() -> None:
    patched = {t for targets in exabgp_launch.CONTRACT.values() for t in targets}
    assert patched <= SOURCES.keys()


@pytest.mark.parametrize("target", sorted(SOURCES))
def test_exabgp_source_is_the_one_checked(target: str) -> None:
    patches, want = SOURCES[target]
    got = hashlib.sha256(inspect.getsource(exabgp_launch.resolve(target)).encode()).hexdigest()
    assert got[:16] == want, (
        f"ExaBGP's {target} changed (sha256 {got[:16]}, checked {want} on ExaBGP "
        f"{', '.join(exabgp_launch.CHECKED)}): re-check the launcher's {patches} patch "
        "(glbd/bgp/exabgp_launch.py) against it, then update this hash and docs/bgp.md"
    )


def test_the_launch_time_check_passes() -> None:
    assert exabgp_launch.check() == []


def test_the_pin_and_the_docs_name_the_versions_checked() -> None:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    (pin,) = [d for d in deps if d.startswith("exabgp")]
    assert re.fullmatch(r"exabgp==(\S+)", pin)[1] in exabgp_launch.CHECKED  # type: ignore[index]
    docs = (REPO / "docs/bgp.md").read_text()
    section = docs.split("## ExaBGP versions", 1)[1].split("\n## ", 1)[0]
    for name in (*exabgp_launch.CONTRACT, *exabgp_launch.CHECKED):
        assert name in section, name


def _run(code: str) -> dict[str, object]:
    # in a child: the patches are process-wide and Signal() installs signal handlers
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout))


_OBJECTS = """
import json, logging
from types import SimpleNamespace
from exabgp.bgp.fsm import FSM
from exabgp.bgp.neighbor import Neighbor
from exabgp.logger.option import option
from exabgp.reactor.interrupt import Signal
from exabgp.reactor.loop import Reactor
from exabgp.reactor.peer import ACTION, Peer
from glbd.bgp import exabgp_launch

option.logger = logging.getLogger("contract")
option.formater = lambda line, source, level, timestamp: line
option._set_level("WARNING")

def reactor():
    r = Reactor.__new__(Reactor)
    r._peers, r.processes = {}, SimpleNamespace(broken=lambda neighbor: False)
    r.signal = SimpleNamespace(received=0, number=0)
    return r

def peer(r, key, established, pending):
    n = Neighbor()
    n["peer-as"] = 64512 + len(r._peers)  # ExaBGP shares a RIB between neighbours of one name
    n.make_rib()
    n.api = {"fsm": False}
    p = Peer(n, r)
    p.fsm.state = FSM.ESTABLISHED if established else FSM.IDLE
    if pending:
        n.rib.outgoing._new_nlri[key] = object()
    r._peers[key] = p
    return p
"""


def test_exabgp_still_lets_an_unestablished_peer_hold_a_reload_and_the_patch_does_not() -> None:
    """The bug pending_adjribout fixes, on real ExaBGP peers: if ExaBGP stops counting peers
    that are not established, the patch may go."""
    got = _run(
        _OBJECTS
        + """
r = reactor()
peer(r, "gone", False, True)
peer(r, "up", True, False)
out = {"exabgp": r._pending_adjribout(), "established": sorted(r.established_peers())}
exabgp_launch.patch({}, [])
out["patched"] = r._pending_adjribout()
r._peers["up"].neighbor.rib.outgoing._new_nlri["up"] = object()
out["patched_sending"] = r._pending_adjribout()
print(json.dumps(out))
"""
    )
    assert got == {
        "exabgp": True,
        "established": ["up"],
        "patched": False,
        "patched_sending": True,
    }


def test_rearm_clears_the_signal_the_loop_handles_and_the_patch_notes_it() -> None:
    got = _run(
        _OBJECTS
        + """
s = Signal()
s.received, s.number = Signal.RELOAD, 10
s.rearm()
out = {"cleared": [s.received, s.number]}
exabgp_launch.patch({}, [])
s.received = Signal.RELOAD
s.rearm()
out["noted"] = [s.glbd_last, s.received]
s.sigusr1(10, None)  # not ready: deferred, raised by the next rearm
out["deferred"] = s.received
print(json.dumps(out))
"""
    )
    reload = exabgp_launch.RELOAD
    assert got == {"cleared": [0, 0], "noted": [reload, 0], "deferred": 0}


def test_a_peer_that_does_not_restart_closes_and_the_hold_keeps_it() -> None:
    """What max_prefixes_hold turns around on real peers: ExaBGP's Peer.teardown(restart=False)
    makes the peer stopping, and its run() then says CLOSE (the reactor drops it); held, it
    says LATER; removed by a reload, CLOSE again."""
    got = _run(
        _OBJECTS
        + """
r = reactor()
p = peer(r, "a", False, False)
p.teardown(1, restart=False)
out = {"exabgp": [p.stopping(), p.run() == ACTION.CLOSE]}
exabgp_launch.patch({}, [])
q = peer(r, "b", True, False)
r.teardown_peer("b", exabgp_launch.HOLD_SUBCODE)
q.fsm.state = FSM.IDLE  # its NOTIFICATION went out (_reset closed it, generator None)
out["held"] = [q.stopping(), q.run() == ACTION.LATER, q._teardown]
q.remove()
out["removed"] = [q.stopping(), q.run() == ACTION.CLOSE]
print(json.dumps(out))
"""
    )
    assert got == {
        "exabgp": [True, True],
        "held": [True, True, exabgp_launch.HOLD_SUBCODE],
        "removed": [True, True],
    }


def test_debug_is_filtered_at_the_levels_the_launcher_silences_it() -> None:
    """log.debug is a no-op only where ExaBGP's own filter drops it unevaluated."""
    got = _run(
        _OBJECTS
        + """
from exabgp.logger import log
from exabgp.logger.handler import levels
seen = []
out = {}
for level in levels:
    option._set_level(level)
    log.debug(lambda: seen.append(level) or "x", "reactor-contract")
out["evaluated"] = seen
print(json.dumps(out))
"""
    )
    assert got["evaluated"] == ["DEBUG", "NOTSET"]
    from exabgp.logger.handler import levels

    argv = ["exabgp", "server", "c.conf"]
    silenced = [lv for lv in levels if exabgp_launch.silences_debug({"exabgp.log.level": lv}, argv)]
    assert silenced == [lv for lv in levels if lv not in got["evaluated"]]  # type: ignore[operator]
    assert exabgp_launch.silences_debug({"exabgp.log.level": "warning"}, argv)
    assert not exabgp_launch.silences_debug({}, argv)  # ExaBGP's default level is INFO: kept


def test_a_debug_flag_keeps_debug_logging() -> None:
    for flag in ("-d", "--debug", "-v", "--verbose"):
        argv = ["exabgp", "server", flag, "c.conf"]
        assert not exabgp_launch.silences_debug({"exabgp.log.level": "WARNING"}, argv)


def test_a_missing_target_refuses_to_start_exabgp() -> None:
    """An ExaBGP without a callable a patch needs: nothing is patched, main exits 2 and says
    which patch and which callable."""
    code = (
        "import sys\n"
        "from exabgp.reactor.loop import Reactor\n"
        "del Reactor._pending_adjribout\n"
        "from glbd.bgp import exabgp_launch as l\n"
        "sys.argv = ['x', 'server', '/nonexistent.conf']\n"
        "sys.exit(l.main())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 2
    assert "refusing to start ExaBGP" in out.stderr
    assert "pending_adjribout: exabgp.reactor.loop:Reactor._pending_adjribout missing" in (
        out.stderr
    )


def test_a_changed_signature_is_refused() -> None:
    code = (
        "import json\n"
        "from exabgp.reactor.peer import Peer\n"
        "Peer.teardown = lambda self, code: None\n"
        "from glbd.bgp import exabgp_launch as l\n"
        "print(json.dumps({'problems': l.check()}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["problems"] == [
        "max_prefixes_hold: exabgp.reactor.peer:Peer.teardown(self, code), "
        "checked (self, code, restart=True)"
    ]


def test_a_malformed_aigp_resets_the_session_unpatched_and_is_discarded_patched() -> None:
    """ExaBGP's own parser on an AIGP-enabled session: an AIGP TLV that claims 12 octets in an
    11-octet attribute is NOTIFICATION (3, 9) as shipped; after the launcher's aigp_discard
    the UPDATE keeps its other attributes and the AIGP is dropped (RFC 7311). A good AIGP is
    kept either way."""
    got = _run(
        _OBJECTS
        + """
from exabgp.bgp.message.notification import Notify
from exabgp.bgp.message.update.attribute.attributes import Attributes
neg = SimpleNamespace(aigp=True, asn4=True, local_as=65100, peer_as=65001)
head = bytes.fromhex("40010100" "40020602010000fde9")  # ORIGIN, AS_PATH 65001
good = head + bytes.fromhex("801a0b" "01000b" "0000000000000007")
bad = head + bytes.fromhex("801a0b" "01000c" "0000000000000007")
def parse(data):
    try:
        a = Attributes().parse(data, None, neg)
    except Notify as e:
        return [e.code, e.subcode]
    return sorted(int(k) for k in a if int(k) < 256)
out = {"good": parse(good), "bad": parse(bad)}
exabgp_launch.patch({}, [])
out["good_patched"], out["bad_patched"] = parse(good), parse(bad)
print(json.dumps(out))
"""
    )
    assert got == {
        "good": [1, 2, 26],
        "bad": [3, 9],
        "good_patched": [1, 2, 26],
        "bad_patched": [1, 2],
    }
