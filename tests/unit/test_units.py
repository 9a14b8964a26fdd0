import pytest

from models.units import (
    BufferSize,
    UnitError,
    format_rate,
    parse_buffer,
    parse_duration_s,
    parse_pct,
    parse_rate_bps,
    parse_size_bytes,
)


@pytest.mark.parametrize("text,bps", [
    ("10Gbit", 10_000_000_000), ("10gbit", 10_000_000_000), ("10GBIT", 10_000_000_000),
    ("400Gbit", 400_000_000_000), ("1.5mbit", 1_500_000), ("100kbit", 100_000),
    ("1kibit", 1024), ("2tbit", 2_000_000_000_000), ("10gbit/s", 10_000_000_000),
    ("512bit", 512),
])
def test_rates_parse_exactly(text, bps):
    assert parse_rate_bps(text) == bps
    assert isinstance(parse_rate_bps(text), int)


def test_400gbit_round_trips_exactly():
    bps = parse_rate_bps("400Gbit")
    assert format_rate(bps) == "400gbit"
    assert parse_rate_bps(format_rate(bps)) == bps
    assert bps > 2**32 * 8  # above what a 32-bit bytes/s field holds


@pytest.mark.parametrize("bad,needle", [
    ("10", "no unit"), ("10Gbps", "BYTES"), ("-1gbit", "negative"), ("fast", "cannot read"),
    ("10furlongs", "unknown rate unit"), ("1.5bit", "whole"), ("100000000tbit", "64 bits"),
])
def test_bad_rates_say_why(bad, needle):
    with pytest.raises(UnitError, match=needle):
        parse_rate_bps(bad)


def test_unitless_number_is_refused():
    with pytest.raises(UnitError, match="no unit"):
        parse_rate_bps(1000)  # type: ignore[arg-type]


@pytest.mark.parametrize("text,s", [
    ("5ms", 0.005), ("5MS", 0.005), ("100us", 1e-4), ("100usec", 1e-4), ("2s", 2.0),
    ("1msecs", 1e-3), ("250ns", 2.5e-7), ("0.5sec", 0.5),
])
def test_durations(text, s):
    assert parse_duration_s(text) == pytest.approx(s, rel=1e-12)


def test_negative_delay_refused():
    with pytest.raises(UnitError, match="negative"):
        parse_duration_s("-5ms")


@pytest.mark.parametrize("text,n", [
    ("1500b", 1500), ("64KiB", 65536), ("64kb", 65536), ("64k", 65536), ("1m", 2**20),
    ("1gbit", 125_000_000), ("8bit", 1),
])
def test_sizes(text, n):
    assert parse_size_bytes(text) == n


def test_pct():
    assert parse_pct("0.1%") == pytest.approx(0.1)
    with pytest.raises(UnitError, match="outside"):
        parse_pct("101%")
    with pytest.raises(UnitError, match="no unit"):
        parse_pct("0.1")


def test_buffers():
    assert parse_buffer("100p") == BufferSize(packets=100)
    assert parse_buffer("100 packets") == BufferSize(packets=100)
    assert parse_buffer("256KiB") == BufferSize(size_bytes=262144)
    with pytest.raises(UnitError):
        parse_buffer("0p")


def test_spec_fields_hold_numbers_read_once_and_serialise_as_written():
    """A unit field of a spec model is read at validation into a typed number (what builders
    use without parsing again), defaults included; it prints and serialises as written, and
    survives pickling (campaign executors ship specs to workers)."""
    import pickle

    from models.units import DurationS, RateBps, SizeBytes, read_rate_bps
    from orchestration.run.experiment import TimeoutSpec, TransportSpec
    from topologies.spec import LinkSpec

    t = TimeoutSpec(transfer="1.5s")
    assert isinstance(t.transfer, DurationS) and t.transfer == 1.5 and str(t.transfer) == "1.5s"
    assert isinstance(t.phase, DurationS) and t.phase == 600.0  # a default, read the same way
    assert t.model_dump(mode="json")["transfer"] == "1.5s"
    tr = TransportSpec(sndbuf="64KiB")
    assert isinstance(tr.sndbuf, SizeBytes) and tr.sndbuf == 65536
    link = LinkSpec.model_validate({"endpoints": ["a", "b"], "rate": "2.5Gbit"})
    assert isinstance(link.rate, RateBps) and link.rate == 2_500_000_000
    assert link.model_dump(exclude_none=True)["rate"] == "2.5Gbit"
    back = pickle.loads(pickle.dumps(read_rate_bps("10Gbit")))
    assert (back, str(back), type(back)) == (10**10, "10Gbit", RateBps)
    assert parse_rate_bps(read_rate_bps("1Mbit")) == 10**6  # a typed value is not parsed again
