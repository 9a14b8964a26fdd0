"""The one reader of input files (topologies, workloads, experiments, campaigns, plan.json):
regular files only, with limits checked before anything is expanded, YAML with line numbers
(ruamel.yaml round-trip documents), and pydantic's ``ValidationError`` turned into
:class:`SpecIssue`s that name file, key path and line (with "did you mean" for unknown keys).

Limits (:data:`MAX_FILE_BYTES`, :data:`MAX_DEPTH`, :data:`MAX_VALUES`, :data:`MAX_ALIASES`)
are checked on ruamel's event stream, before a document is composed: an alias bomb ("billion
laughs"), a recursive alias (``a: &a [*a]``) or thousands of nested lists are refused with the
line where the limit was crossed, never expanded. Complex keys (``? [a, b]``) and duplicate
keys are refused too. A file that is not a regular file (a FIFO, a directory, a device) is
refused without blocking. Errors are :class:`SpecError`; nothing here raises anything else for
bad input.
"""

from __future__ import annotations

import difflib
import errno
import json
import os
import re
import stat
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import (
    AliasEvent,
    CollectionEndEvent,
    CollectionStartEvent,
    MappingStartEvent,
    NodeEvent,
    ScalarEvent,
)
from ruamel.yaml.reader import ReaderError

from models.errors import SpecError, SpecIssue, short_repr
from models.unit_fields import AT_KEY, BOOLEAN_NUMBER

__all__ = ["MAX_FILE_BYTES", "MAX_DEPTH", "MAX_VALUES", "MAX_ALIASES", "MAX_ITERATIONS",
           "MAX_REPEATS", "MAX_RANKS", "MAX_LAYERS", "MAX_TOKENS", "MAX_CONNS_PER_PEER",
           "MAX_FLOWS", "MAX_TRANSFERS", "MAX_EVENT_ACTIONS", "MAX_REQUESTS",
           "MAX_REQUEST_MESSAGES", "MAX_POINTS", "MAX_RUNS", "Ref", "read_bounded", "read_text",
           "check_file", "resolve_ref", "load_yaml", "load_json",
           "issues_from_validation", "line_of", "with_lines"]

MAX_FILE_BYTES = 8 * 2**20  # the largest example topology is 30 KB; plan.json of 1024 hosts ~3 MB
MAX_DEPTH = 64             # nesting of lists and mappings (the deepest schema needs 8)
MAX_VALUES = 200_000       # scalars and collections after alias expansion
MAX_ALIASES = 1_000
# ---- counts a file may ask for, refused at validation before anything is expanded --------
# Every count below is turned into lists (ops, flows, per-rank steps, event actions, requests)
# by ``aitb run --check`` already; unbounded, a typo like ``repeats: 100000000000`` made it
# allocate until the OOM killer came. The per-key bounds are far above what a lab of
# namespaces on one machine replays; the totals bound the product of several keys (repeats x
# hosts, rounds x clients, ...), computed arithmetically from the spec before any list is
# built. --check of 100000 training iterations took 47 s and 1.9 GB on the 2-core reference
# machine, 10000 about a tenth: the totals keep a file at its bounds within a few hundred MB.
MAX_ITERATIONS = 10_000      # iterations, FL rounds, AICB/Chakra iterations
MAX_REPEATS = 10_000         # pattern repeats, flap count, session_requests and session length:
                             #   the same scale as iterations (each is one more round of ops)
MAX_RANKS = 100_000          # ranks, world_size, tp/pp/dp/ep, placement slots and block, FL
                             #   clients (their bound since FL came): per-rank lists are built
MAX_LAYERS = 10_000          # training num_layers, num_microbatches (GPT-3 has 96 layers)
MAX_TOKENS = 100_000         # response tokens per inference request: one message each
MAX_CONNS_PER_PEER = 64      # connections per pair of hosts (traffic_gen stripes a step over
                             #   them): a socket each per peer at both ends, so an agent with
                             #   15 peers holds ~1000 at the bound (a default RLIMIT_NOFILE)
MAX_FLOWS = 200_000          # flows one workload's ops hold (each a FlowRecord of the run):
                             #   a pattern's flows over all its bursts, FL uploads of all
                             #   rounds, background flows (expected: rate x duration)
