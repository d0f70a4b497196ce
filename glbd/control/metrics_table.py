"""The vocabulary of glbd's metric tables and the one function that walks them.

glbd's metrics are declared as tables (:mod:`glbd.control.metrics_parts` for the parts,
:mod:`glbd.control.metrics_daemon` for the daemon's own): each family is an entry that names it,
its type, its help text, its labels and where in a snapshot its value comes from, and
:func:`walk` turns a table and a snapshot into :class:`~glbd.control.metrics.Sample` rows. Kept
apart from the tables so that the tables read as data, and from :mod:`glbd.control.views` (what
``glbctl`` shows), which has no metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from glbd.control.metrics import Sample

# ---- the table's entries and the walk over them -----------------------------------------------

#: reads one thing from a snapshot or one of its rows: a value, a label, rows, a condition
Get = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class One:
    """A family's sample for each row it is walked over: ``value(row)``, labelled by the
    enclosing :class:`Rows` and by ``labels`` (name -> its value read from the row); none
    where ``when(row)`` is false."""

    name: str
    kind: str  # gauge | counter
    help: str
    value: Get
    labels: Mapping[str, Get] = field(default_factory=dict)
    when: Get | None = None


@dataclass(frozen=True, slots=True)
class Each:
    """A family's sample for each ``(key, n)`` that ``items(row)`` lists: value ``n``, labelled
    by the enclosing :class:`Rows` and ``label=str(key)`` (a reason, a kind, ...)."""

    name: str
    kind: str  # gauge | counter
    help: str
    items: Get
    label: str = "reason"


@dataclass(frozen=True, slots=True)
class Rows:
    """``families`` walked over each row ``rows(parent)`` lists, in turn, with the labels
    ``labels`` reads from that row added to the enclosing ones."""

    rows: Get
    families: tuple[Entry, ...]
    labels: Mapping[str, Get] = field(default_factory=dict)


Entry = One | Each | Rows


def walk(table: Iterable[Entry], row: Any) -> Iterator[Sample]:
    """The samples ``table`` declares over ``row`` (a snapshot, or a row of one), in table
    order and row by row. Built whole before the first is handed out: a scrape takes them all,
    and one list costs far less than a generator for each row of a big fabric's tables."""
    out: list[Sample] = []
    _emit(table, row, {}, out)
    yield from out


def _emit(table: Iterable[Entry], row: Any, outer: dict[str, Any], out: list[Sample]) -> None:
    """:func:`walk`'s work: ``table``'s samples over ``row`` appended to ``out``, each labelled
    by ``outer`` (the labels of the rows it is in) and its own (never changed once made, so an
    entry with no labels of its own shares ``outer``)."""
    for e in table:
        if isinstance(e, One):
            if e.when is None or e.when(row):
                out.append(Sample(e.name, e.value(row), _add(outer, e.labels, row), e.help, e.kind))
        elif isinstance(e, Rows):
            for r in e.rows(row):
                _emit(e.families, r, _add(outer, e.labels, r), out)
        else:
            out.extend(
                Sample(e.name, float(n), {**outer, e.label: str(key)}, e.help, e.kind)
                for key, n in e.items(row)
            )


def _add(outer: dict[str, Any], labels: Mapping[str, Get], row: Any) -> dict[str, Any]:
    """``outer`` and the ``labels`` read from ``row`` (``outer`` itself where there are none)."""
    if not labels:
        return outer
    out = dict(outer)
    for name, get in labels.items():
        out[name] = get(row)
    return out


# ---- where values, labels and rows come from --------------------------------------------------


def _dig(key: str) -> tuple[list[str], str]:
    """A dotted ``key`` (``counters.established``): the sections on the way, and the last key."""
    *path, last = key.split(".")
    return path, last


def _section(row: Any, path: list[str]) -> Any:
    """The section ``path`` names in ``row``; a missing or empty one on the way reads as empty."""
    for k in path:
        row = row.get(k) or {}
    return row


def num(key: str, per: float = 1, *, null: bool = False) -> Get:
    """``row[key]`` as a number in ``per`` units (1e3: ms to s), 0 where the key is missing
    (``null``: or None); a dotted key names a value in a section of the row."""
    path, last = _dig(key)
    if path:
        inner = num(last, per, null=null)
        return lambda row: inner(_section(row, path))
    if null:
        return lambda row: float(row.get(last) or 0) / per
    return lambda row: float(row.get(last, 0)) / per


def flag(key: str) -> Get:
    """1 where ``row[key]`` is set (true, non-empty), else 0; a dotted key as for :func:`num`."""
    path, last = _dig(key)
    return lambda row: 1.0 if _section(row, path).get(last) else 0.0


def equals(key: str, want: str) -> Get:
    """1 where ``row[key]`` is ``want``, else 0."""
    return lambda row: 1.0 if row.get(key) == want else 0.0


def text(key: str) -> Get:
    """``row[key]`` as a label value."""
    return lambda row: str(row.get(key))


def is_set(key: str) -> Get:
    """``row`` has ``key``, and not None."""
    return lambda row: row.get(key) is not None


def items(key: str) -> Get:
    """The ``(key, n)`` of the mapping ``row[key]`` (none if it is missing or None)."""
    return lambda row: (row.get(key) or {}).items()


def prefixed(prefix: str) -> Get:
    """The ``(key, n)`` of ``row`` whose key starts with ``prefix``, the key without it."""
    return lambda row: ((k.removeprefix(prefix), n) for k, n in row.items() if k.startswith(prefix))


def by_reason(reasons: Iterable[Any]) -> Get:
    """``(reason, row[reason.counter])`` for each reason (0 where the counter is missing)."""
    return lambda row: ((str(r), row.get(r.counter, 0)) for r in reasons)


def rows(key: str, *, null: bool = False) -> Get:
    """The list ``row[key]`` as rows, none where the key is missing (``null``: or None)."""
    return (lambda row: row.get(key) or []) if null else (lambda row: row.get(key, []))


def part(key: str, *, null: bool = False) -> Get:
    """The section ``row[key]`` as the one row, empty where the key is missing (``null``: or
    None)."""
    return (lambda row: [row.get(key) or {}]) if null else (lambda row: [row.get(key, {})])


def present(key: str, *, empty: bool = False) -> Get:
    """The section ``row[key]`` as the one row where it is set and not empty (``empty``: where
    it is set, empty or not), else no row."""
    if empty:
        return lambda row: [] if row.get(key) is None else [row[key]]
    return lambda row: [row[key]] if row.get(key) else []


def where(test: Get) -> Get:
    """``row`` itself as the one row where ``test(row)``, else no row."""
    return lambda row: [row] if test(row) else []
