"""Records tests/vectors/exabgp5_frr10_consolidated.jsonl: ExaBGP 5.0.15 run with
``receive { consolidate; ... }`` writes each received OPEN, UPDATE and NOTIFICATION once, as
its JSON rendering *and* the raw message (top-level ``header``/``body``), so a test can hold
glbd's raw decoder (glbd.bgp.bgpmsg) to ExaBGP's own reading of the same bytes.

The peer is FRR 10.x (the lab chroot), two sessions (IPv4 and IPv6 transport), announcing
IPv4 and IPv6 prefixes with MED, communities, a prepended AS path, an AS_SET (aggregate),
IPv4 over an IPv6 next hop (RFC 8950, the IPv6 session), with graceful restart; then
withdrawals; then a shutdown (Cease). Run as root from the repository::

    .venv/bin/python tests/bgp/record_raw_vectors.py
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "lab"))
sys.path.insert(0, str(HERE.parent.parent))

from glbdlab.frr import FrrInstance  # noqa: E402
from glbdlab.netns import Lab  # noqa: E402
from glbdlab.nodes import wait_until  # noqa: E402

from glbd.bgp.exabgp import default_exabgp, exabgp_env  # noqa: E402

OUT = HERE.parent / "vectors" / "exabgp5_frr10_consolidated.jsonl"

FRR = """\
frr defaults datacenter
router bgp 65100
 bgp router-id 10.0.0.11
 no bgp ebgp-requires-policy
 no bgp network import-check
 bgp graceful-restart
 neighbor 172.16.11.1 remote-as 65001
 neighbor 172.16.11.1 timers 3 9
 neighbor 172.16.11.1 timers connect 1
 neighbor fd00:11::1 remote-as 65001
 neighbor fd00:11::1 timers 3 9
 neighbor fd00:11::1 timers connect 1
 neighbor fd00:11::1 capability extended-nexthop
 address-family ipv4 unicast
  neighbor 172.16.11.1 activate
  neighbor 172.16.11.1 route-map OUT out
  neighbor fd00:11::1 activate
  network 10.200.0.0/24
  network 10.201.0.0/24
  network 10.202.1.0/30
  network 10.210.1.0/24
  network 10.210.2.0/24
  aggregate-address 10.210.0.0/16 as-set
 exit-address-family
 address-family ipv6 unicast
  neighbor fd00:11::1 activate
  network 2001:db8:200::/48
  network 2001:db8:201:1::/64
 exit-address-family
exit
bgp community-list standard C permit 65100:7
ip prefix-list P200 seq 5 permit 10.200.0.0/24
route-map OUT permit 10
 match ip address prefix-list P200
 set community 65100:7 65100:8
 set metric 50
 set as-path prepend 65100 65100
route-map OUT permit 20
"""

EXABGP = """\
process rec {{
    run {script};
    encoder json;
}}

neighbor {peer} {{
    router-id 10.0.0.1;
    local-address {local};
    local-as 65001;
    peer-as 65100;
    hold-time 9;
    adj-rib-in false;
    capability {{ graceful-restart 120; }}
    family {{
        ipv4 unicast;
        ipv6 unicast;
    }}
    {nexthop}
    api {{
        processes [ rec ];
        neighbor-changes;
        receive {{
            consolidate;
            update;
            open;
            notification;
        }}
    }}
}}
"""


def main() -> int:
    lines: list[str] = []
    with Lab() as lab:
        s1, l1 = lab.netns("spine1"), lab.netns("leaf1")
        lab.veth(l1, "l1-s1", s1, "s1-l1", a_addr="172.16.11.1/24", b_addr="172.16.11.2/24")
        l1.ip("addr", "add", "fd00:11::1/64", "dev", "l1-s1", "nodad")
        s1.ip("addr", "add", "fd00:11::2/64", "dev", "s1-l1", "nodad")
        frr = FrrInstance(s1, hostname="spine1").start(FRR)
        procs = []
        outs = []
        for peer, local, nh in [
            ("172.16.11.2", "172.16.11.1", ""),
            ("fd00:11::2", "fd00:11::1", "nexthop { ipv4 unicast ipv6; }"),
        ]:
            d = Path(tempfile.mkdtemp(prefix="glbd-rec-"))
            d.chmod(0o755)
            out = d / "out.jsonl"
            script = d / "rec.sh"
            script.write_text(f"#!/bin/sh\ncat > {out}\n")
            script.chmod(0o755)
            conf = d / "exabgp.conf"
            conf.write_text(EXABGP.format(script=script, peer=peer, local=local, nexthop=nh))
            env = exabgp_env(dict(os.environ), d / "exabgp.log", "INFO", "")
            env["exabgp.api.ack"] = "false"
            argv = [*default_exabgp(), "server", str(conf)]
            procs.append(l1.popen(argv, env=env, cwd=str(d)))
            outs.append(out)
        # the sessions' tables are in once their End-of-RIB markers are (IPv6: the second)
        wait_until(lambda: _count(outs[0], '"eor"') >= 1, 60, what="End-of-RIB, IPv4 session")
        wait_until(lambda: _count(outs[1], '"eor"') >= 2, 60, what="End-of-RIB x 2, IPv6 session")
        frr.vtysh(
            "configure terminal",
            "router bgp 65100",
            "address-family ipv4 unicast",
            "no network 10.201.0.0/24",
            "no network 10.210.2.0/24",
        )
        frr.vtysh(
            "configure terminal",
            "router bgp 65100",
            "address-family ipv6 unicast",
            "no network 2001:db8:201:1::/64",
        )
        wait_until(lambda: _count(outs[0], '"withdraw"') >= 1, 60, what="withdrawals, IPv4 session")
        wait_until(lambda: _count(outs[1], '"withdraw"') >= 2, 60, what="withdrawals, IPv6 session")
        frr.vtysh(
            "configure terminal",
            "router bgp 65100",
            "neighbor 172.16.11.1 shutdown",
            "neighbor fd00:11::1 shutdown",
        )
        cease = '"type": "notification"'
        for out in outs:
            wait_until(lambda o=out: _count(o, cease) >= 1, 60, what=f"Cease in {out}")
        for p in procs:
            p.terminate()
            p.wait(10)
        for out in outs:
            for line in out.read_text().splitlines():
                doc = json.loads(line)
                if doc.get("type") in ("open", "update", "notification") and "body" in doc:
                    lines.append(line)
            shutil.rmtree(out.parent, ignore_errors=True)
    OUT.write_text("\n".join(lines) + "\n")
    print(f"{len(lines)} lines -> {OUT}")
    return 0


def _count(out: Path, text: str) -> int:
    """Recorded lines of ``out`` that contain ``text``."""
    try:
        return sum(text in line for line in out.read_text().splitlines())
    except FileNotFoundError:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
