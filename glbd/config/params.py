"""The validated config turned into the parameters each core owns (plain functions, no state).

The one lookup outside the config is a neighbor's local address (:func:`resolve`): the kernel's
source address selection toward the peer when the config leaves it out
(:func:`local_address_for`), else a check that the configured one is ours. A port that is down
or not there yet leaves its neighbor waiting (:class:`Waiting`); the node retries it.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import math
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from bfd.engine import SessionConfig
from bfd.packet import AuthType
from bfd.session import AuthConfig, SessionParams
from glbd.base.ipzone import strip_zone
from glbd.bgp import prefixlist
from glbd.bgp.origin import OriginParams
from glbd.bgp.ribtypes import NeighborParams, RibParams, Role
from glbd.config import config as cfgmod
from glbd.config.config_bfd import BfdAuth
from glbd.config.config_fib import FibSection
from glbd.config.config_peers import NeighborSection
from glbd.config.config_quality import HeartbeatSection
from glbd.fib.fibmodel import Resilient
from glbd.flowlet.loader import FlowletParams
from glbd.flowlet.movegate import MoveGateParams
from glbd.flowlet.skew import SkewParams
from glbd.quality.foreigncount import PortClasses
from glbd.quality.foreignservice import port_classes
from glbd.quality.linkq import LinkMonParams, parse_tc_handle
from glbd.quality.pathmodel import PathTableParams
from heartbeat import wire
from heartbeat.receiver import ReceiverParams
from heartbeat.sender import SenderParams

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_BFD_AUTH = {
    "simple": AuthType.SIMPLE_PASSWORD,
    "keyed-md5": AuthType.KEYED_MD5,
    "meticulous-keyed-md5": AuthType.METICULOUS_KEYED_MD5,
    "keyed-sha1": AuthType.KEYED_SHA1,
    "meticulous-keyed-sha1": AuthType.METICULOUS_KEYED_SHA1,
}


class Waiting(StrEnum):
    """Why a configured neighbor has no session yet (glbctl shows it as its state)."""

    WAITING_FOR_INTERFACE = "waiting_for_interface"
    NO_LOCAL_ADDRESS = "no_local_address"
    #: an unnumbered neighbor whose peer was not heard on its port yet
    WAITING_FOR_PEER = "waiting_for_peer"


@dataclass(frozen=True)
class Unresolved:
    reason: Waiting
    detail: str


def local_address_for(peer: IPAddress, interface: str) -> IPAddress:
    """Our address toward ``peer`` as the kernel would choose it (source address selection)."""
    fam = socket.AF_INET if peer.version == 4 else socket.AF_INET6
    with socket.socket(fam, socket.SOCK_DGRAM) as s:
        with contextlib.suppress(OSError):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, interface.encode())
        try:
            s.connect((str(peer), 179))
        except OSError as e:
            raise RuntimeError(
                f"neighbor {peer}: no local address toward it on {interface} ({e.strerror}); "
                "set neighbors.local_address or configure the interface"
            ) from None
        return ipaddress.ip_address(strip_zone(s.getsockname()[0]))


def local_address(n: NeighborSection) -> IPAddress:
    return n.local_address or local_address_for(n.address, n.interface)


def _is_ours(addr: IPAddress, ifindex: int) -> OSError | None:
    """None if ``addr`` can be bound (assigned here and, for IPv6, past duplicate address
    detection), else why not. A link-local address is looked for on ``ifindex``."""
    fam = socket.AF_INET if addr.version == 4 else socket.AF_INET6
    with socket.socket(fam, socket.SOCK_DGRAM) as s:
        try:
            if addr.version == 4:
                s.bind((str(addr), 0))
            else:
                scope = ifindex if addr.is_link_local else 0
                s.bind((strip_zone(str(addr)), 0, 0, scope))
        except OSError as e:
            return e
    return None


def still_ours(n: NeighborSection, addr: IPAddress) -> bool:
    """Whether ``addr``, resolved earlier, is still assigned on ``n``'s interface's host (a
    port that is only down keeps it; a deleted one takes it along)."""
    try:
        ifindex = socket.if_nametoindex(n.interface)
    except OSError:
        return False
    return _is_ours(addr, ifindex) is None


def resolve(n: NeighborSection) -> IPAddress | Unresolved:
    """The neighbor's local address, or why there is none yet (its interface is missing, has
    no route or address toward the peer, or the configured address is not ours)."""
    try:
        ifindex = socket.if_nametoindex(n.interface)
    except OSError:
        return Unresolved(Waiting.WAITING_FOR_INTERFACE, f"no interface {n.interface}")
    if n.local_address is not None:
        err = _is_ours(n.local_address, ifindex)
        if err is None:
            return n.local_address
        why = err.strerror or errno.errorcode.get(err.errno or 0, str(err))
        return Unresolved(Waiting.NO_LOCAL_ADDRESS, f"{n.local_address}: {why}")
    try:
        return local_address_for(n.address, n.interface)
    except RuntimeError as e:
        return Unresolved(Waiting.NO_LOCAL_ADDRESS, str(e))


def unscoped(a: IPAddress) -> IPAddress:
    """``a`` without its IPv6 zone (``fe80::1%eth0`` -> ``fe80::1``)."""
    if isinstance(a, ipaddress.IPv6Address) and a.scope_id is not None:
        return ipaddress.IPv6Address(strip_zone(str(a)))
    return a


def interfaces(cfg: cfgmod.Config) -> list[str]:
    """The fabric interfaces the link monitor watches."""
    return sorted({n.interface for n in cfg.neighbors})


def table_params(cfg: cfgmod.Config) -> PathTableParams:
    role = Role(cfg.role)
    if not cfg.heartbeat.enabled and role.load_balancer:
        role = Role.HELPER if role is Role.BOTH else role
    pq = cfg.path_quality
    return PathTableParams(
        role=role,
        combine=pq.combine,
        weight_table=tuple(pq.weight_table),
        max_weight=pq.max_weight,
        capacity_aware=pq.capacity_aware,
        memory=pq.weight_memory,
        max_profiles=pq.max_profiles,
    )


def foreign_counter(cfg: cfgmod.Config) -> tuple[bool, list[str], PortClasses, float]:
    """The ingress counter's arguments (:meth:`ForeignService.start`): wanted, the fabric
    interfaces, the class of each ingress port by role, the check interval."""
    fabric = interfaces(cfg)
    return (
        cfg.link_quality.foreign_source == "ingress",
        fabric,
        port_classes(fabric, cfg.is_helper, cfg.is_load_balancer),
        cfg.fib.reconcile_interval_s,
    )


def linkmon_params(cfg: cfgmod.Config) -> LinkMonParams:
    q = cfg.link_quality
    return LinkMonParams(
        sample_interval_s=q.sample_interval_ms / 1e3,
        idle_sample_interval_s=max(q.idle_sample_interval_ms, q.sample_interval_ms) / 1e3,
        ewma_alpha=q.ewma_alpha,
        load_min_pct=q.load_min_pct,
        load_max_pct=q.load_max_pct,
        queue_min_bytes=q.queue_min_bytes,
        queue_max_bytes=q.queue_max_bytes,
        rate_weight=q.rate_weight,
        hysteresis_margin=q.hysteresis_margin,
        hysteresis_samples=q.hysteresis_samples,
        onset_queue_bytes=q.onset_queue_bytes,
        onset_recheck=q.onset_recheck,
        confirm_improvements=q.confirm_improvements,
        default_capacity_mbps=q.default_capacity_mbps,
        capacity_mbps=dict(q.capacity_mbps),
        foreign_classes=frozenset(parse_tc_handle(h) for h in q.foreign_classes),
        foreign_ingress=q.foreign_source == "ingress",
        band_from_foreign=q.band_source == "foreign",
    )


def heartbeat_keys(
    hb: HeartbeatSection,
) -> tuple[wire.HmacKey | None, dict[int, wire.HmacKey]]:
    """The key heartbeats are signed with and every key accepted, by key id (a rollover
    configures two)."""
    accept = {
        k.key_id: wire.HmacKey(k.key_id, k.secret.reveal())
        for k in hb.all_keys()
        if k.secret is not None
    }
    send = hb.send_key()
    return (None if send is None else accept.get(send.key_id)), accept


def sender_params(cfg: cfgmod.Config) -> SenderParams:
    hb = cfg.heartbeat
    return SenderParams(
        node_id=wire.node_id(str(cfg.router_id)),
        interval_s=hb.interval_ms / 1e3,
        idle_interval_s=max(hb.idle_interval_ms, hb.interval_ms) / 1e3,
        min_spacing_s=hb.min_spacing_ms / 1e3,
        on_change=hb.on_change,
        key=heartbeat_keys(hb)[0],
    )


def receiver_params(cfg: cfgmod.Config) -> ReceiverParams:
    hb = cfg.heartbeat
    return ReceiverParams(hold_multiplier=hb.hold_multiplier, keys=heartbeat_keys(hb)[1])


def _locals(
    cfg: cfgmod.Config, local: Mapping[IPAddress, IPAddress] | None
) -> Mapping[IPAddress, IPAddress]:
    """The local address of each neighbor to set up: ``local`` (the resolved ones) when given,
    else every neighbor's, looked up now (raises RuntimeError while an interface is down)."""
    if local is not None:
        return local
    return {n.address: local_address(n) for n in cfg.neighbors}


