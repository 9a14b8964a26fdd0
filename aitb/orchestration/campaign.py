"""``aitb campaign``: many runs of one experiment over a parameter sweep, resumable.

campaign file -> points (grid x zip) -> every point validated and built (prepare_spec, nothing
created) -> runs (points x repetitions, repetition-major) -> each run a normal run directory
``results/<campaign>/<point-id>/<experiment>/rep<k>-<hex6>/`` (runner.execute) -> campaign
state after every run (campaign_state) -> ``aggregate.parquet``/``aggregate.csv`` and plots.
"""

from __future__ import annotations

import fcntl
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aitb.models.errors import AitbError, LabError, SpecError, SpecIssue
from aitb.models.plan import LabPlan
from aitb.orchestration.campaign_aggregate import run_summary, write_tables
from aitb.orchestration.campaign_plots import write_plots
from aitb.orchestration.campaign_spec import CampaignSpec, campaign_issue, load_campaign
from aitb.orchestration.campaign_state import CampaignState, fingerprint
from aitb.orchestration.campaign_sweep import (
    PathError,
    Point,
    Run,
    expand,
    plain,
    point_document,
    runs,
)
from aitb.orchestration.experiment import parse_experiment
from aitb.orchestration.runner import Prepared, RunOutcome, execute, prepare_spec
from topologies.loader import read_yaml

__all__ = ["Campaign", "CampaignInterrupted", "CampaignResult", "load", "run_campaign"]

Progress = Callable[[str], None]


class CampaignInterrupted(AitbError):
    """SIGINT/SIGTERM during a campaign: the current run was discarded-to-be; exit 130."""

    exit_code = 130


@dataclass(frozen=True)
class Campaign:
    """A loaded, fully validated campaign: spec, points, runs, each point's prepared
    experiment (for its first run's seed); nothing created yet."""

    spec: CampaignSpec
    source: str
    doc: Any
    base_doc: Any
    base_source: str
    base_dir: Path
    points: list[Point]
    runs: list[Run]
    prepared: dict[str, Prepared]

    def plans(self) -> list[LabPlan]:
        """The lab plan of every point."""
        return [p.plan for p in self.prepared.values()]


@dataclass
class CampaignResult:
    """What a campaign did: runs done before (skipped) and now, failures, discarded run
    directories, files written."""

    root: Path
    skipped: list[str] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    discarded: list[Path] = field(default_factory=list)
    tables: list[Path] = field(default_factory=list)
    plots: list[Path] = field(default_factory=list)


def _base(spec: CampaignSpec, doc: Any, source: str) -> tuple[Any, str, Path]:
    """The base experiment mapping, the name errors give it, and its folder."""
    here = Path(source).parent
    if spec.base.file is not None:
        path = Path(spec.base.file) if Path(spec.base.file).is_absolute() \
            else here / spec.base.file
        base_doc, dups = read_yaml(path)
        if dups:
            raise SpecError(dups)
        return base_doc, str(path), path.parent
    return doc["base"]["inline"], f"{source}: base.inline", here


def _sweep_key_path(spec: CampaignSpec, key: str) -> tuple[str, str]:
    return ("grid", key) if key in spec.grid else ("zip", key)


def _point_issues(c: dict[str, Any], point: Point, exc: SpecError) -> list[SpecIssue]:
    """Issues of a point's experiment; an issue at (or under) a swept key is re-pointed at
    that key in the campaign file, any other one keeps its place in the base experiment."""
    out = []
    for i in exc.issues:
        dotted = ".".join(str(p) for p in i.key_path)
        swept = next((k for k in point.values if dotted == k or dotted.startswith(k + ".")),
                     None)
        if swept is not None:
            out.append(campaign_issue(c["source"], c["doc"], _sweep_key_path(c["spec"], swept),
                                      f"{i.message} (at {dotted}, value "
                                      f"{point.values[swept]!r})"))
        else:
            out.append(i)
    return out


def _merge(found: list[tuple[SpecIssue, str]]) -> list[SpecIssue]:
    """One issue per distinct problem, naming the points that have it."""
    points: dict[str, list[str]] = {}
    first: dict[str, SpecIssue] = {}
    for issue, pid in found:
        points.setdefault(str(issue), []).append(pid)
        first.setdefault(str(issue), issue)
    return [SpecIssue(f"{i.message} [point{'s' if len(points[k]) > 1 else ''} "
                      f"{', '.join(points[k])}]", file=i.file, key_path=i.key_path,
                      line=i.line) for k, i in first.items()]


def _prepare_point(c: dict[str, Any], point: Point, seed: int | None = None) -> Prepared:
    try:
        doc = point_document(c["base_doc"], point)
    except PathError as exc:
        raise SpecError(campaign_issue(c["source"], c["doc"],
                                       _sweep_key_path(c["spec"], exc.key or ""),
                                       f"{exc} (swept key {exc.key!r})")) from None
    if seed is not None:
        doc["seed"] = seed
    try:
        spec = parse_experiment(doc, c["base_source"])
        return prepare_spec(spec, doc, c["base_source"], c["base_dir"])
    except SpecError as exc:
        raise SpecError(_point_issues(c, point, exc)) from None


def _check_paths(c: dict[str, Any]) -> None:
    """Every swept key must fit the base experiment (with the key's first value): all
    misfits at once, each at its key in the campaign file."""
    issues = []
    spec = c["spec"]
    for key, values in [*spec.grid.items(), *spec.zip.items()]:
        try:
            point_document(c["base_doc"], Point("check", 0, {key: plain(values[0])}))
        except PathError as exc:
            issues.append(campaign_issue(c["source"], c["doc"], _sweep_key_path(spec, key),
                                         str(exc)))
    if issues:
        raise SpecError(issues)


