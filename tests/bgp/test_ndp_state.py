"""The unnumbered peers' state file: what a restart remembers, and what it refuses to read
(no sockets: the speaker is built, not started)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from glbd.unnumbered.ndpsock import STATE_FILE, NdpSpeaker


def preferred(path: Path) -> dict[str, object]:
    sp = NdpSpeaker(["swp1", "swp2"], lambda ev: None, state_path=path)
    return {p: v["preferred"] for p, v in sp.snapshot()["ports"].items()}


def test_remembered_peers_are_preferred(tmp_path: Path) -> None:
    path = tmp_path / STATE_FILE
    path.write_text('{"version": 1, "peers": {"swp1": "fe80::1", "swp9": "fe80::9"}}')
    assert preferred(path) == {"swp1": "fe80::1", "swp2": None}


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        '{"version": 1}',
        '{"version": 1, "peers": ["fe80::1"]}',
        '{"version": 1, "peers": {"swp1": "not an address"}}',
        '{"version": 1, "peers": {"swp1": "' + "f" * 70000 + '"}}',
    ],
)
def test_a_malformed_file_is_ignored(tmp_path: Path, text: str) -> None:
    path = tmp_path / STATE_FILE
    path.write_text(text)
    assert preferred(path) == {"swp1": None, "swp2": None}


def test_only_link_local_addresses_are_taken(tmp_path: Path) -> None:
    path = tmp_path / STATE_FILE
    path.write_text('{"version": 1, "peers": {"swp1": "2001:db8::1", "swp2": "fe80::2"}}')
    assert preferred(path) == {"swp1": None, "swp2": "fe80::2"}


def test_a_symlink_is_not_followed(tmp_path: Path) -> None:
    real = tmp_path / "elsewhere.json"
    real.write_text('{"version": 1, "peers": {"swp1": "fe80::1"}}')
    path = tmp_path / STATE_FILE
    os.symlink(real, path)
    assert preferred(path) == {"swp1": None, "swp2": None}


def test_no_file_is_a_first_start(tmp_path: Path) -> None:
    assert preferred(tmp_path / STATE_FILE) == {"swp1": None, "swp2": None}
