"""glbd configuration: TOML file -> pydantic models (strict, frozen) -> plain values for the cores.

The flow is one way. ``load(path)`` parses and validates the whole file and either returns a
:class:`Config` or raises :class:`ConfigError` listing *every* problem with the file, the dotted key
path and the reason. Nothing is applied until a whole file validates, so a bad file never
half-applies and a failed reload keeps the old config.

Secrets (the heartbeat HMAC key) are read from a separate file at load time; they are held in a
:class:`Secret` whose ``repr``/``str`` never show the value, so they cannot leak through logs.

The ``#:`` comment above each field is its description: :mod:`glbd.app.confref` turns the model
(every key, type, range, default, description) and :data:`RELOAD` (what a reload does with each
key: applied live, or refused: needs a restart) into docs/config-reference.md and glbd.toml(5).
The examples in ``conf/`` are checked by the test suite.

Why one file: it is one declarative schema, section after section in the order of the
reference, and the checks across sections (duplicate neighbours, originated prefixes) need all of
it; secret files are read by :mod:`glbd.app.secrets`.
"""

from __future__ import annotations

import fnmatch
import functools
import ipaddress
import itertools
import os
import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
    field_validator,
    model_validator,
)

from glbd.app.secrets import Secret, read_secret
from glbd.codec.colour import COLOUR_MAX
from glbd.core import prefixlist
from glbd.core.colours import Origination
from glbd.core.pathtable import DEFAULT_MAX_PROFILES


def _ip(v: Any) -> Any:
    if isinstance(v, ipaddress.IPv4Address | ipaddress.IPv6Address):
        return v
    if not isinstance(v, str):
        raise ValueError("expected an IP address as a string")
    try:
        return ipaddress.ip_address(v)
    except ValueError:
        raise ValueError(f"{v!r} is not a valid IPv4 or IPv6 address") from None


def _net(v: Any) -> Any:
    if isinstance(v, ipaddress.IPv4Network | ipaddress.IPv6Network):
        return v
    if not isinstance(v, str):
        raise ValueError("expected a prefix as a string, e.g. '198.19.1.0/24'")
    try:
        return ipaddress.ip_network(v, strict=True)
    except ValueError as e:
        raise ValueError(f"{v!r}: {e}") from None


def _tristate(v: Any) -> Any:
    if v is True or v is False or v == "auto":
        return v
    raise ValueError(f'expected true, false or "auto", got {v!r}')


IPAddr = Annotated[
    ipaddress.IPv4Address | ipaddress.IPv6Address,
    BeforeValidator(_ip),
    PlainSerializer(str, return_type=str),
]
IPNet = Annotated[
    ipaddress.IPv4Network | ipaddress.IPv6Network,
    BeforeValidator(_net),
    PlainSerializer(str, return_type=str),
]

HEARTBEAT_GROUP_V4 = "224.0.0.149"
#: glbd's IPv6 heartbeat group (no IANA assignment exists; 224.0.0.149 is not assigned either).
#: Link scope, so never forwarded off the link; the T flag (ff1x) marks it transient, i.e. not
#: from IANA's permanent registry, where ff0x::149 belongs to EPSON-disc-set (ff0x::140-14f).
HEARTBEAT_GROUP_V6 = "ff12::149"
HEARTBEAT_PORT = 6149
#: glbd's route/nexthop protocol number (rtnetlink ``rtm_protocol``/``nh_protocol``). 200 is not
#: used by any routing daemon listed in iproute2's rt_protos (zebra 11, bird 12, bgp 186..., 192).
RTPROT_GLBD = 200

_IFNAME = re.compile(r"^[^\s/:]{1,15}$")


def _ifname_ok(v: str) -> str:
    if not _IFNAME.match(v):
        raise ValueError("not a Linux interface name (1-15 chars, no spaces, '/' or ':')")
    return v


#: a Linux interface name
IfName = Annotated[str, AfterValidator(_ifname_ok)]


def colour_value(v: Any) -> int:
    """A fabric colour as written, once names are replaced: an integer 1..2^32-1."""
    if isinstance(v, str):
        raise ValueError(f"unknown colour name {v!r} (define it in colours.names)")
    if type(v) is not int or not 1 <= v <= COLOUR_MAX:
        raise ValueError(f"a colour is an integer 1..{COLOUR_MAX} or a name, got {v!r}")
    return v


