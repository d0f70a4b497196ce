"""The small sections of the daemon's own interfaces to its operator: ``[control]`` (the
socket ``glbctl`` talks to), ``[logging]`` and ``[metrics]`` (the Prometheus endpoint).

Separate from the feature sections, which they share nothing with; :mod:`glbd.config.config` puts
them into the whole file's model.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal

from pydantic import field_validator

from glbd.config.config_base import _Model


class ControlSection(_Model):
    """The control socket ``glbctl`` talks to."""

    #: the socket (0660, group glbd if it exists)
    socket: Path = Path("/run/glbd/glbd.sock")


class LoggingSection(_Model):
    """glbd's log, one line per event."""

    #: the least level logged (``glbd run --log-level`` overrides it until a reload changes it)
    level: Literal["debug", "info", "warning", "error"] = "info"
    #: auto: console on a TTY, journal when stderr is journald's stream, else json; journal:
    #: JSON lines with a syslog-priority prefix, so ``journalctl -p err`` works
    format: Literal["auto", "console", "json", "journal"] = "auto"


class MetricsSection(_Model):
    """The Prometheus endpoint (docs/metrics.md)."""

    #: HOST:PORT to serve metrics on (no authentication: bind to 127.0.0.1 or a management
    #: address); none: no endpoint
    listen: str | None = None

    @field_validator("listen")
    @classmethod
    def _hostport(cls, v: str | None) -> str | None:
        if v is None:
            return v
        host, sep, port = v.rpartition(":")
        if not sep or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError("expected HOST:PORT, e.g. 127.0.0.1:9477")
        try:
            ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            raise ValueError(f"{host!r} is not an IP address") from None
        return v
