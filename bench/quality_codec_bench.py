"""Heartbeat v1 codec speed on one core (target: decode of a 64-entry message >= 50k msg/s).

Run: ``.venv/bin/python bench/quality_codec_bench.py``. Prints messages/s and the ratio against a
baseline measured in the same run: ``struct.unpack`` of the same bytes into plain tuples, i.e.
the cheapest possible parse without any validation or objects.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from timing import rate

from heartbeat.wire import Entry, Heartbeat, HmacKey, decode, verify


def main() -> None:
    key = HmacKey(1, b"k" * 32)
    print(f"{'case':44s} {'msg/s':>10s} {'x baseline':>10s}")
    for n_entries in (64, 128):
        entries = [Entry(i + 1, i, 100_000, i % 8, 0, 1234, 5678) for i in range(n_entries)]
        msg = Heartbeat(0x0A000001, 7, 20_000, entries)
        plain, signed = msg.encode(), msg.encode(key)
        fmt = struct.Struct("!20x" + "IIIBBHI" * n_entries)
        base = rate(lambda fmt=fmt, plain=plain: fmt.unpack_from(plain))
        cases: list[tuple[str, Callable[[], object]]] = [
            ("decode (validated, lazy entries)", lambda p=plain: decode(p)),
            ("decode + verify HMAC", lambda s=signed: verify(s, key) and decode(s)),
            ("decode + materialise all entries", lambda p=plain: list(decode(p).entries)),
            ("encode (unsigned)", msg.encode),
            ("encode (signed)", lambda m=msg: m.encode(key)),
        ]
        print(f"-- {n_entries} entries, {len(plain)} / {len(signed)} octets")
        print(f"{'baseline struct.unpack_from':44s} {base:10.0f} {1.0:10.2f}")
        for name, fn in cases:
            r = rate(fn)
            print(f"{name:44s} {r:10.0f} {r / base:10.2f}")


if __name__ == "__main__":
    main()
