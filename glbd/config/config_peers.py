"""The peers: ``[[neighbors]]`` (numbered, unnumbered and templates of ports), and the ``[bgp]``
section with what it originates (``[[bgp.network]]``, ``[bgp.redistribute_connected]``).

Separate because these are the BGP feature's settings; :mod:`glbd.config.config` holds the whole
file's model, splits ``[[neighbors]]`` with :func:`_split_neighbors` and checks across sections
(duplicate neighbors, originated prefixes).
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import BeforeValidator, ConfigDict, Field, field_validator, model_validator

from glbd.bgp import prefixlist
from glbd.config.config_base import _IFNAME, IfName, IPAddr, IPNet, _Model
from glbd.config.config_bfd import BfdOverride
from glbd.config.config_colours import Colour
from glbd.config.secrets import Secret, read_secret


def _tristate(v: Any) -> Any:
    if v is True or v is False or v == "auto":
        return v
    raise ValueError(f'expected true, false or "auto", got {v!r}')


def _remote_as(v: Any) -> Any:
    if v in ("external", "internal"):
        return v
    if isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 4_294_967_295:
        return v
    raise ValueError(
        'an AS number (1-4294967295), "external" (any AS but ours) or "internal" (ours)'
    )


class _PeerSection(_Model):
    """What numbered and unnumbered neighbors share."""

    #: the neighbor's AS, or as FRR spells it: "external" (any AS but ours), "internal" (ours)
    remote_as: Annotated[int | Literal["external", "internal"], BeforeValidator(_remote_as)]
    #: the fabric interface the neighbor is on. While it (or our address on it) is missing the
    #: neighbor waits (``glbctl neighbors``: ``waiting_for_interface``, ``no_local_address``)
    #: and is retried; the other neighbors start
    interface: IfName
    #: our address on that link (same IP version); none: the kernel's source address toward
    #: the peer on that interface
    local_address: IPAddr | None = None
    #: BGP hold time in seconds; none: ``bgp.hold_time``
    hold_time: Annotated[int, Field(ge=3, le=65535)] | None = None
    #: free text for the operator (``glbctl config`` shows it)
    description: str = ""
    #: only accept the TCP session (true), always connect (false), or "auto": passive when our
    #: address is the lower one, so two glbd routers never both connect
    passive: Annotated[bool | Literal["auto"], BeforeValidator(_tristate)] = "auto"
    #: this neighbor's overrides of ``[bfd]``
    bfd: BfdOverride = BfdOverride()
    #: TCP MD5 signature key (RFC 2385) for this session, read from this file at load time and
    #: on reload (1-80 bytes; checked like the other secret files); a key written in the file
    #: itself (``password``) is refused. TCP-AO is not available (docs/bgp.md)
    password_file: Path | None = None
    password: Secret | None = Field(default=None, exclude=True)
    #: the unicast address families activated for the session (a route of another family is
    #: rejected: ``family_not_active``); a change resets that session
    families: tuple[Literal["ipv4", "ipv6"], ...] = ("ipv4", "ipv6")
    #: import prefix list (docs/bgp.md, "Policy"): "[permit|deny] PREFIX [ge N] [le M]", first
    #: match wins, a family with entries denies what none matches; a denied route is rejected
    #: (``import_denied``)
    import_: tuple[str, ...] = Field(default=(), alias="import")
    #: export prefix list, written like ``import``: nothing it denies is advertised
    export: tuple[str, ...] = ()
    #: most prefixes taken from the neighbor; none: no limit
    max_prefixes: Annotated[int, Field(ge=1, le=100_000_000)] | None = None
    #: past ``max_prefixes``: "warn" (logged once per crossing, counted, routes kept) or
    #: "teardown" (its routes go, Cease subcode 1, kept down for ``max_prefixes_restart_s``)
    max_prefixes_action: Literal["warn", "teardown"] = "teardown"
    #: teardown: how long the session is kept down
    max_prefixes_restart_s: Annotated[float, Field(ge=1, le=86400)] = 60.0
    #: the session's fabric colour (docs/colours.md), a number or a ``colours.names`` name; on
    #: a template, every port's. None: ``[[colours.session]]``, else ``colours.default``
    colour: Colour | None = None

    model_config = ConfigDict(
        extra="forbid", frozen=True, arbitrary_types_allowed=True, populate_by_name=True
    )

    @field_validator("families")
    @classmethod
    def _families_set(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not v or len(set(v)) != len(v):
            raise ValueError('one or both of "ipv4", "ipv6", each once')
        return v

    @field_validator("import_", "export")
    @classmethod
    def _prefix_list(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        prefixlist.parse(v)  # ValueError says which entry and why
        return v

    @field_validator("password", mode="before")
    @classmethod
    def _no_inline_password(cls, v: Any) -> Any:
        if v is not None:  # a key in the config file would show in dumps, backups and diffs
            raise ValueError("keys are not written in the config: name a file with password_file")
        return v

    @model_validator(mode="after")
    def _load_password(self) -> Self:
        if self.password_file is not None:
            # Linux holds at most 80 key bytes per peer (TCP_MD5SIG_MAXKEYLEN)
            key = read_secret(self.password_file, 1, 80, "a TCP MD5 key")
            object.__setattr__(self, "password", key)
        return self

    def peer_as(self, local_as: int) -> int | None:
        """The AS the peer must have: ours for "internal", None (any other) for "external"."""
        if self.remote_as == "internal":
            return local_as
        if self.remote_as == "external":
            return None
        return self.remote_as


class NeighborSection(_PeerSection):
    """One BGP neighbor on a fabric interface (its address unique)."""

    #: the neighbor's address; an entry without it is an unnumbered neighbor, whose link-local
    #: address is learned on ``interface`` (docs/bgp.md, "Unnumbered neighbours")
    address: IPAddr

    @model_validator(mode="after")
    def _families(self) -> Self:
        if self.local_address is not None and self.local_address.version != self.address.version:
            raise ValueError("local_address and address are of different IP versions")
        return self


class UnnumberedSection(_PeerSection):
    """A ``[[neighbors]]`` entry without ``address``: the peer's link-local address is learned
    on ``interface`` from its router advertisements (docs/bgp.md, "Unnumbered neighbours")."""

    @model_validator(mode="after")
    def _link_local(self) -> Self:
        a = self.local_address
        if a is not None and not (a.version == 6 and a.is_link_local):
            raise ValueError(
                "an unnumbered neighbor (no address) runs over link-local IPv6: "
                "local_address must be an IPv6 link-local address or left out"
            )
        return self

    def learned(self, peer: ipaddress.IPv6Address) -> LearnedNeighbor:
        """This neighbor once its peer's address is known (the config is not read again)."""
        values = {k: getattr(self, k) for k in type(self).model_fields}
        return LearnedNeighbor.model_construct(address=peer, **values)


