from pathlib import Path

import pytest

from models.errors import SpecError
from models.schedule import Collective
from workloads.aicb import AicbOptions, load_aicb, read_csv
from workloads.summary import collective_table

DATA = Path(__file__).parent.parent / "data" / "aicb"
G13B = DATA / "G13B-M1-C01_GPT13B_megatron_tp8_pp1_mbs1.csv"
G13B_TXT = DATA / "G13B-M1-C01_GPT13B_megatron_tp8_pp1_mbs1_A100.txt"
HEADER = ("comm_type,comm_group,comm_group_size,msg_size,stage,dst,src,additional,"
          "_elapsed_time,algbw,busbw,count")


def _table(s):
    return {(r["op"], r["group"]): r for r in collective_table(s)}


def _csv_rows(path: Path, op: str, group: str) -> list[int]:
    """Sizes of the iteration rows of ``op`` on ``group`` in the CSV, read with plain splits
    (independent of the importer)."""
    lines = path.read_text().splitlines()
    first_end = next(i for i, ln in enumerate(lines) if ln.startswith("CommType.epoch_end"))
    out = []
    for ln in lines[first_end + 1:]:
        f = ln.split(",")
        if f[0] == f"CommType.{op}" and f[1] == f"CommGroup.{group}_group":
            out.append(int(f[3]))
    return out


def test_gpt13b_csv_layout_and_groups():
    s = load_aicb(G13B)
    assert s.world_size == 128 and (s.meta["tp"], s.meta["dp"], s.meta["pp"]) == (8, 16, 1)
    assert sum(g.kind == "tp" for g in s.groups.values()) == 16
    assert sum(g.kind == "dp" for g in s.groups.values()) == 8
    assert s.groups["tp0"].ranks == tuple(range(8))
    assert s.groups["dp0"].ranks == tuple(range(0, 128, 8))


@pytest.mark.parametrize("op,group", [("all_reduce", "tp"), ("reduce_scatter", "dp"),
                                      ("all_gather", "dp"), ("broadcast", "tp")])
def test_gpt13b_counts_and_bytes_match_the_file(op, group):
    sizes = _csv_rows(G13B, op, group)
    row = _table(load_aicb(G13B))[(op, group)]
    assert row["count"] == len(sizes)
    assert row["total_bytes"] == sum(sizes)


def test_every_group_instance_runs_each_row():
    s = load_aicb(G13B)
    tp_ar = [op for op in s.ops if isinstance(op, Collective) and op.op == "all_reduce"
             and s.groups[op.group].kind == "tp"]
    assert len(tp_ar) == 16 * len(_csv_rows(G13B, "all_reduce", "tp"))


def test_scale_divides_sizes_keeps_one_byte_and_is_recorded():
    s = load_aicb(G13B, AicbOptions(scale=1000))
    t = _table(s)
    assert t[("all_reduce", "tp")]["sizes_bytes"] == [0, 1, 8, 20972]  # 4/1000 -> 1 byte
    assert s.meta["scale"] == 1000


def test_dp_replicas_subset_keeps_tp_and_dp_traffic():
    s = load_aicb(G13B, AicbOptions(dp_replicas=2))
    assert s.world_size == 16 and s.meta["file_world_size"] == 128
    t = _table(s)
    assert t[("all_reduce", "tp")]["group_size"] == 8
    assert t[("reduce_scatter", "dp")]["group_size"] == 2
    assert t[("reduce_scatter", "dp")]["total_bytes"] == sum(_csv_rows(G13B, "reduce_scatter",
                                                                       "dp"))


def test_setup_rows_only_on_request():
    plain = _table(load_aicb(G13B))
    with_init = _table(load_aicb(G13B, AicbOptions(setup=True)))
    assert with_init[("all_reduce", "dp")]["count"] == plain[("all_reduce", "dp")]["count"] + 4


