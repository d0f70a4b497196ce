"""Interop with real FRR 10.x bfdd (glbdlab.frr, sid chroot) in a neighbouring namespace.
glbd's engine runs in namespace a (198.18.0.1, a-b), FRR in b (198.18.0.2,
b-a); FRR's view comes from ``vtysh show bfd peers [counters] json``.

Authentication: Debian's FRR 10.7 keychain accepts only ``cleartext`` and ``md5`` for bfdd
("hmac-sha-1 hash algo not supported": built without a crypto library) and bfdd maps md5 to no
authentication, so the interop test uses simple password (cleartext); glbd's keyed MD5/SHA1
are covered against hand-computed digests in test_packet.py and peer-to-peer in
test_session.py."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from bfdwait import next_event
from glbdlab.netns import Lab, LabError, Netns
from glbdlab.nodes import wait_until

from bfd.engine import BfdEngine, BfdEvent, SessionConfig
from bfd.packet import AuthType, State
from bfd.session import AuthConfig, SessionParams

pytestmark = [pytest.mark.netns, pytest.mark.frr]

A, B = "198.18.0.1", "198.18.0.2"
FAST = SessionParams(desired_min_tx=50_000, required_min_rx=50_000, detect_mult=3)


def _frr_instance(ns: Netns) -> Any:
    try:
        from glbdlab.frr import FrrInstance, frr_build

        build = frr_build("sid")
    except (ImportError, LabError) as exc:
        pytest.skip(f"FRR 10.x chroot not available: {exc}")
    if build.major < 10:
        pytest.skip(f"needs FRR 10.x, found {build.version}")
    return FrrInstance(ns, build=build, daemons=("mgmtd", "zebra", "bfdd"))


def frr_config(extra: str = "", auth: str | None = None, tx: int = 50, rx: int = 50) -> str:
    keychain = ""
    peer_auth = ""
    if auth is not None:
        keychain = (
            f"key chain glbd\n key 1\n  key-string {auth}\n"
            "  cryptographic-algorithm cleartext\n exit\nexit\n"
        )
        peer_auth = "  authentication key-chain glbd\n"
    return (
        "frr defaults datacenter\n"
        f"{keychain}"
        "bfd\n"
        f" peer {A} local-address {B} interface b-a\n"
        f"  receive-interval {rx}\n"
        f"  transmit-interval {tx}\n"
        f"{peer_auth}{extra}"
        " exit\n"
        "exit\n"
    )


class Rig:
    def __init__(self, lab: Lab) -> None:
        self.a, self.b = lab.pair()
        self.events: queue.Queue[BfdEvent] = queue.Queue()
        self.engine = BfdEngine(self.events.put, netns=self.a.name)
        self.engine.start()
        lab.on_close(self.engine.stop)
        self.frr = _frr_instance(self.b)

    def add(self, params: SessionParams = FAST) -> None:
        self.engine.add_session(SessionConfig(B, "a-b", A, params))

    def update(self, params: SessionParams) -> None:
        self.engine.update_session(SessionConfig(B, "a-b", A, params))

    def wait_event(self, new: State, timeout: float = 10.0) -> BfdEvent:
        return next_event(self.events, lambda ev: ev.new == new, timeout, self.ours)

    def ours(self) -> dict[str, Any]:
        sessions = self.engine.snapshot()["sessions"]
        return dict(sessions[0]) if sessions else {}

    def theirs(self) -> dict[str, Any]:
        peers = self.frr.vtysh_json("show bfd peers json")
        return dict(peers[0]) if peers else {}

    def their_counters(self) -> dict[str, Any]:
        peers = self.frr.vtysh_json("show bfd peers counters json")
        return dict(peers[0]) if peers else {}

    def wait_theirs(self, key: str, want: Any, timeout: float = 10.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            t = self.theirs()
            if t.get(key) == want:
                return t
            if time.monotonic() > deadline:
                raise AssertionError(f"FRR {key} != {want!r}: {t}")
            time.sleep(0.05)  # poll interval

    def wait_settled(
        self, tx: int, rx: int, timeout: float = 10.0
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Until both sides are Up with no Poll running and agree on these intervals (ms)."""
        deadline = time.monotonic() + timeout
        while True:
            ours, theirs = self.ours(), self.theirs()
            try:
                assert ours["state"] == "up" and not ours["polling"], ours
                _intervals_match(ours, theirs, tx, rx)
                return ours, theirs
            except (AssertionError, KeyError):
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.05)  # poll interval

    def _sender(self, receiver: Netns) -> tuple[Netns, str]:
        return (self.b, "b-a") if receiver is self.a else (self.a, "a-b")

    def nft_drop(self, receiver: Netns) -> None:
        """Lose every BFD packet sent to ``receiver``, on the sender's egress (glbd's kernel
        path takes the steady state's repeats before an input-hook drop would)."""
        sender, dev = self._sender(receiver)
        sender.drop_egress(dev, "udp dport 3784")

    def nft_clear(self, receiver: Netns) -> None:
        sender, dev = self._sender(receiver)
        sender.undrop_egress(dev)


@pytest.fixture
def rig(netns_lab: Lab) -> Iterator[Rig]:
    yield Rig(netns_lab)


def _intervals_match(ours: dict[str, Any], theirs: dict[str, Any], tx: int, rx: int) -> None:
    # FRR's JSON is in ms
    assert theirs["remote-transmit-interval"] == ours["local_desired_min_tx_us"] // 1000 == tx
    assert theirs["remote-receive-interval"] == ours["local_required_min_rx_us"] // 1000 == rx
    assert theirs["transmit-interval"] == ours["remote_desired_min_tx_us"] // 1000
    assert theirs["receive-interval"] == ours["remote_required_min_rx_us"] // 1000
    assert theirs["remote-detect-multiplier"] == ours["detect_mult"]
    assert theirs["detect-multiplier"] == ours["remote_detect_mult"]
    assert theirs["remote-id"] == ours["local_discriminator"]
    assert theirs["id"] == ours["remote_discriminator"]


