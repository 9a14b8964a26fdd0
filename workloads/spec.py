"""The small YAML workload spec, shared with experiment files (pydantic, extra keys refused).

Kinds (``kind: fedavg`` and ``kind: hierarchical`` take workloads.federated.FedAvg's keys plus
``name``, ``kind: gossip`` workloads.gossip.Gossip's; all FL kinds validate deadline_s > 0,
bits_per_parameter 4..32, fraction in (0, 1] and name the key when not)::

    kind: training            # a Megatron/DeepSpeed iteration from model parameters
    name: gpt13b
    model: {num_layers: 40, hidden_size: 5120, num_attention_heads: 32, seq_length: 2048}
    parallelism: {tp: 8, world_size: 128, zero_stage: 1}
    recompute: full           # optional: none (default) | selective | full (Megatron's
    recompute_method: uniform # --recompute-granularity/-method/-num-layers; method and
    recompute_num_layers: 1   # layers only with full, default uniform and 1)
    accelerator: {flops_per_s: 312e12, efficiency: 0.5}   # optional
    iterations: 1                                         # optional

    kind: aicb                # an AICB file; a relative path is relative to the spec file
    file: G13B-M1-C01_GPT13B_megatron_tp8_pp1_mbs1.csv
    options: {scale: 1000, dp_replicas: 2}                # workloads.aicb.AicbOptions

Experiment files embed the same mapping and call :func:`parse_workload` with their own file
name and key prefix, so errors name the experiment file and the full key path.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from models.errors import SpecError, SpecIssue
from models.schedule import Schedule
from models.specfile import (
    MAX_ITERATIONS,
    MAX_LAYERS,
    MAX_RANKS,
    Ref,
    check_file,
    issues_from_validation,
    load_yaml,
    resolve_ref,
    with_lines,
)
from models.unit_fields import SpecModel
from workloads.aicb import AicbOptions, load_aicb
from workloads.chakra import ChakraOptions, load_chakra
from workloads.federated import FedAvg, fedavg_schedule
from workloads.gossip import Gossip, gossip_schedule
from workloads.training import (
    Accelerator,
    Parallelism,
    Recompute,
    TransformerModel,
    training_schedule,
)
from workloads.transform import scale_schedule

__all__ = ["TrainingWorkload", "AicbWorkload", "FedAvgWorkload", "HierarchicalWorkload",
           "GossipWorkload", "WorkloadSpec", "parse_workload",
           "read_workload_file", "build_workload", "load_schedule"]


class TrainingWorkload(SpecModel):
    """``kind: training``: model, parallelism, activation recomputation (``recompute``,
    ``recompute_method``, ``recompute_num_layers``: workloads.training.Recompute's
    granularity, method and num_layers), accelerator, iterations."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["training"]
    name: str = "training"
    model: TransformerModel
    parallelism: Parallelism
    recompute: Literal["none", "selective", "full"] = "none"
    recompute_method: Literal["uniform", "block"] | None = None
    recompute_num_layers: int | None = Field(None, ge=1, le=MAX_LAYERS, strict=True)
    accelerator: Accelerator = Field(default_factory=Accelerator)
    iterations: int = Field(1, ge=1, le=MAX_ITERATIONS, strict=True)

    def recomputation(self) -> Recompute:
        """The recompute keys as one workloads.training.Recompute."""
        return Recompute(granularity=self.recompute, method=self.recompute_method,
                         num_layers=self.recompute_num_layers)


class AicbWorkload(SpecModel):
    """``kind: aicb``: an AICB CSV or SimAI text ``file`` and import ``options``."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["aicb"]
    file: str
    options: AicbOptions = Field(default_factory=AicbOptions)


class ChakraWorkload(SpecModel):
    """``kind: chakra``: a Chakra execution trace ``file`` (.et, .et.gz) of one rank, replayed
    by ``options.world_size`` ranks (workloads.chakra)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["chakra"]
    file: str
    options: ChakraOptions


class FedAvgWorkload(FedAvg):
    """``kind: fedavg``: FedAvg rounds (workloads.federated.FedAvg's keys) and a ``name``."""

    kind: Literal["fedavg"]
    name: str = "fedavg"


