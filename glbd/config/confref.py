"""The configuration reference: every key of glbd.toml with its type and range, default, what a
reload does with it, and its description, made from the model so it cannot drift.

A key's description is the ``#:`` comment above its field in :mod:`glbd.config.config` or a section
module of it (``glbd.config.config_*``), a table's is its model's docstring; what a reload does is
:data:`glbd.config.config.RELOAD`. :func:`markdown` is docs/config-reference.md (``python -m
glbd.config.confref -o docs/config-reference.md`` writes it) and :mod:`glbd.cli.manpages` makes
glbd.toml(5) from :func:`sections`; tests/test_confref.py fails when the file is stale or a key
has no description.
"""

from __future__ import annotations

import argparse
import ast
import functools
import inspect
import ipaddress
import json
import re
import sys
import textwrap
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from glbd.config import config as cfgmod


@dataclass(frozen=True)
class Row:
    """One key of the reference."""

    #: dotted, as written in TOML: ``bfd.min_tx_ms``, ``neighbors.import``, ``bfd.auth.type``
    key: str
    #: the value's type with its range: ``int (3..60000)``, ``"off" | "helper" | "full"``
    type: str
    #: ``required``, ``none`` (not set unless given), ``-`` (a table) or the value as TOML
    default: str
    reload: cfgmod.Reload
    #: one paragraph, markdown's inline code (backquotes) only
    doc: str


@dataclass(frozen=True)
class Section:
    """The keys of one TOML table (``[bfd]``), of the neighbors (``[[neighbors]]``) or of the
    top level."""

    name: str
    title: str
    doc: str
    rows: tuple[Row, ...]


#: written by ``[[neighbors]]`` entries but not a model field: the file's reader expands it
_TEMPLATE = Row(
    key="neighbors.interfaces",
    type="string | list[string]",
    default="none",
    reload=cfgmod.Reload.LIVE,
    doc="a template, instead of `interface` and without `address`: one unnumbered neighbor per "
    'port, each with this entry\'s other keys; names and ascending ranges such as `"swp1-64"`',
)
#: list-of-table keys whose entries are not written as such (``[[neighbors]]`` without an
#: address lands in ``unnumbered``): one row, no rows for their keys
_NO_CHILDREN = {"unnumbered"}

_NAMES: dict[Any, str] = {
    bool: "bool",
    int: "int",
    float: "float",
    str: "string",
    Path: "path",
    ipaddress.IPv4Address: "IPv4 address",
    ipaddress.IPv6Address: "IPv6 address",
    ipaddress.IPv4Network: "IPv4 prefix",
    ipaddress.IPv6Network: "IPv6 prefix",
}


def _is_config_module(name: str) -> bool:
    """:mod:`glbd.config.config` or one of its section modules (``glbd.config.config_bfd``, ...):
    where the models with ``#:`` descriptions live, not pydantic's own bases."""
    return name == cfgmod.__name__ or name.startswith(cfgmod.__name__ + "_")


@functools.cache
def field_docs(model: type[BaseModel]) -> dict[str, str]:
    """Field name -> the ``#:`` comment lines right above it (in ``model`` or a base), joined."""
    out: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if not issubclass(cls, BaseModel) or not _is_config_module(cls.__module__):
            continue
        src = textwrap.dedent(inspect.getsource(cls))
        lines = src.splitlines()
        body = ast.parse(src).body[0]
        assert isinstance(body, ast.ClassDef)
        for node in body.body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                doc: list[str] = []
                i = node.lineno - 2  # the line above the field (linenos count from 1)
                while i >= 0 and lines[i].strip().startswith("#:"):
                    doc.insert(0, lines[i].strip()[2:].strip())
                    i -= 1
                out[node.target.id] = " ".join(doc).replace("``", "`")
    return out


def _model_doc(model: type[BaseModel]) -> str:
    doc = model.__doc__ or ""
    return " ".join(inspect.cleandoc(doc).split()).replace("``", "`")


