"""Counter sampling of a running lab: qdisc statistics, interface counters and TCP_INFO of the
workload sockets, read through netlink at a fixed interval by a separate process and written
as Parquet (``counters/{qdisc,links,tcp}.parquet`` and ``counters/sampler.json`` of a run).

    sampler = CounterSampler(lab, run_dir / "counters", SamplerConfig(interval_s=0.01))
    sampler.start()          # returns after the first sample
    ...                      # traffic
    summary = sampler.stop() # one last sample, files written; sampler.json as a dict
"""

from testbed.counters.control import DEFAULT_INTERVAL_S, CounterSampler, SamplerConfig

__all__ = ["CounterSampler", "SamplerConfig", "DEFAULT_INTERVAL_S"]
