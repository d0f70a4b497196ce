"""What glbd needs instead of root: up to five capabilities, checked at start (``CapEff``).

systemd grants them to the ``glbd`` user (``AmbientCapabilities=`` in systemd/glbd.service), so
ExaBGP and the BFD engine, glbd's children, inherit them. CAP_BPF is wanted, not required: the
flowlet program needs it where it is on, and without it glbd routes as without flowlets and
says so (:func:`flowlet_problem`).
"""

from __future__ import annotations

from glbd.config import config as cfgmod
from glbd.daemon import caps

__all__ = [
    "capability_problem",
    "flowlet_problem",
    "required_capabilities",
    "wanted_capabilities",
]


def required_capabilities(cfg: cfgmod.Config) -> list[str]:
    """Netlink routes and nexthops, interface-bound BFD/heartbeat sockets, ExaBGP's TCP 179,
    and the BFD engine's and the event loop's real-time priority when configured."""
    need = ["CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_NET_BIND_SERVICE"]
    if (cfg.bfd.enabled and cfg.bfd.rt_priority) or cfg.rt_priority:
        need.append("CAP_SYS_NICE")
    return need


def wanted_capabilities(cfg: cfgmod.Config) -> list[str]:
    """The required ones, and CAP_BPF where the flowlet program is to run."""
    return [*required_capabilities(cfg), *(["CAP_BPF"] if cfg.flowlet_active else [])]


def capability_problem(cfg: cfgmod.Config, mask: int | None = None) -> str | None:
    """One line naming the capabilities glbd lacks, or None (root has them all)."""
    lack = caps.missing(required_capabilities(cfg), mask)
    if not lack:
        return None
    return (
        f"glbd: missing capabilities {' '.join(lack)}; run it as root or with "
        f"AmbientCapabilities={' '.join(wanted_capabilities(cfg))} (see systemd/glbd.service)"
    )


def flowlet_problem(cfg: cfgmod.Config, mask: int | None = None) -> str | None:
    """Why the flowlet program cannot run for want of CAP_BPF (bpf() would fail), or None."""
    if not cfg.flowlet_active or not caps.missing(["CAP_BPF"], mask):
        return None
    return "missing capability CAP_BPF (add it to AmbientCapabilities=, see systemd/glbd.service)"
