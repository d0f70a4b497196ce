"""Path-table views (pure): the ``glbctl quality`` and ``glbctl profiles`` documents.

Read-only renderings of a table's inputs and profiles; apart from the table
(:mod:`glbd.quality.pathtable`) because their keys are an API (``glbctl --json``) that changes
for other reasons than the table's bookkeeping does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from glbd.quality.pathmodel import LocalLink, PathTableParams
from glbd.quality.pathprofile import Profile
from heartbeat.wire import node_str

__all__ = ["profile_dict", "profiles_dict", "quality_dict"]


def profile_dict(key: str, prof: Profile) -> dict[str, Any]:
    """One profile: its prefixes (count, examples) and each next hop's weight with inputs."""
    return {
        "key": key,
        "prefixes": len(prof.prefixes),
        "example_prefixes": sorted(prof.prefixes)[:4],
        "recomputes": prof.recomputes,
        "next_hops": [
            {**nh.to_dict(), "weight": prof.weights[nh].to_dict()}
            for nh in sorted(prof.nhs, key=lambda n: (n.bgp_id, n.address, n.ifname or ""))
        ],
    }


def quality_dict(
    p: PathTableParams,
    recomputes: int,
    local: Mapping[str, LocalLink],
    remote: Mapping[int, Mapping[tuple[int, int], tuple[int, bool, float]]],
    profiles: Mapping[str, Profile],
) -> dict[str, Any]:
    """``glbctl quality``: the parameters, the inputs and every profile's weights."""
    return {
        "role": p.role.value,
        "combine": p.combine,
        "weight_table": list(p.weight_table),
        "max_weight": p.max_weight,
        "capacity_aware": p.capacity_aware,
        "weight_memory": p.memory,
        "recomputes": recomputes,
        "local": {
            k: {"band": v.band, "down": v.down, "capacity_mbps": v.capacity_mbps}
            for k, v in sorted(local.items())
        },
        "remote": {
            node_str(spine): [
                {
                    "far_end_id": node_str(fe),
                    "link_id": lid,
                    "band": band,
                    "down": down,
                    "capacity_mbps": cap,
                }
                for (fe, lid), (band, down, cap) in sorted(links.items())
            ]
            for spine, links in sorted(remote.items())
        },
        "profiles": [profile_dict(k, profiles[k]) for k in sorted(profiles)],
    }


def profiles_dict(profiles: Mapping[str, Profile]) -> dict[str, Any]:
    """``glbctl profiles``: profile key -> prefixes and weights (compact)."""
    return {
        "profiles": [
            {
                "key": k,
                "prefixes": sorted(prof.prefixes),
                "weights": [
                    {
                        "next_hop": nh.address,
                        "ifname": nh.ifname,
                        "value": w.value,
                        "source": w.source,
                    }
                    for nh, w in sorted(prof.weights.items(), key=lambda kv: kv[0].address)
                ],
            }
            for k, prof in sorted(profiles.items())
        ]
    }