class HierarchicalWorkload(FedAvg):
    """``kind: hierarchical``: FedAvg with ``clusters`` >= 1 cluster aggregators (placed one
    cluster per site by default, workloads.fl_placement)."""

    kind: Literal["hierarchical"]
    name: str = "hierarchical"
    clusters: int = Field(1, ge=1, le=MAX_RANKS)


class GossipWorkload(Gossip):
    """``kind: gossip``: decentralised FL (workloads.gossip.Gossip's keys) and a ``name``."""

    kind: Literal["gossip"]
    name: str = "gossip"


AnySpec = (TrainingWorkload | AicbWorkload | ChakraWorkload | FedAvgWorkload
           | HierarchicalWorkload | GossipWorkload)
WorkloadSpec = Annotated[AnySpec, Field(discriminator="kind")]
_ADAPTER: TypeAdapter[AnySpec] = TypeAdapter(WorkloadSpec)
_BY_KIND: dict[str, type[BaseModel]] = {
    typing.get_args(m.model_fields["kind"].annotation)[0]: m for m in typing.get_args(AnySpec)}
_KIND_TAGS = tuple(_BY_KIND)  # pydantic's union tags in error locations


def parse_workload(data: Any, *, file: str | None = None, prefix: Sequence[str | int] = (),
                   doc: Any = None, also_known: Sequence[str] = ()) -> AnySpec:
    """Validate ``data`` (a mapping from YAML) as a workload spec.

    ``prefix`` is the key path of ``data`` inside its file; ``doc`` the ruamel document of
    that file (for line numbers; default ``data`` when ``prefix`` is empty). Raises
    :class:`SpecError` with one issue per problem, each naming ``file``, the full key path and
    the line (models.specfile: "did you mean" for unknown keys, among the kind's keys and
    ``also_known``, the keys the caller accepts beside them, e.g. an experiment entry's).
    """
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as exc:
        kind = data.get("kind") if isinstance(data, Mapping) else None
        root = _BY_KIND.get(kind) if isinstance(kind, str) else None
        issues = issues_from_validation(exc, root, file, prefix, drop=_KIND_TAGS,
                                        also_known=also_known)
        for e, issue in zip(exc.errors(), issues, strict=True):
            if e["type"] in ("union_tag_invalid", "union_tag_not_found"):
                issue.key_path = (*prefix, "kind")
        error = SpecError(issues)
        if doc is None and not prefix:
            doc = data
        raise (with_lines(error, doc, file or "") if doc is not None else error) from None


def read_workload_file(path: str | Path) -> AnySpec:
    """Read and validate the YAML workload spec at ``path`` (models.specfile: regular files,
    limits); errors name file, key, line."""
    return _read_workload(path)[0]


def _read_workload(path: str | Path) -> tuple[AnySpec, Any]:
    """The spec at ``path`` and its ruamel document (for the lines of later errors)."""
    data, dups = load_yaml(path, "a workload spec: a mapping with a 'kind' key")
    if dups:
        raise SpecError(dups)
    return parse_workload(data, file=str(path), doc=data), data


