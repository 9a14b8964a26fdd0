"""Errors that reach users: each names what it is about (file, key, node, interface, argv)."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["AitbError", "SpecError", "SpecIssue", "LabError", "CommandError"]


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
        self.message = message
        self.file = file
        self.key_path = tuple(key_path)
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
