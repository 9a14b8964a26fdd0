"""SSH host-key trust of ``aitb run`` over two sshd "machines" (tests/netns/sshd_machines.py),
as OpenSSH checks keys: with HOME in a temp dir (no ~/.ssh/known_hosts), an unknown key
refuses the machine (exit 2, its type and SHA256 fingerprint as ``ssh-keygen -l`` prints it,
the way to accept it, nothing started there); a key other than the one on file is refused
too, and ``aitb cluster trust`` does not replace it; ``aitb cluster trust`` adds the keys
to ~/.ssh/known_hosts, after which the run succeeds with the keys it used in the manifest;
``trust_on_first_use: true`` adds them to the cluster's known_hosts file and records that."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from sshd_machines import Machines, sshd_machines, two_dc_experiment
from test_cluster_run import aitb_run, leftovers

pytestmark = pytest.mark.netns


@pytest.fixture(scope="module")
def machines(tmp_path_factory):
    with sshd_machines(tmp_path_factory.mktemp("machines")) as m:
        yield m


def fingerprint(pub: Path) -> tuple[str, str]:
    """(key type as in the .pub file, OpenSSH's SHA256 fingerprint) of a public key."""
    out = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", str(pub)], check=True,
                         capture_output=True, text=True).stdout.split()
    return pub.read_text().split()[0], out[1]


def experiment(m: Machines, path: Path, **cluster) -> Path:
    """The small 2-DC experiment over m1 and m2 with these cluster keys instead of the
    machines' known_hosts file (known_hosts=None: the user's and the system's only)."""
    two_dc_experiment(m, path, size="256KiB")
    doc = json.loads(path.read_text())
    doc["cluster"].pop("known_hosts")
    doc["cluster"] |= {k: v for k, v in cluster.items() if v is not None}
    path.write_text(json.dumps(doc, indent=1))
    return path


def aitb(m: Machines, *argv: str, home: Path) -> subprocess.CompletedProcess[str]:
    return m.in_under([sys.executable, "-m", "orchestration.cli", *argv], timeout_s=120,
                      HOME=str(home))


def refused_before_anything(m: Machines, out: subprocess.CompletedProcess[str],
                            results: Path) -> str:
    assert out.returncode == 2, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    assert not (m.tmp / "state").exists()  # no machine ran aitb (its state dir)
    assert not results.exists() or list(results.rglob("*")) == []
    assert leftovers(m) == {"registries": [], "namespaces": [], "processes": []}
    return out.stderr


def test_an_unknown_host_key_is_refused_with_its_fingerprint(machines, tmp_path):
    m, results = machines, tmp_path / "results"
    exp = experiment(m, tmp_path / "exp.yaml")
    out, _ = aitb_run(m, exp, results, timeout_s=120)
    err = refused_before_anything(m, out, results)
    kind, fp = fingerprint(m.tmp / "host_m1.pub")
    assert f"{kind} {fp}" in err and "unknown" in err and "machine m1" in err
    assert f"aitb cluster trust m1 --cluster {exp}" in err and "trust_on_first_use" in err
    assert "cluster.machines[0]" in err
    assert not (m.home / ".ssh").exists()  # refusing writes nothing


def test_a_changed_host_key_is_refused_and_not_replaced(machines, tmp_path):
    m, results = machines, tmp_path / "results"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                    str(tmp_path / "other")], check=True)
    kh = tmp_path / "known_hosts"  # m1's address with another key; m2's right one
    lines = m.known_hosts.read_text().splitlines()
    kh.write_text(f"10.77.0.1 {(tmp_path / 'other.pub').read_text()}" + lines[1] + "\n")
    before = kh.read_text()
    exp = experiment(m, tmp_path / "exp.yaml", known_hosts=str(kh))
    out, _ = aitb_run(m, exp, results, timeout_s=120)
    err = refused_before_anything(m, out, results)
    _, new = fingerprint(m.tmp / "host_m1.pub")
    _, old = fingerprint(tmp_path / "other.pub")
    assert "CHANGED" in err and new in err and old in err and "machine m1" in err
    # trust_on_first_use does not cover a changed key, nor does aitb cluster trust
    exp_tofu = experiment(m, tmp_path / "tofu.yaml", known_hosts=str(kh),
                          trust_on_first_use=True)
    out, _ = aitb_run(m, exp_tofu, results, timeout_s=120)
    assert "CHANGED" in refused_before_anything(m, out, results)
    out = aitb(m, "cluster", "trust", "m1", "--cluster", str(exp), home=m.home)
    assert out.returncode == 2 and "CHANGED" in out.stderr, out.stderr[-2000:]
    assert kh.read_text() == before


