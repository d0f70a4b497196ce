"""Config: examples validate; every kind of bad input is reported with file, key and reason."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from glbd.cli.glbd import main as glbd_main
from glbd.config import config
from glbd.config.config_fib import RTPROT_GLBD
from glbd.config.config_quality import HEARTBEAT_GROUP_V6

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "conf").glob("*.toml"))


def _leaf() -> dict[str, Any]:
    return tomllib.loads((ROOT / "conf" / "leaf.toml").read_text())


def _problems(data: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(config.ConfigError) as ei:
        config.parse(data, "t.toml")
    return [(p.key, p.reason) for p in ei.value.problems]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_validate(path: Path) -> None:
    assert EXAMPLES, "no example configs"
    c = config.load(path)
    assert c.neighbors
    assert glbd_main(["check-config", "-q", str(path)]) == 0


def test_defaults_are_the_documented_ones() -> None:
    c = config.parse({"router_id": "10.0.0.1", "local_as": 65001, "role": "both"})
    assert str(c.heartbeat.group) == "224.0.0.149"
    assert str(c.heartbeat.group6) == "ff12::149" == HEARTBEAT_GROUP_V6
    assert c.heartbeat.interval_ms == 20 and c.heartbeat.min_spacing_ms == 5
    assert c.heartbeat.hold_multiplier == 3
    assert c.link_quality.sample_interval_ms == 10
    assert (c.bfd.min_tx_ms, c.bfd.min_rx_ms, c.bfd.detect_mult) == (50, 50, 3)
    assert c.fib.protocol == RTPROT_GLBD and c.fib.on_stop == "keep"
    assert c.is_helper and c.is_load_balancer


def test_unknown_key_is_named() -> None:
    d = _leaf()
    d["neighbors"][0]["remote_asn"] = 1
    d["fib"]["tabel"] = 5
    assert ("neighbors.0.remote_asn", "unknown key") in _problems(d)
    assert ("fib.tabel", "unknown key") in _problems(d)


def test_bad_address_is_named() -> None:
    d = _leaf()
    d["neighbors"][1]["address"] = "198.18.2.300"
    ((key, reason),) = _problems(d)
    assert key == "neighbors.1.address" and "'198.18.2.300' is not a valid" in reason


def test_interval_out_of_range() -> None:
    d = _leaf()
    d["heartbeat"]["interval_ms"] = 1
    d["bfd"] = {"detect_mult": 0}
    probs = dict(_problems(d))
    assert "greater than or equal to 5" in probs["heartbeat.interval_ms"]
    assert "bfd.detect_mult" in probs


@pytest.mark.parametrize("group6", ["ff12::14a", "FF12::0149", "ff02::6149", "ff32::149"])
def test_heartbeat_group6_valid(group6: str) -> None:
    d = _leaf()
    d["heartbeat"]["group6"] = group6
    g = config.parse(d).heartbeat.group6
    assert (int(g) >> 112) & 0xF == 2  # link-local scope, whatever the flags
    assert config.parse(d).redacted()["heartbeat"]["group6"] == str(g)


@pytest.mark.parametrize(
    ("group6", "reason"),
    [
        ("ff05::149", "ff05::149 is not of link-local scope (ff02::/16): heartbeats are one-hop"),
        ("ff0e::149", "never forwarded off the link"),
        ("fe80::149", "fe80::149 is not an IPv6 multicast address (ff00::/8)"),
        ("2001:db8::149", "not an IPv6 multicast address"),
        ("224.0.0.149", "is IPv4: group6 is the IPv6 group; put an IPv4 group in heartbeat.group"),
        ("ff02::1", "ff02::1 is a group the kernel joins for other protocols (all-nodes"),
        ("ff02::2", "all-routers"),
        ("ff02::1:ff00:1", "solicited-node"),
        ("ff12::149%eth0", "no zone; the group is joined on each fabric interface"),
        ("ff02::", "ff02:: has group id 0, which is reserved (RFC 4291)"),
        ("ff12::", "group id 0"),
        ("ff02::zz", "'ff02::zz' is not a valid IPv6 address"),
        (149, "expected an IPv6 multicast address as a string"),
    ],
)
def test_heartbeat_group6_invalid_names_file_key_reason(
    group6: object, reason: str, tmp_path: Path
) -> None:
    d = (ROOT / "conf" / "leaf.toml").read_text()
    assert 'group = "224.0.0.149"' in d
    value = f'"{group6}"' if isinstance(group6, str) else str(group6)
    f = tmp_path / "hb.toml"
    f.write_text(d.replace('group = "224.0.0.149"', f'group = "224.0.0.149"\ngroup6 = {value}'))
    with pytest.raises(config.ConfigError) as ei:
        config.load(f)
    (p,) = ei.value.problems
    assert p.key == "heartbeat.group6" and reason in p.reason
    assert ei.value.format().startswith(f"{f}: heartbeat.group6: ")


@pytest.mark.parametrize(
    ("group", "reason"),
    [
        ("ff12::149", "is IPv6: group is the IPv4 group; put an IPv6 group in heartbeat.group6"),
        ("198.18.0.1", "198.18.0.1 is not an IPv4 multicast address (224.0.0.0/4)"),
        ("224.0.0.300", "'224.0.0.300' is not a valid IPv4 address"),
    ],
)
def test_heartbeat_group_wrong_family_or_not_multicast(group: str, reason: str) -> None:
    d = _leaf()
    d["heartbeat"]["group"] = group
    ((key, got),) = _problems(d)
    assert key == "heartbeat.group" and reason in got


def test_group6_change_is_a_heartbeat_reload() -> None:
    old = config.parse(_leaf())
    d = _leaf()
    d["heartbeat"]["group6"] = "ff12::150"
    out = config.diff(old, config.parse(d))
    assert out["sections"] == ["heartbeat"] and out["restart_required"] == []


def test_duplicate_neighbor_reported_even_with_other_errors() -> None:
    d = _leaf()
    d["neighbors"][1]["address"] = d["neighbors"][0]["address"]
    d["fib"]["bogus"] = True
    probs = _problems(d)
    assert ("fib.bogus", "unknown key") in probs
    assert any(k == "neighbors.1.address" and "duplicate neighbor" in r for k, r in probs)


def test_duplicate_neighbor_alone() -> None:
    d = _leaf()
    d["neighbors"][1]["address"] = d["neighbors"][0]["address"]
    ((key, reason),) = _problems(d)
    assert key == "neighbors.1.address" and "duplicate neighbor 198.18.1.0" in reason


def test_prefix_with_host_bits() -> None:
    d = _leaf()
    d["originate"] = ["198.19.1.1/24"]
    ((key, reason),) = _problems(d)
    assert key == "originate.0" and "host bits" in reason


def test_secret_file_unreadable_and_never_logged(tmp_path: Path) -> None:
    d = _leaf()
    d["heartbeat"]["auth"] = {"key_id": 1, "secret_file": str(tmp_path / "missing")}
    ((key, reason),) = _problems(d)
    assert key == "heartbeat.auth" and "unreadable" in reason
    secret = b"s3cr3t-s3cr3t-s3cr3t"
    (tmp_path / "k").write_bytes(secret + b"\n")
    (tmp_path / "k").chmod(0o600)  # a key others can read is refused
    d["heartbeat"]["auth"]["secret_file"] = str(tmp_path / "k")
    c = config.parse(d)
    assert c.heartbeat.auth is not None and c.heartbeat.auth.secret is not None
    assert c.heartbeat.auth.secret.reveal() == secret
    for text in (repr(c), str(c), str(c.redacted()), c.model_dump_json()):
        assert "s3cr3t" not in text


def test_short_secret_rejected(tmp_path: Path) -> None:
    (tmp_path / "k").write_bytes(b"short")
    (tmp_path / "k").chmod(0o600)
    d = _leaf()
    d["heartbeat"]["auth"] = {"key_id": 1, "secret_file": str(tmp_path / "k")}
    ((_key, reason),) = _problems(d)
    assert "an HMAC key is 16-4096 bytes, the file holds 5" in reason


def test_cross_field_checks() -> None:
    d = _leaf()
    d["link_quality"]["load_min_pct"] = 95
    d["heartbeat"]["min_spacing_ms"] = 50
    d["neighbors"][0]["local_address"] = "2001:db8::1"
    probs = dict(_problems(d))
    assert "load_min_pct must be below" in probs["link_quality"]
    assert "min_spacing_ms must not exceed" in probs["heartbeat"]
    assert "different IP versions" in probs["neighbors.0"]


def test_neighbor_bfd_override() -> None:
    c = config.load(ROOT / "conf" / "leaf.toml")
    d = _leaf()
    d["neighbors"][1]["bfd"] = {"min_rx_ms": 10, "enabled": False}
    c = config.parse(d)
    eff = c.neighbor_bfd(c.neighbors[1])
    assert eff.min_rx_ms == 10 and not eff.enabled and eff.min_tx_ms == c.bfd.min_tx_ms


def test_syntax_error_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("router_id = \n")
    with pytest.raises(config.ConfigError) as ei:
        config.load(bad)
    assert ei.value.problems[0].key == "(syntax)"
    with pytest.raises(config.ConfigError) as ei:
        config.load(tmp_path / "nope.toml")
    assert "cannot read" in ei.value.problems[0].reason


def test_diff_names_what_changed() -> None:
    old = config.parse(_leaf())
    d = _leaf()
    d["neighbors"].append({"address": "198.18.3.0", "remote_as": 65100, "interface": "leaf1-sw3"})
    d["neighbors"][0]["hold_time"] = 30
    d["heartbeat"]["hold_multiplier"] = 5
    new = config.parse(d)
    out = config.diff(old, new)
    assert out["neighbors_added"] == ["198.18.3.0"]
    assert out["neighbors_changed"] == ["198.18.1.0"]
    assert out["neighbors_removed"] == []
    assert out["sections"] == ["heartbeat"]
    assert out["restart_required"] == []
    d["local_as"] = 1
    assert config.diff(old, config.parse(d))["restart_required"] == ["local_as"]


def test_check_config_cli_reports_every_problem(tmp_path: Path) -> None:
    d = (ROOT / "conf" / "leaf.toml").read_text()
    d = d.replace("protocol = 200", "protocol = 200\nbogus = 1").replace(
        "hold_time = 9", "hold_time = 1"
    )
    f = tmp_path / "x.toml"
    f.write_text(d)
    r = subprocess.run(
        [sys.executable, "-m", "glbd", "check-config", str(f)], capture_output=True, text=True
    )
    assert r.returncode == 1
    assert f"{f}: fib.bogus: unknown key" in r.stderr
    assert f"{f}: bgp.hold_time:" in r.stderr
    assert "2 problems; config rejected" in r.stderr
    assert "Traceback" not in r.stderr


def test_path_quality_table_must_be_eight_monotone_values() -> None:
    d = _leaf()
    d["path_quality"] = {"weight_table": [1, 2, 3]}
    assert "exactly 8 values" in dict(_problems(d))["path_quality.weight_table"]
    d["path_quality"] = {"weight_table": [1, 2, 3, 5, 4, 12, 18, 27]}
    assert "must not decrease" in dict(_problems(d))["path_quality.weight_table"]
    d["path_quality"] = {"weight_table": [1, 1, 2, 2, 3, 3, 4, 4], "combine": "mean"}
    c = config.parse(d)
    assert c.path_quality.combine == "mean" and c.path_quality.weight_table[-1] == 4
    assert c.path_quality.weight_memory is True  # the default
    d["path_quality"] = {"weight_memory": False}
    assert config.parse(d).path_quality.weight_memory is False
    d["path_quality"] = {"weight_memory": "sometimes"}
    assert "path_quality.weight_memory" in dict(_problems(d))


def test_neighbor_passive_modes() -> None:
    d = _leaf()
    assert config.parse(d).neighbors[0].passive == "auto"
    d["neighbors"][0]["passive"] = True
    assert config.parse(d).neighbors[0].passive is True
    d["neighbors"][0]["passive"] = "sometimes"
    assert "neighbors.0.passive" in dict(_problems(d))


def test_bfd_auth_reads_key_checks_length_and_never_shows_it(tmp_path: Path) -> None:
    key = tmp_path / "bfd.key"
    key.write_bytes(b"0123456789abcdefghij\n")  # 20 bytes: fine for SHA1, too long for MD5
    key.chmod(0o600)  # a key others can read is refused
    d = _leaf()
    d["bfd"] = {"auth": {"type": "keyed-md5", "key_id": 3, "secret_file": str(key)}}
    assert "1-16 bytes, the file holds 20" in dict(_problems(d))["bfd.auth"]
    d["bfd"]["auth"]["type"] = "meticulous-keyed-sha1"
    c = config.parse(d)
    eff = c.neighbor_bfd(c.neighbors[0])
    assert eff.auth is not None and eff.auth.secret is not None
    assert eff.auth.secret.reveal() == b"0123456789abcdefghij" and eff.rt_priority == 10
    assert "0123456789" not in json.dumps(c.redacted()) and "0123456789" not in repr(c)
    # a per-neighbor override replaces the default key
    other = tmp_path / "n.key"
    other.write_text("pw")
    other.chmod(0o600)
    d["neighbors"][1]["bfd"] = {"auth": {"type": "simple", "key_id": 1, "secret_file": str(other)}}
    c = config.parse(d)
    a = c.neighbor_bfd(c.neighbors[1]).auth
    assert a is not None and a.type == "simple" and a.secret is not None
    assert a.secret.reveal() == b"pw"
    assert c.neighbor_bfd(c.neighbors[0]).auth == c.bfd.auth
