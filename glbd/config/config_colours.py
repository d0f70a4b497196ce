"""The ``[colours]`` section (fabric colours, docs/colours.md) and the colour type that
``neighbors.colour`` uses too: names, per-session colours and coloured origination.

Separate because colours are a feature of their own (BGP-DPF): the neighbor models
(:mod:`glbd.config.config_peers`) take :data:`Colour` from here, and :mod:`glbd.config.config`
replaces ``colours.names`` names in ``neighbors.colour`` with :func:`_colour_names`.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import re
from typing import Annotated, Any, Self

from pydantic import BeforeValidator, Field, model_validator

from glbd.colours.colour import COLOUR_MAX
from glbd.colours.colours import Origination
from glbd.config.config_base import IPAddr, IPNet, _Model


def colour_value(v: Any) -> int:
    """A fabric colour as written, once names are replaced: an integer 1..2^32-1."""
    if isinstance(v, str):
        raise ValueError(f"unknown colour name {v!r} (define it in colours.names)")
    if type(v) is not int or not 1 <= v <= COLOUR_MAX:
        raise ValueError(f"a colour is an integer 1..{COLOUR_MAX} or a name, got {v!r}")
    return v


#: a fabric colour (docs/colours.md), by number or (before validation) by a ``colours.names`` name
Colour = Annotated[int, BeforeValidator(colour_value)]


_COLOUR_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
_GLOB = re.compile(r"[*?\[]")


class ColourSession(_Model):
    """The colour of the sessions an entry matches: one neighbour, or the sessions on the
    interfaces a name or glob matches (a template's ports)."""

    #: the neighbour's address (neighbour level)
    neighbor: IPAddr | None = None
    #: an interface name, or a glob of names such as ``swp[1-4]`` or ``swp*`` (template level)
    interface: str | None = None
    #: the sessions' fabric colour
    colour: Colour

    @model_validator(mode="after")
    def _one_match(self) -> Self:
        if (self.neighbor is None) == (self.interface is None):
            raise ValueError("name either neighbor or interface")
        if self.interface is not None and not re.fullmatch(r"[^\s/:]{1,15}", self.interface):
            raise ValueError(f"{self.interface!r} is not an interface name or a glob of names")
        return self

    def matches(
        self, address: ipaddress.IPv4Address | ipaddress.IPv6Address | None, ifname: str
    ) -> int:
        """How well it matches a session: 3 its address, 2 its interface, 1 by glob, 0 not."""
        if self.neighbor is not None:
            return 3 if address is not None and address == self.neighbor else 0
        assert self.interface is not None
        if not _GLOB.search(self.interface):
            return 2 if ifname == self.interface else 0
        return 1 if fnmatch.fnmatchcase(ifname, self.interface) else 0


class ColourOrigin(_Model):
    """A prefix this router originates with a colour (it must also be originated: ``originate``,
    ``[[bgp.network]]`` or a connected prefix; this only colours it)."""

    #: the prefix
    prefix: IPNet
    #: its colour: sent with it to the sessions of this colour and to the uncoloured ones
    colour: Colour
    #: backup colours: each session of one of them gets the route with that colour (a backup
    #: copy); in no order (the fallback spreads over all of them)
    backup_colours: tuple[Colour, ...] = ()

    @model_validator(mode="after")
    def _backups(self) -> Self:
        Origination(self.colour, self.backup_colours)  # ValueError says what is wrong
        return self

    def origination(self) -> Origination:
        return Origination(self.colour, self.backup_colours)


def _colour_names(raw: Any, names: Any) -> Any:
    """One colour as written, a ``names`` name replaced by its number (an undefined name stays
    and fails with its key)."""
    return names.get(raw, raw) if isinstance(raw, str) and isinstance(names, dict) else raw


def _replace_colour_names(raw: Any) -> Any:
    """Colour names -> numbers in the raw ``[colours]`` section."""
    if not isinstance(raw, dict) or not isinstance(raw.get("names", {}), dict):
        return raw
    names = raw.get("names", {})
    out = dict(raw)
    if "default" in out:
        out["default"] = _colour_names(out["default"], names)
    for key in ("session", "originate"):
        entries = out.get(key)
        if not isinstance(entries, list):
            continue
        fixed = []
        for e in entries:
            if isinstance(e, dict):
                e = dict(e)
                if "colour" in e:
                    e["colour"] = _colour_names(e["colour"], names)
                if isinstance(e.get("backup_colours"), list):
                    e["backup_colours"] = [_colour_names(b, names) for b in e["backup_colours"]]
            fixed.append(e)
        out[key] = fixed
    return out


class ColoursSection(_Model):
    """Fabric colours (BGP-DPF, docs/colours.md): each single-hop session may have a colour;
    coloured routes stay inside their colour's logical fabric (a route of another colour is
    kept but hidden), and coloured origination sends a primary copy and backup copies. A
    session's colour: its neighbor's ``colour``, else the ``session`` entry naming its address,
    else the one naming its interface exactly, else the first glob that matches, else
    ``default``, else uncoloured."""

    #: names for colours, e.g. ``{ green = 1 }``: usable wherever a colour is written (here and
    #: in ``neighbors.colour``); they must mean the same on every router
    names: dict[str, Colour] = {}
    #: the colour of every session nothing else colours (global level); none: uncoloured
    default: Colour | None = None
    #: per-neighbour (``neighbor``) and per-interface (``interface``, a name or a glob such as
    #: ``swp[1-4]``) colours, each with its ``colour``
    session: list[ColourSession] = []
    #: coloured origination (``prefix``, ``colour``, ``backup_colours``): the prefix goes with
    #: its colour to the sessions of that colour and the uncoloured ones, and with each backup
    #: colour to the sessions of that colour; a prefix not here goes everywhere uncoloured
    originate: list[ColourOrigin] = []
    #: how long a failed preferred path must stay good before its colour returns to it; a new
    #: failure restarts the wait (0: return at once). A reload applies it to the waits that
    #: start from then on
    hold_down_s: Annotated[float, Field(ge=0, le=3600)] = 30.0

    @model_validator(mode="before")
    @classmethod
    def _names_first(cls, raw: Any) -> Any:
        return _replace_colour_names(raw)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        seen: dict[int, str] = {}
        for name, colour in self.names.items():
            if not _COLOUR_NAME.match(name):
                raise ValueError(f"colour name {name!r}: lower case letters, digits, '-', '_'")
            if colour in seen:
                raise ValueError(f"colours {seen[colour]!r} and {name!r} are both {colour}")
            seen[colour] = name
        where: dict[str, int] = {}
        for i, s in enumerate(self.session):
            key = str(s.neighbor) if s.neighbor is not None else f"interface {s.interface}"
            if key in where:
                raise ValueError(
                    f"session.{i}: {key} is coloured twice (also session.{where[key]})"
                )
            where[key] = i
        nets: dict[str, int] = {}
        for i, o in enumerate(self.originate):
            key = str(o.prefix)
            if key in nets:
                raise ValueError(
                    f"originate.{i}: {key} is coloured twice (also originate.{nets[key]})"
                )
            nets[key] = i
        return self

    def session_colour(
        self, address: ipaddress.IPv4Address | ipaddress.IPv6Address | None, ifname: str
    ) -> int | None:
        """The colour the ``session`` entries and ``default`` give the session with this peer
        address (None: unnumbered, not learned yet) on this interface."""
        best, colour = 0, self.default
        for s in self.session:
            m = s.matches(address, ifname)
            if m > best:
                best, colour = m, s.colour
        return colour

    def originations(self) -> dict[ipaddress.IPv4Network | ipaddress.IPv6Network, Origination]:
        """Each coloured prefix's :class:`Origination` (a prefix not here is uncoloured)."""
        return {o.prefix: o.origination() for o in self.originate}

    def name_of(self, colour: int) -> str:
        """The colour's name, or its number as text."""
        for name, c in self.names.items():
            if c == colour:
                return name
        return str(colour)
