"""A stand-in for ``exabgp server CONF`` in supervisor tests: starts the configured API process
(the glbd bridge), acks every command like ExaBGP ('done', or 'error' for 10.99.x), emits one
state line, and crashes (exit 3) on a command for 10.66.0.0/24. Each SIGUSR1 it gets appends a
line to CONF.sigusr1 (a reload, which real ExaBGP may drop)."""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import sys


def main() -> int:
    with open(sys.argv[-1]) as f:
        conf = f.read()

    def on_usr1(signum: int, frame: object) -> None:
        with open(sys.argv[-1] + ".sigusr1", "a") as log:
            log.write("reload\n")

    signal.signal(signal.SIGUSR1, on_usr1)
    m = re.search(r"^\s*run (.+);\s*$", conf, re.M)
    assert m, "no run line"
    proc = subprocess.Popen(shlex.split(m.group(1)), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(
        b'{ "exabgp": "5.0.0", "type": "state", "neighbor": { "address": { "local": "192.0.2.2",'
        b' "peer": "192.0.2.1" }, "asn": { "local": 65002, "peer": 65001 }, "state": "up" } }\n'
    )
    proc.stdin.flush()
    for raw in proc.stdout:
        line = raw.decode().strip()
        if "10.66.0.0/24" in line:
            return 3
        proc.stdin.write(b"error\n" if "10.99." in line else b"done\n")
        proc.stdin.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
