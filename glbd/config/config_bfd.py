"""The ``[bfd]`` section (BFD, RFC 5880/5881), its authentication keys, and the
per-neighbor ``[neighbors.bfd]`` overrides.

Separate from the other sections so the BFD feature's settings sit in one place: the neighbor
models (:mod:`glbd.config.config_peers`) take :class:`BfdOverride` from here, and
:mod:`glbd.config.config` puts :class:`BfdSection` into the whole file's model.
"""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import Field, model_validator

from glbd.config.config_base import _KeyFile, _Model

BfdAuthType = Literal[
    "simple", "keyed-md5", "meticulous-keyed-md5", "keyed-sha1", "meticulous-keyed-sha1"
]


class BfdAuthKey(_KeyFile):
    """A key accepted on receive during a key rollover; its length is checked by the parent."""

    def _bounds(self) -> tuple[int, int, str]:
        return 1, 20, "a BFD key"


class BfdAuth(_KeyFile):
    """RFC 5880 §6.7 authentication. The key (password) is read from ``secret_file``:
    1-16 bytes for simple and MD5, up to 20 for SHA1; trailing newlines are stripped.
    We transmit with ``key_id``; ``accept`` lists further keys (each with its own key id)
    accepted on receive during a key rollover, the received Key ID selecting the key."""

    #: the authentication type; the key is 1-16 bytes, up to 20 for the SHA1 types
    type: BfdAuthType
    #: further keys (``key_id``, ``secret_file``) accepted on receive during a key rollover,
    #: the received Key ID selecting the key; what is sent uses ``key_id``
    accept: tuple[BfdAuthKey, ...] = ()

    def _bounds(self) -> tuple[int, int, str]:
        return 1, 20 if "sha1" in self.type else 16, f"a {self.type} key"

    @model_validator(mode="after")
    def _check_accept(self) -> Self:
        lo, hi, what = self._bounds()
        ids = {self.key_id}
        for k in self.accept:
            if k.key_id in ids:
                raise ValueError(f"key_id {k.key_id} is configured twice")
            ids.add(k.key_id)
            n = len(k.secret.reveal()) if k.secret is not None else 0
            if not lo <= n <= hi:
                raise ValueError(
                    f"accept key_id {k.key_id}: {what} is {lo}-{hi} bytes, the file holds {n}"
                )
        return self


class BfdSection(_Model):
    """BFD (RFC 5880/5881) for the neighbors; each neighbor may override these in
    ``[neighbors.bfd]``. Intervals in milliseconds."""

    #: BFD for every neighbor
    enabled: bool = True
    #: desired minimum transmit interval
    min_tx_ms: Annotated[int, Field(ge=3, le=60_000)] = 50
    #: required minimum receive interval
    min_rx_ms: Annotated[int, Field(ge=3, le=60_000)] = 50
    #: detection multiplier: down after this many receive intervals without a packet
    detect_mult: Annotated[int, Field(ge=1, le=255)] = 3
    #: wait for the peer to speak first
    passive: bool = False
    #: advertise the C bit (RFC 5880: BFD does not share fate with the control plane)
    cpi: bool = False
    #: RFC 5880 authentication (``type``, ``key_id``, ``secret_file``). Prefer
    #: "meticulous-keyed-sha1": the keyed types accept a repeated sequence number, so a replay
    #: is caught only once it stood still for 2 s (docs/security.md)
    auth: BfdAuth | None = None
    #: engine-wide: SCHED_FIFO priority of the BFD engine process (0 = normal scheduling).
    #: Without it, sessions flap on a busy box well below the count they hold with it
    #: (docs/benchmarks.md, BFD)
    rt_priority: Annotated[int, Field(ge=0, le=99)] = 10
    #: engine-wide: "process" (own interpreter, isolated from glbd's loop) or "thread"
    mode: Literal["process", "thread"] = "process"
    #: engine-wide: the BFD engine itself deletes a failed peer's nexthops in the kernel
    #: (pre-armed RTM_DELNEXTHOP, bfd/failover.py) instead of waiting for glbd's event loop
    kernel_failover: bool = True
    #: engine-wide: a BPF program at tc ingress takes the repeats of a session's steady state
    #: in the kernel (Linux 6.6+ and CAP_BPF, else every packet is read: ``glbctl status``
    #: ``bfd_engine.kernel_rx``): short intervals at scale hold with it, not without
    #: (docs/benchmarks.md). Those repeats pass no netfilter input hook
    kernel_rx: bool = True


class BfdOverride(_Model):
    """One neighbor's BFD settings over ``[bfd]`` (a key left out: ``[bfd]``'s)."""

    #: this neighbor's ``bfd.enabled``
    enabled: bool | None = None
    #: this neighbor's ``bfd.min_tx_ms``
    min_tx_ms: Annotated[int, Field(ge=3, le=60_000)] | None = None
    #: this neighbor's ``bfd.min_rx_ms``
    min_rx_ms: Annotated[int, Field(ge=3, le=60_000)] | None = None
    #: this neighbor's ``bfd.detect_mult``
    detect_mult: Annotated[int, Field(ge=1, le=255)] | None = None
    #: this neighbor's ``bfd.passive``
    passive: bool | None = None
    #: this neighbor's ``bfd.cpi``
    cpi: bool | None = None
    #: this neighbor's ``bfd.auth`` (the whole table)
    auth: BfdAuth | None = None
