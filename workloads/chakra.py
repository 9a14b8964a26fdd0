"""Chakra execution traces (MLCommons Chakra ET) as workloads: one rank's trace replayed by a
world of ranks.

**Format.** An ET file is a stream of protobuf messages, each preceded by its length as a
base-128 varint (Chakra's protoio): one ``GlobalMetadata``, then one ``Node`` per operation.
The protobuf library decodes them with a descriptor built here from the field numbers of
Chakra's published schema (``schema/protobuf/et_def.proto``, mlcommons/chakra a1120dd,
Apache-2.0): ``GlobalMetadata`` {version 1, attr 2}, ``Node`` {id 1, name 2, type 3,
duration_micros 7, attr 10}, ``AttributeProto`` {name 1, and the scalar values int32 7, int64
9, uint32 11, uint64 13, bool 27, string 29}; fields not declared are skipped by protobuf as
for any newer schema. No Chakra code is copied or needed. ``.et.gz`` files are read through
gzip.

**What becomes the schedule** (:func:`build_schedule`):

- every ``COMM_COLL_NODE`` (type 7) that carries ``comm_type`` and ``comm_size`` attributes
  (the GPU-side NCCL kernels; the host-side ``c10d::`` nodes carry neither and are skipped) is
  one collective of ``comm_size`` bytes on the world group, in node-id order (the trace's
  topological order). ``comm_type`` is Chakra's ``CollectiveCommType``: ALL_REDUCE 0, REDUCE
  1, ALL_GATHER 2, GATHER 3, SCATTER 4, BROADCAST 5, ALL_TO_ALL 6, REDUCE_SCATTER 7,
  REDUCE_SCATTER_BLOCK 8 (as reduce_scatter), BARRIER 9;
- with ``compute``, the GPU ``COMP_NODE`` kernels (type 4, ``is_cpu_op`` false) between two
  collectives become one compute of the sum of their ``duration_micros``. The trace has no
  start times here, so kernels of concurrent streams add up and the overlap of compute with
  communication (DDP's bucketed all-reduces during the backward pass) is serialised: an upper
  bound of the compute time;
- the trace is one rank's: ``world_size`` ranks replay it (SPMD, as a data-parallel job's
  rank 0 stands for every rank). A node that names another process group (``pg_name``) or
  a point-to-point ``COMM_SEND_NODE``/``COMM_RECV_NODE`` (types 5, 6) is refused naming its
  id: one rank's trace cannot say who its peers are.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError
from pydantic import ConfigDict, Field

from models.errors import SpecError
from models.schedule import Collective, CollectiveKind, Compute, Group, Op, Schedule
from models.specfile import read_bounded
from models.unit_fields import SpecModel

__all__ = ["ChakraOptions", "ChakraNode", "ChakraTrace", "read_chakra", "build_schedule",
           "load_chakra", "COMM_TYPES"]

COMP_NODE, COMM_SEND_NODE, COMM_RECV_NODE, COMM_COLL_NODE = 4, 5, 6, 7
COMM_TYPES: dict[int, CollectiveKind] = {
    0: "all_reduce", 1: "reduce", 2: "all_gather", 3: "gather", 4: "scatter", 5: "broadcast",
    6: "all_to_all", 7: "reduce_scatter", 8: "reduce_scatter", 9: "barrier"}
MAX_MESSAGE_BYTES = 64 << 20  # one node; a larger length prefix is no Chakra file
# a whole ET file after decompression: a gzip bomb (3 MB of zeros expanding to 3 GB) is refused
# before it is held; a rank's ET of a training step is MBs to tens of MBs
MAX_CHAKRA_BYTES = 256 << 20
_SCALARS = (("int32_val", 7, "INT32"), ("int64_val", 9, "INT64"), ("uint32_val", 11, "UINT32"),
            ("uint64_val", 13, "UINT64"), ("bool_val", 27, "BOOL"),
            ("string_val", 29, "STRING"))


class ChakraOptions(SpecModel):
    """How to replay a Chakra trace: ``world_size`` ranks (at least 2) run it; ``scale``
    divides every size (at least 1 byte stays); ``iterations`` repetitions of the trace;
    ``compute``: keep the GPU kernel time between collectives (module docstring)."""

    model_config = ConfigDict(extra="forbid")

    world_size: int = Field(ge=2, le=4096)
    scale: float = Field(1.0, ge=1.0)
    iterations: int = Field(1, ge=1, le=10_000)
    compute: bool = True


@dataclass(frozen=True, slots=True)
class ChakraNode:
    """One decoded node: id, name, type (Chakra's NodeType number), duration in
    microseconds, and its scalar attributes by name."""

    id: int
    name: str
    type: int
    duration_micros: int
    attrs: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ChakraTrace:
    """A decoded ET file: ``path``, schema ``version`` and metadata attributes, its nodes."""

    path: str
    version: str
    meta: dict[str, Any]
    nodes: tuple[ChakraNode, ...]


def _classes() -> tuple[Any, Any]:
    """Message classes for GlobalMetadata and Node from a descriptor of the fields read."""
    fd = descriptor_pb2.FieldDescriptorProto
    opt, rep = fd.LABEL_OPTIONAL, fd.LABEL_REPEATED
    f = descriptor_pb2.FileDescriptorProto(name="aitb_chakra_et.proto", package="aitb_chakra",
                                           syntax="proto3")
    attr = f.message_type.add(name="Attr")
    attr.field.add(name="name", number=1, type=fd.TYPE_STRING, label=opt)
    attr.oneof_decl.add(name="value")
    for name, number, typ in _SCALARS:
        attr.field.add(name=name, number=number, type=getattr(fd, f"TYPE_{typ}"), label=opt,
                       oneof_index=0)
    meta = f.message_type.add(name="Meta")
    meta.field.add(name="version", number=1, type=fd.TYPE_STRING, label=opt)
    meta.field.add(name="attr", number=2, type=fd.TYPE_MESSAGE, label=rep,
                   type_name=".aitb_chakra.Attr")
    node = f.message_type.add(name="Node")
    node.field.add(name="id", number=1, type=fd.TYPE_UINT64, label=opt)
    node.field.add(name="name", number=2, type=fd.TYPE_STRING, label=opt)
    node.field.add(name="type", number=3, type=fd.TYPE_INT32, label=opt)  # enum NodeType
    node.field.add(name="duration_micros", number=7, type=fd.TYPE_UINT64, label=opt)
    node.field.add(name="attr", number=10, type=fd.TYPE_MESSAGE, label=rep,
                   type_name=".aitb_chakra.Attr")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    get = message_factory.GetMessageClass
    return (get(pool.FindMessageTypeByName("aitb_chakra.Meta")),
            get(pool.FindMessageTypeByName("aitb_chakra.Node")))


_META, _NODE = _classes()


def _attrs(msg: Any) -> dict[str, Any]:
    out = {}
    for a in msg.attr:
        which = a.WhichOneof("value")
        if which is not None:
            out[a.name] = getattr(a, which)
    return out


def _messages(data: bytes, path: str) -> list[bytes]:
    """The length-delimited messages of ``data``; SpecError naming the byte offset of a
    truncated or oversized one."""
    out, i, n = [], 0, len(data)
    while i < n:
        start, size, shift = i, 0, 0
        while True:
            if i >= n or shift > 63:
                raise SpecError(f"not a Chakra ET file: a truncated length prefix at byte "
                                f"{start}", file=path)
            c = data[i]
            i += 1
            size |= (c & 0x7F) << shift
            shift += 7
            if not c & 0x80:
                break
        if size > MAX_MESSAGE_BYTES or i + size > n:
            raise SpecError(f"not a Chakra ET file: the message at byte {start} claims {size} "
                            f"bytes, {n - i} remain", file=path)
        out.append(data[i:i + size])
        i += size
    return out


def read_chakra(path: str | Path) -> ChakraTrace:
    """Decode the ET file at ``path`` (``.et``, or gzip-compressed ``.et.gz``).

    Raises :class:`SpecError` naming the file for an unreadable, empty, truncated or
    undecodable file (with the byte offset or node position), and for one of more than
    :data:`MAX_CHAKRA_BYTES` (after decompression)."""
    p = str(path)
    try:
        data = read_bounded(p, MAX_CHAKRA_BYTES, "(the limit for a Chakra ET file, "
                            "MAX_CHAKRA_BYTES)")
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise SpecError(f"cannot read the Chakra trace: {exc}", file=p) from None
    msgs = _messages(data, p)
    if not msgs:
        raise SpecError("empty Chakra ET file (no GlobalMetadata)", file=p)
    at, nodes = 0, []
    try:
        meta = _META.FromString(msgs[0])
        for at in range(1, len(msgs)):
            nd = _NODE.FromString(msgs[at])
            nodes.append(ChakraNode(nd.id, nd.name, nd.type, nd.duration_micros, _attrs(nd)))
    except DecodeError as exc:
        what = "the GlobalMetadata" if at == 0 else f"node message {at}"
        raise SpecError(f"not a Chakra ET file: {what} does not decode ({exc})",
                        file=p) from None
    return ChakraTrace(p, meta.version, _attrs(meta), tuple(nodes))


def _collective(nd: ChakraNode, path: str, scale: float) -> Collective | None:
    """The collective of a COMM_COLL_NODE, None for a host-side one (no size)."""
    if "comm_type" not in nd.attrs or "comm_size" not in nd.attrs:
        return None
    pg = nd.attrs.get("pg_name")
    if pg not in (None, "", "0"):
        raise SpecError(f"node {nd.id} ({nd.name[:60]}) runs on process group {pg!r}; a single "
                        "rank's trace cannot say who is in it (only world collectives are "
                        "replayed)", file=path)
    kind = COMM_TYPES.get(int(nd.attrs["comm_type"]))
    if kind is None:
        raise SpecError(f"node {nd.id}: comm_type {nd.attrs['comm_type']} is not one of "
                        f"Chakra's CollectiveCommType values 0..9", file=path)
    size = int(nd.attrs["comm_size"])
    if size < 0:
        raise SpecError(f"node {nd.id}: comm_size {size} is negative", file=path)
    scaled = 0 if size == 0 else max(1, round(size / scale))
    return Collective(kind, "world", scaled, label=f"chakra node {nd.id}")


def build_schedule(trace: ChakraTrace, options: ChakraOptions) -> Schedule:
    """The :class:`Schedule` of ``trace`` replayed by ``options.world_size`` ranks (module
    docstring: which nodes become which ops). Raises :class:`SpecError` naming the file and
    the node for point-to-point nodes, other process groups, unknown collective types, or a
    trace without any sized collective."""
    ops: list[Op] = []
    compute_us = 0
    for nd in trace.nodes:
        if nd.type in (COMM_SEND_NODE, COMM_RECV_NODE):
            raise SpecError(f"node {nd.id} ({nd.name[:60]}) is a point-to-point "
                            f"{'send' if nd.type == COMM_SEND_NODE else 'receive'}; one rank's "
                            "trace cannot say its peer (only collectives are replayed)",
                            file=trace.path)
        if nd.type == COMP_NODE and nd.attrs.get("is_cpu_op") is False:
            compute_us += nd.duration_micros
        elif nd.type == COMM_COLL_NODE:
            coll = _collective(nd, trace.path, options.scale)
            if coll is None:
                continue
            if options.compute and compute_us:
                ops.append(Compute(compute_us / 1e6, label="chakra gpu kernels"))
            compute_us = 0
            ops.append(coll)
    if not any(isinstance(op, Collective) for op in ops):
        raise SpecError("the Chakra trace has no collective with comm_type and comm_size "
                        "(nothing to replay)", file=trace.path)
    if options.compute and compute_us:
        ops.append(Compute(compute_us / 1e6, label="chakra gpu kernels"))
    world = options.world_size
    name = Path(trace.path).name.removesuffix(".gz").removesuffix(".et") or "chakra"
    return Schedule(name=name, world_size=world,
                    groups={"world": Group("world", "dp", tuple(range(world)))},
                    ops=tuple(ops), iterations=options.iterations, source=trace.path,
                    meta={"format": "chakra-et", "schema": trace.meta.get("schema", ""),
                          "version": trace.version, "scale": options.scale,
                          "nodes": len(trace.nodes)})


def load_chakra(path: str | Path, options: ChakraOptions) -> Schedule:
    """:func:`build_schedule` of :func:`read_chakra` ``(path)``."""
    return build_schedule(read_chakra(path), options)
