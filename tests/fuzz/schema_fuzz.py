"""Schema-driven fuzzer of the input readers: walks every key of every object of the JSON
Schemas of topology, experiment and campaign files (topologies/schema, orchestration/run/schema;
generated from the pydantic models), starting from small shipped example files, and gives each
key each wrong type (string, int, negative int, float, bool, null, list, mapping, a NUL
character inside a string, 1e300, 2**64, .inf) and each boundary value (min-1, min, max, max+1,
lengths and item counts likewise, where the schema has bounds). Keys absent from the example are
added; a list item with a ``kind`` discriminator is also replaced by an item of every other
kind, each of whose keys gets each wrong type. Each mutant is written as YAML to a temporary
tree and read the way ``aitb run --check`` reads it (orchestration.run.runner.prepare,
topologies.load_topology, orchestration.campaign.load.load), in-process.

A mutant passes, or is refused with a SpecError (or another AitbError of exit code 2) whose
every issue names the file, a key path and a line. Anything else is a defect, counted by kind:
``traceback`` (any other exception), ``hang`` (longer than ``--slow-s``, interrupted by
SIGALRM), ``no_file`` / ``no_line`` / ``no_key`` (an issue without it), ``wrong_exit_code``,
``created`` (a file appeared in the mutant's folder or the working directory). A refusal none
of whose issues is at the mutated key, a part of it, a key below it or (for a key of a mapping)
a sibling is counted apart as ``elsewhere``, with its findings: often right (a node made a
host leaves others unreachable; a renamed workload orphans the events naming it), sometimes
a wrong location to fix (a profile's key reported at the generated links that use it).

    .venv/bin/python tests/fuzz/schema_fuzz.py                  # every mutant (> 5000)
    .venv/bin/python tests/fuzz/schema_fuzz.py --sample 300 --seed 7
    .venv/bin/python tests/fuzz/schema_fuzz.py --only 1234 -v   # replay one, print the mutant

prints one JSON line: mutants, passed, refused_correctly, defects by kind and the first
findings (each with its index for ``--only``). tests/unit/test_schema_fuzz.py runs a seeded
slice in the unit tier.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))

from models.errors import AitbError, SpecError, format_key_path  # noqa: E402

SCHEMAS = {
    "topology": ROOT / "topologies" / "schema" / "topology.schema.json",
    "experiment": ROOT / "orchestration" / "run" / "schema" / "experiment.schema.json",
    "campaign": ROOT / "orchestration" / "run" / "schema" / "campaign.schema.json",
}
# small, fast example files that together hold every workload kind with an example, events,
# alto, transport, capture, timeouts, explicit nodes/links and generated topologies
BASES = {
    "topology": ["topologies/examples/single_switch.yaml", "topologies/examples/two_dc.yaml",
                 "topologies/examples/dual_homed.yaml", "topologies/examples/edge_star.yaml",
                 "topologies/examples/incast.yaml", "topologies/examples/ovs_leaf_spine.yaml"],
    "experiment": ["examples/ring_allreduce_quick.yaml", "examples/incast.yaml",
                   "examples/gossip_fl.yaml", "examples/fedavg.yaml",
                   "examples/hierarchical_fl.yaml", "examples/inference.yaml",
                   "examples/alto_live.yaml", "examples/dci_failover.yaml",
                   "examples/alto_ring_order.yaml", "examples/data_locality.yaml",
                   "examples/tls_allreduce.yaml"],
    "campaign": ["examples/campaigns/dci_delay.yaml"],
}
WRONG: list[tuple[str, Any]] = [
    ("string", "x"), ("int", 7), ("negative_int", -1), ("float", 0.5), ("bool", True),
    ("null", None), ("list", [1, "a"]), ("mapping", {"a": 1}), ("nul", "a\x00b"),
    ("huge_float", 1e300), ("huge_int", 2 ** 64), ("inf", float("inf")),
    ("raw_nul", "RAW-NUL-MARKER"),  # written as a NUL byte in the text, not as an escape
]
RAW_NUL_MARKER, RAW_NUL = "RAW-NUL-MARKER", "a\x00b"
MAX_ITEMS_WALKED = 3  # list items walked per list (the others are alike)

Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class Mutant:
    """One mutant: the base file, the key path changed, what it became (a label)."""

    kind: str
    base: str
    path: Path_
    label: str
    value: Any
    replace_item: bool = False  # ``value`` is a whole list item put at ``path``


class Schema:
    """A JSON Schema document with ``$ref`` resolution."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc

    def resolve(self, node: dict[str, Any]) -> dict[str, Any]:
        seen = 0
        while isinstance(node, dict) and "$ref" in node and seen < 50:
            ref = node["$ref"]
            target: Any = self.doc
            for part in ref.lstrip("#/").split("/"):
                target = target[part]
            node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
            seen += 1
        return node

    def alternatives(self, node: dict[str, Any]) -> list[dict[str, Any]]:
        """The resolved alternatives of ``node`` (anyOf/oneOf/allOf flattened), or [node]."""
        node = self.resolve(node)
        alts = node.get("anyOf") or node.get("oneOf") or node.get("allOf")
        if not alts:
            return [node]
        out: list[dict[str, Any]] = []
        for a in alts:
            out.extend(self.alternatives(a))
        return out

    def object_for(self, node: dict[str, Any], value: dict[str, Any]) -> dict[str, Any] | None:
        """The object schema among ``node``'s alternatives that ``value`` (a mapping) meets:
        by its discriminator (``kind``) when there is one, else the first with properties."""
        node = self.resolve(node)
        disc = node.get("discriminator")
        if disc and isinstance(value.get(disc["propertyName"]), str):
            ref = disc["mapping"].get(value[disc["propertyName"]])
            if ref:
                return self.resolve({"$ref": ref})
        for alt in self.alternatives(node):
            if "properties" in alt or alt.get("type") == "object":
                return alt
        return None

    def items_of(self, node: dict[str, Any]) -> dict[str, Any] | None:
        for alt in self.alternatives(node):
            if alt.get("type") == "array" and isinstance(alt.get("items"), dict):
                return alt["items"]
        return None


