"""The JSON Schema of the campaign file format, generated from the pydantic models (as
topologies/schema_gen.py does for topology files).

The committed copy lives at ``aitb/orchestration/schema/campaign.schema.json``; regenerate it
with ``python -m aitb.orchestration.campaign_schema`` after changing
:mod:`aitb.orchestration.campaign_spec` (a unit test fails while the copy is stale).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from aitb.orchestration.campaign_spec import CampaignSpec

__all__ = ["SCHEMA_PATH", "campaign_schema", "schema_text", "write_schema"]

SCHEMA_PATH = Path(__file__).parent / "schema" / "campaign.schema.json"
SCHEMA_ID = "https://aitb.invalid/schema/campaign.schema.json"


def campaign_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a campaign file, as a dict."""
    schema = CampaignSpec.model_json_schema(mode="validation")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID,
            "title": "aitb campaign", **schema}


def schema_text() -> str:
    """The schema as the committed file holds it (sorted keys, 2-space indent, final newline)."""
    return json.dumps(campaign_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_schema(path: Path = SCHEMA_PATH) -> Path:
    """Write the schema to ``path`` (default: the committed copy). Returns the path."""
    path.write_text(schema_text(), encoding="utf-8")
    return path


if __name__ == "__main__":  # pragma: no cover
    print(write_schema(Path(sys.argv[1]) if len(sys.argv) > 1 else SCHEMA_PATH))
