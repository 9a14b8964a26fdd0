"""Campaign executors without root or Ray: the copy-back archive, how many runs fly at once,
and the Ray executor's bookkeeping against a stand-in for Ray (a lost worker's run is redone
with a fresh run id, a remote run directory comes back as a tarball, an error on the worker
fails that run only), the CLI's --executor checks, and where the Ray token comes from (the
option, then Ray's own variables, never ~/.ray/auth_token) and how a refusal is told apart."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import tarfile
import types
from contextlib import contextmanager
from pathlib import Path

import pytest

from models.errors import LabError, SpecError
from orchestration.campaign import executors
from orchestration.campaign.copyback import mark_results, pack, sees_results, unpack
from orchestration.campaign.point import RunReport
from orchestration.campaign.runner import CampaignResult, load
from orchestration.campaign.state import CampaignState

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def socket_listening():
    """A listening TCP socket on loopback; yields its ``HOST:PORT`` (closed after)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield f"127.0.0.1:{s.getsockname()[1]}"
CAMPAIGN = """\
name: c
base:
  inline:
    name: b
    seed: 5
    topology: {generator: single_switch, params: {hosts: 3}}
    workloads: [{kind: incast, receiver: h1, size: 16KiB}]
grid: {workloads.0.size: [16KiB, 32KiB, 64KiB]}
repetitions: 1
"""


def test_pack_unpack_round_trip(tmp_path):
    src = tmp_path / "worker" / "b" / "rep0-abcdef"
    (src / "counters").mkdir(parents=True)
    (src / "manifest.json").write_text('{"status": "ok"}')
    (src / "counters" / "q.parquet").write_bytes(b"\x00\x01" * 1000)
    data = pack(tmp_path / "worker", "b/rep0-abcdef")
    got = unpack(data, tmp_path / "driver" / "p000", "b/rep0-abcdef")
    assert got == tmp_path / "driver" / "p000" / "b" / "rep0-abcdef"
    assert (got / "manifest.json").read_text() == '{"status": "ok"}'
    assert (got / "counters" / "q.parquet").read_bytes() == b"\x00\x01" * 1000


def _tar(*members: tarfile.TarInfo) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for m in members:
            tar.addfile(m, io.BytesIO(b"x" * m.size) if m.isfile() else None)
    return buf.getvalue()


@pytest.mark.parametrize("name", ["../evil", "b/rep0/../../evil", "/etc/evil", "other/x"])
def test_unpack_refuses_members_outside_the_run_directory(tmp_path, name):
    m = tarfile.TarInfo(name)
    m.size = 1
    with pytest.raises(ValueError, match="outside"):
        unpack(_tar(m), tmp_path / "p000", "b/rep0")
    assert not (tmp_path / "p000").exists() and not (tmp_path / "evil").exists()


def test_unpack_refuses_links(tmp_path):
    m = tarfile.TarInfo("b/rep0/link")
    m.type, m.linkname = tarfile.SYMTYPE, "/etc/passwd"
    with pytest.raises(ValueError, match="not a file or directory"):
        unpack(_tar(m), tmp_path, "b/rep0")


def test_sees_results_only_with_the_drivers_token(tmp_path):
    token = mark_results(tmp_path)
    assert sees_results(tmp_path, token)
    assert not sees_results(tmp_path, "0" * 32)
    assert not sees_results(tmp_path / "elsewhere", token)


@pytest.mark.parametrize(("cpus", "per", "n"), [(2, 1, 2), (16, 1, 16), (16, 4, 4),
                                                 (3, 2, 1), (1, 4, 1)])
def test_slots_are_the_clusters_cpus_over_a_points(cpus, per, n):
    assert executors.slots(cpus, per) == n


class FakeRay:
    """Runs each 'task' when its result is asked for, with ``behave(task, attempt)``."""

    class exceptions:  # noqa: N801 (the shape of ray.exceptions)
        class RayError(Exception):
            pass

        class RayTaskError(RayError):
            def __init__(self, cause):
                super().__init__(str(cause))
                self.cause = cause

        class WorkerCrashedError(RayError):
            pass

    def __init__(self, behave, cpus=2):
        self.behave, self.cpus = behave, cpus
        self.tasks, self.max_flying, self.flying = [], 0, 0

    def remote(self, **_kw):
        def wrap(_fn):
            return types.SimpleNamespace(remote=self._submit)
        return wrap

    def _submit(self, task, results_root, token):
        self.tasks.append(task)
        self.flying += 1
        self.max_flying = max(self.max_flying, self.flying)
        return (task, results_root, token)

    def cluster_resources(self):
        return {"CPU": float(self.cpus)}

    def wait(self, refs, num_returns):
        return refs[:num_returns], refs[num_returns:]

    def get(self, ref):
        self.flying -= 1
        task = ref[0]
        attempt = sum(t.key == task.key for t in self.tasks)
        return self.behave(task, attempt, ref)


