"""Namespace creation: pyroute2's netns.create (a forked child per namespace) against
testbed.ns.netns.create_many (one helper thread: unshare + bind mount + socket). Needs root.

    .venv/bin/python bench/netns_create.py --count 100
"""

from __future__ import annotations

import argparse
import os
import secrets
import time

from pyroute2 import netns as pr_netns

from testbed.ns import netns


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=100)
    n = ap.parse_args().count
    tag = secrets.token_hex(3)
    names = [f"aitb-bench{tag}-p{i}" for i in range(n)]
    t = time.perf_counter()
    try:
        for name in names:
            pr_netns.create(name)
        fork_ms = (time.perf_counter() - t) / n * 1e3
    finally:
        for name in names:
            netns.remove(name)
    names = [f"aitb-bench{tag}-t{i}" for i in range(n)]
    made: dict = {}
    t = time.perf_counter()
    try:
        netns.create_many(names, made)
        thread_ms = (time.perf_counter() - t) / n * 1e3
    finally:
        for fd, sock in made.values():
            sock.close()
            os.close(fd)
        for name in names:
            netns.remove(name)
    print(f"{n} namespaces: pyroute2 netns.create {fork_ms:.2f} ms each, "
          f"thread unshare+mount+socket {thread_ms:.2f} ms each ({fork_ms / thread_ms:.1f}x)")


if __name__ == "__main__":
    main()
