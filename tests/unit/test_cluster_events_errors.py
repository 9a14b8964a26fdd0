"""``events:`` of a cluster run when a machine's channel fails, without root or network (fake
SSH channels): every ``aitb topo events`` part started is told to stop (its channel closed),
the run's events.jsonl is closed, and the error is a LabError naming the machine."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from test_cluster_experiment import MACHINES, experiment

from models.errors import LabError
from orchestration.cluster.control import Offset
from orchestration.events import cluster as eventing
from orchestration.run.runner import prepare

DCI = "dc1-b1-dc2-b1"


class _Out:
    def __init__(self, lines, fail=None):
        self.lines, self.fail = list(lines), fail

    def readline(self):
        if self.fail is not None:
            raise self.fail
        return self.lines.pop(0) if self.lines else b""

    def __iter__(self):
        return iter(())


class _Chan:
    def __init__(self, out, fail_on=None):
        self.out, self.fail_on, self.closed, self.sent = out, fail_on, False, []

    def settimeout(self, t):
        pass

    def exec_command(self, cmd):
        pass

    def makefile(self, mode):
        return self.out

    def sendall(self, data):
        if self.fail_on is not None and self.fail_on in data:
            raise OSError("Socket is closed")
        self.sent.append(data)

    def close(self):
        self.closed = True


def _control(name, chan):
    transport = SimpleNamespace(is_active=lambda: True, open_session=lambda timeout: chan)
    return SimpleNamespace(machine=SimpleNamespace(name=name),
                           client=SimpleNamespace(get_transport=lambda: transport))


def test_a_part_that_never_gets_ready_has_its_channel_closed():
    chan = _Chan(_Out([], fail=TimeoutError("timed out")))
    with pytest.raises(LabError, match="machine m2: events of part r1") as exc:
        eventing.RemoteEvents(_control("m2", chan), ["aitb"], "r1", [], lambda m, r: None)
    assert "timed out" in str(exc.value)
    assert chan.closed  # the part reads end of file and exits, not waits for ever


def test_a_channel_lost_at_start_stops_every_part_and_names_the_machine(tmp_path):
    path = experiment(tmp_path, MACHINES)
    path.write_text(path.read_text() + f"""events:
  - {{at: 1s, kind: link_down, link: {DCI}}}
  - {{at: 2s, kind: link_up, link: {DCI}}}
""")
    prep = prepare(path)
    chans = {"m1": _Chan(_Out([b'{"ready": true}\n'])),
             "m2": _Chan(_Out([b'{"ready": true}\n']), fail_on=b'"start"')}
    lab = SimpleNamespace(
        plan=prep.plan, where=prep.machines, lost=set(),
        controls={m: _control(m, c) for m, c in chans.items()},
        cluster=SimpleNamespace(aitb=["aitb"]),
        deployed=SimpleNamespace(cut_links=[], run_ids={"m1": "r0", "m2": "r1"},
                                 offsets={"m1": Offset(0.5, 0.001, 5),
                                          "m2": Offset(-0.25, 0.001, 5)}))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with pytest.raises(LabError, match="machine m2: events of part r1: start"):
        with eventing.playing_cluster_events(lab, prep.events, run_dir, {}, lambda s: None):
            pytest.fail("the body must not run")
    assert chans["m1"].closed and chans["m2"].closed
    # the start went to m1 on its clock (driver's t0 + its offset) before m2 failed
    assert any(b'"start"' in x for x in chans["m1"].sent)
    lines = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    assert sorted(x["action"] for x in lines) == [0, 1]
    assert all("no record" in x["error"] for x in lines)
