"""``glbd``: the daemon and its offline helpers.

    glbd run -c FILE          run the daemon (foreground; systemd Type=notify aware)
    glbd check-config FILE    validate a config file: exit 0, or print every problem and exit 1
    glbd sysctl -c FILE       as root, before the daemon starts: write the kernel settings the
                              config asks for (the unit's ProtectKernelTunables= makes /proc/sys
                              read-only for the daemon, which then only warns)

Errors a user can fix (bad config, a missing capability or dependency) are one line on stderr and a
non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from glbd import __version__
from glbd.config import config as cfgmod

EXIT_CONFIG = 1
EXIT_ENV = 3


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="glbd",
        description="Global Load Balancing control plane for Linux leaf-spine routers "
        "(BGP NNHN + BFD + link-quality heartbeats -> weighted ECMP nexthop groups).",
    )
    p.add_argument("--version", action="version", version=f"glbd {__version__}")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")
    run = sub.add_parser("run", help="run the daemon in the foreground")
    run.add_argument("-c", "--config", required=True, help="TOML config file")
    run.add_argument(
        "--log-level",
        choices=["debug", "info", "warning", "error"],
        help="override logging.level from the config",
    )
    run.add_argument(
        "--log-format",
        choices=["auto", "console", "json", "journal"],
        help="override logging.format from the config",
    )
    run.add_argument(
        "--heap-report",
        metavar="FILE",
        help="trace allocations; SIGUSR2 writes the top 40 source lines to FILE (diagnosis only)",
    )
    sc = sub.add_parser("sysctl", help="write the sysctls the config asks for (as root)")
    sc.add_argument("-c", "--config", required=True, help="TOML config file")
    sc.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")
    chk = sub.add_parser("check-config", help="validate a config file and exit")
    chk.add_argument("file")
    chk.add_argument("-q", "--quiet", action="store_true", help="print nothing when it is valid")
    return p


def check_config(path: str, quiet: bool = False) -> int:
    try:
        c = cfgmod.load(path)
    except cfgmod.ConfigError as e:
        print(e.format(), file=sys.stderr)
        n = len(e.problems)
        print(f"{path}: {n} problem{'s' if n != 1 else ''}; config rejected", file=sys.stderr)
        return EXIT_CONFIG
    fabric = [n.interface for n in c.neighbors]
    warnings = [
        *c.heartbeat.warnings(),
        *c.link_quality.warnings(),
        *(c.flowlet.warnings(fabric) if c.flowlet_active else []),
        *c.policy_warnings(),
    ]
    for w in warnings:  # valid, but worth seeing
        print(f"{path}: warning: {w}", file=sys.stderr)
    if not quiet:
        print(
            f"{path}: ok (router_id {c.router_id}, AS {c.local_as}, role {c.role}, "
            f"{len(c.neighbors)} neighbors, {len(c.originate)} originated prefixes)"
        )
    return 0


def apply_sysctls(path: str, quiet: bool = False) -> int:
    """Write what ``fib.set_compat_mode_off`` and the flowlet program (``set_hash_policy``)
    ask for, which the unprivileged daemon cannot (/proc/sys is read-only to it); exit
    non-zero when it cannot."""
    from glbd.daemon.netns import write_sysctl
    from glbd.fib.fibkernel import COMPAT_MODE_SYSCTL
    from glbd.flowlet.loader import HASH_POLICY_SYSCTLS

    try:
        c = cfgmod.load(path)
    except cfgmod.ConfigError as e:
        print(e.format(), file=sys.stderr)
        return EXIT_CONFIG
    wanted = {COMPAT_MODE_SYSCTL: 0} if c.fib.set_compat_mode_off else {}
    if c.flowlet_active and c.flowlet.set_hash_policy:
        wanted.update(dict.fromkeys(HASH_POLICY_SYSCTLS, 1))
    for key, value in wanted.items():
        try:
            write_sysctl(key, value)
        except OSError as e:
            print(f"glbd: cannot set {key}={value}: {e.strerror}", file=sys.stderr)
            return EXIT_ENV
        if not quiet:
            print(f"{key} = {value}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.cmd == "check-config":
        return check_config(args.file, args.quiet)
    if args.cmd == "sysctl":
        return apply_sysctls(args.config, args.quiet)
    if args.cmd == "run":
        from glbd.daemon.daemon import main as run_daemon
        from glbd.daemon.parts import build_components

        return run_daemon(
            args.config,
            log_level=args.log_level,
            log_format=args.log_format,
            components=build_components,
            heap_report=args.heap_report,
        )
    build_parser().print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
