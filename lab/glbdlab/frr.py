"""FRR instances in lab namespaces: FRR 10.x from the sid chroot, or the host's FRR 8.4.

Each instance runs its daemons in the foreground (``subprocess.Popen``, stdout/stderr to a log
file), inside its node's namespace and its own UTS namespace (so BGP's hostname capability shows
the node name), and is stopped by PID (SIGTERM, then SIGKILL) -- never pkill.

* ``build="sid"`` (default): FRR 10.x from ``glbd-lab provision``'s chroot (see
  :mod:`glbdlab.provision`). Daemons are ``chroot <root> /usr/lib/frr/<d> -N <pathspace>``, with
  ``/proc`` mounted in a private mount namespace; state lives in ``<root>/etc/frr/<ps>``,
  ``<root>/run/frr/<ps>`` and ``<root>/var/log/frr/<ps>`` and is removed on stop.
  Daemons: mgmtd, zebra, bgpd, bfdd, staticd.
* ``build="host"``: bookworm's FRR 8.4 in ``/usr/lib/frr`` (legacy interop). It does not use
  ``-N`` (that would write to the host's ``/etc/frr``): each instance gets a private directory
  ``/run/glbd-lab/frr/<ps>`` (``-f /dev/null --vty_socket DIR -z DIR/zserv.api -i DIR/<d>.pid``).
  Daemons: zebra, bgpd, bfdd, staticd.

The pathspace name is the namespace name (``glb-<tag>-<node>``), so it is unique per run. In both
cases the config is pushed with the instance's own vtysh (10.x's from the chroot; never the host's
8.4 vtysh against 10.x daemons).

Usage::

    from glbdlab.frr import FrrInstance

    r1 = FrrInstance(lab.netns("r1"), hostname="r1")          # or build="host" for FRR 8.4
    r1.start("frr defaults datacenter\\nrouter bgp 65001\\n ...")  # stopped when the Lab closes
    r1.wait_bgp_established(["198.18.0.2"], timeout=30)
    routes = r1.vtysh_json("show ip route json")

For a :class:`glbdlab.topology.Fabric`, :func:`fabric_bgp_config` writes a node's eBGP config
(numbered neighbours on every link, BFD, multipath-relax) and :func:`start_fabric_frr` starts
instances on chosen nodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from glbdlab.netns import LabError, Netns, stop_pids
from glbdlab.provision import require_chroot

if TYPE_CHECKING:
    from glbdlab.topology import Fabric

__all__ = [
    "FrrBuild",
    "FrrInstance",
    "fabric_bgp_config",
    "frr_build",
    "start_fabric_frr",
]

BuildKind = Literal["sid", "host"]
SID_DAEMONS = ("mgmtd", "zebra", "bgpd", "bfdd", "staticd")
HOST_DAEMONS = ("zebra", "bgpd", "bfdd", "staticd")
HOST_RUN_DIR = Path("/run/glbd-lab/frr")


@dataclass(frozen=True)
class FrrBuild:
    """Which FRR to run: ``root`` is the chroot (``/`` for the host's FRR)."""

    kind: BuildKind
    root: Path
    version: str

    @property
    def major(self) -> int:
        return int(self.version.split(".", 1)[0])


def frr_build(kind: BuildKind = "sid") -> FrrBuild:
    """The sid chroot's FRR 10.x, or the host's FRR (one-line LabError if missing)."""
    if kind == "sid":
        ch = require_chroot()
        return FrrBuild("sid", ch.root, ch.frr_version)
    if kind == "host":
        if not Path("/usr/lib/frr/bgpd").exists() or shutil.which("vtysh") is None:
            raise LabError("the host's FRR is not installed: apt-get install frr")
        res = subprocess.run(
            ["dpkg-query", "-W", "-f=${Version}", "frr"], capture_output=True, text=True
        )
        return FrrBuild("host", Path("/"), res.stdout.strip() or "unknown")
    raise LabError(f"unknown FRR build {kind!r}: use 'sid' or 'host'")


def _ids(root: Path) -> tuple[int, int, int]:
    """(uid of frr, gid of frr, gid of frrvty) in ``root``'s passwd/group."""
    uid = gid = vty = -1
    for line in (root / "etc/passwd").read_text().splitlines():
        f = line.split(":")
        if f[0] == "frr":
            uid, gid = int(f[2]), int(f[3])
    for line in (root / "etc/group").read_text().splitlines():
        f = line.split(":")
        if f[0] == "frrvty":
            vty = int(f[2])
    if uid < 0:
        raise LabError(f"no 'frr' user in {root}/etc/passwd: reinstall frr there")
    return uid, gid, vty


class FrrInstance:
    """One FRR instance (a set of daemons) in one namespace."""

    def __init__(
        self,
        ns: Netns,
        *,
        build: BuildKind | FrrBuild = "sid",
        hostname: str | None = None,
        daemons: Sequence[str] | None = None,
        pathspace: str | None = None,
    ) -> None:
        self.ns = ns
        self.build = build if isinstance(build, FrrBuild) else frr_build(build)
        self.hostname = hostname or ns.node
        self.name = pathspace or ns.name
        self.daemons = tuple(daemons or (SID_DAEMONS if self.build.kind == "sid" else HOST_DAEMONS))
        root = self.build.root
        if self.build.kind == "sid":
            self.etc_dir = root / "etc/frr" / self.name
            self.run_dir = root / "run/frr" / self.name
            self.log_dir = root / "var/log/frr" / self.name
        else:
            self.etc_dir = self.run_dir = self.log_dir = HOST_RUN_DIR / self.name
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.started = False
        self._stopped = False

    def __repr__(self) -> str:
        return f"FrrInstance({self.name!r}, FRR {self.build.version}, ns={self.ns.name!r})"

    # --- paths inside the instance's view -----------------------------------------------------
    def _inner(self, path: Path) -> str:
        """``path`` as the daemons see it (relative to the chroot)."""
        if self.build.kind == "sid":
            return "/" + str(path.relative_to(self.build.root))
        return str(path)

    def _daemon_argv(self, daemon: str) -> list[str]:
        log = f"file:{self._inner(self.log_dir / f'{daemon}.log')}"
        if self.build.kind == "sid":
            inner = [f"/usr/lib/frr/{daemon}", "-N", self.name, "-A", "127.0.0.1", "--log", log]
            root = str(self.build.root)
            script = (
                f'mount -t proc proc "{root}/proc" && hostname "$0" && exec chroot "{root}" "$@"'
            )
            return [
                "unshare", "--uts", "--mount", "--propagation", "private",
                "sh", "-c", script, self.hostname, *inner,
            ]  # fmt: skip
        d = str(self.run_dir)
        inner = [
            f"/usr/lib/frr/{daemon}", "-f", "/dev/null", "--vty_socket", d,
            "-z", f"{d}/zserv.api", "-i", f"{d}/{daemon}.pid", "-A", "127.0.0.1", "--log", log,
        ]  # fmt: skip
        if daemon == "bfdd":
            inner += ["--bfdctl", f"{d}/bfdd.sock"]
        return ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', self.hostname, *inner]

    def _vtysh_argv(self, *args: str) -> list[str]:
        if self.build.kind == "sid":
            return ["chroot", str(self.build.root), "vtysh", "-N", self.name, *args]
        return ["vtysh", "--vty_socket", str(self.run_dir), *args]

    # --- lifecycle ------------------------------------------------------------------------------
    def start(self, config: str, *, timeout: float = 20.0) -> FrrInstance:
        """Start the daemons, then push ``config`` (an integrated frr.conf) with vtysh."""
        if self.started:
            raise LabError(f"{self!r} is already started")
        self.started = True
        self.ns.lab.on_close(self.stop)
        uid, gid, vty = _ids(self.build.root)
        for d in {self.etc_dir, self.run_dir, self.log_dir}:
            if d.exists():
                shutil.rmtree(d)
            d.mkdir(parents=True)
            os.chown(d, uid, gid)
        conf = self.etc_dir / "frr.conf"
        conf.write_text(config if config.endswith("\n") else config + "\n")
        os.chown(conf, uid, gid)
        if self.build.kind == "sid":
            vconf = self.etc_dir / "vtysh.conf"
            vconf.write_text("service integrated-vtysh-config\n")
            os.chown(vconf, uid, vty if vty >= 0 else gid)
        for daemon in self.daemons:
            out = open(self.log_dir / f"{daemon}.out", "wb")  # noqa: SIM115
            try:
                self.procs[daemon] = self.ns.popen(
                    self._daemon_argv(daemon), stdout=out, stderr=subprocess.STDOUT
                )
            finally:
                out.close()
            self._wait_vty(daemon, timeout)
        if self.build.kind == "sid":
            res = self._vtysh(["-b"], check=False)
        else:
            res = self._vtysh(["-f", str(conf)], check=False)
        if res.returncode not in (0,):
            errs = [ln for ln in (res.stdout + res.stderr).splitlines() if ln.strip()]
            raise LabError(f"{self.name}: config not applied: {' / '.join(errs[-3:])}")
        return self

    def _wait_vty(self, daemon: str, timeout: float) -> None:
        sock = self.run_dir / f"{daemon}.vty"
        deadline = time.monotonic() + timeout
        while not sock.exists():
            proc = self.procs[daemon]
            if proc.poll() is not None:
                out = (self.log_dir / f"{daemon}.out").read_text(errors="replace").strip()
                last = out.splitlines()[-1] if out else f"exit {proc.returncode}"
                raise LabError(f"{self.name}: {daemon} exited at start: {last}")
            if time.monotonic() > deadline:
                raise LabError(f"{self.name}: {daemon} did not open its vty in {timeout}s")
            time.sleep(0.01)

    def stop(self) -> None:
        """Stop the daemons by PID (reverse start order), delete the instance's directories."""
        if self._stopped:
            return
        self._stopped = True
        stop_pids(list(reversed(self.procs.values())))
        for d in {self.etc_dir, self.run_dir, self.log_dir}:
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(d)

    def kill_daemon(self, daemon: str) -> None:
        """SIGKILL one daemon by PID (a crash, e.g. bgpd for a graceful restart test)."""
        proc = self.procs[daemon]
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)

    def restart_daemon(self, daemon: str, *, timeout: float = 20.0) -> None:
        """Start ``daemon`` again after :meth:`kill_daemon` and push the config to it."""
        if self.procs[daemon].poll() is None:
            raise LabError(f"{self.name}: {daemon} is still running")
        with contextlib.suppress(FileNotFoundError):
            (self.run_dir / f"{daemon}.vty").unlink()  # left by the killed daemon
        out = open(self.log_dir / f"{daemon}.out", "ab")  # noqa: SIM115
        try:
            self.procs[daemon] = self.ns.popen(
                self._daemon_argv(daemon), stdout=out, stderr=subprocess.STDOUT
            )
        finally:
            out.close()
        self._wait_vty(daemon, timeout)
        if self.build.kind == "sid":
            self._vtysh(["-b"])
        else:
            self._vtysh(["-f", str(self.etc_dir / "frr.conf")])

    def state(self) -> dict[str, Any]:
        """JSON-safe record for ``glbd-lab down/status`` of a detached fabric."""
        return {
            "name": self.name,
            "node": self.ns.node,
            "build": self.build.kind,
            "version": self.build.version,
            "pids": {d: p.pid for d, p in self.procs.items()},
            "dirs": sorted({str(self.etc_dir), str(self.run_dir), str(self.log_dir)}),
            "vtysh": self._vtysh_argv(),
        }

    def alive(self) -> dict[str, bool]:
        return {d: p.poll() is None for d, p in self.procs.items()}

    def logs(self) -> dict[str, str]:
        """Daemon logs (``<d>.log`` and captured stdout/stderr ``<d>.out``), while running."""
        out: dict[str, str] = {}
        for f in sorted(self.log_dir.glob("*.*")) if self.log_dir.exists() else []:
            if f.suffix in (".log", ".out"):
                out[f.name] = f.read_text(errors="replace")
        return out

    # --- vtysh ----------------------------------------------------------------------------------
    def _vtysh(
        self, args: Sequence[str], *, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        res = subprocess.run(
            self._vtysh_argv(*args),
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=30,
        )
        if check and res.returncode != 0:
            msg = " / ".join((res.stderr or res.stdout).strip().splitlines()[-2:])
            raise LabError(f"{self.name}: vtysh {' '.join(args)}: {msg or res.returncode}")
        return res

    def vtysh(self, *commands: str) -> str:
        """Run vtysh commands (each a ``-c``) and return the text output."""
        args: list[str] = []
        for c in commands:
            args += ["-c", c]
        return self._vtysh(args).stdout

    def vtysh_json(self, command: str) -> Any:
        """Run one ``show ... json`` command and return the parsed JSON."""
        out = self.vtysh(command)
        try:
            return json.loads(out) if out.strip() else {}
        except ValueError as exc:
            raise LabError(f"{self.name}: '{command}' did not return JSON: {out[:200]!r}") from exc

    def configure(self, *lines: str) -> str:
        """``configure terminal`` + ``lines`` (each one vtysh command)."""
        return self.vtysh("configure terminal", *lines)

    async def avtysh_json(self, command: str) -> Any:
        return await asyncio.to_thread(self.vtysh_json, command)

    # --- waits ----------------------------------------------------------------------------------
    def bgp_peers(self) -> dict[str, str]:
        """{peer address: BGP state} over IPv4 and IPv6 unicast."""
        summ = self.vtysh_json("show bgp summary json")
        peers: dict[str, str] = {}
        for af in summ.values() if isinstance(summ, dict) else []:
            if isinstance(af, dict):
                for addr, p in af.get("peers", {}).items():
                    peers[addr] = str(p.get("state", "?"))
        return peers

    def bfd_peers(self) -> dict[str, str]:
        """{peer address: BFD status}."""
        data = self.vtysh_json("show bfd peers json")
        return {str(p.get("peer")): str(p.get("status")) for p in data or []}

    def bfd_bound(self) -> dict[str, str]:
        """{peer address: BFD status}, "unbound" while bgpd has not yet told bfdd the session's
        source address. bgpd learns it when BGP first establishes and then installs the
        session anew: the new session starts Down and signals it, which takes a session that
        was already up down with it (and the BGP session on top, on either side)."""
        data = self.vtysh_json("show bfd peers json")
        return {
            str(p.get("peer")): str(p.get("status")) if p.get("local") else "unbound"
            for p in data or []
        }

    def wait_settled(self, peers: Iterable[str], timeout: float = 60) -> None:
        """Wait until the sessions to ``peers`` are past FRR's start-up: BGP Established and
        BFD up on its source address (see :meth:`bfd_bound`), so no reset is still to come."""
        peers = list(peers)
        self._wait("BFD", self.bfd_bound, "up", peers, timeout)
        self._wait("BGP", self.bgp_peers, "Established", peers, timeout)

    def _wait(
        self, what: str, get: Any, want: str, peers: Iterable[str] | None, timeout: float
    ) -> None:
        deadline = time.monotonic() + timeout
        wanted = set(peers) if peers is not None else None
        last: dict[str, str] = {}
        while True:
            last = get()
            keys = wanted if wanted is not None else set(last)
            if keys and all(last.get(k) == want for k in keys):
                return
            if time.monotonic() > deadline:
                bad = {k: last.get(k, "absent") for k in sorted(keys) if last.get(k) != want}
                raise LabError(f"{self.name}: {what} not {want} after {timeout}s: {bad or last}")
            if not all(self.alive().values()):
                raise LabError(f"{self.name}: a daemon died: {self.alive()}")
            time.sleep(0.2)

    def wait_bgp_established(self, peers: Iterable[str] | None = None, timeout: float = 30) -> None:
        """Wait until ``peers`` (default: every configured peer) are Established."""
        self._wait("BGP", self.bgp_peers, "Established", peers, timeout)

    def wait_bfd_up(self, peers: Iterable[str] | None = None, timeout: float = 30) -> None:
        """Wait until the BFD sessions to ``peers`` (default: all) are up."""
        self._wait("BFD", self.bfd_peers, "up", peers, timeout)

    def wait_route(self, prefix: str, *, protocol: str = "bgp", timeout: float = 30) -> Any:
        """Wait until ``prefix`` is in the RIB via ``protocol``; return its route JSON list."""
        six = ipaddress.ip_network(prefix, strict=False).version == 6
        cmd = f"show {'ipv6' if six else 'ip'} route {prefix} json"
        deadline = time.monotonic() + timeout
        while True:
            data = self.vtysh_json(cmd)
            entries = data.get(prefix, []) if isinstance(data, dict) else []
            if any(e.get("protocol") == protocol for e in entries):
                return entries
            if time.monotonic() > deadline:
                raise LabError(f"{self.name}: no {protocol} route to {prefix} after {timeout}s")
            time.sleep(0.2)

    async def await_bgp_established(
        self, peers: Iterable[str] | None = None, timeout: float = 30
    ) -> None:
        await asyncio.to_thread(self.wait_bgp_established, peers, timeout)

    async def await_bfd_up(self, peers: Iterable[str] | None = None, timeout: float = 30) -> None:
        await asyncio.to_thread(self.wait_bfd_up, peers, timeout)


# ------------------------------------------------------------------------------ fabric helpers


def fabric_bgp_config(
    fab: Fabric,
    node: str,
    *,
    peers: Iterable[str] | None = None,
    bfd: bool = True,
    networks: Iterable[str] = (),
    originate_own: bool = True,
    nhc_to: Iterable[str] = (),
    extra_bgp: Iterable[str] = (),
    extra: str = "",
    legacy: bool = False,
    bfd_interval_ms: int | None = None,
    bfd_detect_mult: int = 3,
    timers: tuple[int, int] = (1, 3),
) -> str:
    """frr.conf for ``node`` of a fabric: eBGP to the far end of each of its links (restricted to
    ``peers`` if given), IPv4 unicast, multipath-relax, fast timers, BFD, announcing its
    loopback and its host prefix (leaves; unless ``originate_own=False``) and ``networks``;
    ``send-nexthop-characteristics`` toward
    the peers named in ``nhc_to``. ``legacy=True`` leaves out 10.x-only commands.
    ``bfd_interval_ms`` sets BFD's transmit and receive intervals (a profile; FRR's own default
    is 300 ms), so FRR can run the timers glbd runs. ``timers``: BGP keepalive and hold time
    (the lab's fast 1/3 by default; FRR's datacenter defaults are 3/9)."""
    me = fab.topo.node(node)
    if me.asn is None or me.router_id is None:
        raise LabError(f"{node} is a host: it runs no BGP")
    nhc = set(nhc_to)
    lines = [
        "frr defaults datacenter",
        f"hostname {node}",
        "log timestamp precision 3",
        "!",
        f"router bgp {me.asn}",
        f" bgp router-id {me.router_id}",
        " no bgp ebgp-requires-policy",
        " no bgp network import-check",
        " bgp bestpath as-path multipath-relax",
    ]
    af = [" address-family ipv4 unicast"]
    for ln in fab.topo.links_of(node):
        _, _, _, peer = ln.end(node)
        other = fab.topo.node(peer)
        if other.asn is None or (peers is not None and peer not in set(peers)):
            continue
        addr = fab.addr(peer, node)
        lines += [
            f" neighbor {addr} remote-as {other.asn}",
            f" neighbor {addr} description {peer}",
            f" neighbor {addr} timers {timers[0]} {timers[1]}",
            f" neighbor {addr} timers connect 1",
        ]
        if bfd:
            lines.append(f" neighbor {addr} bfd")
            if bfd_interval_ms is not None:
                lines.append(f" neighbor {addr} bfd profile glbd-lab")
        if peer in nhc and not legacy:
            lines.append(f" neighbor {addr} send-nexthop-characteristics")
        af.append(f"  neighbor {addr} activate")
    lines += list(extra_bgp)
    nets = [me.loopback4] if me.loopback4 and originate_own else []
    if me.prefix4 and originate_own:
        nets.append(me.prefix4)
    nets += list(networks)
    for net in nets:
        if net and ipaddress.ip_network(net, strict=False).version == 4:
            af.append(f"  network {net}")
    af += ["  maximum-paths 64", " exit-address-family"]
    prof = []
    if bfd and bfd_interval_ms is not None:
        prof = [
            "bfd",
            " profile glbd-lab",
            f"  detect-multiplier {bfd_detect_mult}",
            f"  receive-interval {bfd_interval_ms}",
            f"  transmit-interval {bfd_interval_ms}",
            " exit",
            "exit",
            "!",
        ]
    return "\n".join([*prof, *lines, *af, "exit", "!", extra, ""]).replace("\n\n", "\n")


def start_fabric_frr(
    fab: Fabric,
    nodes: Iterable[str],
    *,
    build: BuildKind | FrrBuild = "sid",
    config: dict[str, str] | None = None,
    peers: Iterable[str] | None = None,
    **cfg: Any,
) -> dict[str, FrrInstance]:
    """Start FRR on ``nodes`` of ``fab`` with :func:`fabric_bgp_config` (or ``config[node]``).
    Each peers with every BGP neighbour on its links, or only with those in ``peers``. Stopped
    when the fabric's Lab closes."""
    names = list(nodes)
    only = list(peers) if peers is not None else None
    b = build if isinstance(build, FrrBuild) else frr_build(build)
    out: dict[str, FrrInstance] = {}
    for n in names:
        conf = (config or {}).get(n) or fabric_bgp_config(
            fab, n, peers=only, legacy=b.kind == "host", **cfg
        )
        out[n] = FrrInstance(fab.ns(n), build=b, hostname=n).start(conf)
    return out
