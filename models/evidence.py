"""A hash chain over the files a verdict rests on (pure apart from reading the files).

Each link of the chain names one file (its path relative to the run directory) and its
SHA-256; ``chain`` is SHA-256 over the previous link's ``chain`` (64 zero hex digits for the
first), the name and the file's digest, so changing, removing, adding or reordering any
file changes the head. :func:`verify_chain` recomputes it from the files on disk.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["GENESIS", "file_sha256", "build_chain", "verify_chain"]

GENESIS = "0" * 64
_CHUNK = 1 << 20


def file_sha256(path: Path) -> str:
    """SHA-256 (hex) of the file at ``path``, read in 1 MiB chunks. Raises OSError."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _link(prev: str, name: str, digest: str) -> str:
    return hashlib.sha256(f"{prev}\n{name}\n{digest}".encode()).hexdigest()


def build_chain(run_dir: Path, names: Sequence[str]) -> dict[str, Any]:
    """The chain over ``names`` (paths relative to ``run_dir``, in the given order):
    ``{"algorithm": "sha256", "links": [{name, sha256, chain}], "head": ...}``. Raises
    OSError naming a file that cannot be read."""
    links, prev = [], GENESIS
    for name in names:
        digest = file_sha256(run_dir / name)
        prev = _link(prev, name, digest)
        links.append({"name": name, "sha256": digest, "chain": prev})
    return {"algorithm": "sha256", "links": links, "head": prev}


def verify_chain(run_dir: Path, chain: dict[str, Any]) -> list[str]:
    """What no longer matches between ``chain`` and the files under ``run_dir``: one message
    per changed or missing file, and one when the links do not lead to ``head``; [] when
    everything matches."""
    problems, prev = [], GENESIS
    for link in chain.get("links", []):
        name = link["name"]
        try:
            digest = file_sha256(run_dir / name)
        except OSError as exc:
            problems.append(f"{name}: cannot be read ({exc.strerror or exc})")
            digest = link["sha256"]
        if digest != link["sha256"]:
            problems.append(f"{name}: SHA-256 {digest} differs from the recorded "
                            f"{link['sha256']}")
        prev = _link(prev, name, link["sha256"])
        if prev != link["chain"]:
            problems.append(f"{name}: chain link {link['chain']} is not the hash of its "
                            "predecessor, name and digest")
    if prev != chain.get("head"):
        problems.append(f"the links lead to {prev}, not to the recorded head {chain.get('head')}")
    return problems
