"""Encryption cost of a run (pure, reads a run directory): flow and collective completion
times and CPU seconds per GB, with the TLS facts the flows carry (models.records.FlowRecord:
``send_cpu_s``, ``recv_cpu_s``, ``tls_cipher``, ``tls_handshake_s``).

Definitions (TCP flows of the workloads, background flows excluded):
- ``fct_s_mean`` and ``fct_s_p50``: mean and median FCT (s);
- ``cct_s_mean``: mean CCT of the collectives (collectives.jsonl, s);
- ``cpu_s_per_gb``: (sum of send_cpu_s + recv_cpu_s) / (sum of size_bytes / 1e9): the CPU
  the data path's threads spent per GB (1e9 bytes) of payload, both ends together; with TLS
  this includes encryption and decryption (flows without CPU readings are left out);
- ``handshake_s_mean``: mean TLS handshake time over the connections (one per
  (src_ip, sport)), None without TLS.
:func:`compare` puts a plain and an encrypted run side by side with the ratios.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from models.rundir import read_jsonl

__all__ = ["encryption_summary", "compare"]



def encryption_summary(run_dir: Path) -> dict[str, Any]:
    """The module docstring's numbers for ``run_dir``; ``encryption`` is ``tls`` when any
    flow carries a cipher, else ``none``. Reads only."""
    flows = [f for f in read_jsonl(run_dir / "flows.jsonl")
             if f.get("kind") == "tcp" and not f.get("background") and f.get("fct_s")]
    colls = read_jsonl(run_dir / "collectives.jsonl")
    timed = [f for f in flows if f.get("send_cpu_s") is not None
             and f.get("recv_cpu_s") is not None]
    cpu = sum(f["send_cpu_s"] + f["recv_cpu_s"] for f in timed)
    gb = sum(f["size_bytes"] for f in timed) / 1e9
    conns = {(f["src_ip"], f["sport"]): f["tls_handshake_s"] for f in flows
             if f.get("tls_handshake_s") is not None}
    ciphers = sorted({f["tls_cipher"] for f in flows if f.get("tls_cipher")})
    fcts = [f["fct_s"] for f in flows]
    return {"encryption": "tls" if ciphers else "none", "ciphers": ciphers,
            "flows": len(flows), "bytes": sum(f["size_bytes"] for f in flows),
            "fct_s_mean": statistics.fmean(fcts) if fcts else None,
            "fct_s_p50": statistics.median(fcts) if fcts else None,
            "cct_s_mean": statistics.fmean(c["cct_s"] for c in colls) if colls else None,
            "cpu_s_per_gb": cpu / gb if gb else None,
            "handshake_s_mean": statistics.fmean(conns.values()) if conns else None,
            "connections": len(conns)}


def compare(plain_dir: Path, encrypted_dir: Path) -> dict[str, Any]:
    """Both summaries and ``ratio`` (encrypted / plain) of FCT, CCT and CPU per GB (None
    where either side has no value)."""
    a, b = encryption_summary(plain_dir), encryption_summary(encrypted_dir)
    keys = ("fct_s_mean", "fct_s_p50", "cct_s_mean", "cpu_s_per_gb")
    return {"plain": a, "encrypted": b,
            "ratio": {k: (b[k] / a[k] if a[k] and b[k] is not None else None) for k in keys}}
