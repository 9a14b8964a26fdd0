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


# The SIGINT lands while the garbage collector runs a finalizer (a ``__del__`` here; any
# object's, at any instant): Python can only print the handler's KeyboardInterrupt there
# ("Exception ignored in ... Traceback ... exiting.py in _handler") and drop it, and the
# command went on as if no Ctrl-C had come (seen in `aitb run` and `aitb campaign` under load).
IN_FINALIZER = """
import os, signal, sys, threading
from orchestration.cli import exiting
exiting.install()
class Finalized:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # the handler runs here, inside the finalizer
            pass
def body():
    Finalized()  # dropped at once: its __del__ runs
    threading.Event().wait(20)  # the command's work: the re-sent signal must end it
    print("not interrupted")
exiting.supervise(body)
"""


def test_a_signal_inside_a_finalizer_still_interrupts_with_no_traceback():
    out = subprocess.run([sys.executable, "-c", IN_FINALIZER], capture_output=True,
                         text=True, timeout=60, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 130, (out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr and "not interrupted" not in out.stdout, out.stderr
    assert out.stderr.strip() == "interrupted"


# A command whose library wraps the LabInterrupted of aitb's handler in its own exception, as
# pydantic's schema build did (SchemaError) for a SIGINT 0.4 s into `aitb run`.
WRAPPED = """
import signal, sys
import orchestration.cli.app as app
from testbed.lab import signals
def command(args, prog_name):
    with signals.raising():
        try:
            signal.raise_signal(signal.SIGINT)
        except signals.LabInterrupted as exc:
            raise RuntimeError("a library's own error") from exc
app.app = command
sys.argv = ["aitb", "run"]
from orchestration.cli.entry import main
main()
"""


def test_an_interrupt_a_library_wrapped_still_exits_130_without_a_traceback():
    out = subprocess.run([sys.executable, "-c", WRAPPED], capture_output=True, text=True,
                         timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 130, (out.returncode, out.stderr[-2000:])
    assert "Traceback" not in out.stderr and "interrupted by SIGINT" in out.stderr, out.stderr
