"""The link and path quality sections: ``[heartbeat]`` (docs/heartbeat.md, with its HMAC keys
and multicast groups), ``[link_quality]`` (local quality bands) and ``[path_quality]`` (how
local and remote quality become weights).

Separate because together they are the quality feature: what heartbeats carry, how a link's
band is measured and how bands become nexthop weights; :mod:`glbd.config.config` puts them into
the whole file's model.
"""

from __future__ import annotations

import ipaddress
import itertools
from typing import Annotated, Any, Literal, Self

from pydantic import BeforeValidator, Field, PlainSerializer, field_validator, model_validator

from glbd.config.config_base import _IFNAME, _KeyFile, _Model
from glbd.quality.pathmodel import DEFAULT_MAX_PROFILES

HEARTBEAT_GROUP_V4 = "224.0.0.149"
#: glbd's IPv6 heartbeat group (no IANA assignment exists; 224.0.0.149 is not assigned either).
#: Link scope, so never forwarded off the link; the T flag (ff1x) marks it transient, i.e. not
#: from IANA's permanent registry, where ff0x::149 belongs to EPSON-disc-set (ff0x::140-14f).
HEARTBEAT_GROUP_V6 = "ff12::149"
HEARTBEAT_PORT = 6149


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
    #: where the foreign load (what no load balancer steers) is counted. "ingress": glbd's tc
    #: program counts, on each fabric interface's egress, the bytes that did not enter where
    #: a load balancer steers them (a helper: not from a fabric interface; a load balancer:
    #: from a fabric interface; either: this router's own); "classes": foreign_classes'
    #: counters; "none": nothing is foreign. Unset: "classes" with foreign_classes, else
    #: "ingress". Where the program cannot run, glbd says so and counts nothing
    foreign_from: Literal["ingress", "classes", "none"] | None = None
    #: what lowers a link's band: "all" its traffic and queue, "foreign" only the foreign
    #: load: load the balancers steer themselves does not (it would swing the weights that
    #: steer it). Unset: "foreign", or "all" with foreign_from = "none"
    band_from: Literal["all", "foreign"] | None = None

    @field_validator("foreign_classes")
    @classmethod
    def _handles(cls, v: list[str]) -> list[str]:
        from glbd.quality.linkq import parse_tc_handle

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
        if self.foreign_from == "classes" and not self.foreign_classes:
            raise ValueError('foreign_from = "classes" needs foreign_classes')
        if self.foreign_from in ("ingress", "none") and self.foreign_classes:
            raise ValueError('foreign_classes are read only with foreign_from = "classes"')
        if self.band_from == "foreign" and self.foreign_source == "none":
            raise ValueError('band_from = "foreign" needs foreign_from "ingress" or "classes"')
        return self

    @property
    def band_source(self) -> Literal["all", "foreign"]:
        """What lowers a link's band (``band_from`` resolved)."""
        if self.band_from is not None:
            return self.band_from
        return "all" if self.foreign_source == "none" else "foreign"

    def warnings(self) -> list[str]:
        """What ``glbd check-config`` warns about: the ingress counter cannot run here."""
        if self.foreign_source != "ingress":
            return []
        from glbd.quality.foreigncount import problems

        return [
            f"link_quality: foreign load counted at ingress, but {p}: bands would come from "
            "all traffic (glbd says so when it starts)"
            for p in problems()
        ]

    @property
    def foreign_source(self) -> Literal["ingress", "classes", "none"]:
        """Where the foreign load is counted (``foreign_from`` resolved)."""
        if self.foreign_from is not None:
            return self.foreign_from
        return "classes" if self.foreign_classes else "ingress"


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
