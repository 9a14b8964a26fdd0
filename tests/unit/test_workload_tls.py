"""``transport: {encryption: tls | none}`` of one workload entry
(orchestration/privacy/tls_pairs.py): which host pairs the agents encrypt, and the refusals
(workloads sharing hosts that disagree, UDP over TLS, a bad value), before any lab exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from models.errors import SpecError
from orchestration.privacy.tls_cert import write_run_certificate
from orchestration.privacy.tls_pairs import tls_address_pairs, uses_tls, workload_tls_pairs
from orchestration.run.runner import prepare
from traffic_gen.endpoints import Endpoints

ROOT = Path(__file__).resolve().parents[2]
H = ("dc1-l1-h1", "dc1-l1-h2", "dc2-l1-h1", "dc2-l1-h2")


def _exp(tmp_path, transport: str, workloads: str) -> Path:
    text = (ROOT / "examples/tls_allreduce.yaml").read_text()
    text = text.replace("transport: {tcp_congestion_control: cubic, encryption: tls}",
                        transport)
    text = text[:text.index("workloads:\n")] + "workloads:\n" + workloads
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    return path


def _ring(hosts, extra: str = "") -> str:
    return (f"  - kind: collective\n    op: all_reduce\n    algorithm: ring\n    size: 1MiB\n"
            f"    hosts: [{', '.join(hosts)}]\n{extra}")


def _udp(hosts, extra: str = "") -> str:
    return (f"  - kind: all_pairs\n    hosts: [{', '.join(hosts)}]\n    size: 64KiB\n"
            f"    protocol: udp\n    rate: 10Mbit\n{extra}")


def _pairs(prep):
    return workload_tls_pairs(prep.spec.transport, prep.plan, prep.spec.workloads,
                              prep.workloads, prep.source)


def test_a_workload_encrypts_its_own_connections_and_no_one_elses(tmp_path):
    prep = prepare(_exp(tmp_path, "transport: {tcp_congestion_control: cubic}",
                        _ring(H[0::2], "    transport: {encryption: tls}\n")
                        + _ring(H[1::2])))
    assert uses_tls(prep.spec.transport, prep.spec.workloads)
    addr = {h: str(prep.plan.address_of(h)) for h in H}
    pairs = _pairs(prep)
    assert {frozenset(p) for p in pairs} == {frozenset((addr[a], addr[b]))
                                             for a in H[0::2] for b in H[0::2]}
    files = write_run_certificate(tmp_path, "aitb-test")

    def agent(host):
        return Endpoints(host, addr[host], set(), None, {"tls": {**files, "pairs": pairs}})

    assert agent("dc1-l1-h1").tls_with(addr["dc2-l1-h1"])
    assert not agent("dc1-l1-h2").tls_with(addr["dc2-l1-h2"])  # the other workload: clear


def test_without_an_override_the_experiment_decides_as_before(tmp_path):
    prep = prepare(_exp(tmp_path, "transport: {encryption: tls, encrypt_between: [[dc1, dc2]]}",
                        _ring(H)))
    assert _pairs(prep) == tls_address_pairs(prep.plan, [["dc1", "dc2"]])
    plain = prepare(_exp(tmp_path, "transport: {encryption: none}", _ring(H)))
    assert not uses_tls(plain.spec.transport, plain.spec.workloads)


def test_a_workload_in_the_clear_under_an_encrypted_experiment_may_send_udp(tmp_path):
    prep = prepare(_exp(tmp_path, "transport: {encryption: tls}",
                        _ring(H[1::2]) + _udp(H[0::2], "    transport: {encryption: none}\n")))
    addr = {h: str(prep.plan.address_of(h)) for h in H}
    pairs = {frozenset(p) for p in _pairs(prep)}
    assert frozenset((addr["dc1-l1-h2"], addr["dc2-l1-h2"])) in pairs
    assert frozenset((addr["dc1-l1-h1"], addr["dc2-l1-h1"])) not in pairs


@pytest.mark.parametrize(("transport", "workloads", "key", "words"), [
    # workload 1 shares dc1-l1-h1 / dc2-l1-h1 with an encrypted workload 0, in the clear
    ("transport: {encryption: none}",
     _ring(H[0::2], "    transport: {encryption: tls}\n") + _ring(H),
     "workloads[1].transport", "only one encrypts them"),
    ("transport: {encryption: tls}",
     _ring(H) + _ring(H[0::2], "    transport: {encryption: none}\n"),
     "workloads[1].transport", "only one encrypts them"),
    ("transport: {encryption: none}", _udp(H[0::2], "    transport: {encryption: tls}\n"),
     "workloads[0].transport", "DTLS"),
    ("transport: {encryption: none}", _ring(H, "    transport: {encryption: ssl}\n"),
     "workloads[0].transport.encryption", "'none' or 'tls'"),
    ("transport: {encryption: none}",
     _ring(H, "    transport: {encryption: tls, encrypt_between: [[dc1, dc2]]}\n"),
     "workloads[0].transport.encrypt_between", "unknown key"),
])
def test_refusals_name_file_key_and_line(tmp_path, transport, workloads, key, words):
    path = _exp(tmp_path, transport, workloads)
    with pytest.raises(SpecError) as err:
        prepare(path)
    msg = str(err.value)
    assert re.search(rf"{re.escape(str(path))}:\d+: {re.escape(key)}\b", msg), msg
    assert words in msg, msg