def rib_params(cfg: cfgmod.Config, local: Mapping[IPAddress, IPAddress] | None = None) -> RibParams:
    """The RIB's parameters; with ``local``, only the neighbors it has an address for."""
    c = cfg
    local = _locals(cfg, local)
    return RibParams(
        router_id=c.router_id,
        local_as=c.local_as,
        role=Role(c.role),
        neighbors=tuple(
            NeighborParams(
                address=n.address,
                remote_as=n.peer_as(c.local_as),
                local_address=local[n.address],
                interface=n.interface,
                hold_time=n.hold_time or c.bgp.hold_time,
                description=n.description,
                passive=None if n.passive == "auto" else n.passive,
                tcp_md5=None if n.password is None else n.password.reveal(),
                # a link-local session (learned or configured): ExaBGP connects from the port
                unnumbered=n.address.version == 6 and n.address.is_link_local,
                families=tuple(sorted(4 if f == "ipv4" else 6 for f in n.families)),
                import_filter=prefixlist.parse(n.import_) if n.import_ else None,
                export_filter=prefixlist.parse(n.export) if n.export else None,
                max_prefixes=n.max_prefixes,
                max_prefixes_action=n.max_prefixes_action,
                max_prefixes_restart_s=n.max_prefixes_restart_s,
                colour=c.neighbor_colour(n),
            )
            for n in c.neighbors
            if n.address in local
        ),
        originated=tuple(c.originate),
        multipath_relax=c.bgp.multipath_relax,
        max_paths=c.bgp.max_paths,
        nnhn_strict_next_hop=c.bgp.nnhn_strict_next_hop,
        stale_timer_s=c.bgp.stale_timer_s,
        bfd_strict=c.bgp.bfd_strict,
        graceful_restart=c.bgp.graceful_restart != "off",
        restart_capability=c.bgp.graceful_restart == "full",
        restart_time_s=c.bgp.restart_time_s,
        stale_path_time_s=c.bgp.stale_path_time_s,
        trust_packed_nnhn=c.bgp.trust_packed_nnhn,
        update_coalesce_s=c.bgp.update_coalesce_ms / 1e3,
        update_delay_s=c.bgp.update_delay_s,
        update_delay_establish_wait_s=c.bgp.update_delay_establish_wait_s,
        drain=c.bgp.drain,
        drain_prepend=c.bgp.drain_prepend,
        ebgp_requires_policy=c.bgp.ebgp_requires_policy,
        origin_colours=tuple(c.colours.originations().items()),
    )


