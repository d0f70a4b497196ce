"""Control socket: codec, server robustness, glbctl behaviour without a daemon, hex parsing."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from glbd.cli import glbctl as ctl
from glbd.cli.glbctl_render import render
from glbd.control import protocol as proto
from glbd.control.server import ControlServer
from glbd.daemon.paths import UnsafePathError


def test_request_response_golden() -> None:
    r = proto.Request(id=7, cmd="status")
    assert r.encode() == b'{"v":1,"id":7,"cmd":"status","args":{}}\n'
    assert proto.decode_request(r.encode()) == r
    ok = proto.Response(id=7, ok=True, result={"state": "running"})
    assert ok.encode() == b'{"v":1,"id":7,"ok":true,"result":{"state":"running"}}\n'
    bad = proto.Response.failure(7, "unknown_command", "x")
    assert bad.encode() == (
        b'{"v":1,"id":7,"ok":false,"error":{"reason":"unknown_command","message":"x"}}\n'
    )
    assert proto.decode_response(bad.encode()) == bad


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b"not json\n", "bad_json"),
        (b"[1]\n", "not_an_object"),
        (b'{"id":1,"cmd":"x"}\n', "missing_version"),
        (b'{"v":2,"id":1,"cmd":"x"}\n', "unsupported_version"),
        (b'{"v":1,"cmd":"x"}\n', "missing_id"),
        (b'{"v":1,"id":1}\n', "missing_cmd"),
        (b'{"v":1,"id":1,"cmd":"x","args":3}\n', "bad_args"),
        (b'{"v":1,"id":1,"cmd":"x","zzz":3}\n', "unknown_key"),
        (b"\xff\xfe\n", "not_utf8"),
    ],
)
def test_request_decode_errors(line: bytes, reason: str) -> None:
    with pytest.raises(proto.DecodeError) as ei:
        proto.decode_request(line)
    assert ei.value.reason == reason


@given(
    st.integers(0, 2**31),
    st.sampled_from(proto.COMMANDS),
    st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=3),
)
def test_request_round_trip(i: int, cmd: str, args: dict[str, Any]) -> None:
    r = proto.Request(id=i, cmd=cmd, args=args)
    assert proto.decode_request(r.encode()) == r


@pytest.mark.parametrize("line", [b"[" * 100000, b'{"a":' * 100000, b"[" * 100000 + b"]" * 100000])
def test_deeply_nested_json_is_a_decode_error(line: bytes) -> None:
    with pytest.raises(proto.DecodeError) as ei:
        proto.decode_request(line + b"\n")
    assert ei.value.reason == "too_deep"
    with pytest.raises(proto.DecodeError):
        proto.decode_response(line + b"\n")


async def test_server_answers_deeply_nested_json_and_counts_it(tmp_path: Path) -> None:
    path = tmp_path / "glbd.sock"
    srv = ControlServer(path, {"status": lambda a: {"state": "running"}})
    await srv.start()
    try:
        reader, writer = await asyncio.open_unix_connection(str(path), limit=proto.MAX_LINE)
        writer.write(b"[" * 100000 + b"\n" + proto.Request(1, "status").encode())
        bad = proto.decode_response(await reader.readline())
        good = proto.decode_response(await reader.readline())
        writer.close()
        assert (bad.ok, bad.error_reason) == (False, "too_deep")
        assert good.result == {"state": "running"}
        assert srv.counters["decode_errors"] == srv.counters["decode_error_too_deep"] == 1
    finally:
        await srv.stop()


@given(st.binary(max_size=200))
def test_fuzz_request_raises_only_decode_error(data: bytes) -> None:
    with contextlib.suppress(proto.DecodeError):
        proto.decode_request(data)


async def test_server_answers_and_survives_bad_clients(tmp_path: Path) -> None:
    path = tmp_path / "glbd.sock"

    def boom(args: dict[str, Any]) -> Any:
        raise RuntimeError("handler bug")

    async def slow(args: dict[str, Any]) -> Any:
        await asyncio.sleep(0)  # an async handler: answers after a loop turn
        return {"echo": args}

    srv = ControlServer(
        path, {"status": lambda a: {"state": "running"}, "boom": boom, "echo": slow}
    )
    await srv.start()
    try:
        assert oct(os.stat(path).st_mode & 0o777) == "0o660"
        reader, writer = await asyncio.open_unix_connection(str(path))
        for line in (
            b"garbage\n",
            proto.Request(1, "boom").encode(),
            proto.Request(2, "nope").encode(),
            proto.Request(3, "echo", {"a": 1}).encode(),
            proto.Request(4, "status").encode(),
        ):
            writer.write(line)
        answers = [proto.decode_response(await reader.readline()) for _ in range(5)]
        assert [a.error_reason for a in answers[:3]] == [
            "bad_json",
            "handler_failed",
            "unknown_command",
        ]
        assert answers[3].result == {"echo": {"a": 1}}
        assert answers[4].result == {"state": "running"}
        writer.close()
        # a client that vanishes mid-line does not hurt the next one
        _r2, w2 = await asyncio.open_unix_connection(str(path))
        w2.write(b'{"v":1,')
        w2.close()
        result = await asyncio.to_thread(ctl.request, str(path), "status")
        assert result == {"state": "running"}
        # garbage line + the truncated line at EOF are both counted, the daemon answers on
        assert srv.counters["decode_errors"] == 2 and srv.counters["errors"] == 2
    finally:
        await srv.stop()
    assert not path.exists()


def test_glbctl_without_daemon_is_one_line(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "glbd.cli.glbctl", "--socket", str(tmp_path / "x.sock"), "status"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 1
    assert r.stderr.strip().count("\n") == 0
    assert "glbd is not running" in r.stderr


def test_glbctl_refused_socket(tmp_path: Path) -> None:
    p = tmp_path / "dead.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(p))
    s.close()  # bound but nobody listens
    with pytest.raises(ctl.DaemonError, match="not running"):
        ctl.request(str(p), "status")


@pytest.mark.parametrize(
    "text",
    [
        "d0 27 00 04 01 02 03 04",
        "d0:27:00:04:01:02:03:04",
        "0xd027000401020304",
        "0xd0 0x27 0x00 0x04 0x01 0x02 0x03 0x04",
        "D027\n0004\t01020304",
    ],
)
def test_parse_hex_accepts_what_people_paste(text: str) -> None:
    assert ctl.parse_hex(text) == bytes.fromhex("d027000401020304")


@pytest.mark.parametrize("text", ["", "abc", "zz", "0x"])
def test_parse_hex_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        ctl.parse_hex(text)


def test_render_tables(capsys: pytest.CaptureFixture[str]) -> None:
    render(
        "neighbors", {"count": 1, "neighbors": [{"peer": "198.18.1.0", "state": "up"}], "empty": []}
    )
    out = capsys.readouterr().out
    assert "198.18.1.0" in out and "count" in out and "(none)" in out


# ---- the socket's directory against a local attacker -----------------------------------------

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")


def _refused(path: Path, *words: str) -> None:
    srv = ControlServer(path, {"status": lambda a: {}})
    with pytest.raises(UnsafePathError) as ei:
        asyncio.run(srv.start())
    msg = str(ei.value)
    assert "\n" not in msg and all(w in msg for w in words), msg
    assert not os.path.lexists(path)


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o770, 0o757])
def test_socket_in_a_directory_others_can_write_is_refused(tmp_path: Path, mode: int) -> None:
    d = tmp_path / "pub"
    d.mkdir()
    os.chmod(d, mode)
    _refused(d / "glbd.sock", str(d), "writable")


@pytest.mark.root
@needs_root
def test_socket_in_a_directory_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "theirs"
    d.mkdir(mode=0o755)
    os.chown(d, NOBODY, NOBODY)
    _refused(d / "glbd.sock", str(d), "owned by uid 65534")


@pytest.mark.root
@needs_root
def test_socket_under_an_ancestor_another_user_owns_is_refused(tmp_path: Path) -> None:
    """The owner of /x could rename /x/run away and put their own in its place."""
    (tmp_path / "x" / "run").mkdir(parents=True)
    os.chown(tmp_path / "x", NOBODY, NOBODY)
    _refused(tmp_path / "x" / "run" / "glbd.sock", str(tmp_path / "x"), "owned by uid 65534")


@pytest.mark.root
@needs_root
def test_socket_dir_through_another_users_symlink_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    os.lchown(link, NOBODY, NOBODY)
    _refused(link / "glbd.sock", str(link), "symlink owned by uid 65534")
    assert list(real.iterdir()) == []


async def test_socket_dir_under_a_sticky_tmp_and_made_by_us_is_fine(tmp_path: Path) -> None:
    """/tmp-like (1777) higher up is fine: nobody else can rename what we own in it; a missing
    directory is created, not group/other-writable."""
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    path = sticky / "glbd" / "run" / "glbd.sock"
    srv = ControlServer(path, {"status": lambda a: {"state": "running"}})
    await srv.start()
    try:
        assert stat.S_IMODE(os.stat(path.parent).st_mode) & 0o022 == 0
        assert await asyncio.to_thread(ctl.request, str(path), "status") == {"state": "running"}
    finally:
        await srv.stop()


def test_socket_path_with_dotdot_is_refused(tmp_path: Path) -> None:
    """'..' after a symlink is the link target's parent to the kernel: no lexical shortcuts."""
    (tmp_path / "a").mkdir()
    _refused(tmp_path / "a" / ".." / "glbd.sock", "'..'")
