"""Inference and background workloads as pure schedules: sessions and bootstraps, instance
selection, layered delivery, flow-size distributions and the arrival rate for a target load."""

from __future__ import annotations

import random

import pytest

import topologies
from models.requests import parse_tag, tag
from models.schedule import Message, Schedule, ScheduleError, Timed
from workloads.background import (
    BackgroundParams,
    arrival_rate_per_s,
    background_schedule,
    load_cdf,
    offered_load_cv,
)
from workloads.inference import Arrival, InferenceParams, inference_schedule, poisson_arrivals
from workloads.paths import rtt_delay_s


def _params(**kw):
    base = dict(prompt_bytes=1000, tokens=4, token_bytes=16, token_rate_per_s=50.0,
                policy="nearest", session_requests=3, bootstrap_bytes=100_000,
                layers=(0.25, 0.75))
    return InferenceParams(**{**base, **kw})


def _requests(s: Schedule):
    return s.ops[0].info["requests"]


def _two_server_plan(near_delay: str, far_delay: str):
    doc = {"name": "two-servers", "nodes": {"sw": {"kind": "switch"}, "c1": {"kind": "host"},
                                           "near": {"kind": "host"}, "far": {"kind": "host"},
                                           "k1": {"kind": "host"}},
           "links": [{"endpoints": ["c1", "sw"]},
                     {"endpoints": ["far", "sw"], "delay": far_delay},
                     {"endpoints": ["near", "sw"], "delay": near_delay},
                     {"endpoints": ["k1", "sw"]}]}
    return topologies.resolve(topologies.parse_topology(doc, "inline"), "inline")


def test_only_the_first_request_of_a_session_on_a_server_bootstraps():
    arrivals = [Arrival(0.1 * i, "c1") for i in range(6)]  # two sessions of 3 requests
    s, hosts = inference_schedule(_params(), arrivals, ["s1"], ["k1", "k2"], lambda c, v: 0.0)
    reqs = _requests(s)
    assert [r["session"] for r in reqs] == ["c1-s0"] * 3 + ["c1-s1"] * 3
    assert [r["bootstrap"] for r in reqs] == [True, False, False, True, False, False]
    boots = [m for m in s.ops[0].messages if parse_tag(m.tag)[1] == "boot"]
    # two bootstraps x two holders x two layers; shards of 100000 / 2 split 25 % / 75 %
    assert sorted(m.size_bytes for m in boots) == [12500] * 4 + [37500] * 4
    assert {hosts[m.src] for m in boots} == {"k1", "k2"}


def test_first_token_waits_for_the_prompt_and_the_coarse_layer_only():
    s, _ = inference_schedule(_params(), [Arrival(0.0, "c1")], ["s1"], ["k1", "k2"],
                              lambda c, v: 0.0)
    msgs = s.ops[0].messages
    tok0 = next(m for m in msgs if m.tag == tag(0, "tok", 0))
    assert sorted(msgs[d].tag for d in tok0.after) == ["r0:boot0.L0", "r0:boot1.L0",
                                                       "r0:prompt"]
    gaps = [m.gap_s for m in msgs if parse_tag(m.tag)[1] == "tok"]
    assert gaps == [0.0] + [1 / 50.0] * 3  # tokens at the token rate


def test_nearest_picks_the_server_with_the_lower_configured_delay():
    plan = _two_server_plan("1ms", "20ms")
    assert rtt_delay_s(plan, "c1", "near") == pytest.approx(0.002)
    assert rtt_delay_s(plan, "c1", "far") == pytest.approx(0.040)
    arrivals = [Arrival(0.05 * i, "c1") for i in range(5)]
    for servers in (["far", "near"], ["near", "far"]):  # not the list order
        s, _ = inference_schedule(_params(), arrivals, servers, ["k1"],
                                  lambda c, v: rtt_delay_s(plan, c, v))
        assert {r["server"] for r in _requests(s)} == {"near"}
    # swap the delays: the other server is now nearest
    plan = _two_server_plan("20ms", "1ms")
    s, _ = inference_schedule(_params(), arrivals, ["near", "far"], ["k1"],
                              lambda c, v: rtt_delay_s(plan, c, v))
    assert {r["server"] for r in _requests(s)} == {"far"}


