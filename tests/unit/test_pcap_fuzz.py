"""Damaged input never crashes either engine, and both still agree.

Each public capture is corrupted in seeded, reproducible ways (bytes overwritten at random
places, the file cut at a random length) and analysed by the reference and the compiled
engine. The compiled kernel does not check indices, so this is also its out-of-bounds test.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from analysis.tcpflows import analyse_capture

DATA = Path(__file__).resolve().parents[1] / "data" / "pcaps"
CLASSIC = sorted(DATA.glob("*.pcap"))
MUTANTS = 12


def _mutants(data: bytes, seed: int):
    rng = random.Random(seed)
    for i in range(MUTANTS):
        out = bytearray(data)
        if i % 3 == 2:
            yield bytes(out[:rng.randrange(24, len(out) + 1)])
            continue
        for _ in range(rng.choice((1, 4, 32))):
            pos = rng.randrange(24, len(out))
            out[pos] = rng.randrange(256) if i % 3 else 0xFF
        yield bytes(out)


@pytest.mark.parametrize("path", CLASSIC, ids=[p.name for p in CLASSIC])
def test_corrupted_captures_never_crash_and_engines_agree(tmp_path, path):
    for n, data in enumerate(_mutants(path.read_bytes(), seed=len(path.name))):
        bad = tmp_path / f"{n}.pcap"
        bad.write_bytes(data)
        ref = analyse_capture(bad, engine="reference").to_dict()
        fast = analyse_capture(bad, engine="compiled").to_dict()
        assert fast == ref, f"mutant {n} of {path.name}"


def test_corrupted_pcapng_never_crashes_and_engines_agree(tmp_path):
    data = (DATA / "pcapng_126idb_vlan_ipv6_tcp.pcapng").read_bytes()
    for n, bad_bytes in enumerate(_mutants(data, seed=1)):
        bad = tmp_path / f"{n}.pcapng"
        bad.write_bytes(bad_bytes)
        ref = analyse_capture(bad, engine="reference").to_dict()
        assert ref["packets"] <= 17
        assert analyse_capture(bad, engine="compiled").to_dict() == ref, f"mutant {n}"
