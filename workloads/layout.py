"""Megatron's rank layout: which global ranks form each TP, DP, PP and EP group (pure).

Megatron-LM orders the parallel dimensions ``tp-cp-ep-dp-pp`` by default, innermost first
(megatron/core/parallel_state.py, ``initialize_model_parallel(order="tp-cp-ep-dp-pp")``); AICB
builds its groups the same way (aliyun/aicb utils/utils.py,
``generate_masked_orthogonal_rank_groups``, equation (1))::

    rank = tp_rank + dp_rank * tp + pp_rank * tp * dp

so tensor-parallel groups are consecutive ranks, data-parallel groups stride by ``tp`` and
pipeline groups stride by ``tp * dp``. Expert-parallel groups lie inside the DP dimension
(``ep`` adjacent to ``dp`` in the order): consecutive DP ranks ``ep`` at a time. Context
parallelism is not modelled (cp = 1).
"""

from __future__ import annotations

from dataclasses import dataclass

from models.schedule import Group

__all__ = ["Layout", "LayoutError"]


class LayoutError(ValueError):
    """The parallel sizes do not fit together; the message names the sizes involved."""


@dataclass(frozen=True, slots=True)
class Layout:
    """A ``tp x dp x pp`` grid of ranks with ``ep`` expert-parallel groups inside DP.

    Raises :class:`LayoutError` if a size is below 1 or ``ep`` does not divide ``dp``.
    """

    tp: int = 1
    dp: int = 1
    pp: int = 1
    ep: int = 1

    def __post_init__(self) -> None:
        for key in ("tp", "dp", "pp", "ep"):
            if getattr(self, key) < 1:
                raise LayoutError(f"{key} must be at least 1, got {getattr(self, key)}")
        if self.dp % self.ep:
            raise LayoutError(f"ep={self.ep} must divide dp={self.dp} (expert-parallel groups "
                              "lie inside the data-parallel dimension)")

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
        """Every group of ``kind`` (tp, dp, pp, ep, ep_tp, ep_dp, embedding, world) by name.

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
        if kind == "ep":
            return [tuple(self.rank(t, b * ep + e, p) for e in range(ep))
                    for p in range(pp) for b in range(dp // ep) for t in range(tp)]
        if kind == "ep_tp":  # the TP x EP block of an expert layer
            return [tuple(self.rank(t, b * ep + e, p) for e in range(ep) for t in range(tp))
                    for p in range(pp) for b in range(dp // ep)]
        if kind == "ep_dp":
            return [tuple(self.rank(t, b * ep + e, p) for b in range(dp // ep))
                    for p in range(pp) for e in range(ep) for t in range(tp)]
        if kind == "embedding":
            return [tuple(sorted({self.rank(t, d, 0), self.rank(t, d, pp - 1)}))
                    for d in range(dp) for t in range(tp)]
        if kind == "world":
            return [tuple(range(self.world_size))]
        raise LayoutError(f"unknown group kind {kind!r}; known: tp, dp, pp, ep, ep_tp, "
                          "ep_dp, embedding, world")
