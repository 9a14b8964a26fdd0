"""Where native delay lines sit, what they refuse, their rules and queue sizes (pure)."""

import dataclasses
import ipaddress as ip

import pytest

from models.errors import LabError
from models.plan import Endpoint, LabPlan, LinkPlan, NodePlan
from models.shaping import Shaping
from testbed.delay.nfqueue import choose, labline

IF = ip.ip_interface
D = Shaping(delay_s=0.01)


def _plan(kinds: dict[str, tuple[str, str]], links: list[tuple[str, str]]) -> LabPlan:
    nodes = tuple(NodePlan(n, k, datapath=dp) for n, (k, dp) in kinds.items())
    lks = tuple(LinkPlan(f"{a}-{b}", Endpoint(a, f"to{b}"), Endpoint(b, f"to{a}"), D, D)
                for a, b in links)
    return LabPlan("t", nodes, lks)


def test_lines_sit_at_the_receiver_bridge_ports_by_physdev_ovs_on_the_sender_side():
    plan = _plan({"h": ("host", "bridge"), "s": ("switch", "bridge"), "o": ("switch", "ovs"),
                  "r": ("router", "bridge")}, [("h", "s"), ("r", "o")])
    got = labline.places(plan, [("h-s", "a_to_b"), ("h-s", "b_to_a"), ("r-o", "a_to_b"),
                                ("r-o", "b_to_a")])
    assert [(p.node, p.hook, p.dev, p.physdev, p.queue_num) for p in got] == [
        ("s", "in", "toh", True, 0),    # into a Linux bridge: physdev-in on its port
        ("h", "in", "tos", False, 0),
        ("r", "out", "too", False, 0),  # into OVS: the sender's POSTROUTING -o
        ("r", "in", "too", False, 1),   # second queue in r's namespace
    ]


def test_a_packet_buffer_puts_the_line_before_a_forwarders_queue_never_a_hosts():
    from models.units import BufferSize

    pkt = Shaping(rate_bps=10**9, delay_s=0.05, buffer=BufferSize(packets=100))
    plan = _plan({"h": ("host", "bridge"), "s": ("switch", "bridge"), "o": ("switch", "ovs"),
                  "r": ("router", "bridge")}, [("h", "s"), ("s", "r"), ("r", "o")])
    plan = dataclasses.replace(plan, links=tuple(dataclasses.replace(lk, a_to_b=pkt, b_to_a=pkt)
                                                 for lk in plan.links))
    got = labline.places(plan, [(lk.name, d) for lk in plan.links for d in ("a_to_b", "b_to_a")])
    assert [(p.link, p.node, p.hook, p.physdev) for p in got] == [
        ("h-s", "s", "in", True),    # a host sends: the line stays at the receiver
        ("h-s", "s", "out", True),   # the bridge forwards: before its port's queue
        ("s-r", "s", "out", True),
        ("s-r", "r", "out", False),  # the router forwards: POSTROUTING -o
        ("r-o", "r", "out", False),
        ("r-o", "r", "in", False),   # OVS bypasses netfilter: the line at its peer's input
    ]
    # before the queue the line holds what the sender offers: sized at the unshaped rate
    after = labline.queue_params(pkt, 1500, 0)
    before = labline.queue_params(pkt, 1500, 0, before_queue=True)
    assert after.maxlen_packets == 8334  # 1 Gbit/s x 50 ms x 2 / 1500 B
    assert before.maxlen_packets == 166667  # 20 Gbit/s x 50 ms x 2 / 1500 B
    long = dataclasses.replace(pkt, delay_s=0.5)  # 20 Gbit/s x 1 s = 2.5 GB: the memory cap
    assert labline.queue_params(long, 1500, 0, before_queue=True).maxlen_packets == \
        labline.MAX_HELD_BYTES // 1500


def test_a_link_between_two_ovs_switches_is_refused_naming_it():
    plan = _plan({"o1": ("switch", "ovs"), "o2": ("switch", "ovs")}, [("o1", "o2")])
    with pytest.raises(LabError, match="link o1-o2 a_to_b: both ends .* OVS switches"):
        labline.places(plan, [("o1-o2", "a_to_b")])


def test_duplicate_and_delay_correlation_are_refused_naming_link_direction_and_key():
    lk = _plan({"a": ("host", "bridge"), "b": ("host", "bridge")}, [("a", "b")]).links[0]
    bad = Shaping(delay_s=0.01, jitter_s=0.001, delay_correlation_pct=25, duplicate_pct=1)
    out = labline.problems(lk, "b_to_a", bad)
    assert len(out) == 2
    assert out[0].startswith("link a-b b_to_a: duplicate_pct = 1%")
    assert out[1].startswith("link a-b b_to_a: delay_correlation_pct = 25%")
    assert labline.problems(lk, "a_to_b", Shaping(delay_s=0.01, loss_pct=1)) == []