def _boundaries(schema: Schema, node: dict[str, Any], current: Any) -> list[tuple[str, Any]]:
    """Boundary values of ``node`` (min-1, min, max, max+1 of numbers, lengths, item counts),
    plus every enum value."""
    out: list[tuple[str, Any]] = []
    for alt in schema.alternatives(node):
        integer = alt.get("type") == "integer"
        step = 1 if integer else 0.5
        for key in ("minimum", "exclusiveMinimum"):
            if key in alt:
                b = alt[key]
                out += [(f"{key}-1", b - step), (key, b)]
                if key == "exclusiveMinimum":
                    out.append((f"{key}+", b + (1 if integer else 1e-9)))
        for key in ("maximum", "exclusiveMaximum"):
            if key in alt:
                b = alt[key]
                out += [(key, b), (f"{key}+1", b + step)]
        for key, sign in (("minLength", -1), ("maxLength", 1)):
            if key in alt:
                n = alt[key]
                out += [(key, "a" * n), (f"{key}{sign:+d}", "a" * max(0, n + sign))]
        for key, sign in (("minItems", -1), ("maxItems", 1)):
            if key in alt:
                n = alt[key]
                item = current[0] if isinstance(current, list) and current else "a"
                out += [(key, [copy.deepcopy(item) for _ in range(n)]),
                        (f"{key}{sign:+d}", [copy.deepcopy(item) for _ in range(max(0, n + sign))])]
        for v in alt.get("enum", []):
            out.append(("enum", v))
        if "const" in alt:
            out.append(("const", alt["const"]))
    return out


def _targets(schema: Schema, value: Any, node: dict[str, Any], path: Path_
             ) -> Iterator[tuple[Path_, dict[str, Any], Any, bool]]:
    """(path, schema node, current value or a sentinel, present) of every key below
    ``path``, the keys absent from ``value`` included."""
    if isinstance(value, dict):
        obj = schema.object_for(node, value)
        props = (obj or {}).get("properties", {})
        extra = (obj or {}).get("additionalProperties")
        for key, sub in props.items():
            if key in value:
                yield (*path, key), sub, value[key], True
                yield from _targets(schema, value[key], sub, (*path, key))
            else:
                yield (*path, key), sub, None, False
                yield from _absent_object(schema, sub, (*path, key))
        for key in value:
            if key not in props and isinstance(key, str):
                sub = extra if isinstance(extra, dict) else {}
                yield (*path, key), sub, value[key], True
                yield from _targets(schema, value[key], sub, (*path, key))
    elif isinstance(value, list):
        items = schema.items_of(node) or {}
        for i, item in enumerate(value[:MAX_ITEMS_WALKED]):
            yield (*path, i), items, item, True
            yield from _targets(schema, item, items, (*path, i))


