"""What glbd needs instead of root: up to five capabilities, checked at start (``CapEff``).

systemd grants them to the ``glbd`` user (``AmbientCapabilities=`` in systemd/glbd.service), so
ExaBGP and the BFD engine, glbd's children, inherit them.
"""

from __future__ import annotations

from glbd.config import config as cfgmod
from glbd.daemon import caps

__all__ = ["capability_problem", "required_capabilities"]


def required_capabilities(cfg: cfgmod.Config) -> list[str]:
    """Netlink routes and nexthops, interface-bound BFD/heartbeat sockets, ExaBGP's TCP 179,
    the BFD engine's and the event loop's real-time priority and the flowlet program's bpf()
    when configured."""
    need = ["CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_NET_BIND_SERVICE"]
    if (cfg.bfd.enabled and cfg.bfd.rt_priority) or cfg.rt_priority:
        need.append("CAP_SYS_NICE")
    if cfg.flowlet.enabled:
        need.append("CAP_BPF")
    return need


def capability_problem(cfg: cfgmod.Config, mask: int | None = None) -> str | None:
    """One line naming the capabilities glbd lacks, or None (root has them all)."""
    need = required_capabilities(cfg)
    lack = caps.missing(need, mask)
    if not lack:
        return None
    return (
        f"glbd: missing capabilities {' '.join(lack)}; run it as root or with "
        f"AmbientCapabilities={' '.join(need)} (see systemd/glbd.service)"
    )