class LearnedNeighbor(NeighborSection):
    """An unnumbered neighbor with the address learned on its port (never from a file)."""


#: a template's port range: ``swp1-64`` is swp1 ... swp64
_PORT_RANGE = re.compile(r"^(.*[^\d])(\d+)-(\d+)$")
#: the most ports one template entry may name
_TEMPLATE_MAX = 1024


def _expand_ports(spec: Any, key: str) -> list[Any]:
    """A template's ``interfaces`` (at ``key``): names, and ranges such as ``swp1-64``."""
    names: list[Any] = []
    for item in spec if isinstance(spec, list) else [spec]:
        m = _PORT_RANGE.match(item) if isinstance(item, str) else None
        if m is None:
            names.append(item)
            continue
        lo, hi = int(m.group(2)), int(m.group(3))
        if hi < lo or hi - lo >= _TEMPLATE_MAX:
            raise ValueError(f"{key}: {item!r} is not an ascending range of ports")
        names += [f"{m.group(1)}{i}" for i in range(lo, hi + 1)]
    if len(names) > _TEMPLATE_MAX:
        raise ValueError(f"{key}: more than {_TEMPLATE_MAX} ports in one entry")
    return names


def _split_neighbors(raw: list[Any]) -> tuple[list[Any], list[Any], list[int], list[int]]:
    """``[[neighbors]]`` as written -> (numbered, unnumbered, the index each came from).
    An entry with ``interfaces`` (a template) is one unnumbered neighbor per port."""
    numbered: list[Any] = []
    unnumbered: list[Any] = []
    n_at: list[int] = []
    u_at: list[int] = []
    for i, item in enumerate(raw):
        if isinstance(item, dict) and "interfaces" in item:
            rest = {k: v for k, v in item.items() if k != "interfaces"}
            if "interface" in rest or "address" in rest:
                raise ValueError(
                    f"neighbors.{i}: a template (interfaces) has neither interface nor address"
                )
            for name in _expand_ports(item["interfaces"], f"neighbors.{i}.interfaces"):
                unnumbered.append({**rest, "interface": name})
                u_at.append(i)
        elif isinstance(item, dict) and "address" not in item:
            unnumbered.append(item)
            u_at.append(i)
        else:
            numbered.append(item)
            n_at.append(i)
    return numbered, unnumbered, n_at, u_at


def _glob_ifname(v: str) -> str:
    """An interface name, or a glob of names (``host*``, ``swp[1-4]``)."""
    if not _IFNAME.match(v):
        raise ValueError(f"{v!r} is not a Linux interface name or a glob of names")
    return v


class NetworkEntry(_Model):
    """A prefix advertised only while an interface is up (docs/bgp.md, "Conditional
    origination"): BIRD's ``route PREFIX via "IFACE"``, FRR's ``network`` with import check."""

    #: the prefix (IPv4 or IPv6, no host bits), advertised while ``interface`` is oper-up
    prefix: IPNet
    #: the interface it depends on: administratively up with carrier (``ip link``: ``UP``,
    #: ``LOWER_UP``); missing or down, the prefix is withdrawn
    interface: IfName


