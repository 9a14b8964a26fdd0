"""Under pytest-xdist, a test marked ``serial`` runs while no other worker runs a test.

`make test-unit` runs on 2 workers; a few loopback tests assert timing margins of tens of ms
that a second worker loading the other core could break. Every test of a worker holds a
shared flock(2) on one file for its whole protocol (setup, call, teardown); a serial test
holds it exclusively. A turnstile lock taken first keeps a stream of shared holders from
starving a waiting serial test: the serial test keeps the turnstile while it runs, so the
other worker waits before its next test, and the serial test starts once that worker's
current test has ended. Both files live in the session's base temporary directory, which all
workers of one session share (each worker's own is a child of it), so separate pytest
sessions never wait for each other. Without xdist this is a no-op. A lock is held only around
one test and closed in ``finally`` (a worker that dies releases it with its descriptors), so
nothing can wait for a test longer than that test runs (pytest-timeout bounds it).
"""

from __future__ import annotations

import fcntl
import os

import pytest


def _locked(path: str, operation: int) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, operation)
    except BaseException:
        os.close(fd)
        raise
    return fd


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return (yield)
    # private, but what xdist itself uses to give each worker its base temp under this one
    shared = item.config._tmp_path_factory.getbasetemp().parent
    serial = item.get_closest_marker("serial") is not None
    turnstile = _locked(str(shared / "serial-turnstile.lock"), fcntl.LOCK_EX)
    held = None
    try:
        held = _locked(str(shared / "serial.lock"), fcntl.LOCK_EX if serial else fcntl.LOCK_SH)
        if not serial:
            os.close(turnstile)
            turnstile = None
        return (yield)
    finally:
        if held is not None:
            os.close(held)
        if turnstile is not None:
            os.close(turnstile)
