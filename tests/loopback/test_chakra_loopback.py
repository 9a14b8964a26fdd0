"""A real Chakra trace (tests/data/chakra) replays over loopback sockets: its seven GPU-side
collectives run in trace order among every rank of the world, with their (scaled) sizes."""

from pathlib import Path

import pytest

from models.records import CollectiveRecord, FlowRecord
from traffic_gen import replay
from traffic_gen.jsonl import read_records
from workloads.chakra import ChakraOptions, load_chakra

pytestmark = pytest.mark.timeout(120)

TRACE = Path(__file__).parents[1] / "data" / "chakra" / "chakra.0.et.gz"


def test_chakra_trace_replays_its_collectives_in_order(launcher, addresses, tmp_path):
    s = load_chakra(TRACE, ChakraOptions(world_size=3, scale=1000, compute=False))
    res = replay(s, {r: f"h{r}" for r in range(3)}, launcher, tmp_path / "run", addresses)
    assert res.ok, res.failures
    colls = sorted(read_records(res.paths["collectives"], CollectiveRecord),
                   key=lambda c: (c.iteration, c.op_index))
    want = [(op.op, op.size_bytes) for op in s.ops]
    assert [(c.op, c.size_bytes) for c in colls] == want
    assert all(sorted(c.ranks) == [0, 1, 2] for c in colls)
    flows = list(read_records(res.paths["flows"], FlowRecord))
    # every rank sent in every all-reduce (ring: each rank to its successor)
    for c in colls:
        if c.op == "all_reduce":
            senders = {f.src_rank for f in flows if f.collective_id == c.collective_id}
            assert senders == {0, 1, 2}, c
