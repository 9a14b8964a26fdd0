"""SSH host-key trust of cluster machines (orchestration.cluster.control): OpenSSH's SHA256
fingerprint, checked against ``ssh-keygen -l`` itself; the missing-key policy (refused with
the fingerprint and the way to accept it, or trusted on first use and appended to the file
paramiko's HostKeys then reads back); which files are trusted; the cluster keys."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import paramiko
import pytest

from models.errors import SpecError
from orchestration.cluster.control import (
    HostKeyRefused,
    HostTrust,
    fingerprint_sha256,
    host_name,
    host_trust,
    missing_key_policy,
)
from orchestration.cluster.spec import Machine, parse_cluster

needs_keygen = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen")


def _keygen(tmp: Path, kind: str) -> Path:
    path = tmp / f"k_{kind}"
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-f", str(path)], check=True)
    return path


@needs_keygen
@pytest.mark.parametrize("kind", ["ed25519", "ecdsa", "rsa"])
def test_fingerprint_is_openssh_s(tmp_path, kind):
    path = _keygen(tmp_path, kind)
    # "256 SHA256:<base64 without padding> comment (ED25519)"
    want = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", f"{path}.pub"],
                          check=True, capture_output=True, text=True).stdout.split()[1]
    got = fingerprint_sha256(paramiko.PKey.from_path(path))
    assert got == want
    assert got.startswith("SHA256:") and not got.endswith("=") and len(got) == 7 + 43


def test_host_name_is_bracketed_off_port_22():
    assert host_name(Machine(name="m1", ssh="10.0.0.1")) == "10.0.0.1"
    assert host_name(Machine(name="m1", ssh="10.0.0.1", port=2222)) == "[10.0.0.1]:2222"


def test_trusted_files_default_to_the_user_s_and_the_system_s(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    t = HostTrust()
    assert t.files() == [tmp_path / ".ssh/known_hosts", Path("/etc/ssh/ssh_known_hosts")]
    assert t.add_to == tmp_path / ".ssh/known_hosts"
    c = HostTrust(known_hosts=str(tmp_path / "kh"))
    assert c.files()[-1] == tmp_path / "kh" and c.add_to == tmp_path / "kh"


def _key() -> paramiko.PKey:
    return paramiko.ECDSAKey.generate()


def test_an_unknown_key_is_refused_with_its_fingerprint_and_the_way_to_accept_it(tmp_path,
                                                                                 monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    m = Machine(name="m1", ssh="10.0.0.1")
    key, record = _key(), {}
    policy = missing_key_policy(m, HostTrust(source="c.yaml"), record)
    assert isinstance(policy, paramiko.MissingHostKeyPolicy)
    with pytest.raises(HostKeyRefused) as got:
        policy.missing_host_key(None, "10.0.0.1", key)
    msg = str(got.value)
    assert got.value.exit_code == 2 and "\n" not in msg
    assert f"{key.get_name()} {fingerprint_sha256(key)}" in msg
    assert "aitb cluster trust m1 --cluster c.yaml" in msg and "trust_on_first_use" in msg
    assert record == {} and not (tmp_path / ".ssh").exists()  # nothing written


def test_trust_on_first_use_appends_the_key_paramiko_then_reads(tmp_path):
    kh = tmp_path / "sub" / "known_hosts"
    m = Machine(name="m1", ssh="10.0.0.1", port=2222)
    key, record = _key(), {}
    missing_key_policy(m, HostTrust(str(kh), trust_on_first_use=True), record).missing_host_key(
        None, host_name(m), key)
    assert record == {"trusted_by": "trust_on_first_use", "file": str(kh)}
    assert kh.stat().st_mode & 0o777 == 0o600
    assert paramiko.HostKeys(str(kh)).lookup("[10.0.0.1]:2222")[key.get_name()] == key
    other = _key()  # a second machine: appended, the first kept
    missing_key_policy(m, HostTrust(str(kh), trust_on_first_use=True), {}).missing_host_key(
        None, "10.0.0.2", other)
    keys = paramiko.HostKeys(str(kh))
    assert keys.lookup("10.0.0.2")[other.get_name()] == other
    assert keys.lookup("[10.0.0.1]:2222")[key.get_name()] == key


def test_the_cluster_keys(tmp_path):
    c = parse_cluster({"machines": [{"name": "m1", "ssh": "10.0.0.1"}],
                       "known_hosts": "~/kh", "trust_on_first_use": True}, "c.yaml")
    t = host_trust(c, "c.yaml")
    assert t.trust_on_first_use and t.known_hosts == "~/kh" and t.source == "c.yaml"
    assert not host_trust(parse_cluster({"machines": [{"name": "m1", "ssh": "10.0.0.1"}]},
                                        "c")).trust_on_first_use  # refused unless said
    for bad in ("yes", 1, "true"):  # only an explicit boolean true
        with pytest.raises(SpecError) as got:
            parse_cluster({"machines": [{"name": "m1", "ssh": "10.0.0.1"}],
                           "trust_on_first_use": bad}, "c.yaml")
        assert "cluster.trust_on_first_use" in str(got.value)
