"""The checkable rest of an invalid experiment: so that one ``aitb run --check`` reports the
problems of the experiment file *and* of the topology and workload files it names, instead of
one file's per attempt.

:func:`salvage` takes the experiment's mapping and the issues its validation found, and
returns the same mapping without the keys (and workload entries) those issues are about: a
mapping that validates, with defaults where a bad key was, that the runner then checks against
the topology as it checks a valid experiment (orchestration.run.runner.prepare_doc). The
issues of that check point at the kept workload entries by their index in the reduced list;
:meth:`Salvaged.restore` puts back the index (and the line) of the file.

What cannot be checked is said, not guessed: without a valid ``topology`` key there is no
topology to check (a note at ``topology``); ``events`` name workloads, so they are left out
once a workload entry is (a note at ``events``). Pure; reads nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from models.errors import SpecError, SpecIssue
from models.specfile import line_of, with_lines

__all__ = ["Salvaged", "salvage", "UNCHECKED_NAME"]

UNCHECKED_NAME = "unchecked"  # the stand-in for an invalid ``name`` (it only names a folder)


@dataclass(frozen=True)
class Salvaged:
    """The checkable part of an experiment: ``doc`` (None: nothing beyond the experiment file
    can be checked), the original indices of its workload entries (``keep``; empty: check the
    topology alone) and ``notes``, the issues that say what was left unchecked and why."""

    doc: dict[str, Any] | None
    keep: tuple[int, ...]
    notes: tuple[SpecIssue, ...]

    def restore(self, issues: Sequence[SpecIssue], source: str, original: Any
                ) -> list[SpecIssue]:
        """``issues`` found in :attr:`doc` with the workload indices of the file and the lines
        of ``original`` (the experiment's ruamel document) where the reduced one had none."""
        out = []
        for i in issues:
            path, line = i.key_path, i.line
            if (i.file == source and len(path) > 1 and path[0] == "workloads"
                    and isinstance(path[1], int) and 0 <= path[1] < len(self.keep)):
                path, line = ("workloads", self.keep[path[1]], *path[2:]), None
            out.append(SpecIssue(i.message, file=i.file, key_path=path, line=line))
        return with_lines(SpecError(out), original, source).issues


def salvage(doc: Mapping[str, Any], issues: Sequence[SpecIssue], source: str) -> Salvaged:
    """The part of the experiment mapping ``doc`` (from ``source``) that ``issues`` (its
    validation's, each with a key path in ``source``) leave valid; see the module docstring."""
    own = [i for i in issues if i.file in (None, source)]
    top = {i.key_path[0] for i in own if i.key_path}
    if any(not i.key_path for i in own) or "topology" in top:
        where = ("topology",) if "topology" in doc else ()
        return Salvaged(None, (), (SpecIssue(
            "the topology (and the workloads on it) was not checked: it is named by the "
            "experiment's topology key, which must be valid first (see above)", file=source,
            key_path=where, line=line_of(doc, where) if where else None),))
    entries = doc.get("workloads")
    entries = list(entries) if isinstance(entries, list) else []
    bad = {i.key_path[1] for i in own if i.key_path[0] == "workloads"
           and len(i.key_path) > 1 and isinstance(i.key_path[1], int)}
    whole = any(i.key_path == ("workloads",) for i in own)
    keep = () if whole else tuple(j for j in range(len(entries)) if j not in bad)
    reduced = {k: v for k, v in doc.items() if k not in top}
    if "name" in top:
        reduced["name"] = UNCHECKED_NAME
    notes: list[SpecIssue] = []
    if len(keep) < len(entries) or whole:
        if doc.get("events"):
            notes.append(SpecIssue("events were not checked: they name workloads, and a "
                                   "workload entry has errors (see above)", file=source,
                                   key_path=("events",), line=line_of(doc, ("events",))))
        reduced.pop("events", None)
    kept = [entries[j] for j in keep]
    if keep and keep[0] and isinstance(kept[0], Mapping) and \
            kept[0].get("start") == "with_previous":  # its workload before it was left out
        kept[0] = {k: v for k, v in kept[0].items() if k != "start"}
    reduced["workloads"] = kept
    return Salvaged(reduced, keep, tuple(notes))
