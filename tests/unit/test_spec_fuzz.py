"""A seeded slice of the input fuzzer (tests/fuzz/spec_fuzz.py): 40 mutants of the example
files, each accepted or refused with SpecError, none with a traceback."""

from __future__ import annotations

import importlib.util
from pathlib import Path

FUZZ = Path(__file__).parent.parent / "fuzz" / "spec_fuzz.py"


def test_seeded_mutants_raise_only_spec_errors():
    spec = importlib.util.spec_from_file_location("spec_fuzz", FUZZ)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = mod.run(seed=7, mutants=40, budget_s=1e9, slow_s=1e9)
    assert out["mutants"] == 40 and out["refused"] > 0
    assert out["tracebacks"] == 0, out["findings"]
