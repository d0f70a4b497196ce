"""glbd configuration: TOML file -> pydantic models (strict, frozen) -> plain values for the cores.

The flow is one way. ``load(path)`` parses and validates the whole file and either returns a
:class:`Config` or raises :class:`ConfigError` listing *every* problem with the file, the dotted key
path and the reason. Nothing is applied until a whole file validates, so a bad file never
half-applies and a failed reload keeps the old config.

Secrets (the heartbeat HMAC key) are read from a separate file at load time; they are held in a
:class:`~glbd.config.secrets.Secret` whose ``repr``/``str`` never show the value, so they cannot
leak through logs.

The ``#:`` comment above each field is its description: :mod:`glbd.config.confref` turns the model
(every key, type, range, default, description) and :data:`RELOAD` (what a reload does with each
key: applied live, or refused: needs a restart) into docs/config-reference.md and glbd.toml(5).
The examples in ``conf/`` are checked by the test suite.

This module holds the whole file: :class:`Config` with the checks across sections (duplicate
neighbours, originated prefixes), parsing and loading with one-line errors, and the reload
table and :func:`diff`. The sections are modelled by feature in ``glbd.config.config_*`` modules
(``config_peers``, ``config_bfd``, ``config_quality``, ``config_fib``, ``config_colours``,
``config_control``, on the shared ``config_base``), which confref reads too; secret files are
read by :mod:`glbd.config.secrets`.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from glbd.config.config_base import IPNet, _Model
from glbd.config.config_bfd import BfdSection
from glbd.config.config_colours import ColoursSection, _colour_names
from glbd.config.config_control import ControlSection, LoggingSection, MetricsSection
from glbd.config.config_fib import FibSection, FlowletSection
from glbd.config.config_peers import (
    BgpSection,
    LearnedNeighbor,
    NeighborSection,
    UnnumberedSection,
    _split_neighbors,
)
from glbd.config.config_quality import HeartbeatSection, LinkQualitySection, PathQualitySection


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

    @property
    def flowlet_active(self) -> bool:
        """The flowlet program is to run: enabled, on a router that balances load (a helper
        alone programs no weighted groups for it to steer)."""
        return self.flowlet.enabled and self.is_load_balancer

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
        "default_capacity_mbps foreign_classes foreign_from band_from",
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
        "resilient_migrate_share "
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
        "set_hash_policy on_stop move move_threshold move_decay_s placement",
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
