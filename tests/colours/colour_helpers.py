"""Helpers shared by the colour tests."""

from __future__ import annotations

import json


def packets_line(body: bytes) -> str:
    """The line ExaBGP 5.0.15 writes for a received UPDATE with ``receive { packets; }``."""
    header = b"\xff" * 16 + (19 + len(body)).to_bytes(2, "big") + b"\x02"
    return json.dumps(
        {
            "exabgp": "5.0.0",
            "type": "update",
            "neighbor": {
                "address": {"local": "172.16.11.2", "peer": "172.16.11.1"},
                "asn": {"local": 65100, "peer": 65001},
                "direction": "receive",
                "message": {
                    "category": 2,
                    "header": "0x" + header.hex().upper(),
                    "body": "0x" + body.hex().upper(),
                },
            },
        }
    )
