"""Golden tests of the tc recipes (pure data, no root)."""

from models.shaping import GilbertElliott, Shaping
from models.units import BufferSize
from testbed.tc.qdiscs import netem
from testbed.tc.qdiscs.htb import htb_burst_bytes
from testbed.tc.qdiscs.netem import netem_limit_packets
from testbed.tc.qdiscs.tbf import largest_gso_bytes
from testbed.tc.recipe import direction_recipe


def _recipe(shaping, mtu=1500):
    return direction_recipe(shaping, mtu, ("h1", "eth0"), ("s1", "p1"), "ifb3")


def test_unshaped_direction_has_no_objects():
    r = _recipe(Shaping())
    assert r.objects() == () and r.ifb is None and r.commands() == []


def test_rate_only_gets_htb_and_default_pfifo_1000():
    r = _recipe(Shaping(rate_bps=100 * 10**6))
    assert r.commands() == [
        ["tc", "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb", "default", "1"],
        ["tc", "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:1", "htb",
         "rate", "100mbit", "ceil", "100mbit", "burst", "12500b", "cburst", "12500b",
         "quantum", "200000"],
        ["tc", "qdisc", "add", "dev", "eth0", "parent", "1:1", "handle", "10:", "pfifo",
         "limit", "1000"],
    ]
    assert not r.needs_netem()


def test_400gbit_is_exact_and_burst_is_one_ms():
    r = _recipe(Shaping(rate_bps=400 * 10**9, buffer=BufferSize(size_bytes=4 * 2**20)))
    cls = r.egress[1]
    assert cls.params["rate_bps"] == 400_000_000_000
    assert cls.params["burst_bytes"] == 50_000_000  # 1 ms at 400 Gbit/s
    assert cls.params["quantum_bytes"] == 200_000
    assert r.egress[2].kind == "bfifo" and r.egress[2].params == {"limit_bytes": 4194304}
    assert "400gbit" in r.commands()[1]


def test_packet_buffer_sits_below_the_segmenter():
    # a pfifo counts skbs: the tbf before it cuts GSO packets longer than one frame into
    # wire-sized segments (sch_tbf's tbf_segment), so "100 packets" are 100 frames
    r = _recipe(Shaping(rate_bps=10**9, buffer=BufferSize(packets=100)), mtu=9000)
    assert r.commands()[2:] == [
        ["tc", "qdisc", "add", "dev", "eth0", "parent", "1:1", "handle", "9:", "tbf",
         "rate", "1tbit", "burst", "9014b", "limit", "9014b"],
        ["tc", "qdisc", "add", "dev", "eth0", "parent", "9:1", "handle", "10:", "pfifo",
         "limit", "100"],
    ]
    # byte buffers that hold two of the largest GSO packets and the default count bytes or
    # skbs as before: no segmenter
    byte_buffer = BufferSize(size_bytes=10**6)
    assert [o.kind for o in _recipe(Shaping(rate_bps=10**9)).egress] == ["htb", "htb", "pfifo"]
    assert [o.kind for o in _recipe(Shaping(rate_bps=10**9, buffer=byte_buffer)).egress] == \
        ["htb", "htb", "bfifo"]


def test_byte_buffer_below_two_gso_packets_sits_below_the_segmenter():
    # 4 MiB at scale 100 (41943 bytes): a bfifo counts a 64 KiB GSO packet whole, so it
    # would refuse every full-size one; cut into frames first, it holds 27 of them
    small = BufferSize(size_bytes=41943)
    r = _recipe(Shaping(rate_bps=250 * 10**6, buffer=small))
    assert [o.kind for o in r.egress] == ["htb", "htb", "tbf", "bfifo"]
    assert r.commands()[2:] == [
        ["tc", "qdisc", "add", "dev", "eth0", "parent", "1:1", "handle", "9:", "tbf",
         "rate", "1tbit", "burst", "1514b", "limit", "1514b"],
        ["tc", "qdisc", "add", "dev", "eth0", "parent", "9:1", "handle", "10:", "bfifo",
         "limit", "41943b"],
    ]
    edge = largest_gso_bytes(1500)
    assert 65536 < edge < 70000  # 64 KiB, its Ethernet header and 44 more segments' headers
    kinds = [o.kind for o in _recipe(Shaping(rate_bps=10**9,
                                             buffer=BufferSize(size_bytes=2 * edge))).egress]
    assert kinds == ["htb", "htb", "bfifo"]
    kinds = [o.kind for o in _recipe(Shaping(rate_bps=10**9,
                                             buffer=BufferSize(size_bytes=2 * edge - 1))).egress]
    assert kinds == ["htb", "htb", "tbf", "bfifo"]


def test_burst_never_below_two_frames():
    assert htb_burst_bytes(1000, 1500) == 2 * 1514


