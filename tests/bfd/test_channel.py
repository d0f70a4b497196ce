"""The daemon's end of the engine's control socket (bfd.engine.channel.DaemonEnd), over a real
socketpair: stopping it never races its reader thread."""

from __future__ import annotations

import logging
import pickle
import socket
import struct
import threading
from multiprocessing.connection import Connection

import pytest

from bfd.engine.channel import DaemonEnd


def _frame(msg: object) -> bytes:
    data = pickle.dumps(msg)
    return struct.pack("!i", len(data)) + data


def test_join_wakes_a_reader_blocked_on_an_engine_that_has_not_hung_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The engine's end stays open (as when another process still holds it): join must still
    end the reader, and without an error from a read on a closed handle."""
    ours, engine = socket.socketpair()
    closed = threading.Event()
    end = DaemonEnd(Connection(ours.detach()), lambda ev: None, closed.set)
    end.start()
    try:
        fut = end.call("ping", ())
        engine.recv(1 << 16)  # the call arrived: the reader now waits for the reply
        engine.sendall(_frame(("reply", 1, True, "pong")))
        assert fut.result(timeout=10) == "pong"
        with caplog.at_level(logging.ERROR, logger="bfd.engine.channel"):
            end.join(timeout=10)
        assert closed.wait(10)  # the reader ended and said so
        assert not [r for r in caplog.records if "bad message" in r.getMessage()]
        assert end.conn.closed
    finally:
        engine.close()