@pytest.mark.parametrize("first", ["frr", "glbd"])
def test_up_from_either_side_and_intervals_match(rig: Rig, first: str) -> None:
    # the stimulus: one side has sent alone (Down, 1 s slow start) before the other appears
    if first == "frr":
        rig.frr.start(frr_config())
        wait_until(
            lambda: rig.their_counters().get("control-packet-output", 0) >= 1, 10, 0.05,
            "FRR's first packet",
        )  # fmt: skip
        rig.add()
    else:
        rig.add()
        wait_until(lambda: rig.ours().get("packets_out", 0) >= 1, 10, 0.05, "glbd's first packet")
        rig.frr.start(frr_config())
    rig.wait_event(State.UP)
    rig.frr.wait_bfd_up([A], timeout=10)
    ours, theirs = rig.wait_settled(50, 50)  # both Polls to 50 ms done
    assert ours["tx_interval_ms"] == 50 and ours["detect_time_ms"] == 150
    assert theirs["detection-timeout"] == 150


def test_loss_detected_both_ways(rig: Rig) -> None:
    rig.frr.start(frr_config())
    rig.add()
    rig.wait_event(State.UP)
    rig.frr.wait_bfd_up([A])
    rig.wait_settled(50, 50)
    # glbd detects FRR's loss: drop what reaches glbd
    rig.nft_drop(rig.a)
    ev = rig.wait_event(State.DOWN, timeout=5)
    assert ev.reason == "detection_timeout" and ev.failure
    # never before a whole detection time without packets (RFC 5880 6.8.4); how soon after is
    # bench/bfd_bench.py's to measure
    assert ev.last_rx is not None and 0.150 <= ev.at - ev.last_rx < 10 * 0.150
    rig.nft_clear(rig.a)
    rig.wait_event(State.UP)
    rig.frr.wait_bfd_up([A])
    rig.wait_settled(50, 50)
    # FRR detects glbd's loss: drop what reaches FRR
    rig.nft_drop(rig.b)
    theirs = rig.wait_theirs("status", "down", timeout=5)
    assert theirs["diagnostic"] == "control detection time expired"
    ev = rig.wait_event(State.DOWN, timeout=5)  # FRR then tells us Down (diag 1)
    assert ev.reason == "neighbor_down" and ev.remote_diag == 1
    rig.nft_clear(rig.b)
    rig.wait_event(State.UP)


def test_timer_change_polls_without_flap(rig: Rig) -> None:
    rig.frr.start(frr_config())
    rig.add()
    rig.wait_event(State.UP)
    rig.frr.wait_bfd_up([A])
    rig.wait_settled(50, 50)
    for tx, rx in ((200, 100), (50, 50), (20, 30)):
        rig.update(replace(FAST, desired_min_tx=tx * 1000, required_min_rx=rx * 1000))
        ours, theirs = rig.wait_settled(tx, rx)
        assert ours["tx_interval_ms"] == max(tx, theirs["receive-interval"])
    counters = rig.their_counters()
    assert counters["session-down"] == 0 and counters["session-up"] == 1
    assert rig.ours()["flaps"] == 0
    assert rig.events.empty()  # no state change on our side either


def test_frr_shutdown_is_admin_down_not_failure(rig: Rig) -> None:
    rig.frr.start(frr_config())
    rig.add()
    rig.wait_event(State.UP)
    rig.frr.wait_bfd_up([A])
    rig.frr.configure("bfd", f"peer {A} local-address {B} interface b-a", "shutdown")
    ev = rig.wait_event(State.DOWN, timeout=5)
    assert ev.reason == "neighbor_admin_down" and not ev.failure
    assert ev.remote_diag == 7
    assert rig.ours()["flaps"] == 0
    rig.frr.configure("bfd", f"peer {A} local-address {B} interface b-a", "no shutdown")
    rig.wait_event(State.UP)


def test_our_admin_down_seen_by_frr(rig: Rig) -> None:
    rig.frr.start(frr_config())
    rig.add()
    rig.wait_event(State.UP)
    rig.frr.wait_bfd_up([A])
    rig.engine.admin_down("a-b", B)
    theirs = rig.wait_theirs("status", "down", timeout=5)
    assert theirs["remote-diagnostic"] == "administratively down"


def test_simple_password_auth(rig: Rig) -> None:
    rig.frr.start(frr_config(auth="s3cret"))
    rig.add(replace(FAST, auth=AuthConfig(AuthType.SIMPLE_PASSWORD, 1, b"s3cret")))
    rig.wait_event(State.UP)
    rig.frr.wait_bfd_up([A])
    theirs = rig.theirs()
    assert theirs["authentication"]["enabled"]
    assert rig.ours()["drops"] == {}


def test_wrong_password_stays_down(rig: Rig) -> None:
    rig.frr.start(frr_config(auth="s3cret"))
    rig.add(replace(FAST, auth=AuthConfig(AuthType.SIMPLE_PASSWORD, 1, b"wrong")))
    deadline = time.monotonic() + 10
    while rig.ours()["drops"].get("auth_failed", 0) < 3:  # several of FRR's packets refused
        assert time.monotonic() < deadline, rig.ours()
        time.sleep(0.05)  # poll interval
    ours = rig.ours()
    assert ours["state"] != "up" and rig.theirs()["status"] != "up"
    assert ours["drops"].get("auth_failed", 0) >= 1
    assert rig.events.qsize() == 0 or all(
        rig.events.get_nowait().new != State.UP for _ in range(rig.events.qsize())
    )
