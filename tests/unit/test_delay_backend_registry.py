"""A delay-line backend is one module in testbed/delay/ plus one line in ``BACKENDS``: every
module there is registered under its own ``NAME`` and has the whole interface of
:class:`testbed.delay.DelayLineBackend`; an unknown name is refused with the list."""

import inspect
import pkgutil

import pytest

import testbed.delay as delay
from models.errors import LabError

INTERFACE = [name for name, _ in inspect.getmembers(delay.DelayLineBackend,
                                                   inspect.isfunction)
             if not name.startswith("_")]


def _backend_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(delay.__path__) if not m.ispkg)


def test_every_module_of_the_package_is_a_registered_backend():
    assert _backend_modules() == sorted(m.__name__.rsplit(".", 1)[1]
                                        for m in delay.BACKENDS.values())
    for name, module in delay.BACKENDS.items():
        assert module.NAME == name


@pytest.mark.parametrize("name", sorted(delay.BACKENDS))
def test_a_backend_has_the_whole_interface(name):
    module = delay.backend(name)
    assert sorted(INTERFACE) == ["apply", "ingress", "teardown", "verify"]
    for fn in INTERFACE:
        assert callable(getattr(module, fn, None)), f"{name} lacks {fn}"
        want = list(inspect.signature(getattr(delay.DelayLineBackend, fn)).parameters)[1:]
        assert list(inspect.signature(getattr(module, fn)).parameters) == want, (name, fn)
    assert isinstance(module.CAPABILITIES, tuple)


def test_an_unknown_backend_is_refused_with_the_list():
    with pytest.raises(LabError) as err:
        delay.backend("tcng")
    assert all(name in str(err.value) for name in delay.BACKENDS)


def test_the_spec_names_every_backend_and_only_those():
    """The delay-line names a topology may give (models.plan.DelayLine, read by topology
    files and plans) are the registered backends plus ``auto``."""
    from models.plan import DELAY_LINES

    assert sorted(DELAY_LINES) == sorted(["auto", *delay.BACKENDS])