def test_the_memory_cap_is_2_x_rate_x_delay_against_256_mib():
    lk = _plan({"a": ("host", "bridge"), "b": ("host", "bridge")}, [("a", "b")]).links[0]
    # 1 Gbit/s x 1 s x 2 = 250 MB = 238 MiB: fits; 1.1 s does not (262 MiB)
    assert labline.problems(lk, "a_to_b", Shaping(rate_bps=10**9, delay_s=1.0)) == []
    (msg,) = labline.problems(lk, "a_to_b", Shaping(rate_bps=10**9, delay_s=1.1))
    assert "link a-b a_to_b: delay 1.1s at 1 Gbit/s" in msg and "262 MiB" in msg


def test_queue_params_follow_netem_semantics_and_size_the_queue_from_the_bdp():
    q = labline.queue_params(Shaping(rate_bps=10**9, delay_s=0.05, jitter_s=0.001,
                                     loss_pct=0.5), 1500, 3)
    assert (q.queue_num, q.delay_s, q.jitter_s, q.distribution) == (3, 0.05, 0.001, "normal")
    assert not q.reorder_allowed  # jitter keeps the direction's FIFO order by default
    assert q.loss_pct == 0.5
    # 1 Gbit/s x 51 ms / 1500 B x 2 = 8500 packets
    assert q.maxlen_packets == 8500


def test_only_jitter_reorder_lets_jittered_packets_pass_each_other():
    jitter = Shaping(delay_s=0.02, jitter_s=0.01, jitter_distribution="uniform")
    assert "reorder_ok=0" in labline.queue_params(jitter, 1500, 0).spec()
    free = jitter.with_changes(jitter_reorder=True)
    assert "reorder_ok=1" in labline.queue_params(free, 1500, 0).spec()
    # reorder (sent at once) stays on with FIFO order for the others
    both = labline.queue_params(jitter.with_changes(reorder_pct=5), 1500, 0)
    assert (both.reorder_allowed, both.reorder_pct, both.reorder_gap) == (False, 5, 1)


def test_restore_text_marks_every_rule_with_the_run_id():
    plan = _plan({"h": ("host", "bridge"), "s": ("switch", "bridge")}, [("h", "s")])
    lines = labline.places(plan, [("h-s", "a_to_b")])
    assert labline.restore_text(lines, "ab12cd") == (
        "*mangle\n-A PREROUTING -m physdev --physdev-in toh -m comment --comment aitb:ab12cd "
        "-j NFQUEUE --queue-num 0\nCOMMIT\n")


def test_auto_resolves_to_netem_where_the_kernel_has_it_else_native():
    plan = _plan({"a": ("host", "bridge"), "b": ("host", "bridge")}, [("a", "b")])
    assert choose.resolve(plan, True).links[0].delay_line == "netem"
    assert choose.resolve(plan, False).links[0].delay_line == "native"
    assert choose.resolve(plan, False, has_native=False).links[0].delay_line == "netem"
    assert choose.lines_of(choose.resolve(plan, False)) == {"a-b/a_to_b": "native",
                                                            "a-b/b_to_a": "native"}


def _traced(base: Shaping, steps, delay_line="native", loop=False) -> LabPlan:
    import dataclasses

    from models.trace import LinkTrace, TraceStep
    plan = _plan({"a": ("host", "bridge"), "b": ("host", "bridge")}, [("a", "b")])
    lk = dataclasses.replace(plan.links[0], a_to_b=base, delay_line=delay_line)
    tr = LinkTrace("a-b", "a_to_b", "wan.trace", "aitb", loop, steps[-1][0] + 1.0,
                   tuple(TraceStep(t, **v) for t, v in steps))
    return dataclasses.replace(plan, links=(lk,), traces=(tr,))


def test_trace_steps_the_native_line_cannot_play_are_refused_before_the_lab():
    # a delay step on a direction that starts without a line: none is made at bring-up
    plan = _traced(Shaping(rate_bps=10**8), [(0.0, {}), (2.0, {"delay_s": 0.02})])
    (msg,) = labline.trace_problems(plan)
    assert msg.startswith("trace wan.trace, step at 2s: link a-b a_to_b: it starts without")
    assert msg in labline.plan_problems(plan)
    # steps beyond the memory cap, from a direction that has a line: one sentence per trace
    plan = _traced(Shaping(rate_bps=10**9, delay_s=0.01),
                   [(0.0, {"delay_s": 2.0}), (1.0, {"delay_s": 0.01}), (2.0, {"delay_s": 3.0})],
                   loop=True)
    (msg,) = labline.trace_problems(plan)
    assert msg.startswith("trace wan.trace, step at 0s (and 1 later step): link a-b a_to_b: "
                          "delay 2s at 1 Gbit/s")
    # what the line can play, and netem links, pass
    assert labline.trace_problems(_traced(Shaping(rate_bps=10**9, delay_s=0.01),
                                          [(0.0, {}), (1.0, {"delay_s": 0.5})])) == []
    assert labline.trace_problems(_traced(Shaping(rate_bps=10**8),
                                          [(0.0, {}), (2.0, {"delay_s": 0.02})],
                                          delay_line="netem")) == []