def test_aitb_cluster_trust_then_the_run_uses_the_keys(machines, tmp_path):
    m, results = machines, tmp_path / "results"
    home = tmp_path / "home"
    home.mkdir()
    exp = experiment(m, tmp_path / "exp.yaml")
    out = aitb(m, "cluster", "trust", "m1", "m2", "--cluster", str(exp), home=home)
    assert out.returncode == 0, out.stderr[-2000:]
    fps = {n: fingerprint(m.tmp / f"host_{n}.pub") for n in ("m1", "m2")}
    said = out.stdout.strip().splitlines()
    assert len(said) == 2
    for line, (n, (kind, fp)) in zip(said, fps.items(), strict=True):
        assert line.startswith(f"machine {n}: ") and f"{kind} {fp} added to " \
            f"{home / '.ssh/known_hosts'}" in line
    again = aitb(m, "cluster", "trust", "m1", "--cluster", str(exp), home=home)
    assert again.returncode == 0 and "already in" in again.stdout
    assert len((home / ".ssh/known_hosts").read_text().splitlines()) == 2  # not twice
    out, got = aitb_run(m, exp, results, home=home)
    assert out.returncode == 0 and got.get("ok"), out.stderr[-3000:]
    manifest = json.loads((Path(got["run_dir"]) / "manifest.json").read_text())
    for n, (kind, fp) in fps.items():
        assert manifest["cluster"]["machines"][n]["host_key"] == {
            "type": kind, "fingerprint": fp, "trusted_by": "known_hosts",
            "file": str(home / ".ssh/known_hosts")}
    assert leftovers(m) == {"registries": [], "namespaces": [], "processes": []}


def test_trust_on_first_use_adds_the_keys_and_records_it(machines, tmp_path):
    m, results = machines, tmp_path / "results"
    kh = tmp_path / "cluster_known_hosts"
    exp = experiment(m, tmp_path / "exp.yaml", known_hosts=str(kh), trust_on_first_use=True)
    out, got = aitb_run(m, exp, results)
    assert out.returncode == 0 and got.get("ok"), out.stderr[-3000:]
    manifest = json.loads((Path(got["run_dir"]) / "manifest.json").read_text())
    for n in ("m1", "m2"):
        kind, fp = fingerprint(m.tmp / f"host_{n}.pub")
        assert manifest["cluster"]["machines"][n]["host_key"] == {
            "type": kind, "fingerprint": fp, "trusted_by": "trust_on_first_use",
            "file": str(kh)}
        assert f"{m.addresses[n]} {kind} " in kh.read_text()
    assert not (m.home / ".ssh").exists()  # the cluster's file, not the user's
    assert leftovers(m) == {"registries": [], "namespaces": [], "processes": []}


STALE = r"""
import json, os, sys
from orchestration.cluster.control import Control, HostTrust
from orchestration.cluster.spec import Machine
key, rid, tmp = sys.argv[1:4]
with Control(Machine(name="m1", ssh="10.77.0.1", key=key),
             HostTrust(tmp + "/known_hosts")) as c:
    print(json.dumps({"host_key": c.host_key, "out": c.check(["echo", "ran"]),
                      "home": os.environ["HOME"]}))
"""


def test_a_stale_line_in_one_file_does_not_hide_the_key_in_another(machines, tmp_path):
    """OpenSSH accepts a key found in any of its files: ~/.ssh/known_hosts (read first) with
    a stale key for m1 and the cluster's file with the right one is the right one."""
    m = machines
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                    str(tmp_path / "stale")], check=True)
    (m.home / ".ssh").mkdir()
    user = m.home / ".ssh/known_hosts"
    user.write_text(f"10.77.0.1 {(tmp_path / 'stale.pub').read_text()}")
    try:
        got = m.drive(STALE)
    finally:
        user.unlink()
        (m.home / ".ssh").rmdir()
    kind, fp = fingerprint(m.tmp / "host_m1.pub")
    assert got["home"] == str(m.home) and got["out"] == "ran\n"
    assert got["host_key"] == {"type": kind, "fingerprint": fp, "trusted_by": "known_hosts",
                               "file": str(m.known_hosts)}
