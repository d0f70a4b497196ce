"""The glbd.toml of a two-router test (one neighbour, BFD off), validated before use."""

from __future__ import annotations

from pathlib import Path

from glbd.config import config

#: a prefix list that permits every route (RFC 8212: an eBGP neighbor without an import or
#: export list exchanges nothing), as TOML
PERMIT_ALL = '["0.0.0.0/0 le 32", "::/0 le 128"]'


def one_neighbour(tmp: Path, name: str, rid: str, asn: int, role: str, peer: str, peer_as: int,
                  local: str, ifname: str, extra: str = "") -> Path:  # fmt: skip
    """``tmp/name/glbd.toml`` for router ``name`` with one neighbour ``peer`` on ``ifname``;
    ``extra`` is appended (new tables only)."""
    d = tmp / name
    d.mkdir()
    f = d / "glbd.toml"
    f.write_text(
        f"""router_id = "{rid}"
local_as = {asn}
role = "{role}"

[[neighbors]]
address = "{peer}"
remote_as = {peer_as}
interface = "{ifname}"
local_address = "{local}"
import = {PERMIT_ALL}
export = {PERMIT_ALL}

[bgp]
hold_time = 9

[bfd]
enabled = false

[control]
socket = "{d / "glbd.sock"}"

[logging]
format = "json"
{extra}"""
    )
    config.load(f)  # the test's configs are valid ones
    return f


def daemon_conf(tmp: Path, *, rid: str, asn: int, role: str, peer: str, peer_as: int,
                ifname: str, extra: str = "") -> Path:  # fmt: skip
    """``tmp/glbd.toml`` for an in-process daemon: one neighbour that exchanges everything, its
    control socket at ``tmp/ctl.sock``; ``extra`` is appended (new tables only)."""
    f = tmp / "glbd.toml"
    f.write_text(
        f"""router_id = "{rid}"
local_as = {asn}
role = "{role}"
[[neighbors]]
address = "{peer}"
remote_as = {peer_as}
interface = "{ifname}"
import = {PERMIT_ALL}
export = {PERMIT_ALL}
[control]
socket = "{tmp / "ctl.sock"}"
{extra}"""
    )
    config.load(f)
    return f
