"""Megatron's rank layout: which global ranks form each TP, DP, PP and EP group (pure).

Megatron-LM orders the parallel dimensions ``tp-cp-ep-dp-pp`` by default, innermost first
(megatron/core/parallel_state.py, ``initialize_model_parallel(order="tp-cp-ep-dp-pp")``); AICB
builds its groups the same way (aliyun/aicb utils/utils.py,
``generate_masked_orthogonal_rank_groups``, equation (1))::

    rank = tp_rank + dp_rank * tp + pp_rank * tp * dp

so tensor-parallel groups are consecutive ranks, data-parallel groups stride by ``tp`` and
pipeline groups stride by ``tp * dp``. Expert layers regroup the ``tp x dp`` ranks of a
stage as ``etp x ep x edp`` in the order ``tp-ep-dp`` (Megatron's expert rank generator,
``expert_tensor_parallel_size`` = etp, "MoE parallel folding"): the rank at index ``L`` of its
stage is expert-TP rank ``L mod etp``, expert-parallel rank ``(L // etp) mod ep`` and
expert-data-parallel rank ``L // (etp ep)``. With ``etp = tp`` (the default) the expert-TP
groups are the TP groups and the expert-parallel groups lie inside the DP dimension:
consecutive DP ranks ``ep`` at a time. Context parallelism is not modelled (cp = 1).
"""

from __future__ import annotations

from dataclasses import dataclass

from models.schedule import Group

__all__ = ["Layout", "LayoutError"]


class LayoutError(ValueError):
    """The parallel sizes do not fit together; the message names the sizes involved."""


@dataclass(frozen=True, slots=True)
class Layout:
    """A ``tp x dp x pp`` grid of ranks whose expert layers regroup each stage as
    ``etp x ep x edp`` (module docstring; ``etp`` None: ``tp``).

    Raises :class:`LayoutError` if a size is below 1 or ``etp x ep`` does not divide
    ``tp x dp`` (with ``etp = tp``: ``ep`` does not divide ``dp``).
    """

    tp: int = 1
    dp: int = 1
    pp: int = 1
    ep: int = 1
    etp: int | None = None

    def __post_init__(self) -> None:
        for key in ("tp", "dp", "pp", "ep", "etp"):
            if (getattr(self, key) or 1) < 1:
                raise LayoutError(f"{key} must be at least 1, got {getattr(self, key)}")
        if self.expert_tp == self.tp and self.dp % self.ep:
            raise LayoutError(f"ep={self.ep} must divide dp={self.dp} (expert-parallel groups "
                              "lie inside the data-parallel dimension)")
        if (self.tp * self.dp) % (self.expert_tp * self.ep):
            raise LayoutError(f"etp*ep = {self.expert_tp}*{self.ep} must divide tp*dp = "
                              f"{self.tp}*{self.dp} (the ranks of a stage)")

    @property
    def expert_tp(self) -> int:
        """The experts' tensor-parallel size (``etp``, else ``tp``)."""
        return self.etp or self.tp

    @property
    def edp(self) -> int:
        """The expert-data-parallel size, ``tp dp / (etp ep)``."""
        return self.tp * self.dp // (self.expert_tp * self.ep)

    def expert_rank(self, etp_rank: int, ep_rank: int, edp_rank: int, pp_rank: int) -> int:
        """The global rank at expert-layout position (etp, ep, edp) of stage ``pp_rank``."""
        e = self.expert_tp
        return pp_rank * self.tp * self.dp + etp_rank + ep_rank * e + edp_rank * e * self.ep

    @property
    def world_size(self) -> int:
        """Number of ranks, ``tp * dp * pp``."""
        return self.tp * self.dp * self.pp

    def rank(self, tp_rank: int, dp_rank: int, pp_rank: int) -> int:
        """The global rank at grid position (tp_rank, dp_rank, pp_rank)."""
        return tp_rank + dp_rank * self.tp + pp_rank * self.tp * self.dp

    def tp_group(self, dp_rank: int, pp_rank: int) -> tuple[int, ...]:
        """Ranks of the TP group at (dp_rank, pp_rank), in TP order."""
        return tuple(self.rank(t, dp_rank, pp_rank) for t in range(self.tp))

    def dp_group(self, tp_rank: int, pp_rank: int) -> tuple[int, ...]:
        """Ranks of the DP group at (tp_rank, pp_rank), in DP order."""
        return tuple(self.rank(tp_rank, d, pp_rank) for d in range(self.dp))

    def pp_group(self, tp_rank: int, dp_rank: int) -> tuple[int, ...]:
        """Ranks of the pipeline at (tp_rank, dp_rank), first stage first."""
        return tuple(self.rank(tp_rank, dp_rank, p) for p in range(self.pp))

    def stage_ranks(self, pp_rank: int) -> tuple[int, ...]:
        """All ranks of pipeline stage ``pp_rank``."""
        base = pp_rank * self.tp * self.dp
        return tuple(range(base, base + self.tp * self.dp))

    def groups(self, kind: str) -> dict[str, Group]:
        """Every group of ``kind`` (tp, dp, pp, ep, etp, ep_tp, ep_dp, embedding, world) by
        name.

        Names are ``kind`` + index (``tp0``, ``dp5``...). Raises :class:`LayoutError` for an
        unknown kind.
        """
        lists = self._group_lists(kind)
        return {f"{kind}{i}": Group(f"{kind}{i}", kind, tuple(r)) for i, r in enumerate(lists)}

    def _group_lists(self, kind: str) -> list[tuple[int, ...]]:
        tp, dp, pp, ep = self.tp, self.dp, self.pp, self.ep
        if kind == "tp":
            return [self.tp_group(d, p) for p in range(pp) for d in range(dp)]
        if kind == "dp":
            return [self.dp_group(t, p) for p in range(pp) for t in range(tp)]
        if kind == "pp":
            return [self.pp_group(t, d) for d in range(dp) for t in range(tp)]
        x, edp, r = self.expert_tp, self.edp, self.expert_rank
        if kind == "ep":
            return [tuple(r(t, e, b, p) for e in range(ep))
                    for p in range(pp) for b in range(edp) for t in range(x)]
        if kind == "etp":  # the experts' TP groups (the TP groups when etp = tp)
            return [tuple(r(t, e, b, p) for t in range(x))
                    for p in range(pp) for b in range(edp) for e in range(ep)]
        if kind == "ep_tp":  # the ETP x EP block of an expert layer
            return [tuple(r(t, e, b, p) for e in range(ep) for t in range(x))
                    for p in range(pp) for b in range(edp)]
        if kind == "ep_dp":
            return [tuple(r(t, e, b, p) for b in range(edp))
                    for p in range(pp) for e in range(ep) for t in range(x)]
        if kind == "embedding":
            return [tuple(sorted({self.rank(t, d, 0), self.rank(t, d, pp - 1)}))
                    for d in range(dp) for t in range(tp)]
        if kind == "world":
            return [tuple(range(self.world_size))]
        raise LayoutError(f"unknown group kind {kind!r}; known: tp, dp, pp, ep, etp, ep_tp, "
                          "ep_dp, embedding, world")
