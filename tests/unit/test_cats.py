"""Instance selection by combined compute and network cost (policy ``cats``,
workloads/inference.py): hand-made delays, loads and bootstrap bandwidths; no network."""

from __future__ import annotations

from workloads.inference import Arrival, InferenceParams, inference_schedule


def _params(**kw):
    base = dict(prompt_bytes=1000, tokens=4, token_bytes=16, token_rate_per_s=50.0,
                policy="cats", session_requests=4, bootstrap_bytes=1_000_000)
    return InferenceParams(**{**base, **kw})


RTT = {"edge": 0.010, "dc": 0.040}  # s


def _schedule(p, arrivals, bw):
    return inference_schedule(p, arrivals, ["edge", "dc"], ["k1"], lambda c, s: RTT[s],
                              bw_bps=lambda h, s: bw[s])


def test_a_cold_edge_behind_a_slow_link_loses_to_the_dc():
    # bootstrap 1 MB: 800 ms over the edge's 10 Mbit/s, 8 ms over the DC's 1 Gbit/s
    s, _ = _schedule(_params(), [Arrival(0.0, "c1")], {"edge": 10e6, "dc": 1e9})
    (r,) = s.ops[0].info["requests"]
    assert r["server"] == "dc" and r["bootstrap"]
    assert r["why"].startswith("cats: rtt 40.0 ms, queue 0.0 ms, bootstrap 8.0 ms, cost 48.0")
    assert "next edge 810.0 ms" in r["why"]


def test_without_the_bootstrap_term_it_is_nearest_and_a_warm_context_stays():
    s, _ = _schedule(_params(cats_weights=(1.0, 1.0, 0.0)), [Arrival(0.0, "c1")],
                     {"edge": 10e6, "dc": 1e9})
    assert s.ops[0].info["requests"][0]["server"] == "edge"
    # equal links: the edge wins the first request; the session's later ones stay (warm),
    # until its queue outweighs the DC's round trip plus a cold start
    # (one token: each request is busy 1/50 = 20 ms; a cold start costs 8 ms at 1 Gbit/s)
    arrivals = [Arrival(0.001 * i, "c1") for i in range(3)]
    s, _ = _schedule(_params(tokens=1), arrivals, {"edge": 1e9, "dc": 1e9})
    reqs = s.ops[0].info["requests"]
    # edge 10 + 8 < dc 40 + 8; then edge warm 10 + 20 queue < dc 48; then edge 10 + 40 > 48
    assert [r["server"] for r in reqs] == ["edge", "edge", "dc"]
    assert [r["bootstrap"] for r in reqs] == [True, False, True]
    assert "bootstrap 8.0 ms, cost 48.0 ms; next edge 50.0 ms" in reqs[2]["why"]


def test_every_policy_says_why():
    for policy, word in (("nearest", "nearest: rtt 10.0 ms"), ("least_loaded", "in service"),
                         ("affinity", "affinity:")):
        s, _ = _schedule(_params(policy=policy), [Arrival(0.0, "c1")], {"edge": 1e9,
                                                                          "dc": 1e9})
        assert word in s.ops[0].info["requests"][0]["why"]


def _session_ttft(reqs, bw):
    """Summed predicted first-token time of reqs (unit weights, no queue: one session)."""
    boot = sum(1_000_000 * 8 / bw[r["server"]] for r in reqs if r["bootstrap"])
    return sum(RTT[r["server"]] for r in reqs) + boot


def test_oracle_knows_the_session_is_long_and_pays_the_cold_start_where_cats_does_not():
    # a 4-request session; the edge's cold start costs 80 ms (1 MB at 100 Mbit/s), the DC's
    # 8 ms: online, cats sees 10 + 80 > 40 + 8 and goes to the DC for all four (warm there);
    # in hindsight the edge costs 4 x 10 + 80 = 120 ms against 4 x 40 + 8 = 168 ms
    bw = {"edge": 100e6, "dc": 1e9}
    arrivals = [Arrival(1.0 * i, "c1") for i in range(4)]  # 1 s apart: no queueing
    cats, _ = _schedule(_params(), arrivals, bw)
    oracle, _ = _schedule(_params(policy="oracle"), arrivals, bw)
    c, o = cats.ops[0].info["requests"], oracle.ops[0].info["requests"]
    assert [r["server"] for r in c] == ["dc"] * 4
    assert [r["server"] for r in o] == ["edge"] * 4
    assert [r["bootstrap"] for r in o] == [True, False, False, False]
    assert _session_ttft(o, bw) < _session_ttft(c, bw)
    assert o[0]["why"] == ("oracle: session of 4 requests, mean predicted first token 30.0 ms; "
                           "next dc 42.0 ms")
    assert all(r["why"] == "oracle: session home" for r in o[1:])


def test_oracle_for_a_one_request_session_is_cats_with_unit_weights():
    bw = {"edge": 100e6, "dc": 1e9}
    one = [Arrival(0.0, "c1")]
    cats, _ = _schedule(_params(), one, bw)
    oracle, _ = _schedule(_params(policy="oracle"), one, bw)
    assert oracle.ops[0].info["requests"][0]["server"] == \
        cats.ops[0].info["requests"][0]["server"] == "dc"
    assert "mean predicted first token 48.0 ms; next edge 90.0 ms" in \
        oracle.ops[0].info["requests"][0]["why"]


def test_with_layered_delivery_only_the_coarse_layer_counts_against_a_cold_edge():
    # the first token waits for layer 0 only: 1 % of 1 MB is 8 ms over the edge's 10 Mbit/s,
    # so the cold edge (10 + 8 ms) beats the DC (40 + 0.08 ms); the whole megabyte (800 ms)
    # would not
    s, _ = _schedule(_params(layers=(0.01, 0.99)), [Arrival(0.0, "c1")],
                     {"edge": 10e6, "dc": 1e9})
    (r,) = s.ops[0].info["requests"]
    assert r["server"] == "edge" and r["bootstrap"]
    assert r["why"].startswith("cats: rtt 10.0 ms, queue 0.0 ms, bootstrap 8.0 ms, cost 18.0")
    # the oracle uses the same predictor for its one cold start
    s, _ = _schedule(_params(policy="oracle", layers=(0.01, 0.99)), [Arrival(0.0, "c1")],
                     {"edge": 10e6, "dc": 1e9})
    assert s.ops[0].info["requests"][0]["server"] == "edge"
