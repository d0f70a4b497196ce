"""The lab's ``ip -ts monitor label nexthop route`` parser (the GLB bench's instrument), on
lines recorded from iproute2 on kernel 6.18."""

from __future__ import annotations

import datetime

from glbdlab.demo import parse_ip_monitor_line

LINES = """\
[2026-11-26T21:40:15.068132] [NEXTHOP]id 1 via 10.9.0.2 dev s10a scope link
[2026-11-26T21:40:15.086146] [NEXTHOP]id 10 group 1,3/2
[2026-11-26T21:40:15.093454] [NEXTHOP]id 10 group 1/2
[2026-11-26T21:40:15.100633] [ROUTE]10.20.0.0/24 nhid 10
\tnexthop via 10.9.0.2 dev s10a weight 1
[2026-11-26T21:40:15.106651] [ROUTE]10.21.0.1 nhid 1 via 10.9.0.2 dev s10a
[2026-11-26T21:40:15.115779] [ROUTE]Deleted 10.20.0.0/24 nhid 10
[2026-11-26T21:40:15.617048] [ROUTE]local fe80::68a0:6bff:fe5e:430d dev s10a table local
""".splitlines()


def test_groups_and_routes_with_their_stamps() -> None:
    recs = [r for r in map(parse_ip_monitor_line, LINES) if r is not None]
    t = datetime.datetime.fromisoformat("2026-11-26T21:40:15.086146").timestamp()
    assert recs[0] == ("nexthop", (t, 10, ((1, 3), (2, 1))))
    assert recs[1][1][1:] == (10, ((1, 1), (2, 1)))
    assert [r[1][1:] for r in recs[2:]] == [
        ("10.20.0.0/24", 10, False),
        ("10.21.0.1/32", 1, False),
        ("10.20.0.0/24", 10, True),
    ]
    assert len(recs) == 5  # a plain nexthop, continuation lines and IPv6 routes are not kept


def test_garbage_is_ignored() -> None:
    for line in ("", "[not a time] [NEXTHOP]id 1 group 1/2", "id 1 group 1/2", "[2026-11-26T"):
        assert parse_ip_monitor_line(line) is None
