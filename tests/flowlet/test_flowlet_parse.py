"""The loader's reading of tc's and bpftool's JSON (samples as this machine's tools print them),
and the counter layout it shares with the C program."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

from glbd.daemon.bpftools import is_bpffs
from glbd.flowlet import loader as flowlet
from glbd.flowlet.loader import (
    COUNTERS,
    PREF,
    Filter,
    FlowletParams,
    config_value,
    parse_filters,
    parse_links,
    sum_stats,
)
from glbd.flowlet.movegate import MoveChance

SOURCE = Path(flowlet.__file__).resolve().parent / "bpf" / "flowlet.bpf.c"

TC_SHOW = json.dumps(
    [
        {"protocol": "all", "pref": PREF, "kind": "bpf", "chain": 0},
        {
            "protocol": "all",
            "pref": PREF,
            "kind": "bpf",
            "chain": 0,
            "options": {
                "handle": "0x1",
                "bpf_name": "prog:[*fsobj]",
                "direct-action": True,
                "not_in_hw": True,
                "prog": {"id": 104, "name": "glbd_flowlet", "tag": "9854d17ad111a141", "jited": 1},
            },
        },
        # someone else's programs: another priority, another name
        {"pref": 1, "kind": "bpf", "options": {"prog": {"id": 7, "name": "glbd_flowlet"}}},
        {"pref": PREF, "kind": "bpf", "options": {"prog": {"id": 8, "name": "cilium"}}},
        {"pref": PREF, "kind": "u32", "options": {}},
    ]
)


def _hex(values: list[int]) -> list[str]:
    return [f"0x{b:02x}" for v in values for b in v.to_bytes(8, "little")]


def test_filters_are_ours_by_priority_and_program_name() -> None:
    assert parse_filters("eth1", TC_SHOW) == [Filter("eth1", 104)]
    assert parse_filters("eth1", "") == []
    assert parse_filters("eth1", "[]") == []


def test_stats_sum_the_cpus_per_interface() -> None:
    n = len(COUNTERS)
    cpu0 = [0] * n
    cpu0[COUNTERS.index("skip_proto")] = 1
    cpu1 = [0] * n
    for name in ("packets", "flowlets", "new_flows"):
        cpu1[COUNTERS.index(name)] = 1
    value = struct.pack(f"<{n}Q", *cpu0) + struct.pack(f"<{n}Q", *cpu1)
    got = sum_stats([((2).to_bytes(4, "little"), value)], 2)
    assert list(got) == [2]
    assert got[2]["packets"] == 1 and got[2]["new_flows"] == 1 and got[2]["skip_proto"] == 1
    assert sum(got[2].values()) == 4
    assert sum_stats([], 2) == {}


def test_counters_match_the_program() -> None:
    """``enum counter`` in flowlet.bpf.c, C_PACKETS.. in order, is COUNTERS."""
    body = re.search(r"enum counter \{(.*?)\};", SOURCE.read_text(), re.S)
    assert body is not None
    names = re.findall(r"^\s*C_([A-Z_]+),", body.group(1), re.M)
    assert names[-1] == "MAX"
    assert tuple(n.lower() for n in names[:-1]) == COUNTERS


def test_config_value_is_five_little_endian_u64_and_two_u32() -> None:
    raw = config_value(1_000_000, 2**40, MoveChance(2**31, 7, 9), spread=True, buckets=128)
    assert len(raw) == flowlet.CONFIG_SIZE == 48
    assert raw == b"".join(n.to_bytes(8, "little") for n in (1_000_000, 2**40, 2**31, 7, 9)) + (
        (1).to_bytes(4, "little") + (128).to_bytes(4, "little")
    )
    # without a chance: every gap moves (1 in 1/2^32 units, no decay)
    assert config_value(1, 2)[16:] == (2**32).to_bytes(8, "little") + (bytes(24))


def test_config_layout_matches_the_program() -> None:
    body = re.search(r"struct config \{(.*?)\};", SOURCE.read_text(), re.S)
    assert body is not None
    fields = re.findall(r"__u(\d+) (\w+);", body.group(1))
    assert [name for _, name in fields] == [
        "timeout_ns", "aging_ns", "move_p0", "move_t0_ns", "move_decay_ns", "placement", "buckets"
    ]  # fmt: skip
    assert sum(int(bits) // 8 for bits, _ in fields) == flowlet.CONFIG_SIZE


def test_links_and_mountinfo() -> None:
    links = json.dumps([{"ifindex": 1, "ifname": "lo"}, {"ifindex": 5, "ifname": "h-r"}])
    assert parse_links(links) == {1: "lo", 5: "h-r"}
    assert is_bpffs("41 30 0:36 / /sys/fs/bpf rw,nosuid - bpf bpf rw,mode=700")
    assert not is_bpffs("22 1 0:21 / /sys rw - sysfs sysfs rw")
    assert not is_bpffs("")


def test_targets_default_to_every_non_fabric_interface() -> None:
    p = FlowletParams(None, 1, 1, 16, exclude=("swp1", "swp2"))
    assert p.targets(["lo", "swp1", "swp2", "host1", "host2"]) == ["host1", "host2"]
    named = FlowletParams(("host1", "gone"), 1, 1, 16)
    assert named.targets(["lo", "swp1", "host1"]) == ["host1"]
