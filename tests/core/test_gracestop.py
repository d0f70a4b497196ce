"""The armed stop's decision (glbd.bgp.gracestop), on the caller's clock: when a stop is a
graceful restart, toward which sessions, and why it falls back to a planned stop."""

from __future__ import annotations

import ipaddress

from glbd.base.reasons import GracefulStopFallback as F
from glbd.base.reasons import StopKind
from glbd.bgp.gracestop import ARM_WINDOW_S, GracefulRestartArm

A = ipaddress.ip_address("198.18.1.0")
B = ipaddress.ip_address("198.18.2.0")
C = ipaddress.ip_address("2001:db8::1")


def test_not_armed_is_a_planned_stop_toward_everyone() -> None:
    arm = GracefulRestartArm()
    p = arm.plan(100.0, True, {A: True, B: False})
    assert p.kind is StopKind.PLANNED and p.fallback is F.NOT_ARMED
    assert p.keep == () and p.withdraw == {A: F.NOT_ARMED, B: F.NOT_ARMED}
    assert arm.snapshot(100.0, True, {A: True})["armed"] is False


def test_armed_keeps_the_capable_sessions_and_withdraws_the_others() -> None:
    arm = GracefulRestartArm()
    arm.arm(10.0)
    p = arm.plan(20.0, True, {A: True, B: False, C: True})
    assert p.kind is StopKind.GRACEFUL_RESTART and p.fallback is None
    assert p.keep == (A, C) and p.withdraw == {B: F.PEER_NOT_CAPABLE}
    assert p.to_dict() == {
        "kind": "graceful_restart",
        "fallback": None,
        "keep": ["198.18.1.0", "2001:db8::1"],
        "withdraw": {"198.18.2.0": "peer_not_capable"},
    }
    snap = arm.snapshot(20.0, True, {A: True, B: False, C: True})
    assert snap == {
        "armed": True,
        "expires_in_s": ARM_WINDOW_S - 10.0,
        "next_stop": "graceful_restart",
        "fallback": None,
        "sessions_kept": 2,
        "sessions_withdrawn": 1,
    }


def test_window_expires_and_rearming_starts_it_over() -> None:
    arm = GracefulRestartArm(window_s=60.0)
    arm.arm(0.0)  # time 0 is a time like any other
    assert arm.armed(59.9) and arm.expires_in(59.9) == 0.1
    p = arm.plan(60.0, True, {A: True})
    assert not arm.armed(60.0) and arm.expires_in(60.0) is None
    assert p.kind is StopKind.PLANNED and p.fallback is F.EXPIRED
    arm.arm(100.0)
    assert arm.arms == 2 and arm.plan(159.0, True, {A: True}).kind is StopKind.GRACEFUL_RESTART
    arm.disarm()
    assert arm.plan(101.0, True, {A: True}).fallback is F.NOT_ARMED


def test_falls_back_without_our_capability_or_a_capable_peer() -> None:
    arm = GracefulRestartArm()
    arm.arm(0.0)
    p = arm.plan(1.0, False, {A: True})  # bgp.graceful_restart is not "full"
    assert p.kind is StopKind.PLANNED and p.fallback is F.NOT_FULL and p.withdraw == {A: F.NOT_FULL}
    p = arm.plan(1.0, True, {A: False, B: False})
    assert p.kind is StopKind.PLANNED and p.fallback is F.NO_CAPABLE_PEER
    assert set(p.withdraw) == {A, B}
    p = arm.plan(1.0, True, {})  # no session up
    assert p.kind is StopKind.PLANNED and p.fallback is F.NO_CAPABLE_PEER


def test_reasons_keep_their_strings() -> None:
    assert [str(k) for k in StopKind] == ["planned", "graceful_restart"]
    for m in F:
        assert m == m.value == m.name.lower()
