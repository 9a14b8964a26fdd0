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


def bubble_fraction(pp: int, microbatches: int, virtual_stages: int = 1) -> float:
    """Idle time of a 1F1B pipeline over its ideal (compute-only) time: (pp - 1) / (v m)
    with v model chunks per stage (Narayanan et al. 2021, sections 2.2.1 and 2.2.2); 0 for
    one stage."""
    return (pp - 1) / (virtual_stages * microbatches)


def _fwd(b: StageBuilder, s: int, c: int, k: int) -> list[Step]:
    """Forward of micro-batch ``k`` through chunk ``c`` of stage ``s`` with its hand-offs."""
    pp, vs = b.p.pp, c * b.p.pp + s
    first, last = b.ends(s, c)
    out = [] if first else [Step("xfer", "act", mb=k, label=f"recv_prev.{s}",
                                 peer=(vs - 1) % pp, vsrc=vs - 1), *b.after_receive("act")]
    out += b.forward(s, c)
    return out + ([] if last else [Step("xfer", "act", mb=k, label=f"send_next.{s}",
                                        peer=(vs + 1) % pp, vsrc=vs)])


def _bwd(b: StageBuilder, s: int, c: int, k: int) -> list[Step]:
    """Backward of micro-batch ``k`` through chunk ``c`` of stage ``s`` with its hand-offs."""
    pp, vs = b.p.pp, c * b.p.pp + s
    first, last = b.ends(s, c)
    out = [] if last else [Step("xfer", "grad", mb=k, label=f"recv_next.{s}",
                                peer=(vs + 1) % pp, vsrc=vs + 1), *b.after_receive("grad")]
    out += b.backward(s, c)
    return out + ([] if first else [Step("xfer", "grad", mb=k, label=f"send_prev.{s}",
                                         peer=(vs - 1) % pp, vsrc=vs)])


def stage_sequence(b: StageBuilder, s: int) -> list[Step]:
    """The steps of stage ``s`` for one iteration in 1F1B order, optimizer step last.

    With ``v`` virtual stages (Megatron ``forward_backward_pipelining_with_interleaving``)
    the stage runs ``m v`` forwards and backwards; the k-th uses chunk ``(k mod pp v) // pp``
    (backwards from the last chunk) and micro-batch ``(k // pp v) pp + k mod pp``; warm-up
    ``2 (pp - s - 1) + (v - 1) pp`` forwards (all of them when m = pp)."""
    m, pp, v = b.p.microbatches, b.p.pp, b.v
    total = m * v
    if v == 1:
        warm = min(pp - s - 1, m)
    else:
        warm = total if m == pp else min(2 * (pp - s - 1) + (v - 1) * pp, total)

    def chunk(k: int, forward: bool) -> int:
        c = k % (pp * v) // pp
        return c if forward else v - c - 1

    def mb(k: int) -> int:
        return k // (pp * v) * pp + k % pp

    seq: list[Step] = []
    for k in range(warm):
        seq += _fwd(b, s, chunk(k, True), mb(k))
    for i in range(total - warm):
        k = warm + i
        seq += _fwd(b, s, chunk(k, True), mb(k)) + _bwd(b, s, chunk(i, False), mb(i))
    for i in range(total - warm, total):
        seq += _bwd(b, s, chunk(i, False), mb(i))
    return seq + b.step(s)


def merge_stages(seqs: list[list[Step]]) -> list[tuple[int, Step]]:
    """One global order of ``(stage, step)``; each hand-off appears once, at the point where
    its sender reaches it (identified by kind, micro-batch and sending virtual stage), and
    always before the receiver's
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
                    ident = (st.op, st.mb, st.vsrc)
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
