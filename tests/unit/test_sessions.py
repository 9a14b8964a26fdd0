"""Session lengths of inference workloads (workloads.sessions) and selection per session
(workloads.inference): seeded draws checked against their distributions by a z-test of the
mean and a chi-square goodness-of-fit, sessions cut per client, contexts that stay on their
instance; experiment keys. No network."""

from __future__ import annotations

import math
from itertools import islice
from pathlib import Path

import pytest
from scipy import stats

from workloads.inference import Arrival, InferenceParams, inference_schedule
from workloads.sessions import SessionLength, assign_sessions, length_moments, session_lengths

N = 20_000
Z = 5.0  # a fixed seed makes each check deterministic; 5 standard errors: P ~ 6e-7 by chance


def _draws(spec: SessionLength, seed: int = 7, client: str = "c1") -> list[int]:
    return list(islice(session_lengths(spec, seed, client), N))


@pytest.mark.parametrize("spec", [SessionLength("exponential", 3.0),
                                  SessionLength("exponential", 12.5),
                                  SessionLength("lognormal", 4.0, 0.8),
                                  SessionLength("lognormal", 2.0, 0.3)],
                         ids=["exp3", "exp12.5", "logn4", "logn2"])
def test_the_sample_mean_is_the_distributions_within_its_standard_error(spec):
    xs = _draws(spec)
    mean, var = length_moments(spec)
    assert min(xs) >= 1 and all(isinstance(x, int) for x in xs)
    assert abs(sum(xs) / N - mean) <= Z * math.sqrt(var / N)
    if spec.dist == "exponential":
        assert mean == spec.mean  # the geometric law's mean is exact


def test_a_ceiled_exponential_of_the_same_mean_would_fail_the_mean_test():
    # the naive discretisation ceil(Exp(mean 3)) has mean 1 / (1 - e^(-1/3)) = 3.53: the test
    # above tells it apart from the geometric law of mean 3
    import random

    rng = random.Random(7)
    xs = [math.ceil(rng.expovariate(1 / 3)) for _ in range(N)]
    mean, var = length_moments(SessionLength("exponential", 3.0))
    assert abs(sum(xs) / N - mean) > Z * math.sqrt(var / N)


def test_exponential_lengths_are_geometric_by_chi_square():
    p = 1 / 4
    xs = _draws(SessionLength("exponential", 4.0))
    bins = 12  # 1..11 and >= 12
    observed = [sum(1 for x in xs if x == k) for k in range(1, bins)]
    observed.append(N - sum(observed))
    expected = [N * (1 - p) ** (k - 1) * p for k in range(1, bins)]
    expected.append(N * (1 - p) ** (bins - 1))
    assert stats.chisquare(observed, expected).pvalue > 1e-4


def test_lognormal_lengths_follow_the_rounded_lognormal_by_chi_square():
    spec = SessionLength("lognormal", 4.0, 0.8)
    mu = math.log(4.0) - 0.8 ** 2 / 2
    dist = stats.lognorm(s=0.8, scale=math.exp(mu))
    xs = _draws(spec)
    edges = [0.0, *(k + 0.5 for k in range(1, 15))]
    probs = [dist.cdf(b) - dist.cdf(a) for a, b in zip(edges, edges[1:], strict=False)]
    probs.append(1 - dist.cdf(edges[-1]))
    observed = [sum(1 for x in xs if x == k) for k in range(1, 15)]
    observed.append(N - sum(observed))
    assert stats.chisquare(observed, [N * q for q in probs]).pvalue > 1e-4


def test_fixed_lengths_and_the_checks():
    assert set(_draws(SessionLength("fixed", 3.0))) == {3}
    assert length_moments(SessionLength("fixed", 3.0)) == (3.0, 0.0)
    assert set(_draws(SessionLength("exponential", 1.0))) == {1}
    for bad in (dict(dist="fixed", mean=2.5), dict(dist="exponential", mean=0.5),
                dict(dist="lognormal", mean=3, sigma=0), dict(dist="pareto", mean=3)):
        with pytest.raises(ValueError):
            SessionLength(**bad)  # type: ignore[arg-type]


def test_draws_are_seeded_per_client():
    spec = SessionLength("exponential", 3.0)
    assert _draws(spec, 1, "c1") == _draws(spec, 1, "c1")
    assert _draws(spec, 1, "c1") != _draws(spec, 2, "c1")
    assert _draws(spec, 1, "c1") != _draws(spec, 1, "c2")


def test_requests_are_cut_into_consecutive_sessions_of_the_drawn_lengths():
    spec = SessionLength("exponential", 3.0)
    lengths = list(islice(session_lengths(spec, 5, "c1"), 200))
    alone = assign_sessions(["c1"] * 100, [None] * 100, spec, 5)
    # c1's sessions do not depend on another client's requests interleaved with its own
    mixed = assign_sessions(["c1", "c2"] * 100, [None] * 200, spec, 5)
    assert [a for a in mixed[::2]] == alone
    k = 0
    for s, length in enumerate(lengths):
        part = alone[k:k + length]
        assert {a.session for a in part} == {f"c1-s{s}"}
        assert [a.index for a in part] == list(range(len(part)))
        assert {a.length for a in part} == {length}
        k += length
        if k >= 100:
            break
    # a traced session keeps its id; its length is its number of requests
    traced = assign_sessions(["c1", "c1", "c1"], ["a", None, "a"], spec, 5)
    assert (traced[0].session, traced[0].length, traced[2].index) == ("a", 2, 1)
    assert traced[1].session == "c1-s0"


