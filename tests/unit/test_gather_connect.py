"""An FL client whose link is down when its round starts (an events: flap or partition: the
kernel deleted its route, connect fails with ENETUNREACH at once) keeps trying until the
round's deadline instead of failing the run (traffic_gen/gather.py _connect); a client of a
round without a deadline gives up after the transfer timeout naming the root's address;
other errors are not retried."""

from __future__ import annotations

import errno
import time

import pytest

from traffic_gen.gather import _connect
from traffic_gen.transfers import Shared


class _Sock:
    """Fails ``fails`` connects with ``err``, then connects."""

    def __init__(self, fails: int, err: int = errno.ENETUNREACH) -> None:
        self.fails, self.err, self.calls = fails, err, 0

    def connect(self, addr):
        self.calls += 1
        if self.calls <= self.fails:
            raise OSError(self.err, "Network is unreachable")


def _shared(timeout_s: float = 30.0) -> Shared:
    return Shared(lambda r: None, lambda i: None, timeout_s)


def _op(deadline_s):
    return {"start_phase": 0, "deadline_s": deadline_s}


def test_no_route_is_retried_until_the_link_is_back():
    sh = _shared()
    sh.phase_t0[0] = time.time()
    s = _Sock(3)
    assert _connect(s, ("198.18.0.1", 5000), _op(5.0), sh) is True and s.calls == 4


def test_past_the_deadline_the_client_gives_up_quietly():
    sh = _shared()
    sh.phase_t0[0] = time.time() - 10.0  # the round's 1 s deadline is long past
    s = _Sock(10**6)
    assert _connect(s, ("198.18.0.1", 5000), _op(1.0), sh) is False and s.calls == 1


def test_without_a_deadline_the_transfer_timeout_ends_it_naming_the_root():
    sh = _shared(timeout_s=0.05)
    sh.phase_t0[0] = time.time()
    with pytest.raises(OSError, match=r"no route to the root at 198\.18\.0\.1 for 0\.05 s"):
        _connect(_Sock(10**6, errno.EHOSTUNREACH), ("198.18.0.1", 5000), _op(None), sh)


def test_other_errors_are_not_retried():
    sh = _shared()
    sh.phase_t0[0] = time.time()
    s = _Sock(1, errno.ECONNREFUSED)
    with pytest.raises(OSError) as exc:
        _connect(s, ("198.18.0.1", 5000), _op(5.0), sh)
    assert exc.value.errno == errno.ECONNREFUSED and s.calls == 1
