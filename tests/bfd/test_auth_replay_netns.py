"""Keyed authentication between two glbd BFD engines in two namespaces, and a real replay.

FRR's bfdd cannot be the peer here: the Debian FRR 10.7 in the lab chroot is built without
OpenSSL, so its keychain offers only cleartext and md5 to bfdd, and bfdd maps md5 to no
authentication (see test_frr_interop.py); its keyed SHA1 (``#ifdef CRYPTO_OPENSSL``) is an
HMAC-SHA1, not RFC 5880 §6.7.4's SHA1 over the packet with the key in the digest field.

The replay: b's session is Up with a; a frame a sent is captured at b (AF_PACKET), a's BFD
packets are then lost on the wire (nftables egress drop), and the captured frame is sent again
byte for byte from a's side of the veth every 50 ms. With keyed SHA1 the replays are taken
until the sequence number has stood still for 2 s, then dropped (``auth_sequence_stale``) and
b times out; with meticulous keyed SHA1 the first replay is dropped (``auth_sequence``)."""

from __future__ import annotations

import queue
import socket
import time
from dataclasses import replace
from typing import Any

import pytest
from bfdwait import until
from glbdlab.netns import Lab, Netns

from bfd.engine import BfdEngine, BfdEvent, SessionConfig
from bfd.packet import AuthType, State
from bfd.session import AuthConfig, SessionParams

pytestmark = pytest.mark.netns

A4, B4 = "198.18.0.1", "198.18.0.2"
#: a 0.5 s detection time: the replayer starts after ``nft`` returned, well within it
TIMERS = SessionParams(desired_min_tx=100_000, required_min_rx=100_000, detect_mult=5)
DETECT_S = 0.5
ETH_P_IP = 0x0800
MARK = 0x4C  # the replayer's packets carry it; the cut spares them
SO_MARK = getattr(socket, "SO_MARK", 36)


class Engine:
    def __init__(self, lab: Lab, ns: Netns) -> None:
        self.events: queue.Queue[BfdEvent] = queue.Queue()
        self.engine = BfdEngine(self.events.put, netns=ns.name)
        self.engine.start()
        lab.on_close(self.engine.stop)

    def session(self) -> dict[str, Any]:
        sessions = self.engine.snapshot()["sessions"]
        return dict(sessions[0]) if sessions else {}

    def next_state(self, new: State, timeout: float) -> BfdEvent | None:
        """The next event entering ``new`` within ``timeout`` (None: none)."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                ev = self.events.get(timeout=left)
            except queue.Empty:
                return None
            if ev.new == new:
                return ev
        return None


def _from_a_to_bfd(frame: bytes) -> bool:
    """An IPv4 UDP frame from A4 to port 3784."""
    if len(frame) < 14 + 20 + 8 or frame[12:14] != b"\x08\x00" or frame[23] != 17:
        return False
    udp = 14 + (frame[14] & 0x0F) * 4
    return frame[26:30] == socket.inet_aton(A4) and frame[udp + 2 : udp + 4] == b"\x0e\xc8"


def _up(lab: Lab, atype: AuthType) -> tuple[Netns, Netns, Engine, Engine]:
    a_ns, b_ns = lab.pair()
    a_ns.tx_checksum_off("a-b")  # full UDP checksums: a captured frame is valid as it is
    a, b = Engine(lab, a_ns), Engine(lab, b_ns)
    params = replace(TIMERS, auth=AuthConfig(atype, 7, b"glbd-replay-test"))
    a.engine.add_session(SessionConfig(B4, "a-b", A4, params))
    b.engine.add_session(SessionConfig(A4, "b-a", B4, params))
    for side in (a, b):
        assert side.next_state(State.UP, 10.0) is not None, side.session()
    until(b.session, lambda s: s["packets_in"] > 10 and not s["polling"], "b settled")
    return a_ns, b_ns, a, b


def _capture_then_cut(a_ns: Netns, b_ns: Netns) -> bytes:
    """The last frame of a's that reached b before a's BFD packets were cut."""
    cap = b_ns.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_IP))
    with cap:
        cap.bind(("b-a", ETH_P_IP))
        seen: list[bytes] = []

        def frames() -> list[bytes]:
            cap.settimeout(0.2)
            try:
                frame, addr = cap.recvfrom(2048)
                if addr[2] == socket.PACKET_HOST and _from_a_to_bfd(frame):
                    seen.append(frame)
            except TimeoutError:
                pass
            return seen

        until(frames, lambda f: len(f) >= 3, "a's packets captured at b")
        a_ns.drop_egress("a-b", f"meta mark != {MARK:#x} udp dport 3784")
        cap.setblocking(False)
        while True:  # to the last frame that made it before the cut (a veth delivers at once)
            try:
                frame, addr = cap.recvfrom(2048)
            except BlockingIOError:
                break
            if addr[2] == socket.PACKET_HOST and _from_a_to_bfd(frame):
                seen.append(frame)
    return seen[-1]


def _replay(a_ns: Netns, frame: bytes, b: Engine, timeout: float) -> BfdEvent | None:
    """Send ``frame`` from a's side every 50 ms until b leaves Up (or ``timeout``)."""
    rep = a_ns.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    with rep:
        rep.setsockopt(socket.SOL_SOCKET, SO_MARK, MARK)
        rep.bind(("a-b", 0))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            rep.send(frame)
            # the replay interval is the stimulus under test
            if (ev := b.next_state(State.DOWN, 0.05)) is not None:
                return ev
    return None


def test_keyed_sha1_replay_lets_a_dead_session_time_out(netns_lab: Lab) -> None:
    a_ns, b_ns, _a, b = _up(netns_lab, AuthType.KEYED_SHA1)
    assert not [r for r in b.session()["drops"] if r.startswith("auth")]
    frame = _capture_then_cut(a_ns, b_ns)
    t_cut = time.monotonic()
    before = b.session()["packets_in"]
    ev = _replay(a_ns, frame, b, timeout=10.0)
    s = b.session()
    assert ev is not None, f"the replays kept b Up: {s}"
    assert ev.reason == "detection_timeout" and ev.failure
    # the replays were taken (valid packets, the same sequence) until the 2 s hold ran out
    assert s["packets_in"] > before + 10 and ev.at - t_cut >= 1.5, s
    assert s["drops"].get("auth_sequence_stale", 0) >= 1
    assert "auth_failed" not in s["drops"]


def test_meticulous_keyed_sha1_both_ways_and_a_replay_is_dropped_at_once(
    netns_lab: Lab,
) -> None:
    a_ns, b_ns, a, b = _up(netns_lab, AuthType.METICULOUS_KEYED_SHA1)
    assert a.session()["auth"] == b.session()["auth"] == "meticulous_keyed_sha1"
    # (a tx_econnrefused may come from before b's engine listened)
    assert not [r for side in (a, b) for r in side.session()["drops"] if r.startswith("auth")]
    frame = _capture_then_cut(a_ns, b_ns)
    ev = _replay(a_ns, frame, b, timeout=10.0)
    s = b.session()
    assert ev is not None and ev.reason == "detection_timeout", s
    # Down one detection time after the last genuine packet: no replay refreshed it (an upper
    # bound on behaviour, not speed)
    assert ev.last_rx is not None and DETECT_S <= ev.at - ev.last_rx < 10 * DETECT_S
    assert s["drops"].get("auth_sequence", 0) >= 1
    assert "auth_sequence_stale" not in s["drops"]
