"""Decode speed of every wire codec on one core, against baselines measured in the same run.

    .venv/bin/python bench/codec_bench.py [--seconds 1.0]

Baselines: ``struct`` = a bare ``struct.unpack_from`` of the message's fixed header (the
irreducible cost of touching the bytes in Python); ``scapy`` = scapy's own dissector where it
has one (BFD). Target: a 64-entry heartbeat at >= 50k messages/s.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
from collections.abc import Callable
from typing import Any

from timing import rate

from bfd import packet as bfd_packet
from glbd.bgp import nhc
from glbd.control import protocol as ctlproto
from heartbeat import wire

FRR_BFD = bytes.fromhex("208003182b4550d71ed7609d000f4240000f42400000c350")
FRR_NHC = bytes.fromhex("d027001800010104000000000002000c0a00000b0a0000020a000003")
HB64 = wire.Heartbeat(
    sender_id=wire.node_id("198.18.0.1"),
    sequence=1,
    interval_us=20_000,
    entries=[
        wire.Entry(
            wire.node_id(f"198.18.1.{i}"), i, 100_000, i % 8, load_bp=100 * i, queue_bytes=1500 * i
        )
        for i in range(64)
    ],
).encode()
HB64_KEY = wire.HmacKey(1, b"0123456789abcdef0123456789abcdef")
HB64_SIGNED = wire.Heartbeat(
    sender_id=wire.node_id("198.18.0.1"),
    sequence=1,
    interval_us=20_000,
    entries=wire.decode(HB64).entries,
).encode(HB64_KEY)
CTL = ctlproto.Request(7, "profiles").encode()
HDR = struct.Struct("!BBBBIIIII")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--json", help="write the results here too")
    a = ap.parse_args()
    try:
        from scapy.contrib.bfd import BFD as ScapyBFD
    except Exception:  # scapy's contrib layers can fail to import on odd platforms
        ScapyBFD = None
    rows: list[tuple[str, float, str, float]] = []

    def row(name: str, fn: Callable[[], Any], base_name: str, base: Callable[[], Any]) -> None:
        r, b = rate(fn, a.seconds), rate(base, a.seconds)
        rows.append((name, r, base_name, b))

    row(
        "bfd control packet (24 B)",
        lambda: bfd_packet.decode(FRR_BFD),
        "struct header",
        lambda: HDR.unpack_from(FRR_BFD),
    )
    if ScapyBFD is not None:
        row(
            "bfd control packet (24 B)",
            lambda: bfd_packet.decode(FRR_BFD),
            "scapy BFD()",
            lambda: ScapyBFD(FRR_BFD),
        )
    row(
        "nhc attribute, NNHN x2 (28 B)",
        lambda: nhc.decode(FRR_NHC),
        "struct header",
        lambda: struct.unpack_from("!BBHHBB", FRR_NHC),
    )
    row(
        f"heartbeat, 64 entries ({len(HB64)} B)",
        lambda: wire.decode(HB64),
        "struct header",
        lambda: struct.unpack_from("!2sBBIIIHBB", HB64),
    )
    row(
        f"heartbeat, 64 entries + HMAC verify ({len(HB64_SIGNED)} B)",
        lambda: (wire.decode(HB64_SIGNED), wire.verify(HB64_SIGNED, HB64_KEY)),
        "struct header",
        lambda: struct.unpack_from("!2sBBIIIHBB", HB64_SIGNED),
    )
    row(
        "control request (JSON line)",
        lambda: ctlproto.decode_request(CTL),
        "json.loads",
        lambda: json.loads(CTL),
    )
    load = os.getloadavg()[0]
    print(f"codec decode rates, one core, {a.seconds:g} s each, load average {load:.1f}\n")
    print(f"{'codec':<44} {'msgs/s':>10}  {'baseline':<14} {'msgs/s':>10}  ratio")
    for name, r, bn, b in rows:
        print(f"{name:<44} {r:>10,.0f}  {bn:<14} {b:>10,.0f}  {r / b:5.2f}x")
    hb = next(r for n, r, _, _ in rows if n.startswith("heartbeat, 64 entries ("))
    print(
        f"\nheartbeat 64-entry decode: {hb:,.0f}/s (target >= 50,000/s: "
        f"{'met' if hb >= 50_000 else 'MISSED'})"
    )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(
                [
                    {"codec": n, "rate": r, "baseline": bn, "baseline_rate": b}
                    for n, r, bn, b in rows
                ],
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