def build_workload(spec: AnySpec, *, base_dir: str | Path = ".",
                   file: str | None = None, scale: float | None = None,
                   dp_replicas: int | None = None, ref: Ref | None = None,
                   prefix: Sequence[str | int] = ()) -> Schedule:
    """The Schedule of ``spec``; ``scale`` and ``dp_replicas`` override the spec's own.

    ``file`` and ``prefix`` say where the spec was written (the key path of the spec in
    ``file``, e.g. ``("workloads", 0)`` in an experiment file, as for :func:`parse_workload`):
    every issue about the spec's keys names ``file`` and the full key path. Reads the AICB
    file of a ``kind: aicb`` spec (``ref``: the key that names it, where a missing, empty or
    unreadable file name is reported; default ``prefix + ("file",)``). Raises
    :class:`SpecError` for bad input.
    """
    pre = tuple(prefix)
    if isinstance(spec, AicbWorkload):
        opts = _override(spec.options, {"scale": scale, "dp_replicas": dp_replicas}, file,
                         (*pre, "options"))
        where = ref or Ref(file or "", (*pre, "file"))
        path = resolve_ref(spec.file, base_dir, where)
        check_file(path, ref=where, limit=64 * 2**20)  # a regular file, else named at ``ref``
        return load_aicb(path, opts)
    if isinstance(spec, ChakraWorkload):
        if dp_replicas is not None:
            raise SpecError(SpecIssue("--subset applies to training and AICB workloads; a "
                                      "Chakra trace takes options.world_size", file=file,
                                      key_path=(*pre, "kind")))
        copts = _override(spec.options, {"scale": scale}, file, (*pre, "options"))
        where = ref or Ref(file or "", (*pre, "file"))
        path = resolve_ref(spec.file, base_dir, where)
        check_file(path, ref=where, limit=256 * 2**20)
        return load_chakra(path, copts)
    if isinstance(spec, FedAvgWorkload | HierarchicalWorkload | GossipWorkload):
        if dp_replicas is not None:
            raise SpecError(SpecIssue("--subset applies to training and AICB workloads, not "
                                      f"{spec.kind}", file=file, key_path=(*pre, "kind")))
        fl = gossip_schedule(spec, name=spec.name) if isinstance(spec, GossipWorkload) \
            else fedavg_schedule(spec, name=spec.name)
        return scale_schedule(fl, scale) if scale else fl
    par = spec.parallelism
    if dp_replicas is not None:
        par = _override(par, {"dp": dp_replicas, "world_size": None}, file,
                        (*pre, "parallelism"))
    s = training_schedule(spec.model, par, spec.accelerator, recompute=spec.recomputation(),
                          iterations=spec.iterations, file=file, name=spec.name, prefix=pre)
    return scale_schedule(s, scale) if scale else s


def _override(m: Any, updates: dict[str, Any], file: str | None,
              key: tuple[str | int, ...]) -> Any:
    """``m`` re-validated with the non-None ``updates`` (command-line overrides); errors at
    the key path ``key`` of ``file``."""
    data = {**m.model_dump(), **{k: v for k, v in updates.items()
                                 if v is not None or k == "world_size"}}
    try:
        return type(m).model_validate(data)
    except ValidationError as exc:
        issues = issues_from_validation(exc, type(m), file, key)
        for i in issues:
            i.message += " (command-line override)"
        raise SpecError(issues) from None


def load_schedule(path: str | Path, *, scale: float | None = None,
                  dp_replicas: int | None = None, world_size: int | None = None) -> Schedule:
    """A Schedule from an AICB file (.csv, .csv.gz, .txt) or a YAML workload spec (.yaml,
    .yml)."""
    p = Path(path)
    if p.suffix.lower() == ".et" or p.name.lower().endswith(".et.gz"):
        if world_size is None:
            raise SpecError("a Chakra trace is one rank's: give the world that replays it "
                            "(--world-size N, N >= 2)", file=str(p))
        spec: AnySpec = ChakraWorkload(kind="chakra", file=str(p),
                                       options=ChakraOptions(world_size=world_size))
        return build_workload(spec, scale=scale, dp_replicas=dp_replicas)
    if p.suffix.lower() in (".csv", ".txt") or p.name.lower().endswith(".csv.gz"):
        spec = AicbWorkload(
            kind="aicb", file=str(p), options=AicbOptions(world_size=world_size))
        return build_workload(spec, scale=scale, dp_replicas=dp_replicas)
    if p.suffix.lower() in (".yaml", ".yml"):
        spec, doc = _read_workload(p)
        try:
            return build_workload(spec, base_dir=p.parent, file=str(p), scale=scale,
                                  dp_replicas=dp_replicas)
        except SpecError as exc:  # the issues about the spec's keys get their lines
            raise with_lines(exc, doc, str(p)) from None
    raise SpecError(f"unknown workload file type {p.suffix!r}; expected .csv or .txt (AICB), "
                    ".et or .et.gz (Chakra) or .yaml (workload spec)", file=str(p))