def _number(v: Any) -> str:
    return str(int(v)) if float(v).is_integer() else str(v)


def _bounds(metadata: Sequence[Any]) -> str:
    """``(3..60000)``, ``(>0..3600)``, ``(>=0)`` from a field's constraints, or ``""``."""
    lo = hi = ""
    for m in metadata:
        items = m.metadata if isinstance(m, FieldInfo) else [m]
        for c in items:
            if isinstance(c, annotated_types.Ge):
                lo = _number(c.ge)
            elif isinstance(c, annotated_types.Gt):
                lo = ">" + _number(c.gt)
            elif isinstance(c, annotated_types.Le):
                hi = _number(c.le)
            elif isinstance(c, annotated_types.Lt):
                hi = "<" + _number(c.lt)
    if lo and hi:
        return f"({lo}..{hi})"
    if lo:
        return f"(>={lo})" if lo[0] != ">" else f"({lo})"
    if hi:
        return f"(<={hi})" if hi[0] != "<" else f"({hi})"
    return ""


def table_model(t: Any) -> type[BaseModel] | None:
    """The model of a table key (a section, an optional table or an array of tables)."""
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin is Annotated:
        return table_model(args[0])
    if origin in (typing.Union, types.UnionType, list, tuple):
        found = [m for a in args if (m := table_model(a)) is not None]
        return found[0] if found else None
    if isinstance(t, type) and issubclass(t, BaseModel):
        return t
    return None


def type_name(t: Any, metadata: Sequence[Any] = ()) -> str:
    """A type as the reference writes it; ``none`` is left out (the default says so)."""
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin is Annotated:
        return type_name(args[0], [*metadata, *args[1:]])
    bounds = _bounds(metadata)
    if origin is Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        names = [type_name(a) for a in args if a is not type(None)]
        return " | ".join(n for n in names if n)
    if origin in (list, tuple):
        inner = args[0]
        if table_model(inner) is not None:
            return "array of tables"
        return f"list[{type_name(inner)}]"
    if origin is dict:
        return f"table of {type_name(args[1])}"
    if isinstance(t, type) and issubclass(t, BaseModel):
        return "table"
    name = _NAMES.get(t, getattr(t, "__name__", str(t)))
    return f"{name} {bounds}" if bounds else name


def _default(f: FieldInfo) -> str:
    if f.is_required():
        return "required"
    v = f.get_default(call_default_factory=True)
    if v is None:
        return "none"
    if isinstance(v, BaseModel):
        return "-"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float | list | tuple | dict):
        return json.dumps(v)
    return json.dumps(str(v))


def reload_of(key: str) -> cfgmod.Reload:
    """What a reload does with ``key``: the entry of its longest prefix in ``RELOAD``."""
    parts = key.split(".")
    for n in range(len(parts), 0, -1):
        how = cfgmod.RELOAD.get(".".join(parts[:n]))
        if how is not None:
            return how
    return cfgmod.Reload.RESTART


def _ordered(model: type[BaseModel]) -> list[tuple[str, FieldInfo]]:
    """The required fields first (a subclass's own before its bases'), then the others."""
    own = [n for n in model.model_fields if n in vars(model).get("__annotations__", {})]
    names = own + [n for n in model.model_fields if n not in own]
    fields = model.model_fields
    return [(n, fields[n]) for n in names if fields[n].is_required()] + [
        (n, f) for n, f in fields.items() if not f.is_required()
    ]


def _row(key: str, f: FieldInfo, doc: str) -> Row:
    return Row(key, type_name(f.annotation, f.metadata), _default(f), reload_of(key), doc)


def _rows(model: type[BaseModel], prefix: str) -> list[Row]:
    docs = field_docs(model)
    out: list[Row] = []
    for name, f in _ordered(model):
        if f.exclude:  # a secret read from its file, never written
            continue
        key = prefix + (f.alias or name)
        out.append(_row(key, f, docs[name]))
        if key == "neighbors.interface":
            out.append(_TEMPLATE)
        inner = table_model(f.annotation)
        if inner is not None and key not in _NO_CHILDREN:
            out += _rows(inner, key + ".")
    return out