def origin_params(cfg: cfgmod.Config) -> OriginParams:
    """What this router originates: ``originate`` always, ``[[bgp.network]]`` and
    ``[bgp.redistribute_connected]`` while their interfaces are up."""
    rc = cfg.bgp.redistribute_connected
    return OriginParams(
        static=tuple(cfg.originate),
        networks=tuple((e.prefix, e.interface) for e in cfg.bgp.network),
        connected=tuple(rc.interfaces) if rc is not None else (),
        connected_filter=prefixlist.parse(rc.prefix_list) if rc and rc.prefix_list else None,
    )


def bfd_auth(a: BfdAuth | None) -> AuthConfig | None:
    if a is None or a.secret is None:
        return None
    accept = tuple((k.key_id, k.secret.reveal()) for k in a.accept if k.secret is not None)
    return AuthConfig(_BFD_AUTH[a.type], a.key_id, a.secret.reveal(), accept)


def bfd_sessions(
    cfg: cfgmod.Config, local: Mapping[IPAddress, IPAddress] | None = None
) -> list[SessionConfig]:
    """One session per neighbor with BFD on; with ``local``, only the neighbors it has an
    address for (without, resolves source addresses: can raise while an interface is down)."""
    local = _locals(cfg, local)
    out = []
    for n in cfg.neighbors:
        b = cfg.neighbor_bfd(n)
        if not b.enabled or n.address not in local:
            continue
        out.append(
            SessionConfig(
                peer=str(n.address),
                interface=n.interface,
                local=str(local[n.address]),
                params=SessionParams(
                    desired_min_tx=b.min_tx_ms * 1000,
                    required_min_rx=b.min_rx_ms * 1000,
                    detect_mult=b.detect_mult,
                    passive=b.passive,
                    cpi=b.cpi,
                    auth=bfd_auth(b.auth),
                ),
            )
        )
    return out


