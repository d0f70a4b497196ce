"""glbd-lab: build and inspect the glbd lab (leaf-spine fabric of network namespaces + FRR).

  glbd-lab provision        build the FRR 10.x chroot once (cached; instant when done)
  glbd-lab up [--once|--detach] [--spines N --leaves N] [--frr all|spines|none]
                            build the fabric; by default stay in the foreground until Ctrl-C
  glbd-lab status [TAG]     show running labs (from their state files in /run/glbd-lab,
                            or $GLBD_LAB_STATE_DIR)
  glbd-lab down [TAG|--all] delete detached labs: the namespaces they recorded and every process
                            still inside them; --all takes only the labs the caller started
  glbd-lab demo [--spines glbd|frr]   the GLB loop end to end, with a timeline (README's job)
  glbd-lab congest|cut|restore A B    poke at a running lab (e.g. congest spine1 leaf2)

Every subcommand is a function ``cmd_<name>(args) -> int`` registered in :func:`build_parser`;
add new ones there (``sub.add_parser(...)``, ``set_defaults(func=...)``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from glbdlab.netns import LabError, stop_namespace_members

STATE_DIR = Path("/run/glbd-lab")


def state_dir() -> Path:
    """Where labs are recorded: ``$GLBD_LAB_STATE_DIR`` (tests), else :data:`STATE_DIR`."""
    return Path(os.environ.get("GLBD_LAB_STATE_DIR") or STATE_DIR)


def caller_uid() -> int:
    """Who runs this: the sudo user (labs need root, so people use sudo), else the login uid,
    else the real uid. Recorded with each lab so ``down --all`` leaves other people's alone."""
    sudo = os.environ.get("SUDO_UID", "")
    if sudo.isdigit():
        return int(sudo)
    with contextlib.suppress(OSError, ValueError):
        login = int(Path("/proc/self/loginuid").read_text())
        if login != 0xFFFFFFFF:  # unset
            return login
    return os.getuid()


# --------------------------------------------------------------------------- provision


def cmd_provision(args: argparse.Namespace) -> int:
    from glbdlab.provision import provision, provisioned

    ch = None if args.force else provisioned()
    if ch is None:
        ch = provision(force=args.force)
    print(f"glbd-lab: FRR {ch.frr_version} chroot ready in {ch.root}")
    return 0


# --------------------------------------------------------------------------- up


def _frr_nodes(fab: Any, which: str) -> list[str]:
    if which == "none":
        return []
    if which == "spines":
        return [n.name for n in fab.nodes("spine")]
    return [n.name for n in fab.nodes() if n.role != "host"]


def _bgp_lines(frr: dict[str, Any]) -> list[str]:
    out = []
    for node, inst in frr.items():
        try:
            peers = inst.bgp_peers()
            bfd = inst.bfd_peers()
        except LabError as exc:
            out.append(f"  {node}: {exc}")
            continue
        text = ", ".join(
            f"{addr} {st}" + (f"/bfd {bfd[addr]}" if addr in bfd else "")
            for addr, st in sorted(peers.items())
        )
        out.append(f"  {node} (FRR {inst.build.version}): {text or 'no peers'}")
    return out


