"""Transfers of an agent (socket workers): one thread per connection direction, in order.

A :class:`Job` is one piece of a step on one connection: it waits for the events of the steps
it depends on, moves ``size_bytes``, then calls ``done``. Senders write from one shared,
preallocated zero buffer (``socket.send`` of a memoryview: no per-transfer allocation);
receivers ``recv_into`` one shared scratch buffer (its content is never read). Each worker
emits a half flow record (sender or receiver side) that the controller joins by key.
"""

from __future__ import annotations

import ctypes
import os
import queue
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from traffic_gen.ackwatch import AckTracker, AckWatcher
from traffic_gen.tls import wire_bytes

__all__ = ["Job", "Abort", "Shared", "TcpSender", "TcpReceiver", "BUFFER_BYTES", "sleep_until",
           "set_scheduler"]

BUFFER_BYTES = 4 << 20  # one send or recv call moves at most this much
_POLL_S = 0.1  # how often a waiting worker checks whether the run was aborted


class _SchedParam(ctypes.Structure):
    _fields_ = [("sched_priority", ctypes.c_int)]


_LIBC = ctypes.CDLL(None, use_errno=True)


def set_scheduler(policy: int, priority: int) -> None:
    """sched_setscheduler(2) for the calling thread, through ctypes so that the GIL is
    released during the call: a thread demoted to SCHED_OTHER is preempted inside the
    syscall, not while holding its agent's GIL (which would stall the agent's other,
    still real-time threads: priority inversion). Raises OSError (e.g. EPERM without root)."""
    if _LIBC.sched_setscheduler(0, policy, ctypes.byref(_SchedParam(priority))) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"sched_setscheduler: {os.strerror(err)}")


class Abort(Exception):
    """The run failed elsewhere; stop quietly."""


@dataclass
class Shared:
    """What every worker of one agent shares: buffers, the abort flag, the record sink."""

    emit: Callable[[dict[str, Any]], None]
    fail: Callable[[dict[str, Any]], None]
    transfer_timeout_s: float
    spin_s: float = 0.0
    rt_priority: int | None = None
    aborted: threading.Event = field(default_factory=threading.Event)
    send_buf: memoryview = field(default_factory=lambda: memoryview(bytes(BUFFER_BYTES)))
    recv_buf: memoryview = field(default_factory=lambda: memoryview(bytearray(BUFFER_BYTES)))
    acks: AckWatcher = field(default_factory=AckWatcher)
    phase_t0: dict[int, float] = field(default_factory=dict)  # phase -> start (gathers)
    kicker: Any = None  # a kick.KickClient: timed starts are written by the starter (kick.py)
    # rank -> live compute slowdown from the controller (``slowdown`` messages, an events:
    # straggler), multiplying the compiled one from the next compute op on
    slowdown: dict[int, float] = field(default_factory=dict)

    def live_factor(self, rank: int) -> float:
        """The live slowdown of ``rank`` (1.0 without a ``slowdown`` message)."""
        return self.slowdown.get(rank, 1.0)

    def wait(self, ev: threading.Event) -> None:
        """Wait for ``ev``; raise Abort if the run is aborted meanwhile."""
        while not ev.wait(_POLL_S):
            if self.aborted.is_set():
                raise Abort


@dataclass
class Job:
    """One piece of a step: ``key`` joins the sender and receiver halves of its flow record;
    ``meta`` (op, rank, peer, ...) goes into the record and into any failure."""

    size_bytes: int
    deps: list[threading.Event]
    done: Callable[[], None]
    key: str
    meta: dict[str, Any]
    start_at: float = 0.0


def sleep_until(t: float, spin_s: float = 0.0) -> None:
    """Sleep until host-clock time ``t`` (s): a coarse sleep, then a busy spin of at most
    ``spin_s`` to hit ``t`` closely (Linux timer slack is 50 us). Spinning helps only when
    there are more free cores than agents waiting for the same instant; with many agents on
    few cores it delays the others, so it is off by default."""
    left = t - time.time()
    if left > spin_s:
        time.sleep(left - spin_s)
    while time.time() < t:
        pass


