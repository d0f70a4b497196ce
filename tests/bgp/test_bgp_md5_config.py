"""TCP MD5 (RFC 2385) per neighbour: the key comes from a secret file, reaches ExaBGP's config
(base64, in a 0600 file of ours) and nothing else: not `glbctl config`, not a repr, not a log."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import stat
import tomllib
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from glbd.bgp.exabgp import ExabgpNeighbor, ExabgpParams, ExabgpSupervisor, render_config
from glbd.bgp.rib import Rib
from glbd.config import config, params

ROOT = Path(__file__).resolve().parent.parent.parent
# quotes, spaces, ';' and '{' would break ExaBGP's tokenizer if written as they are; it also
# looks nothing like hex (ExaBGP's "auto" mode re-reads hex-looking keys as base64)
KEY = b'sp1ne "one"; {x} \\ k'


def _leaf(tmp_path: Path, key: bytes = KEY, mode: int = 0o600) -> dict[str, Any]:
    p = tmp_path / "spine1.md5"
    p.write_bytes(key + b"\n")
    os.chmod(p, mode)
    d = tomllib.loads((ROOT / "conf" / "leaf.toml").read_text())
    d["neighbors"][0]["password_file"] = str(p)
    return d


def test_password_file_reaches_the_rib_and_nowhere_else(tmp_path: Path) -> None:
    c = config.parse(_leaf(tmp_path))
    n0, n1 = c.neighbors
    assert n0.password is not None and n0.password.reveal() == KEY and n1.password is None
    rp = params.rib_params(c, {n.address: n.address for n in c.neighbors})
    assert rp.neighbors[0].tcp_md5 == KEY and rp.neighbors[1].tcp_md5 is None
    shown = json.dumps(c.redacted())
    assert str(tmp_path / "spine1.md5") in shown  # the path is no secret
    for text in (shown, repr(c), repr(rp), repr(n0)):
        assert KEY.decode() not in text and base64.b64encode(KEY).decode() not in text
        assert "sp1ne" not in text


@pytest.mark.parametrize(
    ("key", "mode", "why"),
    [
        (KEY, 0o644, "readable by other users"),
        (b"", 0o600, "a TCP MD5 key is 1-80 bytes"),
        (b"k" * 81, 0o600, "a TCP MD5 key is 1-80 bytes"),
    ],
)
def test_bad_password_file_is_refused(tmp_path: Path, key: bytes, mode: int, why: str) -> None:
    with pytest.raises(config.ConfigError) as ei:
        config.parse(_leaf(tmp_path, key, mode))
    ((p,),) = [ei.value.problems]
    assert p.key == "neighbors.0" and why in p.reason


def test_exabgp_config_carries_the_key_as_base64() -> None:
    n = ExabgpNeighbor("172.16.31.1", "172.16.31.2", 65100, md5=KEY)
    text = render_config(ExabgpParams("10.0.0.1", 65001, (n,)), ["bridge"])
    b64 = base64.b64encode(KEY).decode()
    assert f'    md5-password "{b64}";\n    md5-base64 true;' in text
    assert KEY.decode() not in text and "sp1ne" not in repr(n)
    plain = render_config(
        ExabgpParams("10.0.0.1", 65001, (ExabgpNeighbor("172.16.31.1", "172.16.31.2", 65100),)),
        ["bridge"],
    )
    assert "md5" not in plain


def test_exabgp_config_file_is_private(tmp_path: Path) -> None:
    """The only file that holds the key: 0600, ours, in a 0700 directory of ours."""
    n = ExabgpNeighbor("192.0.2.1", "192.0.2.2", 65100, md5=KEY)
    p = ExabgpParams(
        "10.0.0.1",
        65001,
        (n,),
        exabgp=("/bin/false",),
        runtime_dir=tmp_path / "rt",
        connect_timeout_s=0.1,
        stop_grace_s=0.5,
    )
    sup = ExabgpSupervisor(
        p, netns=None, on_line=lambda _l: None, on_lost=lambda: None, on_ready=lambda: None
    )

    async def go() -> None:
        with capture_logs() as logs:
            await sup.start()
            st = os.stat(sup.config_path)
            assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.geteuid()
            assert stat.S_IMODE(os.stat(sup.dir).st_mode) == 0o700
            assert base64.b64encode(KEY).decode() in sup.config_path.read_text()
            await sup.stop()
        assert not [r for r in logs if "sp1ne" in repr(r)]

    asyncio.run(go())
    assert not sup.config_path.exists()  # removed with the runtime directory at stop


def test_a_key_written_in_the_config_is_refused(tmp_path: Path) -> None:
    d = tomllib.loads((ROOT / "conf" / "leaf.toml").read_text())
    d["neighbors"][0]["password"] = "in-the-config"
    with pytest.raises(config.ConfigError) as ei:
        config.parse(d)
    ((p,),) = [ei.value.problems]
    assert p.key == "neighbors.0.password" and "password_file" in p.reason
    assert "in-the-config" not in str(ei.value)


def test_a_new_key_in_the_same_file_redefines_the_session(tmp_path: Path) -> None:
    """Key rotation: rewrite the file, reload. The neighbor counts as changed, and the RIB names
    it among the sessions ExaBGP redefines (its Adj-RIB-Out is replayed after the reload)."""
    old = config.parse(_leaf(tmp_path))
    new = config.parse(_leaf(tmp_path, b"the next key"))
    assert config.diff(old, new)["neighbors_changed"] == [str(old.neighbors[0].address)]
    local = {n.address: n.address for n in old.neighbors}
    rib = Rib(params.rib_params(old, local))
    _effects, touched = rib.reconfigure(params.rib_params(new, local))
    assert touched == {old.neighbors[0].address}
    assert rib.peers[old.neighbors[0].address].params.tcp_md5 == b"the next key"