def _drive(tmp_path, ray):
    spec = tmp_path / "c.yaml"
    spec.write_text(CAMPAIGN)
    c = load(spec)
    root = tmp_path / "results" / "c"
    state = CampaignState.open(root, "c", str(spec), "fp")
    result = CampaignResult(root)
    executors.RayExecutor()._drive(ray, c, list(c.runs), state, result, lambda _m: None)
    return state, result


def _remote_ok(task, _attempt, _ref):
    """A worker that does not see the results: it packs a run directory."""
    rel = f"b/{task.run_id}"
    scratch = Path(task.point_dir).parent / "scratch" / task.run_id
    (scratch / rel).mkdir(parents=True)
    (scratch / rel / "manifest.json").write_text(f'{{"seed": {task.seed}}}')
    archive = pack(scratch, rel)
    return executors.WorkerReply(RunReport(task.key, True, None, False, rel, "far"),
                                 archive, "")


def test_remote_run_directories_come_back_and_state_is_as_local(tmp_path):
    ray = FakeRay(_remote_ok)
    state, result = _drive(tmp_path, ray)
    assert result.ran == ["p000/rep0", "p001/rep0", "p002/rep0"] and not result.failed
    assert ray.max_flying == 2  # 2 CPUs, 1 per point
    for key, entry in state.data["runs"].items():
        assert entry["status"] == "ok" and entry["seed"] == 5
        run_dir = state.root / entry["run_dir"]
        assert run_dir.parent.parent.name == key.split("/")[0]
        assert (run_dir / "manifest.json").read_text() == '{"seed": 5}'


def test_a_lost_worker_is_redone_with_a_fresh_run_id(tmp_path):
    def behave(task, attempt, ref):
        if task.key == "p001/rep0" and attempt == 1:
            raise FakeRay.exceptions.WorkerCrashedError("worker died")
        return _remote_ok(task, attempt, ref)

    ray = FakeRay(behave)
    state, result = _drive(tmp_path, ray)
    ids = [t.run_id for t in ray.tasks if t.key == "p001/rep0"]
    assert len(ids) == 2 and ids[0] != ids[1]
    assert state.status("p001/rep0") == "ok"
    assert state.data["runs"]["p001/rep0"]["run_dir"].endswith(ids[1])
    assert sorted(result.ran) == ["p000/rep0", "p001/rep0", "p002/rep0"]


def test_a_worker_lost_every_time_fails_that_run_only(tmp_path):
    def behave(task, attempt, ref):
        if task.key == "p002/rep0":
            raise FakeRay.exceptions.WorkerCrashedError("worker died")
        return _remote_ok(task, attempt, ref)

    state, result = _drive(tmp_path, FakeRay(behave))
    assert state.status("p002/rep0") == "failed" and "worker lost" in result.failed["p002/rep0"]
    assert state.status("p000/rep0") == state.status("p001/rep0") == "ok"


def test_an_error_on_the_worker_fails_the_run_without_a_retry(tmp_path):
    def behave(task, attempt, ref):
        if task.key == "p000/rep0":
            raise FakeRay.exceptions.RayTaskError(LookupError("no point p000"))
        return _remote_ok(task, attempt, ref)

    ray = FakeRay(behave)
    state, result = _drive(tmp_path, ray)
    assert [t.key for t in ray.tasks].count("p000/rep0") == 1
    assert result.failed == {"p000/rep0": "no point p000"}


