"""How fast Python starts in the stock-kernel VM (boot, imports, an 8-host lab), root only.

Run: .venv/bin/python bench/vm_python.py                       (with the Python image)
     AITB_VM_PYTHON_IMAGE=0 .venv/bin/python bench/vm_python.py  (reading Python over 9p)
Boots the VM twice: once for `true` (boot cost), once for this file with --guest, which times
(wall clock, inside the guest) `python -c pass`, `import orchestration.cli.app`, the agent
proxy imports,
then builds 8 namespaces joined by veths on a bridge (pyroute2) and starts one Python process
per namespace importing the agent proxy, in parallel: the time until all have imported.
The agent proxy is `import pyroute2, pydantic, typer, rich` (traffic_gen has no agent yet).
Lab addresses: 198.18.0.0/24, nothing leaves the guest. Target: the 8-process start well
under a minute under TCG.
"""

from __future__ import annotations

import argparse
import os
import resource
import secrets
import subprocess
import sys
import time

AGENT_PROXY = "import pyroute2, pydantic, typer, rich"
HOSTS = 8


def _timed(argv: list[str], **kw: object) -> float:
    start = time.monotonic()
    subprocess.run(argv, check=True, **kw)  # type: ignore[call-overload]
    return time.monotonic() - start


def _lab(tag: str) -> list[str]:
    """A bridge namespace and HOSTS host namespaces, veth-joined; return host ns names."""
    from pyroute2 import NetNS

    sw = NetNS(f"{tag}-sw", flags=os.O_CREAT | os.O_EXCL)
    sw.link("add", ifname="br0", kind="bridge")
    sw.link("set", index=sw.link_lookup(ifname="br0")[0], state="up")
    names = []
    for i in range(HOSTS):
        name = f"{tag}-h{i}"
        host = NetNS(name, flags=os.O_CREAT | os.O_EXCL)
        sw.link("add", ifname=f"p{i}", kind="veth", peer={"ifname": "eth0", "net_ns_fd": name})
        port = sw.link_lookup(ifname=f"p{i}")[0]
        sw.link("set", index=port, master=sw.link_lookup(ifname="br0")[0], state="up")
        eth = host.link_lookup(ifname="eth0")[0]
        host.addr("add", index=eth, address=f"198.18.0.{i + 1}", prefixlen=24)
        host.link("set", index=eth, state="up")
        host.close()
        names.append(name)
    sw.close()
    return names


def _parallel_imports(names: list[str]) -> float:
    from pyroute2 import netns

    start = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-c", AGENT_PROXY],
                              preexec_fn=lambda n=n: netns.setns(n)) for n in names]
    codes = [p.wait() for p in procs]
    if any(codes):
        raise SystemExit(f"agent proxy imports failed: exit codes {codes}")
    return time.monotonic() - start


def guest() -> None:
    """Inside the VM: print one `name seconds` line per measurement."""
    py = sys.executable
    for name, argv in [("python -c pass", [py, "-c", "pass"]),
                       ("import orchestration.cli.app", [py, "-c", "import orchestration.cli.app"]),
                       ("import orchestration.cli.app (again)",
                        [py, "-c", "import orchestration.cli.app"]),
                       (AGENT_PROXY, [py, "-c", AGENT_PROXY])]:
        print(f"{name}: {_timed(argv):.1f} s", flush=True)
    from pyroute2 import netns

    tag = f"aitb-bench-{secrets.token_hex(3)}"
    start = time.monotonic()
    try:
        names = _lab(tag)
        print(f"8 namespaces + veths + bridge: {time.monotonic() - start:.1f} s", flush=True)
        print(f"8 parallel agent-proxy imports: {_parallel_imports(names):.1f} s", flush=True)
    finally:
        for name in netns.listnetns():
            if name.startswith(tag):
                netns.remove(name)


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def host() -> None:
    """On the host: boot for `true`, then boot for the guest measurements; print both, with
    the host CPU seconds each boot took (vng and qemu): the machine is shared, and wall times
    in the guest stretch with the host's load, CPU seconds much less."""
    from testbed.vm.kernel import CHECKOUT
    from testbed.vm.run import run_in_vm

    start, cpu = time.monotonic(), _children_cpu_s()
    result = run_in_vm(["true"])
    print(f"boot + true ({result.accel}): {time.monotonic() - start:.1f} s, "
          f"{_children_cpu_s() - cpu:.1f} s host CPU", flush=True)
    start, cpu = time.monotonic(), _children_cpu_s()
    result = run_in_vm([sys.executable, str(CHECKOUT / "bench" / "vm_python.py"), "--guest"],
                       cwd=CHECKOUT, echo=True)
    print(f"boot + guest measurements: {time.monotonic() - start:.1f} s, "
          f"{_children_cpu_s() - cpu:.1f} s host CPU (exit {result.returncode}); "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--guest", action="store_true", help="measure (inside the VM)")
    guest() if parser.parse_args().guest else host()
