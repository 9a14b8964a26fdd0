"""Context memory of inference instances (workloads/inference.py): a held context costs its
bytes for its session, the least recently used one is evicted when a new one does not fit,
an evicted session's next request is a cold choice with a bootstrap, and ``cats`` weighs the
memory pressure an instance advertises. Hand-made delays and sizes; no network."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from models.errors import SpecError
from models.requests import RequestRecord, parse_tag
from orchestration.run.runner import prepare
from workloads.inference import Arrival, InferenceParams, inference_schedule

CTX = 1000  # bytes per context


def _params(**kw):
    base = dict(prompt_bytes=100, tokens=1, token_bytes=16, token_rate_per_s=10.0,
                policy="nearest", bootstrap_bytes=CTX, context_bytes=CTX)
    return InferenceParams(**{**base, **kw})  # a request is in service 1 / 10 = 100 ms


def _requests(p, arrivals, servers, rtt, bw=1e9):
    s, _ = inference_schedule(p, arrivals, servers, ["k1"], rtt, bw_bps=lambda h, s: bw)
    return s, s.ops[0].info["requests"]


# sessions a, b, c on one server holding two contexts (traced: a session's requests are
# those listed); a ends at 0.55 s, b at 0.5 s, c at 0.7 s (last request + 100 ms)
TRACE = [Arrival(0.0, "u", "a"), Arrival(0.1, "u", "b"), Arrival(0.2, "u", "a"),
         Arrival(0.3, "u", "c"), Arrival(0.4, "u", "b"), Arrival(0.45, "u", "a"),
         Arrival(0.6, "u", "c")]


def test_the_least_recently_used_context_is_evicted_and_its_session_bootstraps_again():
    p = _params(memory_bytes={"s": 2 * CTX})
    s, reqs = _requests(p, TRACE, ["s"], lambda c, s: 0.001)
    # a's second request (0.2 s) makes b the least recently used: c evicts b, not a; b
    # comes back cold and evicts a, which comes back cold and evicts c; at 0.6 s b's
    # and a's (0.55 s) sessions have ended, so c fits without evicting anyone
    assert [r["evicted"] for r in reqs] == [[], [], [], ["b"], ["a"], ["c"], []]
    assert [r["bootstrap"] for r in reqs] == [True, True, False, True, True, True, True]
    assert [r["server_memory_bytes"] for r in reqs] == [CTX] + [2 * CTX] * 5 + [CTX]
    assert [r["server_contexts"] for r in reqs] == [1, 2, 2, 2, 2, 2, 1]
    assert s.meta["evictions"] == 3 and s.meta["bootstraps"] == 6
    # the re-bootstraps are real fetches and shards in the schedule
    boots = {parse_tag(m.tag)[0] for m in s.ops[0].messages if parse_tag(m.tag)[1] == "boot"}
    assert boots == {0, 1, 3, 4, 5, 6}
    # without a memory limit every context stays for its session: three bootstraps
    _, free = _requests(_params(), TRACE, ["s"], lambda c, s: 0.001)
    assert [r["bootstrap"] for r in free] == [True, True, False, True, False, False, False]
    assert all(r["evicted"] == [] for r in free)


def test_an_evicted_affinity_session_is_a_cold_choice_again():
    rtt = {"s1": 0.001, "s2": 0.002}
    trace = [Arrival(0.0, "u", "a"), Arrival(0.01, "u", "b"), Arrival(0.2, "u", "c"),
             Arrival(0.35, "u", "a"), Arrival(0.5, "u", "b"), Arrival(0.8, "u", "c")]
    p = _params(policy="affinity", memory_bytes={"s1": CTX, "s2": CTX})
    _, reqs = _requests(p, trace, ["s1", "s2"], lambda c, s: rtt[s])
    # a on s1 (nearest of two idle), b on s2 (s1 busy), c on s1 (both full, idle: nearest)
    # evicting a; a's next request is chosen afresh and bootstraps, evicting c
    assert [r["server"] for r in reqs[:4]] == ["s1", "s2", "s1", "s1"]
    assert reqs[2]["evicted"] == ["a"] and reqs[3]["evicted"] == ["c"]
    assert reqs[3]["bootstrap"] and reqs[3]["why"].startswith("affinity: least loaded")
    assert reqs[4]["why"] == "affinity: session home" and not reqs[4]["bootstrap"]
    assert "0.0 MiB context memory free" not in reqs[0]["why"]  # without least_loaded


def test_least_loaded_breaks_ties_by_free_context_memory():
    rtt = {"s1": 0.001, "s2": 0.002}
    p = _params(policy="least_loaded", memory_bytes={"s1": CTX, "s2": 4 * CTX})
    _, reqs = _requests(p, [Arrival(0.0, "u", "a"), Arrival(0.2, "u", "b")],
                        ["s1", "s2"], lambda c, s: rtt[s])
    # both idle and empty: s2 has more free memory than the nearer s1
    assert [r["server"] for r in reqs] == ["s2", "s2"]
    assert reqs[1]["why"] == "least_loaded: 0 in service, 0.0 MiB context memory free"


def _cats(w_memory: float):
    # fillers f1..f3 sit next to the edge (1 ms; DC 100 ms) and fill 3 of its 4 contexts;
    # then u (edge 10 ms, DC 40 ms) starts a session; bootstraps take 8 us at 1 Gbit/s x 1e3
    rtt = {("u", "edge"): 0.010, ("u", "dc"): 0.040}
    p = _params(policy="cats", bootstrap_bytes=1_000_000, context_bytes=CTX,
                memory_bytes={"edge": 4 * CTX, "dc": 100 * CTX},
                cats_weights=(1.0, 1.0, 1.0, w_memory))
    arrivals = [Arrival(0.2 * i, f"f{i + 1}") for i in range(3)] + [Arrival(0.6, "u")] + \
        [Arrival(2.0 + 0.2 * i, f"f{i + 1}") for i in range(3)]
    return _requests(p, arrivals, ["edge", "dc"],
                     lambda c, s: rtt.get((c, s), 0.001 if s == "edge" else 0.100))[1]


def test_cats_avoids_a_nearly_full_instance_when_the_memory_weight_says_so():
    # bootstrap 1 MB over 1 Gbit/s: 8 ms. Edge cold: 10 + 8 + w x 8 (full after admission),
    # DC: 40 + 8 + w x 8 / 100 (why: the unweighted terms); the edge wins below w = 30 / 7.92
    plain = _cats(0.0)
    assert [r["server"] for r in plain[:3]] == ["edge"] * 3
    assert plain[3]["server"] == "edge" and plain[3]["evicted"] == []  # 4th fits exactly
    heavy = _cats(10.0)
    assert [r["server"] for r in heavy[:3]] == ["edge"] * 3
    assert heavy[3]["server"] == "dc" and heavy[3]["bootstrap"]
    assert "memory 0.1 ms (0.1 MiB free), cost 48.8 ms; next edge 98.0 ms" in heavy[3]["why"]
    # the fillers' contexts stay on the edge for their sessions
    assert [r["bootstrap"] for r in heavy[4:]] == [False] * 3


def test_a_new_context_on_a_full_instance_evicts_under_cats_without_the_weight():
    p = _params(policy="cats", memory_bytes={"edge": 2 * CTX, "dc": 2 * CTX},
                cats_weights=(1.0, 1.0, 0.0, 0.0))
    rtt = {"edge": 0.001, "dc": 0.050}
    arrivals = [Arrival(0.2 * i, f"c{i}") for i in range(3)] + \
        [Arrival(1.0 + 0.2 * i, f"c{i}") for i in range(3)]
    _, reqs = _requests(p, arrivals, ["edge", "dc"], lambda c, s: rtt[s])
    assert [r["server"] for r in reqs[:3]] == ["edge"] * 3
    assert reqs[2]["evicted"] == ["c0-s0"]
    assert reqs[3]["bootstrap"] and reqs[3]["evicted"] == ["c1-s0"]  # c0 comes back cold


def test_records_carry_memory_and_evictions():
    r = RequestRecord("run", "q1", "a", "u", "s", 0.0, 0.1, 0.2, 0.1, 1, None, None, 10, 16,
                      True, CTX, 0.01, "nearest", server_contexts=2,
                      server_memory_bytes=2 * CTX, evicted=("b",))
    d = r.to_dict()
    assert d["server_memory_bytes"] == 2 * CTX and d["evicted"] == ["b"]
    assert RequestRecord.from_dict(d) == r


ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("change", "key", "words"), [
    ({"memory": "8 parsecs"}, "workloads[0].memory", "unit"),
    ({"memory": {"s1": "1GiB", "s9": "1GiB"}}, "workloads[0].memory.s9", "not among servers"),
    ({"memory": "1KiB"}, "workloads[0].memory", "cannot hold one context"),
    ({"memory": {"s1": "1GiB", "s2": "2KiB"}, "context_size": "4KiB"},
     "workloads[0].memory.s2", "cannot hold one context of 4096 B"),
    ({"context_size": "-1KiB"}, "workloads[0].context_size", ""),
    ({"cats_weights": {"memory": -1}}, "workloads[0].cats_weights.memory", "greater than"),
])
def test_bad_memory_values_name_file_key_and_line(tmp_path, change, key, words):
    doc = YAML(typ="safe").load((ROOT / "examples/inference.yaml").read_text())
    doc["workloads"][0].update(change)
    path = tmp_path / "exp.yaml"
    with path.open("w") as f:
        YAML().dump(doc, f)
    with pytest.raises(SpecError) as info:
        prepare(path)
    msg = str(info.value)
    assert re.match(rf"{re.escape(str(path))}:\d+: ", msg), msg
    assert key in msg and words in msg, msg


def test_memory_and_context_size_reach_the_schedule(tmp_path):
    doc = YAML(typ="safe").load((ROOT / "examples/inference.yaml").read_text())
    doc["workloads"][0].update({"memory": {"s1": "1GiB", "s2": "1GiB"},
                                "context_size": "3KiB"})
    path = tmp_path / "exp.yaml"
    with path.open("w") as f:
        YAML().dump(doc, f)
    reqs = prepare(path).workloads[0].schedule.ops[0].info["requests"]
    assert all(r["server_memory_bytes"] == 3 * 1024 * r["server_contexts"] for r in reqs)
