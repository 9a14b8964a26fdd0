"""One rank of torch.distributed all-reduces over the gloo backend, for a ``kind: app``
workload (examples/containers/gloo_allreduce.yaml; baked into the image that
bench/gloo_containers.py builds, at /opt/aitb/gloo_worker.py).

    gloo_worker.py --rank R --world W --master ADDR:PORT --size-bytes S --iterations N

After one warm-up all-reduce (pairs connected, buffers allocated) and a barrier, it times
``N`` all-reduces of ``S`` bytes (float32 ones), each after a barrier, stamping
``time.time()`` (the host clock all lab nodes share) before and after; prints one JSON line
``{"rank", "times": [[t0, t1], ...], "ok"}`` and exits 0 if the sum is right (a sum of ones
is exact in float32), 1 otherwise. gloo's default all-reduce is a ring (gloo/allreduce.cc,
see bench/gloo_yardstick.py).
"""

import argparse
import datetime
import json
import sys
import time

import torch
import torch.distributed as dist


def main():
    """Parse the arguments, run the all-reduces, print the times, exit 0 if the sum is right."""
    p = argparse.ArgumentParser()
    for name in ("rank", "world", "size-bytes", "iterations"):
        p.add_argument(f"--{name}", type=int, required=True)
    p.add_argument("--master", required=True)
    a = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{a.master}", rank=a.rank,
                            world_size=a.world, timeout=datetime.timedelta(seconds=120))
    x = torch.ones(a.size_bytes // 4, dtype=torch.float32)
    dist.all_reduce(x)  # warm-up
    times = []
    for _ in range(a.iterations):
        x.fill_(1.0)
        dist.barrier()
        t0 = time.time()
        dist.all_reduce(x)
        times.append((t0, time.time()))
    dist.barrier()
    ok = float(x[0]) == float(x[-1]) == a.world
    print(json.dumps({"rank": a.rank, "times": times, "ok": ok}), flush=True)
    dist.destroy_process_group()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
