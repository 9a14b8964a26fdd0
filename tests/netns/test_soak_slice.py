"""A 10-run slice of the soak (bench/soak.py, the same code): one `aitb campaign` of 10 short
runs, each with its own random events (a link down and up, a rate degrade, a straggler), the
campaign process SIGKILLed in one run and SIGTERMed in another and resumed each time with the
same command, a one-process CPU hog during one run. Afterwards nothing of the soak is left
(namespaces, root interfaces with its owner alias, registries, processes), the killed runs'
directories were discarded and redone, the kills ended with 143 and death by SIGKILL, every
run's manifest says what the campaign state says, every completed run applied its events, the
campaign process's descriptors did not grow from run to run, and no run whose traffic lay
inside the hog's time says it is trustworthy."""

from __future__ import annotations

import importlib.util
import io
import os
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.netns
SOAK = Path(__file__).resolve().parents[2] / "bench" / "soak.py"


# about 80 s on a quiet 2-core machine (10 runs of a few seconds, 2 resumptions); under the
# load of other jobs a run's agents take seconds more to start, so allow far longer
@pytest.mark.timeout(900)
def test_a_soak_slice_leaves_nothing_and_tells_the_truth(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    spec = importlib.util.spec_from_file_location("soak", SOAK)
    soak = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = soak  # its dataclasses need their module registered
    spec.loader.exec_module(soak)
    printed = io.StringIO()
    out = soak.run(runs=10, seed=3, kills=2, hog_threads=1, window=10, hog_runs=1,
                   work=tmp_path / "soak", out=printed, signals=("SIGKILL", "SIGTERM"))
    text = printed.getvalue()
    assert out["leaks"] == 0, out["leak_detail"]
    assert text.rstrip().endswith(f"verdict: leaks: 0, trustworthy-while-starved: "
                                  f"{out['trustworthy_while_starved']}")
    # both kills landed in a run (the campaign was alive) and ended as aitb promises
    assert [k["signal"] for k in out["kills"]] == ["SIGKILL", "SIGTERM"], out["kills"]
    assert out["kills_wrong_rc"] == 0, out["kills"]
    assert [k["rc"] for k in out["kills"]] == [-9, 143]
    assert all(k["run_dir"] for k in out["kills"])  # each cut a run short, later discarded
    assert out["leak_detail"]["undiscarded"] == []
    assert len(out["campaign_pids"]) == 3  # the first and two resumptions
    # every run ended, each manifest says what the state says
    assert out["runs"].get("running", 0) == 0
    assert sum(out["runs"].values()) == 10, out["runs"]
    assert out["manifest_vs_state"] == []
    assert out["runs_without_events"] == []
    # descriptors of a campaign process between labs stay within a small bound: its first
    # reports open matplotlib's font files and keep them cached (DejaVuSans, its bold,
    # LastResortHE twice: 4 descriptors, once per process; 8 or 9 in all between labs over
    # 50 runs of the full soak), so a few more after the first runs are no leak
    assert out["fd_growth_max"] <= 6, out["fds_per_process"]
    assert max(out["fds_min_max"][1], 0) <= 24, out["fds_per_process"]
    # the hog ran, and no run inside it says trustworthy
    assert out["hog_intervals"] >= 1
    assert out["trustworthy_while_starved"] == 0, out["trustworthy_while_starved_runs"]
    assert "window" in text and "kill 2: SIGTERM" in text
