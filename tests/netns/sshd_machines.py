"""A cluster of "machines" on this one: network namespaces ``aitb-<rid>-m1``, ``-m2``, each
running Debian's sshd (started here by pid, its own config and host key in a temp dir) on its
own underlay address 10.77.0.k on a bridge in a third namespace ``aitb-<rid>-u``, from which
the driver connects; aitb reaches them only over SSH (and VXLAN between their addresses).
The underlay's MTU is ``mtu`` (1600 by default: a 1500-byte lab link fits a VXLAN tunnel).
The machines' host keys are in ``known_hosts`` of the temp dir (what the cluster sections
trust); what runs in the driver's namespace has HOME in the temp dir (``home``), so the
user's real ~/.ssh is neither read nor written."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SSHD = Path("/usr/sbin/sshd")


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


def sshd_config(tmp: Path, name: str, address: str) -> Path:
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / f"host_{name}"))
    cfg = tmp / f"sshd_{name}.conf"
    cfg.write_text(f"Port 22\nListenAddress {address}\nHostKey {tmp}/host_{name}\n"
                   f"PidFile {tmp}/sshd_{name}.pid\nAuthorizedKeysFile {tmp}/authorized_keys\n"
                   "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                   "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n")
    return cfg


@dataclass
class Machines:
    """The cluster: run id, temp dir (key ``id``, sshd configs), machine -> address."""

    rid: str
    tmp: Path
    addresses: dict[str, str]

    @property
    def under(self) -> str:
        return f"aitb-{self.rid}-u"

    @property
    def key(self) -> Path:
        return self.tmp / "id"

    @property
    def known_hosts(self) -> Path:
        """A known_hosts file with every machine's host key (under its address)."""
        return self.tmp / "known_hosts"

    @property
    def home(self) -> Path:
        """HOME of what runs in the driver's namespace (empty: no ~/.ssh/known_hosts)."""
        return self.tmp / "home"

    def aitb_argv(self) -> list[str]:
        """How the machines run aitb: this checkout, one state dir (one file system here;
        the parts' run ids differ)."""
        return ["env", f"PYTHONPATH={ROOT}", f"AITB_STATE_DIR={self.tmp}/state",
                sys.executable, "-m", "orchestration.cli"]

    def in_under(self, argv: Sequence[str], timeout_s: float = 600, **env: str
                 ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside the driver's namespace u (with PYTHONPATH = this checkout and
        HOME = :attr:`home` unless ``env`` gives one)."""
        return subprocess.run(["ip", "netns", "exec", self.under, *argv],
                              env={**os.environ, "PYTHONPATH": str(ROOT),
                                   "HOME": str(self.home), **env},
                              capture_output=True, text=True, timeout=timeout_s)

    def drive(self, script: str) -> dict:
        """Run a Python script in u with key, run id, temp dir, python, checkout as
        arguments (the known_hosts file is temp dir/known_hosts); its last stdout line
        parsed as JSON."""
        out = self.in_under([sys.executable, "-c", script, str(self.key), self.rid,
                             str(self.tmp), sys.executable, str(ROOT)])
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout.strip().splitlines()[-1])


TOPO = {"name": "two-dc-small",
        "generator": {"name": "multi_dc_leaf_spine", "params": {
            "n_dcs": 2, "spines": 1, "leaves": 1, "hosts_per_leaf": 2, "dci": "dci",
            "fabric": "fab", "host_link": "host"}},
        "profiles": {"dci": {"rate": "50Mbit", "delay": "2ms", "buffer": "200KiB"},
                     "fab": {"rate": "100Mbit", "buffer": "200p"},
                     "host": {"rate": "100Mbit"}}}


# the interfaces an observed run captures on: both ends of the DCI (the VXLAN devices of the
# cut link, one per machine) and m2's leaf port toward its first host
CAPTURED = ["dc1-b1:dci-dc2-1", "dc2-b1:dci-dc1-1", "dc2-l1:eth0"]


def two_dc_experiment(m: Machines | None, path: Path, ssh2: str = "10.77.0.2",
                      size: str = "2MiB", iterations: int = 1, observe: bool = False,
                      deploy: str = "parallel", probe_timeout: str | None = None) -> Path:
    """A small 2-DC experiment (a ring all-reduce over both DCs' hosts) split by DC over m1
    and m2 of ``m``; ``m`` None: the same on this machine alone (JSON is YAML). ``observe``:
    capture on :data:`CAPTURED` and sample counters every 50 ms (else neither).
    ``probe_timeout``: the cluster's (probed every 1 s then), else its default."""
    doc = {"name": "split", "seed": 1, "topology": {"inline": TOPO},
           "workloads": [{"kind": "collective", "name": "ring", "op": "all_reduce",
                          "algorithm": "ring", "size": size, "iterations": iterations}],
           "capture": {"enabled": observe, "interfaces": CAPTURED},
           "counters": {"enabled": observe, "interval": "50ms", "tcp": False}}
    if m is not None:
        doc["cluster"] = {"underlay_mtu": 1600, "aitb": m.aitb_argv(), "python": sys.executable,
                          "deploy": deploy, "known_hosts": str(m.known_hosts),
                          "machines": [
                              {"name": "m1", "ssh": "10.77.0.1", "key": str(m.key),
                               "site": "dc1"},
                              {"name": "m2", "ssh": ssh2, "underlay": "10.77.0.2",
                               "key": str(m.key), "site": "dc2"}]}
        if probe_timeout is not None:
            doc["cluster"] |= {"probe_interval": "1s", "probe_timeout": probe_timeout}
    path.write_text(json.dumps(doc, indent=1))
    return path


def _namespaces(rid: str) -> list[str]:
    return [n for n in os.listdir("/run/netns") if n.startswith(f"aitb-{rid}")] \
        if os.path.isdir("/run/netns") else []


@contextlib.contextmanager
def sshd_machines(tmp: Path, n: int = 2, mtu: int = 1600) -> Iterator[Machines]:
    """Machines m1..mn (module docstring); afterwards every sshd is ended by its pid and
    every namespace of the run id removed, and the run id's namespaces must be gone."""
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    if not SSHD.exists():
        pytest.skip("needs Debian's openssh-server (apt-get install openssh-server)")
    rid = secrets.token_hex(3)
    m = Machines(rid, tmp, {f"m{k}": f"10.77.0.{k}" for k in range(1, n + 1)})
    names = [m.under, *(f"aitb-{rid}-{name}" for name in m.addresses)]
    procs: list[subprocess.Popen] = []
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(m.key))
    shutil.copy(tmp / "id.pub", tmp / "authorized_keys")
    m.home.mkdir()
    try:
        for ns in names:
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", m.under, "link", "add", "br0", "mtu", str(mtu), "type", "bridge")
        sh("ip", "-n", m.under, "link", "set", "br0", "up")
        sh("ip", "-n", m.under, "addr", "add", "10.77.0.254/24", "dev", "br0")
        for name, addr in m.addresses.items():
            ns, a = f"aitb-{rid}-{name}", f"a{rid}{name}"
            sh("ip", "link", "add", a, "netns", m.under, "mtu", str(mtu), "type", "veth",
               "peer", "name", "eth0", "netns", ns, "mtu", str(mtu))
            sh("ip", "-n", m.under, "link", "set", a, "master", "br0", "up")
            sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            cfg = sshd_config(tmp, name, addr)
            with m.known_hosts.open("a") as f:  # "type base64 comment" after the address
                f.write(f"{addr} {(tmp / f'host_{name}.pub').read_text()}")
            procs.append(subprocess.Popen(["ip", "netns", "exec", ns, str(SSHD), "-D", "-e",
                                           "-f", str(cfg)], stderr=subprocess.PIPE))
        time.sleep(1.0)
        for p in procs:
            assert p.poll() is None, p.stderr.read().decode() if p.stderr else ""
        yield m
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=10)
        for ns in names + [x for x in _namespaces(rid) if x not in names]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    assert _namespaces(rid) == []
