"""A training run across two data centres, its DP all-reduce crossing a delayed DCI,
gets slower per iteration by what the alpha-beta model predicts when the DCI delay grows.

Alpha-beta (latency-bandwidth) model (Hockney, "The communication challenge for MPP: Intel
Paragon and Meiko CS-2", Parallel Computing 20(3), 1994): a message of m bytes costs
alpha + m * beta. Ring all-reduce over n ranks (Thakur, Rabenseifner and Gropp, IJHPCA 19(1),
2005; Patarasuk and Yuan, JPDC 69(2), 2009) is 2(n-1) sequential steps of S/n bytes, each
waiting for the previous step's message. With DP = 2 and one rank per data
centre, both ring edges cross the DCI, so every step pays one DCI one-way delay d as its
alpha. Sizes are scaled so that every step's message (S/n) fits TCP's initial window (10
segments, RFC 6928): no step waits for an ACK, so the beta term and everything inside a DC
do not depend on d. Hence

    iteration_time(d) = c + K * d,   K = sum over DCI-crossing ring all-reduces of 2(n-1),

and the growth between two delays is K * (d_high - d_low). K is counted from the schedule the
workload produces (not hard-coded), and the placement is checked from the records.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from workloads.spec import build_workload, parse_workload

# boot excluded: two short runs, each starting 4 agents (~30 s of imports under TCG)
pytestmark = [pytest.mark.vm, pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[2]
SCALE = 200  # rates, buffers and sizes / 200: the DP gradient chunk is ~11 kB (< IW 14.5 kB)
IW_BYTES = 10 * 1448  # RFC 6928 initial window, MSS of a 1500-byte MTU with timestamps
DELAYS_S = (0.005, 0.300)  # one way; K x the difference (1.18 s) dominates TCG's noise
HOSTS_PER_DC = 1
WORKLOAD = {
    "kind": "training", "name": "tiny-dp2", "iterations": 5,
    "model": {"num_layers": 1, "hidden_size": 256, "num_attention_heads": 4,
              "seq_length": 128, "vocab_size": 1000},
    # TP = 1: a first VM run with TP = 2 (34 ops per iteration) had ~0.4 s of run-to-run
    # software noise per iteration under TCG on a shared machine, as large as the signal
    "parallelism": {"tp": 1, "world_size": 2},
    "placement": {"policy": "packed"},  # rank 0 in dc1, rank 1 in dc2
}


def _experiment(delay_s: float) -> dict:
    return {
        "name": f"dci-delay-{round(delay_s * 1000)}ms", "seed": 1, "scale": SCALE,
        "topology": {"inline": {
            "name": "two-dc",
            "generator": {"name": "multi_dc_leaf_spine", "params": {
                "n_dcs": 2, "spines": 1, "leaves": 1, "hosts_per_leaf": HOSTS_PER_DC,
                "borders": 1, "dci": "dci", "fabric": "fabric", "host_link": "host"}},
            "profiles": {"dci": {"rate": "100Gbit", "delay": f"{delay_s * 1000:g}ms",
                                 "buffer": "256MB"},
                         "fabric": {"rate": "400Gbit"}, "host": {"rate": "100Gbit"}}}},
        "transport": {"tcp_congestion_control": "cubic", "nodelay": True},
        "capture": {"enabled": False},
        "counters": {"enabled": False},
        "workloads": [WORKLOAD],
    }


def _dci_steps_per_iteration() -> tuple[int, int]:
    """(K, largest ring-step message in bytes) of one iteration of WORKLOAD, from its
    schedule: ring all-reduces whose group spans both DCs under the packed placement, counted
    per rank (the DP groups {0,2} and {1,3} run side by side) and the largest count taken."""
    spec = parse_workload({k: v for k, v in WORKLOAD.items() if k != "placement"})
    sched = build_workload(spec, scale=SCALE)
    steps, biggest = [0] * sched.world_size, 0
    for op in sched.ops:
        group = sched.groups.get(getattr(op, "group", None) or "")
        if group is None or getattr(op, "op", None) is None:
            continue
        dcs = {r // HOSTS_PER_DC for r in group.ranks}
        if len(dcs) > 1:
            assert op.op == "all_reduce" and op.algorithm in (None, "ring"), op
            n = len(group.ranks)
            for r in group.ranks:
                steps[r] += 2 * (n - 1)
            biggest = max(biggest, -(-op.size_bytes // n))
    return max(steps), biggest


def _run(tmp_path: Path, delay_s: float) -> Path:
    exp = tmp_path / f"exp-{delay_s}.yaml"
    exp.write_text(json.dumps(_experiment(delay_s)))  # JSON is YAML
    env = {**os.environ, "AITB_STATE_DIR": str(tmp_path / "state")}
    out = subprocess.run([sys.executable, "-m", "orchestration.cli", "run", str(exp), "--results",
                          str(tmp_path / "results"), "--json", "--no-analysis"],
                         capture_output=True, text=True, timeout=400, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return Path(json.loads(out.stdout)["run_dir"])


def _iteration_times_s(run_dir: Path) -> list[float]:
    """Per iteration: last rank-op end minus first rank-op start over all ranks (the
    definition of analysis.metrics.collectives.iteration_times), from timeline.jsonl."""
    recs = [json.loads(line) for line in (run_dir / "timeline.jsonl").read_text().splitlines()
            if line.strip()]
    for r in recs:  # the packed placement put ranks 0-1 in dc1 and 2-3 in dc2
        assert r["node"].startswith(f"dc{r['rank'] // HOSTS_PER_DC + 1}-"), r
    spans: dict[int, list[float]] = {}
    for r in recs:
        lo, hi = spans.setdefault(r["iteration"], [r["t_start"], r["t_end"]])
        spans[r["iteration"]] = [min(lo, r["t_start"]), max(hi, r["t_end"])]
    return [hi - lo for _i, (lo, hi) in sorted(spans.items())]


@pytest.mark.native_twin(
    "tests/netns/test_native_line_fidelity.py::"
    "test_iteration_time_grows_with_dci_delay_as_alpha_beta_predicts")
def test_iteration_time_grows_with_dci_delay_as_alpha_beta_predicts(tmp_path):
    k, biggest = _dci_steps_per_iteration()
    assert k >= 2 and biggest <= IW_BYTES, (k, biggest)  # the model's premises hold
    fastest = {}
    for d in DELAYS_S:
        times = _iteration_times_s(_run(tmp_path, d))
        assert len(times) == WORKLOAD["iterations"]
        # netem never delivers early: every iteration pays at least K one-way delays
        assert min(times) >= k * d, (d, times)
        # the fastest iteration: every disturbance here (a delayed packet released late by
        # TCG's timers, an agent descheduled on the shared machine) only adds time, so the
        # minimum over 5 iterations is the least disturbed estimate of c + K * d (with 3
        # iterations and the mean, a CI run with a second VM on the machine measured 1.447 s)
        fastest[d] = min(times)
    predicted = k * (DELAYS_S[1] - DELAYS_S[0])
    measured = fastest[DELAYS_S[1]] - fastest[DELAYS_S[0]]
    print(f"dci-delay: K={k} fastest iteration s {fastest} growth measured {measured:.3f} s "
          f"predicted {predicted:.3f} s")  # shown with pytest -s
    # 20 % (236 ms): under TCG each delayed packet arrives 0-20 ms late (KERNEL.md: 21-31 ms
    # RTT for a 10 ms netem), ~80 ms over K = 4 crossings, and the software time of the 8 ops
    # of an iteration varies between runs on a shared 2-core machine (tens of ms); 20 % covers
    # that and still tells K = 4 from K = 3 or 5 (25 % off).
    assert abs(measured - predicted) <= 0.20 * predicted, (k, fastest, measured, predicted)
