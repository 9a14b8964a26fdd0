"""Closing a control channel while its reader thread waits for a message returns (the
reader sees end of file): a run interrupted in its traffic hung in Channel.close, its reader
thread holding the buffered reader's lock inside recv (tests/fuzz/kill_harness.py found it)."""

from __future__ import annotations

import socket
import threading

from traffic_gen.wire import Channel


def test_close_while_a_reader_waits_returns_and_ends_the_reader():
    ours, peer = socket.socketpair()  # the peer stays open and silent: no end of file
    ch = Channel(ours)
    got = []
    reader = threading.Thread(target=lambda: got.extend(ch), daemon=True)
    reader.start()
    while not _blocked_in_recv(reader):
        reader.join(0.01)
    closer = threading.Thread(target=ch.close, daemon=True)
    closer.start()
    closer.join(60)  # a hang, not a time limit: it returns at once or never
    try:
        assert not closer.is_alive(), "Channel.close waited for the blocked reader"
        reader.join(60)
        assert not reader.is_alive() and got == []
    finally:
        peer.close()


def _blocked_in_recv(t: threading.Thread) -> bool:
    import sys

    frame = sys._current_frames().get(t.ident)
    while frame is not None:
        if frame.f_code.co_name == "readinto":
            return True
        frame = frame.f_back
    return False
