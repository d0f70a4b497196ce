"""The forwarding sections: ``[fib]`` (how glbd programs the kernel's routes and nexthop
groups, docs/fib.md) and ``[flowlet]`` (flowlet switching, docs/flowlet.md).

Separate because they are the forwarding feature's settings, and share the "auto"-or-a-number
check (``fib.resilient_idle_timer_s`` follows the flowlet timeout); :mod:`glbd.config.config`
puts them into the whole file's model.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Literal, Self

from pydantic import BeforeValidator, Field, field_validator, model_validator

from glbd.config.config_base import _IFNAME, _Model

#: glbd's route/nexthop protocol number (rtnetlink ``rtm_protocol``/``nh_protocol``). 200 is not
#: used by any routing daemon listed in iproute2's rt_protos (zebra 11, bird 12, bgp 186..., 192).
RTPROT_GLBD = 200


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
    #: when a next hop's weight falls and its share of the group falls to this fraction of
    #: what it was or lower (about one quality band), its excess buckets move at once, busy
    #: or not: the flows on a path that got worse leave it now, not after the unbalanced
    #: timer. 0: only idle buckets move
    resilient_migrate_share: Annotated[float, Field(ge=0, le=1)] = 0.8
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

    #: flowlet switching on a load balancer (a helper alone runs no program): new flows spread
    #: over a group's members by its weights, running ones moved only at gaps. Where the
    #: machine cannot run it (no bpftool, no CAP_BPF), glbd says so and routes without it
    enabled: bool = True
    #: the idle gap after which a flow may move (1..10000000); it must exceed the delay
    #: difference between the paths. "auto": the peak queueing delay measured on the two hops
    #: of the fabric's paths (the leaf's uplinks, the spines' downlinks from their heartbeats)
    #: over ``skew_window_s``, never below ``timeout_floor_us``
    timeout_us: Annotated[int | Literal["auto"], _auto_or(1, 10_000_000, "us", True)] = "auto"
    #: the least "auto" timeout (500 us: CONGA's choice for a datacenter fabric; it covers
    #: queues too short for the 10 ms link sampling to see)
    timeout_floor_us: Annotated[int, Field(ge=1, le=10_000_000)] = 500
    #: the least "auto" timeout for the first ``skew_window_s`` after start, before the window
    #: has seen the fabric's queues (0: none); erring long only costs moves, never order. A
    #: restart that adopts the program holds the longer timeout its predecessor left instead
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
    #: settle (a failed next hop moves only its own flows); "always": every gap; "never": no
    #: gap (the program only places new flows, see ``placement``; running flows move only
    #: with their resilient bucket)
    move: Literal["on-change", "always", "never"] = "on-change"
    #: the weight shift (share of a group's traffic, 0..1) that lets gaps move flows
    move_threshold: Annotated[float, Field(gt=0, le=1)] = 0.05
    #: how long gaps may move flows after such a shift (the chance falls linearly to 0)
    move_decay_s: Annotated[float, Field(gt=0, le=3600)] = 1.0
    #: where a new flowlet goes. "spread": the flows to each destination take successive
    #: points of a low-discrepancy sequence in the hash space, so they fill a group's members
    #: by its weights within a flow or two; "random": a random hash (a member's share then
    #: varies by about the square root of the flow count, as with plain ECMP hashing)
    placement: Literal["spread", "random"] = "spread"

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
        from glbd.flowlet.loader import problems

        out = [f"flowlet: enabled, but {p}" for p in problems()]
        on_fabric = sorted(set(self.interfaces or ()) & set(fabric))
        if on_fabric:
            out.append(
                f"flowlet.interfaces: {', '.join(on_fabric)} is a neighbor's port: transit "
                "traffic arriving there is rehashed too"
            )
        return out
