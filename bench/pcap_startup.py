"""Benchmark: start-up of ``aitb pcap`` on a 3-packet capture against tshark, same run.

Target: ``aitb pcap`` on a small file must finish in under 0.3 s (it took 0.95 s,
tshark 0.5 s, nearly all of it start-up). The script writes a 3-packet classic pcap (a TCP
handshake, built with struct) and times, as whole child processes (wall clock, output to
/dev/null), interleaved so that machine load hits both alike:

* ``aitb pcap FILE`` (the console script beside this interpreter, else ``python -m
  orchestration.cli``; the table for people, its default);
* ``tshark -r FILE -q -z conv,tcp`` (tshark's per-flow table); ``tcpdump -r FILE`` if tshark
  is missing;
* the bare interpreter (``python -c pass``), the floor aitb cannot go below.

Prints each median (and min), the ratio aitb / peer and the load average. No root needed.

Usage: .venv/bin/python bench/pcap_startup.py [--repeats 21]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def small_pcap(path: Path) -> Path:
    """A 3-packet Ethernet pcap: SYN, SYN-ACK, ACK between 198.18.0.1 and 198.18.0.2."""
    def frame(src: int, dst: int, sport: int, dport: int, seq: int, ack: int, flags: int):
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 40, 1, 0x4000, 64, 6, 0,
                         bytes([198, 18, 0, src]), bytes([198, 18, 0, dst]))
        tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, ack, 5 << 4, flags, 64000, 0, 0)
        return b"\x02\0\0\0\0\x02\x02\0\0\0\0\x01\x08\x00" + ip + tcp
    frames = [frame(1, 2, 40000, 5201, 1000, 0, 0x02), frame(2, 1, 5201, 40000, 7000, 1001, 0x12),
              frame(1, 2, 40000, 5201, 1001, 7001, 0x10)]
    out = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    for i, f in enumerate(frames):
        out += struct.pack("<IIII", 1_764_500_000, i * 10_000, len(f), len(f)) + f
    path.write_bytes(out)
    return path


def wall_s(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                   check=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=21)
    args = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    script = Path(sys.executable).parent / "aitb"
    with tempfile.TemporaryDirectory() as tmp:
        pcap = str(small_pcap(Path(tmp) / "three.pcap"))
        aitb = ([str(script)] if script.exists()
                else [sys.executable, "-m", "orchestration.cli"]) + ["pcap", pcap]
        if shutil.which("tshark"):
            peer_name, peer = "tshark", ["tshark", "-r", pcap, "-q", "-z", "conv,tcp"]
        else:
            print("tshark is not installed: comparing with tcpdump -r")
            peer_name, peer = "tcpdump", ["tcpdump", "-r", pcap]
        cmds = {"aitb pcap": aitb, peer_name: peer, "python -c pass": [sys.executable, "-c",
                                                                        "pass"]}
        for argv in cmds.values():  # warm the page cache and numba's/pyc caches once
            wall_s(argv, env)
        times: dict[str, list[float]] = {k: [] for k in cmds}
        for _ in range(args.repeats):
            for name, argv in cmds.items():
                times[name].append(wall_s(argv, env))
    print(f"{args.repeats} runs each, interleaved; file: 3 packets")
    for name, argv in cmds.items():
        ts = times[name]
        print(f"  {name:16s} median {statistics.median(ts) * 1e3:7.1f} ms   "
              f"min {min(ts) * 1e3:7.1f} ms   ({' '.join(argv[:1] + argv[1:3])} ...)")
    ratio = statistics.median(times["aitb pcap"]) / statistics.median(times[peer_name])
    print(f"ratio aitb / {peer_name} (medians): {ratio:.2f}; target: aitb under 300 ms")
    print("load average (1, 5, 15 min):", " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
