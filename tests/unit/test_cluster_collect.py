"""What a cluster run does with the machines' observations, without root: pcaps moved onto
the driver's clock (read back by analysis' own pcap reader), counter tables merged without the
proxy switches' rows, the underlay's delay taken out of the cut links (and the excess when it
does not fit), and the cluster checks of fidelity.json against hand values."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import topologies
from analysis.pcap.detect import open_capture
from models.counter_columns import SCHEMAS
from orchestration.cluster.spec import parse_cluster
from orchestration.cluster.tunnels import place, tunnels
from orchestration.cluster.underlay import account, pair_key
from orchestration.fidelity.cluster import clock_check, cluster_fidelity, underlay_check
from orchestration.observe.cluster_collect import Part, merge_parts, shift_pcap

EXAMPLES = Path(topologies.__file__).parent / "examples"


def write_pcap(path: Path, stamps_ns: list[int], nano: bool = True, order: str = "<") -> None:
    """A pcap (Ethernet) of one 60-byte frame per stamp, frame k filled with byte k."""
    per_s = 10**9 if nano else 10**6
    head = struct.pack(order + "IHHiIII", 0xA1B23C4D if nano else 0xA1B2C3D4, 2, 4, 0, 0,
                       262144, 1)
    body = b"".join(struct.pack(order + "IIII", t * per_s // 10**9 // per_s,
                                t * per_s // 10**9 % per_s, 60, 60) + bytes([k]) * 60
                    for k, t in enumerate(stamps_ns))
    path.write_bytes(head + body)


def read_stamps(path: Path) -> list[tuple[int, bytes]]:
    cap = open_capture(path)
    out = [(cap.start_ns + round(t * 1e9), bytes(buf[off:off + caplen]))
           for t, _link, buf, off, caplen, _wire in cap.frames()]
    assert not cap.warnings
    return out


@pytest.mark.parametrize("nano,order", [(True, "<"), (False, "<"), (True, ">")])
def test_a_pcap_moves_by_the_offset_and_keeps_its_frames(tmp_path, nano, order):
    stamps = [1_700_000_000_123_456_000, 1_700_000_000_999_999_000, 1_700_000_001_000_001_000]
    write_pcap(tmp_path / "a.pcap", stamps, nano, order)
    by = -2_500_000_000 if nano else 1_000_000  # a machine 2.5 s ahead; 1 ms behind
    assert shift_pcap(tmp_path / "a.pcap", tmp_path / "b.pcap", by) == 3
    got = read_stamps(tmp_path / "b.pcap")
    assert [t for t, _ in got] == [t + by for t in stamps]
    assert [f for _, f in got] == [bytes([k]) * 60 for k in range(3)]


def test_a_cut_pcap_is_refused(tmp_path):
    write_pcap(tmp_path / "a.pcap", [10**18, 10**18 + 5])
    (tmp_path / "cut.pcap").write_bytes((tmp_path / "a.pcap").read_bytes()[:-7])
    with pytest.raises(ValueError, match="cut record"):
        shift_pcap(tmp_path / "cut.pcap", tmp_path / "b.pcap", 0)
    (tmp_path / "text.pcap").write_bytes(b"not a capture file at all, no")
    with pytest.raises(ValueError, match="not a pcap"):
        shift_pcap(tmp_path / "text.pcap", tmp_path / "b.pcap", 0)


def _links_table(path: Path, rows: list[tuple[float, str]]) -> None:
    schema = pa.schema([(n, pa.string() if t == "string" else pa.type_for_alias(t))
                        for n, t in SCHEMAS["links"]])
    cols = [[r[0] for r in rows], [1e-4] * len(rows), [r[1] for r in rows],
            ["eth0"] * len(rows)] + [[7] * len(rows)] * 6
    pq.write_table(pa.table(cols, schema=schema), path)


def _part(root: Path, name: str, offset_s: float, rows, nodes, stamps_ns) -> Part:
    d = root / name
    (d / "counters").mkdir(parents=True)
    (d / "captures").mkdir()
    _links_table(d / "counters" / "links.parquet", rows)
    (d / "counters" / "sampler.json").write_text(json.dumps(
        {"interval_s": 0.01, "samples": len(rows), "interval_p99_s": 0.02 + offset_s,
         "t_first_s": rows[0][0], "t_last_s": rows[-1][0], "rows": {"links": len(rows)},
         "namespaces": 2, "error": None}))
    node = sorted(nodes)[0]
    write_pcap(d / "captures" / f"{node}__eth0-0.pcap", stamps_ns)
    (d / "captures" / "index.json").write_text(json.dumps({"snaplen": 128, "interfaces": [
        {"node": node, "ifname": "eth0", "link": "l", "files": [f"captures/{node}__eth0-0.pcap"],
         "packets_captured": len(stamps_ns), "packets_dropped_by_kernel": 0}]}))
    return Part(name, d, offset_s, 1e-4, frozenset(nodes))


def test_the_machines_tables_and_captures_merge_on_the_drivers_clock(tmp_path):
    # m1 runs 10 s ahead of the driver, m2 on time; x3 is the proxy switch on both
    p1 = _part(tmp_path / "in", "m1", 10.0, [(110.0, "h1"), (110.5, "x3"), (111.0, "h1")],
               {"h1"}, [110 * 10**9])
    p2 = _part(tmp_path / "in", "m2", 0.0, [(100.2, "h2"), (100.4, "x3"), (100.7, "h2")],
               {"h2"}, [100 * 10**9 + 7])
    run = tmp_path / "run"
    run.mkdir()
    got = merge_parts(run, [p1, p2])
    links = pq.read_table(run / "counters" / "links.parquet").to_pandas()
    assert list(zip(links["t_s"], links["node"], strict=True)) == [
        (100.0, "h1"), (100.2, "h2"), (100.7, "h2"), (101.0, "h1")]
    assert pq.read_table(run / "counters" / "qdisc.parquet").num_rows == 0  # none sampled
    sampler = json.loads((run / "counters" / "sampler.json").read_text())
    assert sampler["t_first_s"] == 100.0 and sampler["t_last_s"] == 101.0
    assert sampler["interval_p99_s"] == pytest.approx(10.02) and sampler["samples"] == 3
    assert sampler["rows"] == {"links": 6} and sorted(sampler["machines"]) == ["m1", "m2"]
    index = json.loads((run / "captures" / "index.json").read_text())
    assert [(i["node"], i["machine"], i["clock_shift_s"]) for i in index["interfaces"]] == [
        ("h1", "m1", -10.0), ("h2", "m2", 0.0)]
    assert got["capture"] == index
    assert [t for t, _ in read_stamps(run / "captures" / "h1__eth0-0.pcap")] == [100 * 10**9]
    assert [t for t, _ in read_stamps(run / "captures" / "h2__eth0-0.pcap")] == [
        100 * 10**9 + 7]


def _dci_split():
    plan = topologies.load_topology(EXAMPLES / "two_dc.yaml")
    cluster = parse_cluster({"underlay_mtu": 9000, "machines": [
        {"name": "m1", "ssh": "10.9.0.1", "site": "dc1"},
        {"name": "m2", "ssh": "10.9.0.2", "site": "dc2"}]}, "c.yaml")
    where = place(plan, cluster)
    return plan, tunnels(plan, where, cluster)


def test_the_underlay_one_way_delay_comes_off_each_cut_direction():
    plan, ts = _dci_split()
    (t,) = ts
    lk = next(lk for lk in plan.links if lk.name == t.link)
    rtt = lk.a_to_b.delay_s  # half of it per direction: fits
    new, (rec,) = account(plan, ts, {pair_key("m2", "m1"): {"min_rtt_s": rtt}})
    cut = next(x for x in new.links if x.name == t.link)
    for d in ("a_to_b", "b_to_a"):
        want = getattr(lk, d).delay_s
        assert getattr(cut, d).delay_s == pytest.approx(want - rtt / 2)
        assert rec[d] == {"configured_delay_s": want, "emulated_delay_s": pytest.approx(
            want - rtt / 2), "excess_s": 0.0}
        assert getattr(cut, d).rate_bps == getattr(lk, d).rate_bps
    assert [x for x in new.links if x.name != t.link] == \
        [x for x in plan.links if x.name != t.link]
    entries, reasons = underlay_check([rec])
    assert [e["check"] for e in entries] == ["ok", "ok"] and reasons == []
    # an underlay slower than the link: no emulated delay left, the excess is reported
    slow = 2 * lk.a_to_b.delay_s + 0.004
    _, (rec,) = account(plan, ts, {pair_key("m1", "m2"): {"min_rtt_s": slow}})
    assert rec["a_to_b"]["emulated_delay_s"] == 0.0
    assert rec["a_to_b"]["excess_s"] == pytest.approx(0.002)
    entries, reasons = underlay_check([rec])
    assert "off" in [e["check"] for e in entries]
    assert any(t.link in r and "exceeds the configured" in r for r in reasons)


def _machines(u1: float, u2: float) -> dict:
    return {m: {"clock": {"uncertainty_s": u}} for m, u in (("m1", u1), ("m2", u2))}


def test_the_clock_check_weighs_the_uncertainty_against_the_smallest_duration():
    flows = [{"fct_s": 0.040, "src_node": "a", "dst_node": "b"}, {"fct_s": None}]
    colls = [{"cct_s": 0.100, "collective_id": "c0.0"}]
    sec, reasons = clock_check(_machines(1e-4, 2e-3), flows, colls)
    # 2 x 2 ms = 4 ms <= 10 % of 40 ms: just fits
    assert sec["check"] == "ok" and reasons == [] and sec["max_uncertainty_s"] == 2e-3
    assert sec["smallest_duration_s"] == 0.040 and "a -> b" in sec["smallest_is"]
    sec, reasons = clock_check(_machines(1e-4, 2.1e-3), flows, colls)
    assert sec["check"] == "off" and "machine m2" in reasons[0] and "40.000 ms" in reasons[0]
    sec, reasons = clock_check(_machines(1e-4, 1e-4), [], [])
    assert sec["check"] == "not_exercised" and reasons == []


def test_cluster_fidelity_merges_the_parts_and_adds_the_cluster_verdict():
    part = {"links": [{"link": "l", "direction": "a->b", "ok": True, "checks": {}}],
            "cpu": {"busy_pct_p95": 40.0, "saturated": False}, "trustworthy": True,
            "reasons": []}
    busy = {**part, "cpu": {"busy_pct_p95": 95.0, "saturated": True}, "trustworthy": False,
            "reasons": ["host CPU saturated"]}
    cluster = {"machines": _machines(1e-4, 1e-4), "underlay": {"m1~m2": {"min_rtt_s": 1e-4}},
               "cut_links": []}
    flows = [{"fct_s": 0.5}]
    doc = cluster_fidelity({"m1": part, "m2": part}, cluster, flows, [])
    assert doc["trustworthy"] is True and doc["reasons"] == []
    assert [e["machine"] for e in doc["links"]] == ["m1", "m2"]
    assert doc["cluster"]["clock"]["check"] == "ok" and doc["cluster"]["underlay"]
    doc = cluster_fidelity({"m1": part, "m2": busy}, cluster, flows, [])
    assert doc["trustworthy"] is False and doc["reasons"] == ["machine m2: host CPU saturated"]
    assert doc["cpu"]["saturated"] and doc["cpu"]["busy_pct_p95"] == 95.0
    doc = cluster_fidelity({"m1": part}, cluster, flows, [])  # nothing came back from m2
    assert doc["trustworthy"] is None and "m2" in doc["reasons"][0]
    doc = cluster_fidelity({"m1": part, "m2": part}, {**cluster, "machines": _machines(
        0.03, 1e-4)}, flows, [])
    assert doc["trustworthy"] is False and "clock offset uncertainty" in doc["reasons"][0]


def test_an_unmeasured_underlay_leaves_the_delay_and_fails_the_check():
    plan, ts = _dci_split()
    (t,) = ts
    new, (rec,) = account(plan, ts, {pair_key("m1", "m2"): {"min_rtt_s": None}})
    assert next(x for x in new.links if x.name == t.link) == \
        next(x for x in plan.links if x.name == t.link)
    assert rec["underlay_rtt_s"] is None and rec["a_to_b"]["excess_s"] == 0.0
    entries, reasons = underlay_check([rec])
    assert [e["check"] for e in entries] == ["off", "off"]
    assert "not measured" in reasons[0] and t.link in reasons[0]


def test_a_pcap_and_a_table_of_a_drifting_machine_come_back_by_the_interpolated_offset(
        tmp_path):
    """A machine 2 s ahead at driver time 100 s whose clock runs 1000 ppm fast: its times
    T(t) = t + 2 + 1e-3 (t - 100) come back to t, pcap (integer ns) and counters alike."""
    def machine_ns(t_ns: int) -> int:
        return t_ns + 2 * 10**9 + (t_ns - 100 * 10**9) // 1000

    driver_ns = [100 * 10**9, 150 * 10**9 + 123_456, 400 * 10**9]
    write_pcap(tmp_path / "a.pcap", [machine_ns(t) for t in driver_ns])
    shift_pcap(tmp_path / "a.pcap", tmp_path / "b.pcap", -2 * 10**9, 1e-3, 100 * 10**9)
    got = [t for t, _ in read_stamps(tmp_path / "b.pcap")]
    assert all(abs(g - t) <= 1 for g, t in zip(got, driver_ns, strict=True)), got
    # the same machine's counters and capture through merge_parts
    rows = [(machine_ns(t) / 1e9, "h1") for t in driver_ns]
    p = _part(tmp_path / "in", "m1", 2.0, rows, {"h1"}, [machine_ns(driver_ns[1])])
    p = Part(p.machine, p.dir, p.offset_s, p.uncertainty_s, p.nodes, 1e-3, 100.0)
    run = tmp_path / "run"
    run.mkdir()
    index = merge_parts(run, [p])["capture"]
    links = pq.read_table(run / "counters" / "links.parquet").to_pandas()
    assert list(links["t_s"]) == pytest.approx([t / 1e9 for t in driver_ns], abs=1e-9)
    assert index["interfaces"][0]["clock_drift_ppm"] == pytest.approx(1000.0)
    (stamp,) = [t for t, _ in read_stamps(run / "captures" / "h1__eth0-0.pcap")]
    assert abs(stamp - driver_ns[1]) <= 1


def test_a_cut_links_end_to_end_rtt_is_checked_against_its_configured_round_trip():
    from analysis.fidelity import expected_rtt_s
    from orchestration.cluster.cut_rtt import cut_rtt_check

    plan, ts = _dci_split()
    (t,) = ts
    lk = next(lk for lk in plan.links if lk.name == t.link)
    want = expected_rtt_s(lk.a_to_b, lk.b_to_a)  # both configured delays, underlay in them
    assert want >= lk.a_to_b.delay_s + lk.b_to_a.delay_s > 0
    probe = {"from_node": lk.a.node, "to_address": "10.0.0.2", "sent": 6, "answered": 6}
    ok = cut_rtt_check(plan, t.link, {**probe, "min_rtt_s": want})
    assert ok["check"] == "ok" and ok["expected_rtt_s"] == want and ok["answered"] == 6
    # the tunnel or the underlay adding twice the round trip: off
    off = cut_rtt_check(plan, t.link, {**probe, "min_rtt_s": 2 * want + 0.01})
    assert off["check"] == "off"
    assert cut_rtt_check(plan, t.link, {**probe, "min_rtt_s": None})["check"] == \
        "not_exercised" == cut_rtt_check(plan, t.link, None)["check"]
    # in fidelity.json: on each of the link's entries, and an off one fails the run
    part = {"links": [{"link": t.link, "direction": d, "ok": True, "checks": {"rtt":
            "not_exercised"}} for d in ("a->b", "b->a")] + [
            {"link": "other", "direction": "a->b", "ok": True, "checks": {}}],
            "cpu": {"busy_pct_p95": 40.0, "saturated": False}, "trustworthy": True,
            "reasons": []}
    cluster = {"machines": {"m1": {"clock": {"uncertainty_s": 1e-4}}}, "cut_links": []}
    doc = cluster_fidelity({"m1": part}, cluster, [{"fct_s": 0.5}], [], {t.link: ok})
    assert doc["trustworthy"] is True
    assert [e.get("end_to_end", {}).get("check") for e in doc["links"]] == ["ok", "ok", None]
    assert doc["links"][0]["checks"]["end_to_end_rtt"] == "ok"
    doc = cluster_fidelity({"m1": part}, cluster, [{"fct_s": 0.5}], [], {t.link: off})
    assert doc["trustworthy"] is False and doc["links"][0]["ok"] is False
    assert any(f"cut link {t.link}: end-to-end RTT" in r for r in doc["reasons"])
    assert doc["cluster"]["end_to_end"][t.link]["check"] == "off"
