"""Heartbeat key rollover in the config: several keys accepted at once, one designated for
signing (``heartbeat.keys`` + ``heartbeat.send_key_id``), or the single ``heartbeat.auth``."""

from __future__ import annotations

from pathlib import Path

import pytest

from glbd.cli.glbd import check_config
from glbd.config import config
from glbd.config.params import heartbeat_keys
from heartbeat.wire import HmacKey

OLD_KEY, NEW_KEY = HmacKey(1, b"the old secret key"), HmacKey(2, b"the new secret key")


def _hb_toml(tmp_path: Path, body: str) -> Path:
    for name, secret in (("old", OLD_KEY.secret), ("new", NEW_KEY.secret)):
        (tmp_path / name).write_bytes(secret + b"\n")
        (tmp_path / name).chmod(0o600)
    f = tmp_path / "glbd.toml"
    f.write_text(
        'router_id = "10.0.0.1"\nlocal_as = 65001\nrole = "both"\n'
        '[[neighbors]]\naddress = "192.0.2.1"\ninterface = "eth1"\nremote_as = 65100\n'
        'import = ["0.0.0.0/0 le 32", "::/0 le 128"]\n'
        'export = ["0.0.0.0/0 le 32", "::/0 le 128"]\n'
        "[heartbeat]\n" + body.replace("DIR", str(tmp_path))
    )
    return f


def test_config_two_keys_one_designated_for_sending(tmp_path: Path) -> None:
    f = _hb_toml(
        tmp_path,
        "send_key_id = 2\n"
        '[[heartbeat.keys]]\nkey_id = 1\nsecret_file = "DIR/old"\n'
        '[[heartbeat.keys]]\nkey_id = 2\nsecret_file = "DIR/new"\n',
    )
    c = config.load(f)
    send, accept = heartbeat_keys(c.heartbeat)
    assert send == NEW_KEY and accept == {1: OLD_KEY, 2: NEW_KEY}
    assert "the new secret" not in str(c.redacted())
    # the single [heartbeat.auth] key is still a valid (one-key) configuration
    c = config.load(_hb_toml(tmp_path, '[heartbeat.auth]\nkey_id = 1\nsecret_file = "DIR/old"\n'))
    assert heartbeat_keys(c.heartbeat) == (OLD_KEY, {1: OLD_KEY})
    assert heartbeat_keys(config.load(_hb_toml(tmp_path, "")).heartbeat) == (None, {})


def test_config_send_key_must_be_configured(tmp_path: Path) -> None:
    for body in (
        'send_key_id = 3\n[[heartbeat.keys]]\nkey_id = 1\nsecret_file = "DIR/old"\n',
        '[[heartbeat.keys]]\nkey_id = 1\nsecret_file = "DIR/old"\n'
        '[[heartbeat.keys]]\nkey_id = 2\nsecret_file = "DIR/new"\n',
        '[[heartbeat.keys]]\nkey_id = 1\nsecret_file = "DIR/old"\n'
        '[[heartbeat.keys]]\nkey_id = 1\nsecret_file = "DIR/new"\n',
    ):
        with pytest.raises(config.ConfigError) as ei:
            config.load(_hb_toml(tmp_path, body))
        assert any(p.key.startswith("heartbeat") for p in ei.value.problems), body


def test_check_config_warns_when_heartbeats_are_unauthenticated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert check_config(str(_hb_toml(tmp_path, ""))) == 0
    err = capsys.readouterr().err
    assert "warning: heartbeat: no HMAC key" in err and "forge or replay" in err
    signed = _hb_toml(tmp_path, '[heartbeat.auth]\nkey_id = 1\nsecret_file = "DIR/old"\n')
    assert check_config(str(signed)) == 0
    assert "warning" not in capsys.readouterr().err
