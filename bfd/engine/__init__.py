"""The BFD engine: all sessions, their sockets and one timer heap, in a loop of their own.

The loop (:mod:`.loop`) can run in two places, with the same control API (:class:`BfdEngine`):

* ``mode="process"`` (default): a child interpreter (``python -m bfd.engine``, :mod:`.process`)
  owns the loop; commands and events travel over a socketpair as pickles (:mod:`.channel`). It
  has its own GIL, so glbd's main loop (RIB, FIB, ExaBGP JSON) cannot delay a transmit or an
  expiry check; with ``rt_priority`` it runs SCHED_FIFO so that a busy core does not delay it
  either. Daemons running as root should pass ``rt_priority`` (Linux's RT throttling still
  leaves 5 % of each CPU to normal tasks).
* ``mode="thread"``: the same loop on a thread of the daemon's process. Cheaper to start, but it
  shares the GIL, so a busy main loop delays it (measured in docs/benchmarks.md, "BFD engine:
  process and priority"). For tests and for callers whose main loop is otherwise idle.

Events: every session state change becomes a :class:`BfdEvent` passed to the ``on_event``
callback, called from the engine's thread (thread mode) or from the reader thread that receives
the child's messages (process mode) -- never from the caller's event loop. An asyncio daemon
wraps it::

    loop = asyncio.get_running_loop()
    engine = BfdEngine(lambda ev: loop.call_soon_threadsafe(on_bfd_event, ev), rt_priority=10)
    engine.start()
    engine.add_session(SessionConfig(peer="198.18.0.2", interface="eth1",
                                     params=SessionParams(desired_min_tx=50_000,
                                                          required_min_rx=50_000)))
    ...
    engine.snapshot()["sessions"]        # per-session dicts for `glbctl bfd`
    engine.stop()

Kernel failover (:mod:`bfd.failover`): a session may carry armed rtnetlink requests
(:meth:`BfdEngine.set_failover`). When it fails, the loop sends them in one datagram *before*
it emits the event, so the FIB change does not wait for the event's trip through the
socketpair, the reader thread and the daemon's loop. The event then says ``failover_sent``;
the kernel's answers are read by the loop and counted (``engine.failover`` in the snapshot).

Kernel receive path (:mod:`.kernel_rx`, ``kernel_rx=True`` by default): a tc ingress BPF
program takes the exact repeats of each session's last accepted packet and stamps their arrival
in a map the loop reads, so the loop reads from its sockets only packets that change something.

Modules: :mod:`.model` (configs, events, errors), :mod:`.loop` (epoll loop, timer heap, receive
path, control operations), :mod:`.sockets` (receive/transmit/rtnetlink sockets),
:mod:`.kernel_rx` (the BPF program, its maps and tc links),
:mod:`.channel` (control calls and events between daemon and loop), :mod:`.process` (the child
process, netns, priority, fd limit), :mod:`.api` (:class:`BfdEngine`).
"""

from .api import BfdEngine
from .model import RX_STAMP_MAX_AGE, BfdEvent, EngineError, SessionConfig, arrival_time

__all__ = [
    "RX_STAMP_MAX_AGE",
    "BfdEngine",
    "BfdEvent",
    "EngineError",
    "SessionConfig",
    "arrival_time",
]
