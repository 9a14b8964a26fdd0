"""The run manifest records each host's congestion control as the kernel applies it: the
namespace default read from the live lab (not assumed), a per-host topology setting, and the
experiment's per-socket choice."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import root_links, run_namespaces

from models.rundir import new_run_id
from orchestration.run.runner import execute, prepare
from testbed.lab.layout import netns_name
from testbed.ns import netns, sysctl

pytestmark = pytest.mark.netns

EXPERIMENT = """name: cc-manifest
topology:
  inline:
    name: cc2
    profiles:
      l: {rate: 1Gbit, buffer: 1000p}
    nodes:
      s1: {kind: switch}
      h1: {kind: host}
      h2: {kind: host, tcp_congestion_control: reno}
    links:
      - {endpoints: [h1, s1], profile: l}
      - {endpoints: [h2, s1], profile: l}
workloads:
  - {kind: collective, op: all_reduce, algorithm: ring, size: 64KiB}
"""


def _run(tmp_path: Path, text: str, monkeypatch) -> tuple[dict, dict[str, str]]:
    """Run ``text``; returns the manifest and the sysctl of each host read by this test in the
    lab's own namespaces while the workload was starting."""
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    monkeypatch.setenv("AITB_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "exp.yaml").write_text(text)
    seen: dict[str, str] = {}
    lab_id: list[str] = []

    def progress(message: str) -> None:
        if message.startswith("workload 0") and lab_id:  # the lab is up
            for host in ("h1", "h2"):
                fd = netns.open_fd(netns_name(lab_id[0], host))
                try:
                    seen[host] = sysctl.read(fd, "net.ipv4.tcp_congestion_control")
                finally:
                    os.close(fd)

    prep = prepare(tmp_path / "exp.yaml")
    run_id = new_run_id()
    lab_id.append(run_id.rsplit("-", 1)[-1])
    before = root_links()
    outcome = execute(prep, tmp_path / "results", progress, run_id=run_id, analyze=False)
    assert outcome.ok, outcome.error
    assert run_namespaces(lab_id[0]) == [] and set(root_links()) <= set(before)
    return json.loads((outcome.run_dir / "manifest.json").read_text()), seen


def test_manifest_has_each_hosts_kernel_congestion_control(tmp_path, monkeypatch):
    manifest, seen = _run(tmp_path, EXPERIMENT, monkeypatch)
    assert set(seen) == {"h1", "h2"}
    assert seen["h2"] == "reno"  # the topology's per-host setting, applied by the lab
    assert manifest["congestion_control"] == seen  # h1: the kernel's default (bbr, cubic...)
    assert manifest["congestion_control_source"].startswith("net.ipv4.tcp_congestion_control")
    transport = _transport(tmp_path)  # what the agents' sockets got: the namespace default
    assert {h: {c["congestion_control"] for c in t["connections"]}
            for h, t in transport.items()} == {h: {a} for h, a in seen.items()}


def test_manifest_has_the_per_socket_choice_when_configured(tmp_path, monkeypatch):
    text = EXPERIMENT + "transport: {tcp_congestion_control: cubic}\n"
    manifest, seen = _run(tmp_path, text, monkeypatch)
    assert seen["h2"] == "reno"  # the namespace default stays; the sockets choose cubic
    assert manifest["congestion_control"] == {"h1": "cubic", "h2": "cubic"}
    assert manifest["congestion_control_source"].startswith("transport.")
    transport = _transport(tmp_path)
    assert {c["congestion_control"] for t in transport.values()
            for c in t["connections"]} == {"cubic"}


def _transport(tmp_path: Path) -> dict:
    """transport.json of the run's one workload: host -> sysctls and socket read-backs."""
    (run_dir,) = (tmp_path / "results" / "cc-manifest").iterdir()
    return json.loads(next(run_dir.glob("workloads/*/transport.json")).read_text())