def test_simai_text_import():
    s = load_aicb(G13B_TXT, AicbOptions(world_size=128))
    t = _table(s)
    assert (s.meta["tp"], s.meta["dp"]) == (8, 16)
    assert t[("reduce_scatter", "dp")]["sizes_bytes"] == [6497239040]
    # compute: 40 x (752 us + 750 us) forward, 2 x that backward, plus grad_norm's times
    assert s.meta["format"] == "simai"
    total = sum(op.duration_s for op in s.ops if hasattr(op, "duration_s"))
    assert total == pytest.approx(40 * 1.502e-3 * 3 + 14.565e-3 + 13.391e-3, rel=1e-9)


def test_simai_without_world_size_is_an_error():
    with pytest.raises(SpecError, match="world_size"):
        load_aicb(G13B_TXT)


def test_micro_benchmark_needs_world_size():
    with pytest.raises(SpecError, match="give the option world_size"):
        load_aicb(DATA / "all_to_all_workload.csv")
    s = load_aicb(DATA / "all_to_all_workload.csv", AicbOptions(world_size=16))
    assert _table(s)[("all_to_all", "dp")]["count"] == 1900


def _bad(tmp_path, body: str, name="bad.csv") -> Path:
    p = tmp_path / name
    p.write_text(body)
    return p


@pytest.mark.parametrize("row,needle", [
    ("CommType.allreduce,CommGroup.tp_group,8,16,fwd,None,None,,None,None,None,1",
     "unknown comm type 'CommType.allreduce'"),
    ("CommType.all_reduce,CommGroup.xx_group,8,16,fwd,None,None,,None,None,None,1",
     "unknown comm group"),
    ("CommType.all_reduce,CommGroup.tp_group,8,-16,fwd,None,None,,None,None,None,1",
     "msg_size -16 is negative"),
    ("CommType.all_reduce,CommGroup.tp_group,8,1.5k,fwd,None,None,,None,None,None,1",
     "msg_size '1.5k' is not a whole number"),
    ("CommType.all_reduce,CommGroup.tp_group,8,16,fwd", "expected 12 columns"),
])
def test_bad_csv_rows_name_file_and_line(tmp_path, row, needle):
    p = _bad(tmp_path, f"[rank0 ~ rank15]\n{HEADER}\n{row}\n")
    with pytest.raises(SpecError, match=needle) as exc:
        read_csv(p)
    assert exc.value.issues[0].file == str(p) and exc.value.issues[0].line == 3


def test_group_size_contradicting_the_world_is_an_error(tmp_path):
    row = "CommType.all_reduce,CommGroup.dp_group,3,16,fwd,None,None,,None,None,None,1"
    p = _bad(tmp_path, f"[rank0 ~ rank15]\n{HEADER}\n{row}\n")
    with pytest.raises(SpecError, match=r"tp=1, dp=3 do not divide world_size 16"):
        load_aicb(p)
    with pytest.raises(SpecError, match=r"option tp=2 contradicts the file's tp=8"):
        load_aicb(G13B, AicbOptions(tp=2))


@pytest.mark.parametrize("body,line,needle", [
    ("NOPE model_parallel_NPU_group: 8\n1\n", 1, "unknown parallelism policy"),
    ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 8\n2\n"
     "a -1 1 NONE 0 1 NONE 0 1 NONE 0 100\n", 2, "announces 2 layers"),
    ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 8\n1\n"
     "a -1 1 ALLREDUCEX 8 1 NONE 0 1 NONE 0 100\n", 3, "unknown comm type 'ALLREDUCEX'"),
    ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 8\n1\n"
     "a -1 1 ALLREDUCE 8 1 NONE 0\n", 3, "expected 12 fields"),
])
def test_bad_simai_lines_name_file_and_line(tmp_path, body, line, needle):
    p = _bad(tmp_path, body, "bad.txt")
    with pytest.raises(SpecError, match=needle) as exc:
        load_aicb(p, AicbOptions(world_size=16))
    assert exc.value.issues[0].line == line


