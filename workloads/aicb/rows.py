"""The common form of an AICB workload, whichever file format it came from (pure data).

AICB (aliyun/aicb) describes a workload as a table of rows (op, group, size, stage), written
from one rank's point of view; every group instance of that kind (every TP group, every DP
group...) runs the same row at the same point of the program (SPMD).

Sizes: AICB's own runner (aicb workload_applyer.py, ``_apply_all_reduce``,
``_apply_all_gather``, ``_apply_reduce_scatter``, ``_apply_all_to_all``,
``_apply_p2pcommunication``) allocates ``msg_size // 2`` bf16 elements as the all-reduce and
broadcast buffer, the *output* of all_gather_into_tensor, the *input* of
reduce_scatter_tensor, the send buffer of all_to_all_single and the tensor of a send/recv. So
``msg_size`` is already nccl-tests' ``size`` (the convention of models.schedule): no
conversion is needed. AICB pads all_gather/reduce_scatter up to a multiple of the group size in
elements (at most ``2 * group_size`` bytes); aitb keeps the size as written.

Compute times: nanoseconds in both formats. AICB sleeps ``_elapsed_time / 1e9`` seconds for a
computation row (workload_applyer.py ``_apply_computation``); its SimAI writer multiplies the
AIOB microsecond timings by 1000 (utils/utils.py ``extract_averages``; AIOB records
``elapsed_time(ms) * 1000``, ``cuda_timing_decorator``), and SimAI reads them as ticks of
``CLOCK_PERIOD`` = 1 ns (astra-sim system/Common.hh; the ns-3 frontend's ``sim_get_time``
returns ``Simulator::Now().GetNanoSeconds()``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["AicbRow", "AicbFile", "AicbStage", "ROW_OPS", "GROUP_KINDS"]

ROW_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce",
           "barrier", "send", "recv", "compute")
GROUP_KINDS = ("tp", "dp", "pp", "ep", "ep_dp", "ep_tp", "embedding", "world")


@dataclass(frozen=True, slots=True)
class AicbRow:
    """One row: ``op`` from :data:`ROW_OPS`; ``group`` a kind from :data:`GROUP_KINDS` or None
    (compute); ``group_size`` as written (None when absent); ``size_bytes`` in nccl-tests'
    convention; ``compute_s`` for compute rows (seconds); ``direction`` for send/recv
    (``next``/``prev``); ``line`` the 1-based line in the file."""

    op: str
    group: str | None
    size_bytes: int
    stage: str = ""
    group_size: int | None = None
    compute_s: float = 0.0
    direction: str = ""
    line: int = 0


@dataclass(frozen=True, slots=True)
class AicbStage:
    """One pipeline stage's section of a per-stage file (AICB writes one for each stage of a
    pipeline-parallel job, headed by ``[ pp_stageS: [rankA, rankB, ...] ]``): ``index`` S,
    ``ranks`` as listed, ``setup``/``iteration``/``file_iterations`` as in :class:`AicbFile`,
    but from this stage's point of view; ``line`` the 1-based line of the heading."""

    index: int
    ranks: tuple[int, ...]
    setup: tuple[AicbRow, ...]
    iteration: tuple[AicbRow, ...]
    file_iterations: int = 1
    line: int = 0


@dataclass(frozen=True, slots=True)
class AicbFile:
    """A parsed file: ``setup`` rows run once before training (AICB's ``init``/``warmup``
    before the first ``epoch_end``), ``iteration`` the rows of one training iteration,
    ``file_iterations`` how many iterations the file repeats; ``world_size``/``tp``/``pp``/
    ``ep`` as far as the file states them (None: not stated). ``stages``: the per-stage
    sections of a pipeline-parallel file (empty otherwise); then ``setup``/``iteration`` are
    stage 0's and ``pp`` the number of sections."""

    path: str
    fmt: str
    setup: tuple[AicbRow, ...]
    iteration: tuple[AicbRow, ...]
    file_iterations: int = 1
    world_size: int | None = None
    tp: int | None = None
    pp: int | None = None
    ep: int | None = None
    info: dict[str, str] = field(default_factory=dict)
    stages: tuple[AicbStage, ...] = ()
