"""``glbd-lab``: the lab's command line (provision, up, down, status)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from glbd.lab.netns import LabError


def cmd_provision(args: argparse.Namespace) -> int:
    from glbd.lab.provision import provision, provisioned

    ch = provisioned() if not args.force else None
    if ch is not None:
        print(f"glbd-lab: FRR {ch.frr_version} chroot ready in {ch.root}")
        return 0
    ch = provision(force=args.force)
    print(f"glbd-lab: FRR {ch.frr_version} chroot ready in {ch.root}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="glbd-lab", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sp = sub.add_parser("provision", help="build the FRR 10.x chroot (once; cached)")
    sp.add_argument("--force", action="store_true", help="rebuild even if already provisioned")
    sp.set_defaults(func=cmd_provision)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        rc: int = args.func(args)
    except LabError as exc:
        print(f"glbd-lab: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("glbd-lab: interrupted", file=sys.stderr)
        return 130
    return rc


if __name__ == "__main__":
    sys.exit(main())
