"""Network namespaces and veth links for tests and the lab, cleaned up no matter what.

Everything a :class:`Lab` creates carries its per-run random ``tag`` (6 hex digits), so two
concurrent runs (two pytest sessions, a test next to ``glbd-lab up``) never clash:

* namespace names are ``glb-<tag>-<node>`` (e.g. ``glb-3fa9c1-leaf1``);
* veths are created *directly inside* both namespaces
  (``ip link add A netns nsA type veth peer name B netns nsB``), so nothing ever appears in the
  root namespace and interface names only have to be unique inside their namespace. They are
  still checked against the kernel's 15-character limit (:func:`check_ifname`).

Clean-up is by name: :meth:`Lab.close` stops the processes the lab started and then every other
process still inside its namespaces (``ip netns pids``: e.g. a daemon restarted by hand; by PID:
SIGTERM, then SIGKILL), then runs ``ip netns del`` for exactly the namespaces it created, never
any other. It
runs from ``with``/``finally``, from pytest fixture teardown, on SIGTERM/SIGHUP (turned into
``SystemExit`` so ``finally`` blocks run; Ctrl-C already raises ``KeyboardInterrupt``) and, as a
last resort, from an ``atexit`` hook.

Usage (synchronous; everything here is a fast ``ip`` call, fine to call from async tests too)::

    from glbdlab.netns import Lab

    with Lab() as lab:
        a, b = lab.netns("a"), lab.netns("b")
        lab.veth(a, "a-b", b, "b-a", a_addr="198.18.0.1/30", b_addr="198.18.0.2/30")
        a.run(["ping", "-c1", "-W1", "198.18.0.2"])          # in namespace a; raises LabError
        sock = b.socket(socket.AF_INET, socket.SOCK_DGRAM)   # a socket living in namespace b
        proc = await a.spawn(["my-daemon"])                  # asyncio process, killed on close

In pytest (plugin :mod:`glbdlab.pytest_plugin`, loaded from ``tests/conftest.py``)::

    @pytest.mark.netns
    def test_x(netns_lab):                 # a fresh Lab per test, closed after it
        a, b = netns_lab.pair()            # two namespaces joined by one veth, addressed, up

Errors are :class:`LabError` with a one-line message that says what to do; CLIs print it without
a traceback.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import ctypes.util
import fcntl
import ipaddress
import os
import re
import secrets
import select
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

__all__ = [
    "NS_PREFIX",
    "Lab",
    "LabError",
    "Link",
    "Netns",
    "check_ifname",
    "list_lab_namespaces",
    "namespace_pids",
    "new_tag",
    "require_netns",
    "stop_namespace_members",
    "stop_pids",
]

NS_PREFIX = "glb-"
IFNAMSIZ = 15
_CLONE_NEWNET = 0x40000000
_IFNAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_NODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,31}$")


class LabError(RuntimeError):
    """A lab operation failed; ``str(err)`` is one line saying what went wrong and what to do."""


def new_tag() -> str:
    """A fresh random run tag: 6 lowercase hex digits."""
    return secrets.token_hex(3)


def check_ifname(name: str) -> str:
    """Return ``name`` if it is a valid Linux interface name (<= 15 chars), else raise."""
    if not name or len(name) > IFNAMSIZ or not _IFNAME_RE.match(name):
        raise LabError(
            f"bad interface name {name!r}: use 1-{IFNAMSIZ} characters from [A-Za-z0-9_.-]"
        )
    return name


def require_netns() -> None:
    """Raise :class:`LabError` unless this process can create network namespaces."""
    if os.geteuid() != 0:
        raise LabError("network namespaces need root: run this as root (e.g. with sudo)")
    if shutil.which("ip") is None:
        raise LabError("the 'ip' command is missing: apt-get install iproute2")
    if not os.path.exists("/proc/self/ns/net"):
        raise LabError("this kernel has no network namespace support (CONFIG_NET_NS)")


def list_lab_namespaces(tag: str | None = None) -> list[str]:
    """Names of existing namespaces created by a Lab (of ``tag``, or of any run)."""
    prefix = f"{NS_PREFIX}{tag}-" if tag else NS_PREFIX
    try:
        names = os.listdir("/run/netns")
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n.startswith(prefix))


def _one_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return " / ".join(lines[-3:]) if lines else ""


def _run(
    argv: Sequence[str],
    *,
    check: bool = True,
    input: str | None = None,
    timeout: float | None = 30.0,
) -> subprocess.CompletedProcess[str]:
    try:
        res = subprocess.run(
            list(argv),
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
    except FileNotFoundError as exc:
        raise LabError(f"command not found: {argv[0]} (install it)") from exc
    except subprocess.TimeoutExpired as exc:
        raise LabError(f"command timed out after {timeout}s: {' '.join(argv)}") from exc
    if check and res.returncode != 0:
        msg = _one_line(res.stderr) or _one_line(res.stdout) or f"exit {res.returncode}"
        raise LabError(f"{' '.join(argv)}: {msg}")
    return res


# --------------------------------------------------------------------------- setns for sockets

_libc: Any = None


def _setns(fd: int) -> None:
    global _libc
    if hasattr(os, "setns"):  # Python 3.12+
        os.setns(fd, _CLONE_NEWNET)
        return
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise LabError(f"setns failed: {os.strerror(err)}")


# --------------------------------------------------------------------------- objects


def _egress_table(ifname: str) -> str:
    """The netdev table :meth:`Netns.drop_egress` makes for ``ifname`` (one per interface)."""
    return "glblab_egress_" + "".join(c if c.isalnum() else "_" for c in ifname)


@dataclass
class Netns:
    """One network namespace created by a :class:`Lab`. ``node`` is the short logical name."""

    node: str
    name: str
    lab: Lab = field(repr=False, compare=False)

    # --- commands --------------------------------------------------------------------
    def argv(self, argv: Sequence[str]) -> list[str]:
        """``argv`` wrapped to run inside this namespace (``ip netns exec NAME ...``)."""
        return ["ip", "netns", "exec", self.name, *argv]

    def run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        input: str | None = None,
        timeout: float | None = 30.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in this namespace, capture text output; raise LabError if it fails."""
        return _run(self.argv(argv), check=check, input=input, timeout=timeout)

    async def arun(
        self, argv: Sequence[str], *, check: bool = True, timeout: float | None = 30.0
    ) -> subprocess.CompletedProcess[str]:
        """Async :meth:`run`: does not block the event loop."""
        full = self.argv(argv)
        proc = await asyncio.create_subprocess_exec(
            *full,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError as exc:
            proc.kill()
            await proc.wait()
            raise LabError(f"command timed out after {timeout}s: {' '.join(full)}") from exc
        res = subprocess.CompletedProcess(
            full, proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")
        )
        if check and res.returncode != 0:
            msg = _one_line(res.stderr) or _one_line(res.stdout) or f"exit {res.returncode}"
            raise LabError(f"{' '.join(full)}: {msg}")
        return res

    def ip(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``ip -n NAME ARGS...`` (no extra process for ``netns exec``)."""
        return _run(["ip", "-n", self.name, *args], check=check)

    def ip_batch(self, commands: Sequence[str]) -> None:
        """Several ``ip`` commands (without the leading ``ip``) in one process."""
        if commands:
            _run(["ip", "-n", self.name, "-batch", "-"], input="\n".join(commands) + "\n")

    def popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        """Start a process in this namespace. Its stdin defaults to /dev/null, its stdout and
        stderr to /dev/null (pass ``stdout=``/``stderr=`` to keep them). The lab stops it by PID
        on close."""
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        kwargs.setdefault("stdout", subprocess.DEVNULL)
        kwargs.setdefault("stderr", subprocess.DEVNULL)
        proc: subprocess.Popen[bytes] = subprocess.Popen(self.argv(argv), **kwargs)
        self.lab._track(proc)
        return proc

    async def spawn(self, argv: Sequence[str], **kwargs: Any) -> asyncio.subprocess.Process:
        """asyncio version of :meth:`popen` (same defaults; stopped by PID on lab close)."""
        kwargs.setdefault("stdin", asyncio.subprocess.DEVNULL)
        kwargs.setdefault("stdout", asyncio.subprocess.DEVNULL)
        kwargs.setdefault("stderr", asyncio.subprocess.DEVNULL)
        proc = await asyncio.create_subprocess_exec(*self.argv(argv), **kwargs)
        self.lab._track(proc.pid)
        return proc

    # --- in-process access --------------------------------------------------------------
    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """Switch the *calling thread* into this namespace for the ``with`` body.

        Sockets (and netlink sockets, e.g. pyroute2 ``IPRoute()``) created inside the body stay
        in this namespace after the body ends. Keep the body short and synchronous: other code
        running on the same thread meanwhile would also see this namespace."""
        with (
            open(f"/run/netns/{self.name}", "rb") as target,
            open("/proc/thread-self/ns/net", "rb") as home,
        ):
            _setns(target.fileno())
            try:
                yield
            finally:
                _setns(home.fileno())

    def socket(
        self, family: int = socket.AF_INET, type: int = socket.SOCK_DGRAM, proto: int = 0
    ) -> socket.socket:
        """A new socket that lives in this namespace (the caller owns and closes it)."""
        with self.entered():
            return socket.socket(family, type, proto)

    # --- addressing ---------------------------------------------------------------------
    def addr_add(self, ifname: str, cidr: str) -> None:
        """Add ``cidr`` (e.g. ``198.18.0.1/31`` or ``2001:db8::1/127``) to ``ifname``."""
        iface = ipaddress.ip_interface(cidr)
        args = ["addr", "add", str(iface), "dev", ifname]
        if iface.version == 6:
            args.append("nodad")
        self.ip(*args)

    def link_up(self, ifname: str) -> None:
        self.ip("link", "set", ifname, "up")

    def tx_checksum_off(self, ifname: str) -> None:
        """``ethtool -K ifname tx off`` (the SIOCETHTOOL ioctl, ETHTOOL_STXCSUM): frames leave
        with their checksums filled in, as from a NIC onto a wire, instead of the partial
        checksum a veth passes to its peer (which a tc program on the peer cannot verify)."""
        value = ctypes.create_string_buffer(struct.pack("=II", _ETHTOOL_STXCSUM, 0), 8)
        ifr = struct.pack("16sP", ifname.encode(), ctypes.addressof(value)).ljust(40, b"\0")
        s = self.socket()
        try:
            fcntl.ioctl(s.fileno(), _SIOCETHTOOL, ifr)
        finally:
            s.close()

    def drop_egress(self, ifname: str, match: str = "") -> None:
        """Silently drop what leaves ``ifname`` (optionally only what nft ``match`` selects,
        e.g. ``udp dport 3784``): an nftables netdev egress hook, after every local hook and
        socket (senders see no error), so the other end receives nothing, not even at its tc
        ingress, where a BPF program could take packets before an input-hook drop."""
        rule = f"{match} drop" if match else "drop"
        self.run(
            ["nft", "-f", "-"],
            input=(
                f"table netdev {_egress_table(ifname)} {{\n"
                f'  chain out {{\n    type filter hook egress device "{ifname}" priority -10;\n'
                f"  }}\n}}\nadd rule netdev {_egress_table(ifname)} out {rule}\n"
            ),
        )

    def undrop_egress(self, ifname: str) -> None:
        self.run(["nft", "delete", "table", "netdev", _egress_table(ifname)], check=False)

    def link_down(self, ifname: str) -> None:
        self.ip("link", "set", ifname, "down")

    def ping(self, dst: str, *, count: int = 1, wait: float = 2.0, size: int = 56) -> bool:
        """True if ``dst`` answers an ICMP(v6) echo; up to ``count`` tries, ``wait`` s each.

        Done in-process with a raw socket in this namespace (no ``ping`` binary needed)."""
        addr = ipaddress.ip_address(dst)
        v6 = addr.version == 6
        family, proto = (
            (socket.AF_INET6, socket.IPPROTO_ICMPV6)
            if v6
            else (socket.AF_INET, socket.IPPROTO_ICMP)
        )
        ident = secrets.randbits(16)
        payload = secrets.token_bytes(size)
        with self.socket(family, socket.SOCK_RAW, proto) as sock:
            for seq in range(1, count + 1):
                hdr = struct.pack("!BBHHH", 128 if v6 else 8, 0, 0, ident, seq)
                pkt = hdr + payload
                if not v6:  # the kernel fills in the ICMPv6 checksum itself
                    pkt = hdr[:2] + struct.pack("!H", _inet_cksum(pkt)) + hdr[4:] + payload
                try:
                    sock.sendto(pkt, (str(addr), 0))
                except OSError:
                    time.sleep(min(wait, 0.2))
                    continue
                deadline = time.monotonic() + wait
                while (left := deadline - time.monotonic()) > 0:
                    ready, _, _ = select.select([sock], [], [], left)
                    if not ready:
                        break
                    data, peer = sock.recvfrom(65535)
                    if not v6:
                        data = data[(data[0] & 0x0F) * 4 :]  # strip the IPv4 header
                    if len(data) < 8 or ipaddress.ip_address(peer[0].split("%")[0]) != addr:
                        continue
                    typ, _, _, rid, rseq = struct.unpack("!BBHHH", data[:8])
                    if (typ, rid, rseq) == (129 if v6 else 0, ident, seq):
                        return True
        return False


_SIOCETHTOOL = 0x8946
_ETHTOOL_STXCSUM = 0x17


def _inet_cksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


@dataclass(frozen=True)
class Link:
    """A veth pair: ``a_if`` in namespace ``a``, ``b_if`` in namespace ``b``."""

    a: Netns
    a_if: str
    b: Netns
    b_if: str


# --------------------------------------------------------------------------- the Lab

_LIVE: set[Lab] = set()
_LIVE_LOCK = threading.Lock()
_HANDLERS_INSTALLED = False


def _signal_to_exit(signum: int, frame: FrameType | None) -> None:
    # Turn SIGTERM/SIGHUP into SystemExit so `finally` blocks and atexit run and clean up.
    raise SystemExit(128 + signum)


def _install_handlers() -> None:
    global _HANDLERS_INSTALLED
    if _HANDLERS_INSTALLED:
        return
    _HANDLERS_INSTALLED = True
    atexit.register(_close_all)
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGHUP):
        with contextlib.suppress(ValueError, OSError):
            if signal.getsignal(sig) in (signal.SIG_DFL, None):
                signal.signal(sig, _signal_to_exit)


def _close_all() -> None:
    with _LIVE_LOCK:
        labs = list(_LIVE)
    for lab in labs:
        with contextlib.suppress(Exception):
            lab.close()


class Lab:
    """Creates namespaces and veth links under one random run tag and deletes them on close.

    Use as a context manager (or call :meth:`close` in ``finally``). ``close`` is idempotent and
    also runs on SIGTERM/SIGHUP/Ctrl-C and at interpreter exit."""

    def __init__(self, tag: str | None = None) -> None:
        require_netns()
        self.tag = tag or new_tag()
        if not re.fullmatch(r"[a-z0-9]{1,12}", self.tag):
            raise LabError(f"bad lab tag {self.tag!r}: use 1-12 characters [a-z0-9]")
        self.namespaces: dict[str, Netns] = {}
        self.links: list[Link] = []
        self._pids: list[subprocess.Popen[bytes] | int] = []
        self._cleanups: list[Any] = []
        self._closed = False
        _install_handlers()
        with _LIVE_LOCK:
            _LIVE.add(self)

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Lab(tag={self.tag!r}, namespaces={sorted(self.namespaces)})"

    # --- creation -----------------------------------------------------------------------
    def ns_name(self, node: str) -> str:
        return f"{NS_PREFIX}{self.tag}-{node}"

    def netns(self, node: str, *, forwarding: bool = True) -> Netns:
        """Create namespace ``glb-<tag>-<node>`` with ``lo`` up (and IP forwarding on)."""
        if self._closed:
            raise LabError("this Lab is closed")
        if not _NODE_RE.match(node):
            raise LabError(f"bad node name {node!r}: use 1-32 characters [A-Za-z0-9_-]")
        if node in self.namespaces:
            raise LabError(f"namespace for node {node!r} already exists in this lab")
        name = self.ns_name(node)
        if os.path.exists(f"/run/netns/{name}"):  # another run's: never ours to delete
            raise LabError(f"namespace {name} exists already")
        ns = Netns(node=node, name=name, lab=self)
        # registered before it is made: an interrupt (Ctrl-C) during the add, after the
        # kernel made it, still leaves it to close(), which skips one that never came
        self.namespaces[node] = ns
        try:
            _run(["ip", "netns", "add", name])
        except LabError:
            del self.namespaces[node]
            raise
        cmds = ["link set lo up"]
        ns.ip_batch(cmds)
        # No IPv6 DAD: addresses (incl. link-local) are usable at once, no 1-2 s "tentative".
        sysctls = ["net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0"]
        if forwarding:
            sysctls += ["net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"]
        ns.run(["sysctl", "-q", "-w", *sysctls])
        return ns

    def veth(
        self,
        a: Netns,
        a_if: str,
        b: Netns,
        b_if: str,
        *,
        a_addr: str | Sequence[str] | None = None,
        b_addr: str | Sequence[str] | None = None,
        up: bool = True,
    ) -> Link:
        """A veth pair created directly in both namespaces, optionally addressed, and up; transmit
        checksum offload is off at both ends (:meth:`Netns.tx_checksum_off`)."""
        check_ifname(a_if)
        check_ifname(b_if)
        _run(
            [
                "ip", "link", "add", a_if, "netns", a.name,
                "type", "veth", "peer", "name", b_if, "netns", b.name,
            ]
        )  # fmt: skip
        link = Link(a, a_if, b, b_if)
        self.links.append(link)
        for ns, ifname, addrs in ((a, a_if, a_addr), (b, b_if, b_addr)):
            ns.tx_checksum_off(ifname)  # a wire between NICs: real checksums on every frame
            cmds = []
            for cidr in [addrs] if isinstance(addrs, str) else list(addrs or []):
                iface = ipaddress.ip_interface(cidr)
                extra = " nodad" if iface.version == 6 else ""
                cmds.append(f"addr add {iface} dev {ifname}{extra}")
            if up:
                cmds.append(f"link set {ifname} up")
            ns.ip_batch(cmds)
        return link

    def pair(
        self,
        a_node: str = "a",
        b_node: str = "b",
        *,
        a_addr: str = "198.18.0.1/30",
        b_addr: str = "198.18.0.2/30",
    ) -> tuple[Netns, Netns]:
        """Two new namespaces joined by veth ``<a_node>-<b_node>`` / ``<b_node>-<a_node>``
        (names truncated to 15 chars), addressed and up. The common two-namespace test setup."""
        a, b = self.netns(a_node), self.netns(b_node)
        a_if = f"{a_node}-{b_node}"[:IFNAMSIZ]
        b_if = f"{b_node}-{a_node}"[:IFNAMSIZ]
        self.veth(a, a_if, b, b_if, a_addr=a_addr, b_addr=b_addr)
        return a, b

    def remove(self, node: str) -> None:
        """Delete one namespace of this lab now (no-op if it does not exist)."""
        ns = self.namespaces.pop(node, None)
        if ns is not None:
            self.links = [ln for ln in self.links if ns not in (ln.a, ln.b)]
            stop_namespace_members([ns.name])
            res = _run(["ip", "netns", "del", ns.name], check=False)
            if res.returncode != 0 and os.path.exists(f"/run/netns/{ns.name}"):
                raise LabError(f"ip netns del {ns.name}: {_one_line(res.stderr)}")

    def on_close(self, fn: Any) -> None:
        """Register ``fn()`` to run at close, before the namespaces are deleted (LIFO)."""
        self._cleanups.append(fn)

    def _track(self, proc: subprocess.Popen[bytes] | int) -> None:
        self._pids.append(proc)

    # --- teardown -----------------------------------------------------------------------
    def detach(self) -> list[int]:
        """Give up ownership: nothing is deleted on close/exit (``glbd-lab up --detach``; then
        ``glbd-lab down`` deletes by the names it recorded). Returns the tracked PIDs."""
        pids = [_pid(p) for p in self._pids if _alive(p)]
        self._pids.clear()
        self._cleanups.clear()
        self._closed = True
        with _LIVE_LOCK:
            _LIVE.discard(self)
        return pids

    def close(self) -> None:
        """Stop tracked processes by PID, run on_close hooks, delete this lab's namespaces.

        Idempotent. Errors are collected and raised as one LabError at the end, after every
        namespace deletion was attempted."""
        if self._closed:
            return
        self._closed = True
        errors: list[str] = []
        while self._cleanups:
            fn = self._cleanups.pop()
            try:
                fn()
            except Exception as exc:
                errors.append(f"cleanup {getattr(fn, '__name__', fn)!s}: {exc}")
        _stop_pids(self._pids)
        self._pids.clear()
        # deleting a namespace only unlinks its name: whatever still runs inside would go on
        stop_namespace_members([ns.name for ns in self.namespaces.values()])
        for ns in reversed(list(self.namespaces.values())):
            res = _run(["ip", "netns", "del", ns.name], check=False)
            if res.returncode != 0 and os.path.exists(f"/run/netns/{ns.name}"):
                errors.append(f"ip netns del {ns.name}: {_one_line(res.stderr)}")
        self.namespaces.clear()
        self.links.clear()
        with _LIVE_LOCK:
            _LIVE.discard(self)
        if errors:
            raise LabError("lab cleanup: " + "; ".join(errors))


def _alive(proc: subprocess.Popen[bytes] | int) -> bool:
    """Still running? A Popen is polled (and so reaped); a bare PID (an asyncio child, reaped by
    asyncio's watcher) is looked up in /proc, where a zombie counts as gone."""
    if isinstance(proc, subprocess.Popen):
        return proc.poll() is None
    try:
        with open(f"/proc/{proc}/stat", "rb") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return False
    state = stat.rsplit(b")", 1)[-1].split()[:1]
    return state not in ([b"Z"], [b"X"])


def _pid(proc: subprocess.Popen[bytes] | int) -> int:
    return proc.pid if isinstance(proc, subprocess.Popen) else proc


def _stop_pids(procs: Sequence[subprocess.Popen[bytes] | int], grace: float = 3.0) -> None:
    """SIGTERM each process, wait up to ``grace`` seconds, then SIGKILL the rest. By PID only."""
    live = [p for p in procs if _alive(p)]
    for proc in live:
        with contextlib.suppress(ProcessLookupError):
            os.kill(_pid(proc), signal.SIGTERM)
    deadline = time.monotonic() + grace
    while live and time.monotonic() < deadline:
        live = [p for p in live if _alive(p)]
        if live:
            time.sleep(0.02)
    for proc in live:
        with contextlib.suppress(ProcessLookupError):
            os.kill(_pid(proc), signal.SIGKILL)
    for proc in procs:
        if isinstance(proc, subprocess.Popen):
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=grace)


def stop_pids(procs: Sequence[subprocess.Popen[bytes] | int], grace: float = 3.0) -> None:
    """Stop processes (Popen objects or PIDs) by PID: SIGTERM, wait ``grace`` s, SIGKILL."""
    _stop_pids(procs, grace)


def namespace_pids(name: str) -> list[int]:
    """PIDs of the processes inside namespace ``name`` (``ip netns pids``), never our own."""
    if not os.path.exists(f"/run/netns/{name}"):
        return []
    res = _run(["ip", "netns", "pids", name], check=False)
    pids = [int(w) for w in res.stdout.split() if w.isdigit()]
    return [p for p in pids if p != os.getpid()]


def stop_namespace_members(names: Sequence[str], grace: float = 3.0) -> list[int]:
    """Stop every process inside the namespaces ``names`` (SIGTERM, ``grace`` s, SIGKILL; by
    PID). Returns the PIDs found."""
    pids = sorted({p for name in names for p in namespace_pids(name)})
    if pids:
        _stop_pids(pids, grace)
    return pids
