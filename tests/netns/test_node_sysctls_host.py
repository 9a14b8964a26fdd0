"""Node sysctls against the host kernel: a net.* key a fresh network namespace lacks or keeps
read-only (a global key: setting it would change the whole machine), or a congestion control
it refuses, is refused before any lab namespace exists, by the Lab and by `aitb topo deploy`;
an allowed key is set in its node's namespace only, the root namespace's value unchanged."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, run_namespaces
from plans import two_hosts_router

from models.errors import LabError
from testbed.ns import netns, sysctl

pytestmark = pytest.mark.netns

ABSENT = "net.core.netdev_max_backlog"  # global: only the initial namespace has it (6.18)
READ_ONLY = "net.core.rmem_max"  # global: a namespace sees it read-only (6.18)
ALLOWED = "net.ipv4.tcp_rmem"  # per namespace


def _in_fresh_netns(path: str) -> tuple[bool, bool]:
    """(exists, writable) of /proc/sys ``path`` in a fresh namespace, through unshare(1)."""
    out = subprocess.run(["unshare", "-n", "sh", "-c",
                          f"test -e {path} && echo e; test -w {path} && echo w; true"],
                         capture_output=True, text=True, check=True, timeout=30).stdout.split()
    return "e" in out, "w" in out


def _with_sysctls(sysctls: dict[str, str], cc: str | None = None):
    plan = two_hosts_router()
    nodes = tuple(dataclasses.replace(n, sysctls=sysctls, tcp_congestion_control=cc)
                  if n.name == "h1" else n for n in plan.nodes)
    return dataclasses.replace(plan, nodes=nodes, source="lab.yaml")


@pytest.fixture
def no_namespace_made(monkeypatch):
    """Fails the test if a lab namespace is created (records each create_many)."""
    made: list[list[str]] = []
    real = netns.create_many

    def spy(names, out):
        made.append(list(names))
        return real(names, out)

    monkeypatch.setattr(netns, "create_many", spy)
    return made


def _refused(key: str, value: str) -> tuple[str, str]:
    path = sysctl.sysctl_path(key)
    exists, writable = _in_fresh_netns(path)
    if not os.path.exists(path):
        pytest.skip(f"{key} does not exist on this kernel at all")
    if key == ABSENT and exists:
        pytest.skip(f"{key} is present in a namespace on this kernel")
    if key == READ_ONLY and (not exists or writable):
        pytest.skip(f"{key} is not read-only in a namespace on this kernel")
    return key, value


@pytest.mark.parametrize("key,needle", [
    (ABSENT, "not present in a network namespace on this kernel"),
    (READ_ONLY, "read-only inside a network namespace"),
])
def test_a_global_net_key_is_refused_before_any_namespace(labs, no_namespace_made, key,
                                                            needle):
    key, value = _refused(key, "4096")
    before = Path(sysctl.sysctl_path(key)).read_text()
    lab = labs(_with_sysctls({key: value}))
    with pytest.raises(LabError) as exc:
        lab.up()
    msg = str(exc.value)
    assert f"lab.yaml: node h1: sysctl {key}=4096: {needle}" in msg, msg
    assert "whole machine" in msg and exc.value.exit_code == 2
    assert no_namespace_made == [] and run_namespaces(lab.run_id) == []
    assert not lab.registry.dir.exists()
    assert Path(sysctl.sysctl_path(key)).read_text() == before


def test_a_congestion_control_the_namespace_refuses_is_refused_first(labs, no_namespace_made):
    lab = labs(_with_sysctls({}, cc="nosuchcc"))
    with pytest.raises(LabError, match=r"node h1: tcp_congestion_control nosuchcc "
                                       r"\(net.ipv4.tcp_congestion_control\): congestion "
                                       r"control 'nosuchcc' is not available in this kernel "
                                       r".*available: ") as exc:
        lab.up()
    have = Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
    assert all(name in str(exc.value) for name in have)
    assert no_namespace_made == []


def test_a_congestion_control_the_host_does_not_allow_is_refused_first(labs,
                                                                       no_namespace_made):
    def names(key):
        return Path(sysctl.sysctl_path(key)).read_text().split()
    allowed = names("net.ipv4.tcp_allowed_congestion_control")
    barred = [cc for cc in names("net.ipv4.tcp_available_congestion_control")
              if cc not in allowed]
    if not barred:
        pytest.skip("every available congestion control is allowed in a namespace here")
    lab = labs(_with_sysctls({"net.ipv4.tcp_congestion_control": barred[0]}))
    with pytest.raises(LabError, match=rf"node h1: sysctl net.ipv4.tcp_congestion_control="
                                       rf"{barred[0]}: a namespace's default congestion "
                                       rf"control may only be one the host allows") as exc:
        lab.up()
    assert ", ".join(allowed) in str(exc.value)
    assert no_namespace_made == []


def test_an_allowed_key_is_set_in_its_node_only(labs):
    root_before = Path(sysctl.sysctl_path(ALLOWED)).read_text().split()
    want = "4096 65536 1048576"
    assert want.split() != root_before
    with labs(_with_sysctls({ALLOWED: want})) as lab:
        assert sysctl.read(lab.node_io("h1").fd, ALLOWED).split() == want.split()
        assert sysctl.read(lab.node_io("h2").fd, ALLOWED).split() != want.split()
        assert Path(sysctl.sysctl_path(ALLOWED)).read_text().split() == root_before
    assert Path(sysctl.sysctl_path(ALLOWED)).read_text().split() == root_before


def test_deploy_refuses_a_global_key_naming_file_node_and_key(labs, tmp_path):
    key, _ = _refused(ABSENT, "1")
    path = tmp_path / "lab.yaml"
    path.write_text("name: t\nnodes:\n  h1: {kind: host, sysctls: {" + key + ": 1000}}\n"
                    "  h2: {kind: host}\nlinks:\n  - endpoints: [h1, h2]\n")
    rid = labs.new_id()
    env = {**os.environ, "AITB_STATE_DIR": str(labs.state_dir)}
    out = subprocess.run([sys.executable, "-m", "orchestration.cli", "topo", "deploy",
                          str(path), "--run-id", rid], env=env, capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert out.returncode == 2, out.stderr
    assert f"{path}: node h1: sysctl {key}=1000" in out.stderr and "whole machine" in out.stderr
    assert "Traceback" not in out.stderr
    assert run_namespaces(rid) == [] and not (labs.state_dir / rid).exists()