MAX_TRANSFERS = 1_000_000    # transfers (a send and its receive) of the per-rank programs
                             #   compiled from one workload (traffic_gen.program, every
                             #   iteration unrolled): 0.49 million took 10 s and 0.2 GB here,
                             #   so ~0.4 GB at the bound; the largest example (gpt13b_two_dc)
                             #   compiles to 37536
MAX_EVENT_ACTIONS = 100_000  # actions the events: timeline expands to (flaps, ramps, traces)
MAX_REQUESTS = 20_000        # inference requests of one workload (poisson: clients x rate x
                             #   duration expected; trace: the listed ones)
MAX_REQUEST_MESSAGES = 100_000  # their messages (a prompt and every token): each is built
                             #   as a record of its own, ~0.28 ms and ~1.4 KB apiece in
                             #   --check (199 000 requests x 5 messages took 281 s and 1.4 GB;
                             #   20 000 x 5, 22 s and 0.3 GB)
MAX_POINTS = 10_000          # campaign points (grid product x zip rows)
MAX_RUNS = 100_000           # campaign points x repetitions


@dataclass(frozen=True, slots=True)
class Ref:
    """Where a file was named: the file, key path and line of the key that references it
    (``topology.file`` of an experiment, ``base.file`` of a campaign). Problems reading the
    referenced file are reported there."""

    file: str
    key_path: tuple[str | int, ...] = ()
    line: int | None = None

    def issue(self, message: str) -> SpecIssue:
        """A SpecIssue at the referencing key."""
        return SpecIssue(message, file=self.file, key_path=self.key_path, line=self.line)


def _refusal(path: Path, ref: Ref | None, message: str) -> SpecError:
    if ref is None:
        return SpecError(SpecIssue(message, file=str(path)))
    return SpecError(ref.issue(f"{short_repr(str(path))}: {message}"))


def resolve_ref(value: object, base_dir: str | Path, ref: Ref) -> Path:
    """The path a ``file:`` key names, relative to ``base_dir`` unless absolute. Raises
    SpecError at ``ref`` for an empty or non-string value."""
    if not isinstance(value, str) or not value.strip():
        raise SpecError(ref.issue(f"expected a file name; got {short_repr(value)}"))
    p = Path(value)
    return p if p.is_absolute() else Path(base_dir) / p


def check_file(path: str | Path, *, ref: Ref | None = None, limit: int = MAX_FILE_BYTES
               ) -> Path:
    """``path`` if it is a regular file of at most ``limit`` bytes that can be opened (for
    readers of other formats, e.g. gzip); raises SpecError as :func:`read_text` does."""
    p = Path(path)
    os.close(_open_regular(p, ref, limit))
    return p


def _open_regular(p: Path, ref: Ref | None, limit: int) -> int:
    if "\0" in str(p):  # os.open raises ValueError: no file name holds a NUL character
        raise _refusal(p, ref, "the file name holds a NUL character")
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError:
        raise _refusal(p, ref, "file not found") from None
    except OSError as exc:
        what = "is a directory, not a file" if exc.errno == errno.EISDIR else \
            f"cannot open the file: {exc.strerror}"
        raise _refusal(p, ref, what) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else \
                "a FIFO" if stat.S_ISFIFO(st.st_mode) else "not a regular file"
            raise _refusal(p, ref, f"is {kind}; expected a regular file")
        if st.st_size > limit:
            raise _refusal(p, ref, f"is {st.st_size} bytes; at most {limit} are read")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bounded(path: str, limit: int, what: str) -> bytes:
    """The bytes of the file ``path``, decompressed when it ends in ``.gz`` (any case), read
    in 1 MiB chunks; raises SpecError naming the file and ``limit`` as soon as more than
    ``limit`` come (a gzip bomb: a few KB that expand to gigabytes), ``what`` saying whose
    limit it is (e.g. "of CSV text (the limit for an AICB file, MAX_AICB_BYTES)"). Errors of
    reading or decompressing are the caller's (OSError, EOFError, gzip.BadGzipFile)."""
    import gzip

    gz = path.lower().endswith(".gz")
    chunks, n = [], 0
    with gzip.open(path, "rb") if gz else open(path, "rb") as f:
        while chunk := f.read(min(1 << 20, limit + 1 - n)):
            chunks.append(chunk)
            n += len(chunk)
            if n > limit:
                raise SpecError(SpecIssue(f"{'decompresses to' if gz else 'is'} more than "
                                          f"{limit} bytes {what}; refused", file=path))
    return b"".join(chunks)


