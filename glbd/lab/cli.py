"""glbd-lab: build and inspect the glbd lab (leaf-spine fabric of network namespaces + FRR).

  glbd-lab provision        build the FRR 10.x chroot once (cached; instant when done)
  glbd-lab up [--once|--detach] [--spines N --leaves N] [--frr all|spines|none]
                            build the fabric; by default stay in the foreground until Ctrl-C
  glbd-lab status [TAG]     show running labs (from their state files in /run/glbd-lab)
  glbd-lab down [TAG|--all] delete detached labs (only namespaces/processes they recorded)

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

from glbd.lab.netns import LabError

STATE_DIR = Path("/run/glbd-lab")


# --------------------------------------------------------------------------- provision


def cmd_provision(args: argparse.Namespace) -> int:
    from glbd.lab.provision import provision, provisioned

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
    from glbd.lab.frr import frr_build, start_fabric_frr
    from glbd.lab.netns import require_netns
    from glbd.lab.topology import Fabric, leaf_spine

    require_netns()
    if args.frr != "none":
        frr_build(args.frr_build)  # fail before building anything if FRR is missing
    t0 = time.monotonic()
    fab = Fabric(leaf_spine(args.spines, args.leaves, hosts=not args.no_hosts))
    detached = False
    try:
        fab.build()
        t_built = time.monotonic()
        nodes = _frr_nodes(fab, args.frr)
        frr = start_fabric_frr(fab, nodes, build=args.frr_build) if nodes else {}
        if frr and args.frr != "spines":  # spines alone have no BGP peer to reach
            for inst in frr.values():
                inst.wait_bgp_established(timeout=args.timeout)
            for inst in frr.values():
                inst.wait_bfd_up(timeout=args.timeout)
        t_ready = time.monotonic()
        print(fab.status())
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
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        state_file = STATE_DIR / f"{fab.tag}.json"
        state: dict[str, Any] = {
            "tag": fab.tag,
            "topology": fab.topo.to_dict(),
            "namespaces": [ns.name for ns in fab.lab.namespaces.values()],
            "frr": {n: inst.state() for n, inst in frr.items()},
            "owner_pid": os.getpid(),
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
    files = sorted(STATE_DIR.glob("*.json")) if STATE_DIR.exists() else []
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
        print(f"== lab {st['tag']} ({mode}): {present}/{len(names)} namespaces present")
        print(st.get("status", ""))
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
    errors: list[str] = []
    for path, st in states:
        errs = _down_one(path, st)
        errors += errs
        print(f"glbd-lab: lab {st['tag']} {'removed' if not errs else 'NOT fully removed'}")
    if not states:
        print("glbd-lab: no lab is running")
    if errors:
        raise LabError("; ".join(errors))
    return 0


# --------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="glbd-lab",
        description="glbd lab: leaf-spine fabric of network namespaces with FRR 10.x",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
        default="all",
        help="where to run FRR (default: all spines and leaves)",
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
    sp.add_argument("--all", action="store_true", help="every lab listed by 'status'")
    sp.set_defaults(func=cmd_down)
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
    except SystemExit as exc:  # SIGTERM/SIGHUP (turned into SystemExit by glbd.lab.netns)
        if isinstance(exc.code, int) and exc.code > 128:
            print("glbd-lab: terminated, cleaned up", file=sys.stderr)
        raise
    return rc


if __name__ == "__main__":
    sys.exit(main())