def test_least_loaded_spreads_and_affinity_keeps_sessions_home():
    # 4 requests 10 ms apart, each busy 4/50 = 80 ms: least_loaded alternates the servers
    arrivals = [Arrival(0.01 * i, "c1") for i in range(4)]
    s, _ = inference_schedule(_params(policy="least_loaded", session_requests=4), arrivals,
                              ["s1", "s2"], ["k1"], lambda c, v: 0.0)
    assert [r["server"] for r in _requests(s)] == ["s1", "s2", "s1", "s2"]
    assert [r["bootstrap"] for r in _requests(s)] == [True, True, False, False]
    s, _ = inference_schedule(_params(policy="affinity", session_requests=4), arrivals,
                              ["s1", "s2"], ["k1"], lambda c, v: 0.0)
    assert [r["server"] for r in _requests(s)] == ["s1"] * 4
    assert sum(r["bootstrap"] for r in _requests(s)) == 1


def test_poisson_arrivals_are_seeded_and_have_the_rate():
    a = poisson_arrivals(["c1", "c2"], 5.0, 200.0, seed=3)
    assert a == poisson_arrivals(["c1", "c2"], 5.0, 200.0, seed=3)
    # 2 x 5/s x 200 s = 2000 expected; Poisson sd sqrt(2000) = 45: 4 sd
    assert abs(len(a) - 2000) < 180
    assert a != poisson_arrivals(["c1", "c2"], 5.0, 200.0, seed=4)


@pytest.mark.parametrize(("kw", "word"), [
    ({"policy": "random"}, "policy"), ({"layers": (0.5, 0.2)}, "layers"),
    ({"tokens": 0}, "tokens")])
def test_bad_inference_parameters_are_refused(kw, word):
    with pytest.raises(ValueError, match=word):
        inference_schedule(_params(**kw), [Arrival(0, "c1")], ["s1"], ["k1"], lambda c, v: 0)


def test_a_holder_that_is_a_server_is_refused():
    with pytest.raises(ValueError, match="holders"):
        inference_schedule(_params(), [Arrival(0, "c1")], ["s1"], ["s1"], lambda c, v: 0)


def test_a_timed_message_may_only_wait_for_earlier_messages_it_takes_part_in():
    ok = (Message(0, 1, 10), Message(1, 2, 10, after=(0,)))
    Schedule("t", 3, {}, (Timed(ok),))
    with pytest.raises(ScheduleError, match="not an earlier message"):
        Schedule("t", 3, {}, (Timed((Message(0, 1, 10, after=(1,)), Message(1, 2, 10))),))
    with pytest.raises(ScheduleError, match="neither sends nor receives"):
        Schedule("t", 3, {}, (Timed((Message(0, 1, 10), Message(2, 0, 10, after=(0,)))),))


def test_flow_size_cdfs_have_their_published_means():
    # mean flow sizes of the ns-2 scripts that use these CDFs: 1138 and 5117 packets of
    # 1460 B (PIAS/MQ-ECN simulations); ours interpolates linearly like ns-2: within 0.5 %
    assert load_cdf("websearch").mean_bytes / 1460 == pytest.approx(1138, rel=0.005)
    assert load_cdf("datamining").mean_bytes / 1460 == pytest.approx(5117, rel=0.005)
    with pytest.raises(ValueError, match="known: websearch, datamining"):
        load_cdf("hadoop")


def test_sampled_sizes_follow_the_cdf():
    cdf, rng = load_cdf("websearch"), random.Random(1)
    sizes = [cdf.sample(rng) for _ in range(20000)]
    assert min(sizes) == 6 * 1460 and max(sizes) <= 20000 * 1460
    # P(S <= 53 packets) = 0.53; binomial sd over 20000 draws 0.0035: 4 sd
    assert sum(s <= 53 * 1460 for s in sizes) / len(sizes) == pytest.approx(0.53, abs=0.014)


def test_poisson_background_offers_the_target_load():
    p = BackgroundParams("datamining", 0.4, 1e9, 300.0, size_scale=10, seed=2)
    s = background_schedule(p, [0, 1, 2], [3], 4)
    lam = arrival_rate_per_s(0.4, 1e9, load_cdf("datamining", 10).mean_bytes)
    assert s.meta["arrival_rate_per_s"] == pytest.approx(lam)
    offered = s.meta["offered_bytes"] * 8 / (300.0 * 1e9)
    cv = offered_load_cv(load_cdf("datamining", 10), lam, 300.0)
    # data mining is heavy-tailed (E[S^2]/E[S]^2 = 65): 3 standard deviations of the
    # compound Poisson sum over 300 s (about 0.1 of the load)
    assert offered == pytest.approx(0.4, rel=3 * cv)
    msgs = s.ops[0].messages
    assert all(m.dst == 3 and m.src in (0, 1, 2) for m in msgs)
    assert [m.at_s for m in msgs] == sorted(m.at_s for m in msgs)
    assert s == background_schedule(p, [0, 1, 2], [3], 4)  # seeded
