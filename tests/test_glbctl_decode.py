"""`glbctl decode`: each codec from the installed CLI, table and JSON, named errors exit 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from heartbeat import wire

FRR_NNHN_ATTR = (
    "d0 27 00 18 00 01 01 04 00 00 00 00 00 02 00 0c 0a 00 00 0b 0a 00 00 02 0a 00 00 03"
)
FRR84_BFD = "208003182b4550d71ed7609d000f4240000f42400000c350"


def glbctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "glbd.cli.glbctl", *args], capture_output=True, text=True, timeout=60
    )


def test_nhc_whole_attribute_and_bare_value_json() -> None:
    whole = glbctl("decode", "nhc", "--json", FRR_NNHN_ATTR)
    assert whole.returncode == 0, whole.stderr
    d = json.loads(whole.stdout)
    assert d["type"] == 39 and d["extended_length"] is True
    assert d["value"]["nnhn"] == {"nh_bgp_id": "10.0.0.11", "nnh_ids": ["10.0.0.2", "10.0.0.3"]}
    # the bare value as ExaBGP shows it ("attribute-0x27-0xE0": "0x0001...")
    bare = glbctl("decode", "nhc", "--json", "0x" + FRR_NNHN_ATTR.replace(" ", "")[8:])
    assert bare.returncode == 0, bare.stderr
    assert json.loads(bare.stdout)["nnhn"]["nnh_ids"] == ["10.0.0.2", "10.0.0.3"]


def test_nhc_table() -> None:
    r = glbctl("decode", "nhc", *FRR_NNHN_ATTR.split())
    assert r.returncode == 0 and "10.0.0.11" in r.stdout and "nnh_ids" in r.stdout


def test_bfd_frr_packet() -> None:
    r = glbctl("decode", "bfd", "--json", FRR84_BFD)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["state"] == "init" and d["my_discriminator"] == 725962967
    assert d["desired_min_tx_us"] == 1_000_000


def test_heartbeat() -> None:
    hb = wire.Heartbeat(
        sender_id=wire.node_id("198.18.255.11"),
        sequence=7,
        interval_us=20_000,
        entries=[
            wire.Entry(wire.node_id("198.18.255.2"), 1, 100_000, 5, load_bp=4200, queue_bytes=1500)
        ],
    )
    r = glbctl("decode", "heartbeat", "--json", ":".join(f"{b:02x}" for b in hb.encode()))
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["sequence"] == 7
    assert d["entries"][0]["far_end_id"] == "198.18.255.2" and d["entries"][0]["band"] == 5


@pytest.mark.parametrize(
    ("kind", "hex_", "reason"),
    [
        ("bfd", "2080031800", "too_short"),
        ("nhc", "0x0001010400000000000200", "trailing_bytes"),
        ("heartbeat", "00", None),
        ("bfd", "zz", "bad hex"),
    ],
)
def test_errors_exit_2_with_reason(kind: str, hex_: str, reason: str | None) -> None:
    r = glbctl("decode", kind, hex_)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and r.stderr.startswith(f"glbctl decode {kind}: ")
    if reason:
        assert reason in r.stderr
