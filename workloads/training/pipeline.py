"""The 1F1B pipeline schedule as one global program order (pure).

Per stage s of ``pp`` with ``m`` micro-batches, 1F1B (Narayanan et al. 2021, section 2.2.1;
Megatron-LM ``forward_backward_pipelining_without_interleaving``; AICB
``with_pipeline_forward_backward``) runs ``w = min(pp - s - 1, m)`` warm-up forwards, then
alternates one forward and one backward, then drains the remaining ``w`` backwards. A forward
receives activations from stage s-1 first and sends its own to s+1 after; a backward receives
gradients from s+1 and sends to s-1 (with ``scatter_gather_pp`` a received hand-off is
all-gathered in the TP group before use). The pipeline bubble of 1F1B is (pp - 1) / m of
the ideal time (Narayanan et al. 2021, section 2.2.1): :func:`bubble_fraction`.

The traffic generator walks one ordered list, so the per-stage sequences are merged into one
order in which every hand-off appears once, where both of its stages have reached it
(a rendezvous linearisation). A merge that cannot progress is a bug and raises.
"""

from __future__ import annotations

from workloads.training.megatron import StageBuilder, Step

__all__ = ["stage_sequence", "merge_stages", "bubble_fraction"]


def bubble_fraction(pp: int, microbatches: int) -> float:
    """Idle time of a 1F1B pipeline over its ideal (compute-only) time: (pp - 1) / m
    (Narayanan et al. 2021, section 2.2.1); 0 for one stage."""
    return (pp - 1) / microbatches


def _fwd(b: StageBuilder, s: int, k: int, fwd: list[Step]) -> list[Step]:
    last = b.p.pp - 1
    out = [Step("xfer", "act", mb=k, label=f"recv_prev.{s}"), *b.after_receive("act")] \
        if s > 0 else []
    out += fwd
    return out + ([Step("xfer", "act", mb=k, label=f"send_next.{s}")] if s < last else [])


def _bwd(b: StageBuilder, s: int, k: int, bwd: list[Step]) -> list[Step]:
    last = b.p.pp - 1
    out = [Step("xfer", "grad", mb=k, label=f"recv_next.{s}"), *b.after_receive("grad")] \
        if s < last else []
    out += bwd
    return out + ([Step("xfer", "grad", mb=k, label=f"send_prev.{s}")] if s > 0 else [])


def stage_sequence(b: StageBuilder, s: int) -> list[Step]:
    """The steps of stage ``s`` for one iteration in 1F1B order, optimizer step last."""
    m, pp = b.p.microbatches, b.p.pp
    fwd, bwd = b.forward(s), b.backward(s)
    warm = min(pp - s - 1, m)
    seq: list[Step] = []
    for k in range(warm):
        seq += _fwd(b, s, k, fwd)
    for i in range(m - warm):
        seq += _fwd(b, s, warm + i, fwd) + _bwd(b, s, i, bwd)
    for i in range(m - warm, m):
        seq += _bwd(b, s, i, bwd)
    return seq + b.step(s)


def _peer(s: int, st: Step) -> tuple[int, tuple[str, int, int]]:
    """The other stage of hand-off ``st`` at stage ``s`` and the hand-off's identity
    (kind, micro-batch, sending stage)."""
    sending = st.label.startswith("send")
    toward = 1 if st.label.startswith(("send_next", "recv_next")) else -1
    other = s + toward
    return other, (st.op, st.mb, s if sending else other)


def merge_stages(seqs: list[list[Step]]) -> list[tuple[int, Step]]:
    """One global order of ``(stage, step)``; each hand-off appears once, at the point where
    its sender reaches it, tagged with the sending stage, and always before the receiver's
    next step. Sends are eager, as Megatron's batched isend/irecv make them (a rendezvous send
    deadlocks 1F1B). Raises RuntimeError if the sequences cannot be linearised (a bug)."""
    pos = [0] * len(seqs)
    posted: set[tuple[str, int, int]] = set()
    out: list[tuple[int, Step]] = []
    while any(pos[s] < len(seqs[s]) for s in range(len(seqs))):
        progressed = False
        for s, seq in enumerate(seqs):
            while pos[s] < len(seq):
                st = seq[pos[s]]
                if st.kind == "xfer":
                    ident = _peer(s, st)[1]
                    if st.label.startswith("send"):
                        out.append((s, st))
                        posted.add(ident)
                    elif ident not in posted:
                        break
                else:
                    out.append((s, st))
                pos[s] += 1
                progressed = True
        if not progressed:
            raise RuntimeError(f"1F1B merge stuck at positions {pos}")
    return out
