"""Chakra execution traces (workloads/chakra.py) on a real trace: the rank-0 ET of Chakra's
feeder tests (tests/data/chakra/SOURCE.md), its collectives and GPU compute, `aitb workload
inspect` of it, and refused input naming the file (and node or byte)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from models.errors import SpecError
from models.schedule import Collective, Compute
from orchestration.cli.app import app
from workloads.chakra import _NODE, ChakraOptions, build_schedule, load_chakra, read_chakra
from workloads.spec import load_schedule, parse_workload

TRACE = Path(__file__).parents[1] / "data" / "chakra" / "chakra.0.et.gz"
# the GPU-side NCCL kernels of the trace in node order (name -> comm_type, comm_size)
WANT = [("broadcast", 212480), ("broadcast", 424), ("all_reduce", 8196000),
        ("all_reduce", 31502336), ("all_reduce", 26255360), ("all_reduce", 26550272),
        ("all_reduce", 9724160)]


def test_real_trace_decodes_metadata_and_every_node():
    t = read_chakra(TRACE)
    assert t.meta["schema"] == "1.0.1" and t.meta["pid"] == 114598
    assert len(t.nodes) == 3664
    kernels = [n for n in t.nodes if n.type == 7 and "comm_size" in n.attrs]
    assert [n.name.split("_")[1] for n in kernels] == ["Broadcast"] * 2 + ["AllReduce"] * 5


def test_real_trace_becomes_world_collectives_with_gpu_compute_between():
    t = read_chakra(TRACE)
    s = build_schedule(t, ChakraOptions(world_size=4))
    colls = [op for op in s.ops if isinstance(op, Collective)]
    assert [(c.op, c.size_bytes) for c in colls] == WANT
    assert s.world_size == 4 and s.groups["world"].ranks == (0, 1, 2, 3)
    gpu_us = sum(n.duration_micros for n in t.nodes
                 if n.type == 4 and n.attrs.get("is_cpu_op") is False)
    compute = [op.duration_s for op in s.ops if isinstance(op, Compute)]
    assert round(sum(compute) * 1e6) == gpu_us and len(compute) == 8
    bare = build_schedule(t, ChakraOptions(world_size=2, compute=False, scale=1000,
                                           iterations=3))
    assert all(isinstance(op, Collective) for op in bare.ops) and bare.iterations == 3
    assert [op.size_bytes for op in bare.ops] == [max(1, round(b / 1000)) for _, b in WANT]


def test_inspect_summarises_the_trace(tmp_path):
    out = CliRunner().invoke(app, ["workload", "inspect", str(TRACE), "--world-size", "8",
                                   "--json"])
    assert out.exit_code == 0, out.output
    rows = {r["op"]: r for r in json.loads(out.output)["collectives"]}
    assert rows["all_reduce"]["count"] == 5 and rows["broadcast"]["count"] == 2
    assert rows["all_reduce"]["total_bytes"] == sum(b for op, b in WANT if op == "all_reduce")
    with pytest.raises(SpecError, match=r"chakra.0.et.gz: .*--world-size N"):
        load_schedule(TRACE)  # what inspect without --world-size reports


def test_kind_chakra_spec_needs_a_world_size():
    with pytest.raises(SpecError) as info:
        parse_workload({"kind": "chakra", "file": "x.et", "options": {}}, file="w.yaml")
    assert info.value.issues[0].to_dict()["key"] == "options.world_size"


def test_yaml_spec_of_kind_chakra_loads(tmp_path):
    spec = tmp_path / "w.yaml"
    spec.write_text(f"kind: chakra\nfile: {TRACE}\noptions: {{world_size: 3, scale: 10}}\n")
    s = load_schedule(spec)
    assert s.world_size == 3 and s.meta["format"] == "chakra-et"


def test_truncated_and_foreign_files_are_refused_naming_the_file(tmp_path):
    data = gzip.decompress(TRACE.read_bytes())
    cut = tmp_path / "cut.et"
    cut.write_bytes(data[:100_000])
    with pytest.raises(SpecError) as info:
        read_chakra(cut)
    assert "cut.et" in str(info.value) and "bytes" in str(info.value)
    junk = tmp_path / "junk.et"
    junk.write_bytes(b"\xff" * 12)
    with pytest.raises(SpecError, match="junk.et.*truncated length prefix"):
        read_chakra(junk)
    bad_gz = tmp_path / "bad.et.gz"
    bad_gz.write_bytes(data[:64])
    with pytest.raises(SpecError, match="cannot read the Chakra trace"):
        read_chakra(bad_gz)
    corrupt = tmp_path / "corrupt.et"
    corrupt.write_bytes(bytes([2, 0x08, 0x96]))  # a 2-byte message ending inside a varint
    with pytest.raises(SpecError, match="corrupt.et: .*GlobalMetadata does not decode"):
        read_chakra(corrupt)
    empty = tmp_path / "empty.et"
    empty.write_bytes(b"")
    with pytest.raises(SpecError, match="empty Chakra ET file"):
        read_chakra(empty)


def _with_node(tmp_path: Path, node) -> Path:
    """The real trace with one more node appended (for the refusals of nodes it lacks)."""
    raw = node.SerializeToString()
    prefix = bytearray()
    n = len(raw)
    while True:
        b, n = n & 0x7F, n >> 7
        prefix.append(b | (0x80 if n else 0))
        if not n:
            break
    path = tmp_path / "plus.et"
    path.write_bytes(gzip.decompress(TRACE.read_bytes()) + bytes(prefix) + raw)
    return path


def test_point_to_point_and_other_groups_are_refused_naming_the_node(tmp_path):
    send = _NODE(id=9001, name="send", type=5)
    with pytest.raises(SpecError, match="node 9001 .*point-to-point send"):
        load_chakra(_with_node(tmp_path, send), ChakraOptions(world_size=2))
    pg = _NODE(id=9002, name="nccl", type=7)
    for name, field, value in (("comm_type", "int64_val", 0), ("comm_size", "int64_val", 8),
                               ("pg_name", "string_val", "tp")):
        a = pg.attr.add(name=name)
        setattr(a, field, value)
    with pytest.raises(SpecError, match="node 9002 .*process group 'tp'"):
        load_chakra(_with_node(tmp_path, pg), ChakraOptions(world_size=2))


def test_a_gzip_bomb_is_refused_before_it_is_held(tmp_path, monkeypatch):
    import workloads.chakra as chakra

    monkeypatch.setattr(chakra, "MAX_CHAKRA_BYTES", 4 << 20)  # the real one is 256 MiB
    bomb = tmp_path / "bomb.et.gz"
    with gzip.open(bomb, "wb") as f:  # 8 KB on disk, 64 MiB of zeros inside
        for _ in range(64):
            f.write(bytes(1 << 20))
    with pytest.raises(SpecError, match=r"bomb.et.gz: decompresses to more than 4194304 bytes"):
        read_chakra(bomb)
    assert read_chakra(TRACE).nodes  # a real trace is well within it
