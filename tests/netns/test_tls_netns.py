"""Encryption cost on a live run (host kernel): examples/tls_allreduce.yaml (an inter-DC ring
all-reduce over TLS 1.3) and the same file with encryption none; the TLS run's flows carry
the cipher and handshake, move the same payload, and cost more CPU per GB."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_namespaces

pytestmark = pytest.mark.netns
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def state_env(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    return {**os.environ, "AITB_STATE_DIR": str(tmp_path / "state")}


def _run(path: Path, results: Path, env: dict[str, str]) -> Path:
    out = subprocess.run([sys.executable, "-m", "orchestration.cli", "run", str(path),
                          "--results", str(results)], capture_output=True, text=True,
                         timeout=600, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    run_dir = Path(out.stdout.strip().splitlines()[-1])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "ok" and run_namespaces(manifest["lab_run_id"]) == []
    return run_dir


@pytest.mark.timeout(900)
def test_tls_allreduce_against_plain(tmp_path, state_env):
    from analysis.encryption import compare

    example = ROOT / "examples/tls_allreduce.yaml"
    plain_file = tmp_path / "plain.yaml"
    plain_file.write_text(example.read_text().replace("encryption: tls", "encryption: none"))
    tls_dir = _run(example, tmp_path / "r", state_env)
    plain_dir = _run(plain_file, tmp_path / "r", state_env)
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
