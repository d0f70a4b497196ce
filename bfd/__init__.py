"""RFC 5880/5881 single-hop BFD engine. Imports only the stdlib and itself.

* :mod:`bfd.packet` -- control packet codec (incl. authentication), stateless §6.8.6 checks.
* :mod:`bfd.session` -- the pure session core (state machine, timers, Poll/Final, auth).
* :mod:`bfd.transport` -- sockets (port 3784, TTL 255 / GTSM, per-session source port).
* :mod:`bfd.engine` -- :class:`bfd.engine.BfdEngine`, the isolated engine the daemon drives.
"""
