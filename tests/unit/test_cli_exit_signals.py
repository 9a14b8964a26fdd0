"""SIGINT/SIGTERM that land while the aitb process is already exiting (its command is done,
its status decided, the interpreter joining threads and running atexit callbacks) end it
with aitb's own 130/143, not death by the signal (-15) or a status that ignores it (0 with
"Exception ignored ... KeyboardInterrupt")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
EXPERIMENT = ROOT / "examples" / "ring_allreduce_quick.yaml"

# The signal is sent by a thread that waits for the main thread to finish: threading's
# shutdown marks the main thread stopped before it joins the others, so the signal lands
# exactly in the interpreter's exit, after the command has printed its output.
LATE = """
import os, signal, sys, threading
sig = getattr(signal, sys.argv[1])
sys.argv = ["aitb", *sys.argv[2:]]
def late():
    threading.main_thread().join()
    os.kill(os.getpid(), sig)
threading.Thread(target=late).start()
from orchestration.cli.entry import main
main()
"""


def _late(sig: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", LATE, sig, *args], capture_output=True,
                          text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.parametrize(("sig", "code"), [("SIGINT", 130), ("SIGTERM", 143)])
@pytest.mark.parametrize("args", [("--version",), ("run", "--check", str(EXPERIMENT))],
                         ids=["version", "run-check"])
def test_a_signal_during_interpreter_exit_gives_aitbs_own_exit_code(sig, code, args):
    out = _late(sig, *args)
    assert out.returncode == code, (out.returncode, out.stderr[-2000:])
    assert "Traceback" not in out.stderr and "Exception ignored" not in out.stderr
    assert out.stdout.strip()  # what the command printed was flushed before the exit


def test_without_a_signal_the_status_is_the_commands():
    ok = subprocess.run([sys.executable, "-m", "orchestration.cli", "--version"],
                        capture_output=True, text=True, timeout=120, cwd=ROOT,
                        env={**os.environ, "PYTHONPATH": str(ROOT)})
    bad = subprocess.run([sys.executable, "-m", "orchestration.cli", "run", "--check",
                          str(ROOT / "no-such-experiment.yaml")], capture_output=True,
                         text=True, timeout=120, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert ok.returncode == 0 and ok.stdout.startswith("aitb ")
    assert bad.returncode == 2 and "no-such-experiment.yaml" in bad.stderr
