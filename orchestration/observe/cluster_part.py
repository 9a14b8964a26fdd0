"""The machine's side of a cluster run's observation: ``aitb topo observe PART --config JSON``
runs on each machine (over SSH) for the length of the run and observes that machine's part of
the lab exactly as a local run observes its lab (orchestration.observe.local,
orchestration.fidelity.run): tcpdump on the chosen interfaces of its nodes, the counter
sampler over its namespaces, the fidelity monitor's RTT probes, counter snapshots, native
delay-line counters and CPU samples. All times are the machine's own clock; the driver moves
them onto its own when it copies the directory back (orchestration.observe.cluster_collect).

CONFIG JSON: ``{"dir": PATH, "points": [[node, ifname, link], ...], "capture": {"snaplen_bytes",
"rotate_size_bytes", "files"}, "counters": {"interval_s", "tcp"} | null, "fidelity": bool}``.

Protocol on stdin/stdout (one JSON object a line):

1. once every tcpdump listens, the first counter sample is taken and the RTT probes are done:
   ``{"ready": true}``; a failure to start: ``{"error": TEXT}`` and exit status 1 (what was
   started is stopped first).
2. it waits for one line on stdin, ``{"windows": [[t_start_s, t_end_s], ...]}`` (the
   workloads' traffic windows on the machine's clock, for the fidelity monitor's CPU samples);
   end of file instead means the driver went away without stopping it (its channel closed:
   a lost machine, whose connection's end may reach the machine only once its network is
   back): it stops what it started, removes DIR (nobody will copy it back) and exits 1;
3. stops capture and sampling, takes the monitor's after-snapshot, writes
   ``DIR/captures/`` (pcaps, index.json), ``DIR/counters/`` (Parquet tables, sampler.json) and
   ``DIR/fidelity.json`` (the part's fidelity document), and prints ``{"capture": index or
   null, "counters": sampler.json or null, "errors": [TEXT, ...]}``; exit status 0 when
   ``errors`` is empty, else 1.

This process and every process it starts (tcpdumps, the sampler) are registered in the
machine's registry under the part's run id, so ``aitb topo destroy PART`` ends them should the
driver be lost (ended while it waits, it removes DIR: nobody will copy it back); the sampler
also ends by itself when this process does (its parent watch). DIR, which must be
``/tmp/aitb-observe-PART`` (:func:`remote_dir`), is registered too, before it exists: that
teardown removes it whenever the driver did not copy it back.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import IO, Any

from models.errors import AitbError
from orchestration.fidelity.run import FidelityMonitor
from testbed.capture import make_capture
from testbed.capture.points import CapturePoint
from testbed.capture.tcpdump import CaptureConfig
from testbed.counters import CounterSampler, SamplerConfig
from testbed.lab.lab import Lab
from testbed.lab.registry import pid_start_time, state_dir, unknown_name

__all__ = ["observe_part", "remote_dir"]


def remote_dir(part_run_id: str) -> str:
    """Where machine's observer writes (removed once copied back; its name carries the part's
    run id, so the part's teardown may remove it: testbed.lab.clean)."""
    return f"/tmp/aitb-observe-{part_run_id}"


def _say(out: IO[str], msg: dict[str, Any]) -> None:
    out.write(json.dumps(msg) + "\n")
    out.flush()


def observe_part(run_id: str, config: dict[str, Any], stdin: IO[str], stdout: IO[str]) -> int:
    """Observe the machine's part ``run_id`` as ``config`` says (module docstring); returns
    the exit status. Raises LabError (before anything starts) for an unknown run id."""
    lab = Lab.attach(run_id, state_dir())
    out = Path(config["dir"])
    if out != Path(remote_dir(run_id)):
        raise unknown_name(f"--config: dir {str(out)!r}: the observation of part {run_id} "
                           f"goes to {remote_dir(run_id)}")
    # registered like the processes it starts: a driver lost mid-run leaves this process
    # waiting on stdin, and the machine's ``aitb topo destroy`` then ends it by pid; DIR
    # too, before it exists: a driver lost after the observation, before its copy-back (or
    # this process SIGKILLed), leaves it to that teardown (testbed.lab.clean, run-marked paths)
    lab.registry.append([{"kind": "process", "node": "(root namespace)",
                          "argv": ["aitb", "topo", "observe", run_id], "pid": os.getpid(),
                          "start": pid_start_time(os.getpid())},
                         {"kind": "path", "node": "(root namespace)", "path": str(out)}])
    out.mkdir(parents=True, exist_ok=True)
    points = [CapturePoint(*p) for p in config.get("points", [])]
    capture = sampler = monitor = None
    try:
        try:
            if config.get("fidelity"):
                monitor = FidelityMonitor(lab.plan, lab).before()
            if config.get("counters") is not None:
                c = config["counters"]
                sampler = CounterSampler(lab, out / "counters",
                                         SamplerConfig(interval_s=float(c["interval_s"]),
                                                       tcp=bool(c["tcp"])))
                sampler.start()
            if points:
                capture = make_capture(lab, out / "captures", points,
                                       CaptureConfig(**config["capture"]))
                capture.start()
        except AitbError as exc:
            for stop in (capture, sampler):
                if stop is not None:
                    try:
                        stop.stop()
                    except AitbError:
                        pass  # the start's own error is the one reported
            if monitor is not None:
                monitor.cpu.stop()
            _say(stdout, {"error": str(exc)})
            return 1
        _say(stdout, {"ready": True})
        try:
            line = stdin.readline()
        except BaseException:  # ended while observing (the machine's teardown, SIGTERM:
            shutil.rmtree(out, ignore_errors=True)  # the driver was lost): nobody will
            raise                                   # copy the directory back
        if not line.strip():  # the driver is gone (module docstring, step 2)
            _abandon(capture, sampler, monitor)
            shutil.rmtree(out, ignore_errors=True)
            return 1
        windows = [tuple(w) for w in json.loads(line).get("windows", [])]
        errors: list[str] = []
        summary: dict[str, Any] = {"capture": None, "counters": None}
        for key, what in (("capture", capture), ("counters", sampler)):
            if what is None:
                continue
            try:
                summary[key] = what.stop()
            except AitbError as exc:
                errors.append(f"{key}: {exc}")
        if monitor is not None:
            try:
                monitor.after()
            except AitbError as exc:
                errors.append(f"fidelity: {exc}")
            monitor.write(out, windows)
        _say(stdout, {**summary, "errors": errors})
        return 1 if errors else 0
    finally:
        lab.release()


def _abandon(capture: Any, sampler: Any, monitor: Any) -> None:
    """Stop the capture, the sampler and the monitor's CPU sampler of an observation nobody
    will collect (their errors go nowhere: no driver reads them)."""
    for what in (capture, sampler):
        if what is not None:
            with contextlib.suppress(AitbError):
                what.stop()
    if monitor is not None:
        monitor.cpu.stop()

