"""A seeded slice of the schema-driven fuzzer (tests/fuzz/schema_fuzz.py): 300 mutants, each
a key of a topology, experiment or campaign file given a wrong type or a boundary value, read
as ``aitb run --check`` reads it; every one passes or is refused with a SpecError naming the
file, the key and a line, in bounded time, creating nothing."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

FUZZ = Path(__file__).parent.parent / "fuzz" / "schema_fuzz.py"


def _fuzz():
    spec = importlib.util.spec_from_file_location("schema_fuzz", FUZZ)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def test_the_walk_reaches_every_kind_and_every_wrong_type():
    mod = _fuzz()
    everyone = mod.mutants()
    assert len(everyone) >= 5000
    assert {m.kind for m in everyone} == {"topology", "experiment", "campaign"}
    labels = {m.label for m in everyone}
    assert {label for label, _ in mod.WRONG} <= labels
    assert {"minimum-1", "minimum", "maximum", "maximum+1"} <= labels
    swapped = {m.label.split(".")[0] for m in everyone if m.replace_item}
    assert {"kind=chakra", "kind=all_pairs", "kind=permutation", "kind=straggler"} <= swapped


def test_seeded_mutants_pass_or_are_refused_with_file_key_and_line():
    out = _fuzz().run(sample=300, seed=7, slow_s=20.0)
    assert out["mutants"] == 300 and out["refused_correctly"] > 100
    assert out["defects"] == {}, out["findings"][:5]
