"""The JSON Schema of the topology file format, generated from the pydantic models.

The committed copy lives at ``topologies/schema/topology.schema.json``; regenerate it with
``aitb topo schema --write`` or ``python -m topologies.schema_gen`` after changing
:mod:`topologies.spec` (a unit test fails while the copy is stale).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from topologies.spec import TopologySpec

__all__ = ["SCHEMA_PATH", "topology_schema", "schema_text", "write_schema"]

SCHEMA_PATH = Path(__file__).parent / "schema" / "topology.schema.json"
SCHEMA_ID = "https://aitb.invalid/schema/topology.schema.json"


def topology_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a topology file, as a dict."""
    schema = TopologySpec.model_json_schema(mode="validation")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID,
            "title": "aitb topology", **schema}


def schema_text() -> str:
    """The schema as the committed file holds it (sorted keys, 2-space indent, final newline)."""
    return json.dumps(topology_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_schema(path: Path = SCHEMA_PATH) -> Path:
    """Write the schema to ``path`` (default: the committed copy). Returns the path."""
    path.write_text(schema_text(), encoding="utf-8")
    return path


if __name__ == "__main__":  # pragma: no cover
    print(write_schema(Path(sys.argv[1]) if len(sys.argv) > 1 else SCHEMA_PATH))
