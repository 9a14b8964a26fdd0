"""Scratch that names its owner: ``aitb-<tag>-<pid>.<start>-<random>``, removed once the owner
is dead.

A process's own scratch (the controller's short socket directory, a campaign worker's task
folder, a probe's throwaway namespace) is not in any run's registry: its maker may have no
registry (a Ray worker, a controller without a lab) or not have one yet. The name carries the
owner instead, so the mark exists the instant the object does (``mkdtemp`` creates the
directory under its final name; nothing is written after it): the owner's pid and its start
time in clock ticks since boot (/proc/<pid>/stat field 22, proc(5)), which together name one
process even after the pid is reused. :func:`sweep` (``aitb clean``, and the teardown of a
dead owner's lab, testbed.lab.clean) removes the entries whose owner is dead, and nothing else:

- never one whose owner runs (pid alive with that start time);
- never a name of another shape. The ``.`` between pid and start time cannot occur in a lab
  namespace ``aitb-<run>-<node>`` (node names are ``[a-z0-9][a-z0-9_-]*``, models.plan);
- never a symbolic link, nor an entry another user owns (it was not made by this user's aitb).

Marks are read in the pid namespace of the sweeper; aitb starts no process in another pid
namespace that shares the host's temporary directory.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["pid_start_time", "pid_alive", "owner_mark", "OWNED_RE", "owned_name", "owner_of",
           "make_owned_dir", "owned_tempdir", "tag_or", "scratch_roots", "sweep", "owner_dead"]

# aitb-<tag>-<pid>.<start>-<suffix>: tag a run id or a kind word (a-z0-9, at most 16),
# suffix mkdtemp's random part (a-z, 0-9, _) or a hex token
OWNED_RE = re.compile(r"aitb-(?P<tag>[a-z0-9]{1,16})-(?P<pid>[1-9][0-9]{0,9})\."
                      r"(?P<start>[0-9]{1,20})-(?P<suffix>[a-z0-9_]{1,32})")
_TAG_RE = re.compile(r"[a-z0-9]{1,16}")


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat's fields after the command name (field 3 on, proc(5)), or None if
    there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()
    except (FileNotFoundError, ProcessLookupError):
        return None


def pid_start_time(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (/proc/<pid>/stat field 22, proc(5)),
    or None if there is no such process. Together with the pid it names a process uniquely."""
    fields = _stat_fields(pid)
    return None if fields is None else int(fields[19])


def pid_alive(pid: int, start: int | None) -> bool:
    """True if process ``pid`` exists, is not a zombie, and (if given) started at ``start``
    (one read of /proc/<pid>/stat: state and start time of the same process)."""
    fields = _stat_fields(pid)
    if fields is None or (start is not None and int(fields[19]) != start):
        return False
    return fields[0] != "Z"


def owner_mark(pid: int | None = None) -> str:
    """``<pid>.<start>`` of ``pid`` (default: this process). Raises ProcessLookupError for a
    pid that does not exist."""
    pid = os.getpid() if pid is None else pid
    start = pid_start_time(pid)
    if start is None:
        raise ProcessLookupError(f"no process {pid}")
    return f"{pid}.{start}"


def _check_tag(tag: str) -> str:
    if not _TAG_RE.fullmatch(tag):
        raise ValueError(f"owned scratch tag {tag!r}: expected 1-16 characters of [a-z0-9]")
    return tag


def tag_or(word: str, fallback: str) -> str:
    """``word`` if it can tag owned scratch (1-16 of [a-z0-9], e.g. a run id), else
    ``fallback``."""
    return word if _TAG_RE.fullmatch(word) else _check_tag(fallback)


def owned_name(tag: str, suffix: str) -> str:
    """``aitb-<tag>-<pid>.<start>-<suffix>`` for this process (e.g. a throwaway namespace's
    name). Raises ValueError for a tag or suffix :data:`OWNED_RE` would not match."""
    name = f"aitb-{_check_tag(tag)}-{owner_mark()}-{suffix}"
    if not OWNED_RE.fullmatch(name):
        raise ValueError(f"owned name {name!r}: suffix must be 1-32 characters of [a-z0-9_]")
    return name


def owner_of(name: str) -> tuple[str, int, int] | None:
    """(tag, pid, start) of an owned name, None for any other name."""
    m = OWNED_RE.fullmatch(name)
    return None if m is None else (m["tag"], int(m["pid"]), int(m["start"]))


def owner_dead(name: str) -> bool:
    """True for an owned name whose owner no longer runs (False for any other name)."""
    owner = owner_of(name)
    return owner is not None and not pid_alive(owner[1], owner[2])


def make_owned_dir(tag: str, parent: Path | None = None) -> Path:
    """A new private (0700) directory ``aitb-<tag>-<pid>.<start>-XXXXXXXX`` in ``parent``
    (default: the temporary directory, tempfile.gettempdir()), owned by this process; the
    caller removes it. Raises ValueError for a bad tag, OSError as mkdtemp does."""
    return Path(tempfile.mkdtemp(prefix=f"aitb-{_check_tag(tag)}-{owner_mark()}-",
                                 dir=None if parent is None else str(parent)))


@contextmanager
def owned_tempdir(tag: str, parent: Path | None = None) -> Iterator[Path]:
    """:func:`make_owned_dir`, removed when the block ends (also on an exception). Killed
    before that, the directory is left to :func:`sweep`."""
    path = make_owned_dir(tag, parent)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def scratch_roots() -> list[Path]:
    """Where owned scratch is looked for: the temporary directory and /tmp (one, if equal)."""
    roots = [Path(tempfile.gettempdir()), Path("/tmp")]
    return [r for i, r in enumerate(roots) if r not in roots[:i]]


def sweep(roots: list[Path] | None = None, owner: tuple[int, int | None] | None = None
          ) -> list[Path]:
    """Remove the owned directories and files in ``roots`` (default :func:`scratch_roots`)
    whose owner is dead (and, with ``owner`` = (pid, start), only that owner's). Returns the
    paths removed, sorted. Skips symbolic links, entries of another user, and entries that
    vanish or cannot be removed meanwhile (the next sweep tries again)."""
    removed = []
    for root in roots if roots is not None else scratch_roots():
        try:
            names = os.listdir(root)
        except OSError:
            continue
        for name in names:
            mark = owner_of(name)
            if mark is None or (owner is not None and (mark[1], mark[2]) != owner) \
                    or pid_alive(mark[1], mark[2]):
                continue
            path = Path(root) / name
            try:
                st = path.lstat()
                if st.st_uid != os.geteuid():
                    continue
                if stat.S_ISDIR(st.st_mode):
                    shutil.rmtree(path)
                elif stat.S_ISREG(st.st_mode) or stat.S_ISSOCK(st.st_mode):
                    path.unlink()
                else:
                    continue
            except OSError:
                continue
            removed.append(path)
    return sorted(removed)
