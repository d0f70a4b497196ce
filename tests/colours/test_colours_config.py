"""The ``[colours]`` config section sketch (glbd.config.config_colours): names, the session colour
precedence (neighbour, interface, glob, global default), coloured origination and one-line
errors."""

from __future__ import annotations

import ipaddress
import tomllib
from typing import Any

import pytest
from pydantic import ValidationError

from glbd.colours.colours import Origination
from glbd.config.config_colours import ColoursSection, colour_value

A = ipaddress.ip_address
N = ipaddress.ip_network

EXAMPLE = """
names = { green = 1, blue = 2, red = 3, yellow = 4 }
default = "yellow"
hold_down_s = 45

[[session]]
neighbor = "10.1.1.0"
colour = "green"

[[session]]
interface = "swp2"
colour = "blue"

[[session]]
interface = "swp[1-4]"
colour = 3

[[originate]]
prefix = "2001:db8:1:1::/64"
colour = "green"
backup_colours = ["blue", "red", "yellow"]

[[originate]]
prefix = "2001:db8:1:2::/64"
colour = 2
"""


def section(text: str = EXAMPLE) -> ColoursSection:
    return ColoursSection.model_validate(tomllib.loads(text))


def errors(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(ValidationError) as e:
        ColoursSection.model_validate(raw)
    msgs = [str(err["msg"]).removeprefix("Value error, ") for err in e.value.errors()]
    assert all("\n" not in m for m in msgs)
    return msgs


def test_example() -> None:
    s = section()
    assert s.hold_down_s == 45
    assert s.default == 4
    assert s.originations() == {
        N("2001:db8:1:1::/64"): Origination(1, (2, 3, 4)),
        N("2001:db8:1:2::/64"): Origination(2),
    }
    assert s.name_of(1) == "green" and s.name_of(99) == "99"


@pytest.mark.parametrize(
    ("address", "ifname", "colour"),
    [
        ("10.1.1.0", "swp9", 1),  # neighbour level wins over everything
        ("10.1.1.0", "swp2", 1),
        ("10.1.2.0", "swp2", 2),  # the exact interface over the glob
        ("10.1.3.0", "swp3", 3),  # template level: the glob
        ("10.1.9.0", "swp9", 4),  # global default
        (None, "swp4", 3),  # an unnumbered session not learned yet: by interface
    ],
)
def test_session_colour_precedence(address: str | None, ifname: str, colour: int) -> None:
    addr = None if address is None else A(address)
    assert section().session_colour(addr, ifname) == colour


def test_defaults_are_uncoloured() -> None:
    s = ColoursSection()
    assert s.session_colour(A("10.0.0.1"), "swp1") is None
    assert s.originations() == {} and s.hold_down_s == 30.0


def test_first_matching_glob_wins() -> None:
    s = section(
        '[[session]]\ninterface = "swp*"\ncolour = 1\n'
        '[[session]]\ninterface = "swp[1-2]"\ncolour = 2\n'
    )
    assert s.session_colour(A("10.0.0.1"), "swp1") == 1


@pytest.mark.parametrize(
    ("raw", "expect"),
    [
        ({"default": 0}, "a colour is an integer 1..4294967295"),
        ({"default": 1 << 32}, "a colour is an integer 1..4294967295"),
        ({"default": True}, "a colour is an integer"),
        ({"default": "green"}, "unknown colour name 'green'"),
        ({"names": {"green": 0}}, "a colour is an integer"),
        ({"names": {"Green": 1}}, "colour name 'Green'"),
        ({"names": {"green": 1, "verde": 1}}, "'green' and 'verde' are both 1"),
        ({"session": [{"colour": 1}]}, "name either neighbor or interface"),
        ({"session": [{"neighbor": "10.0.0.1", "interface": "swp1", "colour": 1}]}, "either"),
        ({"session": [{"interface": "swp 1", "colour": 1}]}, "not an interface name"),
        ({"session": [{"neighbor": "10.0.0.300", "colour": 1}]}, "not a valid IPv4 or IPv6"),
        (
            {
                "session": [
                    {"neighbor": "10.0.0.1", "colour": 1},
                    {"neighbor": "10.0.0.1", "colour": 2},
                ]
            },
            "session.1: 10.0.0.1 is coloured twice (also session.0)",
        ),
        (
            {"originate": [{"prefix": "10.0.0.0/24", "colour": 1, "backup_colours": [1]}]},
            "also one of its backup colours",
        ),
        (
            {"originate": [{"prefix": "10.0.0.0/24", "colour": 1, "backup_colours": [2, 2]}]},
            "repeat a colour",
        ),
        (
            {
                "originate": [
                    {"prefix": "10.0.0.0/24", "colour": 1},
                    {"prefix": "10.0.0.0/24", "colour": 2},
                ]
            },
            "originate.1: 10.0.0.0/24 is coloured twice",
        ),
        ({"originate": [{"prefix": "10.0.0.1/24", "colour": 1}]}, "has host bits set"),
        ({"hold_down_s": -1}, "greater than or equal to 0"),
        ({"hold_down_s": 4000}, "less than or equal to 3600"),
        ({"colour": 1}, "Extra inputs are not permitted"),
    ],
)
def test_errors_are_one_line(raw: dict[str, Any], expect: str) -> None:
    msgs = errors(raw)
    assert any(expect in m for m in msgs), msgs


def test_colour_value() -> None:
    assert colour_value(1) == 1 and colour_value(4294967295) == 4294967295
    for bad in (0, -1, 1 << 32, 1.5, None, True):
        with pytest.raises(ValueError):
            colour_value(bad)


def test_frozen() -> None:
    s = section()
    with pytest.raises(ValidationError):
        s.hold_down_s = 1  # type: ignore[misc]
