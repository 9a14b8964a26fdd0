"""Inference requests: time to first token (TTFT) and per-token latency.

TTFT is the record's ``ttft_s`` (RequestRecord, models/records.py: first token at the
client minus request sent, host clock), the serving metric of e.g. vLLM's benchmarks and
DistServe (Zhong et al., OSDI 2024, section 2). Aggregated here, not recomputed.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis.metrics.stats import distribution

__all__ = ["request_metrics"]


def request_metrics(requests: pd.DataFrame) -> dict[str, Any]:
    """The ``requests`` section: ``requests`` (count), ``ttft_s`` distribution (s),
    ``per_token_latency_s_mean`` distribution, ``bootstraps`` (requests that triggered one)."""
    if requests.empty:
        return {"requests": 0, "ttft_s": distribution([]),
                "per_token_latency_s_mean": distribution([]), "bootstraps": 0}
    boot = requests["bootstrap"].fillna(False).astype(bool).sum() if "bootstrap" in requests \
        else 0
    ptl = requests.get("per_token_latency_s_mean", pd.Series([], dtype="float64"))
    return {"requests": int(len(requests)), "ttft_s": distribution(requests["ttft_s"]),
            "per_token_latency_s_mean": distribution(ptl), "bootstraps": int(boot)}
