"""`aitb run` SIGKILLed while its controller listens on the short socket directory it makes in
the temporary directory (a run directory too deep for sun_path): `aitb clean` removes that
directory with the lab, marks the run killed and leaves no socket in it; scratch of a live
owner stays. The owners are processes started here and killed by their pid."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from models import owned
from testbed.lab.registry import Registry
from testbed.ns import netns

pytestmark = pytest.mark.netns
ROOT = Path(__file__).resolve().parents[2]
EXPERIMENT = ROOT / "examples" / "ring_allreduce_quick.yaml"
LIVE_OWNER = ("import sys, time\nfrom models.owned import make_owned_dir\n"
              "print(make_owned_dir('task'), flush=True)\ntime.sleep(600)\n")


def _lab_namespaces(lab_id: str) -> list[str]:
    return [n for n in os.listdir(netns.NETNS_DIR) if n.startswith(f"aitb-{lab_id}-")]


def test_a_killed_runs_socket_directory_goes_with_its_lab_and_a_live_owners_stays(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    experiment = tmp_path / "long.yaml"  # iterations enough to be killed inside the workload
    experiment.write_text(EXPERIMENT.read_text().replace("iterations: 3", "iterations: 400"))
    state, results = tmp_path / "state", tmp_path / ("r" * 60) / ("s" * 60)
    env = {**os.environ, "AITB_STATE_DIR": str(state), "PYTHONPATH": str(ROOT)}
    live = subprocess.Popen([sys.executable, "-c", LIVE_OWNER], stdout=subprocess.PIPE,
                            text=True, env=env, cwd=ROOT)
    run = subprocess.Popen([sys.executable, "-m", "orchestration.cli", "run", str(experiment),
                            "--results", str(results), "--no-analysis", "-q"], env=env,
                           cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    live_dir = sock_dir = None
    try:
        live_dir = Path(live.stdout.readline().strip())
        assert live_dir.is_dir()
        socks: list[Path] = []
        deadline = time.monotonic() + 300  # a bound only: the run has its socket in seconds
        while not socks and run.poll() is None and time.monotonic() < deadline:
            socks = [p for p in Path("/tmp").glob("aitb-*/ctl.sock")
                     if (owner_of := owned.owner_of(p.parent.name)) and owner_of[1] == run.pid]
            time.sleep(0.01)
        assert socks, f"no controller socket directory seen: {run.stderr.read()[-2000:]}"
        sock_dir = socks[0].parent
        run.send_signal(signal.SIGKILL)
        assert run.wait(timeout=60) == -signal.SIGKILL
        [run_dir] = results.glob("*/*")
        lab_id = run_dir.name.rsplit("-", 1)[-1]
        assert owned.owner_of(sock_dir.name)[0] == lab_id  # named by the run, owned by its pid
        assert sock_dir.is_dir() and _lab_namespaces(lab_id)  # what the SIGKILL left

        out = subprocess.run([sys.executable, "-m", "orchestration.cli", "clean", "--json"],
                             capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
        assert out.returncode == 0, out.stderr
        [removed] = [r for r in json.loads(out.stdout)["removed"] if r["run_id"] == lab_id]
        assert removed["scratch"] == [str(sock_dir)]
        assert not sock_dir.exists() and not _lab_namespaces(lab_id)
        assert not (state / lab_id).exists()
        assert json.loads((run_dir / "manifest.json").read_text())["status"] == "killed"
        assert not [p for p in run_dir.rglob("*") if p.is_socket()]
        assert live_dir.is_dir()  # its owner runs

        live.send_signal(signal.SIGKILL)
        live.wait()
        again = subprocess.run([sys.executable, "-m", "orchestration.cli", "clean", "--json"],
                               capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
        assert again.returncode == 0, again.stderr
        assert str(live_dir) in json.loads(again.stdout)["orphans"]["paths"]
        assert not live_dir.exists()
    finally:  # on a failed check too: nothing left behind
        for proc in (run, live):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        run.stderr.close()
        live.stdout.close()
        for lab in Registry.runs(state):
            subprocess.run([sys.executable, "-m", "orchestration.cli", "clean", lab],
                           capture_output=True, timeout=120, env=env, cwd=ROOT, check=False)
        for d in (sock_dir, live_dir):
            if d is not None:
                shutil.rmtree(d, ignore_errors=True)


PROBER = """
import os, time
from models import owned
from testbed.host import capabilities
from testbed.ns import netns
def body(ns):
    [name] = [n for n in os.listdir(netns.NETNS_DIR)
              if (o := owned.owner_of(n)) and o[1] == os.getpid()]
    print(name, flush=True)
    time.sleep(600)