@pytest.mark.parametrize(("extra", "said"), [
    (["--executor", "slurm"], "expected one of local, ray"),
    (["--address", "h:1"], "--address needs --executor ray"),
    (["--executor", "ray", "--cpus-per-point", "0"], "must be > 0"),
    (["--ray-token-file", "t"], "--ray-token-file needs --executor ray"),
    (["--executor", "ray", "--ray-token-file", "t"], "--ray-token-file needs --address"),
    (["--executor", "ray", "--address", "h:1", "--ray-token-file", "/nonexistent/t"],
     "--ray-token-file /nonexistent/t: cannot read the Ray token: No such file"),
])
def test_cli_refuses_bad_executor_options(tmp_path, extra, said):
    spec = tmp_path / "c.yaml"
    spec.write_text(CAMPAIGN)
    out = subprocess.run([sys.executable, "-m", "orchestration.cli", "campaign", str(spec),
                          "--dry-run", *extra], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 2, out.stderr
    assert said in out.stderr


def test_token_from_option_then_ray_variables_never_home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text("f" * 64)
    monkeypatch.setenv("HOME", str(home))
    given, by_path = tmp_path / "given", tmp_path / "by-path"
    given.write_text("a" * 64 + "\n")
    by_path.write_text("  " + "b" * 64 + "\n\n")
    env = {"RAY_AUTH_TOKEN": "c" * 64, "RAY_AUTH_TOKEN_PATH": str(by_path)}
    for_cluster = executors.RayAuth.for_cluster
    assert for_cluster(given, env).token == "a" * 64
    assert for_cluster(None, env).token == "c" * 64  # Ray's order: the value, then the path
    assert for_cluster(None, {"RAY_AUTH_TOKEN_PATH": str(by_path)}).token == "b" * 64
    none = for_cluster(None, {})  # ~/.ray/auth_token is there and not read
    assert none.token is None
    assert none.environ() == {"RAY_AUTH_MODE": "disabled"}
    assert for_cluster(given, {}).environ() == {"RAY_AUTH_MODE": "token",
                                                "RAY_AUTH_TOKEN": "a" * 64}
    fresh = executors.RayAuth.fresh()
    assert len(fresh.token) == 64 and fresh.token != executors.RayAuth.fresh().token


@pytest.mark.parametrize(("content", "said"), [
    (b"", "not a Ray token"),
    (b"two words\n", "not a Ray token"),
    (b"tok\x00en", "not a Ray token"),
    ("t\u00f6ken".encode(), "not a Ray token"),
    (b"a" * 5000, "longer than 4096 bytes"),
])
def test_token_file_refused(tmp_path, content, said):
    bad = tmp_path / "t"
    bad.write_bytes(content)
    with pytest.raises(SpecError) as err:
        executors.RayAuth.for_cluster(bad, {})
    assert err.value.exit_code == 2
    assert str(err.value).startswith(f"--ray-token-file {bad}: {said}")
    with pytest.raises(SpecError, match="RAY_AUTH_TOKEN: not a Ray token"):
        executors.RayAuth.for_cluster(None, {"RAY_AUTH_TOKEN": "a b"})


def test_auth_environ_set_for_the_block_then_put_back(monkeypatch):
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", "/somewhere")
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    with executors._ray_auth_environ(executors.RayAuth("d" * 64, "test")):
        assert {k: os.environ.get(k) for k in executors.AUTH_VARS} == {
            "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "d" * 64, "RAY_AUTH_TOKEN_PATH": None}
    assert {k: os.environ.get(k) for k in executors.AUTH_VARS} == {
        "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": None, "RAY_AUTH_TOKEN_PATH": "/somewhere"}


class AuthenticationError(Exception):
    """Named as ray.exceptions.AuthenticationError (told apart by its name: Ray may lack it)."""


def _chain(inner: BaseException) -> ConnectionError:
    """Ray's shape: ConnectionError raised from RuntimeError raised from ``inner``."""
    try:
        try:
            raise inner
        except BaseException as exc:
            raise RuntimeError("Failed to connect to GCS. Last connection error: ...") from exc
    except RuntimeError as exc:
        try:
            raise ConnectionError("Failed to connect to Ray cluster at 192.0.2.2:1") from exc
        except ConnectionError as outer:
            return outer


def test_refusal_told_from_other_failures():
    text_only = RuntimeError("ray.exceptions.AuthenticationError: RPC error: InvalidAuthToken: "
                             "Authentication token is missing or incorrect.")
    assert executors._refused(_chain(text_only))
    assert executors._refused(_chain(AuthenticationError("x")))
    assert not executors._refused(_chain(TimeoutError("timed out")))
    assert executors._last_line(_chain(TimeoutError())) == (
        "Failed to connect to Ray cluster at 192.0.2.2:1")


def test_connect_refused_is_one_line_spec_error(tmp_path):
    class RefusingRay:
        @staticmethod
        def init(**_kw):
            raise _chain(RuntimeError("InvalidAuthToken: Authentication token is missing"))

    with socket_listening() as address:
        with pytest.raises(SpecError, match="wants a token .* and none was given"):
            executors.connect(RefusingRay, address, executors.RayAuth(None, "no token"))
        with pytest.raises(SpecError, match="refused the token from --ray-token-file f"):
            executors.connect(RefusingRay, address,
                              executors.RayAuth("e" * 64, "--ray-token-file f"))
    with pytest.raises(LabError, match="could not connect to the Ray cluster at .*: "):
        executors.connect(RefusingRay, address, executors.RayAuth(None, "no token"))