def test_pipeline_rows_become_hand_offs_over_every_stage_boundary(tmp_path):
    # stage 0's view, as AICB writes it: activations to the next stage, gradients back
    rows = [
        "CommType.all_reduce,CommGroup.dp_group,2,8,init,None,None,,None,None,None,1",
        "CommType.epoch_end,None,None,0,,None,None,,None,None,None,1",
        "CommType.isend,CommGroup.pp_group,1,64,forward_step,None,None,send_next,None,None,"
        "None,1",
        "CommType.irecv,CommGroup.pp_group,1,64,backward_step,None,None,recv_next,None,None,"
        "None,1",
        "CommType.all_reduce,CommGroup.tp_group,2,32,step,None,None,,None,None,None,1",
        "CommType.epoch_end,None,None,0,,None,None,,None,None,None,1",
    ]
    p = _bad(tmp_path, "[rank0 ~ rank11]\n" + HEADER + "\n" + "\n".join(rows) + "\n")
    s = load_aicb(p)
    assert (s.meta["tp"], s.meta["dp"], s.meta["pp"]) == (2, 2, 3)
    hand = [(op.src, op.dst, op.label) for op in s.ops if hasattr(op, "src")]
    # pipeline (tp 0, dp 0) is ranks 0, 4, 8
    assert (0, 4, "forward_step") in hand and (4, 8, "forward_step") in hand
    assert (8, 4, "backward_step") in hand and (4, 0, "backward_step") in hand
    assert len(hand) == 4 * 2 * 2  # 4 pipelines x 2 boundaries x (activation + gradient)


def test_rows_then_one_epoch_end_are_the_iteration(tmp_path):
    row = "CommType.all_reduce,CommGroup.dp_group,4,16,x,None,None,,None,None,None,2"
    end = "CommType.epoch_end,None,None,0,,None,None,,None,None,None,1"
    s = load_aicb(_bad(tmp_path, f"[rank0 ~ rank3]\n{HEADER}\n{row}\n{end}\n"))
    assert _table(s)[("all_reduce", "dp")]["count"] == 2  # the count column repeats the row


def _gzip_zeros(path: Path, size_bytes: int) -> Path:
    """A gzip bomb: ``size_bytes`` zero bytes, compressed chunk by chunk (~1000:1)."""
    import gzip

    with gzip.open(path, "wb", compresslevel=9) as f:
        for _ in range(size_bytes // 2**20):
            f.write(bytes(2**20))
    return path


def test_gzip_bomb_is_refused_naming_file_and_cap_without_expanding_it(tmp_path):
    """64 MiB of zeros in ~64 KB, read with a 1 MiB cap: refused, naming the file and the cap,
    and at most cap + one chunk was ever held (gzip.decompress would hold all 64 MiB)."""
    import tracemalloc

    bomb = _gzip_zeros(tmp_path / "bomb.csv.gz", 64 * 2**20)
    assert bomb.stat().st_size < 2**20
    tracemalloc.start()
    try:
        with pytest.raises(SpecError) as info:
            read_csv(bomb, limit=2**20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    issue = info.value.issues[0]
    assert issue.file == str(bomb)
    assert f"more than {2**20} bytes" in issue.message and "decompresses" in issue.message
    assert peak < 8 * 2**20, peak


def test_aicb_size_cap_is_exact_and_applies_to_plain_files():
    import gzip

    gz = DATA / "L7B-D1-C02_Llama7B_zero3_mbs1.csv.gz"
    text_bytes = len(gzip.decompress(gz.read_bytes()))
    assert read_csv(gz, limit=text_bytes) == read_csv(gz)
    with pytest.raises(SpecError, match=f"decompresses to more than {text_bytes - 1} bytes"):
        read_csv(gz, limit=text_bytes - 1)
    plain = DATA / "L7B-D1-C01_Llama7B_zero2_mbs1.csv"
    with pytest.raises(SpecError, match=r": is more than 1000 bytes"):
        read_csv(plain, limit=1000)
