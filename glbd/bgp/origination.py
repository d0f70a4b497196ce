"""The node's origination: :class:`glbd.bgp.origin.Origins` fed by an
:class:`glbd.netlink.ifwatch.InterfaceWatch` while a conditional source is configured
(``[[bgp.network]]``, ``[bgp.redistribute_connected]``); without one nothing is watched and the
static ``originate`` list is the answer, as before.

A link or address notification reaches :meth:`Origination._observe` on the loop; what changed is
logged (``origin_announce``/``origin_withdraw`` with the reason) and the whole set to originate
goes to ``on_change``, the BGP speaker's :meth:`~glbd.bgp.speaker.BgpSpeaker.set_originated`: the
same path the static prefixes take. No timer, no polling.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import structlog

from glbd.bgp.origin import OriginChange, OriginParams, OriginRow, Origins
from glbd.netlink.ifwatch import InterfaceWatch

log = structlog.get_logger(__name__)

Prefix = ipaddress.IPv4Network | ipaddress.IPv6Network


class Origination:
    """What the node originates; ``on_change(prefixes)`` after each change the interfaces
    make (a reload's own changes go with its new RIB parameters)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        params: OriginParams,
        on_change: Callable[[tuple[Prefix, ...]], None],
        *,
        netns: str | None = None,
    ) -> None:
        self.loop = loop
        self.netns = netns
        self.on_change = on_change
        self.core = Origins(params, loop.time())
        self.watch: InterfaceWatch | None = None

    async def start(self) -> None:
        """Watch the interfaces if anything depends on them (the first answer is then
        complete when this returns)."""
        if self.core.params.conditional and self.watch is None:
            watch = InterfaceWatch(self._observe, netns=self.netns)
            self.watch = watch
            try:
                await watch.start()
            except BaseException:
                self.watch = None
                raise

    def close(self) -> None:
        if self.watch is not None:
            self.watch.close()
            self.watch = None

    async def reconfigure(self, params: OriginParams) -> None:
        """A reload: the new sources apply at once; the watch starts or stops with them."""
        _log(self.core.set_params(params, self.loop.time()), self.core)
        if params.conditional:
            await self.start()
        elif self.watch is not None:
            self.close()
            _log(self.core.observe({}, {}, self.loop.time()), self.core)

    def _observe(self, *_: Any) -> None:
        w = self.watch
        if w is None:
            return
        change = self.core.observe(w.links, w.connected, self.loop.time())
        if change:
            _log(change, self.core)
            self.on_change(self.prefixes())

    # ---- answers ---------------------------------------------------------------------------

    def prefixes(self) -> tuple[Prefix, ...]:
        """Every prefix to originate now, in a stable order."""
        return tuple(sorted(self.core.prefixes(), key=lambda p: (p.version, p)))

    def join(
        self, rows: Iterable[dict[str, Any]], want: Callable[[Any], bool] | None
    ) -> Iterator[dict[str, Any]]:
        """``glbctl routes``: each RIB row with its ``origin`` (null for a learned prefix), then
        a row for each candidate the RIB does not have (withdrawn: why), as they stream."""
        now = self.loop.time()
        candidates = {str(row.prefix): row for row in self.core.rows()}
        for r in rows:
            row = candidates.pop(r["prefix"], None)
            r["origin"] = None if row is None else row.to_dict(now)
            yield r
        for p, row in candidates.items():
            if want is None or want(p):
                yield _withdrawn_row(row, now)


def _withdrawn_row(row: OriginRow, now: float) -> dict[str, Any]:
    """A RIB-shaped row for a candidate that is neither originated nor learned."""
    return {
        "prefix": str(row.prefix),
        "originated": False,
        "paths": 0,
        "as_path": [],
        "next_hops": [],
        "advertised_to": [],
        "multipath": 0,
        "origin": row.to_dict(now),
    }


def _log(change: OriginChange, core: Origins) -> None:
    for event, prefixes in (
        ("origin_announce", change.announce),
        ("origin_withdraw", change.withdraw),
    ):
        for prefix, why in prefixes.items():
            row = core.row(prefix)
            log.info(
                event,
                prefix=str(prefix),
                reason=why.value,
                interface=row.interface if row else None,
            )
