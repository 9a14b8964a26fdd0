"""The qdisc and delay-line registries: every module has the whole interface, the names agree
with the ground's spec side, and an unknown name is refused with the valid ones."""

from __future__ import annotations

import pytest

from models.errors import LabError
from models.shaping import AQMS, Shaping
from testbed import delay as delay_backends
from testbed.host.capabilities import QDISCS
from testbed.tc.objects import TcObject
from testbed.tc.recipe import direction_recipe, qdiscs
from testbed.vm.boot import GUEST_MODULES

INTERFACE = ("KINDS", "CAPABILITIES", "KMODS", "NLA", "words", "options", "problems", "stats")


@pytest.mark.parametrize("module", qdiscs.MODULES, ids=lambda m: m.__name__)
def test_every_discipline_module_has_the_whole_interface(module):
    missing = [name for name in INTERFACE if not hasattr(module, name)]
    assert not missing, f"{module.__name__} lacks {missing}"
    assert set(module.NLA) <= set(module.KINDS)
    if hasattr(module, "AQM"):
        assert callable(module.leaf)


def test_aqm_modules_are_exactly_the_ground_aqms():
    assert sorted(qdiscs.AQM_MODULES) == sorted(AQMS)


def test_each_aqm_leaf_is_a_registered_kind():
    for name in AQMS:
        kind, _ = qdiscs.aqm(name).leaf(Shaping(rate_bps=10**8, aqm=name), 1500)
        assert qdiscs.module(kind).AQM == name


def test_capabilities_and_vm_modules_come_from_the_registry():
    assert QDISCS == qdiscs.capabilities()
    assert QDISCS[:7] == ("htb", "tbf", "netem", "fq_codel", "red", "pfifo", "bfifo")  # today's
    assert set(qdiscs.kernel_modules()) <= set(GUEST_MODULES)


def test_unknown_kind_names_the_closest_and_the_valid_ones():
    with pytest.raises(LabError, match=r"unknown qdisc kind 'fq_codle' \(did you mean "
                                       r"'fq_codel'\?\); known: .*htb.*netem") as exc:
        TcObject("qdisc", "h1", "eth0", "root", "1:", "fq_codle").tc_argv()
    assert exc.value.exit_code == 2
    assert qdiscs.known("noqueue") is None  # kinds read from the kernel are not errors


def test_unknown_delay_line_backend_lists_the_valid_ones():
    with pytest.raises(LabError, match=r"unknown delay_line backend 'netm' \(did you mean "
                                       r"'netem'\?\); known: native, netem"):
        direction_recipe(Shaping(delay_s=0.01), 1500, ("a", "e0"), ("b", "e0"), "ifb1",
                         delay_line="netm")


def test_netem_backend_names_itself_on_the_recipe():
    r = direction_recipe(Shaping(delay_s=0.01), 1500, ("a", "e0"), ("b", "e0"), "ifb1")
    assert r.delay_line == delay_backends.DEFAULT == "netem" and r.ifb == "ifb1"
    assert [o.kind for o in r.ingress] == ["netem", "ingress", "u32"]
    assert set(delay_backends.backend("netem").CAPABILITIES) <= r.kinds() | {"ifb"}
    assert direction_recipe(Shaping(rate_bps=10**6), 1500, ("a", "e0"), ("b", "e0"),
                            "ifb1").delay_line is None
