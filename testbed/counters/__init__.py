"""Counter sampling of a running lab: qdisc statistics, interface counters and TCP_INFO of the
workload sockets, read through netlink at a fixed interval by a separate process and written
as Parquet (``counters/{qdisc,links,tcp}.parquet`` and ``counters/sampler.json`` of a run).

    sampler = CounterSampler(lab, run_dir / "counters", SamplerConfig(interval_s=0.01))
    sampler.start()          # returns after the first sample
    ...                      # traffic
    summary = sampler.stop() # one last sample, files written; sampler.json as a dict

Also here, the other measurements of a run: :mod:`.snapshot` (one before/after snapshot of every
qdisc's and interface's counters), :mod:`.cpuload` (the host's CPU load during a run) and
:mod:`.rttprobe` (the RTT of links by ICMP echo from raw sockets in the nodes' namespaces).
"""

from testbed.counters.control import DEFAULT_INTERVAL_S, CounterSampler, SamplerConfig

__all__ = ["CounterSampler", "SamplerConfig", "DEFAULT_INTERVAL_S"]
