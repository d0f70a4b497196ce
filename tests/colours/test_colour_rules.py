"""The colour send/receive/origination rules (glbd.colours.colours, part 1), alone and on a small
fabric: 4 spines and 2 leaves, one colour per spine (green 1, blue 2, red 3, yellow 4), every
leaf-spine session coloured with its spine's colour (docs/colours.md, "Example")."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from glbd.colours.colour import ColourCommunity
from glbd.colours.colours import (
    Advert,
    HiddenReason,
    Origination,
    hidden,
    may_send,
    originate_to,
    route_colours,
)

GREEN, BLUE, RED, YELLOW = 1, 2, 3, 4
NONE: frozenset[int] = frozenset()


def cs(*c: int) -> frozenset[int]:
    return frozenset(c)


@pytest.mark.parametrize(
    ("route", "session", "sent"),
    [
        (NONE, None, True),  # uncoloured everywhere
        (NONE, GREEN, True),
        (cs(GREEN), GREEN, True),  # its own colour
        (cs(GREEN), None, True),  # coloured routes also go to uncoloured sessions
        (cs(GREEN), BLUE, False),  # never to another colour
        (cs(GREEN, BLUE), BLUE, True),  # several colours: each of them
        (cs(GREEN, BLUE), RED, False),
    ],
)
def test_may_send(route: frozenset[int], session: int | None, sent: bool) -> None:
    assert may_send(route, session) is sent


@pytest.mark.parametrize(
    ("route", "session", "why"),
    [
        (NONE, None, None),
        (NONE, GREEN, None),  # uncoloured: never hidden
        (cs(GREEN), None, None),  # an uncoloured session takes every colour
        (cs(GREEN), GREEN, None),
        (cs(GREEN), BLUE, HiddenReason.COLOUR_MISMATCH),  # kept, hidden, counted
        (cs(GREEN, BLUE), BLUE, None),
        (cs(GREEN, BLUE), RED, HiddenReason.COLOUR_MISMATCH),
    ],
)
def test_hidden(route: frozenset[int], session: int | None, why: HiddenReason | None) -> None:
    assert hidden(route, session) is why


def test_hidden_reason_names() -> None:
    assert HiddenReason.COLOUR_MISMATCH == "colour_mismatch"
    assert HiddenReason.COLOUR_MISMATCH.counter == "hidden_colour_mismatch"


def test_route_colours_ignore_flags_and_repeats() -> None:
    comms = [ColourCommunity(GREEN), ColourCommunity(GREEN, 0x4000), ColourCommunity(BLUE)]
    assert route_colours(comms) == cs(GREEN, BLUE)
    assert route_colours([]) == NONE


colour_sets = st.frozensets(st.integers(1, 6), max_size=3)
sessions = st.one_of(st.none(), st.integers(1, 6))


@given(colour_sets, sessions)
def test_what_is_sent_is_never_hidden_and_back(route: frozenset[int], session: int | None) -> None:
    """Sender and receiver agree: a route is sent on a session exactly when the receiver, whose
    end of that session has the same colour, would not hide it."""
    assert may_send(route, session) is (hidden(route, session) is None)


def test_originate_with_backups() -> None:
    o = Origination(GREEN, (BLUE, RED, YELLOW))
    assert originate_to(o, GREEN) == Advert(GREEN)
    assert originate_to(o, BLUE) == Advert(BLUE, backup=True)
    assert originate_to(o, YELLOW) == Advert(YELLOW, backup=True)
    assert originate_to(o, None) == Advert(GREEN)  # the primary copy to uncoloured sessions
    assert originate_to(o, 9) is None  # a colour that is neither
    assert originate_to(Origination(GREEN), BLUE) is None  # no backup colour: not sent


def test_originate_uncoloured() -> None:
    for s in (None, GREEN, 9):
        assert originate_to(Origination(), s) == Advert(None)


@pytest.mark.parametrize(
    ("colour", "backups", "msg"),
    [
        (None, (BLUE,), "backup colours need a colour"),
        (0, (), "is not a colour"),
        (1 << 32, (), "is not a colour"),
        (True, (), "is not a colour"),
        (GREEN, (0,), "is not a colour"),
        (GREEN, (GREEN,), "also one of its backup"),
        (GREEN, (BLUE, BLUE), "repeat a colour"),
    ],
)
def test_origination_errors(colour: int | None, backups: tuple[int, ...], msg: str) -> None:
    with pytest.raises(ValueError, match=msg) as e:
        Origination(colour, backups)
    assert "\n" not in str(e.value)


@given(
    st.one_of(st.none(), st.integers(1, 6)),
    st.lists(st.integers(1, 6), max_size=3, unique=True),
    sessions,
)
def test_an_originated_copy_is_never_hidden(
    colour: int | None, backups: list[int], session: int | None
) -> None:
    if colour is None:
        backups = []
    backups = [b for b in backups if b != colour]
    adv = originate_to(Origination(colour, tuple(backups)), session)
    if adv is not None:
        route = NONE if adv.colour is None else cs(adv.colour)
        assert hidden(route, session) is None
        assert may_send(route, session)


# -- the example fabric -----------------------------------------------------------------------

SPINES = {"spine1": GREEN, "spine2": BLUE, "spine3": RED, "spine4": YELLOW}
PREFIX = {GREEN: "p-green", BLUE: "p-blue", RED: "p-red", YELLOW: "p-yellow"}


def test_example_fabric_end_to_end() -> None:
    """leaf1 originates one prefix per colour, the other three colours as backups. Each spine
    gets every prefix (one primary, three backup copies across the spines), passes each on with
    its colour unchanged, and leaf2 sees each prefix from every spine, visible, with exactly one
    primary copy: via the spine of the prefix's colour, which is the path it prefers."""
    origins = {
        PREFIX[c]: Origination(c, tuple(b for b in SPINES.values() if b != c)) for c in PREFIX
    }
    # leaf1 -> each spine (the session has the spine's colour)
    at_spine: dict[str, dict[str, tuple[frozenset[int], bool]]] = {}
    for spine, sc in SPINES.items():
        got = {}
        for prefix, o in origins.items():
            adv = originate_to(o, sc)
            assert adv is not None
            route = NONE if adv.colour is None else cs(adv.colour)
            assert hidden(route, sc) is None
            got[prefix] = (route, adv.backup)
        at_spine[spine] = got
    # each spine -> leaf2 over a session of the spine's colour; leaf2 receives on the same colour
    at_leaf2: dict[str, dict[str, tuple[frozenset[int], bool]]] = {p: {} for p in PREFIX.values()}
    for spine, sc in SPINES.items():
        for prefix, (route, backup) in at_spine[spine].items():
            assert may_send(route, sc)
            assert hidden(route, sc) is None
            at_leaf2[prefix][spine] = (route, backup)
    for c, prefix in PREFIX.items():
        copies = at_leaf2[prefix]
        assert set(copies) == set(SPINES)  # every spine carries it
        primary = [s for s, (_, backup) in copies.items() if not backup]
        assert primary == [next(s for s, sc in SPINES.items() if sc == c)]
        assert all(route == cs(SPINES[s]) for s, (route, _) in copies.items())


def test_a_mis_coloured_session_hides_and_does_not_send() -> None:
    """spine2's session to leaf2 mistakenly green: the blue copies are not sent on it, and a blue
    copy that does arrive on a green session (a peer not applying the rule) is hidden."""
    route = cs(BLUE)
    assert not may_send(route, GREEN)
    assert hidden(route, GREEN) is HiddenReason.COLOUR_MISMATCH