def test_delay_line_goes_to_ifb_on_receiver_with_bdp_limit():
    s = Shaping(rate_bps=10**9, delay_s=0.05, buffer=BufferSize(packets=100))
    r = _recipe(s)
    # 1 Gbit/s * 50 ms / (8 * 64 B) = 97657 packets in flight at minimum frame size, + 1000
    assert netem_limit_packets(s, 1500) == 97657 + 1000
    assert r.ifb == "ifb3"
    assert r.commands()[4:] == [
        ["ip", "link", "add", "ifb3", "type", "ifb"],
        ["ip", "link", "set", "ifb3", "up"],
        ["tc", "qdisc", "add", "dev", "ifb3", "root", "handle", "1:", "netem",
         "limit", "98657", "delay", "50ms"],
        ["tc", "qdisc", "add", "dev", "p1", "ingress", "handle", "ffff:", "ingress"],
        ["tc", "filter", "add", "dev", "p1", "parent", "ffff:", "protocol", "all", "prio", "1",
         "u32", "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev",
         "ifb3"],
    ]
    assert r.egress[3].params == {"limit_packets": 100}
    assert r.ingress[1].node == "s1" and r.egress[0].node == "h1"


def test_netem_limit_is_at_least_the_briefs_rule():
    for rate, delay, mtu in ((10**8, 0.01, 1500), (10**10, 0.1, 9000), (4 * 10**11, 0.2, 1500)):
        s = Shaping(rate_bps=rate, delay_s=delay)
        rule = -(-rate * delay // (8 * mtu)) * 2
        assert netem_limit_packets(s, mtu) >= rule


def test_full_netem_words():
    s = Shaping(delay_s=0.01, jitter_s=0.002, delay_correlation_pct=25,
                jitter_distribution="pareto", loss_gemodel=GilbertElliott(1, 30, 90, 0.5),
                reorder_pct=5, duplicate_pct=1, corrupt_pct=0.1)
    words = _recipe(s).ingress[0].tc_argv()
    assert words[words.index("delay"):] == [
        "delay", "10ms", "2ms", "25%", "distribution", "pareto",
        "loss", "gemodel", "1%", "30%", "90%", "0.5%",
        "reorder", "5%", "duplicate", "1%", "corrupt", "0.1%", "rate", "10Tbit"]
    assert _recipe(s).egress == ()  # no rate: no HTB on the sender


def _netem_options(shaping):
    netem_obj = _recipe(shaping).ingress[0]
    return netem_obj, netem.options(netem_obj, lambda name: 1)


def _attrs(opts):
    return dict((k, v) for k, v in opts["attrs"])


def test_jitter_keeps_fifo_order_through_a_rate_that_is_no_bottleneck():
    s = Shaping(rate_bps=10**9, delay_s=0.02, jitter_s=0.01, jitter_distribution="uniform")
    obj, opts = _netem_options(s)
    assert obj.tc_argv()[-2:] == ["rate", "10Tbit"]  # not the link's 1 Gbit/s: see the module
    attrs = _attrs(opts)
    # netem keeps the rate in bytes/s; above u32 the struct holds ~0U and RATE64 the value
    # (tc's netem_parse_opt does the same)
    assert attrs["TCA_NETEM_RATE"]["rate"] == 2**32 - 1
    assert attrs["TCA_NETEM_RATE64"] == netem.NETEM_ORDER_RATE_BPS // 8 == 1_250_000_000_000
    # the encoding the kernel gets reads back the same
    msg = netem.NetemOptions()
    msg.setvalue(opts)
    msg.encode()
    back = netem.NetemOptions(msg.data)
    back.decode()
    assert back.get_attr("TCA_NETEM_RATE64") == 1_250_000_000_000


def test_jitter_reorder_and_no_jitter_give_netem_no_rate():
    free = Shaping(delay_s=0.02, jitter_s=0.01, jitter_reorder=True)
    for s in (free, Shaping(delay_s=0.02)):
        obj, opts = _netem_options(s)
        assert "rate" not in obj.tc_argv()
        # a rate of 0 is sent all the same: netem keeps a rate until a change gives one
        assert _attrs(opts)["TCA_NETEM_RATE"]["rate"] == 0
        assert "TCA_NETEM_RATE64" not in _attrs(opts)


def test_random_loss_and_aqms():
    words = _recipe(Shaping(loss_pct=1.5)).ingress[0].tc_argv()
    assert words[-3:] == ["loss", "random", "1.5%"]
    fq = _recipe(Shaping(rate_bps=10**9, aqm="fq_codel", ecn=True, buffer=BufferSize(packets=50)))
    assert fq.egress[2].tc_argv()[-4:] == ["fq_codel", "limit", "50", "ecn"]
    red = _recipe(Shaping(rate_bps=10**9, aqm="red", buffer=BufferSize(size_bytes=400_000)))
    assert red.egress[2].params["max_bytes"] == 100_000
    assert red.egress[2].params["min_bytes"] == 33_333
