"""Campaign files: a base experiment swept over any of its keys, with repetitions.

A campaign file (YAML)::

    name: dci-delay                    # [a-z0-9-], names the results folder
    base: {file: ../two_dc_dci.yaml}   # or {inline: {...an experiment mapping...}}
    grid:                              # cartesian product, the last key varies fastest
      topology.inline.profiles.dci.delay: [1ms, 5ms, 10ms]
      workloads.0.algorithm: [ring, hierarchical]
    zip:                               # lists of equal length, taken side by side
      workloads.0.size: [1MiB, 4MiB]
      workloads.0.iterations: [4, 1]
    repetitions: 3
    seeds: repetition                  # fixed | repetition | run (see :class:`CampaignSpec`)
    plots:
      - {metric: cct_s_mean, x: topology.inline.profiles.dci.delay,
         lines: workloads.0.algorithm}

A swept key is a dotted path into the experiment mapping; a part made of digits indexes a list
(``workloads.0.size``). Keys that themselves contain a dot cannot be addressed. Points are the
grid's product times the zip's rows (both given: every grid combination with every zip row).
Relative paths are relative to the campaign file. Errors name the file, key path and line.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, ValidationError, model_validator

from models.errors import SpecError, SpecIssue, short_repr
from models.records import SUMMARY_KEYS
from models.specfile import MAX_POINTS, MAX_RUNS, issues_from_validation, with_lines
from models.unit_fields import SpecModel, error_at
from orchestration.run.experiment import NAME_PATTERN
from topologies.loader import read_yaml

__all__ = ["CampaignSpec", "BaseRef", "PlotSpec", "SUMMARY_KEYS", "load_campaign",
           "parse_campaign"]

_Forbid = ConfigDict(extra="forbid")
Values = Annotated[list[Any], Field(min_length=1)]


class BaseRef(SpecModel):
    """The experiment every point starts from: a ``file`` or an ``inline`` mapping."""

    model_config = _Forbid
    file: str | None = None
    inline: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> BaseRef:
        if (self.file is None) == (self.inline is None):
            raise ValueError("give exactly one of file, inline")
        return self


class PlotSpec(SpecModel):
    """A comparison plot: summary ``metric`` (mean and 95% CI) against swept key ``x``, one
    line per value of swept key ``lines`` (optional)."""

    model_config = _Forbid
    metric: Literal[SUMMARY_KEYS]  # type: ignore[valid-type]
    x: str
    lines: str | None = None


class CampaignSpec(SpecModel):
    """One campaign (see the module docstring).

    ``seeds``: ``fixed`` every run uses the point's experiment seed; ``repetition`` (default)
    repetition k uses seed + k at every point (common random numbers across points, so that
    points differ by their parameters, not their draws); ``run`` every run its own seed
    (seed + k x points + point index).
    """

    model_config = _Forbid
    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    description: str = ""
    base: BaseRef
    grid: dict[str, Values] = Field(default_factory=dict)
    zip: dict[str, Values] = Field(default_factory=dict)
    repetitions: int = Field(1, ge=1, le=MAX_RUNS, strict=True)
    seeds: Literal["fixed", "repetition", "run"] = "repetition"
    plots: list[PlotSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> CampaignSpec:
        both = sorted(set(self.grid) & set(self.zip))
        if both:
            raise ValueError(f"swept in both grid and zip: {', '.join(both)}")
        lengths = {k: len(v) for k, v in self.zip.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError("zip lists must have equal lengths; got "
                             + ", ".join(f"{k}: {n}" for k, n in lengths.items()))
        points = math.prod(len(v) for v in self.grid.values()) * max(lengths.values(),
                                                                           default=1)
        if points > MAX_POINTS:
            raise ValueError(f"the sweep has {points} points; at most {MAX_POINTS}")
        if points * self.repetitions > MAX_RUNS:
            raise error_at(("repetitions",), f"{points} points x {self.repetitions} "
                           f"repetitions = {points * self.repetitions} runs; at most {MAX_RUNS}")
        swept = [*self.grid, *self.zip]
        for i, p in enumerate(self.plots):
            for name, key in (("x", p.x), ("lines", p.lines)):
                if key is not None and key not in swept:
                    raise error_at(("plots", i, name), f"{short_repr(key)} is not a swept "
                                   f"key; swept: {', '.join(swept) or 'none'}")
        return self

    def swept(self) -> list[str]:
        """The swept keys: grid keys, then zip keys, in file order."""
        return [*self.grid, *self.zip]


def parse_campaign(data: Mapping[str, Any], source: str) -> CampaignSpec:
    """Validate a campaign mapping; raises :class:`SpecError` naming ``source``, key path and
    (for ruamel documents) line of every problem."""
    try:
        return CampaignSpec.model_validate(data)
    except ValidationError as exc:
        issues = issues_from_validation(exc, CampaignSpec, source)
        raise with_lines(SpecError(issues), data, source) from None


def load_campaign(path: str | Path) -> tuple[CampaignSpec, Any]:
    """Read and validate the campaign file ``path``; returns the spec and the ruamel document
    (for line numbers). Raises :class:`SpecError` naming the file."""
    doc, dups = read_yaml(path, "a campaign: a mapping with name, base and grid or zip")
    if dups:
        raise SpecError(dups)
    return parse_campaign(doc, str(path)), doc


def campaign_issue(source: str, doc: Any, key_path: tuple[str | int, ...],
                   message: str) -> SpecIssue:
    """One issue at ``key_path`` of the campaign ``doc``, with its line."""
    return with_lines(SpecError(SpecIssue(message, file=source, key_path=key_path)), doc,
                      source).issues[0]
