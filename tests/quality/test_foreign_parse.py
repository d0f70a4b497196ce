"""The foreign-load counter's pure parts: tc's and ip's JSON (as this machine's tools print
them), per-CPU values summed, the classes, and the layouts it shares with foreign.bpf.c."""

from __future__ import annotations

import json
import re
import socket
import struct
from dataclasses import fields
from pathlib import Path

import pytest

from glbd.daemon.bpftools import is_bpffs
from glbd.quality import foreigncount
from glbd.quality.bpfmap import count_cpus
from glbd.quality.foreigncount import (
    FOREIGN,
    MAP_SIZES,
    PREF,
    STEERED,
    Counts,
    ForeignCounter,
    PortClasses,
    config_value,
    object_path,
    parse_filters,
    parse_links,
    sum_percpu,
)

SOURCE = Path(foreigncount.__file__).resolve().parent / "bpf" / "foreign.bpf.c"

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
                "prog": {
                    "id": 10524,
                    "name": "glbd_foreign",
                    "tag": "0c89ad86bf4710ad",
                    "jited": 1,
                },
            },
        },
        # someone else's: another priority, another program, another kind
        {"pref": 60000, "kind": "bpf", "options": {"prog": {"id": 7, "name": "glbd_foreign"}}},
        {"pref": PREF, "kind": "bpf", "options": {"prog": {"id": 8, "name": "glbd_flowlet"}}},
        {"pref": PREF, "kind": "u32", "options": {}},
    ]
)

IP_LINKS = json.dumps(
    [
        {"ifindex": 1, "ifname": "lo", "flags": ["LOOPBACK", "UP"], "mtu": 65536},
        {"ifindex": 4, "ifname": "r-o", "flags": ["UP"], "link_netnsid": 2, "mtu": 1500},
        {"ifindex": 17, "ifname": "swp1", "mtu": 9216},
    ]
)


def test_filters_are_ours_by_priority_kind_and_program_name() -> None:
    assert parse_filters(TC_SHOW) == [10524]
    assert parse_filters("") == []
    assert parse_filters("[]") == []


def test_links_by_name() -> None:
    assert parse_links(IP_LINKS) == {"lo": 1, "r-o": 4, "swp1": 17}
    assert parse_links("") == {}


def test_per_cpu_counts_are_summed() -> None:
    raw = struct.pack("<4Q", 1000, 10, 300, 3) + struct.pack("<4Q", 24, 1, 24, 1)
    assert sum_percpu(raw, 2) == Counts(1024, 11, 324, 4)
    # bytes past the CPUs asked for are not read
    assert sum_percpu(raw, 1) == Counts(1000, 10, 300, 3)
    assert sum_percpu(bytes(32 * 3), 3) == Counts()
    with pytest.raises(ValueError, match="3 CPUs"):
        sum_percpu(raw, 3)


@pytest.mark.parametrize(
    ("text", "n"),
    [("0\n", 1), ("0-3\n", 4), ("0-3,8-11\n", 8), ("0,2,4-5", 4), ("0-127\n", 128)],
)
def test_possible_cpus_are_counted_from_the_kernel_list(text: str, n: int) -> None:
    assert count_cpus(text) == n


def test_port_classes_check_and_resolve() -> None:
    names = {"r-a": STEERED, "gone": FOREIGN}
    pc = PortClasses(default=FOREIGN, ports=names)
    names["r-b"] = STEERED  # the caller's dict changing later changes nothing
    assert pc.ports == {"r-a": STEERED, "gone": FOREIGN}
    assert pc.by_ifindex({"r-a": 3, "r-b": 5, "lo": 1}) == {3: STEERED}
    assert PortClasses().default == FOREIGN and PortClasses().ports == {}
    with pytest.raises(ValueError, match="default"):
        PortClasses(default=0)
    with pytest.raises(ValueError, match="r-a"):
        PortClasses(ports={"r-a": 3})


def test_config_value_is_the_default_class_then_padding() -> None:
    assert config_value(STEERED) == b"\x01\x00\x00\x00\x00\x00\x00\x00"
    assert config_value(FOREIGN) == b"\x02\x00\x00\x00\x00\x00\x00\x00"
    assert len(config_value(FOREIGN)) == MAP_SIZES["config"][1]


def test_bpffs_mount_line() -> None:
    line = "45 24 0:40 / /sys/fs/bpf rw,nosuid,nodev,noexec,relatime shared:16 - bpf bpf rw"
    assert is_bpffs(line)
    assert not is_bpffs(line.replace("/sys/fs/bpf", "/mnt"))
    assert not is_bpffs(line.replace(" - bpf ", " - tmpfs "))


def test_object_path_prefers_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    obj = tmp_path / "foreign.bpf.o"
    obj.write_bytes(b"\x7fELF")
    monkeypatch.setenv("GLBD_FOREIGN_OBJECT", str(obj))
    assert object_path() == obj
    monkeypatch.setenv("GLBD_FOREIGN_OBJECT", str(tmp_path / "missing.o"))
    assert object_path() != tmp_path / "missing.o"


def test_the_c_program_shares_the_layouts() -> None:
    """Class numbers, struct counts' fields in order, struct config's size and the maps'."""
    src = SOURCE.read_text()
    defines = dict(re.findall(r"#define CLASS_(\w+) (\d+)", src))
    assert defines == {"STEERED": str(STEERED), "FOREIGN": str(FOREIGN)}
    body = re.search(r"struct counts \{(.*?)\};", src, re.S)
    assert body is not None
    c_fields = re.findall(r"__u64 (\w+);", body.group(1))
    assert c_fields == [f.name for f in fields(Counts)]
    assert len(c_fields) * 8 == MAP_SIZES["counts"][1]
    config = re.search(r"struct config \{(.*?)\};", src, re.S)
    assert config is not None
    assert re.findall(r"__u32 (\w+);", config.group(1)) == ["default_class", "pad"]
    prog = re.search(r'SEC\("tc"\)\s*int (\w+)\(', src)
    assert prog is not None and prog.group(1) == foreigncount.PROG_NAME
    for name in MAP_SIZES:
        assert re.search(rf"\}} {name} SEC\(\"\.maps\"\);", src), name


def test_interfaces_moved_is_an_ioctl_per_name() -> None:
    """The cheap check between two full ones: a wanted interface whose ifindex is not the one
    the last apply saw (gone, made again, or new) moved; one still missing did not."""
    fc = ForeignCounter()
    lo = socket.if_nametoindex("lo")
    fc.interfaces, fc.ifindex = ("lo", "no-such-if0"), {"lo": lo}
    assert not fc.interfaces_moved()
    fc.ifindex = {"lo": lo + 1000}  # made again since
    assert fc.interfaces_moved()
    fc.ifindex = {"lo": lo, "no-such-if0": 7}  # went since
    assert fc.interfaces_moved()
    assert ForeignCounter(netns=None).interfaces_moved() is False  # nothing wanted yet