def cmd_up(args: argparse.Namespace) -> int:
    from glbdlab.frr import frr_build, start_fabric_frr
    from glbdlab.netns import require_netns
    from glbdlab.topology import Fabric, leaf_spine

    require_netns()
    if args.frr != "none":
        frr_build(args.frr_build)  # fail before building anything if FRR is missing
    t0 = time.monotonic()
    fab = Fabric(leaf_spine(args.spines, args.leaves, hosts=not args.no_hosts))
    detached = False
    try:
        fab.build()
        if args.rate:
            for sp_ in fab.topo.names("spine"):
                for lf in fab.topo.names("leaf"):
                    for a, b in ((sp_, lf), (lf, sp_)):
                        fab.shape(a, b, rate=f"{args.rate}mbit", burst="64kbit", latency="100ms")
        t_built = time.monotonic()
        nodes = _frr_nodes(fab, args.frr)
        frr = start_fabric_frr(fab, nodes, build=args.frr_build) if nodes else {}
        glbd_names = (
            []
            if args.no_glbd
            else [n.name for n in fab.nodes() if n.role != "host" and n.name not in nodes]
        )
        glbd_nodes: dict[str, Any] = {}
        if glbd_names:
            from glbdlab.nodes import GlbdOptions, start_glbd

            run_dir = state_dir() / fab.tag
            glbd_nodes = start_glbd(
                fab, run_dir, GlbdOptions(capacity_mbps=args.rate), names=glbd_names
            )
            fab.lab.on_close(lambda: shutil.rmtree(run_dir, ignore_errors=True))
        if frr and (glbd_nodes or args.frr != "spines"):
            for inst in frr.values():
                inst.wait_bgp_established(timeout=args.timeout)
            for inst in frr.values():
                inst.wait_bfd_up(timeout=args.timeout)
        t_ready = time.monotonic()
        print(fab.status())
        if glbd_nodes:
            print(
                "\nglbd: "
                + ", ".join(
                    f"{n} (pid {g.proc.pid}, glbctl --socket {g.socket})"
                    for n, g in glbd_nodes.items()
                )
            )
        if frr:
            print("\nBGP sessions:")
            print("\n".join(_bgp_lines(frr)))
        bad = fab.check_links(v6=False) if args.check else []
        print(
            f"\nnamespaces+links in {t_built - t0:.2f}s, ready in {t_ready - t0:.2f}s"
            + (
                f"; link check: {'OK' if not bad else 'FAILED ' + '; '.join(bad)}"
                if args.check
                else ""
            )
        )
        if args.once:
            return 1 if bad else 0
        state_dir().mkdir(parents=True, exist_ok=True)
        state_file = state_dir() / f"{fab.tag}.json"
        state: dict[str, Any] = {
            "tag": fab.tag,
            "topology": fab.topo.to_dict(),
            "namespaces": [ns.name for ns in fab.lab.namespaces.values()],
            "frr": {n: inst.state() for n, inst in frr.items()},
            "glbd": {
                n: {"pid": g.proc.pid, "socket": str(g.socket), "log": str(g.log)}
                for n, g in glbd_nodes.items()
            },
            "owner_pid": os.getpid(),
            "owner_uid": caller_uid(),
            "detached": bool(args.detach),
            "status": fab.status(),
        }
        if args.detach:
            state["owner_pid"] = None
            state["pids"] = fab.lab.detach()
            detached = True
            state_file.write_text(json.dumps(state, indent=1) + "\n")
            print(f"detached: lab {fab.tag} stays up; remove it with: glbd-lab down {fab.tag}")
            return 0
        state_file.write_text(json.dumps(state, indent=1) + "\n")
        print(f"lab {fab.tag} is up; Ctrl-C (or glbd-lab down {fab.tag}) tears it down")
        try:
            signal.pause()
        finally:
            state_file.unlink(missing_ok=True)
        return 0
    finally:
        if not detached:
            fab.destroy()


# --------------------------------------------------------------------------- status / down


def _states(tags: Sequence[str]) -> list[tuple[Path, dict[str, Any]]]:
    sd = state_dir()
    files = sorted(sd.glob("*.json")) if sd.exists() else []
    out = []
    for f in files:
        if tags and f.stem not in tags:
            continue
        try:
            out.append((f, json.loads(f.read_text())))
        except (OSError, ValueError):
            continue
    missing = set(tags) - {f.stem for f, _ in out}
    if missing:
        raise LabError(
            f"no running lab with tag {', '.join(sorted(missing))} (see glbd-lab status)"
        )
    return out


def _pid_alive(pid: int, must_contain: str = "") -> bool:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        stat = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[-1].split()[0]
    except OSError:
        return False
    return stat != b"Z" and must_contain in cmd


def _glbd_line(node: str, g: dict[str, Any]) -> str:
    from glbd.cli import glbctl as ctl

    try:
        nb = ctl.request(g["socket"], "neighbors", timeout=2)
        prof = ctl.request(g["socket"], "profiles", timeout=2)
    except ctl.DaemonError as e:
        return f"  {node}: glbd {e}"
    peers = ", ".join(f"{n['peer']} {n['state']}" for n in nb)
    ws = "; ".join(
        f"{','.join(p['prefixes'])}: "
        + " ".join(f"{w['ifname']}={w['value']}({w['source']})" for w in p["weights"])
        for p in prof.get("profiles", [])
    )
    return f"  {node}: glbd BGP {peers}\n      weights {ws or '-'}"


