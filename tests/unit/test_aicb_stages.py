"""AICB files of every shape: per-stage sections (pipeline parallel), ZeRO-3, MoE/EP."""

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from models.errors import SpecError
from models.schedule import Collective, SendRecv
from orchestration.cli.app import app
from workloads.aicb import AicbOptions, load_aicb, read_csv
from workloads.summary import collective_table, stage_table

DATA = Path(__file__).parent.parent / "data" / "aicb"
HEADER = ("comm_type,comm_group,comm_group_size,msg_size,stage,dst,src,additional,"
          "_elapsed_time,algbw,busbw,count")
END = "CommType.epoch_end,None,None,0,,None,None,,None,None,None,1"


def _unzip(tmp_path: Path, name: str) -> Path:
    out = tmp_path / name.removesuffix(".gz")
    out.write_bytes(gzip.decompress((DATA / name).read_bytes()))
    return out


@pytest.fixture(scope="module")
def pp8(tmp_path_factory) -> Path:
    return _unzip(tmp_path_factory.mktemp("aicb"),
                  "L65B-M1-C05_Llama65B_megatron_tp2_pp8_mbs1.csv.gz")


def _stage_rows(path: Path) -> dict[int, list[list[str]]]:
    """Iteration rows of each stage section, split with plain string operations (independent
    of the importer): section S starts at its '[ pp_stageS' line; its iteration is between
    its first and second epoch_end."""
    out: dict[int, list[list[str]]] = {}
    stage, ends = -1, 0
    for ln in path.read_text().splitlines():
        if ln.startswith("[ pp_stage"):
            stage, ends = stage + 1, 0
            out[stage] = []
        elif ln.startswith("CommType.epoch_end"):
            ends += 1
        elif ends == 1 and ln.startswith("CommType."):
            out[stage].append(ln.split(","))
    return out


