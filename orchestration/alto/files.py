"""The run directory's ALTO documents (``alto/``): the lab's network map and one cost map
per metric, derived from the scaled plan by models.alto (RFC 7285 shapes).

Files: ``alto/networkmap.json`` and ``alto/costmap-<metric>.json`` (metrics
models.alto.COST_METRICS), plus ``alto/index.json`` naming each file with its media type and
the PID of every host, so a consumer needs no knowledge of aitb to read them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from models.alto import (
    MEDIA_COSTMAP,
    MEDIA_NETWORKMAP,
    AltoMaps,
    PidBy,
    alto_maps,
    costmap_filename,
)
from models.plan import LabPlan
from models.rundir import write_json_atomic

__all__ = ["write_alto", "alto_index"]


def alto_index(maps: AltoMaps) -> dict[str, Any]:
    """``alto/index.json``'s content: file name -> media type (and cost type), host -> PID."""
    files: dict[str, Any] = {"networkmap.json": {"media-type": MEDIA_NETWORKMAP}}
    for metric, doc in maps.cost_maps.items():
        files[costmap_filename(metric)] = {"media-type": MEDIA_COSTMAP,
                                           "cost-type": doc["meta"]["cost-type"]}
    return {"resources": files, "pids": dict(sorted(maps.pids.items()))}


def write_alto(run_dir: Path, plan: LabPlan, by: PidBy = "site") -> AltoMaps:
    """Write ``run_dir/alto/`` (module docstring) for ``plan``; returns the maps. Raises
    models.paths.PathError when a host cannot reach another (the plan has a routing hole)."""
    maps = alto_maps(plan, by)
    out = run_dir / "alto"
    out.mkdir(exist_ok=True)
    write_json_atomic(out / "networkmap.json", maps.network_map)
    for metric, doc in maps.cost_maps.items():
        write_json_atomic(out / costmap_filename(metric), doc)
    write_json_atomic(out / "index.json", alto_index(maps))
    return maps
