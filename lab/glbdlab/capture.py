"""Golden wire captures from FRR 10.x: the NHC/NNHN path attribute and a BFD control packet.

Re-run (root, FRR chroot provisioned)::

    .venv/bin/python -m glbdlab.capture --out tests/vectors

Topology (on this lab's addressing plan): ``leaf_spine(1, 3)`` without
hosts, i.e. leaf1 -- spine1 -- {leaf2, leaf3}, FRR 10.x everywhere, eBGP (spine AS 65100, leaf j
AS 65000+j, router ids 198.18.0.1 / 198.18.0.10j). leaf2 and leaf3 both originate the anycast
prefix 198.19.200.0/24, and 198.19.202.0/24 resp. 198.19.203.0/24 (only these: FRR computes NHC
once per UPDATE from its *first* prefix, and prefixes are packed in order, so a single-path
prefix sorting before the anycast one would hide the NNHN). spine1 has
``bgp bestpath as-path multipath-relax`` and ``neighbor 198.18.1.1
send-nexthop-characteristics`` (toward leaf1).

Order matters (FRR does not re-advertise when only the multipath set changes, upstream PR
#20949): spine1, leaf2 and leaf3 start first; once spine1 has both paths to the anycast prefix,
tcpdump starts on leaf1's link and then leaf1's FRR, so the first UPDATE already carries NNHN.

Outputs:

* ``frr10_nnhn.json``: the UPDATE (spine1 -> leaf1) whose NHC attribute carries NNHN:
  ``attribute_hex`` (flags, type, length, value), ``value_hex``, ``next_hop_bgp_id`` (NNHN entry
  0, the sender's own router id), ``nnh_ids`` (the rest), ``prefixes`` (all NLRI of that UPDATE;
  FRR gives every prefix packed in it the same NNHN), ``update_hex`` (the whole BGP message
  incl. marker), plus every other NHC attribute seen from spine1 (``other_nhc``) and leaf1's
  ``nextNextHopNodes`` JSON as a cross-check.
* ``frr10_bfd.json``: the first BFD control packet (UDP port 3784) seen on that link: UDP payload
  hex, addresses, TTL and the decoded fields. Discriminators are random per run.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from glbdlab.frr import FrrInstance, fabric_bgp_config
from glbdlab.netns import LabError, Netns
from glbdlab.topology import Fabric, leaf_spine

__all__ = ["capture", "main", "parse_pcap", "start_tcpdump"]

ANYCAST = "198.19.200.0/24"
BGP_ATTR_NHC = 39


#: the TCP SYN flag
_SYN = 0x02


@dataclass(frozen=True)
class Packet:
    ts: float
    src: str
    dst: str
    proto: int
    sport: int
    dport: int
    ttl: int
    seq: int
    payload: bytes
    #: TCP flags (0 for UDP)
    flags: int = 0


def parse_pcap(data: bytes) -> Iterator[Packet]:
    """IPv4 TCP/UDP packets of a classic pcap file (Ethernet or Linux cooked capture)."""
    magic = struct.unpack("<I", data[:4])[0]
    if magic in (0xA1B2C3D4, 0xA1B23C4D):
        end = "<"
    elif magic in (0xD4C3B2A1, 0x4D3CB2A1):
        end = ">"
    else:
        raise LabError("not a pcap file")
    nano = magic in (0xA1B23C4D, 0x4D3CB2A1)
    linktype = struct.unpack(end + "I", data[20:24])[0]
    off = 24
    while off + 16 <= len(data):
        sec, frac, incl, _ = struct.unpack(end + "IIII", data[off : off + 16])
        frame = data[off + 16 : off + 16 + incl]
        off += 16 + incl
        if linktype == 1:  # Ethernet
            etype, ip = struct.unpack("!H", frame[12:14])[0], frame[14:]
        elif linktype == 113:  # Linux cooked (SLL)
            etype, ip = struct.unpack("!H", frame[14:16])[0], frame[16:]
        else:
            continue
        if etype != 0x0800 or len(ip) < 20:
            continue
        ihl = (ip[0] & 0x0F) * 4
        total = struct.unpack("!H", ip[2:4])[0]
        ttl, proto = ip[8], ip[9]
        src, dst = str(ipaddress.IPv4Address(ip[12:16])), str(ipaddress.IPv4Address(ip[16:20]))
        l4 = ip[ihl:total]
        ts = sec + frac / (1e9 if nano else 1e6)
        if proto == 6 and len(l4) >= 20:
            sport, dport, seq = struct.unpack("!HHI", l4[:8])
            doff = (l4[12] >> 4) * 4
            yield Packet(ts, src, dst, 6, sport, dport, ttl, seq, l4[doff:], l4[13])
        elif proto == 17 and len(l4) >= 8:
            sport, dport = struct.unpack("!HH", l4[:4])
            yield Packet(ts, src, dst, 17, sport, dport, ttl, 0, l4[8:])


def tcp_streams(packets: list[Packet], src: str, dst: str, port: int = 179) -> list[bytes]:
    """In-order payload bytes of each TCP connection src -> dst involving ``port`` (one entry per
    connection, in order of first packet; retransmissions and reordering handled by sequence
    number). BGP often has two connections (a collision) of which one survives, and a session
    that flaps may reconnect from the same port: a SYN starts a new connection."""
    conns: list[list[Packet]] = []
    current: dict[tuple[int, int], list[Packet]] = {}
    for p in packets:
        if p.proto == 6 and p.src == src and p.dst == dst and port in (p.sport, p.dport):
            key = (p.sport, p.dport)
            segs = current.get(key)
            if segs is None or p.flags & _SYN:
                segs = current[key] = []
                conns.append(segs)
            segs.append(p)
    out = []
    for segs in conns:
        data = [p for p in segs if p.payload]
        if not data:
            continue
        # the stream starts after the SYN; without one, at the earliest sequence number (a
        # capture on a busy machine may record two segments in the other order)
        syn = next((p for p in segs if p.flags & _SYN), None)
        first = data[0].seq
        base = (
            (syn.seq + 1) & 0xFFFFFFFF
            if syn is not None
            else min((p.seq for p in data), key=lambda s: (s - first + 2**31) & 0xFFFFFFFF)
        )
        buf = bytearray()
        for p in sorted(data, key=lambda p: (p.seq - base) & 0xFFFFFFFF):
            rel = (p.seq - base) & 0xFFFFFFFF
            if rel <= len(buf):
                buf += p.payload[len(buf) - rel :]
        out.append(bytes(buf))
    return out


def bgp_messages(stream: bytes) -> Iterator[bytes]:
    off = 0
    while off + 19 <= len(stream):
        if stream[off : off + 16] != b"\xff" * 16:
            raise LabError(f"BGP stream out of sync at byte {off}")
        length = struct.unpack("!H", stream[off + 16 : off + 18])[0]
        if off + length > len(stream):
            return
        yield stream[off : off + length]
        off += length


def _prefixes(data: bytes) -> list[str]:
    out, off = [], 0
    while off < len(data):
        plen = data[off]
        n = (plen + 7) // 8
        raw = data[off + 1 : off + 1 + n] + b"\0" * (4 - n)
        out.append(f"{ipaddress.IPv4Address(raw)}/{plen}")
        off += 1 + n
    return out


def parse_update(msg: bytes) -> dict[str, Any]:
    """Split a BGP UPDATE into attributes {type: (flags, whole attribute bytes)} and NLRI."""
    body = msg[19:]
    wlen = struct.unpack("!H", body[:2])[0]
    alen = struct.unpack("!H", body[2 + wlen : 4 + wlen])[0]
    attrs_raw = body[4 + wlen : 4 + wlen + alen]
    attrs: dict[int, tuple[int, bytes, bytes]] = {}
    off = 0
    while off < len(attrs_raw):
        flags, typ = attrs_raw[off], attrs_raw[off + 1]
        if flags & 0x10:
            ln, hdr = struct.unpack("!H", attrs_raw[off + 2 : off + 4])[0], 4
        else:
            ln, hdr = attrs_raw[off + 2], 3
        attrs[typ] = (flags, attrs_raw[off : off + hdr + ln], attrs_raw[off + hdr : off + hdr + ln])
        off += hdr + ln
    return {
        "withdrawn": _prefixes(body[2 : 2 + wlen]),
        "attrs": attrs,
        "nlri": _prefixes(body[4 + wlen + alen :]),
    }


def nhc_tlvs(value: bytes) -> list[tuple[int, bytes]]:
    nh_len = value[3]
    off, out = 4 + nh_len, []
    while off + 4 <= len(value):
        code, ln = struct.unpack("!HH", value[off : off + 4])
        out.append((code, value[off + 4 : off + 4 + ln]))
        off += 4 + ln
    return out


def decode_bfd(p: bytes) -> dict[str, Any]:
    vd, sf, mult, length = p[0], p[1], p[2], p[3]
    my, your, tx, rx, echo = struct.unpack("!IIIII", p[4:24])
    return {
        "version": vd >> 5,
        "diag": vd & 0x1F,
        "state": ["AdminDown", "Down", "Init", "Up"][sf >> 6],
        "flags": {"P": bool(sf & 0x20), "F": bool(sf & 0x10), "C": bool(sf & 0x08),
                  "A": bool(sf & 0x04), "D": bool(sf & 0x02), "M": bool(sf & 0x01)},
        "detect_mult": mult,
        "length": length,
        "my_discriminator": my,
        "your_discriminator": your,
        "desired_min_tx_us": tx,
        "required_min_rx_us": rx,
        "required_min_echo_rx_us": echo,
    }  # fmt: skip


def start_tcpdump(
    ns: Netns, out: Path, bpf_filter: str, *, ifname: str = "any", link_type: str | None = None
) -> subprocess.Popen[bytes]:
    """tcpdump in ``ns`` writing every packet as it arrives; returned once it listens.
    ``--immediate-mode`` matters: without it libpcap's TPACKET_V3 ring hands a block to
    tcpdump only when it is full or 1 s old, and a SIGTERM within that second loses the block
    (the UPDATEs, when FRR converges fast). Its ring then has fixed-size frames: 4 KiB ones (a
    BGP message is at most 4 KiB) in 16 MiB hold 4,000 packets where the default snap length's
    held 8, which a busy machine overran. ``link_type``: e.g. LINUX_SLL on "any"."""
    proc = ns.popen(
        ["tcpdump", "-i", ifname, *(["-y", link_type] if link_type else []), "-n", "-U",
         "--immediate-mode", "-s", "4096", "-B", "16384", "-w", str(out), bpf_filter],
        stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    said = [proc.stderr.readline().decode(errors="replace")]
    while said[-1] and "listening on" not in said[-1]:  # "" once tcpdump has exited
        said.append(proc.stderr.readline().decode(errors="replace"))
    if "listening on" not in said[-1]:
        raise LabError(f"tcpdump did not start: {' / '.join(x.strip() for x in said)}")
    return proc


def capture(
    out_dir: Path | None = None, *, echo: bool = True
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run the capture; return (nnhn vector, bfd vector) and write them to ``out_dir``."""

    def say(msg: str) -> None:
        if echo:
            print(f"capture: {msg}", flush=True)

    with Fabric(leaf_spine(1, 3, hosts=False)) as fab, tempfile.TemporaryDirectory() as tmp:
        conf = {
            "spine1": fabric_bgp_config(fab, "spine1", nhc_to=["leaf1"]),
            "leaf2": fabric_bgp_config(
                fab, "leaf2", networks=[ANYCAST, "198.19.202.0/24"], originate_own=False
            ),
            "leaf3": fabric_bgp_config(
                fab, "leaf3", networks=[ANYCAST, "198.19.203.0/24"], originate_own=False
            ),
            "leaf1": fabric_bgp_config(fab, "leaf1"),
        }
        frr: dict[str, FrrInstance] = {}
        for n in ("leaf2", "leaf3", "spine1"):
            frr[n] = FrrInstance(fab.ns(n), hostname=n).start(conf[n])
        spine = frr["spine1"]
        spine.wait_bgp_established(
            [fab.addr("leaf2", "spine1"), fab.addr("leaf3", "spine1")], timeout=60
        )
        deadline = time.monotonic() + 60
        while True:
            route = spine.vtysh_json(f"show bgp ipv4 unicast {ANYCAST} json")
            paths = route.get("paths", []) if isinstance(route, dict) else []
            if sum(1 for p in paths if p.get("multipath") or p.get("bestpath")) >= 2:
                break
            if time.monotonic() > deadline:
                raise LabError(f"spine1 has no 2 multipaths for {ANYCAST}: {paths}")
            time.sleep(0.2)
        say("spine1 has 2 multipaths for the anycast prefix; starting tcpdump and leaf1")
        pcap = Path(tmp) / "leaf1.pcap"
        dump = start_tcpdump(
            fab.ns("leaf1"),
            pcap,
            "tcp port 179 or udp port 3784",
            ifname=fab.ifname("leaf1", "spine1"),
        )
        try:
            leaf1 = frr["leaf1"] = FrrInstance(fab.ns("leaf1"), hostname="leaf1").start(
                conf["leaf1"]
            )
            leaf1.wait_bgp_established(timeout=60)
            leaf1.wait_bfd_up(timeout=60)
            deadline = time.monotonic() + 30
            while True:
                r = leaf1.vtysh_json(f"show bgp ipv4 unicast {ANYCAST} json")
                leaf1_nnhn = [p.get("nextNextHopNodes") for p in r.get("paths", []) if p]
                if any(leaf1_nnhn):
                    break
                if time.monotonic() > deadline:
                    raise LabError(f"leaf1 did not get NNHN for {ANYCAST}: {r}")
                time.sleep(0.2)
            time.sleep(0.5)
        finally:
            dump.send_signal(signal.SIGTERM)
            dump.wait(timeout=10)
        version = leaf1.build.version
        data = pcap.read_bytes()
    captured = time.strftime("%Y-%m-%d", time.gmtime())

    packets = list(parse_pcap(data))
    spine_ip, leaf_ip = fab.addr("spine1", "leaf1"), fab.addr("leaf1", "spine1")
    msgs = [m for st in tcp_streams(packets, spine_ip, leaf_ip) for m in bgp_messages(st)]
    nnhn_vec: dict[str, Any] | None = None
    others: list[dict[str, Any]] = []
    for msg in msgs:
        if msg[18] != 2:
            continue
        upd = parse_update(msg)
        if BGP_ATTR_NHC not in upd["attrs"]:
            continue
        flags, whole, value = upd["attrs"][BGP_ATTR_NHC]
        tlvs = nhc_tlvs(value)
        nnhn = [v for c, v in tlvs if c == 2]
        entry = {
            "attribute_hex": whole.hex(),
            "value_hex": value.hex(),
            "tlvs": [{"code": c, "value_hex": v.hex()} for c, v in tlvs],
            "prefixes": upd["nlri"],
        }
        if nnhn and nnhn_vec is None:
            ids = [
                str(ipaddress.IPv4Address(nnhn[0][i : i + 4])) for i in range(0, len(nnhn[0]), 4)
            ]
            nnhn_vec = {
                "frr_version": version,
                "captured": captured,
                "direction": f"spine1 ({spine_ip}, AS 65100, router-id 198.18.0.1) -> "
                f"leaf1 ({leaf_ip})",
                "attribute_flags": f"0x{flags:02x}",
                "attribute_type": BGP_ATTR_NHC,
                "attribute_hex": whole.hex(),
                "value_hex": value.hex(),
                "nhc_afi": struct.unpack("!H", value[:2])[0],
                "nhc_safi": value[2],
                "nhc_next_hop": str(ipaddress.ip_address(value[4 : 4 + value[3]])),
                "next_hop_bgp_id": ids[0],
                "nnh_ids": ids[1:],
                "prefixes": upd["nlri"],
                "update_hex": msg.hex(),
            }
        else:
            others.append(entry)
    if nnhn_vec is None:
        raise LabError("no UPDATE with an NNHN TLV was captured from spine1")
    nnhn_vec["other_nhc"] = others
    nnhn_vec["leaf1_json_next_next_hop_nodes"] = next(x for x in leaf1_nnhn if x)
    nnhn_vec["setup"] = (
        "glbdlab.capture: leaf1--spine1--{leaf2,leaf3}, eBGP, spine1 multipath-relax + "
        "send-nexthop-characteristics to leaf1; leaf2/leaf3 originate " + ANYCAST
    )

    bfd = [p for p in packets if p.proto == 17 and p.dport == 3784 and len(p.payload) >= 24]
    if not bfd:
        raise LabError("no BFD control packet was captured")
    first = bfd[0]
    sender = "spine1" if first.src == spine_ip else "leaf1"
    bfd_vec = {
        "frr_version": version,
        "captured": captured,
        "sender": f"{sender} bfdd ({first.src}:{first.sport} -> {first.dst}:{first.dport})",
        "ttl": first.ttl,
        "udp_payload_hex": first.payload.hex(),
        "decoded": decode_bfd(first.payload),
        "note": "first BFD control packet on the leaf1--spine1 link; discriminators are "
        "random per run; intervals are 1 s while the session is not Up (RFC 5880 6.8.3)",
    }
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "frr10_nnhn.json").write_text(json.dumps(nnhn_vec, indent=2) + "\n")
        (out_dir / "frr10_bfd.json").write_text(json.dumps(bfd_vec, indent=2) + "\n")
        say(f"wrote {out_dir / 'frr10_nnhn.json'} and {out_dir / 'frr10_bfd.json'}")
    return nnhn_vec, bfd_vec


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="capture FRR 10.x NNHN and BFD golden vectors")
    p.add_argument("--out", type=Path, default=Path("tests/vectors"), help="output directory")
    args = p.parse_args(argv)
    try:
        nnhn, bfd = capture(args.out)
    except LabError as exc:
        print(f"capture: error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"nnhn": nnhn["attribute_hex"], "bfd": bfd["udp_payload_hex"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
