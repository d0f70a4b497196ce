"""group_set_wire: a group write packed in one go is byte for byte the generic encoder's."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as hs

from glbd.fib.fibmsg import encode_group, group_set, group_set_wire, parse_group_entries

_entries = hs.lists(
    hs.tuples(hs.integers(1, 0xFFFFFFFF), hs.integers(1, 65535)), min_size=1, max_size=300
)


_timers = hs.integers(0, 1 << 31)


@given(
    gid=hs.integers(1, 0xFFFFFFFF),
    entries=_entries,
    create=hs.booleans(),
    resilient=hs.none() | hs.tuples(hs.integers(1, 0xFFFF), _timers, _timers),
)
def test_same_bytes_as_the_generic_encoder(
    gid: int, entries: list[tuple[int, int]], create: bool, resilient: tuple[int, int, int] | None
) -> None:
    kw = {"protocol": 200, "create": create, "weight_16bit": True, "resilient": resilient}
    assert group_set_wire(gid, entries, **kw) == group_set(gid, entries, **kw).encode()  # type: ignore[arg-type]


@given(entries=_entries)
def test_a_group_payload_reads_back_as_its_entries(entries: list[tuple[int, int]]) -> None:
    assert parse_group_entries(encode_group(entries, True)) == tuple(sorted(entries))


@pytest.mark.parametrize("w16, weight", [(False, 0), (False, 257), (True, 0), (True, 65536)])
def test_a_weight_the_kernel_cannot_carry_is_refused(w16: bool, weight: int) -> None:
    with pytest.raises(ValueError, match="out of range"):
        group_set_wire(1, [(5, 1), (6, weight)], protocol=200, create=False, weight_16bit=w16)