RTT = {"edge": 0.010, "dc": 0.040}


def _cats(**kw):
    base = dict(prompt_bytes=1000, tokens=1, token_bytes=16, token_rate_per_s=50.0,
                policy="cats", session_requests=4, bootstrap_bytes=1_000_000)
    p = InferenceParams(**{**base, **kw})
    arrivals = [Arrival(0.001 * i, "c1") for i in range(3)]
    s, _ = inference_schedule(p, arrivals, ["edge", "dc"], ["k1"], lambda c, s: RTT[s],
                              bw_bps=lambda h, s: 1e9)
    return s.ops[0].info["requests"]


def test_per_session_selection_keeps_the_context_on_its_instance():
    # per request, cats moves the session's third request to the DC (the edge's queue
    # outweighs a cold start there: tests/unit/test_cats.py), bootstrapping it twice
    moved = _cats()
    assert [r["server"] for r in moved] == ["edge", "edge", "dc"]
    assert [r["bootstrap"] for r in moved] == [True, False, True]
    stay = _cats(per_session=True)
    assert [r["server"] for r in stay] == ["edge"] * 3
    assert [r["bootstrap"] for r in stay] == [True, False, False]
    assert stay[0]["why"].startswith("cats: rtt") and stay[1]["why"] == \
        "cats: session home (per session)"
    # the context is held on the edge for the session: 1 context there at each arrival
    assert [r["server_contexts"] for r in stay] == [1, 1, 1]
    assert [(r["session_length"], r["session_index"]) for r in stay] == [(4, 0), (4, 1), (4, 2)]


def test_drawn_sessions_reach_the_schedule_and_contexts_add_up():
    spec = SessionLength("exponential", 2.0)
    p = InferenceParams(prompt_bytes=100, tokens=2, token_bytes=16, token_rate_per_s=10.0,
                        policy="affinity", session_length=spec, session_seed=3,
                        bootstrap_bytes=1000)
    arrivals = [Arrival(0.05 * i, "c1") for i in range(40)]
    s, _ = inference_schedule(p, arrivals, ["s1", "s2"], ["k1"], lambda c, s: 0.001)
    reqs = s.ops[0].info["requests"]
    want = assign_sessions(["c1"] * 40, [None] * 40, spec, 3)
    assert [(r["session"], r["session_length"], r["session_index"]) for r in reqs] == \
        [(a.session, a.length, a.index) for a in want]
    assert sum(r["bootstrap"] for r in reqs) == len({a.session for a in want})
    # a context is held from its session's first request to its last's end (+0.2 s): one
    # request every 50 ms, so a server holds the contexts of the sessions overlapping then
    for r in reqs:
        held = {q["session"] for q in reqs if q["server"] == r["server"]
                and min(x["at_s"] for x in reqs if x["session"] == q["session"]
                        and x["server"] == r["server"]) <= r["at_s"]
                < max(x["at_s"] for x in reqs if x["session"] == q["session"]
                      and x["server"] == r["server"]) + 0.2}
        assert r["server_contexts"] == len(held) >= 1


ROOT = Path(__file__).resolve().parents[2]


def _experiment(tmp_path, extra: str) -> Path:
    text = (ROOT / "examples/inference.yaml").read_text()
    path = tmp_path / "exp.yaml"
    path.write_text(text.replace("    session_requests: 3\n", extra))
    return path


def test_the_session_key_reaches_the_schedule(tmp_path):
    from orchestration.run.runner import prepare

    path = _experiment(tmp_path, "    session: {length: {dist: lognormal, mean: 3, sigma: 0.5},"
                                 " select: per_session}\n")
    (w,) = prepare(path).workloads
    reqs = w.schedule.ops[0].info["requests"]
    assert all(r["session_length"] >= 1 for r in reqs)
    homes: dict[str, str] = {}
    for r in reqs:
        assert homes.setdefault(r["session"], r["server"]) == r["server"]


@pytest.mark.parametrize("extra,words", [
    ("    session_requests: 3\n    session: {length: {mean: 3}}\n", "not both"),
    ("    session: {length: {dist: fixed, mean: 2.5}}\n", "whole number"),
    ("    session: {length: {dist: pareto, mean: 3}}\n", "session.length.dist"),
    ("    session: {length: {dist: exponential, mean: 0.5}}\n", "session.length.mean"),
])
def test_bad_session_keys_are_refused_naming_them(tmp_path, extra, words):
    from models.errors import SpecError
    from orchestration.run.runner import prepare

    with pytest.raises(SpecError) as err:
        prepare(_experiment(tmp_path, extra))
    assert "workloads[0]" in str(err.value) and words in str(err.value)