#: a fabric colour (docs/colours.md), by number or (before validation) by a ``colours.names`` name
Colour = Annotated[int, BeforeValidator(colour_value)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


# --------------------------------------------------------------------------------------------
# sections


BfdAuthType = Literal[
    "simple", "keyed-md5", "meticulous-keyed-md5", "keyed-sha1", "meticulous-keyed-sha1"
]


class _KeyFile(_Model):
    """A key id plus a secret read from a file at load time (never shown)."""

    #: the key's id: sent with what this key signs, and selecting it on receipt
    key_id: Annotated[int, Field(ge=0, le=255)]
    #: the file the key is read from at load time and on reload: owned by root or glbd's
    #: user, not readable by others; the key never shows in logs or ``glbctl config``
    secret_file: Path
    secret: Secret | None = Field(default=None, exclude=True)

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    def _bounds(self) -> tuple[int, int, str]:
        raise NotImplementedError

    @model_validator(mode="after")
    def _load_secret(self) -> Self:
        lo, hi, what = self._bounds()
        object.__setattr__(self, "secret", read_secret(self.secret_file, lo, hi, what))
        return self


class BfdAuthKey(_KeyFile):
    """A key accepted on receive during a key rollover; its length is checked by the parent."""

    def _bounds(self) -> tuple[int, int, str]:
        return 1, 20, "a BFD key"


class BfdAuth(_KeyFile):
    """RFC 5880 §6.7 authentication. The key (password) is read from ``secret_file``:
    1-16 bytes for simple and MD5, up to 20 for SHA1; trailing newlines are stripped.
    We transmit with ``key_id``; ``accept`` lists further keys (each with its own key id)
    accepted on receive during a key rollover, the received Key ID selecting the key."""

    #: the authentication type; the key is 1-16 bytes, up to 20 for the SHA1 types
    type: BfdAuthType
    #: further keys (``key_id``, ``secret_file``) accepted on receive during a key rollover,
    #: the received Key ID selecting the key; what is sent uses ``key_id``
    accept: tuple[BfdAuthKey, ...] = ()

    def _bounds(self) -> tuple[int, int, str]:
        return 1, 20 if "sha1" in self.type else 16, f"a {self.type} key"

    @model_validator(mode="after")
    def _check_accept(self) -> Self:
        lo, hi, what = self._bounds()
        ids = {self.key_id}
        for k in self.accept:
            if k.key_id in ids:
                raise ValueError(f"key_id {k.key_id} is configured twice")
            ids.add(k.key_id)
            n = len(k.secret.reveal()) if k.secret is not None else 0
            if not lo <= n <= hi:
                raise ValueError(
                    f"accept key_id {k.key_id}: {what} is {lo}-{hi} bytes, the file holds {n}"
                )
        return self


class BfdSection(_Model):
    """BFD (RFC 5880/5881) for the neighbors; each neighbor may override these in
    ``[neighbors.bfd]``. Intervals in milliseconds."""

    #: BFD for every neighbor
    enabled: bool = True
    #: desired minimum transmit interval
    min_tx_ms: Annotated[int, Field(ge=3, le=60_000)] = 50
    #: required minimum receive interval
    min_rx_ms: Annotated[int, Field(ge=3, le=60_000)] = 50
    #: detection multiplier: down after this many receive intervals without a packet
    detect_mult: Annotated[int, Field(ge=1, le=255)] = 3
    #: wait for the peer to speak first
    passive: bool = False
    #: advertise the C bit (RFC 5880: BFD does not share fate with the control plane)
    cpi: bool = False
    #: RFC 5880 authentication (``type``, ``key_id``, ``secret_file``). Prefer
    #: "meticulous-keyed-sha1": the keyed types accept a repeated sequence number, so a replay
    #: is caught only once it stood still for 2 s (docs/security.md)
    auth: BfdAuth | None = None
    #: engine-wide: SCHED_FIFO priority of the BFD engine process (0 = normal scheduling).
    #: Without it, sessions flap on a busy box well below the count they hold with it
    #: (docs/benchmarks.md, BFD)
    rt_priority: Annotated[int, Field(ge=0, le=99)] = 10
    #: engine-wide: "process" (own interpreter, isolated from glbd's loop) or "thread"
    mode: Literal["process", "thread"] = "process"
    #: engine-wide: the BFD engine itself deletes a failed peer's nexthops in the kernel
    #: (pre-armed RTM_DELNEXTHOP, bfd/failover.py) instead of waiting for glbd's event loop
    kernel_failover: bool = True
    #: engine-wide: a BPF program at tc ingress takes the repeats of a session's steady state
    #: in the kernel (Linux 6.6+ and CAP_BPF, else every packet is read: ``glbctl status``
    #: ``bfd_engine.kernel_rx``): short intervals at scale hold with it, not without
    #: (docs/benchmarks.md). Those repeats pass no netfilter input hook
    kernel_rx: bool = True


class BfdOverride(_Model):
    """One neighbor's BFD settings over ``[bfd]`` (a key left out: ``[bfd]``'s)."""

    #: this neighbor's ``bfd.enabled``
    enabled: bool | None = None
    #: this neighbor's ``bfd.min_tx_ms``
    min_tx_ms: Annotated[int, Field(ge=3, le=60_000)] | None = None
    #: this neighbor's ``bfd.min_rx_ms``
    min_rx_ms: Annotated[int, Field(ge=3, le=60_000)] | None = None
    #: this neighbor's ``bfd.detect_mult``
    detect_mult: Annotated[int, Field(ge=1, le=255)] | None = None
    #: this neighbor's ``bfd.passive``
    passive: bool | None = None
    #: this neighbor's ``bfd.cpi``
    cpi: bool | None = None
    #: this neighbor's ``bfd.auth`` (the whole table)
    auth: BfdAuth | None = None


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


class HeartbeatAuth(_KeyFile):
    """HMAC-SHA256 trailer key: at least 16 bytes of secret."""

    def _bounds(self) -> tuple[int, int, str]:
        return 16, 4096, "an HMAC key"


def _hb_group4(v: Any) -> Any:
    if isinstance(v, str):
        try:
            a = ipaddress.ip_address(v)
        except ValueError:
            raise ValueError(f"{v!r} is not a valid IPv4 address") from None
        if a.version == 6:
            raise ValueError(
                f"{v!r} is IPv6: group is the IPv4 group; put an IPv6 group in heartbeat.group6"
            )
    return v


_HB_GROUP6_TAKEN = (ipaddress.IPv6Address("ff02::1"), ipaddress.IPv6Address("ff02::2"))


def _hb_group6(v: Any) -> Any:
    """heartbeat.group6: IPv6 multicast of link-local scope, not a group every node joins."""
    a: ipaddress.IPv4Address | ipaddress.IPv6Address
    if isinstance(v, ipaddress.IPv6Address):
        a = v
    elif isinstance(v, str):
        try:
            a = ipaddress.ip_address(v)
        except ValueError:
            raise ValueError(f"{v!r} is not a valid IPv6 address") from None
        if not isinstance(a, ipaddress.IPv6Address):
            raise ValueError(
                f"{v!r} is IPv4: group6 is the IPv6 group; put an IPv4 group in heartbeat.group"
            )
    else:
        raise ValueError("expected an IPv6 multicast address as a string, e.g. 'ff12::149'")
    if a.scope_id is not None:
        raise ValueError(f"{v!r}: no zone; the group is joined on each fabric interface")
    if not a.is_multicast:
        raise ValueError(f"{a} is not an IPv6 multicast address (ff00::/8)")
    if (int(a) >> 112) & 0xF != 2:
        raise ValueError(
            f"{a} is not of link-local scope (ff02::/16): heartbeats are one-hop (hop limit 255 "
            "is checked on receipt) and a link-scope group is never forwarded off the link, "
            "like 224.0.0.0/24 for IPv4"
        )
    if int(a) & ((1 << 112) - 1) == 0:
        raise ValueError(f"{a} has group id 0, which is reserved (RFC 4291)")
    if a in _HB_GROUP6_TAKEN or a in ipaddress.IPv6Network("ff02::1:ff00:0/104"):
        raise ValueError(
            f"{a} is a group the kernel joins for other protocols (all-nodes, all-routers or "
            "solicited-node): pick one only glbd joins, e.g. ff12::149"
        )
    return a


IPv6Group = Annotated[
    ipaddress.IPv6Address, BeforeValidator(_hb_group6), PlainSerializer(str, return_type=str)
]


class HeartbeatSection(_Model):
    """Heartbeats (docs/heartbeat.md §1). Each fabric interface uses the address family of its
    BGP neighbour: an IPv4 neighbour gets IPv4 heartbeats to ``group``, an IPv6 neighbour
    (numbered, or link-local on an unnumbered link) IPv6 heartbeats to ``group6``; an interface
    with neighbours of both families uses IPv4."""

    #: send (helper) and receive (load balancer) heartbeats; off: local link quality only
    enabled: bool = True
    #: the IPv4 multicast group (TTL 255, out of each fabric interface only)
    group: Annotated[ipaddress.IPv4Address, BeforeValidator(_hb_group4)] = ipaddress.IPv4Address(
        HEARTBEAT_GROUP_V4
    )
    #: the IPv6 multicast group, of link-local scope (hop limit 255, sent from the session's
    #: address)
    group6: IPv6Group = ipaddress.IPv6Address(HEARTBEAT_GROUP_V6)
    #: UDP port (a reload that changes group, group6 or port reopens the sockets)
    port: Annotated[int, Field(ge=1, le=65535)] = HEARTBEAT_PORT
    #: periodic send interval
    interval_ms: Annotated[int, Field(ge=5, le=10_000)] = 20
    #: the refresh while quiet: every link at the best band and up, no change sent for a
    #: second (a change still goes out at once, and the sender is back at interval_ms);
    #: at or below interval_ms: always interval_ms
    idle_interval_ms: Annotated[int, Field(ge=5, le=10_000)] = 100
    #: also send at once when a link's band changes
    on_change: bool = True
    #: a change send comes no closer than this to the previous one (at most interval_ms)
    min_spacing_ms: Annotated[int, Field(ge=1, le=10_000)] = 5
    #: a remote entry expires after this many of its sender's advertised intervals
    hold_multiplier: Annotated[int, Field(ge=2, le=255)] = 3
    #: one HMAC-SHA256 key (``key_id``, ``secret_file`` of at least 16 bytes). Without any key
    #: ``glbd check-config`` warns and ``glbctl status`` shows ``heartbeat_auth: off``
    auth: HeartbeatAuth | None = None
    #: several keys at once, for a rollover without loss (instead of ``auth``): every one is
    #: accepted
    keys: list[HeartbeatAuth] = []
    #: the key id this node signs with (default: the only key)
    send_key_id: Annotated[int, Field(ge=0, le=255)] | None = None

    @field_validator("group")
    @classmethod
    def _mcast4(cls, v: ipaddress.IPv4Address) -> ipaddress.IPv4Address:
        if not v.is_multicast:
            raise ValueError(f"{v} is not an IPv4 multicast address (224.0.0.0/4)")
        return v

    @model_validator(mode="after")
    def _spacing(self) -> Self:
        if self.min_spacing_ms > self.interval_ms:
            raise ValueError("min_spacing_ms must not exceed interval_ms")
        return self

    @model_validator(mode="after")
    def _key_ring(self) -> Self:
        if self.auth is not None and self.keys:
            raise ValueError("set heartbeat.auth (one key) or heartbeat.keys (several), not both")
        ids = [k.key_id for k in self.all_keys()]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ValueError(f"heartbeat.keys: key_id {dup[0]} is listed twice")
        if self.send_key_id is None and len(ids) > 1:
            raise ValueError("heartbeat.send_key_id: name the key this node signs with")
        if self.send_key_id is not None and self.send_key_id not in ids:
            raise ValueError(f"heartbeat.send_key_id {self.send_key_id} is not a configured key")
        return self

    def all_keys(self) -> list[HeartbeatAuth]:
        """Every accepted key (``auth`` or ``keys``)."""
        return [self.auth] if self.auth is not None else list(self.keys)

    def send_key(self) -> HeartbeatAuth | None:
        """The key this node signs its heartbeats with (None: unsigned)."""
        ks = self.all_keys()
        if self.send_key_id is None:
            return ks[0] if ks else None
        return next(k for k in ks if k.key_id == self.send_key_id)

    def warnings(self) -> list[str]:
        """What ``glbd check-config`` warns about (valid, but a choice worth seeing)."""
        if self.enabled and not self.all_keys():
            return [
                "heartbeat: no HMAC key (heartbeat.auth / heartbeat.keys): anyone on a fabric "
                "link can forge or replay link qualities (docs/heartbeat.md, 'Without "
                "authentication')"
            ]
        return []


class LinkQualitySection(_Model):
    """DLB-style quality bands. Load in percent of capacity, queue in bytes of qdisc backlog."""

    #: how often the interfaces' counters are sampled
    sample_interval_ms: Annotated[int, Field(ge=1, le=10_000)] = 10
    #: the interval while every link is quiet (up, below load_min_pct, no queue, best band):
    #: an idle router samples 5x less often; a link going down or up is read at once, and
    #: the first loaded sample returns to sample_interval_ms. At or below
    #: sample_interval_ms: always sample_interval_ms
    idle_sample_interval_ms: Annotated[int, Field(ge=1, le=10_000)] = 50
    #: EWMA weight of a new sample, 0 < alpha <= 1
    ewma_alpha: Annotated[float, Field(gt=0, le=1)] = 0.25
    #: the egress load (percent of capacity) range mapped onto the 8 load bands: its low end
    load_min_pct: Annotated[float, Field(ge=0, le=100)] = 10.0
    #: the high end of the load range
    load_max_pct: Annotated[float, Field(ge=0, le=100)] = 90.0
    #: the qdisc backlog range mapped onto the 8 queue bands: its low end
    queue_min_bytes: Annotated[int, Field(ge=0)] = 3_000
    #: the high end of the backlog range (raise it on deep-buffer links)
    queue_max_bytes: Annotated[int, Field(ge=1)] = 300_000
    #: share of the load band in the combined quality; (1 - rate_weight) goes to the queue band
    rate_weight: Annotated[float, Field(ge=0, le=1)] = 0.5
    #: a one-band drop is reported once the score is this far (in bands) past the boundary,
    #: or after this many samples in the new band; two bands down, down and up go out at once
    hysteresis_margin: Annotated[float, Field(ge=0, lt=1)] = 0.25
    #: after this many samples in a new band a one-band drop is reported (see hysteresis_margin)
    hysteresis_samples: Annotated[int, Field(ge=1, le=1000)] = 3
    #: congestion onset: a sample with the link at or above load_max_pct and its backlog at
    #: least this many bytes and growing is taken as measured, past the EWMA (0: off)
    onset_queue_bytes: Annotated[int, Field(ge=0)] = 1_000
    #: a sample that sees an onset only in part (saturated with no queue yet, or a queue
    #: building over an interval not yet saturated) takes one more sample this share of the
    #: interval later, when an onset would lower the band (0: off)
    onset_recheck: Annotated[float, Field(ge=0, lt=1)] = 0.5
    #: a better band is reported only after hysteresis_samples better samples in a row, as
    #: the worst of them (false: also by hysteresis_margin, or at once two bands up)
    confirm_improvements: bool = True
    #: interface name -> capacity in Mbit/s (veth and shaped links report no true speed)
    capacity_mbps: dict[str, Annotated[float, Field(gt=0)]] = {}
    #: the capacity of an interface that reports no speed and is not in capacity_mbps
    default_capacity_mbps: Annotated[float, Field(gt=0)] = 10_000.0
    #: tc classes ("major:minor", hex, as tc prints them) on the fabric interfaces whose
    #: traffic no load balancer can steer (strict-priority classes above the steered one);
    #: heartbeats then report capacity minus their rate (residual capacity). Each class needs
    #: a leaf qdisc of its own (tc qdisc add ... parent 10:2 ...), whose counters are read
    foreign_classes: list[str] = []
    #: what lowers a link's band: "all" its traffic and queue, "foreign" only the load of
    #: foreign_classes (what no load balancer steers); needs foreign_classes
    band_from: Literal["all", "foreign"] = "all"

    @field_validator("foreign_classes")
    @classmethod
    def _handles(cls, v: list[str]) -> list[str]:
        from glbd.core.linkq import parse_tc_handle

        for h in v:
            parse_tc_handle(h)
        return v

    @model_validator(mode="after")
    def _ranges(self) -> Self:
        if self.load_min_pct >= self.load_max_pct:
            raise ValueError("load_min_pct must be below load_max_pct")
        if self.queue_min_bytes >= self.queue_max_bytes:
            raise ValueError("queue_min_bytes must be below queue_max_bytes")
        for name in self.capacity_mbps:
            if not _IFNAME.match(name):
                raise ValueError(f"capacity_mbps: {name!r} is not a Linux interface name")
        if self.band_from == "foreign" and not self.foreign_classes:
            raise ValueError('band_from = "foreign" needs foreign_classes')
        return self


class PathQualitySection(_Model):
    """How local and remote quality become weights (see docs/heartbeat.md §7)."""

    #: "bottleneck": min(local, remote); "mean": their average
    combine: Literal["bottleneck", "mean"] = "bottleneck"
    #: weight multiplier for combined quality 0..7 (monotone, positive)
    weight_table: list[Annotated[int, Field(ge=1, le=65535)]] = [1, 2, 3, 5, 8, 12, 18, 27]
    #: the best next hop of a profile gets this weight (kernel: 255, or up to 65535 on 6.12+)
    max_weight: Annotated[int, Field(ge=1, le=65535)] = 255
    #: split by usable capacity x quality (WCMP), not just by quality
    capacity_aware: bool = True
    #: weights with memory: hold a next hop's penalty for a clearly worse downstream link until
    #: that link shows headroom (docs/heartbeat.md §7); false = weights from the current bands only
    weight_memory: bool = True
    #: most profiles (kernel groups) with NNHN; a prefix beyond it is routed by plain ECMP
    #: (docs/fib.md "Profile cap"): every UPDATE can carry a new NNHN list
    max_profiles: Annotated[int, Field(ge=1, le=1_000_000)] = DEFAULT_MAX_PROFILES

    @field_validator("weight_table")
    @classmethod
    def _table(cls, v: list[int]) -> list[int]:
        if len(v) != 8:
            raise ValueError("needs exactly 8 values, for quality 0..7")
        if any(a > b for a, b in itertools.pairwise(v)):
            raise ValueError("must not decrease (a better quality never gets less weight)")
        return v


def _auto_or(lo: float, hi: float, unit: str, integer: bool = False) -> BeforeValidator:
    """A number in [lo, hi] or "auto", with one error line that says both."""

    def check(v: Any) -> Any:
        if v == "auto":
            return v
        ok_type = int if integer else (int, float)
        if isinstance(v, ok_type) and not isinstance(v, bool) and lo <= v <= hi:
            return v
        raise ValueError(f'"auto" or a number of {unit} ({lo:g}-{hi:g})')

    return BeforeValidator(check)


class FibSection(_Model):
    """How glbd programs the kernel's routes and nexthop groups (docs/fib.md)."""

    #: rtnetlink protocol number marking glbd's routes and nexthops; nothing else is touched
    protocol: Annotated[int, Field(ge=5, le=255)] = RTPROT_GLBD
    #: the routing table
    table: Annotated[int, Field(ge=1, le=2**32 - 1)] = 254
    #: nexthop group type: "resilient" (Linux 5.13+) never moves a running flow until its
    #: bucket is idle; "hash-threshold" moves flows at once, with some reordering
    group_type: Literal["resilient", "hash-threshold"] = "resilient"
    #: buckets of a resilient group
    resilient_buckets: Annotated[int, Field(ge=2, le=65535)] = 128
    #: how long a resilient group's bucket is idle before it may move (0..3600); "auto": the
    #: flowlet timeout while ``[flowlet]`` is on (a bucket idle that long holds no flow that
    #: moving it could reorder), else 1.0
    resilient_idle_timer_s: Annotated[float | Literal["auto"], _auto_or(0, 3600, "s")] = "auto"
    #: a resilient group unbalanced this long moves buckets that are not idle too
    resilient_unbalanced_timer_s: Annotated[float, Field(ge=0, le=3600)] = 5.0
    #: set net.ipv4.nexthop_compat_mode=0 in glbd's namespace (weight changes stop emitting one
    #: RTM_NEWROUTE per route; route dumps then omit the expanded multipath)
    set_compat_mode_off: bool = False
    #: on stop: "keep" the routes and groups (traffic keeps flowing; the next glbd adopts
    #: them) or "remove" them
    on_stop: Literal["keep", "remove"] = "keep"
    #: after a restart, adopted objects nobody re-claims are removed after this long
    stale_timer_s: Annotated[float, Field(ge=0, le=86_400)] = 300.0
    #: period of the level-triggered reconcile of links and nexthops with the kernel
    reconcile_interval_s: Annotated[float, Field(gt=0, le=3600)] = 5.0
    #: full route audit (a route dump compared with the desired state); the periodic reconcile
    #: in between checks links and nexthops only, which is cheap at any route count
    route_audit_interval_s: Annotated[float, Field(gt=0, le=86_400)] = 60.0


class FlowletSection(_Model):
    """Flowlet switching (docs/flowlet.md): a tc BPF program on the host-facing interfaces
    gives each flow a new hash after an idle gap longer than ``timeout_us``, so the kernel's
    multipath selection may move it to another next hop (by glbd's weights) only where that
    cannot reorder it."""

    #: flowlet switching; off by default: with the safe "auto" timeout it reordered nothing
    #: but gained little in the lab's fabric benchmark (docs/benchmarks.md)
    enabled: bool = False
    #: the idle gap after which a flow may move (1..10000000); it must exceed the delay
    #: difference between the paths. "auto": the peak queueing delay measured on the two hops
    #: of the fabric's paths (the leaf's uplinks, the spines' downlinks from their heartbeats)
    #: over ``skew_window_s``, never below ``timeout_floor_us``
    timeout_us: Annotated[int | Literal["auto"], _auto_or(1, 10_000_000, "us", True)] = "auto"
    #: the least "auto" timeout (500 us: CONGA's choice for a datacenter fabric; it covers
    #: queues too short for the 10 ms link sampling to see)
    timeout_floor_us: Annotated[int, Field(ge=1, le=10_000_000)] = 500
    #: the least "auto" timeout for the first ``skew_window_s`` after start, before the window
    #: has seen the fabric's queues (0: none); erring long only costs moves, never order
    timeout_start_us: Annotated[int, Field(ge=0, le=10_000_000)] = 100_000
    #: how long "auto" remembers the deepest queue it saw
    skew_window_s: Annotated[float, Field(gt=0, le=86_400)] = 60.0
    #: where the program runs; default: every interface that is no neighbor's port (and not lo)
    interfaces: list[str] | None = None
    #: flows tracked at once (an LRU table: the least recently seen flow makes room)
    table_size: Annotated[int, Field(ge=64, le=16_777_216)] = 65_536
    #: a flow idle this long counts as a new flow when it comes back, not as a moved one
    aging_s: Annotated[float, Field(gt=0, le=86_400)] = 10.0
    #: write fib_multipath_hash_policy = 1 (IPv4 and IPv6): the only policy under which the
    #: kernel uses the hash the program sets
    set_hash_policy: bool = True
    #: "remove": filter and pins go on stop; "keep": the next glbd adopts them (no rehash)
    on_stop: Literal["remove", "keep"] = "remove"
    #: which gaps move a flow. "on-change": only while the weights glbd programs have shifted
    #: by ``move_threshold`` of a group's traffic, every gap for a moment, none once they
    #: settle (a failed next hop moves only its own flows); "always": every gap
    move: Literal["on-change", "always"] = "on-change"
    #: the weight shift (share of a group's traffic, 0..1) that lets gaps move flows
    move_threshold: Annotated[float, Field(gt=0, le=1)] = 0.05
    #: how long gaps may move flows after such a shift (the chance falls linearly to 0)
    move_decay_s: Annotated[float, Field(gt=0, le=3600)] = 1.0

    @field_validator("interfaces")
    @classmethod
    def _ifnames(cls, v: list[str] | None) -> list[str] | None:
        for name in v or []:
            if not _IFNAME.match(name):
                raise ValueError(f"{name!r} is not a Linux interface name")
        return v

    @model_validator(mode="after")
    def _aging(self) -> Self:
        least = self.timeout_floor_us if self.timeout_us == "auto" else self.timeout_us
        if self.aging_s * 1e6 <= least:
            raise ValueError("aging_s must be longer than timeout_us (or timeout_floor_us)")
        return self

    def warnings(self, fabric: Iterable[str] = ()) -> list[str]:
        """What ``glbd check-config`` warns about: the machine cannot run it, or the program
        is put on a fabric interface."""
        if not self.enabled:
            return []
        from glbd.io.flowlet import problems

        out = [f"flowlet: enabled, but {p}" for p in problems()]
        on_fabric = sorted(set(self.interfaces or ()) & set(fabric))
        if on_fabric:
            out.append(
                f"flowlet.interfaces: {', '.join(on_fabric)} is a neighbor's port: transit "
                "traffic arriving there is rehashed too"
            )
        return out


class ControlSection(_Model):
    """The control socket ``glbctl`` talks to."""

    #: the socket (0660, group glbd if it exists)
    socket: Path = Path("/run/glbd/glbd.sock")


class LoggingSection(_Model):
    """glbd's log, one line per event."""

    #: the least level logged (``glbd run --log-level`` overrides it until a reload changes it)
    level: Literal["debug", "info", "warning", "error"] = "info"
    #: auto: console on a TTY, journal when stderr is journald's stream, else json; journal:
    #: JSON lines with a syslog-priority prefix, so ``journalctl -p err`` works
    format: Literal["auto", "console", "json", "journal"] = "auto"


class MetricsSection(_Model):
    """The Prometheus endpoint (docs/metrics.md)."""

    #: HOST:PORT to serve metrics on (no authentication: bind to 127.0.0.1 or a management
    #: address); none: no endpoint
    listen: str | None = None

    @field_validator("listen")
    @classmethod
    def _hostport(cls, v: str | None) -> str | None:
        if v is None:
            return v
        host, sep, port = v.rpartition(":")
        if not sep or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError("expected HOST:PORT, e.g. 127.0.0.1:9477")
        try:
            ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            raise ValueError(f"{host!r} is not an IP address") from None
        return v


_COLOUR_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
_GLOB = re.compile(r"[*?\[]")


class ColourSession(_Model):
    """The colour of the sessions an entry matches: one neighbour, or the sessions on the
    interfaces a name or glob matches (a template's ports)."""

    #: the neighbour's address (neighbour level)
    neighbor: IPAddr | None = None
    #: an interface name, or a glob of names such as ``swp[1-4]`` or ``swp*`` (template level)
    interface: str | None = None
    #: the sessions' fabric colour
    colour: Colour

    @model_validator(mode="after")
    def _one_match(self) -> Self:
        if (self.neighbor is None) == (self.interface is None):
            raise ValueError("name either neighbor or interface")
        if self.interface is not None and not re.fullmatch(r"[^\s/:]{1,15}", self.interface):
            raise ValueError(f"{self.interface!r} is not an interface name or a glob of names")
        return self

    def matches(
        self, address: ipaddress.IPv4Address | ipaddress.IPv6Address | None, ifname: str
    ) -> int:
        """How well it matches a session: 3 its address, 2 its interface, 1 by glob, 0 not."""
        if self.neighbor is not None:
            return 3 if address is not None and address == self.neighbor else 0
        assert self.interface is not None
        if not _GLOB.search(self.interface):
            return 2 if ifname == self.interface else 0
        return 1 if fnmatch.fnmatchcase(ifname, self.interface) else 0


class ColourOrigin(_Model):
    """A prefix this router originates with a colour (it must also be originated: ``originate``,
    ``[[bgp.network]]`` or a connected prefix; this only colours it)."""

    #: the prefix
    prefix: IPNet
    #: its colour: sent with it to the sessions of this colour and to the uncoloured ones
    colour: Colour
    #: backup colours: each session of one of them gets the route with that colour (a backup
    #: copy); in no order (the fallback spreads over all of them)
    backup_colours: tuple[Colour, ...] = ()

    @model_validator(mode="after")
    def _backups(self) -> Self:
        Origination(self.colour, self.backup_colours)  # ValueError says what is wrong
        return self

    def origination(self) -> Origination:
        return Origination(self.colour, self.backup_colours)


def _colour_names(raw: Any, names: Any) -> Any:
    """One colour as written, a ``names`` name replaced by its number (an undefined name stays
    and fails with its key)."""
    return names.get(raw, raw) if isinstance(raw, str) and isinstance(names, dict) else raw


def _replace_colour_names(raw: Any) -> Any:
    """Colour names -> numbers in the raw ``[colours]`` section."""
    if not isinstance(raw, dict) or not isinstance(raw.get("names", {}), dict):
        return raw
    names = raw.get("names", {})
    out = dict(raw)
    if "default" in out:
        out["default"] = _colour_names(out["default"], names)
    for key in ("session", "originate"):
        entries = out.get(key)
        if not isinstance(entries, list):
            continue
        fixed = []
        for e in entries:
            if isinstance(e, dict):
                e = dict(e)
                if "colour" in e:
                    e["colour"] = _colour_names(e["colour"], names)
                if isinstance(e.get("backup_colours"), list):
                    e["backup_colours"] = [_colour_names(b, names) for b in e["backup_colours"]]
            fixed.append(e)
        out[key] = fixed
    return out


class ColoursSection(_Model):
    """Fabric colours (BGP-DPF, docs/colours.md): each single-hop session may have a colour;
    coloured routes stay inside their colour's logical fabric (a route of another colour is
    kept but hidden), and coloured origination sends a primary copy and backup copies. A
    session's colour: its neighbor's ``colour``, else the ``session`` entry naming its address,
    else the one naming its interface exactly, else the first glob that matches, else
    ``default``, else uncoloured."""

    #: names for colours, e.g. ``{ green = 1 }``: usable wherever a colour is written (here and
    #: in ``neighbors.colour``); they must mean the same on every router
    names: dict[str, Colour] = {}
    #: the colour of every session nothing else colours (global level); none: uncoloured
    default: Colour | None = None
    #: per-neighbour (``neighbor``) and per-interface (``interface``, a name or a glob such as
    #: ``swp[1-4]``) colours, each with its ``colour``
    session: list[ColourSession] = []
    #: coloured origination (``prefix``, ``colour``, ``backup_colours``): the prefix goes with
    #: its colour to the sessions of that colour and the uncoloured ones, and with each backup
    #: colour to the sessions of that colour; a prefix not here goes everywhere uncoloured
    originate: list[ColourOrigin] = []
    #: how long a failed preferred path must stay good before its colour returns to it; a new
    #: failure restarts the wait (0: return at once). Not used yet: the per-colour forwarding
    #: is not wired (docs/colours.md, "Not built yet")
    hold_down_s: Annotated[float, Field(ge=0, le=3600)] = 30.0

    @model_validator(mode="before")
    @classmethod
    def _names_first(cls, raw: Any) -> Any:
        return _replace_colour_names(raw)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        seen: dict[int, str] = {}
        for name, colour in self.names.items():
            if not _COLOUR_NAME.match(name):
                raise ValueError(f"colour name {name!r}: lower case letters, digits, '-', '_'")
            if colour in seen:
                raise ValueError(f"colours {seen[colour]!r} and {name!r} are both {colour}")
            seen[colour] = name
        where: dict[str, int] = {}
        for i, s in enumerate(self.session):
            key = str(s.neighbor) if s.neighbor is not None else f"interface {s.interface}"
            if key in where:
                raise ValueError(
                    f"session.{i}: {key} is coloured twice (also session.{where[key]})"
                )
            where[key] = i
        nets: dict[str, int] = {}
        for i, o in enumerate(self.originate):
            key = str(o.prefix)
            if key in nets:
                raise ValueError(
                    f"originate.{i}: {key} is coloured twice (also originate.{nets[key]})"
                )
            nets[key] = i
        return self

    def session_colour(
        self, address: ipaddress.IPv4Address | ipaddress.IPv6Address | None, ifname: str
    ) -> int | None:
        """The colour the ``session`` entries and ``default`` give the session with this peer
        address (None: unnumbered, not learned yet) on this interface."""
        best, colour = 0, self.default
        for s in self.session:
            m = s.matches(address, ifname)
            if m > best:
                best, colour = m, s.colour
        return colour

    def originations(self) -> dict[ipaddress.IPv4Network | ipaddress.IPv6Network, Origination]:
        """Each coloured prefix's :class:`Origination` (a prefix not here is uncoloured)."""
        return {o.prefix: o.origination() for o in self.originate}

    def name_of(self, colour: int) -> str:
        """The colour's name, or its number as text."""
        for name, c in self.names.items():
            if c == colour:
                return name
        return str(colour)


class Config(_Model):
    """The whole file."""

    #: IPv4 BGP identifier, also the GLB node id that heartbeats and NNHN carry (not 0.0.0.0)
    router_id: ipaddress.IPv4Address
    #: the local AS
    local_as: Annotated[int, Field(ge=1, le=4_294_967_295)]
    #: "helper" (spine: re-advertises with NNHN, sends heartbeats), "load-balancer" (leaf:
    #: weighted nexthop groups from NNHN and heartbeats) or "both"
    role: Literal["helper", "load-balancer", "both"]
    #: SCHED_RR priority of glbd's event loop while it is not busy with bulk work (0 = normal
    #: scheduling), below the BFD engine's: a heartbeat waits for no ordinary process. Busy
    #: (half a core or more over 100 ms) it drops to normal scheduling (``glbctl status``:
    #: ``scheduling``)
    rt_priority: Annotated[int, Field(ge=0, le=99)] = 5
    #: BGP neighbors, one ``[[neighbors]]`` entry each
    neighbors: list[NeighborSection] = []
    #: internal: the ``[[neighbors]]`` entries without an address, moved here when the file is
    #: read (write them as ``[[neighbors]]``)
    unnumbered: list[UnnumberedSection] = []
    #: prefixes (IPv4 or IPv6, no host bits) this router announces
    originate: list[IPNet] = []
    bfd: BfdSection = BfdSection()
    bgp: BgpSection = BgpSection()
    heartbeat: HeartbeatSection = HeartbeatSection()
    link_quality: LinkQualitySection = LinkQualitySection()
    path_quality: PathQualitySection = PathQualitySection()
    fib: FibSection = FibSection()
    control: ControlSection = ControlSection()
    logging: LoggingSection = LoggingSection()
    metrics: MetricsSection = MetricsSection()
    flowlet: FlowletSection = FlowletSection()
    colours: ColoursSection = ColoursSection()

    @model_validator(mode="before")
    @classmethod
    def _neighbor_colour_names(cls, data: Any) -> Any:
        """``neighbors.colour`` may be a ``colours.names`` name: replaced by its number."""
        raw = data.get("colours") if isinstance(data, dict) else None
        names = raw.get("names") if isinstance(raw, dict) else None
        if not isinstance(names, dict):
            return data
        out = dict(data)
        for key in ("neighbors", "unnumbered"):
            entries = out.get(key)
            if isinstance(entries, list):
                out[key] = [
                    {**e, "colour": _colour_names(e["colour"], names)}
                    if isinstance(e, dict) and "colour" in e
                    else e
                    for e in entries
                ]
        return out

    @model_validator(mode="before")
    @classmethod
    def _unnumbered(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("neighbors"), list):
            numbered, unnumbered, _, _ = _split_neighbors(data["neighbors"])
            if unnumbered:
                data = {
                    **data,
                    "neighbors": numbered,
                    "unnumbered": [*data.get("unnumbered", []), *unnumbered],
                }
        return data

    @field_validator("router_id")
    @classmethod
    def _rid(cls, v: ipaddress.IPv4Address) -> ipaddress.IPv4Address:
        if int(v) == 0:
            raise ValueError("router_id must not be 0.0.0.0")
        return v

    @model_validator(mode="after")
    def _unique(self) -> Self:
        problems = _duplicates(
            [str(n.address) for n in self.neighbors], [str(p) for p in self.originate]
        )
        problems += _duplicate_networks(
            [str(p) for p in self.originate], [str(e.prefix) for e in self.bgp.network]
        )
        ports = [u.interface for u in self.unnumbered]
        problems += [
            Problem("neighbors", f"duplicate unnumbered neighbor on {name}")
            for name in sorted({p for p in ports if ports.count(p) > 1})
        ]
        if problems:
            raise ValueError("; ".join(p.reason for p in problems))
        return self

    @model_validator(mode="after")
    def _coloured_once(self) -> Self:
        """A neighbor with its own ``colour`` is not also named by a ``colours.session``."""
        named = {s.neighbor: i for i, s in enumerate(self.colours.session) if s.neighbor}
        for n in self.neighbors:
            if n.colour is not None and n.address in named:
                raise ValueError(
                    f"neighbor {n.address} is coloured twice (its colour and "
                    f"colours.session.{named[n.address]})"
                )
        return self

    # ---- derived views -----------------------------------------------------------------

    def neighbor_colour(self, n: NeighborSection | UnnumberedSection) -> int | None:
        """The session's fabric colour (docs/colours.md): the neighbor's own ``colour``, else
        ``[colours]``'s (by address, interface, glob, then ``default``); None: uncoloured."""
        if n.colour is not None:
            return n.colour
        address = n.address if isinstance(n, NeighborSection) else None
        return self.colours.session_colour(address, n.interface)

    def with_learned(self, peers: dict[str, ipaddress.IPv6Address]) -> Config:
        """This config with each unnumbered neighbor whose peer was learned (by port) as a
        neighbor with that address, in place of any learned before."""
        numbered = [n for n in self.neighbors if not isinstance(n, LearnedNeighbor)]
        learned = [u.learned(peers[u.interface]) for u in self.unnumbered if u.interface in peers]
        return self.model_copy(update={"neighbors": [*numbered, *learned]})

    @property
    def is_helper(self) -> bool:
        return self.role in ("helper", "both")

    @property
    def is_load_balancer(self) -> bool:
        return self.role in ("load-balancer", "both")

    def neighbor_bfd(self, n: NeighborSection) -> BfdSection:
        """The effective BFD settings of one neighbor (its overrides over the defaults)."""
        over = {
            k: getattr(n.bfd, k) for k in type(n.bfd).model_fields if getattr(n.bfd, k) is not None
        }
        return self.bfd.model_copy(update=over)

    def policy_warnings(self) -> list[str]:
        """What ``glbd check-config`` warns about RFC 8212: each eBGP neighbor (its AS not
        ours) that exchanges nothing in one direction for want of an import/export list."""
        if not self.bgp.ebgp_requires_policy:
            return []
        effect = {"import": "no route from it is taken", "export": "nothing is sent to it"}
        out = []
        for n in [*self.neighbors, *self.unnumbered]:
            if n.peer_as(self.local_as) == self.local_as:
                continue  # iBGP: RFC 8212 is about eBGP only
            missing = [side for side, pl in (("import", n.import_), ("export", n.export)) if not pl]
            if missing:
                name = n.address if isinstance(n, NeighborSection) else f"on {n.interface}"
                out.append(
                    f"neighbors {name}: eBGP without {' and '.join(missing)} policy: "
                    + "; ".join(effect[m] for m in missing)
                    + ' (RFC 8212, bgp.ebgp_requires_policy; e.g. ["0.0.0.0/0 le 32", '
                    '"::/0 le 128"] permits all)'
                )
        return out

    def redacted(self) -> dict[str, Any]:
        """JSON-safe dump with secrets removed (for `glbctl config` and logs)."""
        data = self.model_dump(mode="json", by_alias=True)
        for auth in (
            data.get("heartbeat", {}).get("auth"),
            *data.get("heartbeat", {}).get("keys", []),
            data.get("bfd", {}).get("auth"),
            *(n.get("bfd", {}).get("auth") for n in data.get("neighbors", [])),
        ):
            if auth:
                auth.pop("secret", None)
        return data


# --------------------------------------------------------------------------------------------
# loading


@dataclass(frozen=True)
class Problem:
    key: str
    reason: str

    def format(self, path: str) -> str:
        return f"{path}: {self.key}: {self.reason}"


class ConfigError(Exception):
    """A config file that cannot be used; ``problems`` lists every error found."""

    def __init__(self, path: str, problems: Iterable[Problem]) -> None:
        self.path = path
        self.problems = list(problems)
        super().__init__(self.format())

    def format(self) -> str:
        return "\n".join(p.format(self.path) for p in self.problems)


def _loc(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        # pydantic inserts union member tags ("IPv4Address") and validator names into loc
        if isinstance(item, str) and (item[:1].isupper() or item.startswith("function-")):
            continue
        parts.append(str(item))
    return ".".join(parts) or "(top level)"


def _reason(err: Any) -> str:
    kind = err.get("type", "")
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "required key is missing"
    msg = str(err.get("msg", "invalid"))
    return msg.removeprefix("Value error, ")


def _duplicates(neighbors: list[Any], originate: list[Any]) -> list[Problem]:
    """Duplicate neighbors/prefixes, found on raw values so they are reported even when other
    keys of the same file fail validation."""

    def norm(v: Any, conv: Any) -> str | None:
        try:
            return str(conv(v))
        except (ValueError, TypeError):
            return None

    out: list[Problem] = []
    seen: dict[str, int] = {}
    for i, a in enumerate(neighbors):
        key = norm(a, ipaddress.ip_address)
        if key is None:
            continue
        if key in seen:
            out.append(
                Problem(
                    f"neighbors.{i}.address",
                    f"duplicate neighbor {key} (also neighbors.{seen[key]})",
                )
            )
        else:
            seen[key] = i
    nets: dict[str, int] = {}
    for i, p in enumerate(originate):
        key = norm(p, lambda x: ipaddress.ip_network(x, strict=False))
        if key is None:
            continue
        if key in nets:
            out.append(
                Problem(f"originate.{i}", f"duplicate prefix {key} (also originate.{nets[key]})")
            )
        else:
            nets[key] = i
    return out


def _duplicate_networks(originate: list[Any], networks: list[Any]) -> list[Problem]:
    """A ``[[bgp.network]]`` prefix that ``originate`` or another entry has already."""

    def norm(v: Any) -> str | None:
        try:
            return str(ipaddress.ip_network(v, strict=False))
        except (ValueError, TypeError):
            return None

    seen = {k: f"originate.{i}" for i, p in enumerate(originate) if (k := norm(p)) is not None}
    out: list[Problem] = []
    for i, p in enumerate(networks):
        key = norm(p)
        if key is None:
            continue
        if key in seen:
            why = f"duplicate prefix {key} (also {seen[key]})"
            out.append(Problem(f"bgp.network.{i}.prefix", why))
        else:
            seen[key] = f"bgp.network.{i}"
    return out


def _entry_key(key: str, n_at: list[int], u_at: list[int]) -> str:
    """``neighbors.1.x`` / ``unnumbered.0.x`` (after the split) -> the written entry's key."""
    head, _, rest = key.partition(".")
    idx, _, tail = rest.partition(".")
    at = {"neighbors": n_at, "unnumbered": u_at}.get(head)
    if at is None or not idx.isdigit() or int(idx) >= len(at):
        return key
    return ".".join(["neighbors", str(at[int(idx)]), *([tail] if tail else [])])


def parse(data: dict[str, Any], path: str = "<config>") -> Config:
    """Validate an already-parsed TOML document."""
    try:
        return Config.model_validate(data)
    except ValidationError as e:
        problems: dict[tuple[str, str], None] = {}
        for err in e.errors():
            if err.get("type") == "value_error" and "duplicate " in str(err.get("msg")):
                continue  # reported with a precise key by _duplicates below
            key, reason = _loc(err["loc"]), _reason(err)
            if key == "(top level)" and reason.startswith("neighbors."):  # a template's
                key, _, reason = reason.partition(": ")
            problems[(key, reason)] = None
        raw_n = data.get("neighbors")
        raw_o = data.get("originate")
        nlist: list[Any] = raw_n if isinstance(raw_n, list) else []
        # errors of the split lists name the [[neighbors]] entry they came from
        try:
            _, unnumbered, n_at, u_at = _split_neighbors(nlist)
        except ValueError:
            unnumbered, n_at, u_at = [], [], []
        problems = {(_entry_key(k, n_at, u_at), r): None for k, r in problems}
        ports: dict[Any, int] = {}
        for j, u in enumerate(unnumbered):
            port = u.get("interface") if isinstance(u, dict) else None
            if not isinstance(port, str):
                continue
            if port in ports:
                why = f"duplicate unnumbered neighbor on {port} (also neighbors.{ports[port]})"
                problems[(f"neighbors.{u_at[j]}.interface", why)] = None
            else:
                ports[port] = u_at[j]
        olist: list[Any] = raw_o if isinstance(raw_o, list) else []
        addrs = [n.get("address") for n in nlist if isinstance(n, dict)]
        for p in _duplicates(addrs, olist):
            problems[(p.key, p.reason)] = None
        raw_b = data.get("bgp")
        raw_net = raw_b.get("network") if isinstance(raw_b, dict) else None
        nlist_b: list[Any] = raw_net if isinstance(raw_net, list) else []
        nets = [e.get("prefix") if isinstance(e, dict) else None for e in nlist_b]
        for p in _duplicate_networks(olist, nets):
            problems[(p.key, p.reason)] = None
        raise ConfigError(path, [Problem(k, r) for k, r in problems]) from None


def load(path: str | os.PathLike[str]) -> Config:
    """Read, parse and validate a config file; raise :class:`ConfigError` on any problem."""
    p = str(path)
    try:
        raw = Path(p).read_bytes()
    except OSError as e:
        raise ConfigError(p, [Problem("(file)", f"cannot read: {e.strerror}")]) from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(p, [Problem("(file)", "not UTF-8 text")]) from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(p, [Problem("(syntax)", str(e))]) from None
    return parse(data, p)


# --------------------------------------------------------------------------------------------
# reload support


class Reload(StrEnum):
    """What a reload does with a changed key."""

    #: the running parts apply it (``diff`` hands it to their ``reconfigure``)
    LIVE = "live"
    #: read only at start: a reload that changes it is refused, nothing applied
    RESTART = "restart"


def _each(section: str, how: Reload, names: str) -> dict[str, Reload]:
    return {f"{section}.{n}" if section else n: how for n in names.split()}


#: every key of :class:`Config` (dotted, at :func:`config_keys`'s granularity) -> what a reload
#: does with it; a key missing here counts as RESTART (tests/test_reload.py checks none is)
RELOAD: dict[str, Reload] = {
    **_each("", Reload.RESTART, "router_id local_as role"),
    **_each("", Reload.LIVE, "rt_priority neighbors unnumbered originate"),
    **_each(
        "bfd",
        Reload.LIVE,
        "enabled min_tx_ms min_rx_ms detect_mult passive cpi auth kernel_failover",
    ),
    # engine-wide: the BFD engine's process is started with them
    **_each("bfd", Reload.RESTART, "rt_priority mode kernel_rx"),
    **_each(
        "bgp",
        Reload.LIVE,
        "hold_time multipath_relax max_paths nnhn_strict_next_hop stale_timer_s bfd_strict "
        "graceful_restart restart_time_s stale_path_time_s update_coalesce_ms update_delay_s "
        "update_delay_establish_wait_s trust_packed_nnhn drain drain_prepend "
        "ebgp_requires_policy network redistribute_connected",
    ),
    # ExaBGP's process is started with it
    **_each("bgp", Reload.RESTART, "exabgp_log_level"),
    **_each(
        "heartbeat",
        Reload.LIVE,
        "group group6 port interval_ms idle_interval_ms on_change min_spacing_ms "
        "hold_multiplier auth keys send_key_id",
    ),
    # the heartbeat sockets are opened (or not) at start
    **_each("heartbeat", Reload.RESTART, "enabled"),
    **_each(
        "link_quality",
        Reload.LIVE,
        "sample_interval_ms idle_sample_interval_ms ewma_alpha load_min_pct load_max_pct "
        "queue_min_bytes queue_max_bytes rate_weight hysteresis_margin hysteresis_samples "
        "onset_queue_bytes onset_recheck confirm_improvements capacity_mbps "
        "default_capacity_mbps foreign_classes band_from",
    ),
    **_each(
        "path_quality",
        Reload.LIVE,
        "combine weight_table max_weight capacity_aware weight_memory max_profiles",
    ),
    **_each(
        "fib",
        Reload.LIVE,
        "group_type resilient_buckets resilient_idle_timer_s resilient_unbalanced_timer_s "
        "on_stop reconcile_interval_s route_audit_interval_s",
    ),
    # protocol/table: installed state would be orphaned; the others act once, at start
    **_each("fib", Reload.RESTART, "protocol table set_compat_mode_off stale_timer_s"),
    **_each("control", Reload.RESTART, "socket"),
    **_each("logging", Reload.LIVE, "level"),
    **_each("logging", Reload.RESTART, "format"),
    **_each("metrics", Reload.RESTART, "listen"),
    **_each(
        "flowlet",
        Reload.LIVE,
        "enabled timeout_us timeout_floor_us timeout_start_us skew_window_s interfaces "
        "table_size aging_s "
        "set_hash_policy on_stop move move_threshold move_decay_s",
    ),
    # the RIB re-evaluates hidden routes and what each session is sent (diff names the bgp
    # section for them); hold_down_s: nothing reads it yet (the per-colour forwarding)
    **_each("colours", Reload.LIVE, "names default session originate hold_down_s"),
}


@functools.cache
def config_keys(model: type[BaseModel] = Config, prefix: str = "") -> tuple[str, ...]:
    """The dotted keys a reload compares: the sections are walked, anything else (a list, an
    optional table such as ``bfd.auth``) is one key."""
    out: list[str] = []
    for name, f in model.model_fields.items():
        t = f.annotation
        if isinstance(t, type) and issubclass(t, BaseModel):
            out += config_keys(t, f"{prefix}{name}.")
        else:
            out.append(prefix + name)
    return tuple(out)


def _value(cfg: Config, key: str) -> Any:
    v: Any = cfg
    for part in key.split("."):
        v = getattr(v, part)
    return v


def diff(old: Config, new: Config) -> dict[str, Any]:
    """What changed between two configs, for an apply-only-what-changed reload.

    Returns ``{"neighbors_added": [...], "neighbors_removed": [...], "neighbors_changed": [...],
    "sections": [other top-level names that differ], "keys": [every dotted key that differs],
    "restart_required": [those of the keys that :data:`RELOAD` does not call live]}``.
    """
    old_n: dict[Any, Any] = {n.address: n for n in old.neighbors}
    new_n: dict[Any, Any] = {n.address: n for n in new.neighbors}
    # an unnumbered neighbor not learned yet is known by its port
    old_n.update({f"{u.interface} (unnumbered)": u for u in old.unnumbered})
    new_n.update({f"{u.interface} (unnumbered)": u for u in new.unnumbered})
    keys = [k for k in config_keys() if _value(old, k) != _value(new, k)]
    sections = dict.fromkeys(k.partition(".")[0] for k in keys)
    for name in ("router_id", "local_as", "role", "neighbors"):
        sections.pop(name, None)
    return {
        "neighbors_added": sorted(str(a) for a in new_n.keys() - old_n.keys()),
        "neighbors_removed": sorted(str(a) for a in old_n.keys() - new_n.keys()),
        "neighbors_changed": sorted(
            str(a) for a in new_n.keys() & old_n.keys() if new_n[a] != old_n[a]
        ),
        "sections": list(sections),
        "keys": keys,
        "restart_required": [k for k in keys if RELOAD.get(k) is not Reload.LIVE],
    }
