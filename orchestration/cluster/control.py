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

Host keys, as OpenSSH checks them (ssh(1), StrictHostKeyChecking yes): a machine's key must
be in one of the known_hosts files of :class:`HostTrust` (the user's ``~/.ssh/known_hosts``,
the system's ``/etc/ssh/ssh_known_hosts``, the cluster section's ``known_hosts``), looked up
under ``ssh`` (port 22) or ``[ssh]:port`` (paramiko's HostKeys reads them, hashed names too).
A key of another value than the one on file is refused (:class:`HostKeyRefused`, a possible
man in the middle); an unknown one too, unless ``trust_on_first_use`` (then it is appended to
the file :attr:`HostTrust.add_to` names and used). Keys are named by OpenSSH's fingerprint
(:func:`fingerprint_sha256`). ``aitb cluster trust`` adds a machine's key (:func:`trust_machine`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shlex
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.errors import LabError
from orchestration.cluster.spec import ClusterSpec, Machine

__all__ = ["USER_KNOWN_HOSTS", "SYSTEM_KNOWN_HOSTS", "HostKeyRefused", "HostTrust",
           "host_trust", "host_name", "fingerprint_sha256", "missing_key_policy",
           "trust_machine", "read_json_line", "Offset", "offset_from", "drift_rate",
           "to_driver_s", "drift_correction_s", "Control", "ECHO_SCRIPT", "paramiko_errors"]

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


USER_KNOWN_HOSTS = "~/.ssh/known_hosts"  # expanded at use (HOME)
SYSTEM_KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts"


class HostKeyRefused(LabError):
    """A machine's SSH host key is not trusted (unknown, or other than the one on file):
    nothing was run there. Exit code 2 (the user's trust is the input to fix)."""

    exit_code = 2


@dataclass(frozen=True)
class HostTrust:
    """Which host keys are trusted: the user's and the system's known_hosts files, plus
    ``known_hosts`` (the cluster section's, ``~`` expanded) if given; ``trust_on_first_use``:
    an unknown key is appended to :attr:`add_to` and used. ``source``: the cluster file, named
    in the advice of a refusal."""

    known_hosts: str | None = None
    trust_on_first_use: bool = False
    source: str | None = None

    def files(self) -> list[Path]:
        """The files read, in order: the user's, the system's, the cluster's."""
        out = [Path(USER_KNOWN_HOSTS).expanduser(), Path(SYSTEM_KNOWN_HOSTS)]
        return out + ([Path(self.known_hosts).expanduser()] if self.known_hosts else [])

    @property
    def add_to(self) -> Path:
        """Where a newly trusted key goes: the cluster's ``known_hosts``, else the user's."""
        return Path(self.known_hosts or USER_KNOWN_HOSTS).expanduser()

    def advice(self, machine: Machine, first_use: bool = True) -> str:
        """How to accept ``machine``'s key (for a refusal's message); ``first_use``: also
        name ``trust_on_first_use`` (which does not cover a changed key)."""
        where = f" --cluster {shlex.quote(self.source)}" if self.source else ""
        return (f"if it is the machine's key, accept it with `aitb cluster trust {machine.name}"
                f"{where}` (adds it to {self.add_to})"
                + (" or trust_on_first_use: true in the cluster: section" if first_use else ""))


def host_trust(cluster: ClusterSpec, source: str | None = None) -> HostTrust:
    """The HostTrust of a cluster section (``source``: its file)."""
    return HostTrust(cluster.known_hosts, cluster.trust_on_first_use, source)


def host_name(machine: Machine) -> str:
    """The name a machine's key is filed under: ``ssh``, or ``[ssh]:port`` off port 22
    (OpenSSH's and paramiko's convention)."""
    return machine.ssh if machine.port == 22 else f"[{machine.ssh}]:{machine.port}"


def fingerprint_sha256(key: Any) -> str:
    """OpenSSH's fingerprint of a public key (``ssh-keygen -l``, its default since OpenSSH
    6.8): ``SHA256:`` and the base64 of the SHA-256 of the key's wire form (RFC 4253
    section 6.6), without ``=`` padding. ``key``: a paramiko PKey (or anything with
    ``asbytes()``)."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def _describe(key: Any) -> str:
    return f"{key.get_name()} {fingerprint_sha256(key)}"


def _known(trust: HostTrust, name: str) -> list[tuple[Path, Any]]:
    """Every (file, key) on file for ``name`` in the trust's files (missing files skipped)."""
    import paramiko

    out = []
    for path in trust.files():
        if not path.is_file():
            continue
        try:
            found = paramiko.HostKeys(str(path)).lookup(name)
        except (OSError, paramiko.SSHException) as exc:
            raise HostKeyRefused(f"known_hosts file {path}: cannot be read: {exc}") from None
        out += [(path, k) for k in (found.values() if found is not None else ())]
    return out


def _append(path: Path, name: str, key: Any) -> None:
    """Append ``name``'s ``key`` to the known_hosts file ``path`` as one line (paramiko's
    HostKeyEntry format); creates the file (0600) and its directory (0700) if missing."""
    import paramiko

    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    line = paramiko.hostkeys.HostKeyEntry([name], key).to_line()
    text = path.read_text() if path.is_file() else ""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a") as f:
        f.write(("\n" if text and not text.endswith("\n") else "") + line)


def _unknown(machine: Machine, trust: HostTrust, key: Any) -> str:
    files = ", ".join(str(p) for p in trust.files())
    return (f"machine {machine.name}: the SSH host key of {host_name(machine)} is unknown: "
            f"{_describe(key)} (not in {files}); refused, nothing run there; "
            + trust.advice(machine))


def _changed(machine: Machine, trust: HostTrust, key: Any) -> str:
    known = _known(trust, host_name(machine))
    on_file = "; ".join(f"{p} has {_describe(k)}" for p, k in known) or "another key on file"
    first = known[0][0] if known else trust.add_to
    return (f"machine {machine.name}: the SSH host key of {host_name(machine)} CHANGED: it "
            f"offers {_describe(key)}, {on_file}; refused, nothing run there (someone may be "
            "intercepting the connection, or the machine got a new key: if you know it did, "
            f"remove the old one with `ssh-keygen -R {shlex.quote(host_name(machine))} -f "
            f"{first}`, then {trust.advice(machine, first_use=False)})")


def missing_key_policy(machine: Machine, trust: HostTrust, record: dict[str, Any]) -> Any:
    """A paramiko MissingHostKeyPolicy for a key in none of the trust's files: with
    ``trust_on_first_use`` it appends the key to ``trust.add_to`` and fills ``record``,
    else it raises HostKeyRefused."""
    import paramiko

    class Policy(paramiko.MissingHostKeyPolicy):
        def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
            if not trust.trust_on_first_use:
                raise HostKeyRefused(_unknown(machine, trust, key))
            _append(trust.add_to, hostname, key)
            record.update(trusted_by="trust_on_first_use", file=str(trust.add_to))

    return Policy()


class Control:
    """An SSH connection to ``machine`` (paramiko), its host key checked against ``trust``
    (module docstring; default: the user's and the system's known_hosts only).
    :attr:`host_key` says which key was used and why it was trusted: ``type``,
    ``fingerprint`` (:func:`fingerprint_sha256`), ``trusted_by`` (``known_hosts`` or
    ``trust_on_first_use``), ``file``. Raises HostKeyRefused (exit 2) for an unknown or
    changed key, LabError when the machine cannot be reached or logged into."""

    def __init__(self, machine: Machine, trust: HostTrust | None = None,
                 timeout_s: float = 15.0) -> None:
        import paramiko

        trust = trust or HostTrust()
        self.machine = machine
        record: dict[str, Any] = {}
        try:
            self.client = self._connect(trust, record, timeout_s)
        except paramiko.BadHostKeyException as exc:
            # paramiko compares the first key on file of the offered type; OpenSSH accepts a
            # match in any file (a stale line in one, the right key in another): so only a
            # key in none of them is a changed one
            if not any(k == exc.key for _, k in _known(trust, host_name(machine))):
                raise HostKeyRefused(_changed(machine, trust, exc.key)) from None
            try:
                self.client = self._connect(trust, record, timeout_s, only=exc.key)
            except paramiko.BadHostKeyException as again:  # another key this time
                raise HostKeyRefused(_changed(machine, trust, again.key)) from None
        transport = self.client.get_transport()
        key = transport.get_remote_server_key() if transport is not None else None
        if not record and key is not None:
            record.update(trusted_by="known_hosts", file=next(
                (str(p) for p, k in _known(trust, host_name(machine)) if k == key), None))
        self.host_key: dict[str, Any] = {
            "type": key.get_name() if key is not None else None,
            "fingerprint": fingerprint_sha256(key) if key is not None else None, **record}

    def _connect(self, trust: HostTrust, record: dict[str, Any], timeout_s: float,
                 only: Any = None) -> Any:
        """A connected paramiko SSHClient: the host key checked against the trust's files
        (merged into one HostKeys, only read, never saved) or, with ``only``, against that
        key alone (a key found on file). Raises paramiko's BadHostKeyException for a key
        other than the first on file, HostKeyRefused, LabError."""
        import paramiko

        machine = self.machine
        client = paramiko.SSHClient()
        if only is not None:
            client.get_host_keys().add(host_name(machine), only.get_name(), only)
        else:
            for path in trust.files():
                if path.is_file():
                    try:
                        client.load_system_host_keys(str(path))
                    except (OSError, paramiko.SSHException) as exc:
                        raise HostKeyRefused(f"machine {machine.name}: known_hosts file "
                                             f"{path}: cannot be read: {exc}") from None
        client.set_missing_host_key_policy(missing_key_policy(machine, trust, record))
        try:
            client.connect(machine.ssh, port=machine.port, username=machine.user,
                           key_filename=machine.key, timeout=timeout_s,
                           allow_agent=False, look_for_keys=machine.key is None)
        except (HostKeyRefused, paramiko.BadHostKeyException):
            client.close()
            raise
        except Exception as exc:  # paramiko raises many kinds; all mean "not reachable"
            client.close()
            raise LabError(f"machine {machine.name}: SSH to {machine.user}@{machine.ssh}:"
                           f"{machine.port} failed: {exc}") from None
        return client

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


def trust_machine(machine: Machine, trust: HostTrust, timeout_s: float = 15.0
                  ) -> tuple[str, dict[str, Any]]:
    """``aitb cluster trust``: fetch ``machine``'s host key (an SSH key exchange, no login;
    the key types already on file for it preferred, as SSHClient does) and, if it is in none
    of the trust's files, append it to ``trust.add_to``. Returns (what was done: ``added``
    or ``known``, the key's type, fingerprint and file). Raises HostKeyRefused when another
    key is on file for it (it is not replaced), LabError when it cannot be reached."""
    import paramiko

    name = host_name(machine)
    known = _known(trust, name)
    try:
        sock = socket.create_connection((machine.ssh, machine.port), timeout=timeout_s)
        transport = paramiko.Transport(sock)
        try:
            opts = transport.get_security_options()
            first = [t for t in dict.fromkeys(k.get_name() for _, k in known)
                     if t in opts.key_types]
            opts.key_types = first + [t for t in opts.key_types if t not in first]
            transport.start_client(timeout=timeout_s)
            key = transport.get_remote_server_key()
        finally:
            transport.close()
    except (OSError, EOFError, paramiko.SSHException) as exc:
        raise LabError(f"machine {machine.name}: SSH to {machine.ssh}:{machine.port} failed: "
                       f"{exc}") from None
    got = {"type": key.get_name(), "fingerprint": fingerprint_sha256(key)}
    same = [p for p, k in known if k == key]
    if same:
        return "known", {**got, "file": str(same[0])}
    if known:
        raise HostKeyRefused(_changed(machine, trust, key))
    _append(trust.add_to, name, key)
    return "added", {**got, "file": str(trust.add_to)}
