"""What the config sections share: the frozen, strict model base, the key-from-a-file base
(BFD and heartbeat keys), and the address and interface-name types several sections use.

Separate so that each feature's section module (``config_peers``, ``config_bfd``,
``config_quality``, ``config_fib``, ``config_colours``, ``config_control``) imports only this,
never :mod:`glbd.config.config`, which holds the whole file's model and imports them all.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Annotated, Any, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    model_validator,
)

from glbd.config.secrets import Secret, read_secret


def _ip(v: Any) -> Any:
    if isinstance(v, ipaddress.IPv4Address | ipaddress.IPv6Address):
        return v
    if not isinstance(v, str):
        raise ValueError("expected an IP address as a string")
    try:
        return ipaddress.ip_address(v)
    except ValueError:
        raise ValueError(f"{v!r} is not a valid IPv4 or IPv6 address") from None


def _net(v: Any) -> Any:
    if isinstance(v, ipaddress.IPv4Network | ipaddress.IPv6Network):
        return v
    if not isinstance(v, str):
        raise ValueError("expected a prefix as a string, e.g. '198.19.1.0/24'")
    try:
        return ipaddress.ip_network(v, strict=True)
    except ValueError as e:
        raise ValueError(f"{v!r}: {e}") from None


IPAddr = Annotated[
    ipaddress.IPv4Address | ipaddress.IPv6Address,
    BeforeValidator(_ip),
    PlainSerializer(str, return_type=str),
]
IPNet = Annotated[
    ipaddress.IPv4Network | ipaddress.IPv6Network,
    BeforeValidator(_net),
    PlainSerializer(str, return_type=str),
]

_IFNAME = re.compile(r"^[^\s/:]{1,15}$")


def _ifname_ok(v: str) -> str:
    if not _IFNAME.match(v):
        raise ValueError("not a Linux interface name (1-15 chars, no spaces, '/' or ':')")
    return v


#: a Linux interface name
IfName = Annotated[str, AfterValidator(_ifname_ok)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


class _KeyFile(_Model):
    """A key id plus a secret read from a file at load time (never shown)."""

    #: the key's id: sent with what this key signs, and selecting it on receipt
    key_id: Annotated[int, Field(ge=0, le=255)]
    #: the file the key is read from at load time and on reload: owned by root or glbd's
    #: user, not readable by others; the key never shows in logs or ``glbctl config``
    secret_file: Path
    secret: Secret | None = Field(default=None, exclude=True)

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    def _bounds(self) -> tuple[int, int, str]:
        raise NotImplementedError

    @model_validator(mode="after")
    def _load_secret(self) -> Self:
        lo, hi, what = self._bounds()
        object.__setattr__(self, "secret", read_secret(self.secret_file, lo, hi, what))
        return self