capabilities._in_throwaway_netns(body)
"""


def test_a_killed_probes_namespace_goes_at_aitb_clean_and_a_live_ones_stays(tmp_path):
    """The capability probe's throwaway namespace (testbed.host.capabilities) names its owner: a
    prober SIGKILLed inside it leaves it to `aitb clean`, which keeps a live prober's."""
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    env = {**os.environ, "AITB_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(ROOT)}
    probers = [subprocess.Popen([sys.executable, "-c", PROBER], stdout=subprocess.PIPE,
                                text=True, env=env, cwd=ROOT) for _ in range(2)]
    names: list[str] = []
    try:
        names = [p.stdout.readline().strip() for p in probers]
        dead, live = names
        assert [owned.owner_of(n)[:2] for n in names] == [("probe", p.pid) for p in probers]
        probers[0].send_signal(signal.SIGKILL)
        probers[0].wait()
        assert netns.exists(dead)  # what the SIGKILL left
        out = subprocess.run([sys.executable, "-m", "orchestration.cli", "clean", "--json"],
                             capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
        assert out.returncode == 0, out.stderr
        assert dead in json.loads(out.stdout)["orphans"]["namespaces"]
        assert not netns.exists(dead) and netns.exists(live)
    finally:
        for p in probers:
            if p.poll() is None:
                p.kill()
                p.wait()
            p.stdout.close()
        for n in names:
            if n and netns.exists(n):
                netns.remove(n)


IMAGE_JOB = """
import os, time
from models.owned import owned_tempdir
from testbed.containers.dockerd import temporary_engine
with owned_tempdir("image") as tmp, temporary_engine(tmp / "dockerd.log") as cli:
    print(tmp, flush=True)
    time.sleep(600)
"""


def test_a_killed_image_jobs_engine_stops_and_its_folder_goes_at_aitb_clean(tmp_path):
    """`aitb image build`'s temporary engine (testbed.containers.dockerd.temporary_engine),
    its owner
    SIGKILLed: the kernel sends dockerd SIGTERM (it stops), and `aitb clean` removes the
    job's aitb-image-* folder. (dockerd used to run on, in no registry.)"""
    from testbed.containers.dockerd import DOCKERD_STOP_GRACE_S, client

    if os.geteuid() != 0 or shutil.which("dockerd") is None:
        pytest.skip("needs root and dockerd (Debian's docker.io)")
    if client() is not None:
        pytest.skip("a docker engine already runs: the job would use it, start none")
    env = {**os.environ, "AITB_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(ROOT)}
    job = subprocess.Popen([sys.executable, "-c", IMAGE_JOB], stdout=subprocess.PIPE,
                           text=True, env=env, cwd=ROOT)
    engine: list[tuple[int, int | None]] = []
    try:
        folder = Path(job.stdout.readline().strip())
        assert folder.is_dir(), folder
        engine = [(int(c), owned.pid_start_time(int(c))) for c in
                  Path(f"/proc/{job.pid}/task/{job.pid}/children").read_text().split()]
        assert len(engine) == 1 and b"dockerd" in Path(f"/proc/{engine[0][0]}/cmdline"
                                                       ).read_bytes()
        job.send_signal(signal.SIGKILL)
        job.wait()
        deadline = time.monotonic() + DOCKERD_STOP_GRACE_S + 30  # a bound only
        while owned.pid_alive(*engine[0]):
            assert time.monotonic() < deadline, "dockerd outlived its owner"
            time.sleep(0.1)
        out = subprocess.run([sys.executable, "-m", "orchestration.cli", "clean", "--json"],
                             capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
        assert out.returncode == 0, out.stderr
        assert str(folder) in json.loads(out.stdout)["orphans"]["paths"]
        assert not folder.exists()
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
        job.stdout.close()
        for pid, start in engine:  # by its pid: SIGTERM (it stops its containerd), then KILL
            if owned.pid_alive(pid, start):
                from testbed.ns.procs import end_process

                end_process(pid, start, None, grace_s=DOCKERD_STOP_GRACE_S)
