"""Directories and files root must not share with other local users.

glbd runs as root and keeps two things on the file system that another local user must never
control: the control socket (glbctl talks to whatever listens there) and ExaBGP's runtime
directory (its config names the command ExaBGP runs as root). So:

* :func:`check_dir` refuses a directory another user could change: every component from ``/``
  down must be owned by root or by us (a symlink too, and then its target is checked); the
  directory itself must not be group- or other-writable; an ancestor may be, if it is sticky
  (``/tmp``: nobody else can rename or replace what we own in it).
* :func:`ensure_dir` creates what is missing (mode 0750 at most), then checks.
* :func:`private_dir` makes a 0700 directory of ours at a given name, or, when that name is
  already taken by anything that is not our 0700 directory, a fresh random one next to it.
* :func:`write_private` writes a file (0600) without following a symlink at its name: a new
  file created exclusively, then renamed over the name.

Errors are :class:`UnsafePathError` (a ``PermissionError``) with a one-line message naming the
path and the fix.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

__all__ = ["UnsafePathError", "check_dir", "ensure_dir", "private_dir", "write_private"]


class UnsafePathError(PermissionError):
    """A path another local user could control; ``str()`` is one line with the fix."""

    def __init__(self, message: str) -> None:
        super().__init__(message)

    def __str__(self) -> str:
        return str(self.args[0])


def _trusted(uid: int) -> bool:
    return uid in (0, os.geteuid())


def _check_chain(path: Path, what: str, final: Path, depth: int = 0) -> None:
    if depth > 8:
        raise UnsafePathError(f"{what} {str(final)!r}: too many symlinks on the way")
    cur = Path("/")
    parts = path.parts[1:]
    for i, part in enumerate(parts):
        cur = cur / part
        st = os.lstat(cur)
        if stat.S_ISLNK(st.st_mode):
            if not _trusted(st.st_uid):
                raise UnsafePathError(
                    f"{what} {str(final)!r}: {str(cur)!r} is a symlink owned by uid "
                    f"{st.st_uid}; use a path only root controls (e.g. /run/glbd)"
                )
            target = Path(os.path.realpath(cur))
            rest = parts[i + 1 :]
            _check_chain(target.joinpath(*rest), what, final, depth + 1)
            return
        if not _trusted(st.st_uid):
            raise UnsafePathError(
                f"{what} {str(final)!r}: {str(cur)!r} is owned by uid {st.st_uid}, who can "
                f"replace what is in it; use a directory owned by root (e.g. /run/glbd)"
            )
        mode = stat.S_IMODE(st.st_mode)
        last = i == len(parts) - 1
        if mode & 0o022 and (last or not mode & stat.S_ISVTX):
            raise UnsafePathError(
                f"{what} {str(final)!r}: {str(cur)!r} is writable by "
                f"{'other users' if mode & 0o002 else 'its group'} (mode {mode:04o}); "
                f"chmod go-w it or use a directory only root can write (e.g. /run/glbd)"
            )


def _abs(path: Path, what: str) -> Path:
    # '..' after a symlink means the link target's parent to the kernel, not what abspath says
    if ".." in Path(path).parts:
        raise UnsafePathError(f"{what} {str(path)!r}: write the path without '..'")
    return Path(os.path.abspath(path))


def check_dir(path: Path, what: str = "directory") -> None:
    """Raise :class:`UnsafePathError` unless only root or we can change ``path`` (see module)."""
    p = _abs(path, what)
    if not p.is_dir():
        raise UnsafePathError(f"{what} {str(p)!r} is not a directory")
    _check_chain(p, what, p)


def ensure_dir(path: Path, what: str = "directory", mode: int = 0o750) -> None:
    """Create ``path`` (and missing parents) with at most ``mode``, then :func:`check_dir`."""
    p = _abs(path, what)
    missing = []
    cur = p
    while not os.path.lexists(cur):
        missing.append(cur)
        cur = cur.parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile: check_dir judges it
            os.mkdir(d, mode & 0o755)
    check_dir(p, what)


def _is_private_dir_of_ours(path: Path) -> bool:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    return (
        stat.S_ISDIR(st.st_mode)
        and st.st_uid == os.geteuid()
        and stat.S_IMODE(st.st_mode) & 0o077 == 0
    )


def private_dir(path: Path, what: str = "directory") -> Path:
    """A 0700 directory of ours at ``path`` or, if that name is taken by anything else (someone
    else's directory, a symlink, a file), a new random one beside it. The parent must pass
    :func:`check_dir`. Returns the directory to use."""
    p = _abs(path, what)
    check_dir(p.parent, f"{what}'s parent")
    try:
        os.mkdir(p, 0o700)
    except FileExistsError:
        if not _is_private_dir_of_ours(p):
            return Path(tempfile.mkdtemp(prefix=f"{p.name}-", dir=p.parent))
    os.chmod(p, 0o700)  # mkdir's mode is masked by the umask; 0700 is the point
    return p


def write_private(path: Path, data: str | bytes, mode: int = 0o600) -> None:
    """Write ``data`` to ``path`` atomically: a new file (O_EXCL, never through a symlink) in the
    same directory, renamed over ``path`` (a symlink there is replaced, not followed)."""
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(raw)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
