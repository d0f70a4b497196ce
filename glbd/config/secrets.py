"""Secret files (HMAC and BFD keys): read with the checks OpenSSH applies to a private key, and
held in a :class:`Secret` that never shows its value in a repr, a log or a config dump."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import structlog


class Secret:
    """A secret value that never shows itself in repr/str/logs."""

    __slots__ = ("_value",)

    def __init__(self, value: bytes) -> None:
        self._value = value

    def reveal(self) -> bytes:
        return self._value

    def __repr__(self) -> str:
        return "Secret(***)"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


def read_secret(path: Path, lo: int, hi: int, what: str) -> Secret:
    """Read a secret from ``path`` (trailing newlines stripped) and check its length.

    Like OpenSSH with a private key: the file (a symlink's target) must be a regular file owned
    by root or by us, neither readable by other users nor writable by group or others. A
    group-readable file (0640 root:glbd) is accepted with a warning."""
    where = f"secret_file {str(path)!r}"
    try:
        # O_NONBLOCK: a FIFO planted in place of the key must not hang the loader
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise ValueError(f"{where} unreadable: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)  # the opened file itself: no swap between check and read
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{where} is not a regular file")
        if st.st_uid not in (0, os.geteuid()):
            raise ValueError(
                f"{where} is owned by uid {st.st_uid}, who can change the key: "
                f"chown root and chmod 600 it"
            )
        mode = stat.S_IMODE(st.st_mode)
        for bit, who in (
            (0o004, "readable by other users"),
            (0o002, "writable by other users"),
            (0o020, "writable by its group"),
        ):
            if mode & bit:
                raise ValueError(
                    f"{where} is {who} (mode {mode:04o}): chmod 600 it "
                    f"(0640 for a group that must read it)"
                )
        if mode & 0o040:
            structlog.get_logger(__name__).warning(
                "secret_file_group_readable", path=str(path), mode=f"{mode:04o}", gid=st.st_gid
            )
        try:
            data = f.read().rstrip(b"\r\n")
        except OSError as e:
            raise ValueError(f"{where} unreadable: {e.strerror}") from None
    if not lo <= len(data) <= hi:
        raise ValueError(
            f"secret_file {str(path)!r}: {what} is {lo}-{hi} bytes, the file holds {len(data)}"
        )
    return Secret(data)
