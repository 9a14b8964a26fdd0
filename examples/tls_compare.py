"""Print plain against TLS for two runs of examples/tls_allreduce.yaml (analysis.encryption):

    sudo .venv/bin/aitb run examples/tls_allreduce.yaml                  # TLS_RUN
    sed 's/encryption: tls/encryption: none/' examples/tls_allreduce.yaml > /tmp/plain.yaml
    sudo .venv/bin/aitb run /tmp/plain.yaml                              # PLAIN_RUN
    .venv/bin/python examples/tls_compare.py PLAIN_RUN TLS_RUN
"""

from __future__ import annotations

import sys
from pathlib import Path

from analysis.encryption import compare


def table(plain: Path, encrypted: Path) -> str:
    """A Markdown table of :func:`analysis.encryption.compare` (ms, CPU s per 1e9 bytes)."""
    c = compare(plain, encrypted)
    rows = ["| run | cipher | FCT mean ms | FCT p50 ms | CCT mean ms | CPU s/GB | handshake ms |",
            "| --- | --- | --- | --- | --- | --- | --- |"]

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v * 1e3:.1f}"
    for name in ("plain", "encrypted"):
        s = c[name]
        rows.append(f"| {name} | {', '.join(s['ciphers']) or 'none'} | {ms(s['fct_s_mean'])} | "
                    f"{ms(s['fct_s_p50'])} | {ms(s['cct_s_mean'])} | "
                    f"{s['cpu_s_per_gb']:.2f} | {ms(s['handshake_s_mean'])} |")
    r = c["ratio"]
    rows.append(f"| TLS / plain | | {r['fct_s_mean']:.2f} | {r['fct_s_p50']:.2f} | "
                f"{r['cct_s_mean']:.2f} | {r['cpu_s_per_gb']:.2f} | |")
    return "\n".join(rows)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: tls_compare.py PLAIN_RUN TLS_RUN")
    print(table(Path(sys.argv[1]), Path(sys.argv[2])))
