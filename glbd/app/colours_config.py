"""The ``[colours]`` section's models (docs/colours.md), which live in :mod:`glbd.app.config`
with the other sections; this name stays for the code and tests written against the sketch."""

from __future__ import annotations

from glbd.app.config import (
    Colour,
    ColourOrigin,
    ColourSession,
    ColoursSection,
    colour_value,
)

__all__ = ["Colour", "ColourOrigin", "ColourSession", "ColoursSection", "colour_value"]
