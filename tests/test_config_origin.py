"""``[[bgp.network]]`` and ``[bgp.redistribute_connected]``: what the file accepts, what it
refuses (with the key), the origination parameters made of it, and a reload applies them live."""

from __future__ import annotations

import ipaddress
import tomllib
from pathlib import Path
from typing import Any

import pytest

from glbd.bgp import prefixlist
from glbd.config import config, params

ROOT = Path(__file__).resolve().parent.parent
N = ipaddress.ip_network

TAIL = """
[[bgp.network]]
prefix = "198.19.9.0/24"
interface = "host0"

[bgp.redistribute_connected]
interfaces = ["host*", "swp9"]
prefix_list = ["permit 198.19.0.0/16 le 24"]
"""


def _leaf(tail: str = TAIL) -> dict[str, Any]:
    return tomllib.loads((ROOT / "conf" / "leaf.toml").read_text() + tail)


def _problems(data: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(config.ConfigError) as ei:
        config.parse(data, "t.toml")
    return [(p.key, p.reason) for p in ei.value.problems]


def test_the_tables_parse_into_origin_params() -> None:
    c = config.parse(_leaf())
    assert [(str(e.prefix), e.interface) for e in c.bgp.network] == [("198.19.9.0/24", "host0")]
    rc = c.bgp.redistribute_connected
    assert rc is not None and rc.interfaces == ["host*", "swp9"]
    p = params.origin_params(c)
    assert p.static == tuple(c.originate)
    assert p.networks == ((N("198.19.9.0/24"), "host0"),)
    assert p.connected == ("host*", "swp9")
    assert p.connected_filter == prefixlist.parse(["permit 198.19.0.0/16 le 24"])
    assert p.conditional and p.redistributes("host12") and not p.redistributes("swp1")
    # without the tables: the static list alone, nothing to watch
    plain = params.origin_params(config.parse(_leaf("")))
    assert not plain.conditional and plain.connected_filter is None


@pytest.mark.parametrize(
    ("tail", "key", "why"),
    [
        ('[[bgp.network]]\nprefix = "198.19.9.1/24"\ninterface = "host0"\n',
         "bgp.network.0.prefix", "host bits"),
        ('[[bgp.network]]\nprefix = "198.19.9.0/24"\ninterface = "a b"\n',
         "bgp.network.0.interface", "not a Linux interface name"),
        ('[[bgp.network]]\nprefix = "198.19.9.0/24"\n', "bgp.network.0.interface", "required"),
        ("[bgp.redistribute_connected]\ninterfaces = []\n",
         "bgp.redistribute_connected.interfaces", "at least one"),
        ('[bgp.redistribute_connected]\ninterfaces = ["x/y"]\n',
         "bgp.redistribute_connected.interfaces", "not a Linux interface name"),
        ('[bgp.redistribute_connected]\ninterfaces = ["h*"]\nprefix_list = ["allow 10.0.0.0/8"]\n',
         "bgp.redistribute_connected.prefix_list", "allow"),
        ('[bgp.redistribute_connected]\nprefix_list = []\n',
         "bgp.redistribute_connected.interfaces", "required"),
    ],
)  # fmt: skip
def test_bad_entries_are_named(tail: str, key: str, why: str) -> None:
    probs = _problems(_leaf(tail))
    assert any(k == key and why in r for k, r in probs), probs


def test_a_prefix_is_originated_once() -> None:
    d = _leaf()
    d["bgp"]["network"].append({"prefix": d["originate"][0], "interface": "host1"})
    d["bgp"]["network"].append({"prefix": "198.19.9.0/24", "interface": "host2"})
    probs = _problems(d)
    first = d["originate"][0]
    assert ("bgp.network.1.prefix", f"duplicate prefix {first} (also originate.0)") in probs
    assert ("bgp.network.2.prefix", "duplicate prefix 198.19.9.0/24 (also bgp.network.0)") in probs
    # reported with the same keys when the model says nothing else
    d["fib"] = {"bogus": 1}
    probs = _problems(d)
    assert ("fib.bogus", "unknown key") in probs
    assert any(k == "bgp.network.2.prefix" for k, _ in probs)


def test_both_keys_reload_live() -> None:
    old = config.parse(_leaf(""))
    new = config.parse(_leaf())
    ch = config.diff(old, new)
    assert ch["keys"] == ["bgp.network", "bgp.redistribute_connected"]
    assert ch["sections"] == ["bgp"] and ch["restart_required"] == []
    for key in ch["keys"]:
        assert config.RELOAD[key] is config.Reload.LIVE