def cmd_status(args: argparse.Namespace) -> int:
    states = _states(args.tags)
    if not states:
        print("glbd-lab: no lab is running (start one with: glbd-lab up)")
        return 0
    for _, st in states:
        existing = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
        names = st.get("namespaces", [])
        present = sum(1 for n in names if n in existing)
        mode = "detached" if st.get("detached") else f"foreground pid {st.get('owner_pid')}"
        mode += f", uid {st['owner_uid']}" if "owner_uid" in st else ""
        print(f"== lab {st['tag']} ({mode}): {present}/{len(names)} namespaces present")
        print(st.get("status", ""))
        for node, g in st.get("glbd", {}).items():
            print(_glbd_line(node, g))
        for node, fr in st.get("frr", {}).items():
            alive = [d for d, pid in fr["pids"].items() if _pid_alive(pid, "/usr/lib/frr/")]
            line = f"  {node}: FRR {fr['version']} daemons up: {', '.join(alive) or 'none'}"
            if alive:
                res = subprocess.run(
                    [*fr["vtysh"], "-c", "show bgp summary json"],
                    capture_output=True,
                    text=True,
                    timeout=10,
                )
                with contextlib.suppress(ValueError, AttributeError):
                    peers = json.loads(res.stdout).get("ipv4Unicast", {}).get("peers", {})
                    line += "; BGP " + ", ".join(
                        f"{a} {p.get('state')}" for a, p in sorted(peers.items())
                    )
            print(line)
    return 0


