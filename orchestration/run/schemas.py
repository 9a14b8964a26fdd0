"""JSON Schemas of the experiment and campaign file formats, generated from their pydantic
models (as topologies/schema_gen.py does for topology files).

The committed copies live in ``orchestration/run/schema/`` (``experiment.schema.json``,
``campaign.schema.json``) for editors and other tools; regenerate them with
``python -m orchestration.run.schemas`` after changing :mod:`orchestration.run.experiment`
or :mod:`orchestration.campaign.spec` (a unit test fails while a copy is stale).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from orchestration.campaign.spec import CampaignSpec
from orchestration.run.experiment import ExperimentSpec

__all__ = ["KINDS", "schema", "schema_path", "schema_text", "write_schemas"]

SCHEMA_DIR = Path(__file__).parent / "schema"
KINDS: dict[str, type[BaseModel]] = {"experiment": ExperimentSpec, "campaign": CampaignSpec}


def schema(kind: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a ``kind`` file ("experiment" or "campaign").
    Raises KeyError for another kind."""
    body = KINDS[kind].model_json_schema(mode="validation")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"https://aitb.invalid/schema/{kind}.schema.json", "title": f"aitb {kind}",
            **body}


def schema_path(kind: str) -> Path:
    """Where the committed copy of ``kind``'s schema lives."""
    return SCHEMA_DIR / f"{kind}.schema.json"


def schema_text(kind: str) -> str:
    """The schema as the committed file holds it (sorted keys, 2-space indent, final newline)."""
    return json.dumps(schema(kind), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_schemas() -> list[Path]:
    """Write every committed copy; returns their paths. Side effect: files in SCHEMA_DIR."""
    out = []
    for kind in KINDS:
        schema_path(kind).write_text(schema_text(kind), encoding="utf-8")
        out.append(schema_path(kind))
    return out


if __name__ == "__main__":  # pragma: no cover
    for p in write_schemas():
        print(p)
