"""examples/cats_selection.py on a hand-made requests.jsonl (no network): the table gives TTFT
p50/p99 and bootstrap bytes per policy, and the plot shows both: a TTFT CDF per policy and a
bar of bootstrap MB per policy (the issue asks for TTFT and bootstrap bytes in a plot)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))

from cats_selection import figure, per_policy, plot, table  # noqa: E402


def _req(policy: str, n: int, ttft_s: float, boot: bool) -> dict:
    return {"record": "request", "policy": policy, "request_id": f"q{n}", "server": "s1",
            "ttft_s": ttft_s, "bootstrap": boot, "bootstrap_bytes": 1 << 20 if boot else 0}


def _run_dir(tmp_path: Path) -> Path:
    rows = [_req("nearest", 0, 0.010, True), _req("nearest", 1, 0.030, False),
            _req("cats", 0, 0.020, True), _req("cats", 1, 0.040, True)]
    (tmp_path / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


def test_table_gives_ttft_percentiles_and_bootstrap_bytes(tmp_path):
    d = _run_dir(tmp_path)
    by = {r["policy"]: r for r in per_policy(d)}
    assert by["nearest"]["ttft_s_p50"] == 0.010 and by["nearest"]["ttft_s_p99"] == 0.030
    assert by["cats"]["bootstrap_bytes"] == 2 << 20
    assert "| cats | 2 | 20.0 | 40.0 | 2 | 2.10 |" in table(d)


def test_plot_shows_ttft_cdfs_and_bootstrap_bytes_per_policy(tmp_path):
    import matplotlib.pyplot as plt

    d = _run_dir(tmp_path)
    fig = figure(d)
    try:
        cdf, bars = fig.axes
        assert [ln.get_label() for ln in cdf.get_lines()] == ["nearest", "cats"]
        assert [t.get_text() for t in bars.get_xticklabels()] == ["nearest", "cats"]
        heights = [p.get_height() for p in bars.patches]
        assert heights == [(1 << 20) / 1e6, (2 << 20) / 1e6]
    finally:
        plt.close(fig)
    assert plot(d) == d / "cats_ttft.png" and plot(d).stat().st_size > 0