class _Worker(threading.Thread):
    def __init__(self, sock: socket.socket, shared: Shared, info: dict[str, Any]) -> None:
        super().__init__(daemon=True)
        self.sock, self.shared, self.info = sock, shared, info
        self.jobs: queue.Queue[Job | threading.Event | None] = queue.Queue()

    def submit(self, job: Job | threading.Event | None) -> None:
        """Queue ``job``; an Event means "flush, then set it" (end of phase); None stops."""
        self.jobs.put(job)

    def run(self) -> None:
        while (job := self.jobs.get()) is not None:
            try:
                if isinstance(job, threading.Event):
                    self.flush()
                    job.set()
                    continue
                for ev in job.deps:
                    self.shared.wait(ev)
                self.prepare(job)
                if job.start_at:
                    self.timed_start(job)
                self.transfer(job)
                self.unboost()
                job.done()
            except Abort:
                return
            except (OSError, TimeoutError) as exc:
                meta = job.meta if isinstance(job, Job) else {}
                self.shared.fail({**meta, **self.info, "detail": f"{type(exc).__name__}: {exc}"})
                return

    boosted = False
    sends = False  # senders sleep until a timed start; receivers just wait for data

    def timed_start(self, job: Job) -> None:
        """Get ready for a job with an absolute start: boost (:meth:`boost`), and senders
        sleep until the instant. With a starter (``shared.kicker``) nobody needs the CPU at
        the instant, so no worker is boosted."""
        if self.shared.kicker is None:
            self.boost()
            if self.sends:
                sleep_until(job.start_at, self.shared.spin_s)

    def boost(self) -> None:
        """Wait for a timed start at SCHED_FIFO ``rt_priority`` (if set): on a few cores
        shared by many agents, the woken senders then run before any other agent's ordinary
        work. Receivers are boosted too, so that one never holds its agent's GIL while
        preempted by senders (priority inversion). Dropped again right after the first send
        or receive (:meth:`unboost`). Needs root."""
        if self.shared.rt_priority:
            set_scheduler(os.SCHED_FIFO, self.shared.rt_priority)
            self.boosted = True

    def unboost(self) -> None:
        """Back to the ordinary scheduler (this thread only)."""
        if self.boosted:
            set_scheduler(os.SCHED_OTHER, 0)
            self.boosted = False

    def flush(self) -> None:
        """Hook for the end of a phase."""

    def prepare(self, job: Job) -> None:
        """Hook run before waiting for the start time (keep work off the critical instant)."""

    def transfer(self, job: Job) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