def test_a_byte_buffer_below_two_gso_packets_moves_the_line_as_a_packet_buffer_does():
    from models.units import BufferSize

    # its segmenter cuts GSO packets into frames too (testbed/tc/qdiscs/tbf.py segmented): a
    # forwarder's line goes before it; a buffer of 1 MB keeps GSO and the line at the receiver
    small = Shaping(rate_bps=250 * 10**6, delay_s=0.01, buffer=BufferSize(size_bytes=41943))
    large = Shaping(rate_bps=250 * 10**6, delay_s=0.01, buffer=BufferSize(size_bytes=10**6))
    plan = _plan({"h": ("host", "bridge"), "r": ("router", "bridge")}, [("h", "r")])
    for shaping, hook in ((small, "out"), (large, "in")):
        p = dataclasses.replace(plan, links=tuple(dataclasses.replace(lk, a_to_b=shaping,
                                                                      b_to_a=shaping)
                                                  for lk in plan.links))
        got = labline.places(p, [("h-r", "a_to_b"), ("h-r", "b_to_a")])
        assert [(g.node, g.hook) for g in got] == [("r", "in"), ("r" if hook == "out" else "h",
                                                                 hook)]


def test_a_lab_runs_every_link_whose_line_would_sit_in_a_receivers_prerouting_through_the_wire():
    """The lab's layout puts such links in the wire namespace (ports w<i>a, w<i>b, bridge
    wb<i>: i the link's place in the plan); their lines hold packets there, entering by the
    sender's port; a line on an OVS sender's side stays where it is."""
    from testbed.delay import native
    from testbed.lab.layout import make_layout

    plan = _plan({"h": ("host", "bridge"), "s": ("switch", "bridge"), "o": ("switch", "ovs"),
                  "r": ("router", "bridge")}, [("h", "s"), ("r", "o")])
    plan = dataclasses.replace(plan, links=tuple(dataclasses.replace(lk, delay_line="native")
                                                 for lk in plan.links))
    layout = make_layout(plan, "ab12cd")
    wired = native.wired_links(plan, layout)
    assert wired == ["h-s", "r-o"]  # r-o's direction o -> r would sit in r's PREROUTING
    layout.add_wires(plan, wired)
    assert layout.wires["h-s"] == labline.WireLink("h-s", "wb0", "w0a", "w0b")
    wire = layout.node(labline.WIRE_NODE)
    assert wire.netns == "aitb-ab12cd-_wire" and wire.ifindex("w1b") == 105
    got = labline.places(plan, [("h-s", "a_to_b"), ("h-s", "b_to_a"), ("r-o", "a_to_b"),
                                ("r-o", "b_to_a")], layout.wires)
    assert [(p.node, p.hook, p.dev, p.physdev, p.queue_num) for p in got] == [
        ("_wire", "wire", "w0a", True, 0),  # entering the wire from h's end
        ("_wire", "wire", "w0b", True, 1),
        ("r", "out", "too", False, 0),      # into OVS: still the sender's POSTROUTING -o
        ("_wire", "wire", "w1b", True, 2),
    ]
    assert labline.restore_text(got[:1], "ab12cd") == (
        "*mangle\n-A PREROUTING -m physdev --physdev-in w0a -m comment --comment aitb:ab12cd "
        "-j NFQUEUE --queue-num 0\nCOMMIT\n")


def test_a_link_down_through_the_wire_also_sets_the_port_facing_the_end_that_stays_up():
    from types import SimpleNamespace

    from testbed.lab.layout import make_layout
    from testbed.live.faults import wire_ports

    plan = _plan({"h": ("host", "bridge"), "g": ("host", "bridge")}, [("h", "g")])
    layout = make_layout(plan, "ab12cd")
    layout.add_wires(plan, ["h-g"])
    lab = SimpleNamespace(layout=layout)
    lk = plan.links[0]
    assert wire_ports(lab, [lk], [lk.a], up=False) == ["w0b"]  # g keeps IFF_UP, loses carrier
    assert wire_ports(lab, [lk], [lk.a, lk.b], up=False) == []
    assert wire_ports(lab, [lk], [lk.a, lk.b], up=True) == ["w0a", "w0b"]
