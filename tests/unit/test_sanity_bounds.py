"""Values past a sanity bound (a typo such as ``1e9 Gbit/s``, a seed of 2**64) are refused by the
one unit parser and the spec models, with the bound in the message; values at the bound pass."""

from __future__ import annotations

import pytest
from cli_run import refused_run

from models.units import (
    MAX_DURATION_S,
    MAX_RATE_BPS,
    MAX_SIZE_BYTES,
    UnitError,
    parse_duration_s,
    parse_rate_bps,
    parse_size_bytes,
)


@pytest.mark.parametrize("parse,at,past,words", [
    (parse_rate_bps, "10Tbit", "1e9Gbit", "10Tbit"),
    (parse_duration_s, "86400s", "86401s", "1 day"),
    (parse_size_bytes, "1048576GiB", "1048577GiB", "1PiB"),
])
def test_past_the_bound_is_refused_naming_it(parse, at, past, words):
    assert parse(at) in (MAX_RATE_BPS, MAX_DURATION_S, MAX_SIZE_BYTES)
    with pytest.raises(UnitError, match=f"sanity bound of {words}"):
        parse(past)


@pytest.mark.parametrize("seed", ["18446744073709551616", "-1", "4294967296"])
def test_a_seed_past_its_bound_is_refused_with_file_key_and_line(tmp_path, seed):
    path = tmp_path / "e.yaml"
    path.write_text(f"""name: t
seed: {seed}
topology: {{generator: single_switch, params: {{hosts: 2}}}}
workloads:
  - {{kind: incast, receiver: h1, size: 1MiB}}
""")
    err = refused_run(path, tmp_path)
    assert "e.yaml:2: seed" in err and ("4294967295" in err or "0" in err), err


def test_a_link_rate_past_the_bound_is_refused_with_file_key_and_line(tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text("""name: t
topology:
  inline:
    name: t
    nodes: {h1: {kind: host}, h2: {kind: host}}
    links:
      - {endpoints: [h1, h2], rate: 1e9Gbit}
workloads:
  - {kind: incast, receiver: h1, size: 1MiB}
""")
    err = refused_run(path, tmp_path)
    assert "sanity bound of 10Tbit" in err and "e.yaml:7" in err, err


@pytest.mark.parametrize("stragglers,key,bound", [
    ("{lognormal_sigma: 1e300}", "stragglers.lognormal_sigma", "3"),
    ("{fixed: {1: 1e9}}", "stragglers.fixed[1]", "1000"),
])
def test_a_straggler_past_its_bound_is_refused_with_file_key_and_line(tmp_path, stragglers,
                                                                     key, bound):
    """A sigma of 1e300 overflowed exp() in the draw (a traceback the schema fuzz found)."""
    path = tmp_path / "e.yaml"
    path.write_text(f"""name: t
topology: {{generator: single_switch, params: {{hosts: 2}}}}
workloads:
  - kind: collective
    op: all_reduce
    size: 1MiB
    compute: 1ms
    stragglers: {stragglers}
""")
    err = refused_run(path, tmp_path)
    assert f"e.yaml:8: workloads[0].{key}" in err and bound in err, err
