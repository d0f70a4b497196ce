"""Seeded fuzzing shared by the codec tests: random bytes and mutated seed messages must decode
or raise the codec's DecodeError, nothing else. Deterministic per seed, fast enough for 100k+
inputs per codec (the ``fuzz``-marked tests), with a short run in the default suite."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from typing import Any


def mutate(rng: random.Random, data: bytes, *, max_insert: int = 1) -> bytes:
    """1-3 random edits: overwrite a byte, truncate, insert 1..max_insert bytes, flip a bit."""
    b = bytearray(data)
    for _ in range(rng.randrange(1, 4)):
        op = rng.randrange(4)
        if op == 0 and b:
            b[rng.randrange(len(b))] = rng.randrange(256)
        elif op == 1 and b:
            del b[rng.randrange(len(b)) :]
        elif op == 2 or not b:
            at = rng.randrange(len(b) + 1)
            b[at:at] = rng.randbytes(rng.randrange(1, max_insert + 1))
        else:
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    return bytes(b)


def inputs(
    rng: random.Random, seeds: Sequence[bytes], n: int, *, random_len: int = 60, max_insert: int = 1
) -> Iterator[bytes]:
    """Every fourth input is random bytes, the rest mutated seeds."""
    for i in range(n):
        if i % 4 == 0 or not seeds:
            yield rng.randbytes(rng.randrange(random_len))
        else:
            yield mutate(rng, rng.choice(seeds), max_insert=max_insert)


def fuzz_codec(
    decode: Callable[[bytes], Any],
    error: type[Exception],
    seeds: Sequence[bytes],
    n: int,
    seed: int,
    *,
    check: Callable[[bytes, Any], None] | None = None,
    random_len: int = 60,
    max_insert: int = 1,
) -> tuple[int, int]:
    """Decode ``n`` inputs; return (decoded, rejected). ``check(data, msg)`` adds per-codec
    assertions on what decoded; any exception other than ``error`` fails the test."""
    ok = rejected = 0
    for data in inputs(random.Random(seed), seeds, n, random_len=random_len, max_insert=max_insert):
        try:
            msg = decode(data)
        except error:
            rejected += 1
            continue
        if check is not None:
            check(data, msg)
        ok += 1
    return ok, rejected
