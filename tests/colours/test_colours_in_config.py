"""The ``[colours]`` section and ``neighbors.colour`` in glbd.toml: a session's colour by its
precedence (neighbor, address, interface, glob, default), names usable in both places, errors
with their key, the RIB's parameters, and what a reload does with each."""

from __future__ import annotations

import ipaddress
import tomllib

import pytest

from glbd.colours.colours import Origination
from glbd.config import config as cfgmod
from glbd.config import params

A = ipaddress.ip_address
N = ipaddress.ip_network

BASE = """
router_id = "198.18.255.1"
local_as = 65001
role = "load-balancer"
originate = ["10.100.0.0/24", "10.200.0.0/24"]

[[neighbors]]
address = "198.18.1.0"
remote_as = 65100
interface = "swp1"
{n1}

[[neighbors]]
address = "198.18.2.0"
remote_as = 65200
interface = "swp2"

[[neighbors]]
address = "198.18.3.0"
remote_as = 65300
interface = "swp3"

[[neighbors]]                     # a template: one unnumbered neighbor per port
interfaces = "swp5-6"
remote_as = "external"
{template}

[colours]
names = {{ green = 1, blue = 2, red = 3, yellow = 4 }}
{colours}
"""

SESSIONS = """
default = "yellow"

[[colours.session]]
neighbor = "198.18.2.0"
colour = "blue"

[[colours.session]]
interface = "swp3"
colour = 3

[[colours.session]]
interface = "swp[3-9]"
colour = "green"

[[colours.originate]]
prefix = "10.100.0.0/24"
colour = "green"
backup_colours = ["blue", "red"]
"""


def load(n1: str = "", template: str = "", colours: str = SESSIONS) -> cfgmod.Config:
    text = BASE.format(n1=n1, template=template, colours=colours)
    return cfgmod.parse(tomllib.loads(text))


def problems(**kw: str) -> list[tuple[str, str]]:
    with pytest.raises(cfgmod.ConfigError) as e:
        load(**kw)
    return [(p.key, p.reason) for p in e.value.problems]


def colour_of(cfg: cfgmod.Config, address: str) -> int | None:
    n = next(x for x in cfg.neighbors if x.address == A(address))
    return cfg.neighbor_colour(n)


def test_a_sessions_colour_by_precedence() -> None:
    cfg = load(n1='colour = "red"')
    assert colour_of(cfg, "198.18.1.0") == 3  # its own colour
    assert colour_of(cfg, "198.18.2.0") == 2  # the entry naming its address
    assert colour_of(cfg, "198.18.3.0") == 3  # its interface exactly, before the glob
    assert [cfg.neighbor_colour(u) for u in cfg.unnumbered] == [1, 1]  # swp5, swp6: the glob
    cfg = load(template="colour = 2")  # a template's own colour: every port's
    assert [cfg.neighbor_colour(u) for u in cfg.unnumbered] == [2, 2]
    assert colour_of(cfg, "198.18.1.0") == 4  # nothing names it: the default
    cfg = load(colours="")
    assert {colour_of(cfg, f"198.18.{i}.0") for i in (1, 2, 3)} == {None}  # uncoloured


def test_the_rib_gets_each_sessions_colour_and_the_coloured_origination() -> None:
    cfg = load(n1="colour = 4")
    local = {n.address: A(str(n.address).replace(".0", ".1", 1)) for n in cfg.neighbors}
    p = params.rib_params(cfg, local)
    assert {str(n.address): n.colour for n in p.neighbors} == {
        "198.18.1.0": 4,
        "198.18.2.0": 2,
        "198.18.3.0": 3,
    }
    assert p.origin_colours == ((N("10.100.0.0/24"), Origination(1, (2, 3))),)


@pytest.mark.parametrize(
    ("kw", "key", "reason"),
    [
        ({"n1": 'colour = "purple"'}, "neighbors.0.colour", "unknown colour name 'purple'"),
        ({"n1": "colour = 0"}, "neighbors.0.colour", "a colour is an integer 1..4294967295"),
        (
            {"colours": '[[colours.session]]\nneighbor = "198.18.1.0"\ncolour = 1'},
            "(top level)",
            "neighbor 198.18.1.0 is coloured twice (its colour and colours.session.0)",
        ),
        (
            {
                "colours": '[[colours.originate]]\nprefix = "10.100.0.0/24"\ncolour = "green"\n'
                'backup_colours = ["green"]'
            },
            "colours.originate.0",
            "colour 1 is also one of its backup colours",
        ),
        ({"colours": 'default = "grey"'}, "colours.default", "unknown colour name 'grey'"),
    ],
)
def test_errors_name_their_key(kw: dict[str, str], key: str, reason: str) -> None:
    if key == "(top level)":
        kw = {"n1": "colour = 2", **kw}
    got = problems(**kw)
    assert any(k == key and reason in r for k, r in got), got


def test_colours_are_live_and_a_colours_change_goes_to_the_bgp_part() -> None:
    old = load()
    ch = cfgmod.diff(old, load(n1='colour = "blue"'))
    assert ch["keys"] == ["neighbors"] and ch["restart_required"] == []
    assert ch["neighbors_changed"] == ["198.18.1.0"]
    for colours, key in (
        (SESSIONS.replace('"yellow"', '"red"'), "colours.default"),
        (SESSIONS.replace('"red"]', "]"), "colours.originate"),
    ):
        ch = cfgmod.diff(old, load(colours=colours))
        assert ch["keys"] == [key] and ch["restart_required"] == []
        # the node hands the RIB new parameters when [colours] changed
        assert ch["sections"] == ["colours"]
    assert {k for k in cfgmod.RELOAD if k.startswith("colours.")} == {
        "colours.names",
        "colours.default",
        "colours.session",
        "colours.originate",
        "colours.hold_down_s",
    }