def bfd_session_keys(cfg: cfgmod.Config) -> set[tuple[str, str]]:
    """(interface, peer) of every BFD session, from the config alone (no address lookup)."""
    return {(n.interface, str(n.address)) for n in cfg.neighbors if cfg.neighbor_bfd(n).enabled}


#: the resilient idle timer "auto" means without flowlets
IDLE_TIMER_S = 1.0
#: the kernel keeps resilient timers in clock ticks (USER_HZ: 10 ms)
_TICK_S = 0.01


def resilient(f: FibSection, flowlet_timeout_s: float | None = None) -> Resilient | None:
    """The groups' resilient parameters; ``flowlet_timeout_s``: the flowlet timeout in force
    (None: flowlets off), which an "auto" idle timer follows, rounded up to the kernel's tick."""
    if f.group_type != "resilient":
        return None
    idle = f.resilient_idle_timer_s
    if idle == "auto":
        idle = (
            IDLE_TIMER_S
            if flowlet_timeout_s is None
            else math.ceil(flowlet_timeout_s / _TICK_S - 1e-9) * _TICK_S
        )
    return Resilient(
        buckets=f.resilient_buckets,
        idle_timer_s=idle,
        unbalanced_timer_s=f.resilient_unbalanced_timer_s,
        migrate_share=f.resilient_migrate_share,
    )


def flowlet_params(cfg: cfgmod.Config, auto_timeout_ns: int | None = None) -> FlowletParams:
    """The flowlet program's parameters; by default it goes on every interface that is no
    BGP neighbor's port (the fabric interfaces). ``auto_timeout_ns``: what the skew estimate
    says now, for ``timeout_us = "auto"`` (default: the floor)."""
    f = cfg.flowlet
    if f.timeout_us == "auto":
        timeout_ns = auto_timeout_ns or f.timeout_floor_us * 1000
    else:
        timeout_ns = f.timeout_us * 1000
    return FlowletParams(
        interfaces=None if f.interfaces is None else tuple(f.interfaces),
        timeout_ns=timeout_ns,
        aging_ns=int(f.aging_s * 1e9),
        table_size=f.table_size,
        set_hash_policy=f.set_hash_policy,
        exclude=tuple(interfaces(cfg)),
        move_on_change=f.move != "always",
        spread=f.placement == "spread",
        buckets=cfg.fib.resilient_buckets if cfg.fib.group_type == "resilient" else 0,
        resume_timeout=f.timeout_us == "auto",
    )


def move_gate_params(cfg: cfgmod.Config) -> MoveGateParams:
    """When flowlet gaps may move flows (``[flowlet] move = "on-change"``)."""
    return MoveGateParams(threshold=cfg.flowlet.move_threshold, decay_s=cfg.flowlet.move_decay_s)


def skew_params(cfg: cfgmod.Config) -> SkewParams:
    """The "auto" flowlet timeout's estimator: from the floor up to (below) the flow table's
    aging time, which would otherwise forget a flow before its gap counted."""
    f = cfg.flowlet
    return SkewParams(
        floor_ns=f.timeout_floor_us * 1000,
        ceiling_ns=max(f.timeout_floor_us * 1000, int(f.aging_s * 1e9) // 2),
        window_s=f.skew_window_s,
        start_ns=f.timeout_start_us * 1000,
    )