def read_text(path: str | Path, *, ref: Ref | None = None,
              limit: int = MAX_FILE_BYTES) -> str:
    """The UTF-8 text of the regular file ``path`` (at most ``limit`` bytes). Never blocks on
    a FIFO. Raises SpecError naming the file (or, with ``ref``, the key that named it) when it
    is missing, not a regular file, unreadable, too large or not UTF-8."""
    p = Path(path)
    fd = _open_regular(p, ref, limit)
    try:
        chunks, n = [], 0
        while n <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - n))
            if not chunk:
                break
            chunks.append(chunk)
            n += len(chunk)
        data = b"".join(chunks)
    except OSError as exc:
        raise _refusal(p, ref, f"cannot read the file: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise _refusal(p, ref, f"is larger than {limit} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _refusal(p, ref, f"is not UTF-8 text (byte {exc.start})") from None


# ---- YAML: limits on the event stream, then a round-trip document ------------------------

@dataclass
class _Frame:
    path: tuple
    is_map: bool
    anchor: str | None
    line: int
    keys: dict = field(default_factory=dict)
    expect_key: bool = True
    key: Any = None
    index: int = 0
    size: int = 1
    height: int = 1


class _Scan:
    """One pass over the events: depth, expanded size, aliases, complex and duplicate keys."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.frames: list[_Frame] = []
        self.anchors: dict[str, tuple[int, int]] = {}  # anchor -> (expanded size, height)
        self.open: set[str] = set()
        self.total = self.aliases = 0
        self.dups: list[SpecIssue] = []

    def fail(self, message: str, line: int, path: tuple) -> SpecError:
        return SpecError(SpecIssue(message, file=self.source, key_path=path, line=line))

    def _place(self, ev: NodeEvent, line: int) -> tuple | None:
        """The key path of ``ev``; None when ``ev`` is a mapping key (recorded here)."""
        if not self.frames:
            return ()
        f = self.frames[-1]
        if not f.is_map:
            f.index += 1
            return (*f.path, f.index - 1)
        if not f.expect_key:
            f.expect_key = True
            return (*f.path, f.key)
        if not isinstance(ev, ScalarEvent):
            raise self.fail("a key must be a plain value (a name), not a list, a mapping or "
                            "an alias", line, f.path)
        f.expect_key, f.key = False, ev.value
        if ev.value in f.keys and ev.value != "<<":
            self.dups.append(SpecIssue(
                f"duplicate {'node name' if f.path == ('nodes',) else 'key'} "
                f"{short_repr(ev.value)} (first on line {f.keys[ev.value]})",
                file=self.source, key_path=(*f.path, ev.value), line=line))
        f.keys.setdefault(ev.value, line)
        self._add(1, 1, line, f.path)
        return None

    def _add(self, size: int, height: int, line: int, path: tuple) -> None:
        self.total += size
        if self.total > MAX_VALUES:
            raise self.fail(f"the document expands to more than {MAX_VALUES} values (aliases "
                            "included); refused before expansion", line, path)
        if self.frames:
            f = self.frames[-1]
            f.size += size
            f.height = max(f.height, height + 1)
        if len(self.frames) + height > MAX_DEPTH:
            raise self.fail(f"nested more than {MAX_DEPTH} levels deep", line, path)

    def node(self, ev: NodeEvent) -> None:
        line = ev.start_mark.line + 1
        path = self._place(ev, line)
        if path is None:
            return
        if isinstance(ev, AliasEvent):
            self.aliases += 1
            if ev.anchor in self.open:
                raise self.fail(f"recursive alias *{ev.anchor} (it refers to a value that "
                                "contains it)", line, path)
            if self.aliases > MAX_ALIASES:
                raise self.fail(f"more than {MAX_ALIASES} aliases", line, path)
            size, height = self.anchors.get(ev.anchor, (1, 1))
            self._add(size, height, line, path)
        elif isinstance(ev, CollectionStartEvent):
            self._add(0, 1, line, path)
            self.frames.append(_Frame(path, isinstance(ev, MappingStartEvent), ev.anchor, line))
            if ev.anchor:
                self.open.add(ev.anchor)
        else:
            if ev.anchor:
                self.anchors[ev.anchor] = (1, 1)
            self._add(1, 1, line, path)

    def end(self) -> None:
        f = self.frames.pop()
        if f.anchor:
            self.open.discard(f.anchor)
            self.anchors[f.anchor] = (f.size, f.height)
        if self.frames:
            self.frames[-1].size += f.size
            self.frames[-1].height = max(self.frames[-1].height, f.height + 1)


def _syntax_issue(exc: YAMLError, source: str, text: str) -> SpecIssue:
    if isinstance(exc, MarkedYAMLError) and exc.problem_mark is not None:
        what = " ".join(p for p in (exc.context, exc.problem) if p)
        return SpecIssue(f"YAML syntax error: {what}", file=source,
                         line=exc.problem_mark.line + 1)
    if isinstance(exc, ReaderError) and isinstance(exc.position, int):
        # a character YAML does not allow (NUL, other control characters): ruamel gives its
        # position in the text; the line, and the key written on that line, are found here
        line = text.count("\n", 0, exc.position) + 1
        char = exc.character if isinstance(exc.character, str) else chr(exc.character)
        return SpecIssue(f"YAML syntax error: character {char!r} (U+{ord(char):04X}) is not "
                         "allowed in a YAML file; write it as an escape in a double-quoted "
                         "string, or remove it", file=source, line=line,
                         key_path=_key_on_line(text, exc.position, line))
    return SpecIssue(f"YAML syntax error: {exc}", file=source)


def _key_on_line(text: str, position: int, line: int) -> tuple[str | int, ...]:
    """Key path of the key written on ``line`` (1-based) of ``text`` last before ``position``
    (a flow mapping holds several on one line), read with the character at ``position``
    blanked out; () when that text does not parse either."""
    try:
        doc = _yaml().load(text[:position] + " " + text[position + 1:])
    except (YAMLError, ValueError, TypeError, RecursionError, OverflowError):
        return ()
    column = position - (text.rfind("\n", 0, position) + 1)
    best: tuple[str | int, ...] = ()
    best_at = (-1, -1)

    def walk(node: Any, path: tuple[str | int, ...]) -> None:
        nonlocal best, best_at
        lc = getattr(node, "lc", None)
        if lc is None or len(path) > MAX_DEPTH:
            return
        items = (list(node.items()) if isinstance(node, Mapping)
                 else list(enumerate(node)) if isinstance(node, list) else [])
        for key, value in items:
            try:
                at, col = (lc.key(key) if isinstance(node, Mapping) else lc.item(key))[:2]
            except (KeyError, TypeError, AttributeError, IndexError):
                continue
            if at + 1 == line and col <= column and (col, len(path)) > best_at:
                best, best_at = (*path, key), (col, len(path))
            if at + 1 <= line:
                walk(value, (*path, key))

    walk(doc, ())
    return tuple(p if isinstance(p, int) else str(p) for p in best)


def _yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = True  # duplicates are found and reported by _Scan
    return yaml


def _scan(text: str, source: str) -> list[SpecIssue]:
    scan = _Scan(source)
    for ev in _yaml().parse(text):
        if isinstance(ev, NodeEvent):
            scan.node(ev)
        elif isinstance(ev, CollectionEndEvent):
            scan.end()
    return scan.dups


_YAML_KINDS = {list: "a list", str: "a string", int: "a number", float: "a number",
               bool: "true or false"}


def load_yaml(path: str | Path, expected: str, *, ref: Ref | None = None
              ) -> tuple[Any, list[SpecIssue]]:
    """Read ``path`` as YAML within the limits above. Returns the round-trip document (its
    mappings remember the line of every key) and the duplicate keys found. Raises SpecError
    naming the file (or ``ref``) when it cannot be read (:func:`read_text`), is not YAML,
    breaks a limit, has a complex key, or is not a mapping at the top (the message says what
    was ``expected``, e.g. "an experiment: a mapping with name, topology and workloads")."""
    text, source = read_text(path, ref=ref), str(path)
    try:
        dups = _scan(text, source)
        doc = _yaml().load(text)
    except YAMLError as exc:
        raise SpecError(_syntax_issue(exc, source, text)) from None
    except (ValueError, TypeError, RecursionError, OverflowError) as exc:
        # a value ruamel cannot construct (an int of more than 4300 digits, a date 2001-13-45)
        raise SpecError(SpecIssue(f"cannot read a value: {short_repr(str(exc))}",
                                  file=source)) from None
    if not isinstance(doc, Mapping):
        got = "an empty file" if doc is None else next(
            (word for kind, word in _YAML_KINDS.items() if isinstance(doc, kind)), "a scalar")
        raise SpecError(SpecIssue(f"expected {expected}; got {got}", file=source, line=1))
    return doc, dups


_JSON_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_JSON_BRACKETS = re.compile(r"[\[\]{}]")


def load_json(path: str | Path, *, ref: Ref | None = None) -> Any:
    """Read ``path`` as JSON within :data:`MAX_FILE_BYTES` and :data:`MAX_DEPTH` (checked on
    the text before parsing). Raises SpecError naming the file."""
    text, source = read_text(path, ref=ref), str(path)
    depth = 0
    for m in _JSON_BRACKETS.finditer(_JSON_STRINGS.sub('""', text)):
        depth += 1 if m.group() in "[{" else -1
        if depth > MAX_DEPTH:
            line = text.count("\n", 0, m.start()) + 1  # approximate: strings were shortened
            raise SpecError(SpecIssue(f"nested more than {MAX_DEPTH} levels deep", file=source,
                                      line=line))
    try:
        return json.loads(text)
    except ValueError as exc:  # JSONDecodeError, and int() of more than 4300 digits
        line = getattr(exc, "lineno", None)
        raise SpecError(SpecIssue(f"not JSON: {short_repr(str(exc))}", file=source,
                                  line=line)) from None


# ---- pydantic ValidationError -> SpecIssue -----------------------------------------------

def _unwrap(tp: Any) -> Any:
    """Strip Optional/Annotated/Union-with-None down to the one interesting type."""
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(args) != 1:
                return tp
            tp = args[0]
        else:
            return tp


def _model_at(root: Any, loc: Sequence[str | int]) -> type[BaseModel] | None:
    """The pydantic model that the value at ``loc`` is validated as (None if not a model)."""
    tp: Any = root
    for part in loc:
        tp = _unwrap(tp)
        origin = typing.get_origin(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            fld = tp.model_fields.get(str(part))
            if fld is None:
                return None
            tp = fld.annotation
        elif origin in (dict, Mapping):
            tp = typing.get_args(tp)[1]
        elif origin in (list, tuple, Sequence):
            tp = typing.get_args(tp)[0]
        else:
            return None
    tp = _unwrap(tp)
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


def _unknown(key: str, known: Sequence[str], what: str = "key") -> str:
    close = difflib.get_close_matches(key, list(known), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    listed = f"; expected one of: {', '.join(known)}" if known else ""
    return f"unknown {what} {short_repr(key)}{hint}{listed}"


_WITH_INPUT = ("string_pattern_mismatch", "string_too_long", "int_parsing", "int_type",
               "bool_parsing", "string_type", "greater_than_equal", "less_than_equal",
               "greater_than", "less_than", "float_parsing", "float_type", "finite_number",
               "int_from_float", "literal_error", "bool_type", "enum")


def _message(root: Any, err: Mapping[str, Any], known: Sequence[str] | None,
             also_known: Sequence[str] = ()) -> str:
    kind, msg, loc = err["type"], err["msg"], tuple(err["loc"])
    if kind == "extra_forbidden":
        model = _model_at(root, loc[:-1]) if root is not None else None
        fields = list(model.model_fields) if model else []
        if len(loc) == 1:  # a key at the top: the keys the caller accepts beside the model's
            fields += [k for k in also_known if k not in fields]
        return _unknown(str(loc[-1]), fields)
    if kind == "unexpected_keyword_argument":
        return _unknown(str(loc[-1]) if loc else "?", known or [], "parameter")
    if kind == "value_error":
        return msg.removeprefix("Value error, ")
    if kind == "missing":
        if loc and isinstance(loc[-1], int):
            return "an item is missing here (endpoints need exactly two entries)"
        return "required key is missing"
    got = short_repr(err.get("input"))
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return f"expected a mapping of keys; got {got}"
    if kind in ("list_type", "tuple_type"):
        return f"expected a list; got {got}"
    if kind in _WITH_INPUT:
        return f"{msg}; got {got}"
    return msg


# the labels pydantic gives the members of a plain (smart-mode) union in an error's location:
# a type's repr (``str``, ``list[nullable[str]]``, ``function-after[...]``) or a model's name
_TYPE_LABEL = re.compile(r"(str|int|float|bool|bytes|none|decimal|any|date|datetime|"
                         r"[a-z][a-z-]*\[.*\])")


def _model_names() -> set[str]:
    out, todo = set(), [BaseModel]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__name__ not in out:
                out.add(sub.__name__)
                todo.append(sub)
    return out


def _clean_loc(loc: Sequence[Any], drop: Sequence[str], keep_last: bool = False
               ) -> tuple[str | int, ...]:
    """Drop pydantic's internal location parts (function names, union member tags, the
    labels of a plain union's members); ``keep_last``: the last part is a key the user wrote
    (an unknown or missing key), kept whatever it looks like."""
    models = None
    out: list[str | int] = []
    for n, p in enumerate(loc):
        if isinstance(p, int) or (keep_last and n == len(loc) - 1):
            out.append(p)
            continue
        text = str(p)
        if p in drop or text.startswith(("function-", "union[", "tagged-union[")) or \
                _TYPE_LABEL.fullmatch(text):
            continue
        if text[:1].isupper():
            models = _model_names() if models is None else models
            if text in models:
                continue
        out.append(p)
    return tuple(out)


def issues_from_validation(exc: ValidationError, root: Any, source: str | None,
                           prefix: Sequence[str | int] = (), *, drop: Sequence[str] = (),
                           known: Sequence[str] | None = None,
                           also_known: Sequence[str] = ()) -> list[SpecIssue]:
    """One :class:`SpecIssue` per pydantic error of validating as ``root`` (a model class, or
    None), key path ``prefix + loc`` (location parts in ``drop``, e.g. union tags, removed).
    Unknown keys get "did you mean" against the model's fields; unknown keyword parameters
    (``validate_call``) against ``known``; ``also_known``: keys accepted at the top beside the
    model's own (those the caller takes out before validating), listed with them."""
    out = []
    for err in exc.errors(include_url=False):
        loc = _clean_loc(err["loc"], drop,
                         keep_last=err["type"] in ("extra_forbidden", "missing",
                                                   "unexpected_keyword_argument"))
        if err["type"] in (BOOLEAN_NUMBER, AT_KEY):  # raised by a model: the key is in ctx
            loc = (*loc, *err["ctx"]["key_path"])
        out.append(SpecIssue(_message(root, {**err, "loc": loc}, known, also_known), file=source,
                             key_path=(*prefix, *loc)))
    return out


def line_of(doc: Any, key_path: Sequence[str | int]) -> int | None:
    """1-based line of the deepest part of ``key_path`` found in a ruamel round-trip document
    (None for plain dicts or when not even the first key is there)."""
    line, node = None, doc
    for part in key_path:
        lc = getattr(node, "lc", None)
        try:
            if isinstance(node, Mapping) and part in node:
                line = lc.key(part)[0] + 1 if lc is not None else line
            elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
                line = lc.item(part)[0] + 1 if lc is not None else line
            else:
                break
        except (KeyError, TypeError, AttributeError):  # no position recorded for this key
            break
        node = node[part]
    return line


def with_lines(exc: SpecError, doc: Any, source: str) -> SpecError:
    """A copy of ``exc`` whose issues carry ``source`` (unless they name a file) and, for the
    issues of ``source``, the line found in ``doc``."""
    issues = [SpecIssue(i.message, file=i.file or source, key_path=i.key_path,
                        line=i.line or (line_of(doc, i.key_path)
                                        if (i.file or source) == source else None))
              for i in exc.issues]
    return SpecError(issues)

