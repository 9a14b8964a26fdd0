"""Bringing a run directory back to the campaign's results folder from the machine that did
the run.

Where the worker sees the driver's results folder (the same machine, or a shared file system)
it writes the run directory in place: :func:`mark_results` leaves a random token in the
campaign folder and :func:`sees_results` on the worker finds it there. Elsewhere the worker
writes into a scratch folder, :func:`pack` turns the run directory into a gzip'd tar (bytes,
returned through the executor: Ray's object store for Ray), and the driver :func:`unpack`\\ s it
into ``<results>/<campaign>/<point>/``.
"""

from __future__ import annotations

import io
import secrets
import tarfile
from pathlib import Path, PurePosixPath

__all__ = ["TOKEN_FILE", "mark_results", "sees_results", "pack", "unpack"]

TOKEN_FILE = ".executor-token"


def mark_results(root: Path) -> str:
    """Write a fresh random token into ``root/.executor-token`` and return it."""
    token = secrets.token_hex(16)
    (root / TOKEN_FILE).write_text(token, encoding="utf-8")
    return token


def sees_results(root: Path, token: str) -> bool:
    """Whether this machine sees the driver's campaign folder ``root`` (its token is there)."""
    try:
        return (root / TOKEN_FILE).read_text(encoding="utf-8") == token
    except OSError:
        return False


def pack(base: Path, rel: str) -> bytes:
    """The directory ``base/rel`` as gzip'd tar bytes, its members named ``rel/...``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(base / rel, arcname=rel)
    return buf.getvalue()


def unpack(data: bytes, base: Path, rel: str) -> Path:
    """Extract tar bytes made by :func:`pack` into ``base`` and return ``base/rel``. Raises
    ValueError (nothing written) when a member lies outside ``rel`` or is not a plain file or
    directory (a link or device could write elsewhere)."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        members = tar.getmembers()
        top = PurePosixPath(rel)
        for m in members:
            path = PurePosixPath(m.name)
            if path.is_absolute() or ".." in path.parts or \
                    (path != top and top not in path.parents):
                raise ValueError(f"archive member {m.name!r} lies outside {rel!r}")
            if not (m.isfile() or m.isdir()):
                raise ValueError(f"archive member {m.name!r} is not a file or directory")
        base.mkdir(parents=True, exist_ok=True)
        tar.extractall(base, members=members, filter="data")
    return base / rel
