import pytest

from models.schedule import Burst, Collective, Compute, Flow, Group, Schedule, ScheduleError


def _sched(ops, groups=None, world=4):
    groups = groups or {"dp0": Group("dp0", "dp", (0, 1, 2, 3))}
    return Schedule(name="t", world_size=world, groups=groups, ops=tuple(ops))


def test_valid_schedule_lists_ranks():
    s = _sched([Collective("all_reduce", "dp0", 1024), Compute(0.01, ranks=(1,)),
                Burst((Flow(1, 0, 10), Flow(2, 0, 10)))])
    assert s.ranks_of(s.ops[0]) == (0, 1, 2, 3)
    assert s.ranks_of(s.ops[1]) == (1,)
    assert s.ranks_of(s.ops[2]) == (0, 1, 2)


@pytest.mark.parametrize("op,needle", [
    (Collective("all_reduce", "nope", 1), "unknown group"),
    (Collective("allreduce", "dp0", 1), "unknown collective"),  # type: ignore[arg-type]
    (Collective("all_reduce", "dp0", -1), "negative"),
    (Compute(0.1, ranks=(7,)), "outside"),
    (Burst((Flow(0, 9, 1),)), "outside"),
])
def test_bad_ops_are_refused(op, needle):
    with pytest.raises(ScheduleError, match=needle):
        _sched([op])
