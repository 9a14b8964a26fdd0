"""tests/serial_lock.py: under pytest-xdist, a test marked ``serial`` runs while no other
worker's test runs (its span overlaps none of theirs), and the session passes."""

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent

INNER = '''
import os, time
import pytest

def _span(name):
    t0 = time.monotonic()
    time.sleep(0.3)
    with open(os.environ["SPANS"], "a") as f:
        f.write(f"{name} {t0} {time.monotonic()}\\n")

@pytest.mark.serial
def test_serial():
    _span("serial")

@pytest.mark.parametrize("i", range(8))
def test_other(i):
    _span("other")
'''


def _run(tmp_path: Path, *plugin: str) -> list[tuple[str, float, float]]:
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    serial: alone\n")
    (tmp_path / "test_inner.py").write_text(INNER)
    spans = tmp_path / "spans.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    env["SPANS"] = str(spans)
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          *plugin, "-p", "xdist", "-n", "2", str(tmp_path)], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rows = [line.split() for line in spans.read_text().splitlines()]
    return [(name, float(t0), float(t1)) for name, t0, t1 in rows]


def test_a_serial_test_overlaps_no_other_test_under_xdist(tmp_path):
    spans = _run(tmp_path, "-p", "serial_lock")
    assert sorted(name for name, _, _ in spans) == ["other"] * 8 + ["serial"]
    (s0, s1), = [(t0, t1) for name, t0, t1 in spans if name == "serial"]
    assert all(t1 <= s0 or t0 >= s1 for name, t0, t1 in spans if name == "other"), spans
