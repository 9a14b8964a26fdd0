"""Test helper: ``aitb run FILE`` in a subprocess that must refuse the file before anything
exists (exit 2, no traceback, no results or state directory)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent.parent


def refused_run(path: Path, tmp_path: Path) -> str:
    """Run ``aitb run path --results tmp_path/results`` with its state under
    ``tmp_path/state``; assert it was refused and created nothing; return its stderr."""
    env = {**os.environ, "AITB_STATE_DIR": str(tmp_path / "state")}
    out = subprocess.run([sys.executable, "-m", "orchestration.cli", "run", str(path),
                          "--results", str(tmp_path / "results")], capture_output=True,
                         text=True, timeout=120, cwd=ROOT, env=env)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "results").exists() and not (tmp_path / "state").exists()
    return out.stderr
