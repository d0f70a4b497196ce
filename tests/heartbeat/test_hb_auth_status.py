"""Running heartbeats without authentication is visible: the endpoint reports it, and
``glbctl status`` shows heartbeat auth off/on."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from glbd.cli import glbctl as ctl
from heartbeat.receiver import Receiver, ReceiverParams
from heartbeat.sender import Sender, SenderParams
from heartbeat.transport import HeartbeatEndpoint
from heartbeat.wire import HmacKey

K1, K2 = HmacKey(1, b"the old secret key"), HmacKey(2, b"the new secret key")


async def test_endpoint_reports_auth() -> None:
    loop = asyncio.get_running_loop()
    off = HeartbeatEndpoint(loop, sender=Sender(SenderParams(1), 1), receiver=Receiver())
    on = HeartbeatEndpoint(
        loop,
        sender=Sender(SenderParams(1, key=K2), 1),
        receiver=Receiver(ReceiverParams(keys={1: K1, 2: K2})),
    )
    try:
        assert off.to_dict()["auth"] == {
            "enabled": False,
            "sign_key_id": None,
            "accept_key_ids": [],
        }
        assert on.to_dict()["auth"] == {"enabled": True, "sign_key_id": 2, "accept_key_ids": [1, 2]}
    finally:
        off.close()
        on.close()


def test_glbctl_status_shows_heartbeat_auth(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    answers: dict[str, Any] = {
        "status": {"state": "running", "role": "both"},
        "heartbeats": [{"auth": {"enabled": False, "sign_key_id": None, "accept_key_ids": []}}],
    }
    monkeypatch.setattr(ctl, "request", lambda _path, cmd, *a, **k: copy.deepcopy(answers[cmd]))
    assert ctl.main(["--json", "status"]) == 0
    assert '"heartbeat_auth": "off: anyone on a fabric link' in capsys.readouterr().out
    answers["heartbeats"] = [
        {"auth": {"enabled": True, "sign_key_id": 2, "accept_key_ids": [1, 2]}}
    ]
    assert ctl.main(["--json", "status"]) == 0
    assert '"heartbeat_auth": "on: signs with key 2; accepts key 1, 2"' in capsys.readouterr().out
    answers["heartbeats"] = {"heartbeats": [], "note": "quality is not running"}
    assert ctl.main(["--json", "status"]) == 0
    assert "heartbeats disabled" in capsys.readouterr().out
