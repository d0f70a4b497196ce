"""Golden FRR 10.x captures (tests/vectors/frr10_*.json): self-consistency, and a re-capture."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest
from glbdlab.capture import Packet, capture, decode_bfd, nhc_tlvs, parse_update, tcp_streams

VECTORS = Path(__file__).resolve().parent.parent / "vectors"


def _load(name: str) -> dict[str, object]:
    data: dict[str, object] = json.loads((VECTORS / name).read_text())
    return data


def test_nnhn_vector_is_self_consistent() -> None:
    vec = _load("frr10_nnhn.json")
    upd = parse_update(bytes.fromhex(str(vec["update_hex"])))
    flags, whole, value = upd["attrs"][39]
    assert whole.hex() == vec["attribute_hex"] and value.hex() == vec["value_hex"]
    assert flags == 0xD0 and whole[:4] == bytes([0xD0, 39, 0, len(value)])
    assert upd["nlri"] == vec["prefixes"]
    ((code, nnhn),) = nhc_tlvs(value)
    assert code == 2
    ids = [".".join(str(b) for b in nnhn[i : i + 4]) for i in range(0, len(nnhn), 4)]
    assert ids == [vec["next_hop_bgp_id"], *vec["nnh_ids"]]  # type: ignore[misc]
    assert vec["nnh_ids"] == vec["leaf1_json_next_next_hop_nodes"]


def test_bfd_vector_is_self_consistent() -> None:
    vec = _load("frr10_bfd.json")
    assert decode_bfd(bytes.fromhex(str(vec["udp_payload_hex"]))) == vec["decoded"]


def _ids_hex(ids: list[str]) -> str:
    return "".join(ipaddress.IPv4Address(i).packed.hex() for i in ids)


@pytest.mark.netns
@pytest.mark.frr
@pytest.mark.slow
def test_recapture_matches_golden(tmp_path: Path) -> None:
    """Same FRR build, same lab: the captured bytes must equal the committed vectors (except
    BFD's random discriminator)."""
    nnhn, bfd = capture(tmp_path, echo=False)
    gold = _load("frr10_nnhn.json")
    if nnhn["frr_version"] != gold["frr_version"]:
        pytest.skip(f"chroot has FRR {nnhn['frr_version']}, vectors are {gold['frr_version']}")
    # FRR lists the next-next-hop nodes in the order their routes reached it (a busy machine
    # swaps them): the same set in another order is the same attribute
    if nnhn["nnh_ids"] != gold["nnh_ids"] and sorted(nnhn["nnh_ids"]) == sorted(gold["nnh_ids"]):
        for key in ("attribute_hex", "update_hex"):
            nnhn[key] = nnhn[key].replace(_ids_hex(nnhn["nnh_ids"]), _ids_hex(gold["nnh_ids"]))
        nnhn["nnh_ids"] = gold["nnh_ids"]
    for key in ("attribute_hex", "update_hex", "next_hop_bgp_id", "nnh_ids", "prefixes"):
        assert nnhn[key] == gold[key], key
    gold_bfd = _load("frr10_bfd.json")
    mine = dict(bfd["decoded"])
    theirs = dict(gold_bfd["decoded"])  # type: ignore[call-overload]
    mine.pop("my_discriminator")
    theirs.pop("my_discriminator")
    assert mine == theirs


def test_a_syn_starts_a_new_stream_on_the_same_ports() -> None:
    """A session that flaps may reconnect from the same port pair with a new sequence space:
    both connections' bytes are found, neither merged into the other."""

    def seg(seq: int, data: bytes, flags: int = 0x18) -> Packet:
        return Packet(0.0, "192.0.2.1", "192.0.2.2", 6, 40000, 179, 64, seq, data, flags)

    packets = [
        seg(1000, b"", 0x02),
        seg(1001, b"first"),
        seg(7_000_000, b"", 0x02),
        seg(7_000_001, b"sec"),
        seg(7_000_004, b"ond"),
        seg(7_000_001, b"sec"),  # a retransmission
    ]
    assert tcp_streams(packets, "192.0.2.1", "192.0.2.2") == [b"first", b"second"]


def test_segments_captured_out_of_order_still_make_the_stream() -> None:
    """A capture on a busy machine may record a later segment first: the stream still starts
    after the SYN (or at the earliest sequence number when the SYN was not captured)."""

    def seg(seq: int, data: bytes, flags: int = 0x18) -> Packet:
        return Packet(0.0, "192.0.2.1", "192.0.2.2", 6, 40000, 179, 64, seq, data, flags)

    swapped = [seg(0xFFFFFFF0, b"", 0x02), seg(0xFFFFFFF4, b"ond"), seg(0xFFFFFFF1, b"sec")]
    assert tcp_streams(swapped, "192.0.2.1", "192.0.2.2") == [b"second"]
    assert tcp_streams(swapped[1:], "192.0.2.1", "192.0.2.2") == [b"second"]
