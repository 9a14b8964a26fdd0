"""The control channel to a machine of a cluster (SSH, paramiko) and the clock offset over it.

Clock offset, NTP-style (D. Mills, RFC 5905 section 8): for each exchange the driver's send
time t0, the machine's receive and reply time t1 = t2 (one reading), the driver's receive time
t3 give offset ((t1 - t0) + (t2 - t3)) / 2 and round-trip delay (t3 - t0) - (t2 - t1); the
sample with the smallest delay is kept (its error is at most delay / 2). Times are
``time.time_ns()`` (CLOCK_REALTIME) on both sides: the offset is what to add to the driver's
wall clock to get the machine's.

Drift (:func:`drift_rate`, :func:`to_driver_s`): the offset is measured before and after the
run; between the two it is taken as linear in the driver's time, o(t) = o_b + r (t - t_b) with
r = (o_a - o_b) / (t_a - t_b) (s per s; 1e6 r in ppm), t_b and t_a the driver's times of the
two kept samples (the midpoints (t0 + t3) / 2). The assumption is a constant frequency error
of the machine's clock relative to the driver's over the run (the clock model of RFC 5905: a
time offset plus a frequency offset, here without its wander, i.e. constant drift). A machine
time T is then the driver's t with T = t + o(t), so t = T - o_b - r (T - o_b - t_b) / (1 + r).
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.errors import LabError
from orchestration.cluster.spec import Machine

__all__ = ["read_json_line", "Offset", "offset_from", "drift_rate", "to_driver_s",
           "drift_correction_s", "Control", "ECHO_SCRIPT", "paramiko_errors"]

# The machine's side of the exchange: one wall-clock reading per line read.
ECHO_SCRIPT = ("import sys,time\nfor _ in sys.stdin:\n"
               "    print(time.time_ns(), flush=True)\n")


def read_json_line(out: Any, chan: Any, where: str) -> dict[str, Any]:
    """One JSON line from a remote aitb process's stdout ``out`` (a file of ``chan``, a paramiko
    channel); a line that is not JSON comes back as ``{"error": line}``. Raises LabError
    naming ``where`` with the end of its stderr when the process ended without a line."""
    raw = out.readline()
    if not raw:
        err = chan.makefile_stderr("rb").read().decode(errors="replace")
        raise LabError(f"{where}: it ended without an answer: {err.strip()[-1500:]}")
    try:
        return json.loads(raw)
    except ValueError:
        return {"error": raw.decode(errors="replace").strip()}


def paramiko_errors() -> type[Exception]:
    """paramiko's base exception (SSHException), imported when needed."""
    import paramiko

    return paramiko.SSHException


@dataclass(frozen=True)
class Offset:
    """The machine's clock minus the driver's (seconds), the round-trip delay of the sample
    it came from (seconds; the error bound is half of it), the samples taken and the driver's
    wall time of that sample (s since the epoch, the midpoint of its send and receive; None
    for an offset recorded without it)."""

    offset_s: float
    delay_s: float
    samples: int
    t_s: float | None = None


def offset_from(samples: Sequence[tuple[int, int, int, int]]) -> Offset:
    """The offset from ``(t0, t1, t2, t3)`` samples in ns (module docstring). Raises
    ValueError for no samples."""
    if not samples:
        raise ValueError("no clock samples")
    best = min(samples, key=lambda s: (s[3] - s[0]) - (s[2] - s[1]))
    t0, t1, t2, t3 = best
    return Offset(((t1 - t0) + (t2 - t3)) / 2e9, ((t3 - t0) - (t2 - t1)) / 1e9, len(samples),
                  (t0 + t3) / 2e9)


def drift_rate(before: Offset, after: Offset | None) -> float:
    """The machine clock's drift against the driver's (s per s, module docstring): the
    change of the offset over the driver's time between ``before`` and ``after``; 0.0 if
    ``after`` is None (a lost machine), either lacks its time or they share one instant."""
    if after is None or before.t_s is None or after.t_s is None or after.t_s == before.t_s:
        return 0.0
    return (after.offset_s - before.offset_s) / (after.t_s - before.t_s)


def to_driver_s(t_machine_s: float, before: Offset, rate: float) -> float:
    """A time of the machine's clock (s) on the driver's: the offset interpolated linearly
    from ``before`` at drift ``rate`` (s per s, :func:`drift_rate`; module docstring's
    formula). With ``rate`` 0 it is ``t_machine_s - before.offset_s``."""
    return t_machine_s - before.offset_s - drift_correction_s(t_machine_s, before, rate)


