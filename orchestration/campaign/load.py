"""Loading a campaign: the campaign file, its base experiment, the points, and every point's
experiment validated and built (runner.prepare_spec) before anything runs. Pure: creates
nothing, needs no root."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.errors import SpecError, SpecIssue
from models.plan import LabPlan
from models.specfile import Ref, line_of, load_yaml, resolve_ref
from orchestration.campaign.spec import CampaignSpec, campaign_issue, load_campaign
from orchestration.campaign.sweep import (
    PathError,
    Point,
    Run,
    expand,
    plain,
    point_document,
    runs,
)
from orchestration.run.experiment import parse_experiment
from orchestration.run.runner import Prepared, prepare_spec

__all__ = ["Sources", "Campaign", "load", "prepare_point"]


@dataclass(frozen=True)
class Sources:
    """Where a campaign comes from: its spec, file name and document (for lines), and the
    base experiment's mapping, the name errors give it, and the folder its relative paths
    start from."""

    spec: CampaignSpec
    source: str
    doc: Any
    base_doc: Any
    base_source: str
    base_dir: Path


@dataclass(frozen=True)
class Campaign:
    """A loaded, fully validated campaign: its sources, points, runs and each point's
    prepared experiment (for its first run's seed); nothing created yet."""

    src: Sources
    points: list[Point]
    runs: list[Run]
    prepared: dict[str, Prepared]

    @property
    def spec(self) -> CampaignSpec:
        """The campaign spec."""
        return self.src.spec

    def plans(self) -> list[LabPlan]:
        """The lab plan of every point."""
        return [p.plan for p in self.prepared.values()]


def _base(spec: CampaignSpec, doc: Any, source: str) -> tuple[Any, str, Path]:
    """The base experiment mapping, the name errors give it, and its folder."""
    here = Path(source).parent
    if spec.base.file is not None:
        ref = Ref(source, ("base", "file"), line_of(doc, ("base", "file")))
        path = resolve_ref(spec.base.file, here, ref)
        base_doc, dups = load_yaml(
            path, "an experiment: a mapping with name, topology and workloads", ref=ref)
        if dups:
            raise SpecError(dups)
        return base_doc, str(path), path.parent
    return doc["base"]["inline"], f"{source}: base.inline", here


def _sweep_key_path(spec: CampaignSpec, key: str) -> tuple[str, str]:
    return ("grid", key) if key in spec.grid else ("zip", key)


def _point_issues(c: Sources, point: Point, exc: SpecError) -> list[SpecIssue]:
    """Issues of a point's experiment; an issue at (or under) a swept key is re-pointed at
    that key in the campaign file, any other one keeps its place in the base experiment."""
    out = []
    for i in exc.issues:
        dotted = ".".join(str(p) for p in i.key_path)
        swept = next((k for k in point.values if dotted == k or dotted.startswith(k + ".")),
                     None)
        if swept is not None:
            out.append(campaign_issue(c.source, c.doc, _sweep_key_path(c.spec, swept),
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


def prepare_point(c: Sources, point: Point, seed: int | None = None) -> Prepared:
    """The prepared experiment of ``point`` (with ``seed`` if given). Raises
    :class:`SpecError` naming the campaign file for a swept key that does not fit or a bad
    swept value, the base experiment for anything else."""
    try:
        doc = point_document(c.base_doc, point)
    except PathError as exc:
        raise SpecError(campaign_issue(c.source, c.doc,
                                       _sweep_key_path(c.spec, exc.key or ""),
                                       f"{exc} (swept key {exc.key!r})")) from None
    if seed is not None:
        doc.seed = seed
    try:
        spec = parse_experiment(doc, c.base_source)
        return prepare_spec(spec, doc, c.base_source, c.base_dir)
    except SpecError as exc:
        raise SpecError(_point_issues(c, point, exc)) from None


def _check_paths(c: Sources) -> None:
    """Every swept key must fit the base experiment (with the key's first value): all
    misfits at once, each at its key in the campaign file."""
    issues = []
    spec = c.spec
    for key, values in [*spec.grid.items(), *spec.zip.items()]:
        try:
            point_document(c.base_doc, Point("check", 0, {key: plain(values[0])}))
        except PathError as exc:
            issues.append(campaign_issue(c.source, c.doc, _sweep_key_path(spec, key),
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
    ctx = Sources(spec, doc=doc, source=source, base_doc=base_doc, base_source=base_source,
                  base_dir=base_dir)
    _check_paths(ctx)
    points = expand(spec)
    prepared: dict[str, Prepared] = {}
    issues: list[tuple[SpecIssue, str]] = []
    for p in points:
        try:
            prepared[p.id] = prepare_point(ctx, p)
        except SpecError as exc:
            issues += [(i, p.id) for i in exc.issues]
    if issues:
        raise SpecError(_merge(issues))
    seeds = {pid: prep.spec.seed for pid, prep in prepared.items()}
    return Campaign(ctx, points, runs(spec, points, seeds), prepared)
