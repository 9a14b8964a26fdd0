"""Every `aitb` command starts a Python process (a run calls the CLI, tests call it hundreds of
times): starting it must not import the analysis stack (pandas alone took ~0.35 s of a ~0.9 s
start), which only the commands that analyse import, when they run."""

import subprocess
import sys


def test_the_cli_starts_without_pandas_pyarrow_or_matplotlib():
    out = subprocess.run(
        [sys.executable, "-c", "import sys, orchestration.cli.app; "
         "print(sorted(m for m in ('pandas', 'pyarrow', 'matplotlib') if m in sys.modules))"],
        capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout
