"""The lognormal training time of FL clients has a bounded shape: a sigma of 1e300 made
``math.exp`` overflow inside the schedule builder (a traceback); it is refused at its key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from models.errors import SpecError
from orchestration.run.runner import prepare

EXAMPLE = Path(__file__).parent.parent.parent / "examples" / "hierarchical_fl.yaml"


@pytest.mark.parametrize("sigma", [1e300, 2**64, 10.5])
def test_a_huge_sigma_is_refused_with_file_key_and_line(tmp_path, sigma):
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["workloads"][0]["train_time"] = {"dist": "lognormal", "seconds": 1, "sigma": sigma}
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(SpecError) as err:
        prepare(path)
    [issue] = err.value.issues
    assert issue.key_path == ("workloads", 0, "train_time", "sigma") and issue.line
    assert "less than or equal to 10" in issue.message


def test_sigma_at_the_bound_is_accepted(tmp_path):
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["workloads"][0]["train_time"] = {"dist": "lognormal", "seconds": 1, "sigma": 10}
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    prepare(path)
