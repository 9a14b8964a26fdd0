import pytest

from models.shaping import GilbertElliott, Shaping
from models.units import UnitError


def test_unshaped_needs_nothing():
    s = Shaping()
    assert not s.is_shaped and not s.needs_netem


def test_delay_needs_netem_rate_does_not():
    assert Shaping(delay_s=0.01).needs_netem
    assert not Shaping(rate_bps=10**9).needs_netem
    assert Shaping(rate_bps=10**9).is_shaped


@pytest.mark.parametrize("kwargs,needle", [
    ({"loss_pct": 101}, "outside"), ({"delay_s": -1}, "negative"),
    ({"jitter_s": 0.02, "delay_s": 0.01}, "exceeds"), ({"reorder_pct": 1}, "needs a delay"),
    ({"ecn": True}, "ecn"), ({"aqm": "pie"}, "unknown aqm"),
])
def test_invalid_shaping(kwargs, needle):
    with pytest.raises(UnitError, match=needle):
        Shaping(**kwargs)


def test_gilbert_elliott_mean_loss():
    # pi_bad = 1/(1+9) = 0.1; loss = 0.1*100 + 0.9*0 = 10 %
    assert GilbertElliott(p_pct=1, r_pct=9).mean_loss_pct() == pytest.approx(10.0)