@functools.cache
def sections() -> tuple[Section, ...]:
    """The reference: the top-level keys, ``[[neighbors]]``, then each section in model order."""
    top: list[Row] = []
    out: list[Section] = []
    docs = field_docs(cfgmod.Config)
    for name, f in cfgmod.Config.model_fields.items():
        inner = table_model(f.annotation)
        row = _row(name, f, docs[name])
        if inner is None or name in _NO_CHILDREN:
            top.append(row)
        elif typing.get_origin(f.annotation) is list:  # an array of tables: its own row first
            rows = (row, *_rows(inner, f"{name}."))
            out.append(Section(name, f"[[{name}]]", _model_doc(inner), rows))
        else:
            out.append(
                Section(name, f"[{name}]", _model_doc(inner), tuple(_rows(inner, f"{name}.")))
            )
    return (Section("", "Top level", "", tuple(top)), *out)


def rows() -> list[Row]:
    """Every key of the reference, in its order."""
    return [r for s in sections() for r in s.rows]


INTRO = """\
glbd reads one TOML file, `/etc/glbd/glbd.toml` (root:glbd 0640: only root writes it, glbd reads
it). `glbd check-config FILE` validates a file: exit 0, or every problem as
`FILE: key.path: reason` and exit 1; unknown keys are errors. `systemctl start glbd` runs the
same check first. Worked examples: section 5 of the
[operator guide](operator-guide.md#5-configuration), and `leaf.toml` and `spine.toml` in
`/usr/share/doc/glbd/examples/` (`conf/` in the source).

Sections are TOML tables (`[bfd]`, `[bgp]`, ...); each BGP neighbor is one `[[neighbors]]`
entry, with its own `[neighbors.bfd]` table. Secrets are never written in the file: a key names
the file that holds them (`secret_file`, `password_file`), which must be owned by root or
glbd's user and not readable by others; it is read at start and on every reload and never shown
in a log or `glbctl config`.

Columns: *type*, with the accepted range in parentheses; *default*, where `required` must be
given (within its table), `none` means not set unless given, and `-` marks a table; *on reload*:
`live` is applied by `systemctl reload glbd` (`glbctl reload`, SIGHUP), `restart` is read only
at start, so a reload that changes it is refused as a whole (glbctl exits 3) and nothing is
applied (operator guide, [9.1](operator-guide.md#91-what-a-reload-applies)). A key under
`neighbors` applies to that neighbor only: the others' sessions stay up."""

HEADER = (
    "<!-- generated by `python -m glbd.config.confref -o docs/config-reference.md`: do not edit -->"
)


def _md_cell(text: str) -> str:
    text = text.replace("|", "\\|")
    # a docs/ page named in a description -> a link that works beside it, here and installed
    return re.sub(r"\bdocs/([a-z0-9-]+\.md)", r"[\1](\1)", text)


def markdown() -> str:
    """docs/config-reference.md."""
    out = [HEADER, "", "# glbd.toml: configuration reference", "", INTRO, ""]
    for s in sections():
        title = s.title if s.title == "Top level" else f"`{s.title}`"
        out += [f"## {title}", ""]
        if s.doc:
            out += [_md_cell(s.doc), ""]
        out += ["| key | type | default | on reload | meaning |", "| --- | --- | --- | --- | --- |"]
        out += [
            f"| `{r.key}` | {_md_cell(r.type)} | `{_md_cell(r.default)}` | {r.reload} "
            f"| {_md_cell(r.doc)} |"
            for r in s.rows
        ]
        out.append("")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m glbd.config.confref", description="Write the configuration reference."
    )
    p.add_argument("-o", "--output", help="write it here (default: standard output)")
    args = p.parse_args(argv)
    text = markdown()
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
