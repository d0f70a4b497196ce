"""What the daemon needs of every part it runs, and what a part needs of the daemon.

Below both ``glbd.daemon.daemon`` and ``glbd.daemon.node``: the daemon runs components without
knowing how they are built, and ``glbd.cli.glbd`` (the composition root) hands it the builder.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from glbd.config import config as cfgmod
from glbd.control.metrics import Row


class Component(Protocol):
    """One part, started in order and stopped in reverse. A component may also have
    ``section(key)``: one key of its snapshot, built alone where the whole is costly."""

    name: str

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def reconfigure(self, new: cfgmod.Config, changes: dict[str, Any]) -> None: ...

    def snapshot(self) -> dict[str, Any]: ...

    def samples(self) -> Iterable[Row]: ...


class Host(Protocol):
    """What the parts see of the daemon: the config in force."""

    cfg: cfgmod.Config


ComponentFactory = Callable[[Any], list[Component]]