def _down_one(path: Path, st: dict[str, Any]) -> list[str]:
    errors: list[str] = []
    owner = st.get("owner_pid")
    if owner and _pid_alive(int(owner), "glbd-lab"):
        os.kill(int(owner), signal.SIGTERM)  # the foreground 'up' cleans up itself
        deadline = time.monotonic() + 15
        while _pid_alive(int(owner), "glbd-lab") and time.monotonic() < deadline:
            time.sleep(0.05)
        if not _pid_alive(int(owner), "glbd-lab"):
            path.unlink(missing_ok=True)
            return errors
    gl = [int(g["pid"]) for g in st.get("glbd", {}).values() if _pid_alive(int(g["pid"]), "glbd")]
    for pid in gl:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    while any(_pid_alive(p, "glbd") for p in gl) and time.monotonic() < deadline:
        time.sleep(0.05)
    shutil.rmtree(state_dir() / str(st.get("tag")), ignore_errors=True)
    pids = [pid for fr in st.get("frr", {}).values() for pid in fr["pids"].values()]
    pids = [p for p in pids if _pid_alive(p, "/usr/lib/frr/")]
    pids += [p for p in st.get("pids", []) if _pid_alive(p) and p not in pids]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while any(_pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in pids:
        if _pid_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    for fr in st.get("frr", {}).values():
        for d in fr.get("dirs", []):
            shutil.rmtree(d, ignore_errors=True)
    # a daemon restarted by hand is in no record: deleting the namespace would leave it running
    stop_namespace_members(st.get("namespaces", []))
    for name in st.get("namespaces", []):
        if os.path.exists(f"/run/netns/{name}"):
            res = subprocess.run(["ip", "netns", "del", name], capture_output=True, text=True)
            if res.returncode != 0:
                errors.append(f"{name}: {res.stderr.strip()}")
    if not errors:
        path.unlink(missing_ok=True)
    return errors


def cmd_down(args: argparse.Namespace) -> int:
    if not args.tags and not args.all:
        raise LabError("say which lab: glbd-lab down TAG (see glbd-lab status) or --all")
    states = _states(args.tags)
    if not states:
        print("glbd-lab: no lab is running")
    if args.all and not args.tags:  # only the caller's: the machine may be shared
        me = caller_uid()
        for _, st in states:
            if st.get("owner_uid") != me:
                who = f"uid {st['owner_uid']}" if "owner_uid" in st else "no recorded owner"
                print(f"glbd-lab: lab {st['tag']} left alone ({who}); name it to remove it")
        states = [(p, st) for p, st in states if st.get("owner_uid") == me]
    errors: list[str] = []
    for path, st in states:
        errs = _down_one(path, st)
        errors += errs
        print(f"glbd-lab: lab {st['tag']} {'removed' if not errs else 'NOT fully removed'}")
    if errors:
        raise LabError("; ".join(errors))
    return 0


# --------------------------------------------------------------------------- poke at a lab


def _one_state(tag: str | None) -> dict[str, Any]:
    states = _states([tag] if tag else [])
    if not states:
        raise LabError("no lab is running (start one with: glbd-lab up --detach)")
    if len(states) > 1:
        raise LabError(
            "several labs are running: name one with --tag "
            + ", ".join(st["tag"] for _, st in states)
        )
    return states[0][1]


def _ns(st: dict[str, Any], node: str) -> str:
    name = f"glb-{st['tag']}-{node}"
    if name not in st.get("namespaces", []):
        raise LabError(f"no node {node!r} in lab {st['tag']}")
    return name


def _ip(ns: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(["ip", "-n", ns, *args], capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise LabError(f"ip -n {ns} {' '.join(args)}: {r.stderr.strip()}")
    return r


def _peer_addr(st: dict[str, Any], node: str, peer: str) -> str:
    """The address of ``peer``'s end of the node--peer link (interface names = peer names)."""
    out = _ip(_ns(st, peer), "-j", "-4", "addr", "show", "dev", node).stdout
    addrs = [a["local"] for i in json.loads(out or "[]") for a in i.get("addr_info", [])]
    if not addrs:
        raise LabError(f"no IPv4 address on {peer}'s link to {node}")
    return str(addrs[0])


def cmd_cut(args: argparse.Namespace) -> int:
    st = _one_state(args.tag)
    _ip(_ns(st, args.a), "link", "set", args.b, "down")
    print(f"glbd-lab: cut {args.a}--{args.b} (link down on {args.a}'s end)")
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    st = _one_state(args.tag)
    for a, b in ((args.a, args.b), (args.b, args.a)):
        _ip(_ns(st, a), "link", "set", b, "up")
    print(f"glbd-lab: restored {args.a}--{args.b}")
    return 0


def cmd_congest(args: argparse.Namespace) -> int:
    st = _one_state(args.tag)
    src, dst = _ns(st, args.a), _ns(st, args.b)
    dst_addr = _peer_addr(st, args.a, args.b)
    if args.rate:
        subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                src,
                "tc",
                "qdisc",
                "replace",
                "dev",
                args.b,
                "root",
                "tbf",
                "rate",
                f"{args.rate}mbit",
                "burst",
                "64kbit",
                "latency",
                "100ms",
            ],
            check=True,
            timeout=10,
        )
    load = args.load or (2 * args.rate if args.rate else 100)
    print(
        f"glbd-lab: {load} Mbit/s UDP from {args.a} into its link to {args.b} for "
        f"{args.seconds:g} s (watch: glbctl --socket ... watch)"
    )
    srv = subprocess.Popen(
        ["ip", "netns", "exec", dst, "iperf3", "-s", "-1", "-B", dst_addr],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(0.3)
        subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                src,
                "iperf3",
                "-c",
                dst_addr,
                "-u",
                "-b",
                f"{load}M",
                "-t",
                f"{args.seconds:g}",
                "-l",
                "1200",
            ],
            stdout=subprocess.DEVNULL,
            timeout=args.seconds + 30,
            check=False,
        )
    finally:
        if srv.poll() is None:
            srv.terminate()
        srv.wait(5)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from glbdlab.demo import run_demo

    return run_demo(args.spines_run, args.keep, args.rate)


# --------------------------------------------------------------------------- main


