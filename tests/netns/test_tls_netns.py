"""Encryption cost on a live run (host kernel): examples/tls_allreduce.yaml (an inter-DC ring
all-reduce over TLS 1.3) and the same file with encryption none; the TLS run's flows carry
the cipher and handshake, move the same payload, and cost more CPU per GB."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import run_example, run_ok

pytestmark = pytest.mark.netns
ROOT = Path(__file__).resolve().parents[2]




@pytest.mark.timeout(900)
def test_tls_allreduce_against_plain(tmp_path, state_env):
    from analysis.encryption import compare

    example = ROOT / "examples/tls_allreduce.yaml"
    plain_file = tmp_path / "plain.yaml"
    plain_file.write_text(example.read_text().replace("encryption: tls", "encryption: none"))
    tls_dir = run_example(example, tmp_path / "r", state_env)
    plain_dir = run_ok(plain_file, tmp_path / "r", state_env)
    assert (tls_dir / "tls/cert.pem").exists() and not (plain_dir / "tls").exists()
    c = compare(plain_dir, tls_dir)
    plain, tls = c["plain"], c["encrypted"]
    assert plain["encryption"] == "none" and tls["encryption"] == "tls"
    assert tls["ciphers"] and all(x.startswith("TLS_") for x in tls["ciphers"])
    assert tls["flows"] == plain["flows"] and tls["bytes"] == plain["bytes"]
    # 4 ranks, one connection per ring neighbour: 4 handshakes, each took some time
    assert tls["connections"] == 4 and tls["handshake_s_mean"] > 0
    # AES-GCM in user space on top of the same copies: more CPU per byte, not less
    assert tls["cpu_s_per_gb"] > plain["cpu_s_per_gb"]
    sys.path.insert(0, str(ROOT / "examples"))
    from tls_compare import table

    assert "| TLS / plain |" in table(plain_dir, tls_dir)


@pytest.mark.timeout(900)
def test_fedavg_uploads_over_tls(tmp_path, state_env):
    import math

    from conftest import records

    from traffic_gen.tls import MAX_RECORD_BYTES, RECORD_OVERHEAD_BYTES

    text = (ROOT / "examples/fedavg.yaml").read_text().replace(
        "workloads:\n", "transport: {encryption: tls}\nworkloads:\n", 1)
    path = tmp_path / "fedavg-tls.yaml"
    path.write_text(text)
    run_dir = run_ok(path, tmp_path / "r", state_env)
    assert records(run_dir, "failures.jsonl") == []
    rounds = records(run_dir, "rounds.jsonl")
    assert len(rounds) == 3 and all(r["clients_finished"] >= r["quorum"] for r in rounds)
    # cut-offs still happen (the slow clients, cut while training) and are no failure
    assert any(r["clients_dropped"] for r in rounds)
    flows = records(run_dir, "flows.jsonl")
    ups = [f for f in flows if f["step"] == "up"]
    downs = [f for f in flows if f["step"] == "down"]
    assert ups and downs
    # every gather connection ran TLS 1.3: the model down and the update up
    for f in ups + downs:
        assert f["tls_cipher"].startswith("TLS_") and f["tls_handshake_s"] > 0
    # an update the aggregator received whole went out encrypted: the kernel sent at least
    # the payload plus one record's overhead per 16 KiB (traffic_gen/tls.py)
    done = [f for f in ups if f["t_end"] is not None]
    assert done
    for f in done:
        least = f["size_bytes"] + math.ceil(f["size_bytes"] / MAX_RECORD_BYTES) \
            * RECORD_OVERHEAD_BYTES
        assert f["tcp"]["bytes_sent"] >= least


@pytest.mark.timeout(900)
def test_tls_only_between_the_listed_site_pair(tmp_path, state_env):
    from conftest import records

    text = (ROOT / "examples/tls_allreduce.yaml").read_text().replace(
        "encryption: tls}", "encryption: tls, encrypt_between: [[dc1, dc2]]}").replace(
        "iterations: 3", "iterations: 1")
    path = tmp_path / "pairs.yaml"
    path.write_text(text)
    run_dir = run_ok(path, tmp_path / "r", state_env)
    flows = records(run_dir, "flows.jsonl")
    across = [f for f in flows if f["src_node"][:3] != f["dst_node"][:3]]
    inside = [f for f in flows if f["src_node"][:3] == f["dst_node"][:3]]
    assert across and inside  # the ring of 4 crosses the DCI twice, stays in a DC twice
    assert all(f["tls_cipher"] and f["tls_cipher"].startswith("TLS_") for f in across)
    assert all(f["tls_cipher"] is None and f["tls_handshake_s"] is None for f in inside)
    assert all(f["fct_s"] > 0 for f in flows)


@pytest.mark.timeout(900)
def test_tls_only_for_the_workload_that_asks(tmp_path, state_env):
    from conftest import records

    # the experiment runs in the clear; one ring (the DCs' first hosts) asks for TLS, a
    # second ring on the other two hosts, alongside, does not
    ring = ("  - kind: collective\n    name: {name}\n    op: all_reduce\n    algorithm: ring\n"
            "    size: 2MiB\n    hosts: [dc1-l1-h{h}, dc2-l1-h{h}]\n")
    text = (ROOT / "examples/tls_allreduce.yaml").read_text().replace(
        "encryption: tls}", "encryption: none}")
    text = text[:text.index("workloads:\n")] + "workloads:\n" + \
        ring.format(name="secret", h=1) + "    transport: {encryption: tls}\n" + \
        ring.format(name="plain", h=2) + "    start: with_previous\n"
    path = tmp_path / "per-workload.yaml"
    path.write_text(text)
    run_dir = run_ok(path, tmp_path / "r", state_env)
    flows = records(run_dir, "flows.jsonl")
    secret = [f for f in flows if f["src_node"].endswith("h1")]
    plain = [f for f in flows if f["src_node"].endswith("h2")]
    assert secret and plain and len(secret) + len(plain) == len(flows)
    assert all(f["tls_cipher"] and f["tls_cipher"].startswith("TLS_") for f in secret)
    assert all(f["tls_cipher"] is None and f["tls_handshake_s"] is None for f in plain)
