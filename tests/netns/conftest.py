"""Fixtures for tests that create real namespaces (root, host kernel).

Each test gets its own run id and state directory; afterwards the fixture asserts that no
namespace, process or root-namespace interface of that run id remains.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from pyroute2 import IPRoute

from testbed.lab.lab import Lab
from testbed.lab.registry import pid_alive
from testbed.ns import netns

sys.path.insert(0, str(Path(__file__).parent))
from star import Star  # noqa: E402  (traffic generator's own tiny bridge lab)

ROOT = Path(__file__).resolve().parents[2]


def root_links() -> dict[str, str | None]:
    """Interfaces of the root namespace: name -> alias."""
    with IPRoute() as ipr:
        return {m.get_attr("IFLA_IFNAME"): m.get_attr("IFLA_IFALIAS") for m in ipr.get_links()}


def run_namespaces(run_id: str) -> list[str]:
    """Namespaces of ``run_id`` that are mounted."""
    try:
        return [n for n in os.listdir(netns.NETNS_DIR) if n.startswith(f"aitb-{run_id}-")]
    except FileNotFoundError:
        return []


class Labs:
    """Makes Labs for one test, each with a fresh run id; remembers them for the checks."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.made: list[Lab] = []
        self.run_ids: list[str] = []

    def new_id(self) -> str:
        rid = secrets.token_hex(3)
        self.run_ids.append(rid)
        return rid

    def __call__(self, plan, run_id: str | None = None, **kw) -> Lab:
        lab = Lab(plan, run_id or self.new_id(), self.state_dir, **kw)
        self.run_ids.append(lab.run_id)
        self.made.append(lab)
        return lab


@pytest.fixture
def own_sigint():
    """For a test that sends SIGINT to its own process (pytest's) for aitb's handler to catch:
    while it runs, a SIGINT that finds no aitb handler (sent before aitb installed its own, or
    handled after aitb restored this one) fails the test by name. Without this it would be
    pytest's KeyboardInterrupt, which ends the whole session (exit 2, every later test unrun,
    and no line saying which test sent it)."""
    strays: list[int] = []

    def stray(signum, frame):
        strays.append(signum)
        raise AssertionError("a SIGINT this test sent reached no aitb signal handler")

    previous = signal.signal(signal.SIGINT, stray)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    assert not strays, "a SIGINT this test sent reached no aitb signal handler"


@pytest.fixture
def labs(tmp_path: Path):
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    before = root_links()
    maker = Labs(tmp_path / "state")
    yield maker
    for lab in maker.made:
        if lab.io:  # a test that left a lab up: tear it down, then fail below
            lab.down()
    leftovers = {rid: run_namespaces(rid) for rid in maker.run_ids if run_namespaces(rid)}
    alive = [(pid, st) for lab in maker.made for pid, st in lab.started if pid_alive(pid, st)]
    after = root_links()
    marked = {n for n, alias in after.items() if alias and alias.split(":")[-1] in maker.run_ids}
    added = set(after) - set(before)
    planned = {ep.ifname for lab in maker.made for lk in lab.plan.links for ep in (lk.a, lk.b)}
    assert not leftovers, f"namespaces left behind: {leftovers}"
    assert not alive, f"processes left behind: {alive}"
    assert not marked and not (added & planned), f"root namespace gained {marked | added}"


@pytest.fixture
def star_factory():
    """Tiny run-id-named bridge labs of the traffic generator tests (tests/netns/star.py)."""
    made = []

    def make(n):
        if os.geteuid() != 0:
            pytest.skip("needs root")
        s = Star(n)
        made.append(s)
        return s.up()

    yield make
    for s in made:
        s.down()
        assert s.leftovers() == [], f"left behind: {s.leftovers()}"


@pytest.fixture
def state_env(tmp_path: Path) -> dict[str, str]:
    """The environment of an ``aitb`` subprocess with its own state directory (registry,
    labs) under ``tmp_path``; skips where not root."""
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    return {**os.environ, "AITB_STATE_DIR": str(tmp_path / "state")}


def aitb_cli(*args: str, env: dict[str, str] | None,
             timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``python -m orchestration.cli ARGS`` from the checkout, output captured."""
    return subprocess.run([sys.executable, "-m", "orchestration.cli", *args],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


def run_ok(experiment: Path, results: Path, env: dict[str, str], *extra: str,
           timeout: float = 600) -> Path:
    """``aitb run EXPERIMENT --results RESULTS EXTRA``; asserts exit 0, manifest status ok
    and the run's lab gone; returns the run directory (the last line of stdout)."""
    out = aitb_cli("run", str(experiment), "--results", str(results), *extra, env=env,
                   timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    run_dir = Path(out.stdout.strip().splitlines()[-1])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "ok", manifest
    assert run_namespaces(manifest["lab_run_id"]) == []  # the lab is gone
    return run_dir


def run_example(experiment: Path, results: Path, env: dict[str, str]) -> Path:
    """:func:`run_ok` of an example file unchanged, plus what tests/netns/test_run_examples.py
    asks of every example: no error in the manifest, flows that all completed (FCT > 0), no
    failed transfer. A test that runs an example this way stands for it there (its file is
    in test_run_examples.EXAMPLES_RUN_ELSEWHERE). Returns the run directory."""
    run_dir = run_ok(experiment, results, env)
    check_example_run(run_dir)
    return run_dir


def check_example_run(run_dir: Path) -> None:
    """The checks of every example run (see :func:`run_example`)."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "ok" and manifest["error"] is None, manifest
    assert run_namespaces(manifest["lab_run_id"]) == []  # the lab is gone
    flows = records(run_dir, "flows.jsonl")
    assert flows and all(f["fct_s"] > 0 for f in flows)
    assert records(run_dir, "failures.jsonl") == []


def records(run_dir: Path, name: str) -> list[dict]:
    """The JSON lines of ``run_dir/name``."""
    return [json.loads(line) for line in (run_dir / name).read_text().splitlines() if line]
