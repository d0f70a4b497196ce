"""What a path-table input changed (pure data): :class:`Changes` and its merge.

Every :class:`glbd.quality.pathtable.PathTable` call returns one, the app merges a batch of them
with ``|`` and the FIB sync (:mod:`glbd.fib.fibsync`) consumes them; apart from the table so
that its consumers need only this small type.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Changes"]


@dataclass(frozen=True, slots=True)
class Changes:
    """What one or more inputs changed: profiles whose weights changed (incl. new ones),
    profiles that no longer exist, prefixes whose profile changed (incl. removed prefixes)."""

    updated: frozenset[str] = frozenset()
    removed: frozenset[str] = frozenset()
    prefixes: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.updated or self.removed or self.prefixes)

    def __or__(self, other: Changes) -> Changes:
        removed = self.removed | other.removed
        return Changes(
            (self.updated | other.updated) - other.removed,
            removed - other.updated,
            self.prefixes | other.prefixes,
        )
