"""Captures, counter samples and fidelity data of a cluster run: observed on each machine by
its own aitb (``aitb topo observe``, orchestration.observe.cluster_part), copied back over SSH
and merged into the one run directory, every time stamp moved onto the driver's clock.

- :class:`RemoteObserver`: the observer of one machine's part, over one SSH channel.
- :func:`fetch_dir`: a directory of a machine copied here (``tar`` over an SSH exec channel:
  no SFTP subsystem needed; extracted with tarfile's ``data`` filter, so nothing lands outside
  the target).
- :func:`shift_pcap`: a pcap file with every packet's time moved by a whole number of ns and
  a drift's share.
- :func:`merge_parts`: the machines' ``captures/`` and ``counters/`` as one run's.

Clock: a machine's times are its own clock; the driver's are machine time - offset, with the
offset measured before the run and, once it has been measured again after the traffic,
interpolated linearly between the two (constant drift: orchestration.cluster.control's
``to_driver_s``), uncertain by the machine's ``uncertainty_s``.
"""

from __future__ import annotations

import json
import shlex
import struct
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.counter_columns import SCHEMAS
from models.errors import LabError
from orchestration.cluster.control import Control, paramiko_errors, read_json_line

__all__ = ["RemoteObserver", "fetch_dir", "shift_pcap", "merge_parts", "Part",
           "READY_TIMEOUT_S"]

READY_TIMEOUT_S = 120.0  # Python start, the RTT probes, the first sample, tcpdumps listening
STOP_TIMEOUT_S = 120.0  # the last sample, Parquet files, fidelity snapshot

# pcap (libpcap file format): magic -> time fraction units per second
_MAGIC = {0xA1B2C3D4: 10**6, 0xA1B23C4D: 10**9}


class RemoteObserver:
    """``aitb topo observe`` of part ``run_id`` on ``control``'s machine (protocol:
    orchestration.observe.cluster_part). The constructor returns once the machine says it
    observes; raises LabError naming the machine with its error otherwise."""

    def __init__(self, control: Control, aitb: Sequence[str], run_id: str,
                 config: Mapping[str, Any]) -> None:
        self.machine = control.machine.name
        argv = [*aitb, "topo", "observe", run_id, "--config", json.dumps(config)]
        self.where = f"machine {self.machine}: observing part {run_id}"
        transport = control.client.get_transport()
        if transport is None or not transport.is_active():
            raise LabError(f"{self.where}: SSH connection lost")
        try:
            self.chan = transport.open_session(timeout=15)
            self.chan.settimeout(READY_TIMEOUT_S)
            self.chan.exec_command(shlex.join(argv))
            self.out = self.chan.makefile("rb")
            first = self._line()
        except (OSError, EOFError, paramiko_errors()) as exc:
            raise LabError(f"{self.where}: {type(exc).__name__}: {exc}") from None
        if first.get("ready") is not True:
            self.chan.close()
            raise LabError(f"{self.where}: {first.get('error') or first}")

    def _line(self) -> dict[str, Any]:
        return read_json_line(self.out, self.chan, self.where)

    def stop(self, windows: Sequence[tuple[float, float]]) -> dict[str, Any]:
        """Tell it to stop (``windows``: traffic windows on the machine's clock); return its
        summary (``capture``, ``counters``, ``errors``). Raises LabError naming the machine
        if it does not answer within STOP_TIMEOUT_S or the channel fails."""
        try:
            self.chan.settimeout(STOP_TIMEOUT_S)
            self.chan.sendall((json.dumps({"windows": [list(w) for w in windows]}) + "\n")
                              .encode())
            self.chan.shutdown_write()
            summary = self._line()
            self.chan.status_event.wait(STOP_TIMEOUT_S)
        except (OSError, EOFError, paramiko_errors()) as exc:
            raise LabError(f"{self.where}: stopping: {type(exc).__name__}: {exc}") from None
        finally:
            self.chan.close()
        if "errors" not in summary:
            raise LabError(f"{self.where}: {summary.get('error') or summary}")
        return summary

    def close(self) -> None:
        """Close the channel (the observer reads end of file and stops)."""
        self.chan.close()


