"""AIGP (RFC 7311) on the ExaBGP side (docs/colours.md): the announce command glbd writes
(golden), ExaBGP 5.0.15's own API grammar and encoder taking it (packed only where AIGP is
enabled), the speaker passing an Advertise's AIGP into the command, and ExaBGP's neighbor
config enabling AIGP on every session (glbd decides per session colour what carries it)."""

from __future__ import annotations

import ipaddress
import logging
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from glbd.bgp import bgpmsg
from glbd.bgp import exabgp_api as api
from glbd.bgp.exabgp import ExabgpNeighbor, ExabgpParams, render_config
from glbd.bgp.ribtypes import Advertise
from glbd.bgp.speaker import command_for
from glbd.colours.colour import ColourCommunity

A = ipaddress.ip_address
N = ipaddress.ip_network

PRIMARY = api.Announce(
    A("172.16.11.1"),
    N("10.100.0.0/24"),
    A("172.16.11.2"),
    as_path=(65100,),
    colours=(ColourCommunity(1),),
    aigp=0,
)


def test_the_announce_command_of_a_primary_copy() -> None:
    assert api.encode_command(PRIMARY) == (
        "neighbor 172.16.11.1 announce route 10.100.0.0/24 next-hop 172.16.11.2 origin igp "
        "as-path [ 65100 ] extended-community [ 0x030b000000000001 ] aigp 0"
    )
    # a backup copy or an uncoloured route: no aigp word
    backup = api.Announce(PRIMARY.neighbor, PRIMARY.prefix, None, colours=(ColourCommunity(2),))
    assert "aigp" not in backup.encode()
    big = api.Announce(PRIMARY.neighbor, PRIMARY.prefix, None, aigp=2**64 - 1, nhc=b"\x01")
    assert big.encode() == (
        "neighbor 172.16.11.1 announce route 10.100.0.0/24 next-hop self origin igp "
        "aigp 18446744073709551615 attribute [ 0x27 0xc0 0x01 ]"
    )


def test_the_speaker_puts_an_adverts_aigp_in_the_command() -> None:
    adv = Advertise(PRIMARY.neighbor, PRIMARY.prefix, A("172.16.11.2"), (65100,), aigp=0)
    cmd = command_for(adv)
    assert isinstance(cmd, api.Announce) and cmd.aigp == 0
    assert cmd.encode().endswith(" aigp 0")
    no_aigp = command_for(Advertise(PRIMARY.neighbor, PRIMARY.prefix, A("172.16.11.2"), ()))
    assert isinstance(no_aigp, api.Announce) and no_aigp.aigp is None


@pytest.fixture
def exabgp_log() -> None:
    """ExaBGP's logger, which its parsers call, pointed at a plain logger."""
    from exabgp.logger.option import option

    option.logger = logging.getLogger("exabgp-test")
    option.formater = lambda line, source, level, timestamp: line
    option._set_level("WARNING")


@pytest.mark.usefixtures("exabgp_log")
def test_exabgp_takes_the_command_and_packs_aigp_only_where_it_is_enabled() -> None:
    """The command (less ``neighbor X``, which ExaBGP's dispatcher strips) through ExaBGP's
    API route grammar: the AIGP attribute packs to the octets glbd decodes as metric 0 on a
    session with AIGP enabled, and to nothing on one without (eBGP)."""
    from exabgp.bgp.message.update.attribute.attribute import Attribute
    from exabgp.reactor.api import API

    line = PRIMARY.encode().split(" ", 2)[2]
    (change,) = API(None).api_route(line)
    aigp = change.attributes[Attribute.CODE.AIGP]
    enabled = SimpleNamespace(aigp=True, local_as=65100, peer_as=65001)
    packed = bytes(aigp.pack(enabled))
    assert packed == bytes.fromhex("801a0b01000b0000000000000000")
    assert bgpmsg.decode_aigp(packed[3:], packed[0]) == (0, "")
    assert aigp.pack(SimpleNamespace(aigp=None, local_as=65100, peer_as=65001)) == b""


@pytest.mark.usefixtures("exabgp_log")
def test_exabgps_config_enables_aigp_on_every_session(tmp_path: Path) -> None:
    """Every neighbor, with graceful restart or without, gets ``aigp enable`` in one
    ``capability`` block: a reload that (un)colours a session leaves its ExaBGP definition,
    and so the session, as it is."""
    from exabgp.configuration.configuration import Configuration

    params = ExabgpParams(
        "10.0.0.11",
        65100,
        (
            ExabgpNeighbor("172.16.11.1", "172.16.11.2", 65001, 9),
            ExabgpNeighbor("172.16.12.1", "172.16.12.2", 65002, 9, restart_time=120),
        ),
    )
    text = render_config(params, [sys.executable, "-m", "glbd.bgp.exabgp_bridge", "/x/s"])
    assert text.count("aigp enable;") == 2 and text.count("capability {") == 2
    conf = tmp_path / "exabgp.conf"
    conf.write_text(text)
    c: Any = Configuration([str(conf)])
    assert c.reload(), c.error
    got = {
        str(n["peer-address"]): (n["capability"]["aigp"], n["capability"]["graceful-restart"])
        for n in c.neighbors.values()
    }
    assert got == {"172.16.11.1": (True, False), "172.16.12.1": (True, 120)}