def drift_correction_s(t_machine_s: float, before: Offset, rate: float) -> float:
    """The part of the correction due to drift (s): r (T - o_b - t_b) / (1 + r); small, so
    it keeps its precision in floating point while a pcap's time stays in integer ns."""
    if rate == 0.0 or before.t_s is None:
        return 0.0
    return rate * (t_machine_s - before.offset_s - before.t_s) / (1.0 + rate)


class Control:
    """An SSH connection to ``machine`` (paramiko; host keys from ``known_hosts`` if given,
    else accepted on first use and kept for this connection)."""

    def __init__(self, machine: Machine, known_hosts: Path | None = None,
                 timeout_s: float = 15.0) -> None:
        import paramiko

        self.machine = machine
        self.client = paramiko.SSHClient()
        if known_hosts is not None:
            self.client.load_host_keys(str(known_hosts))
            self.client.set_missing_host_key_policy(paramiko.RejectPolicy())
        else:
            self.client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
        try:
            self.client.connect(machine.ssh, port=machine.port, username=machine.user,
                                key_filename=machine.key, timeout=timeout_s,
                                allow_agent=False, look_for_keys=machine.key is None)
        except Exception as exc:  # paramiko raises many kinds; all mean "not reachable"
            raise LabError(f"machine {machine.name}: SSH to {machine.user}@{machine.ssh}:"
                           f"{machine.port} failed: {exc}") from None

    def run(self, argv: Sequence[str], timeout_s: float = 60.0) -> tuple[int, str, str]:
        """Run ``argv`` on the machine (quoted for its shell); (exit status, stdout,
        stderr). Raises LabError naming the machine if it has not ended after ``timeout_s``
        or the connection fails (a machine that stopped answering)."""
        try:
            _, out, err = self.client.exec_command(shlex.join(argv), timeout=timeout_s)
            text_out, text_err = out.read().decode(), err.read().decode()
            if not out.channel.status_event.wait(timeout_s):
                raise TimeoutError(f"no exit status after {timeout_s:g} s")
            return out.channel.recv_exit_status(), text_out, text_err
        except (OSError, EOFError, TimeoutError, paramiko_errors()) as exc:
            raise LabError(f"machine {self.machine.name}: {shlex.join(argv)}: "
                           f"{type(exc).__name__}: {exc}") from None

    def check(self, argv: Sequence[str], timeout_s: float = 60.0) -> str:
        """:meth:`run`, raising LabError naming machine, argv and stderr on a non-zero
        status; returns stdout."""
        status, out, err = self.run(argv, timeout_s)
        if status != 0:
            raise LabError(f"machine {self.machine.name}: {shlex.join(argv)} exited {status}:"
                           f" {err.strip()[-500:]}")
        return out

    def put_text(self, path: str, text: str) -> None:
        """Write ``text`` to the file ``path`` on the machine (through ``cat``: no SFTP
        subsystem needed). Raises LabError when that fails."""
        stdin, out, err = self.client.exec_command(shlex.join(["sh", "-c", 'cat > "$0"',
                                                               path]))
        stdin.write(text)
        stdin.channel.shutdown_write()
        status = out.channel.recv_exit_status()
        if status != 0:
            raise LabError(f"machine {self.machine.name}: writing {path} failed: "
                           f"{err.read().decode().strip()[-500:]}")

    def clock_offset(self, samples: int = 8, python: str = "python3",
                     clock: Callable[[], int] = time.time_ns, timeout_s: float = 30.0
                     ) -> Offset:
        """Estimate the machine's clock offset over one SSH channel (module docstring).
        Raises LabError naming the machine if an answer takes more than ``timeout_s``."""
        try:
            return self._clock_offset(samples, python, clock, timeout_s)
        except (OSError, EOFError, ValueError, paramiko_errors()) as exc:
            raise LabError(f"machine {self.machine.name}: clock offset: "
                           f"{type(exc).__name__}: {exc}") from None

    def _clock_offset(self, samples: int, python: str, clock: Callable[[], int],
                      timeout_s: float) -> Offset:
        stdin, stdout, _ = self.client.exec_command(shlex.join([python, "-c", ECHO_SCRIPT]),
                                                    timeout=timeout_s)
        got: list[tuple[int, int, int, int]] = []
        try:
            for _ in range(samples):
                t0 = clock()
                stdin.write("x\n")
                stdin.flush()
                line = stdout.readline()
                t3 = clock()
                t1 = int(line)
                got.append((t0, t1, t1, t3))
        finally:
            stdin.close()
        return offset_from(got)

    def close(self) -> None:
        """Close the connection."""
        self.client.close()

    def __enter__(self) -> Control:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