def _p(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "w.csv"
    p.write_text(text)
    return p


def _row(op: str, group: str, size: int, additional: str = "", stage: str = "s",
         gsize: int = 1) -> str:
    return (f"CommType.{op},CommGroup.{group}_group,{gsize},{size},{stage},None,None,"
            f"{additional},None,None,None,1")


def _sections(*stages: list[str], per_stage: int = 1) -> str:
    out = []
    for k, rows in enumerate(stages):
        ranks = ", ".join(f"rank{r}" for r in range(k * per_stage, (k + 1) * per_stage))
        out += [f"[ pp_stage{k}: [{ranks}] ]", HEADER, END, *rows, END]
    return "\n".join(out) + "\n"


def test_per_stage_file_reads_every_section(pp8):
    f = read_csv(pp8)
    assert [st.index for st in f.stages] == list(range(8))
    assert f.stages[1].ranks == tuple(range(16, 32))
    assert f.world_size == 128 and f.pp == 8
    s = load_aicb(pp8)
    assert (s.meta["tp"], s.meta["dp"], s.meta["pp"]) == (2, 8, 8)


def test_per_stage_counts_match_each_section(pp8):
    rows = _stage_rows(pp8)
    table = {(r["stage"], r["op"], r["group"]): r for r in stage_table(load_aicb(pp8))}
    for stage, rs in rows.items():
        n_tp_ar = sum(r[0] == "CommType.all_reduce" and r[1] == "CommGroup.tp_group" for r in rs)
        assert table[(str(stage), "all_reduce", "tp")]["count"] == n_tp_ar
        assert table[(str(stage), "all_reduce", "tp")]["instances"] == 8  # dp=8 TP groups
        sends = Counter(r[7] for r in rs if r[0] == "CommType.isend")
        if stage < 7:
            assert table[(f"{stage}->{stage + 1}", "send_recv", "pp")]["count"] == \
                sends["send_next"]
        if stage > 0:
            assert table[(f"{stage}->{stage - 1}", "send_recv", "pp")]["count"] == \
                sends["send_prev"]


def test_hand_offs_run_between_the_same_pipeline_in_adjacent_stages(pp8):
    s = load_aicb(pp8)
    hand = [op for op in s.ops if isinstance(op, SendRecv)]
    # 16 pipelines x 7 boundaries x 8 micro-batches x (activation + gradient)
    assert len(hand) == 16 * 7 * 8 * 2
    for op in hand:
        assert abs(op.src // 16 - op.dst // 16) == 1 and op.src % 16 == op.dst % 16
        assert op.group and s.groups[op.group].kind == "pp"


def test_merged_order_keeps_each_stages_own_order(pp8):
    s = load_aicb(pp8)
    rows = _stage_rows(pp8)
    for stage in (0, 3, 7):
        rank = 16 * stage  # tp 0, dp 0 of that stage
        seen = []
        for op in s.ops:
            if isinstance(op, SendRecv) and rank in (op.src, op.dst):
                seen.append("send" if op.src == rank else "recv")
            elif isinstance(op, Collective) and op.op == "all_reduce" and \
                    s.groups[op.group].kind == "tp" and rank in s.groups[op.group].ranks:
                seen.append("tp")
        want = ["send" if r[0] == "CommType.isend" else "recv" if r[0] == "CommType.irecv"
                else "tp" for r in rows[stage]
                if r[0] in ("CommType.isend", "CommType.irecv")
                or (r[0] == "CommType.all_reduce" and r[1] == "CommGroup.tp_group")]
        # hand-offs of one batch may swap places; everything else keeps the file's order
        assert Counter(seen) == Counter(want)
        assert [x for x in seen if x == "tp"] == [x for x in want if x == "tp"]
        assert _batches(seen) == _batches(want)


def _batches(seq: list[str]) -> list[Counter]:
    out: list[Counter] = []
    prev_tp = True
    for x in seq:
        if x == "tp":
            prev_tp = True
            continue
        if prev_tp:
            out.append(Counter())
        out[-1][x] += 1
        prev_tp = False
    return out


def test_cli_inspect_prints_a_table_per_stage(pp8):
    res = CliRunner().invoke(app, ["workload", "inspect", str(pp8), "--json"])
    assert res.exit_code == 0, res.output
    stages = {r["stage"] for r in json.loads(res.output)["stages"]}
    assert {"0", "7", "0->1", "7->6"} <= stages
    res = CliRunner().invoke(app, ["workload", "inspect", str(pp8)])
    assert res.exit_code == 0 and "per pipeline stage" in res.output


def test_small_sectioned_file_hands_off_both_ways(tmp_path):
    fwd = _row("isend", "pp", 64, "send_next", "forward_step")
    back = _row("irecv", "pp", 64, "recv_next", "backward_step")
    s = load_aicb(_p(tmp_path, _sections(
        [fwd, _row("all_reduce", "dp", 8, gsize=2), back],
        [_row("irecv", "pp", 64, "recv_prev", "forward_step"),
         _row("isend", "pp", 64, "send_prev", "backward_step")], per_stage=2)))
    assert (s.meta["tp"], s.meta["dp"], s.meta["pp"]) == (1, 2, 2)
    hand = [(op.src, op.dst) for op in s.ops if isinstance(op, SendRecv)]
    assert sorted(hand) == [(0, 2), (1, 3), (2, 0), (3, 1)]
    dp = [op.group for op in s.ops if isinstance(op, Collective)]
    assert dp == ["dp0"]  # stage 0's DP row runs on stage 0's DP group only


@pytest.mark.parametrize("stage1,needle,line", [
    ([_row("all_reduce", "dp", 8)],
     "send_next #1 (stage 0 -> 1, 64 B) has no matching row in pp_stage1", 4),
    ([_row("irecv", "pp", 32, "recv_prev")], "disagree on the op or size", 4),
    ([_row("isend", "pp", 64, "send_next")], "leads to stage 2, outside 0..1", 9),
])
def test_unmatched_hand_offs_name_stage_and_line(tmp_path, stage1, needle, line):
    p = _p(tmp_path, _sections([_row("isend", "pp", 64, "send_next")], stage1))
    with pytest.raises(SpecError) as exc:
        load_aicb(p, AicbOptions())
    assert needle in str(exc.value)
    assert exc.value.issues[0].line == line


def test_sections_that_would_deadlock_are_refused(tmp_path):
    # stage 0 waits for a gradient before the pp all-reduce; stage 1 sends it only after
    p = _p(tmp_path, _sections(
        [_row("irecv", "pp", 64, "recv_next"), _row("all_reduce", "pp", 8, gsize=2)],
        [_row("all_reduce", "pp", 8, gsize=2), _row("isend", "pp", 64, "send_prev")]))
    with pytest.raises(SpecError, match="deadlock; stages wait at: pp_stage0 line 4"):
        load_aicb(p)


def test_stage_headings_out_of_order_or_bad_ranks(tmp_path):
    text = _sections([_row("all_reduce", "dp", 8)], [_row("all_reduce", "dp", 8)])
    with pytest.raises(SpecError, match="pp_stage0 where pp_stage1 was expected") as exc:
        read_csv(_p(tmp_path, text.replace("pp_stage1", "pp_stage0")))
    assert exc.value.issues[0].line == 6
    with pytest.raises(SpecError, match="'gpu1' is not rankN"):
        read_csv(_p(tmp_path, text.replace("[rank1]", "[gpu1]")))
    with pytest.raises(SpecError, match="do not cover ranks 0..1 once each"):
        read_csv(_p(tmp_path, text.replace("[rank1]", "[rank0]")))


def test_stage_ranks_other_than_megatrons_are_refused(tmp_path):
    text = _sections([_row("all_reduce", "dp", 8, gsize=2)],
                     [_row("all_reduce", "dp", 8, gsize=2)], per_stage=2)
    text = text.replace("[rank0, rank1]", "[rank0, rank2]").replace("[rank2, rank3]",
                                                                   "[rank1, rank3]")
    with pytest.raises(SpecError, match=r"pp_stage0 lists ranks \[0, 2\], but the layout"):
        load_aicb(_p(tmp_path, text))


def test_zero3_file_counts_match_the_file(tmp_path):
    p = _unzip(tmp_path, "L7B-D1-C02_Llama7B_zero3_mbs1.csv.gz")
    lines = p.read_text().splitlines()
    first = next(i for i, ln in enumerate(lines) if ln.startswith("CommType.epoch_end"))
    want: Counter = Counter()
    for ln in lines[first + 1:]:
        f = ln.split(",")
        if f[0] != "CommType.epoch_end":
            want[(f[0].removeprefix("CommType."), f[1])] += int(f[-1])
    table = {(r["op"], r["group"]): r["count"] for r in collective_table(load_aicb(p))}
    ag = want[("all_gather_into_tensor", "CommGroup.dp_group")] + \
        want[("all_gather", "CommGroup.dp_group")]
    assert ag > 0 and table[("all_gather", "dp")] == ag
    assert table[("reduce_scatter", "dp")] == want[("reduce_scatter_tensor",
                                                    "CommGroup.dp_group")] + \
        want[("reduce_scatter", "CommGroup.dp_group")]


def test_moe_file_with_expert_parallel_rows(tmp_path):
    # the MoE rows of AICB's Megatron generator: all_to_all on the ep group (dispatch and
    # combine), all_reduce on the expert data-parallel group
    rows = [_row("all_to_all", "ep", 4096, gsize=4), _row("all_to_all", "ep", 4096, gsize=4),
            _row("all_reduce", "ep_dp", 1024, gsize=2), _row("all_reduce", "tp", 512, gsize=2)]
    s = load_aicb(_p(tmp_path, f"[rank0 ~ rank15]\n{HEADER}\n{END}\n" + "\n".join(rows)
                     + f"\n{END}\n"), AicbOptions(pp=1))
    t = {(r["op"], r["group"]): r for r in collective_table(s)}
    assert (s.meta["tp"], s.meta["dp"], s.meta["ep"]) == (2, 8, 4)
    assert t[("all_to_all", "ep")]["count"] == 2 and t[("all_to_all", "ep")]["instances"] == 4
    assert t[("all_reduce", "ep_dp")]["group_size"] == 2


def test_gzip_file_and_one_dp_replica_of_a_per_stage_file():
    from workloads.spec import load_schedule

    s = load_schedule(DATA / "L65B-M1-C05_Llama65B_megatron_tp2_pp8_mbs1.csv.gz", dp_replicas=1)
    assert s.world_size == 16 and (s.meta["tp"], s.meta["dp"], s.meta["pp"]) == (2, 1, 8)
    hand = [op for op in s.ops if isinstance(op, SendRecv)]
    assert len(hand) == 2 * 7 * 8 * 2  # 2 pipelines (tp ranks) x 7 boundaries x 8 x 2
    assert all(abs(op.src // 2 - op.dst // 2) == 1 for op in hand)  # stage s: ranks 2s, 2s+1