class RedistributeConnected(_Model):
    """The connected subnets of host-facing interfaces, each advertised while its interface is
    up and holds the address (docs/bgp.md, "Conditional origination"): FRR's ``redistribute
    connected route-map``, BIRD's ``protocol direct``. Link-local and loopback subnets never."""

    #: the interfaces whose addresses' subnets are advertised: names or globs (``"host*"``)
    interfaces: list[str]
    #: which of those subnets may be advertised, written like ``neighbors.import`` (first match
    #: wins; a family with entries denies what none matches); empty: all of them
    prefix_list: tuple[str, ...] = ()

    @field_validator("interfaces")
    @classmethod
    def _names(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("name at least one interface (or leave the table out)")
        for name in v:
            _glob_ifname(name)
        return v

    @field_validator("prefix_list")
    @classmethod
    def _prefix_list(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        prefixlist.parse(v)
        return v


class BgpSection(_Model):
    """BGP (docs/bgp.md): ExaBGP is glbd's speaker; these apply to every neighbor."""

    #: BGP hold time in seconds, for a neighbor without its own ``hold_time``
    hold_time: Annotated[int, Field(ge=3, le=65535)] = 9
    #: paths of equal AS-path length through different neighbor ASes form one multipath set
    multipath_relax: bool = True
    #: largest multipath set
    max_paths: Annotated[int, Field(ge=1, le=1024)] = 128
    #: load-balancer: reject an NHC whose next hop is all zeros (FRR sends 0.0.0.0 on eBGP
    #: IPv4); false: accept and count it
    nnhn_strict_next_hop: bool = False
    #: keep installed routes this long after ExaBGP restarts before withdrawing unrefreshed ones
    stale_timer_s: Annotated[float, Field(ge=0, le=3600)] = 60.0
    #: draft-ietf-idr-bgp-bfd-strict-mode: ignore a neighbor's routes while its BFD is down
    bfd_strict: bool = True
    #: graceful restart (RFC 4724). "full": keep a restarting peer's routes (stale) until its
    #: End-of-RIB, and advertise the capability (Forwarding State set: glbd keeps its FIB), so
    #: peers keep forwarding to glbd while it or its ExaBGP restarts (a crash, or a restart
    #: armed by ``glbctl graceful-restart``, as the package's upgrade does); a router that dies
    #: whole still leaves its BFD peers at once (docs/bgp.md, "Graceful restart"). "helper":
    #: only the first (peers drop glbd's routes while it restarts); "off"
    graceful_restart: Literal["off", "helper", "full"] = "full"
    #: with "full": the restart time glbd advertises, how long peers keep its routes while it
    #: is down (a few seconds above a glbd restart, e.g. 5-10)
    restart_time_s: Annotated[int, Field(ge=1, le=4095)] = 120
    #: once a restarting peer is back, how long its stale routes wait for its End-of-RIB
    stale_path_time_s: Annotated[float, Field(gt=0, le=3600)] = 360.0
    #: UPDATEs arriving within this long of a selection are selected together at its end
    #: (a quiet RIB still selects at once); 0 = select on every UPDATE
    update_coalesce_ms: Annotated[float, Field(ge=0, le=1000)] = 50.0
    #: initial-exchange deferral (FRR's update-delay): after a start or an ExaBGP restart,
    #: received routes are selected once, when every neighbor has sent End-of-RIB (or did
    #: not establish within ``update_delay_establish_wait_s``), at most this long; 0 = off.
    #: Own prefixes, losses of selected routes and BFD failures never wait
    update_delay_s: Annotated[float, Field(ge=0, le=3600)] = 120.0
    #: how long that deferral waits for a configured neighbor to establish at all
    update_delay_establish_wait_s: Annotated[float, Field(ge=0, le=3600)] = 10.0
    #: trust the NNHN of every prefix of a multi-prefix UPDATE (FRR computes one NNHN per UPDATE
    #: from its first prefix, so by default only that prefix's NNHN is used)
    trust_packed_nnhn: bool = False
    #: ExaBGP's own log level; its log (rotated at 1 MB, 3 kept) and stdout go to
    #: /var/log/glbd (the unit's ``LogsDirectory=``), else the runtime directory
    exabgp_log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "WARNING"
    #: drained (RFC 8326 graceful shutdown): every route glbd advertises carries 65535:0 and
    #: ``drain_prepend`` extra copies of our AS, and a helper's heartbeats give every link
    #: band 0; sessions stay up. ``glbctl drain`` does the same until undrain or a restart
    drain: bool = False
    #: drained: extra copies of our AS in the AS path, for peers that ignore the community
    drain_prepend: Annotated[int, Field(ge=0, le=10)] = 3
    #: RFC 8212 (FRR's ``bgp ebgp-requires-policy``): an eBGP neighbor without an ``import``
    #: list has every route rejected, one without an ``export`` list is sent nothing
    ebgp_requires_policy: bool = True
    #: prefixes advertised only while their interface is up (``prefix``, ``interface``); a
    #: prefix is here or in ``originate``, once
    network: list[NetworkEntry] = []
    #: advertise the connected subnets of these interfaces while each is up (``interfaces``,
    #: ``prefix_list``); none: no connected subnet is advertised
    redistribute_connected: RedistributeConnected | None = None
