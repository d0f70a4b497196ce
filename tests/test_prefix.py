"""glbd.base.prefix: networks that cache their hash behave as the ipaddress ones."""

from __future__ import annotations

import ipaddress

import pytest

from glbd.base.prefix import Net4, Net6, network


@pytest.mark.parametrize("text", ["203.0.113.0/24", "0.0.0.0/0", "2001:db8::/32", "::/0"])
def test_equal_and_same_hash_as_ipaddress(text: str) -> None:
    plain = ipaddress.ip_network(text)
    mine = network(text)
    assert isinstance(mine, Net4 | Net6) and mine.version == plain.version
    assert mine == plain and hash(mine) == hash(plain) and str(mine) == text
    assert {plain: 1}[mine] == 1 and {mine: 1}[plain] == 1  # mixed keys still match
    assert hash(mine) == hash(mine)  # the cached value


def test_same_errors_as_ip_network() -> None:
    assert network(("198.18.16.7", 32)) == ipaddress.ip_network("198.18.16.7/32")
    assert network((0x20010DB8 << 96, 32)) == ipaddress.ip_network("2001:db8::/32")
    assert network("10.0.0.1/24", strict=False) == ipaddress.ip_network("10.0.0.0/24")
    for bad in ("10.0.0.1/24", "not-a-prefix", "10.0.0.0/33"):
        with pytest.raises(ValueError):
            network(bad)


def test_sorts_and_compares_with_plain_networks() -> None:
    nets = [network("10.0.1.0/24"), ipaddress.ip_network("10.0.0.0/24"), network("10.0.0.0/16")]
    assert [str(n) for n in sorted(nets)] == ["10.0.0.0/16", "10.0.0.0/24", "10.0.1.0/24"]
    assert network("10.0.1.0/24").subnet_of(ipaddress.ip_network("10.0.0.0/16"))
