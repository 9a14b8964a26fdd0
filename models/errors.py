"""Errors that reach users: each names what it is about (file, key, node, interface, argv)."""

from __future__ import annotations

import reprlib
from collections.abc import Sequence

__all__ = ["AitbError", "SpecError", "SpecIssue", "LabError", "CommandError", "short_repr",
           "MAX_MESSAGE"]

MAX_MESSAGE = 600  # characters of one issue's message; a value's repr inside it: 80


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit - 30]}... ({len(text)} characters)"


def short_repr(value: object, limit: int = 80) -> str:
    """``repr(value)`` of at most about ``limit`` characters (a value quoted in a message);
    never builds the whole repr of a large string or list."""
    r = reprlib.Repr()
    r.maxstring, r.maxother, r.maxlist, r.maxdict, r.maxlevel = limit, limit, 8, 8, 3
    text = r.repr(value)
    if isinstance(value, str) and len(value) > limit:
        text += f" ({len(value)} characters)"
    return _truncate(text, limit + 40)


class AitbError(Exception):
    """Base of every error aitb reports to a user without a traceback.

    ``exit_code`` is what the command line exits with: 2 for bad input, 1 for a failure
    while running.
    """

    exit_code = 1


class SpecIssue:
    """One problem in an input file: where (file, key path, line) and what was expected."""

    __slots__ = ("file", "key_path", "line", "message")

    def __init__(self, message: str, *, file: str | None = None,
                 key_path: Sequence[str | int] = (), line: int | None = None) -> None:
        self.message = _truncate(str(message), MAX_MESSAGE)
        self.file = None if file is None else _truncate(str(file), 300)
        self.key_path = tuple(p if isinstance(p, int) else _truncate(str(p), 80)
                              for p in key_path)
        self.line = line

    def where(self) -> str:
        """``"file.yaml:12: links[3].a_to_b.rate"``, with the parts that are known."""
        parts = []
        if self.file:
            parts.append(self.file + (f":{self.line}" if self.line else ""))
        if self.key_path:
            parts.append(format_key_path(self.key_path))
        return ": ".join(parts)

    def __str__(self) -> str:
        where = self.where()
        return f"{where}: {self.message}" if where else self.message

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form for ``--json`` output."""
        return {"file": self.file, "key": format_key_path(self.key_path) or None,
                "line": self.line, "message": self.message}


def format_key_path(path: Sequence[str | int]) -> str:
    """``("links", 3, "rate")`` -> ``"links[3].rate"``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


class SpecError(AitbError):
    """An input file (topology, experiment, workload) is invalid; nothing was created.

    ``issues`` lists every problem found, each with file, key path and line where known.
    """

    exit_code = 2

    def __init__(self, issues: Sequence[SpecIssue] | SpecIssue | str, *, file: str | None = None):
        if isinstance(issues, str):
            issues = [SpecIssue(issues, file=file)]
        elif isinstance(issues, SpecIssue):
            issues = [issues]
        self.issues = list(issues)
        super().__init__("\n".join(str(i) for i in self.issues))


class LabError(AitbError):
    """Realising, changing or tearing down a lab failed; the message names node and interface."""


class CommandError(AitbError):
    """An external program (tcpdump, iperf3, vng...) failed; the message names its argv."""

    def __init__(self, argv: Sequence[str], returncode: int | None, detail: str = "") -> None:
        self.argv = list(argv)
        self.returncode = returncode
        msg = f"command {' '.join(self.argv)!s} failed"
        msg += f" with exit code {returncode}" if returncode is not None else ""
        super().__init__(msg + (f": {detail.strip()}" if detail.strip() else ""))