def _absent_object(schema: Schema, node: dict[str, Any], path: Path_
                   ) -> Iterator[tuple[Path_, dict[str, Any], Any, bool]]:
    """An absent key whose value is an object (``trace``, ``alto``...): its own keys, each
    added alone to an empty mapping (one level; deeper objects are walked when present)."""
    obj = next((a for a in schema.alternatives(node) if a.get("properties")), None)
    if obj is None or obj.get("discriminator"):
        return
    for key, sub in obj["properties"].items():
        yield (*path, key), sub, None, False


def _kind_swaps(schema: Schema, value: Any, node: dict[str, Any], path: Path_
                ) -> Iterator[tuple[Path_, str, dict[str, Any]]]:
    """For a list item of a discriminated union: items of every kind, bare and with each of
    that kind's keys given each wrong type (and its boundary values)."""
    if isinstance(value, dict):
        obj = schema.object_for(node, value)
        for key, sub in ((obj or {}).get("properties", {})).items():
            if key in value:
                yield from _kind_swaps(schema, value[key], sub, (*path, key))
    elif isinstance(value, list) and value:
        items = schema.items_of(node)
        disc = schema.resolve(items).get("discriminator") if items else None
        if disc and isinstance(value[0], dict):
            name = disc["propertyName"]
            for kind_value, ref in sorted(disc["mapping"].items()):
                kobj = schema.resolve({"$ref": ref})
                yield (*path, 0), f"kind={kind_value}", {name: kind_value}
                for key, sub in kobj.get("properties", {}).items():
                    if key == name:
                        continue
                    for label, bad in WRONG + _boundaries(schema, sub, None):
                        yield ((*path, 0), f"kind={kind_value}.{key}={label}",
                               {name: kind_value, key: bad})
        for i, item in enumerate(value[:MAX_ITEMS_WALKED]):
            yield from _kind_swaps(schema, item, items or {}, (*path, i))


def mutants() -> list[Mutant]:
    """Every mutant of every base file, in a fixed order (the index is ``--only``'s)."""
    out: list[Mutant] = []
    swapped: set[tuple[str, Path_, str]] = set()  # added keys and kind swaps: once per kind
    for kind, bases in BASES.items():
        schema = Schema(json.loads(SCHEMAS[kind].read_text()))
        for base in bases:
            doc = yaml.safe_load((ROOT / base).read_text())
            for path, node, current, present in _targets(schema, doc, schema.doc, ()):
                for label, bad in WRONG + _boundaries(schema, node, current):
                    if not present:  # an added key: once per kind of file, not per base
                        if (kind, path, label) in swapped:
                            continue
                        swapped.add((kind, path, label))
                    out.append(Mutant(kind, base, path, label, bad))
            for path, label, item in _kind_swaps(schema, doc, schema.doc, ()):
                if (kind, path, label) in swapped:
                    continue
                swapped.add((kind, path, label))
                out.append(Mutant(kind, base, path, label, item, replace_item=True))
    return out


def apply(doc: Any, m: Mutant) -> Any:
    """A copy of ``doc`` with ``m`` applied (a missing key is added)."""
    doc = copy.deepcopy(doc)
    target = doc
    for part in m.path[:-1]:
        if isinstance(target, dict) and part not in target:
            target[part] = {}  # a key of an absent object (_absent_object)
        target = target[part]
    target[m.path[-1]] = copy.deepcopy(m.value)
    return doc


def _readers() -> dict[str, Callable[[Path], object]]:
    from orchestration.campaign.load import load as load_campaign
    from orchestration.run.runner import prepare
    from topologies import load_topology

    return {"topology": load_topology, "experiment": prepare, "campaign": load_campaign}


class _Hang(BaseException):
    """Raised by SIGALRM inside a check that took too long."""


def _alarm(_signum: int, _frame: object) -> None:
    raise _Hang


def _listing(*folders: Path) -> set[str]:
    out: set[str] = set()
    for folder in folders:
        for dirpath, dirnames, filenames in os.walk(folder):
            out.update(os.path.join(dirpath, n) for n in dirnames + filenames)
    return out


def _related(a: Path_, b: Path_) -> bool:
    n = min(len(a), len(b))
    return tuple(a[:n]) == tuple(b[:n])


