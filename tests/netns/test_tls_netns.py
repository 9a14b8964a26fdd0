"""Encryption cost on a live run (host kernel): examples/tls_allreduce.yaml (an inter-DC ring
all-reduce over TLS 1.3) and the same file with encryption none; the TLS run's flows carry
the cipher and handshake, move the same payload, and cost more CPU per GB."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import run_ok

pytestmark = pytest.mark.netns
ROOT = Path(__file__).resolve().parents[2]




@pytest.mark.timeout(900)
def test_tls_allreduce_against_plain(tmp_path, state_env):
    from analysis.encryption import compare

    example = ROOT / "examples/tls_allreduce.yaml"
    plain_file = tmp_path / "plain.yaml"
    plain_file.write_text(example.read_text().replace("encryption: tls", "encryption: none"))
    tls_dir = run_ok(example, tmp_path / "r", state_env)
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
