"""Retransmissions: one count per connection from each source, reconciled with reasons."""

import pandas as pd

from analysis.metrics.retrans import reconcile, retrans_metrics


def _flows():
    # two transfers striped on one connection (4 + 5 retransmissions) and one on another
    return pd.DataFrame([
        {"src_ip": "10.0.0.1", "sport": 5000, "dst_ip": "10.0.0.2", "dport": 80,
         "tcp_total_retrans": 4},
        {"src_ip": "10.0.0.1", "sport": 5000, "dst_ip": "10.0.0.2", "dport": 80,
         "tcp_total_retrans": 5},
        {"src_ip": "10.0.0.3", "sport": 6000, "dst_ip": "10.0.0.2", "dport": 80,
         "tcp_total_retrans": 2}])


def test_records_and_capture_reconciled_per_connection():
    cap = [{"a": ["10.0.0.2", 80], "b": ["10.0.0.1", 5000], "retransmissions": 6},
           {"a": ["10.0.0.2", 80], "b": ["10.0.0.3", 6000], "retransmissions": 2}]
    r = reconcile(_flows(), cap)
    assert r["connections_compared"] == 2 and r["agree"] is False
    assert (r["records_total"], r["captures_total"]) == (11, 8)
    (d,) = r["differing"]  # the 9 vs 6 of the issue, named with its reason
    assert (d["records"], d["captures"]) == (9, 6) and "fewer in the capture" in d["reason"]


def test_agreeing_counts_and_summary_source():
    cap = [{"a": ["10.0.0.1", 5000], "b": ["10.0.0.2", 80], "retransmissions": 9}]
    assert reconcile(_flows(), cap)["agree"] is True
    m = retrans_metrics(_flows(), [])
    assert m["summary_source"] == "tcp_info" and m["reconciliation"] is None
    assert (m["records"]["delivered_ce"], m["records"]["ecn_flows"]) == (0, 0)  # older records


def test_ce_marks_are_summed_over_the_transfers_of_ecn_flows():
    flows = _flows().assign(tcp_delivered_ce=[3, 4, 0], tcp_ecn=[True, True, None])
    rec = retrans_metrics(flows, [])["records"]
    assert (rec["delivered_ce"], rec["ecn_flows"]) == (7, 2)


def _cap(n, nbytes=0, ooo=0, spurious=0):
    return [{"a": ["10.0.0.2", 80], "b": ["10.0.0.1", 5000], "retransmissions": n,
             "retransmitted_bytes": nbytes, "out_of_order": ooo,
             "spurious_retransmissions": spurious}]


def _one(n_rec, nbytes_rec):
    return pd.DataFrame([{"src_ip": "10.0.0.1", "sport": 5000, "dst_ip": "10.0.0.2",
                          "dport": 80, "tcp_total_retrans": n_rec,
                          "tcp_bytes_retrans": nbytes_rec}])


def test_each_documented_explanation_and_the_flag():
    flows = _one(9, 9 * 1448)
    status = lambda cap, drops=None: reconcile(flows, cap, drops)  # noqa: E731
    assert status(_cap(9))["verdict"] == "agree"
    # same bytes in fewer (GSO) packets
    assert status(_cap(6, 9 * 1448))["differing"][0]["status"] == "explained"
    # 3 re-sent segments classed out-of-order by the capture's rule
    assert status(_cap(6, 6 * 1448, ooo=3))["verdict"] == "explained"
    # 3 lost before the capture point, covered by 3 queue drops but not by 2
    assert status(_cap(6, 6 * 1448), drops=3)["verdict"] == "explained"
    r = status(_cap(6, 6 * 1448), drops=2)
    assert r["verdict"] == "flagged" and r["flagged"][0]["records"] == 9
    # more in the capture: spurious ones explain up to their number
    assert status(_cap(11, 11 * 1448, spurious=2))["verdict"] == "explained"
    assert status(_cap(11, 11 * 1448, spurious=1))["verdict"] == "flagged"


def test_one_retrans_figure_per_flow_with_its_source():
    from analysis.metrics.retrans import flow_retrans
    table = pd.DataFrame([
        {"kind": "tcp", "src_ip": "10.0.0.1", "sport": 5000, "dst_ip": "10.0.0.2",
         "dport": 80, "tcp_total_retrans": 4},
        {"kind": "tcp", "src_ip": "10.0.0.3", "sport": 6000, "dst_ip": "10.0.0.2",
         "dport": 80, "tcp_total_retrans": None},   # no TCP_INFO: the capture's count
        {"kind": "udp", "src_ip": "10.0.0.3", "sport": 7000, "dst_ip": "10.0.0.2",
         "dport": 81, "tcp_total_retrans": None}])
    cap = {"captures": {"per_connection": [
        {"a": ["10.0.0.2", 80], "b": ["10.0.0.3", 6000], "retransmissions": 7}]}}
    out = flow_retrans(table, cap)
    assert out["retrans"].tolist()[:2] == [4, 7] and pd.isna(out["retrans"].iloc[2])
    assert out["retrans_source"].tolist() == ["tcp_info", "capture", None]
