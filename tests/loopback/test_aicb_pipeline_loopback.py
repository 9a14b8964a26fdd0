"""A per-stage (pipeline-parallel) AICB file replays: hand-offs between the stages' ranks."""

from collections import Counter

import pytest

from models.records import FlowRecord
from traffic_gen import replay
from traffic_gen.jsonl import read_records
from workloads.aicb import load_aicb

pytestmark = pytest.mark.timeout(120)

HEADER = ("comm_type,comm_group,comm_group_size,msg_size,stage,dst,src,additional,"
          "_elapsed_time,algbw,busbw,count")
END = "CommType.epoch_end,None,None,0,,None,None,,None,None,None,1"
SIZE = 256 << 10


def _p2p(op: str, additional: str) -> str:
    return (f"CommType.{op},CommGroup.pp_group,1,{SIZE},step,None,None,{additional},None,"
            "None,None,1")


C = "CommType.computation,None,None,0,compute,None,None,,1000000,None,None,1"  # 1 ms


def test_three_stage_gpipe_file_moves_every_hand_off(launcher, addresses, tmp_path):
    # GPipe with 2 micro-batches, each stage's program as AICB writes it (its own section)
    stages = [
        [_p2p("isend", "send_next"), C] * 2 + [_p2p("irecv", "recv_next"), C] * 2,
        [_p2p("irecv", "recv_prev"), C, _p2p("isend", "send_next")] * 2
        + [_p2p("irecv", "recv_next"), C, _p2p("isend", "send_prev")] * 2,
        [_p2p("irecv", "recv_prev"), C] * 2 + [C, _p2p("isend", "send_prev")] * 2,
    ]
    text = []
    for k, rows in enumerate(stages):
        text += [f"[ pp_stage{k}: [rank{k}] ]", HEADER, END, *rows, END]
    path = tmp_path / "pp3.csv"
    path.write_text("\n".join(text) + "\n")
    s = load_aicb(path)
    assert s.meta["pp"] == 3
    res = replay(s, {r: f"h{r}" for r in range(3)}, launcher, tmp_path / "run", addresses)
    assert res.ok, res.failures
    flows = Counter((f.src_rank, f.dst_rank, f.size_bytes)
                    for f in read_records(res.paths["flows"], FlowRecord))
    assert flows == {(0, 1, SIZE): 2, (1, 2, SIZE): 2, (2, 1, SIZE): 2, (1, 0, SIZE): 2}