def _version() -> str:
    """The lab's installed version and the glbd it drives."""
    from importlib.metadata import PackageNotFoundError, version

    from glbd import __version__

    try:
        lab = version("glbd-lab")
    except PackageNotFoundError:  # run from the source tree
        lab = "(not installed)"
    return f"{lab} (glbd {__version__})"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="glbd-lab",
        description="glbd lab: leaf-spine fabric of network namespaces with FRR 10.x",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"glbd-lab {_version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sp = sub.add_parser("provision", help="build the FRR 10.x chroot (once; cached)")
    sp.add_argument("--force", action="store_true", help="rebuild even if already provisioned")
    sp.set_defaults(func=cmd_provision)

    sp = sub.add_parser("up", help="build the lab fabric (and start FRR)")
    sp.add_argument("--spines", type=int, default=2, metavar="N", help="spines (default 2)")
    sp.add_argument("--leaves", type=int, default=2, metavar="N", help="leaves (default 2)")
    sp.add_argument("--no-hosts", action="store_true", help="no host namespace behind leaves")
    sp.add_argument(
        "--frr",
        choices=("all", "spines", "none"),
        default="none",
        help="where to run FRR 10.x instead of glbd (default: glbd everywhere)",
    )
    sp.add_argument("--no-glbd", action="store_true", help="run no glbd (bare fabric or FRR)")
    sp.add_argument(
        "--rate",
        type=int,
        default=None,
        metavar="MBIT",
        help="shape every fabric link with tbf to this rate (and tell glbd)",
    )
    sp.add_argument(
        "--frr-build", choices=("sid", "host"), default="sid", help="FRR 10.x chroot or host 8.4"
    )
    sp.add_argument("--timeout", type=float, default=60, help="BGP convergence timeout (s)")
    sp.add_argument("--no-check", dest="check", action="store_false", help="skip link pings")
    mode = sp.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true", help="print the state and tear down")
    mode.add_argument("--detach", action="store_true", help="leave it up (glbd-lab down TAG)")
    sp.set_defaults(func=cmd_up)

    sp = sub.add_parser("status", help="show running labs")
    sp.add_argument("tags", nargs="*", metavar="TAG")
    sp.set_defaults(func=cmd_status)

    sp = sub.add_parser("down", help="tear down labs started with 'up' (by their recorded names)")
    sp.add_argument("tags", nargs="*", metavar="TAG")
    sp.add_argument("--all", action="store_true", help="every lab you started (see 'status')")
    sp.set_defaults(func=cmd_down)

    sp = sub.add_parser("demo", help="the GLB loop end to end: congest, cut, restore, timeline")
    sp.add_argument(
        "--spines",
        dest="spines_run",
        choices=("glbd", "frr"),
        default="glbd",
        help="run glbd (default) or FRR 10.x on the spines",
    )
    sp.add_argument("--rate", type=int, default=20, metavar="MBIT", help="fabric link rate")
    sp.add_argument("--keep", action="store_true", help="keep the run directory (logs)")
    sp.set_defaults(func=cmd_demo)

    for name, fn, text in (
        ("cut", cmd_cut, "take a link down on A's end"),
        ("restore", cmd_restore, "bring a cut link up again"),
        ("congest", cmd_congest, "load A's link toward B with UDP traffic"),
    ):
        sp = sub.add_parser(name, help=text)
        sp.add_argument("a", metavar="A", help="node, e.g. spine1")
        sp.add_argument("b", metavar="B", help="its neighbor, e.g. leaf2")
        sp.add_argument("--tag", help="which lab (default: the only one running)")
        if name == "congest":
            sp.add_argument("--seconds", type=float, default=10.0)
            sp.add_argument(
                "--rate",
                type=int,
                default=None,
                metavar="MBIT",
                help="shape A's end to this rate first",
            )
            sp.add_argument(
                "--load",
                type=int,
                default=None,
                metavar="MBIT",
                help="offered load (default: twice the rate)",
            )
        sp.set_defaults(func=fn)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        rc: int = args.func(args)
    except LabError as exc:
        print(f"glbd-lab: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nglbd-lab: interrupted, cleaned up", file=sys.stderr)
        return 130
    except SystemExit as exc:  # SIGTERM/SIGHUP (turned into SystemExit by glbdlab.netns)
        if isinstance(exc.code, int) and exc.code > 128:
            print("glbd-lab: terminated, cleaned up", file=sys.stderr)
        raise
    return rc


if __name__ == "__main__":
    sys.exit(main())
