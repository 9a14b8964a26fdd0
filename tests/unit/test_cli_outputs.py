"""Output locations from the command line: a folder that is a file, or cannot be made, is a
one-line error naming the option (exit 2), and nothing is written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from models.errors import SpecError
from orchestration.cli.commands.outputs import output_dir, write_output_file

ROOT = Path(__file__).resolve().parents[2]


def test_a_file_is_not_a_folder(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("keep me")
    with pytest.raises(SpecError, match="--results: not a folder"):
        output_dir(afile, "--results")
    with pytest.raises(SpecError, match="--output: not a folder"):
        write_output_file(afile / "x.yaml", "text", "--output")
    assert afile.read_text() == "keep me"


def test_a_new_folder_is_made_with_its_parents(tmp_path):
    assert output_dir(tmp_path / "a" / "b", "--results").is_dir()
    write_output_file(tmp_path / "c" / "x.yaml", "text", "--output")
    assert (tmp_path / "c" / "x.yaml").read_text() == "text"


@pytest.mark.parametrize("argv", [
    ["run", "examples/ring_allreduce_quick.yaml", "--results", "{afile}"],
    ["campaign", "examples/campaigns/incast_sweep.yaml", "--results", "{afile}"],
    ["topo", "import", "../shared/data/topologies/clab_clos01.clab.yml", "-o", "{afile}/x"],
])
def test_commands_refuse_an_unusable_output_without_traceback(tmp_path, argv):
    afile = tmp_path / "afile"
    afile.write_text("")
    inputs = [a for a in argv if a.endswith((".yaml", ".yml")) and "{" not in a]
    if not all((ROOT / a).exists() for a in inputs):
        pytest.skip(f"{inputs} not all on this machine (shared data lives beside the checkout)")
    out = subprocess.run([sys.executable, "-m", "orchestration.cli",
                          *[a.format(afile=afile) for a in argv]],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert str(afile) in out.stderr