def load(path: Path) -> Campaign:
    """Read the campaign file ``path``, expand its points and validate and build every one
    (runner.prepare_spec) before anything runs. Raises :class:`SpecError` with every
    problem of every point, naming the campaign or base file, key path and line."""
    spec, doc = load_campaign(path)
    source = str(path)
    base_doc, base_source, base_dir = _base(spec, doc, source)
    ctx = {"spec": spec, "doc": doc, "source": source, "base_doc": base_doc,
           "base_source": base_source, "base_dir": base_dir}
    _check_paths(ctx)
    points = expand(spec)
    prepared: dict[str, Prepared] = {}
    issues: list[tuple[SpecIssue, str]] = []
    for p in points:
        try:
            prepared[p.id] = _prepare_point(ctx, p)
        except SpecError as exc:
            issues += [(i, p.id) for i in exc.issues]
    if issues:
        raise SpecError(_merge(issues))
    seeds = {pid: prep.spec.seed for pid, prep in prepared.items()}
    return Campaign(spec, source, doc, base_doc, base_source, base_dir, points,
                    runs(spec, points, seeds), prepared)


def _context(c: Campaign) -> dict[str, Any]:
    return {"spec": c.spec, "doc": c.doc, "source": c.source, "base_doc": c.base_doc,
            "base_source": c.base_source, "base_dir": c.base_dir}


def _fingerprint(c: Campaign) -> str:
    return fingerprint({p.id: p.values for p in c.points}, plain(c.base_doc), c.spec.seeds)


def _interrupted(outcome: RunOutcome) -> bool:
    """Whether the run ended because of SIGINT/SIGTERM (testbed.signals.LabInterrupted,
    which runner.execute records in error.json)."""
    err = outcome.run_dir / "error.json"
    return err.exists() and '"LabInterrupted"' in err.read_text(encoding="utf-8")


def _one_run(c: Campaign, run: Run, state: CampaignState, result: CampaignResult,
             progress: Progress) -> None:
    prep = _prepare_point(_context(c), run.point, seed=run.seed)
    run_id = f"rep{run.rep}-{secrets.token_hex(3)}"
    point_dir = state.root / run.point.id
    state.start(run.key, point_dir / prep.spec.name / run_id, run.seed)
    progress(f"run {run.key} ({run.point.label() or 'base'}, seed {run.seed})")
    outcome = execute(prep, point_dir, progress, run_id=run_id)
    if _interrupted(outcome):
        raise CampaignInterrupted(f"interrupted during run {run.key}; run the same command "
                                  "again to resume (that run is redone)")
    _analyze(outcome.run_dir)
    state.finish(run.key, outcome.ok, outcome.error)
    if outcome.ok:
        result.ran.append(run.key)
    else:
        result.failed[run.key] = outcome.error or "failed"
        progress(f"run {run.key} failed: {outcome.error}")


def _analyze(run_dir: Path) -> None:
    """Write metrics.json with analysis.analyze_run (contracts.md section 4) when this build
    has it and the runner has not already done so."""
    import analysis

    analyze = getattr(analysis, "analyze_run", None)
    if analyze is not None and not (run_dir / "metrics.json").exists():
        analyze(run_dir)


def run_campaign(c: Campaign, results: Path, progress: Progress = lambda _m: None
                 ) -> CampaignResult:
    """Run every run of ``c`` not yet completed under ``results/<campaign>/`` (needs root),
    then write the aggregate tables and plots. Completed runs (state ``ok``) are skipped and
    not touched; runs left running or failed by an earlier invocation are discarded and
    redone. Raises :class:`CampaignInterrupted` on SIGINT/SIGTERM (state stays consistent),
    :class:`SpecError` if ``results/<campaign>`` holds a different campaign."""
    root = results / c.spec.name
    root.mkdir(parents=True, exist_ok=True)
    with _exclusive(root):
        state = CampaignState.open(root, c.spec.name, c.source, _fingerprint(c))
        result = CampaignResult(root, discarded=state.discard_unfinished())
        for path in result.discarded:
            progress(f"discarded unfinished run {path}")
        try:
            for run in c.runs:
                if state.status(run.key) == "ok":
                    result.skipped.append(run.key)
                    continue
                _one_run(c, run, state, result, progress)
        except KeyboardInterrupt:
            raise CampaignInterrupted("interrupted; run the same command again to "
                                      "resume") from None
        finish(c, state, result)
    return result


@contextmanager
def _exclusive(root: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``root/.lock`` (flock; released when the process ends, even
    if killed), so that two invocations never work on one campaign folder at once. Raises
    :class:`LabError` if another holds it."""
    with (root / ".lock").open("a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LabError(f"another aitb campaign is working on {root}; wait for it or "
                           "stop it first") from None
        yield


def finish(c: Campaign, state: CampaignState, result: CampaignResult) -> None:
    """Aggregate the completed runs into tables and plots under the campaign folder."""
    rows = []
    for run in c.runs:
        if state.status(run.key) != "ok":
            continue
        run_dir = state.root / state.data["runs"][run.key]["run_dir"]
        summary, origin = run_summary(run_dir)
        rows.append({"point": run.point.id, **run.point.values, "rep": run.rep,
                     "seed": run.seed, "run_dir": str(run_dir), "source": origin,
                     "summary": summary})
    if not rows:
        return
    table = write_tables(state.root, rows, c.spec.swept())
    result.tables = [state.root / n for n in ("aggregate.parquet", "aggregate.csv", "runs.csv")]
    result.plots = write_plots(state.root, c.spec, table)
