"""docs/config-reference.md is the configuration model's: every key the file can hold is in it
with a description, its type, default and reload behaviour are the code's, and the file is what
``python -m glbd.config.confref`` writes. README.md points to it instead of keeping a copy."""

from __future__ import annotations

import re
import tomllib
import typing
from pathlib import Path

from pydantic import BaseModel

from glbd.config import config as cfgmod
from glbd.config import confref
from glbd.config.config_bfd import BfdSection

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "config-reference.md"
GUIDE = ROOT / "docs" / "operator-guide.md"


def _model_keys(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Every key a file can hold, walked here independently of confref: the TOML spelling,
    through optional tables and arrays of tables; the secrets read from files are not keys."""
    out: set[str] = set()
    for name, f in model.model_fields.items():
        if f.exclude:
            continue
        key = prefix + (f.alias or name)
        out.add(key)
        todo, seen = [f.annotation], []
        while todo:
            t = todo.pop()
            seen.append(t)
            todo += [a for a in typing.get_args(t) if a not in seen]
            if isinstance(t, type) and issubclass(t, BaseModel) and key != "unnumbered":
                out |= _model_keys(t, key + ".")
    return out


def test_the_reference_file_is_the_models() -> None:
    assert REFERENCE.read_text() == confref.markdown(), (
        "docs/config-reference.md is stale: run "
        ".venv/bin/python -m glbd.config.confref -o docs/config-reference.md"
    )


def test_every_key_is_in_the_reference_with_a_description() -> None:
    rows = confref.rows()
    keys = [r.key for r in rows]
    assert len(keys) == len(set(keys))
    top = {n for n, f in cfgmod.Config.model_fields.items() if confref.table_model(f.annotation)}
    want = _model_keys(cfgmod.Config) - (top - {"neighbors", "unnumbered"})
    assert sorted(want - set(keys)) == []
    assert sorted(set(keys) - want) == ["neighbors.interfaces"]  # the template, read by hand
    assert set(cfgmod.config_keys()) <= set(keys)
    assert [r.key for r in rows if not r.doc.strip()] == []
    # the reference names each key the way a TOML file spells it
    assert "neighbors.import" in keys and "neighbors.import_" not in keys
    assert "neighbors.password" not in keys and "bfd.auth.secret" not in keys
    text = REFERENCE.read_text()
    for key in keys:
        assert f"| `{key}` |" in text, key


def test_types_defaults_and_reload_are_the_codes() -> None:
    by_key = {r.key: r for r in confref.rows()}
    for key in cfgmod.config_keys():
        assert by_key[key].reload is cfgmod.RELOAD.get(key, cfgmod.Reload.RESTART), key
    # a key under a table reloads as the table does
    assert by_key["neighbors.bfd.auth.type"].reload is cfgmod.Reload.LIVE
    assert by_key["bfd.rt_priority"].reload is cfgmod.Reload.RESTART
    r = by_key["bfd.min_tx_ms"]
    assert (r.type, r.default) == ("int (3..60000)", "50")
    assert BfdSection().min_tx_ms == 50
    assert (by_key["metrics.listen"].type, by_key["metrics.listen"].default) == ("string", "none")
    assert by_key["router_id"].default == "required"
    assert by_key["bgp.graceful_restart"].type == '"off" | "helper" | "full"'
    assert by_key["bgp.stale_path_time_s"].type == "float (>0..3600)"
    assert by_key["heartbeat.group"].default == '"224.0.0.149"'
    assert by_key["neighbors.families"].default == '["ipv4", "ipv6"]'
    assert by_key["link_quality.capacity_mbps"].type == "table of float (>0)"
    assert by_key["heartbeat.keys"].type == "array of tables"
    # every default shown is TOML, and what a file without the key gets
    dump = cfgmod.parse({"router_id": "192.0.2.1", "local_as": 65001, "role": "helper"})
    values = dump.model_dump(mode="json", by_alias=True)
    for key in cfgmod.config_keys():
        if by_key[key].default in ("required", "-"):
            continue
        value: typing.Any = values
        for part in key.split("."):
            value = value[part]
        shown = by_key[key].default
        assert (None if shown == "none" else tomllib.loads(f"v = {shown}")["v"]) == value, key


def test_the_readme_points_to_the_reference_and_keeps_no_copy() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "(docs/config-reference.md)" in readme
    # no key table left to drift: the reference's rows are not repeated
    assert not re.search(r"^\| `bfd\.min_tx_ms`", readme, re.M)
    assert readme.count("./bootstrap.sh ") == 2  # the two set-up commands


def test_the_guide_names_the_keys_a_reload_refuses() -> None:
    """Operator guide 9.1 lists the restart keys in prose: the same set as the code's."""
    text = GUIDE.read_text()
    para = text[text.index("the keys read only at start are") :].split("\n\n")[0]
    named = set(re.findall(r"`([a-z_.]+)`", para))
    restart = {k for k in cfgmod.config_keys() if cfgmod.RELOAD.get(k) is not cfgmod.Reload.LIVE}
    assert named == restart