def fetch_dir(control: Control, remote: str, local: Path, timeout_s: float = 300.0) -> None:
    """Copy the directory ``remote`` of the machine into ``local`` (created), then remove it
    there. Raises LabError naming the machine when tar fails there or the archive is bad."""
    name = control.machine.name
    local.mkdir(parents=True, exist_ok=True)
    try:
        _, out, err = control.client.exec_command(shlex.join(["tar", "-C", remote, "-cf", "-",
                                                              "."]), timeout=timeout_s)
        with tarfile.open(fileobj=out, mode="r|") as tar:
            tar.extractall(local, filter="data")
        status = out.channel.recv_exit_status()
    except (OSError, EOFError, tarfile.TarError, paramiko_errors()) as exc:
        raise LabError(f"machine {name}: copying {remote}: {type(exc).__name__}: {exc}"
                       ) from None
    if status != 0:
        raise LabError(f"machine {name}: tar -C {remote} exited {status}: "
                       f"{err.read().decode(errors='replace').strip()[-500:]}")
    control.check(["rm", "-rf", "--", remote])


def shift_pcap(src: Path, dst: Path, by_ns: int, rate: float = 0.0,
               ref_ns: int = 0) -> int:
    """Write ``src`` (a pcap, micro- or nanosecond, either byte order) to ``dst`` with every
    record's time stamp T moved by ``by_ns`` nanoseconds and, for a clock drifting at ``rate``
    (s per s) from the driver's time ``ref_ns`` (ns since the epoch) on, by
    -rate (T + by_ns - ref_ns) / (1 + rate) (orchestration.cluster.control.to_driver_s with
    by_ns = -offset before); rounded to the file's unit. Returns the records. Raises
    ValueError for a file that is not a pcap or ends inside a record."""
    data = src.read_bytes()
    if len(data) < 24:
        raise ValueError(f"{src}: too short for a pcap header")
    for order in ("<", ">"):
        (magic,) = struct.unpack(order + "I", data[:4])
        if magic in _MAGIC:
            break
    else:
        raise ValueError(f"{src}: not a pcap file (magic {data[:4].hex()})")
    per_s = _MAGIC[magic]
    unit_ns = 10**9 // per_s
    rec = struct.Struct(order + "IIII")
    out, pos, n = bytearray(data[:24]), 24, 0
    while pos < len(data):
        if pos + 16 > len(data):
            raise ValueError(f"{src}: cut record header at byte {pos}")
        sec, frac, incl, orig = rec.unpack_from(data, pos)
        t = sec * per_s + frac + round(by_ns / unit_ns)
        if rate:
            t -= round(rate * (t * unit_ns - ref_ns) / (1.0 + rate) / unit_ns)
        end = pos + 16 + incl
        if end > len(data):
            raise ValueError(f"{src}: cut record at byte {pos}")
        out += rec.pack(t // per_s, t % per_s, incl, orig)
        out += data[pos + 16:end]
        pos, n = end, n + 1
    dst.write_bytes(bytes(out))
    return n


@dataclass(frozen=True)
class Part:
    """One machine's copied observation: its directory here, the offset of its clock (s,
    machine - driver), its uncertainty (s) and the lab nodes it holds (not its proxies)."""

    machine: str
    dir: Path
    offset_s: float
    uncertainty_s: float
    nodes: frozenset[str]
    drift_rate: float = 0.0  # s per s, from ref_s on (control.drift_rate)
    ref_s: float = 0.0  # the driver's time of the offset's measurement (s since the epoch)


def _merge_captures(run_dir: Path, parts: Sequence[Part]) -> dict[str, Any] | None:
    interfaces, snaplen = [], None
    dst = run_dir / "captures"
    for p in parts:
        index_path = p.dir / "captures" / "index.json"
        if not index_path.exists():
            continue
        index = json.loads(index_path.read_text())
        snaplen = index["snaplen"]
        dst.mkdir(parents=True, exist_ok=True)
        by_ns = -round(p.offset_s * 1e9)
        for entry in index["interfaces"]:
            for rel in entry["files"]:
                name = Path(rel).name
                shift_pcap(p.dir / "captures" / name, dst / name, by_ns, p.drift_rate,
                           round(p.ref_s * 1e9))
            interfaces.append({**entry, "machine": p.machine, "clock_shift_s": by_ns / 1e9,
                               "clock_drift_ppm": p.drift_rate * 1e6,
                               "clock_uncertainty_s": p.uncertainty_s})
    if snaplen is None:
        return None
    index = {"snaplen": snaplen, "interfaces": interfaces}
    (dst / "index.json").write_text(json.dumps(index, indent=1))
    return index


def _merge_table(table: str, parts: Sequence[Part], out: Path) -> int:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    schema = pa.schema([(n, pa.string() if t == "string" else pa.type_for_alias(t))
                        for n, t in SCHEMAS[table]])
    tables = []
    for p in parts:
        path = p.dir / "counters" / f"{table}.parquet"
        if not path.exists():
            continue
        t = pq.read_table(path).cast(schema)
        t = t.filter(pc.is_in(t["node"], value_set=pa.array(sorted(p.nodes), pa.string())))
        shifted = pc.subtract(t["t_s"], p.offset_s)  # T - o_b, then the drift's part
        drift = pc.divide(pc.multiply(pc.subtract(shifted, p.ref_s), p.drift_rate),
                          1.0 + p.drift_rate)
        t = t.set_column(0, "t_s", pc.subtract(shifted, drift))
        tables.append(t)
    merged = pa.concat_tables(tables) if tables else schema.empty_table()
    merged = merged.sort_by("t_s")
    pq.write_table(merged, out)
    return merged.num_rows


def _driver_s(p: Part, t_s: float) -> float:
    """Machine time ``t_s`` of part ``p`` on the driver's clock (as its tables' rows)."""
    shifted = t_s - p.offset_s
    return shifted - p.drift_rate * (shifted - p.ref_s) / (1.0 + p.drift_rate)


def _merge_sampler(summaries: Mapping[str, Mapping[str, Any]],
                   parts: Mapping[str, Part]) -> dict[str, Any]:
    """One sampler.json for all machines: the worst interval figures, the sums of samples'
    rows, the first and last sample on the driver's clock, each machine's own under
    ``machines``."""
    vals = list(summaries.values())

    def worst(key: str) -> float | None:
        xs = [v[key] for v in vals if v.get(key) is not None]
        return max(xs) if xs else None

    firsts = [_driver_s(parts[m], v["t_first_s"]) for m, v in summaries.items()
              if v.get("t_first_s") is not None]
    lasts = [_driver_s(parts[m], v["t_last_s"]) for m, v in summaries.items()
             if v.get("t_last_s") is not None]
    rows: dict[str, int] = {}
    for v in vals:
        for k, n in (v.get("rows") or {}).items():
            rows[k] = rows.get(k, 0) + n
    errors = [f"machine {m}: {v['error']}" for m, v in summaries.items() if v.get("error")]
    return {"interval_s": worst("interval_s"),
            "samples": min((v.get("samples", 0) for v in vals), default=0),
            "interval_p50_s": worst("interval_p50_s"),
            "interval_p99_s": worst("interval_p99_s"),
            "interval_max_s": worst("interval_max_s"),
            "cpu_s": sum(v.get("cpu_s") or 0.0 for v in vals),
            "cpu_share_of_one_core": worst("cpu_share_of_one_core"),
            "t_first_s": min(firsts) if firsts else None,
            "t_last_s": max(lasts) if lasts else None,
            "namespaces": sum(v.get("namespaces", 0) for v in vals),
            "tcp_namespaces": sum(v.get("tcp_namespaces", 0) for v in vals),
            "rows": rows, "limit_reached": any(v.get("limit_reached") for v in vals),
            "error": "; ".join(errors) or None, "machines": dict(summaries)}


def merge_parts(run_dir: Path, parts: Sequence[Part]) -> dict[str, Any]:
    """Merge the machines' observations into ``run_dir``: every pcap of ``P.dir/captures``
    into ``run_dir/captures/`` with its packets' times moved by -offset (:func:`shift_pcap`)
    and one ``index.json`` (each interface with its ``machine``, ``clock_shift_s`` and
    ``clock_uncertainty_s``); the rows of each machine's ``counters/{qdisc,links,tcp}.parquet``
    of its own nodes (a cut link's proxy switch is on both machines and stands for nobody)
    with ``t_s`` - offset, into one table each, by time, and one ``sampler.json``. Returns
    ``{"capture": index or None, "counters": sampler.json or None}``."""
    index = _merge_captures(run_dir, parts)
    sampled = [p for p in parts if (p.dir / "counters" / "sampler.json").exists()]
    sampler = None
    if sampled:
        out = run_dir / "counters"
        out.mkdir(parents=True, exist_ok=True)
        for table in SCHEMAS:
            _merge_table(table, sampled, out / f"{table}.parquet")
        sampler = _merge_sampler(
            {p.machine: json.loads((p.dir / "counters" / "sampler.json").read_text())
             for p in sampled}, {p.machine: p for p in sampled})
        (out / "sampler.json").write_text(json.dumps(sampler, indent=1))
    return {"capture": index, "counters": sampler}
