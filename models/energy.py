"""Energy profiles: accelerators' board power and network ports' power, one data file.

``models/data/energy_profiles.yaml`` holds ``accelerators`` (name -> ``busy_w``, ``idle_w``,
``peak_flops_per_s``, ``source``) and ``networks`` (name -> ``host_nic``, ``switch_port``,
``dci``, each ``idle_w``, ``pj_per_bit``, ``source``). An experiment selects one of each with
``energy: {accelerator: NAME, network: NAME}`` (:class:`EnergySelection`; default
``a100_sxm`` / ``default``). How analysis applies them: analysis/metrics/energy.py.

Errors: :func:`load_profiles` raises :class:`SpecError` naming the file, key path and line
of every bad entry (a missing ``source``, a negative power); :func:`check_selection` names
the experiment key (``energy.accelerator``) of an unknown profile, with the known ones.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated

from pydantic import ConfigDict, Field, ValidationError

from models.errors import SpecError, SpecIssue
from models.specfile import issues_from_validation, load_yaml, with_lines
from models.unit_fields import SpecModel

__all__ = ["PROFILES_FILE", "AcceleratorProfile", "PortProfile", "NetworkProfile",
           "EnergyProfiles", "EnergySelection", "load_profiles", "check_selection",
           "selected"]

PROFILES_FILE = Path(__file__).resolve().parent / "data" / "energy_profiles.yaml"
_Forbid = ConfigDict(extra="forbid")
_Watts = Annotated[float, Field(ge=0, le=1e6)]


class AcceleratorProfile(SpecModel):
    """One accelerator: board power computing (``busy_w``, W) and waiting (``idle_w``, W),
    dense peak ``peak_flops_per_s`` (FLOP/s, used for MFU when the workload states none)."""

    model_config = _Forbid
    busy_w: _Watts
    idle_w: _Watts
    peak_flops_per_s: Annotated[float, Field(gt=0)]
    source: Annotated[str, Field(min_length=1)]


class PortProfile(SpecModel):
    """One kind of network port: ``idle_w`` (W, drawn while the lab is up) and ``pj_per_bit``
    (pJ for each bit the port sends)."""

    model_config = _Forbid
    idle_w: _Watts
    pj_per_bit: Annotated[float, Field(ge=0, le=1e6)]
    source: Annotated[str, Field(min_length=1)]


class NetworkProfile(SpecModel):
    """Ports by kind: a host's NIC, a switch or router port, a DCI transponder."""

    model_config = _Forbid
    host_nic: PortProfile
    switch_port: PortProfile
    dci: PortProfile


class EnergyProfiles(SpecModel):
    """The profile file: accelerators and networks by name."""

    model_config = _Forbid
    accelerators: Annotated[dict[str, AcceleratorProfile], Field(min_length=1)]
    networks: Annotated[dict[str, NetworkProfile], Field(min_length=1)]


class EnergySelection(SpecModel):
    """An experiment's ``energy:`` key: which accelerator and network profile analysis uses."""

    model_config = _Forbid
    accelerator: str = "a100_sxm"
    network: str = "default"


@functools.lru_cache(maxsize=4)
def _load(path: str) -> EnergyProfiles:
    doc, dups = load_yaml(path, "energy profiles: a mapping with accelerators and networks")
    if dups:
        raise SpecError(dups)
    try:
        return EnergyProfiles.model_validate(doc)
    except ValidationError as exc:
        raise with_lines(SpecError(issues_from_validation(exc, EnergyProfiles, path)),
                         doc, path) from None


def load_profiles(path: str | Path = PROFILES_FILE) -> EnergyProfiles:
    """The validated profiles of ``path`` (cached). Raises SpecError naming file, key, line."""
    return _load(str(path))


def check_selection(sel: EnergySelection, path: str | Path = PROFILES_FILE,
                    source: str | None = None) -> list[SpecIssue]:
    """Issues (key path ``energy.accelerator`` / ``energy.network`` of experiment ``source``)
    for each name of ``sel`` that the profile file lacks; empty when both exist."""
    p = load_profiles(path)
    out = []
    for key, known in (("accelerator", p.accelerators), ("network", p.networks)):
        name = getattr(sel, key)
        if name not in known:
            out.append(SpecIssue(f"unknown {key} profile {name!r} (known: "
                                 f"{', '.join(sorted(known))}; in {path})", file=source,
                                 key_path=("energy", key)))
    return out


def selected(sel: EnergySelection | dict | None, path: str | Path = PROFILES_FILE
             ) -> tuple[AcceleratorProfile, NetworkProfile, dict[str, str]]:
    """The profiles ``sel`` names (None: the defaults) and the names used. Raises SpecError
    for an unknown name."""
    s = sel if isinstance(sel, EnergySelection) else EnergySelection.model_validate(sel or {})
    issues = check_selection(s, path)
    if issues:
        raise SpecError(issues)
    p = load_profiles(path)
    return (p.accelerators[s.accelerator], p.networks[s.network],
            {"accelerator": s.accelerator, "network": s.network})
