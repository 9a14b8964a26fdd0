"""TLS 1.3 of the agents' connections (traffic_gen/tls.py) over a socket pair (no network),
the run's certificate (orchestration/privacy/tls_cert.py) and the encryption summary
(analysis.encryption) on hand-made records."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest

from analysis.encryption import compare, encryption_summary
from orchestration.privacy.tls_cert import write_run_certificate
from traffic_gen.tls import client_context, server_context, wire_bytes, wrap_client, wrap_server


def test_wire_bytes_add_one_record_overhead_per_16_kib():
    assert wire_bytes(0) == 0
    assert wire_bytes(1) == 23  # 1 byte in one record: 5 header + 1 type + 16 tag
    assert wire_bytes(16384) == 16384 + 22
    assert wire_bytes(16385) == 16385 + 44
    # what the kernel's bytes_sent showed for a 2 MiB transfer in 128 KiB sends
    assert 16 * wire_bytes(131072) == 2099968


def test_handshake_with_the_run_certificate_moves_data_and_records_the_cipher(tmp_path):
    files = write_run_certificate(tmp_path, "aitb-test")
    assert (tmp_path / "tls/cert.pem").read_text().startswith("-----BEGIN CERTIFICATE")
    a, b = socket.socketpair()
    out: dict = {}

    def serve() -> None:
        s, out["info"] = wrap_server(b, server_context(files["cert"], files["key"]))
        out["data"] = s.recv(100)
        s.close()
    t = threading.Thread(target=serve)
    t.start()
    c, info = wrap_client(a, client_context(files["cert"]))
    c.sendall(b"gradient")
    t.join(10)
    c.close()
    assert out["data"] == b"gradient"
    assert info["tls_version"] == out["info"]["tls_version"] == "TLSv1.3"
    assert info["tls_cipher"].startswith("TLS_") and info["tls_handshake_s"] > 0


def test_a_client_refuses_a_certificate_it_was_not_given(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    ours = write_run_certificate(tmp_path / "a", "aitb-a")
    other = write_run_certificate(tmp_path / "b", "aitb-b")
    a, b = socket.socketpair()
    t = threading.Thread(target=lambda: _quiet(wrap_server, b, server_context(other["cert"],
                                                                              other["key"])))
    t.start()
    import ssl

    with pytest.raises(ssl.SSLCertVerificationError):
        wrap_client(a, client_context(ours["cert"]))
    a.close()
    t.join(10)


def _quiet(fn, *args):
    try:
        fn(*args)
    except OSError:
        pass


def _run(tmp_path, name, flows, cct):
    d = tmp_path / name
    d.mkdir()
    (d / "flows.jsonl").write_text("".join(json.dumps(f) + "\n" for f in flows))
    (d / "collectives.jsonl").write_text(json.dumps({"cct_s": cct}) + "\n")
    return d


def _flow(fct, cpu, **tls):
    return {"kind": "tcp", "fct_s": fct, "size_bytes": 500_000_000, "send_cpu_s": cpu,
            "recv_cpu_s": cpu, "src_ip": "198.18.0.1", "sport": 1, **tls}


def test_summary_and_comparison_from_records(tmp_path):
    plain = _run(tmp_path, "plain", [_flow(1.0, 0.25), _flow(3.0, 0.25)], 4.0)
    tls = _run(tmp_path, "tls", [_flow(2.0, 0.5, tls_cipher="TLS_AES_256_GCM_SHA384",
                                       tls_handshake_s=0.01)] * 2, 6.0)
    s = encryption_summary(plain)
    # 2 flows x 0.5 GB, 2 x (0.25 + 0.25) CPU s: 1 s per GB
    assert s["encryption"] == "none" and s["cpu_s_per_gb"] == pytest.approx(1.0)
    assert s["fct_s_mean"] == 2.0 and s["handshake_s_mean"] is None
    c = compare(plain, tls)
    assert c["encrypted"]["ciphers"] == ["TLS_AES_256_GCM_SHA384"]
    assert c["encrypted"]["connections"] == 1 and c["encrypted"]["handshake_s_mean"] == 0.01
    assert c["ratio"]["cpu_s_per_gb"] == pytest.approx(2.0)
    assert c["ratio"]["cct_s_mean"] == pytest.approx(1.5)


def test_doctor_sees_in_kernel_encryption_from_the_kernel_config(tmp_path):
    import gzip

    from testbed.host.crypto import probe_crypto

    cfg = tmp_path / "config.gz"
    cfg.write_bytes(gzip.compress(b"CONFIG_WIREGUARD=m\n# CONFIG_INET_ESP is not set\n"))
    caps = {c.name: c for c in probe_crypto(cfg)}
    assert caps["wireguard"].present and "CONFIG_WIREGUARD=m" in caps["wireguard"].detail
    assert not caps["esp"].present and "CONFIG_INET_ESP" in caps["esp"].remedy
    assert "ktls" in caps  # from TCP_ULP on this kernel: either answer is an answer
    unknown = {c.name: c for c in probe_crypto(tmp_path / "absent.gz")}
    assert not unknown["wireguard"].present and "not known" in unknown["wireguard"].detail


def _exp(tmp_path, transport: str, extra_workload: str = "") -> Path:
    root = Path(__file__).resolve().parents[2]
    text = (root / "examples/tls_allreduce.yaml").read_text().replace(
        "transport: {tcp_congestion_control: cubic, encryption: tls}", transport)
    path = tmp_path / "exp.yaml"
    path.write_text(text + extra_workload)
    return path


def test_tls_per_site_pair_lists_the_address_pairs_between_those_sites(tmp_path):
    from orchestration.privacy.tls_pairs import encrypts, tls_address_pairs
    from orchestration.run.runner import prepare

    prep = prepare(_exp(tmp_path, "transport: {encryption: tls, encrypt_between: "
                                  "[[dc2, dc1]]}"))
    plan, between = prep.plan, prep.spec.transport.encrypt_between
    assert encrypts(plan, between, "dc1-l1-h1", "dc2-l1-h2")
    assert encrypts(plan, between, "dc2-l1-h2", "dc1-l1-h1")  # unordered
    assert not encrypts(plan, between, "dc1-l1-h1", "dc1-l1-h2")
    pairs = {frozenset(p) for p in tls_address_pairs(plan, between)}
    addr = {h.name: str(plan.address_of(h.name)) for h in plan.hosts()}
    assert pairs == {frozenset((addr[a], addr[b])) for a in addr for b in addr
                     if a[:3] != b[:3]}
    assert tls_address_pairs(plan, None) is None  # no list: every connection


def test_an_agent_decides_per_peer_address(tmp_path):
    from traffic_gen.endpoints import Endpoints

    files = write_run_certificate(tmp_path, "aitb-test")

    def agent(tls):
        return Endpoints("h1", "10.0.0.1", set(), None, {"tls": tls})  # type: ignore[arg-type]

    pairs = agent({**files, "pairs": [["10.0.0.2", "10.0.0.1"]]})
    assert pairs.tls_with("10.0.0.2") and not pairs.tls_with("10.0.0.3")
    assert agent({**files}).tls_with("10.0.0.3")  # no pairs: every connection
    assert not agent(None).tls_with("10.0.0.2")


DUAL = """name: dual-tls
groups:
  a: {kind: host}
  b: {kind: host}
