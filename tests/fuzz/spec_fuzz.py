"""Seeded fuzzer of the input readers: mutates the example topology, experiment and campaign
files (and plan.json documents) and feeds each mutant to the reader a user's file reaches.
Every mutant must be accepted or refused with SpecError; anything else (a traceback) or a
mutant that takes longer than ``--slow-s`` (a hang) is a finding. The corpus is generated from
``--seed``, never committed.

    .venv/bin/python tests/fuzz/spec_fuzz.py --seed 1 --mutants 2000 --budget-s 300

prints one JSON line: mutants tried, accepted, refused, tracebacks, hangs (and the first few
findings with their seed index, so that ``--only N`` replays one). tests/unit/test_spec_fuzz.py
runs a small seeded slice in the normal test run.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))

from models.errors import SpecError  # noqa: E402

SEEDS = {
    "topology": sorted((ROOT / "topologies" / "examples").glob("*.yaml")),
    "experiment": sorted((ROOT / "examples").glob("*.yaml")),
    "campaign": sorted((ROOT / "examples" / "campaigns").glob("*.yaml")),
}
HOSTILE = ["x$(touch P)", "e;touch${IFS}P", "a\nb", "1e308", "-1", "true", ".inf", ".nan",
           "1e40", "''", "[]", "{}", "~", "&a [*a]", "? [a, b]", "*nope",
           "!!python/object:os.system",
           "9" * 5000, "[" * 200 + "]" * 200, "../../../../etc/passwd", "/dev/zero", "\x00",
           "100000", "0", "0.5", "10Mbit", "-5ms", "ä" * 40]


def _mutate(text: str, rng: random.Random) -> str:
    lines = text.splitlines()
    if not lines:
        return text
    op = rng.randrange(6)
    i = rng.randrange(len(lines))
    line = lines[i]
    if op == 0 and ":" in line:  # replace a value
        key, _, _ = line.partition(":")
        lines[i] = f"{key}: {rng.choice(HOSTILE)}"
    elif op == 1:  # delete a line
        del lines[i]
    elif op == 2:  # duplicate a line
        lines.insert(i, line)
    elif op == 3:  # swap indentation
        lines[i] = ("  " + line) if rng.random() < 0.5 else line.lstrip()
    elif op == 4:  # insert a hostile key
        indent = line[:len(line) - len(line.lstrip())]
        lines.insert(i, f"{indent}{rng.choice(['nme', 'kind', 'file', 'x', 'iterations'])}: "
                        f"{rng.choice(HOSTILE)}")
    else:  # flip characters
        chars = list(line)
        for _ in range(rng.randint(1, 3)):
            if chars:
                chars[rng.randrange(len(chars))] = rng.choice("[]{}:,&*!|>-'\"#? \t")
        lines[i] = "".join(chars)
    return "\n".join(lines) + "\n"


def _readers() -> dict[str, Callable[[Path], object]]:
    from orchestration.campaign.load import load as load_campaign
    from orchestration.run.runner import prepare
    from topologies import load_topology

    return {"topology": load_topology, "experiment": prepare, "campaign": load_campaign}


def run(seed: int, mutants: int, budget_s: float, slow_s: float,
        only: int | None = None) -> dict[str, object]:
    """Try ``mutants`` mutants (or until ``budget_s``); returns the counts and findings."""
    readers = _readers()
    counts = {"mutants": 0, "accepted": 0, "refused": 0, "tracebacks": 0, "hangs": 0}
    findings: list[dict[str, object]] = []
    t_end = time.monotonic() + budget_s
    kinds = sorted(SEEDS)
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(mutants):
            if time.monotonic() > t_end:
                break
            if only is not None and n != only:
                continue
            rng = random.Random(f"{seed}:{n}")
            kind = rng.choice(kinds)
            src = rng.choice(SEEDS[kind])
            text = src.read_text()
            for _ in range(rng.randint(1, 4)):
                text = _mutate(text, rng)
            # in a tree of its own beside links to the other top folders, so that relative
            # references resolve and nothing is ever written into the checkout
            rel = src.relative_to(ROOT)
            path = Path(tmp) / str(n) / rel
            path.parent.mkdir(parents=True)
            path.write_text(text)
            _link_neighbours(Path(tmp) / str(n), rel.parts[0])
            t0 = time.monotonic()
            try:
                readers[kind](path)
                counts["accepted"] += 1
            except SpecError:
                counts["refused"] += 1
            except Exception:  # noqa: BLE001 - a finding
                counts["tracebacks"] += 1
                findings.append({"n": n, "kind": kind, "src": str(src.relative_to(ROOT)),
                                 "error": traceback.format_exc(limit=3)[-600:]})
            if time.monotonic() - t0 > slow_s:
                counts["hangs"] += 1
                findings.append({"n": n, "kind": kind, "slow_s": time.monotonic() - t0})
            counts["mutants"] += 1
    return {**counts, "seed": seed, "findings": findings[:10]}


def _link_neighbours(tree: Path, own: str) -> None:
    """Links ``tree/<folder>`` -> the checkout's folder, for every folder but ``own`` (the
    mutant's, a real directory)."""
    for folder in ("topologies", "examples", "workloads", "tests"):
        if folder != own:
            (tree / folder).symlink_to(ROOT / folder)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--mutants", type=int, default=2000)
    ap.add_argument("--budget-s", type=float, default=300.0)
    ap.add_argument("--slow-s", type=float, default=10.0, help="a mutant slower is a hang")
    ap.add_argument("--only", type=int, default=None, help="replay mutant N of the seed")
    a = ap.parse_args()
    out = run(a.seed, a.mutants, a.budget_s, a.slow_s, a.only)
    print(json.dumps(out))
    sys.exit(1 if out["tracebacks"] or out["hangs"] else 0)


if __name__ == "__main__":
    main()
