"""Read the SimAI text workload format that AICB writes (pure; reads one file).

Format, as SimAI parses it (aliyun/SimAI astra-sim-alibabacloud/astra-sim/workload/Workload.cc,
``Workload::initialize_workload``) and AICB writes it (aliyun/aicb
workload_generator/SimAI_training_workload_generator.py, ``Work_Item`` and ``dump_file``):

* line 1: the parallelism policy (``HYBRID_TRANSFORMER_FWD_IN_BCKWD``...) then ``key: value``
  pairs: ``model_parallel_NPU_group:`` (TP size), optionally ``ep:``, ``pp:``, ``vpp:``,
  ``ga:``, ``all_gpus:`` (world size), ``checkpoints:``, ``checkpoint_initiates:``;
* line 2: the number of layer lines;
* per layer, 12 fields: name, reserved (``-1``, read as ``depen``), forward compute time,
  forward comm type, forward comm size, input-gradient compute time, ig comm type, ig size,
  weight-gradient compute time, wg comm type, wg size, update time (``Work_Item``:
  forward_compute_time, forward_comm, forward_comm_size, backward_compute_time, backward_comm,
  backward_comm_size, dp_compute_time, dp_comm, dp_comm_size, process_time).

Groups follow SimAI's parser: a plain comm type runs on the TP group in the forward and
input-gradient slots and on the DP group in the weight-gradient slot; ``_EP`` means the
expert-parallel group and ``_DP_EP`` the expert-data-parallel group. (So the ``grad_norm``
line's forward ``ALLGATHER`` lands on TP, as SimAI simulates it, although AICB's CSV puts that
all-gather on DP.) ``BROADCAST`` is written by AICB but ignored by SimAI's parser; aitb keeps
it as a TP broadcast. Sizes are taken in the CSV's (nccl-tests') convention because AICB
computes them with the same formulas (``tp_comm_size = 2 * mbs * seq * hidden``); note that
SimAI's NcclFlowModel reads an all-gather size as the per-rank input (``final_data_size =
data_size * nodes``). Compute times are nanoseconds (see workloads.aicb.rows); AICB writes 1
as a placeholder for "not measured" (``default_compute_time = 1``), which aitb drops.

One pass in SimAI's order (``iterate_hybrid_parallel_Transformer_fwd_in_bckwd``): forward
over layers 0..n-1 (compute, then comm); then for layers n-1..0: input-gradient compute and
comm, weight-gradient compute and comm.
"""

from __future__ import annotations

from pathlib import Path

from models.errors import SpecError, SpecIssue
from models.specfile import read_text
from workloads.aicb.rows import AicbFile, AicbRow

__all__ = ["read_simai"]

POLICIES = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD", "HYBRID_TRANSFORMER")
_OPS = {"ALLREDUCE": "all_reduce", "ALLGATHER": "all_gather",
        "REDUCESCATTER": "reduce_scatter", "ALLTOALL": "all_to_all", "BROADCAST": "broadcast"}
_HEADER_KEYS = {"model_parallel_NPU_group:": "tp", "ep:": "ep", "pp:": "pp", "vpp:": "vpp",
                "ga:": "ga", "all_gpus:": "world", "pp_comm:": "pp_comm",
                "checkpoints:": "checkpoints", "checkpoint_initiates:": "checkpoint_initiates"}
PLACEHOLDER_NS = 1


def read_simai(path: str | Path) -> AicbFile:
    """Parse the SimAI workload text at ``path`` into one pass of rows in SimAI's order.

    Raises :class:`SpecError` naming file and line for an unknown policy, a bad layer count,
    a line without 12 fields, an unknown comm type or a bad number.
    """
    path = str(path)
    try:
        lines = read_text(path).splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read SimAI workload: {exc}", file=path) from exc
    info = _header(lines, path)
    count = _num(lines[1].strip() if len(lines) > 1 else "", "layer count", path, 2)
    layers = [ln.split() for ln in lines[2:] if ln.strip()]
    if len(layers) != count:
        raise SpecError(SpecIssue(f"line 2 announces {count} layers, the file has "
                                  f"{len(layers)}", file=path, line=2))
    parsed = [_layer(f, path, i + 3) for i, f in enumerate(layers)]
    rows = [r for fwd, _ig, _wg in parsed for r in fwd]
    rows += [r for _fwd, ig, wg in reversed(parsed) for r in (*ig, *wg)]
    get = lambda k: int(info[k]) if k in info else None  # noqa: E731
    return AicbFile(path, "simai", (), tuple(rows), 1, get("world"), get("tp"), get("pp"),
                    get("ep"), info)


def _header(lines: list[str], path: str) -> dict[str, str]:
    tokens = lines[0].split() if lines else []
    if not tokens or tokens[0] not in POLICIES:
        got = repr(tokens[0]) if tokens else "an empty first line"
        raise SpecError(SpecIssue(f"unknown parallelism policy {got}; aitb reads "
                                  f"{', '.join(POLICIES)}", file=path, line=1))
    info = {"policy": tokens[0]}
    for key, value in zip(tokens[1:], tokens[2:], strict=False):
        if key in _HEADER_KEYS:
            info[_HEADER_KEYS[key]] = str(_num(value, key.rstrip(":"), path, 1))
    if "tp" not in info:
        raise SpecError(SpecIssue("header lacks model_parallel_NPU_group:", file=path, line=1))
    return info


def _num(text: str, key: str, path: str, line: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise SpecError(SpecIssue(f"{key} {text!r} is not a whole number", file=path,
                                  line=line)) from None
    if value < 0:
        raise SpecError(SpecIssue(f"{key} {value} is negative", file=path, line=line))
    return value


def _layer(f: list[str], path: str, line: int) -> tuple[list[AicbRow], ...]:
    if len(f) != 12:
        raise SpecError(SpecIssue(f"expected 12 fields (name, reserved, then compute time, "
                                  f"comm type, comm size for fwd, ig and wg, update time), got "
                                  f"{len(f)}", file=path, line=line))
    name = f[0]
    slots = (("fwd", "tp", 2), ("ig", "tp", 5), ("wg", "dp", 8))
    return tuple(_slot(name, stage, plain, f[i:i + 3], path, line) for stage, plain, i in slots)


def _slot(name: str, stage: str, plain: str, f: list[str], path: str,
          line: int) -> list[AicbRow]:
    ns = _num(f[0], f"{stage} compute time", path, line)
    size = _num(f[2], f"{stage} comm size", path, line)
    rows = []
    if ns > PLACEHOLDER_NS:
        rows.append(AicbRow("compute", None, 0, f"{stage}.{name}", compute_s=ns * 1e-9,
                            line=line))
    if f[1] != "NONE":
        op, group = _comm(f[1], plain, path, line)
        rows.append(AicbRow(op, group, size, f"{stage}.{name}", line=line))
    return rows


def _comm(text: str, plain: str, path: str, line: int) -> tuple[str, str]:
    for suffix, group in (("_DP_EP", "ep_dp"), ("_EP", "ep"), ("", plain)):
        base = text.removesuffix(suffix) if suffix else text
        if (not suffix or text.endswith(suffix)) and base in _OPS:
            return _OPS[base], group
    raise SpecError(SpecIssue(f"unknown comm type {text!r}; known: NONE, "
                              f"{', '.join(_OPS)} (optionally with _EP or _DP_EP)",
                              file=path, line=line))