class TcpSender(_Worker):
    """Sends jobs on one connection. Each transfer's record is closed when its last byte is
    acknowledged (:class:`~traffic_gen.ackwatch.AckTracker`, polled by the agent's watcher
    thread), so that its TCP_INFO describes this transfer; the next transfer does not wait for
    that. At a flush the sender waits until every record is closed (bounded by the transfer
    timeout)."""

    sends = True

    def __init__(self, sock: socket.socket, shared: Shared, info: dict[str, Any],
                 congestion_control: str, conn_id: str = "") -> None:
        super().__init__(sock, shared, info)
        self.acks = AckTracker(sock, congestion_control, shared.emit)
        self.conn_id = conn_id  # "src/dst/conn": this connection's name at the starter
        self.kicked: dict[str, Any] | None = None
        self.tls = "tls_cipher" in info  # an ssl.SSLSocket (traffic_gen/tls.py)

    def timed_start(self, job: Job) -> None:
        """With a starter: arm the job and wait until the starter wrote its first bytes at
        ``job.start_at`` (kick.py); ``self.kicked`` then holds its reply. Raises Abort if the
        run fails meanwhile, TimeoutError if the starter never answers, OSError if it
        failed to write."""
        if self.shared.kicker is None or not job.size_bytes:
            super().timed_start(job)
            return
        ev, box = self.shared.kicker.arm(self.conn_id, job.start_at, job.size_bytes)
        limit = job.start_at + self.shared.transfer_timeout_s
        while not ev.wait(_POLL_S):
            if self.shared.aborted.is_set():
                raise Abort
            if time.time() > limit:
                raise TimeoutError(f"the starter did not start connection {self.conn_id}")
        if box[0].get("error"):
            raise OSError(f"the starter could not write on {self.conn_id}: {box[0]['error']}")
        self.kicked = box[0]

    def prepare(self, job: Job) -> None:
        """Read the connection's TCP_INFO baseline before its first transfer."""
        self.acks.start(self.shared.transfer_timeout_s)

    def transfer(self, job: Job) -> None:
        """Move ``job.size_bytes`` (see the class docstring)."""
        t0, left, cpu0 = time.time(), job.size_bytes, time.thread_time()
        if self.kicked is not None:  # the starter wrote the first bytes (timed_start)
            if self.kicked["bytes"]:
                t0, left = self.kicked["t"], left - self.kicked["bytes"]
            self.kicked = None
        deadline, buf = t0 + self.shared.transfer_timeout_s, self.shared.send_buf
        wire = job.size_bytes - left  # bytes on the wire (TLS adds its records' overhead)
        while left:
            self.sock.settimeout(max(deadline - time.time(), 1e-3))
            try:
                sent = self.sock.send(buf[:min(left, len(buf))])
            except TimeoutError:
                raise _overdue("send", job.size_bytes, left, self.shared) from None
            left -= sent
            wire += wire_bytes(sent) if self.tls else sent
            self.unboost()
        t_sent = time.time()
        rec = {"half": "send", "key": job.key, "t_start": t0, "t_sent": t_sent,
               "cpu_s": time.thread_time() - cpu0, **job.meta, **self.info}
        self.acks.add(rec, wire, t_sent + self.shared.transfer_timeout_s)
        self.shared.acks.watch(self.acks)

    def flush(self) -> None:
        """Wait until every transfer's record is closed (acknowledged or overdue)."""
        self.acks.drain(self.shared.transfer_timeout_s + 1.0)  # + 1 s: the watcher's naps


OVERDUE_ADVICE = "raise timeouts.transfer in the experiment or shrink the transfer"
"""The advice ending an overdue transfer's error; the run replaces it by the cause when an
event (a link down, an agent stopped) explains the failure (orchestration.run.runner)."""


def _overdue(verb: str, size_bytes: int, left: int, shared: Any) -> TimeoutError:
    """The error of a transfer not done within the experiment's ``timeouts.transfer``."""
    return TimeoutError(f"could not {verb} {size_bytes} bytes within timeouts.transfer "
                        f"({shared.transfer_timeout_s:g} s): {size_bytes - left} moved; "
                        + OVERDUE_ADVICE)


class TcpReceiver(_Worker):
    """Receives jobs on one connection. Until the first byte it waits as long as the run is
    alive (the sender may be a straggler); from the first byte the transfer timeout runs."""

    def transfer(self, job: Job) -> None:
        """Move ``job.size_bytes`` (see the class docstring)."""
        if job.size_bytes == 0:
            now = time.time()
            self.shared.emit({"half": "recv", "key": job.key, "t_first_byte": now, "t_end": now,
                              **job.meta, **self.info})
            return
        pending = getattr(self.sock, "pending", None)  # TLS: bytes decrypted but not read
        while not (pending and pending()) and not select.select([self.sock], [], [], _POLL_S)[0]:
            if self.shared.aborted.is_set():
                raise Abort
        t_first, cpu0 = time.time(), time.thread_time()
        deadline, left, buf = t_first + self.shared.transfer_timeout_s, job.size_bytes, \
            self.shared.recv_buf
        while left:
            self.sock.settimeout(max(deadline - time.time(), 1e-3))
            try:
                got = self.sock.recv_into(buf, min(left, len(buf)))
            except TimeoutError:
                raise _overdue("receive", job.size_bytes, left, self.shared) from None
            self.unboost()
            if not got:
                raise ConnectionError("peer closed the connection mid-transfer")
            left -= got
        self.shared.emit({"half": "recv", "key": job.key, "t_first_byte": t_first,
                          "t_end": time.time(), "cpu_s": time.thread_time() - cpu0,
                          **job.meta, **self.info})
