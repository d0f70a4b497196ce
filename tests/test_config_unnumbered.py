"""Unnumbered neighbours in the config: no address, FRR's remote_as spellings, templates."""

from __future__ import annotations

import ipaddress
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from glbd.bgp.exabgp import ExabgpNeighbor, ExabgpParams, render_config
from glbd.config import config, params

LL = ipaddress.IPv6Address


def _base(*neighbors: dict[str, Any]) -> dict[str, Any]:
    return {
        "router_id": "10.0.0.1",
        "local_as": 65001,
        "role": "load-balancer",
        "neighbors": list(neighbors),
    }


def _problems(data: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(config.ConfigError) as ei:
        config.parse(data, "t.toml")
    return [(p.key, p.reason) for p in ei.value.problems]


def test_unnumbered_and_numbered_side_by_side() -> None:
    c = config.parse(
        _base(
            {"address": "172.16.0.1", "remote_as": 65100, "interface": "eth0"},
            {"interface": "swp1", "remote_as": "external"},
        )
    )
    assert [str(n.address) for n in c.neighbors] == ["172.16.0.1"]
    (u,) = c.unnumbered
    assert (u.interface, u.remote_as, u.peer_as(c.local_as)) == ("swp1", "external", None)


def test_learned_peer_becomes_a_neighbor() -> None:
    c = config.parse(_base({"interface": "swp1", "remote_as": "internal", "description": "s1"}))
    assert c.with_learned({}).neighbors == []
    e = c.with_learned({"swp1": LL("fe80::1")})
    (n,) = e.neighbors
    assert (n.address, n.interface, n.description) == (LL("fe80::1"), "swp1", "s1")
    assert n.peer_as(c.local_as) == 65001
    # learning again replaces, never adds
    (m,) = e.with_learned({"swp1": LL("fe80::2")}).neighbors
    assert m.address == LL("fe80::2")
    # the RIB's neighbor: a link-local session that always connects
    (p,) = params.rib_params(e, {LL("fe80::1"): LL("fe80::9")}).neighbors
    # the lower link-local address waits for the other to connect ("auto")
    assert p.unnumbered and not p.is_passive and p.remote_as == 65001
    d = config.diff(c, e)
    assert d["neighbors_added"] == ["fe80::1"]


def test_template_range_and_list() -> None:
    c = config.parse(
        _base(
            {"interfaces": "swp1-4", "remote_as": "external", "hold_time": 3},
            {"interfaces": ["eth7", "eth9"], "remote_as": 65100},
        )
    )
    assert [u.interface for u in c.unnumbered] == ["swp1", "swp2", "swp3", "swp4", "eth7", "eth9"]
    assert {u.hold_time for u in c.unnumbered[:4]} == {3}


@pytest.mark.parametrize(
    ("neighbor", "key", "reason"),
    [
        (
            {"interface": "swp1", "remote_as": "outside"},
            "neighbors.1.remote_as",
            'an AS number (1-4294967295), "external" (any AS but ours) or "internal" (ours)',
        ),
        (
            {"interface": "swp1", "remote_as": 1, "local_address": "10.0.0.1"},
            "neighbors.1",
            "an unnumbered neighbor (no address) runs over link-local IPv6: local_address "
            "must be an IPv6 link-local address or left out",
        ),
        ({"remote_as": 1}, "neighbors.1.interface", "required key is missing"),
        (
            {"interfaces": "swp9-3", "remote_as": 1},
            "neighbors.1.interfaces",
            "'swp9-3' is not an ascending range of ports",
        ),
        (
            {"interfaces": "swp1-2", "interface": "swp1", "remote_as": 1},
            "neighbors.1",
            "a template (interfaces) has neither interface nor address",
        ),
    ],
)
def test_errors_name_the_written_entry(neighbor: dict[str, Any], key: str, reason: str) -> None:
    ok = {"address": "172.16.0.1", "remote_as": 65100, "interface": "eth0"}
    assert _problems(_base(ok, neighbor)) == [(key, reason)]


def test_duplicate_port() -> None:
    data = _base(
        {"interfaces": "swp1-3", "remote_as": "external"},
        {"interface": "swp2", "remote_as": "external"},
    )
    assert _problems(data) == [
        ("neighbors.1.interface", "duplicate unnumbered neighbor on swp2 (also neighbors.0)")
    ]


def test_check_config_one_line(tmp_path: Path) -> None:
    f = tmp_path / "g.toml"
    f.write_text(
        'router_id = "10.0.0.1"\nlocal_as = 1\nrole = "helper"\n'
        '[[neighbors]]\ninterface = "swp1"\nremote_as = "extern"\n'
    )
    r = subprocess.run(
        [sys.executable, "-m", "glbd", "check-config", str(f)], capture_output=True, text=True
    )
    assert r.returncode == 1
    assert (
        f"{f}: neighbors.0.remote_as: an AS number (1-4294967295), "
        '"external" (any AS but ours) or "internal" (ours)' in r.stderr + r.stdout
    )


def test_exabgp_config_of_an_unnumbered_neighbor() -> None:
    p = ExabgpParams(
        "10.0.0.1",
        65001,
        (ExabgpNeighbor("fe80::1", "fe80::2", None, 9, interface="swp1"),),
    )
    text = render_config(p, ["bridge"])
    block = text[text.index("neighbor fe80::1 {") :]
    assert "    peer-as auto;\n" in block
    assert "    source-interface swp1;\n" in block
    assert "    nexthop {\n        ipv4 unicast ipv6;\n    }\n" in block
    assert "listen" not in block and "passive" not in block
    # without [::]:179 a passive link-local neighbor would never come up: it connects
    p = ExabgpParams(
        "10.0.0.1", 65001, (ExabgpNeighbor("fe80::1", "fe80::2", 1, 9, True, interface="swp1"),)
    )
    assert "passive" not in render_config(p, ["bridge"])
    # IPv4 only: ExaBGP enables the extended next hop only with IPv6 unicast negotiated too
    p = ExabgpParams(
        "10.0.0.1",
        65001,
        (ExabgpNeighbor("fe80::1", "fe80::2", 1, 9, interface="swp1", families=("ipv4",)),),
    )
    assert "        ipv4 unicast;\n        ipv6 unicast;\n" in render_config(p, ["bridge"])
    # [::]:179 listens for every IPv6 neighbor: none has its own listener (they would clash)
    p = ExabgpParams(
        "10.0.0.1",
        65001,
        (
            ExabgpNeighbor("fe80::1", "fe80::2", None, 9, True, interface="swp1"),
            ExabgpNeighbor("2001:db8::1", "2001:db8::2", 1),
            ExabgpNeighbor("10.1.1.1", "10.1.1.2", 1),
        ),
        listen_any6=True,
    )
    text = render_config(p, ["bridge"])
    assert text.count("listen 179;") == 1 and "passive true;" in text