nodes:
  h1: {group: a}
  h2: {group: a}
  h3: {group: b}
  l1: {kind: router}
  l2: {kind: router}
links:
  - {endpoints: [h1, l1]}
  - {endpoints: [h1, l2]}
  - {endpoints: [h2, l1]}
  - {endpoints: [h3, l2]}
  - {endpoints: [l1, l2]}
"""


def test_a_multi_nic_hosts_every_address_is_in_its_tls_pairs(tmp_path):
    """Before: only each host's first address was paired, so a connection from h1's second
    NIC (its route to h3 leaves there) ran in the clear where TLS was asked for."""
    from models.paths import host_addresses
    from orchestration.privacy.tls_pairs import tls_address_pairs
    from topologies import load_topology
    from traffic_gen.endpoints import Endpoints

    (tmp_path / "t.yaml").write_text(DUAL)
    plan = load_topology(tmp_path / "t.yaml")
    h1 = host_addresses(plan, "h1")
    (h3,) = host_addresses(plan, "h3")
    assert len(h1) == 2
    pairs = {frozenset(p) for p in tls_address_pairs(plan, [["a", "b"]])}
    assert pairs == {frozenset((x, y)) for x in h1 + host_addresses(plan, "h2") for y in [h3]}
    files = write_run_certificate(tmp_path, "aitb-test")
    agent = Endpoints("h1", h1[0], set(), None,  # type: ignore[arg-type]
                      {"tls": {**files, "pairs": [list(p) for p in pairs]}}, ips=h1)
    assert agent.tls_with(h3)
    assert not agent.tls_with(host_addresses(plan, "h2")[0])  # same site: in the clear
    only_second = Endpoints("h1", h1[0], set(), None,  # type: ignore[arg-type]
                            {"tls": {**files, "pairs": [[h1[1], h3]]}}, ips=h1)
    assert only_second.tls_with(h3)  # the pair of hosts, whichever NIC it names


UDP = """  - kind: all_pairs
    name: udp-probe
    hosts: [dc1-l1-h1, dc2-l1-h1]
    size: 64KiB
    protocol: udp
    rate: 10Mbit
"""


def test_udp_flows_over_tls_are_refused_naming_the_workload(tmp_path):
    from models.errors import SpecError
    from orchestration.run.runner import prepare

    with pytest.raises(SpecError) as err:
        prepare(_exp(tmp_path, "transport: {encryption: tls}", UDP))
    text = str(err.value)
    assert "workloads[1]" in text and "DTLS" in text and "dc1-l1-h1 -> dc2-l1-h1" in text
    # between sites that are not encrypted, a UDP flow runs (in the clear, as it says)
    prepare(_exp(tmp_path, "transport: {encryption: tls, encrypt_between: [[dc1, dc1]]}",
                 UDP))
    with pytest.raises(SpecError, match="DTLS"):
        prepare(_exp(tmp_path, "transport: {encryption: tls, encrypt_between: [[dc1, dc2]]}",
                     UDP))


@pytest.mark.parametrize("transport,words", [
    ("transport: {encryption: tls, encrypt_between: [[dc1, dc9]]}",
     "transport.encrypt_between[0]: not sites of lab two-dc-tls: dc9"),
    ("transport: {encrypt_between: [[dc1, dc2]]}", "needs encryption: tls"),
    ("transport: {encryption: tls, encrypt_between: [[dc1]]}",
     "transport.encrypt_between[0]: List should have at least 2 items"),
])
def test_bad_site_pairs_are_refused(tmp_path, transport, words):
    from models.errors import SpecError
    from orchestration.run.runner import prepare

    with pytest.raises(SpecError) as err:
        prepare(_exp(tmp_path, transport))
    assert words in str(err.value)
