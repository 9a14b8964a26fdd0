"""Where a campaign's runs happen: ``local`` (one after the other in this process, the
default: orchestration.campaign.runner) or ``ray`` (each run a Ray task on any machine of a Ray
cluster whose workers have aitb set up and run as root).

Ray executor. The driver (``aitb campaign``) keeps the state file and the aggregate exactly as
the local executor does: it marks a run ``running`` when it hands it to Ray and ``ok``/``failed``
when the report comes back, so a crash of the driver leaves the state the local executor's crash
leaves (those runs are discarded and redone on resume; completed ones are not touched). Seeds come
from the campaign's runs, as locally. Each task runs the point in a child process
(``python -m orchestration.campaign.point``) that gets SIGTERM when the worker dies
(``setpriv --pdeathsig``): the runner then tears its lab down. A task whose worker or machine
died is redone with a fresh run id (``attempts`` in all).

Concurrency: a task asks Ray for ``cpus_per_point`` CPUs (default 1), so a machine started with
``ray start --num-cpus C`` runs at most C / cpus_per_point points at once. Labs of concurrent
points never collide (their namespaces and interfaces carry the run id), but they share the
CPUs: HTB dequeues, the native delay line and the agents all run on them, and the fidelity
check calls a run untrustworthy once the CPU saturates (orchestration/fidelity/run.py). One
point per core is the most that keeps that budget; give a point more CPUs for large labs.

Copy-back: orchestration.campaign.copyback (in place where the worker sees the results folder,
else a tarball's bytes through Ray's object store).

Authentication (Ray's token authentication, Ray >= 2.52: ``RAY_AUTH_MODE``, ``RAY_AUTH_TOKEN``,
``RAY_AUTH_TOKEN_PATH``; https://docs.ray.io/en/latest/ray-security/token-auth.html): aitb sets
the mode and the token of every Ray process it starts or connects, never leaving them to what
the user's home holds. Ray on its own falls back to ``~/.ray/auth_token``, which Ray >= 2.59
writes whenever ``ray.init()`` starts a local instance, and a ``ray start --head`` that finds
that file turns token authentication on, while a driver given an explicit address does not: one
local Ray campaign used to lock the user out of every cluster started afterwards on that
machine. The Ray instance aitb starts (no ``--address``) gets a fresh random token for its
head, workers and driver, in the environment only (nothing written). A driver that joins a
running cluster (``--address``) uses the token the user gives (RayAuth.for_cluster) or, with
none, runs with authentication disabled; a refused token is a one-line error.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from collections import deque
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.errors import LabError, SpecError, SpecIssue
from models.owned import make_owned_dir, owned_tempdir
from orchestration.campaign.copyback import mark_results, pack, sees_results, unpack
from orchestration.campaign.load import Campaign
from orchestration.campaign.point import RunReport, RunTask
from orchestration.campaign.runner import CampaignInterrupted
from orchestration.campaign.state import CampaignResult, CampaignState, Progress
from orchestration.campaign.sweep import Run

__all__ = ["AUTH_VARS", "EXECUTORS", "RayAuth", "RayExecutor", "WorkerReply", "connect",
           "run_on_worker", "slots"]

EXECUTORS = ("local", "ray")
AUTH_VARS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
TOKEN_MAX_BYTES = 4096
# what travels in a gRPC metadata header ("authorization: Bearer <token>"): printable ASCII,
# no blanks; Ray's own tokens are 64 hex digits (secrets.token_hex(32))
_TOKEN_RE = re.compile(r"[\x21-\x7e]+")


@dataclass(frozen=True)
class RayAuth:
    """Ray token authentication for one cluster: ``token`` None runs Ray with
    ``RAY_AUTH_MODE=disabled``; ``source`` says where the token came from (for messages)."""

    token: str | None
    source: str

    @classmethod
    def fresh(cls) -> RayAuth:
        """A random token (256 bits, as Ray's ``ray get-auth-token --generate`` makes) for a
        Ray instance aitb starts itself."""
        return cls(secrets.token_hex(32), "the token aitb made for its own Ray instance")

    @classmethod
    def for_cluster(cls, token_file: Path | None,
                    environ: Mapping[str, str] = os.environ) -> RayAuth:
        """The authentication of a driver joining a running cluster: the token in
        ``token_file`` (``--ray-token-file``), else ``RAY_AUTH_TOKEN``, else the file
        ``RAY_AUTH_TOKEN_PATH`` names (Ray's own variables, as the user set them); none of
        them: no token, authentication disabled. ``~/.ray/auth_token`` is never read. Raises
        SpecError (exit 2) for a file that cannot be read or holds no token; reads nothing
        else, creates nothing."""
        if token_file is not None:
            return cls(_read_token(token_file, "--ray-token-file"),
                       f"--ray-token-file {token_file}")
        if environ.get("RAY_AUTH_TOKEN"):
            return cls(_check_token(environ["RAY_AUTH_TOKEN"], "RAY_AUTH_TOKEN"),
                       "RAY_AUTH_TOKEN")
        if environ.get("RAY_AUTH_TOKEN_PATH"):
            path = Path(environ["RAY_AUTH_TOKEN_PATH"])
            return cls(_read_token(path, "RAY_AUTH_TOKEN_PATH"), f"RAY_AUTH_TOKEN_PATH={path}")
        return cls(None, "no token")

    def environ(self) -> dict[str, str]:
        """The RAY_AUTH_* variables of a Ray process (driver, head, worker) under this
        authentication; the others of AUTH_VARS must be unset. ``RAY_AUTH_TOKEN`` comes first
        in Ray's lookup, before ``RAY_AUTH_TOKEN_PATH`` and ``~/.ray/auth_token``."""
        if self.token is None:
            return {"RAY_AUTH_MODE": "disabled"}
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token}


def _read_token(path: Path, given_by: str) -> str:
    try:
        with path.open("rb") as f:
            raw = f.read(TOKEN_MAX_BYTES + 1)
    except OSError as exc:
        raise SpecError(SpecIssue(f"{given_by} {path}: cannot read the Ray token: "
                                  f"{exc.strerror or exc}")) from None
    if len(raw) > TOKEN_MAX_BYTES:
        raise SpecError(SpecIssue(f"{given_by} {path}: longer than {TOKEN_MAX_BYTES} bytes, "
                                  "not a Ray token"))
    return _check_token(raw.decode("ascii", errors="replace"), f"{given_by} {path}")


def _check_token(text: str, given_by: str) -> str:
    token = text.strip()
    if not _TOKEN_RE.fullmatch(token) or len(token) > TOKEN_MAX_BYTES:
        raise SpecError(SpecIssue(f"{given_by}: not a Ray token (expected one line of "
                                  "printable ASCII without blanks, such as 64 hex digits)"))
    return token


@dataclass(frozen=True)
class WorkerReply:
    """What a Ray task returns: the run's report and, when the worker did not see the
    results folder, the run directory as gzip'd tar bytes (copyback.pack)."""

    report: RunReport
    archive: bytes | None
    stderr_tail: str


def slots(cluster_cpus: float, cpus_per_point: float) -> int:
    """How many runs to keep in flight: the cluster's CPUs over the CPUs a point asks for
    (at least 1)."""
    return max(1, int(cluster_cpus // cpus_per_point))


def run_on_worker(task: RunTask, results_root: str, token: str) -> WorkerReply:
    """Do ``task`` on this machine (the body of the Ray task; needs root): in place when this
    machine sees ``results_root`` (copyback.sees_results), else in a scratch folder whose run
    directory comes back packed. The run happens in a child process that dies with this one."""
    shared = sees_results(Path(results_root), token)
    # named by this process (models.owned): a worker SIGKILLed mid-run leaves it to `aitb clean`
    scratch = None if shared else make_owned_dir("point")
    local = task if shared else dataclasses.replace(task, point_dir=str(scratch))
    try:
        report, tail = _child(local)
        archive = None if shared or scratch is None else pack(scratch, report.run_dir)
        return WorkerReply(report, archive, tail)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def _child(task: RunTask) -> tuple[RunReport, str]:
    """Run ``task`` in ``python -m orchestration.campaign.point`` (SIGTERM to it when this
    process dies or is interrupted). Raises LabError with its stderr when it wrote no report."""
    with owned_tempdir("task") as tmp:  # a killed worker's: `aitb clean` (models.owned)
        task_file, report_file = tmp / "task.json", tmp / "report.json"
        task_file.write_text(json.dumps(dataclasses.asdict(task)), encoding="utf-8")
        argv = ["setpriv", "--pdeathsig", "TERM", sys.executable, "-m",
                "orchestration.campaign.point", str(task_file), str(report_file)]
        # the point and its lab do not use Ray: the cluster's token stays out of their reach
        env = {k: v for k, v in os.environ.items() if k not in AUTH_VARS}
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True, env=env)
        try:
            _, err = proc.communicate()
        except BaseException:
            proc.terminate()
            proc.wait(timeout=120)
            raise
        tail = err[-4000:]
        if not report_file.exists():
            raise LabError(f"run {task.key}: the point process exited {proc.returncode} "
                           f"without a report: {tail}")
        return RunReport(**json.loads(report_file.read_text(encoding="utf-8"))), tail


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise LabError("--executor ray needs Ray: pip install -e '.[ray]' (make setup "
                       "installs it)") from None
    return ray


@contextmanager
def _ray_auth_environ(auth: RayAuth) -> Iterator[None]:
    """This process's RAY_AUTH_* set to ``auth`` for the block (the Ray processes it starts
    inherit them), then put back. Ray reads them into its configuration when ``ray`` is
    first imported; when it was imported before, Ray's configuration and token cache are
    reloaded the way Ray does it itself when it turns token authentication on."""
    saved = {k: os.environ.get(k) for k in AUTH_VARS}
    for k in AUTH_VARS:
        os.environ.pop(k, None)
    os.environ.update(auth.environ())
    _reload_ray_auth()
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        _reload_ray_auth()


def _reload_ray_auth() -> None:
    raylet = sys.modules.get("ray._raylet")
    if raylet is None:  # Ray not imported yet: it reads the environment when it is
        return
    config = getattr(raylet, "Config", None)
    loader = getattr(raylet, "AuthenticationTokenLoader", None)
    if config is not None:
        config.initialize("")
    if loader is not None:
        loader.instance().reset_cache()


@contextmanager
def _stderr_held() -> Iterator[None]:
    """File descriptor 2 into a temporary file for the block (Ray's C++ client logs a warning
    line per retry while a cluster refuses it); what was written goes to the real stderr when
    the block ends normally and is dropped when it raises (the caller reports the error)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        ok = False
        try:
            yield
            ok = True
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            if ok:
                held.seek(0)
                os.write(2, held.read())


def _refused(exc: BaseException) -> bool:
    """Whether ``exc`` or an exception it came from is Ray's refusal of the token (Ray wraps
    it: ConnectionError from RuntimeError whose text holds the AuthenticationError)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        text = str(cur)
        if (type(cur).__name__ == "AuthenticationError" or "InvalidAuthToken" in text
                or "Authentication token is missing or incorrect" in text):
            return True
        cur = cur.__cause__ or cur.__context__
    return False


def _last_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    return lines[-1] if lines else type(exc).__name__


def _check_listening(address: str, timeout_s: float = 10.0) -> None:
    """Raise LabError at once when nothing accepts a TCP connection at ``address``
    (``HOST:PORT``; other forms, such as ``auto``, are left to Ray), where ``ray.init`` would
    retry for minutes."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "://" in address:
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise LabError(f"could not connect to the Ray cluster at {address}: "
                       f"{exc.strerror or exc}") from None


def connect(ray: Any, address: str | None, auth: RayAuth) -> None:
    """``ray.init`` with this process's RAY_AUTH_* already set to ``auth``
    (_ray_auth_environ). Raises SpecError (exit 2) when the cluster at ``address`` refuses
    the token or wants one and none was given, LabError for any other failure to start or
    reach Ray (at once when nothing listens at ``address``); one line each, no traceback."""
    options = {"log_to_driver": False, "include_dashboard": False, "configure_logging": False}
    if address is None:  # processes started here inherit fd 2: not held
        try:
            ray.init(**options)
        except Exception as exc:
            raise LabError(f"could not start a Ray instance here: {_last_line(exc)}") from None
        return
    _check_listening(address)
    try:
        with _stderr_held():
            ray.init(address=address, **options)
    except Exception as exc:
        if not _refused(exc):
            raise LabError(f"could not connect to the Ray cluster at {address}: "
                           f"{_last_line(exc)}") from None
        if auth.token is None:
            raise SpecError(SpecIssue(
                f"the Ray cluster at {address} wants a token (Ray token authentication) and "
                "none was given: pass the token file its nodes were started with as "
                "--ray-token-file FILE (aitb does not read ~/.ray/auth_token; "
                "examples/campaigns/README.md)")) from None
        raise SpecError(SpecIssue(
            f"the Ray cluster at {address} refused the token from {auth.source}: give the "
            "token its nodes were started with (RAY_AUTH_TOKEN_PATH or RAY_AUTH_TOKEN of "
            "their `ray start`; examples/campaigns/README.md)")) from None


class RayExecutor:
    """Runs a campaign's runs as Ray tasks (module docstring). ``address``: a running
    cluster's ``HOST:PORT`` (None: a Ray instance started in this process with this machine's
    CPUs); ``cpus_per_point``: Ray CPUs one run asks for; ``attempts``: tries per run when a
    worker dies; ``auth``: the cluster's authentication (None: RayAuth.for_cluster(None) for
    an address, else a fresh token for the instance started here)."""

    def __init__(self, address: str | None = None, cpus_per_point: float = 1.0,
                 attempts: int = 2, auth: RayAuth | None = None) -> None:
        self.address = address
        self.cpus_per_point = cpus_per_point
        self.attempts = attempts
        self.auth = auth

    def run(self, c: Campaign, todo: list[Run], state: CampaignState,
            result: CampaignResult, progress: Progress) -> None:
        """Do ``todo`` on the cluster, keeping ``slots`` runs in flight. Raises SpecError
        or LabError when Ray cannot be started or reached (connect)."""
        if not todo:
            return
        auth = self.auth or (RayAuth.for_cluster(None) if self.address is not None
                             else RayAuth.fresh())
        with _ray_auth_environ(auth):
            ray = _ray()
            connect(ray, self.address, auth)
            try:
                self._drive(ray, c, todo, state, result, progress)
            finally:
                ray.shutdown()

    def _drive(self, ray: Any, c: Campaign, todo: list[Run], state: CampaignState,
               result: CampaignResult, progress: Progress) -> None:
        token = mark_results(state.root)
        task_fn = ray.remote(num_cpus=self.cpus_per_point, max_retries=0)(run_on_worker)
        width = slots(ray.cluster_resources().get("CPU", 1), self.cpus_per_point)
        progress(f"ray: {width} runs at once ({self.cpus_per_point:g} CPU each)")
        queue = deque((run, 1) for run in todo)
        flying: dict[Any, tuple[Run, int, RunTask]] = {}
        try:
            while queue or flying:
                while queue and len(flying) < width:
                    run, attempt = queue.popleft()
                    task = self._task(c, run, state)
                    progress(f"run {run.key} ({run.point.label() or 'base'}, seed {run.seed})")
                    ref = task_fn.remote(task, str(state.root), token)
                    flying[ref] = (run, attempt, task)
                ready, _ = ray.wait(list(flying), num_returns=1)
                run, attempt, task = flying.pop(ready[0])
                self._collect(ray, ready[0], run, attempt, task, state, result, queue,
                              progress)
        except KeyboardInterrupt:
            for ref in flying:
                ray.cancel(ref)
            raise CampaignInterrupted("interrupted; run the same command again to "
                                      "resume") from None


    def _task(self, c: Campaign, run: Run, state: CampaignState) -> RunTask:
        """A fresh run id for ``run``, marked running in the state file."""
        point_dir, run_id = state.begin(run, c.prepared[run.point.id].spec.name)
        return RunTask(str(Path(c.src.source).resolve()), run.key, run.point.id, run.seed,
                       run_id, str(point_dir.resolve()))

    def _collect(self, ray: Any, ref: Any, run: Run, attempt: int, task: RunTask,
                 state: CampaignState, result: CampaignResult, queue: deque,
                 progress: Progress) -> None:
        try:
            reply: WorkerReply = ray.get(ref)
        except ray.exceptions.RayTaskError as exc:  # our code raised on the worker
            state.end(result, run.key, False, str(exc.cause or exc)[-2000:], progress)
            return
        except ray.exceptions.RayError as exc:  # the worker or its machine died
            if attempt < self.attempts:
                state.forget(run.key)
                progress(f"run {run.key}: worker lost ({type(exc).__name__}); redoing it")
                queue.appendleft((run, attempt + 1))
                return
            state.end(result, run.key, False, f"worker lost: {exc}", progress)
            return
        if reply.archive is not None:
            unpack(reply.archive, Path(task.point_dir), reply.report.run_dir)
        if reply.report.interrupted:
            raise CampaignInterrupted(f"run {run.key} was interrupted on its worker; run the "
                                      "same command again to resume (that run is redone)")
        state.end(result, run.key, reply.report.ok, reply.report.error, progress)

