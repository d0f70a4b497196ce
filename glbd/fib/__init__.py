"""glbd's FIB programmer: Linux nexthop objects and groups over glbd's own rtnetlink layer.

Routes point at nexthop **groups**, one per path-quality profile (a stable string key), so a
weight change is one RTM_NEWNEXTHOP replace however many prefixes use the group.

* :mod:`.model` -- data: :class:`Member`, :class:`GroupSpec`, :class:`Resilient`,
  :class:`Desired`; the kernel view :class:`Observed`.
* :mod:`.plan` -- the pure planner ``plan(desired, observed, ids, params) -> Plan`` and the
  deterministic id mapping :func:`assign_ids`.
* :mod:`.kernel` -- ops -> netlink messages, dumps -> :class:`Observed` (pure), and the
  ``nexthop_compat_mode`` helpers.
* :mod:`.programmer` -- :class:`FibProgrammer`, the asyncio service the daemon uses.
"""

from glbd.fib.kernel import get_compat_mode, set_compat_mode
from glbd.fib.model import Desired, GroupSpec, GroupType, Member, Observed, Resilient
from glbd.fib.plan import IdMap, IdRanges, Plan, PlanParams, assign_ids, plan
from glbd.fib.programmer import DEFAULT_PROTOCOL, ApplyResult, FibProgrammer

__all__ = [
    "DEFAULT_PROTOCOL",
    "ApplyResult",
    "Desired",
    "FibProgrammer",
    "GroupSpec",
    "GroupType",
    "IdMap",
    "IdRanges",
    "Member",
    "Observed",
    "Plan",
    "PlanParams",
    "Resilient",
    "assign_ids",
    "get_compat_mode",
    "plan",
    "set_compat_mode",
]