def check(m: Mutant, reader: Callable[[Path], object], tree: Path, slow_s: float
          ) -> tuple[str, str]:
    """Writes ``m`` under ``tree`` and reads it: ("passed" | "refused" | a defect kind,
    detail)."""
    doc = apply(yaml.safe_load((ROOT / m.base).read_text()), m)
    rel = Path(m.base)
    path = tree / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=False, width=10_000)
    path.write_text(text.replace(RAW_NUL_MARKER, RAW_NUL))
    for folder in ("topologies", "examples", "workloads", "tests"):
        if folder != rel.parts[0]:
            (tree / folder).symlink_to(ROOT / folder)
    before = _listing(tree / rel.parts[0], Path.cwd())  # the cwd: an empty folder of its own
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, slow_s)
    try:
        reader(path)
        outcome = ("passed", "")
    except _Hang:
        outcome = ("hang", f"> {slow_s} s")
    except AitbError as exc:
        outcome = _judge(exc, m, path)
    except Exception:  # noqa: BLE001 - a finding
        outcome = ("traceback", traceback.format_exc(limit=-4)[-1500:])
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    if _listing(tree / rel.parts[0], Path.cwd()) != before:
        outcome = ("created", str(sorted(_listing(tree / rel.parts[0], Path.cwd()) - before)))
    return outcome


def _judge(exc: AitbError, m: Mutant, path: Path) -> tuple[str, str]:
    if exc.exit_code != 2:
        return "wrong_exit_code", f"{type(exc).__name__} exit {exc.exit_code}: {exc}"[:800]
    issues = getattr(exc, "issues", None)
    if not isinstance(exc, SpecError) or not issues:
        return "no_location", f"{type(exc).__name__}: {exc}"[:800]
    for i in issues:
        for attr, kind in (("file", "no_file"), ("line", "no_line"), ("key_path", "no_key")):
            if not getattr(i, attr):
                return kind, str(exc)[:800]
    # the mutated key, a part of it or a key below it; for a key inside a mapping, a sibling
    # too (a new kind: the other keys no longer fit; bad_loss: null beside a missing p)
    near = m.path[:-1] if len(m.path) >= 2 and not isinstance(m.path[-1], int) else m.path
    if m.kind != "campaign" and not any(
            i.file == str(path) and _related(i.key_path, near) for i in issues):
        return "elsewhere", f"mutated {format_key_path(m.path)}: {exc}"[:800]
    return "refused", ""


def run(sample: int | None = None, seed: int = 1, slow_s: float = 10.0,
        only: int | None = None, verbose: bool = False) -> dict[str, Any]:
    """Checks every mutant (or ``sample`` of them drawn with ``seed``, or only index
    ``only``); returns the counts and the first findings."""
    readers = _readers()
    everyone = mutants()
    indices = list(range(len(everyone)))
    if only is not None:
        indices = [only]
    elif sample is not None and sample < len(indices):
        indices = sorted(random.Random(seed).sample(indices, sample))
    counts: Counter[str] = Counter()
    findings: list[dict[str, Any]] = []
    cwd = Path.cwd()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="aitb-schema-fuzz-") as tmp:
        work = Path(tmp) / "cwd"
        work.mkdir()
        os.chdir(work)  # a results folder made by a reader would appear here
        try:
            for n in indices:
                m = everyone[n]
                tree = Path(tmp) / f"m{n}"
                tree.mkdir()
                outcome, detail = check(m, readers[m.kind], tree, slow_s)
                counts[outcome] += 1
                if verbose:
                    print(json.dumps({"n": n, "outcome": outcome, "detail": detail}, default=str))
                    print((tree / m.base).read_text())
                if outcome not in ("passed", "refused"):
                    findings.append({"n": n, "defect": outcome, "base": m.base,
                                     "key": format_key_path(m.path), "value": m.label,
                                     "detail": detail})
        finally:
            os.chdir(cwd)
    defects = {k: v for k, v in counts.items() if k not in ("passed", "refused", "elsewhere")}
    return {"mutants": sum(counts.values()), "passed": counts["passed"],
            "refused_correctly": counts["refused"], "defects": defects,
            "elsewhere": counts["elsewhere"],
            "elapsed_s": round(time.monotonic() - t0, 1), "total_available": len(everyone),
            "findings": findings}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample", type=int, default=None, help="check this many, drawn by seed")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--slow-s", type=float, default=10.0, help="a mutant slower is a hang")
    ap.add_argument("--only", type=int, default=None, help="replay mutant N")
    ap.add_argument("--findings", type=int, default=20, help="findings printed")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    out = run(a.sample, a.seed, a.slow_s, a.only, a.verbose)
    out["findings"] = out["findings"][:a.findings]
    print(json.dumps(out, default=str))
    sys.exit(1 if out["defects"] else 0)


if __name__ == "__main__":
    main()
