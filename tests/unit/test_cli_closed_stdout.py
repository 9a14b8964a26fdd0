"""A reader that went away (``aitb pcap F | head -1``) ends any command quietly: exit 0, no
traceback. The test hands the command a pipe whose read end is already closed, so its first
write fails with EPIPE whatever the timing (a live ``head`` may or may not exit first)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PCAP = REPO / "tests" / "data" / "pcaps" / "gso_ipv4_7240B.pcap"
WORKLOAD = REPO / "workloads" / "examples" / "gpt3_2p7b_tp8_pp2_recompute.yaml"


def _run_into_closed_pipe(args: list[str]) -> subprocess.CompletedProcess[str]:
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-c",
                               "from orchestration.cli.entry import main; main()", *args],
                              stdout=write_end, stderr=subprocess.PIPE, text=True, cwd=REPO,
                              timeout=120, check=False)
    finally:
        os.close(write_end)


@pytest.mark.parametrize("args", [
    ["pcap", str(PCAP)],                       # the quick path (no click, no rich console)
    ["pcap", str(PCAP), "--json"],
    ["workload", "inspect", str(WORKLOAD)],    # the full CLI (typer, click and rich)
    ["--help"],
], ids=["pcap", "pcap-json", "workload-inspect", "help"])
def test_a_closed_stdout_ends_the_command_quietly(args):
    res = _run_into_closed_pipe(args)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr and "BrokenPipe" not in res.stderr, res.stderr


def test_a_real_error_keeps_its_status_when_stdout_is_open():
    res = subprocess.run([sys.executable, "-c",
                          "from orchestration.cli.entry import main; main()",
                          "workload", "inspect", "no-such-file.yaml"],
                         capture_output=True, text=True, cwd=REPO, timeout=120, check=False)
    assert res.returncode == 2 and "no-such-file.yaml" in res.stderr
